//! The default model with its KV cache in Q8_0 (`engine.kv_type = "q8_0"`): as faithful to
//! llama.cpp's f16 golden outputs as llama.cpp's own Q8_0 cache (`-ctk q8_0 -ctv q8_0`) is.
//!
//! Why that bar and not the f16 one: quantizing K and V moves llama.cpp's own outputs past the
//! engine issue's f16 bars (teacher-forced over the golden tokens: mean |Δ logprob| 0.051, worst
//! 1.70, top-1 agreement 624/641; its free-running greedy outputs leave the f16 ones on 14 of
//! the 24 cases), so no Q8_0 cache holds them. llama.cpp's Q8_0 figures are computed here from
//! tests/data/golden_q8_0_kv.json (its teacher-forced top-8 log-probabilities over the f16
//! golden outputs, recorded by scripts/reference/regen_q8_kv_golden.py); kiln's Q8_0 run must
//! stay within them: mean deviation at most 1.25x llama.cpp's, worst at most llama.cpp's, top-1
//! agreement at most 2 points below llama.cpp's. A wrong scale or layout in the Q8_0 path moves
//! the figures by orders of magnitude, not by these margins.
//!
//! The two caches round differently where it does not change the storage: llama.cpp quantizes
//! the query to Q8_0 for an integer K·q and sums V in f32; kiln widens K and V back to f16 and
//! runs its f16 attention unchanged.
//!
//! (Named without "golden" so the ISA matrix's golden legs do not run it again: the Q8_0 tile
//! conversion's AVX2 kernel is held bit-identical to its scalar twin in the engine's tests.)

use crate::common;
use crate::golden;
use kiln::engine::kv_cache::KvType;
use serde_json::Value;

/// llama.cpp's Q8_0-cache figures against its f16 golden outputs.
struct LlamaQ8 {
    mean: f64,
    max: f64,
    agree: usize,
    confident: usize,
}

fn llama_q8() -> LlamaQ8 {
    let golden = common::shared_file("golden/smollm2-135m-instruct-q4_1/greedy.json");
    let golden: Value = serde_json::from_str(&common::read_to_string(&golden)).expect("golden");
    let path = common::repo_root().join("tests/data/golden_q8_0_kv.json");
    let q8: Value = serde_json::from_str(&common::read_to_string(&path)).expect("q8 reference");
    let (gc, qc) = (
        golden["cases"].as_array().expect("cases"),
        q8["cases"].as_array().expect("cases"),
    );
    assert_eq!((gc.len(), qc.len()), (24, 24), "cases");
    let (mut n, mut sum, mut max, mut agree, mut confident) = (0usize, 0f64, 0f64, 0, 0);
    for (g, q) in gc.iter().zip(qc) {
        let steps = g["steps"].as_array().expect("steps");
        let tops = q["steps"].as_array().expect("steps");
        assert_eq!(steps.len(), tops.len(), "{}: steps", g["name"]);
        for (st, top) in steps.iter().zip(tops) {
            let top: Vec<(u64, f64)> = top
                .as_array()
                .expect("top")
                .iter()
                .map(|p| (p[0].as_u64().expect("id"), p[1].as_f64().expect("lp")))
                .collect();
            let id = st["id"].as_u64().expect("id");
            if let Some(&(_, lp)) = top.iter().find(|p| p.0 == id) {
                let dev = (lp - st["logprob"].as_f64().expect("logprob")).abs();
                n += 1;
                sum += dev;
                max = max.max(dev);
            }
            let g_top = st["top"].as_array().expect("top");
            let lp = |i: usize| g_top[i]["logprob"].as_f64().expect("logprob");
            if lp(0) - lp(1) >= 0.05 {
                confident += 1;
                agree += usize::from(top[0].0 == g_top[0]["id"].as_u64().expect("id"));
            }
        }
    }
    LlamaQ8 {
        mean: sum / n.max(1) as f64,
        max,
        agree,
        confident,
    }
}

#[test]
fn q8_0_cache_is_as_faithful_as_llama_cpps() {
    let l = llama_q8();
    let k = golden::run(KvType::Q8_0);
    let (l_rate, k_rate) = (
        l.agree as f64 / l.confident as f64,
        k.agree as f64 / k.confident as f64,
    );
    println!(
        "golden q8_0 KV against the f16 reference: kiln mean {:.4} max {:.4} top-1 {}/{} greedy {}/24; \
         llama.cpp's own q8_0 cache: mean {:.4} max {:.4} top-1 {}/{}",
        k.mean_dev,
        k.max_dev,
        k.agree,
        k.confident,
        24 - k.missed.len(),
        l.mean,
        l.max,
        l.agree,
        l.confident
    );
    assert_eq!(k.n_steps, 648, "comparable teacher-forced steps");
    assert!(
        k.mean_dev <= 1.25 * l.mean,
        "mean logprob deviation {} above 1.25x llama.cpp's q8_0 cache's {}",
        k.mean_dev,
        l.mean
    );
    assert!(
        f64::from(k.max_dev) <= l.max,
        "worst deviation {} ({}) above llama.cpp's q8_0 cache's {}",
        k.max_dev,
        k.worst,
        l.max
    );
    assert!(
        k_rate >= l_rate - 0.02,
        "top-1 agreement {k_rate:.3} more than 2 points below llama.cpp's q8_0 cache's {l_rate:.3}: {:?}",
        k.disagreements
    );
}
