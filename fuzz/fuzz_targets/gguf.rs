//! Fuzzes the GGUF header parser and the model description: any input must give `Ok` or
//! `Err`, never a panic, an abort, an out-of-memory or an out-of-bounds read; whatever
//! parses must have every tensor view inside the input.
#![no_main]

use kiln::gguf::GgufFile;
use kiln::engine::hparams::HParams;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(f) = GgufFile::from_bytes(data.to_vec()) {
        for t in f.tensors() {
            assert_eq!(f.tensor_bytes(t).len() as u64, t.n_bytes);
        }
        let _ = HParams::from_gguf(&f);
    }
});
