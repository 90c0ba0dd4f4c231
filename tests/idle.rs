//! An idle server costs nothing: after a burst of requests ends, the process (engine workers,
//! their worker teams) uses under 2% of one core over the next 2 seconds. Its own binary, so
//! no other test's threads share the process while it measures.

use kiln::config::{Config, KvBudget};
use kiln::scheduler::setup::start;
use kiln::scheduler::{Event, GenerationRequest, NoopObserver};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// CPU time of every thread of this process so far (`/proc/self/task/*/schedstat`, ns).
fn process_cpu() -> Duration {
    let mut ns = 0u64;
    for entry in std::fs::read_dir("/proc/self/task").expect("/proc/self/task") {
        let path = entry.expect("task entry").path().join("schedstat");
        if let Ok(text) = std::fs::read_to_string(path) {
            ns += text
                .split_whitespace()
                .next()
                .and_then(|f| f.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    Duration::from_nanos(ns)
}

#[test]
fn idle_engine_burns_no_cpu_after_a_burst() {
    let model =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(
        model.is_file(),
        "default model missing: run scripts/fetch-model.sh (make test does)"
    );
    let cfg = Config {
        model_path: model,
        threads: 2,
        kv_cache: KvBudget::Positions(4096),
        ..Config::default()
    };
    let l = start(&cfg, None, Arc::new(NoopObserver)).expect("engine starts");
    let streams: Vec<_> = (0..8)
        .map(|i| {
            let mut r = GenerationRequest::new(vec![1, 9690, 198, 100 + i], 16);
            r.params.temperature = 0.0;
            l.engine.submit(r).expect("accepted")
        })
        .collect();
    for mut s in streams {
        while let Some(ev) = s.blocking_recv() {
            if matches!(ev, Event::Done { .. } | Event::Error { .. }) {
                break;
            }
        }
    }
    let busy = process_cpu();
    assert!(
        busy > Duration::from_millis(1),
        "the burst ran on this process's threads"
    );
    let t0 = Instant::now();
    let before = process_cpu();
    std::thread::sleep(Duration::from_secs(2));
    let used = process_cpu() - before;
    let share = used.as_secs_f64() / t0.elapsed().as_secs_f64();
    assert!(
        share < 0.02,
        "idle process used {:.1}% of a core ({used:?} over {:?})",
        share * 100.0,
        t0.elapsed()
    );
    l.engine.shutdown();
}
