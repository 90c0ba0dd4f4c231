//! Paths to the reference data and the default model. A missing file is a test failure with
//! the command that provides it, never a silent skip.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// The repository root (where Cargo.toml is).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The reference data directory: `$KILN_SHARED`, default `../shared` beside the repository.
pub fn shared_dir() -> PathBuf {
    let dir = match std::env::var_os("KILN_SHARED") {
        Some(d) => PathBuf::from(d),
        None => repo_root().join("../shared"),
    };
    assert!(
        dir.is_dir(),
        "reference data directory {} is missing: set KILN_SHARED or put shared/ beside the repo",
        dir.display()
    );
    dir
}

/// A file under the reference data directory; panics with a clear message if it is missing.
pub fn shared_file(rel: &str) -> PathBuf {
    let p = shared_dir().join(rel);
    assert!(p.exists(), "reference file {} is missing", p.display());
    p
}

/// The default model; panics telling how to fetch it when absent.
pub fn default_model() -> PathBuf {
    let p = match std::env::var_os("KILN_MODEL") {
        Some(m) => PathBuf::from(m),
        None => repo_root().join("models/SmolLM2-135M-Instruct.Q4_1.gguf"),
    };
    assert!(
        p.is_file(),
        "default model {} is missing: run `scripts/fetch-model.sh` (make test does)",
        p.display()
    );
    p
}

/// Reads a file to string, failing the test with its path.
pub fn read_to_string(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("cannot read {}: {e}", p.display()))
}
