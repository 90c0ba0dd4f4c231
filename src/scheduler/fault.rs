//! Fault injection, for tests only: a panic, a grammar error, or a failed or slow rebuild at
//! a chosen stage of a chosen step, so the fault path is exercised with a real process (`kiln serve
//! --inject-fault STAGE@STEP`, hidden). An engine without injections checks one `Option`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Where a fault is injected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FaultStage {
    /// Inside the forward pass (on the worker thread, under the grammar mask helper).
    Forward,
    /// Inside a sampling job (on the worker team when the batch is large enough).
    Sample,
    /// In output processing, before a token is emitted.
    Emit,
    /// In the grammar commit of a constrained sequence's token.
    Commit,
    /// Not a panic: a constrained sequence's grammar reports an error (as llguidance does when
    /// it fails), which fails that request alone.
    Grammar,
    /// The worker's rebuild after a fault fails (it stays down: `/health` turns 503).
    Rebuild,
    /// The worker's rebuild after a fault takes a second longer (so a test sees `/ready`
    /// answer 503 while it rebuilds).
    SlowRebuild,
}

impl FaultStage {
    pub const ALL: [FaultStage; 7] = [
        FaultStage::Forward,
        FaultStage::Sample,
        FaultStage::Emit,
        FaultStage::Commit,
        FaultStage::Grammar,
        FaultStage::Rebuild,
        FaultStage::SlowRebuild,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            FaultStage::Forward => "forward",
            FaultStage::Sample => "sample",
            FaultStage::Emit => "emit",
            FaultStage::Commit => "commit",
            FaultStage::Grammar => "grammar",
            FaultStage::Rebuild => "rebuild",
            FaultStage::SlowRebuild => "slow-rebuild",
        }
    }
}

/// One injection: the first time `stage` is reached in step `step` or later (steps are
/// counted per worker from 1, across rebuilds; for the rebuild stages, `step` counts
/// rebuilds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FaultInjection {
    pub stage: FaultStage,
    pub step: u64,
}

impl std::str::FromStr for FaultInjection {
    type Err = String;

    /// `STAGE@STEP`, e.g. `sample@5`.
    fn from_str(s: &str) -> Result<FaultInjection, String> {
        let (stage, step) = s
            .split_once('@')
            .ok_or_else(|| format!("{s:?} is not STAGE@STEP"))?;
        let stage = FaultStage::ALL
            .into_iter()
            .find(|f| f.as_str() == stage)
            .ok_or_else(|| {
                let names: Vec<_> = FaultStage::ALL.iter().map(|f| f.as_str()).collect();
                format!("unknown stage {stage:?} (one of {})", names.join(", "))
            })?;
        let step = step
            .parse::<u64>()
            .ok()
            .filter(|&n| n >= 1)
            .ok_or_else(|| format!("{step:?} is not a step number from 1"))?;
        Ok(FaultInjection { stage, step })
    }
}

struct Armed {
    at: FaultInjection,
    fired: AtomicBool,
}

/// A worker's injections, shared by its thread, its team and its output processing.
#[derive(Clone, Default)]
pub(crate) struct Faults {
    armed: Option<Arc<[Armed]>>,
    /// The current step (or, while rebuilding, the rebuild count).
    step: Option<Arc<(AtomicU64, AtomicU64)>>,
}

impl Faults {
    pub fn new(plan: &[FaultInjection]) -> Faults {
        if plan.is_empty() {
            return Faults::default();
        }
        let armed: Vec<Armed> = plan
            .iter()
            .map(|&at| Armed {
                at,
                fired: AtomicBool::new(false),
            })
            .collect();
        Faults {
            armed: Some(armed.into()),
            step: Some(Arc::new((AtomicU64::new(0), AtomicU64::new(0)))),
        }
    }

    /// Step `n` starts.
    pub fn set_step(&self, n: u64) {
        if let Some(s) = &self.step {
            s.0.store(n, Ordering::Relaxed);
        }
    }

    /// A rebuild starts: sleeps a second when a slow rebuild is due; true when an injection
    /// says it must fail.
    pub fn rebuild_fails(&self) -> bool {
        let Some(s) = &self.step else {
            return false;
        };
        let n = s.1.fetch_add(1, Ordering::Relaxed) + 1;
        if self.fire(FaultStage::SlowRebuild, n) {
            std::thread::sleep(std::time::Duration::from_secs(1));
        }
        self.fire(FaultStage::Rebuild, n)
    }

    /// True (once) when an injected grammar error is due.
    pub fn grammar_fails(&self) -> bool {
        match &self.step {
            Some(s) => self.fire(FaultStage::Grammar, s.0.load(Ordering::Relaxed)),
            None => false,
        }
    }

    /// Panics when an injection for `stage` is due.
    pub fn check(&self, stage: FaultStage) {
        let Some(s) = &self.step else {
            return;
        };
        if self.fire(stage, s.0.load(Ordering::Relaxed)) {
            panic!("injected engine fault at stage {}", stage.as_str());
        }
    }

    fn fire(&self, stage: FaultStage, now: u64) -> bool {
        self.armed.iter().flat_map(|a| a.iter()).any(|a| {
            a.at.stage == stage && now >= a.at.step && !a.fired.swap(true, Ordering::AcqRel)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_fires_once_at_or_after_its_step() {
        let f: FaultInjection = "sample@3".parse().unwrap();
        assert_eq!(f.stage, FaultStage::Sample);
        assert!("sample".parse::<FaultInjection>().is_err());
        assert!("nope@3".parse::<FaultInjection>().is_err());
        assert!("emit@0".parse::<FaultInjection>().is_err());
        let faults = Faults::new(&[f, "rebuild@2".parse().unwrap()]);
        faults.set_step(2);
        faults.check(FaultStage::Sample);
        faults.check(FaultStage::Emit);
        faults.set_step(4);
        assert!(std::panic::catch_unwind(|| faults.check(FaultStage::Sample)).is_err());
        faults.check(FaultStage::Sample);
        assert!(!faults.rebuild_fails());
        assert!(faults.rebuild_fails());
        assert!(!faults.rebuild_fails());
        Faults::default().check(FaultStage::Forward);
    }
}
