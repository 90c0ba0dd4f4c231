//! The engine's one rayon thread pool.
//!
//! Every parallel region of the forward pass runs on this pool (never on rayon's global pool,
//! never nested): matmuls split their output rows over it, attention splits its tokens.
//! Its size defaults to the number of physical cores (hyper-threads share the vector units
//! the kernels saturate, so they add contention rather than speed).

use crate::engine::error::EngineError;

/// The pool plus its size.
pub struct Pool {
    pool: rayon::ThreadPool,
    threads: usize,
}

impl Pool {
    /// A pool of `threads` workers; 0 means one per physical core.
    pub fn new(threads: usize) -> Result<Pool, EngineError> {
        let threads = if threads == 0 {
            physical_cores()
        } else {
            threads
        };
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("kiln-engine-{i}"))
            .build()
            .map_err(|e| EngineError::Pool(e.to_string()))?;
        Ok(Pool { pool, threads })
    }

    /// Number of worker threads.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Runs `f` on the pool (directly when already on one of its workers, so a caller that
    /// wraps many steps in one `install` injects no jobs and allocates nothing per step).
    pub fn install<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        self.pool.install(f)
    }
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("threads", &self.threads)
            .finish()
    }
}

/// Number of physical cores: distinct (physical id, core id) pairs in /proc/cpuinfo on Linux,
/// else the available parallelism (which counts hyper-threads), at least 1.
pub fn physical_cores() -> usize {
    let logical = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    match std::fs::read_to_string("/proc/cpuinfo") {
        Ok(text) => match count_physical_cores(&text) {
            // Never more than the process may use (cgroup / affinity limits).
            Some(n) => n.clamp(1, logical),
            None => logical,
        },
        Err(_) => logical,
    }
}

/// Distinct (physical id, core id) pairs in cpuinfo text; None when the fields are absent.
fn count_physical_cores(cpuinfo: &str) -> Option<usize> {
    let mut pairs: Vec<(u32, u32)> = Vec::new();
    let mut phys: Option<u32> = None;
    let mut core: Option<u32> = None;
    let mut flush = |phys: &mut Option<u32>, core: &mut Option<u32>| {
        if let (Some(p), Some(c)) = (*phys, *core) {
            if !pairs.contains(&(p, c)) {
                pairs.push((p, c));
            }
        }
        *phys = None;
        *core = None;
    };
    for line in cpuinfo.lines() {
        if line.trim().is_empty() {
            flush(&mut phys, &mut core);
            continue;
        }
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim().parse::<u32>().ok();
        match key.trim() {
            "physical id" => phys = value,
            "core id" => core = value,
            _ => {}
        }
    }
    flush(&mut phys, &mut core);
    (!pairs.is_empty()).then_some(pairs.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_distinct_cores_not_siblings() {
        let text = "processor : 0\nphysical id : 0\ncore id : 0\n\n\
                    processor : 1\nphysical id : 0\ncore id : 0\n\n\
                    processor : 2\nphysical id : 0\ncore id : 1\n\n\
                    processor : 3\nphysical id : 1\ncore id : 0\n";
        assert_eq!(count_physical_cores(text), Some(3));
        assert_eq!(count_physical_cores("processor : 0\n"), None);
    }

    #[test]
    fn pool_has_requested_size() {
        let p = Pool::new(2).unwrap();
        assert_eq!(p.threads(), 2);
        assert_eq!(p.install(rayon::current_num_threads), 2);
        assert!(physical_cores() >= 1);
    }
}
