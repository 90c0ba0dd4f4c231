//! Prints per-tensor stats of kiln's forward pass for ids 504 2365 6354 16438 (llama.cpp's
//! eval-callback "The quick brown fox"), to compare layer by layer. Needs `--features trace`.
//! `trace_fox [MODEL.gguf [ID,ID,...]]` traces another file or ids; with KILN_DUMP_DIR set each
//! activation is also written there as raw f32 (`NAME-LAYER.f32`), to diff against
//! `scripts/reference/ref_logits.c --dump 1` with REF_DUMP_DIR.
use kiln::engine::runner::Runner;
use kiln::engine::{BatchLimits, LogitsWanted, Model};

fn main() {
    // Optional arguments: a model file and comma-separated ids (default: the fox on SmolLM2).
    let args: Vec<String> = std::env::args().skip(1).collect();
    let path = args
        .first()
        .cloned()
        .unwrap_or_else(|| "models/SmolLM2-135M-Instruct.Q4_1.gguf".into());
    let ids: Vec<u32> = match args.get(1) {
        Some(s) => s
            .split(',')
            .map(|x| x.trim().parse().expect("id"))
            .collect(),
        None => vec![504, 2365, 6354, 16438],
    };
    let mut model = Model::load(&path, 2).expect("load");
    model.set_trace_hook(Some(Box::new(|name, layer, rows| {
        let n = 4usize;
        let w = rows.len() / n.max(1);
        let sum: f64 = rows.iter().map(|&x| f64::from(x)).sum();
        let lname = match layer {
            Some(l) => format!("{name}-{l}"),
            None => name.to_string(),
        };
        if let Some(dir) = std::env::var_os("KILN_DUMP_DIR") {
            let bytes: Vec<u8> = rows.iter().flat_map(|x| x.to_le_bytes()).collect();
            let _ = std::fs::write(
                std::path::Path::new(&dir).join(format!("{lname}.f32")),
                bytes,
            );
        }
        let s32: f32 = rows.iter().fold(0.0f32, |a, &x| a + x);
        let mut s = format!("{lname} sum={sum:.6} s32={s32:.6}");
        if rows.len() % n == 0 && w > 6 {
            for r in rows.chunks(w) {
                s += &format!(
                    " | {:.4} {:.4} {:.4} .. {:.4} {:.4} {:.4}",
                    r[0],
                    r[1],
                    r[2],
                    r[w - 3],
                    r[w - 2],
                    r[w - 1]
                );
            }
        }
        println!("{s}");
    })));
    let limits = BatchLimits {
        max_tokens: 64,
        max_seqs: 1,
        max_logit_rows: 64,
    };
    let mut runner = Runner::new(&model, limits, 256).expect("runner");
    let mut table = runner.new_seq();
    runner
        .feed(&mut table, 0, &ids, 64, LogitsWanted::Last, |_, row| {
            let mut idx: Vec<usize> = (0..row.len()).collect();
            idx.sort_by(|&a, &b| row[b].total_cmp(&row[a]));
            for &i in &idx[..5] {
                println!("top {i} {:.6}", row[i]);
            }
        })
        .expect("feed");
}
