//! The memory budget's decisions, as pure functions of a snapshot of the loaded models and a
//! clock (tested with made-up instants, never sleeps): which idle models to unload so another
//! fits, and which have been idle past the keep-alive.

use std::time::{Duration, Instant};

/// A model holding memory: loaded, or being loaded (then busy, with its estimate).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resident {
    /// The model's index in the registry.
    pub index: usize,
    /// Weights plus KV cache.
    pub bytes: u64,
    /// Requests in flight on it, or being loaded: never unloaded.
    pub busy: bool,
    pub last_used: Instant,
}

/// What loading a model of `need` bytes takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fit {
    /// It fits now.
    Fits,
    /// It fits once these idle models (least recently used first) are unloaded.
    Evict(Vec<usize>),
    /// Only busy models stand in the way: wait until some are idle.
    Wait,
    /// It is larger than the whole budget.
    Never,
}

/// How to fit `need` more bytes under `budget` (None: no limit) beside `resident`: unload the
/// least recently used idle models, as few as it takes (requests in flight are never cut).
pub fn plan_load(budget: Option<u64>, need: u64, resident: &[Resident]) -> Fit {
    let Some(budget) = budget else {
        return Fit::Fits;
    };
    if need > budget {
        return Fit::Never;
    }
    let used: u64 = resident.iter().map(|r| r.bytes).sum();
    let mut over = (used + need).saturating_sub(budget);
    if over == 0 {
        return Fit::Fits;
    }
    let mut idle: Vec<&Resident> = resident.iter().filter(|r| !r.busy).collect();
    idle.sort_by_key(|r| (r.last_used, r.index));
    let mut evict = Vec::new();
    for r in idle {
        evict.push(r.index);
        over = over.saturating_sub(r.bytes);
        if over == 0 {
            return Fit::Evict(evict);
        }
    }
    Fit::Wait
}

/// The idle models unused for at least `keep_alive` at `now` (None: models stay loaded).
pub fn idle_expired(
    keep_alive: Option<Duration>,
    now: Instant,
    resident: &[Resident],
) -> Vec<usize> {
    let Some(keep) = keep_alive else {
        return Vec::new();
    };
    resident
        .iter()
        .filter(|r| !r.busy && now.saturating_duration_since(r.last_used) >= keep)
        .map(|r| r.index)
        .collect()
}

/// When the next model becomes due for an idle unload (None: none can be while they are
/// busy or without a keep-alive).
pub fn next_expiry(keep_alive: Option<Duration>, resident: &[Resident]) -> Option<Instant> {
    let keep = keep_alive?;
    resident
        .iter()
        .filter(|r| !r.busy)
        .map(|r| r.last_used + keep)
        .min()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(index: usize, bytes: u64, busy: bool, t: Instant, secs: u64) -> Resident {
        Resident {
            index,
            bytes,
            busy,
            last_used: t + Duration::from_secs(secs),
        }
    }

    #[test]
    fn no_budget_always_fits() {
        let t = Instant::now();
        assert_eq!(
            plan_load(None, u64::MAX, &[r(0, 10, true, t, 0)]),
            Fit::Fits
        );
    }

    #[test]
    fn fits_beside_the_loaded_ones() {
        let t = Instant::now();
        let res = [r(0, 40, false, t, 0), r(1, 30, true, t, 1)];
        assert_eq!(plan_load(Some(100), 30, &res), Fit::Fits);
        assert_eq!(plan_load(Some(100), 101, &res), Fit::Never);
    }

    #[test]
    fn unloads_the_least_recently_used_idle_models_only_as_many_as_needed() {
        let t = Instant::now();
        // 0 used last at 5 s, 1 at 1 s (the oldest), 2 at 3 s, 3 busy since 0 s.
        let res = [
            r(0, 30, false, t, 5),
            r(1, 20, false, t, 1),
            r(2, 20, false, t, 3),
            r(3, 25, true, t, 0),
        ];
        // 95 used: 15 more need 10 freed: the oldest idle one (1) is enough.
        assert_eq!(plan_load(Some(100), 15, &res), Fit::Evict(vec![1]));
        // 40 more need 35 freed: 1 then 2.
        assert_eq!(plan_load(Some(100), 40, &res), Fit::Evict(vec![1, 2]));
        // 75 more need 70 freed: every idle model (70 bytes) and nothing busy.
        assert_eq!(plan_load(Some(100), 75, &res), Fit::Evict(vec![1, 2, 0]));
        // 76 more: the busy one stands in the way.
        assert_eq!(plan_load(Some(100), 76, &res), Fit::Wait);
    }

    #[test]
    fn a_busy_model_is_never_chosen_even_if_oldest() {
        let t = Instant::now();
        let res = [r(0, 50, true, t, 0), r(1, 50, false, t, 9)];
        assert_eq!(plan_load(Some(100), 50, &res), Fit::Evict(vec![1]));
        let res = [r(0, 50, true, t, 0), r(1, 50, true, t, 9)];
        assert_eq!(plan_load(Some(100), 50, &res), Fit::Wait);
    }

    #[test]
    fn idle_unload_after_the_keep_alive() {
        let t = Instant::now();
        let res = [
            r(0, 1, false, t, 0),
            r(1, 1, false, t, 50),
            r(2, 1, true, t, 0),
        ];
        let now = t + Duration::from_secs(100);
        let keep = Some(Duration::from_secs(60));
        assert_eq!(idle_expired(keep, now, &res), vec![0]);
        assert_eq!(idle_expired(None, now, &res), Vec::<usize>::new());
        let later = t + Duration::from_secs(110);
        assert_eq!(idle_expired(keep, later, &res), vec![0, 1]);
        assert_eq!(next_expiry(keep, &res), Some(t + Duration::from_secs(60)));
        assert_eq!(next_expiry(None, &res), None);
        assert_eq!(next_expiry(keep, &[res[2]]), None);
    }
}
