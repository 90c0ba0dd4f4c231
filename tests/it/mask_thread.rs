//! The worker's grammar-mask thread (`scheduler::constrain`): one long-lived OS thread per
//! worker computes the masks of a step's constrained sequences beside its forward pass.

use crate::structured::{grammars, person_schema};
use kiln::structured::Constraint;

/// The worker's mask thread: one OS thread for many steps, each step's constraints back in
/// order with their masks, and a step that panicked in its forward pass (its batch never
/// collected) does not hand its stale batch to the next step.
#[test]
fn one_mask_thread_serves_every_step_and_survives_a_panicking_forward_pass() {
    use kiln::scheduler::constrain::{MaskThread, Pending};
    use kiln::scheduler::state::SeqId;
    let c = Constraint::json_schema(grammars(), &person_schema(), "response_format", "p").unwrap();
    let fresh = |n: u64| -> Pending { (0..n).map(|i| (i as SeqId, c.sequence())).collect() };
    let mut masks = MaskThread::new("kiln-masks-test".to_string());
    assert!(!masks.is_running(), "started on first use");
    let mut empty: Pending = Vec::new();
    let (r, work) = masks.overlapped(&mut empty, || 7);
    assert_eq!((r, work.masks), (7, 0));
    assert!(!masks.is_running(), "nothing pending: no thread");
    let mut threads = Vec::new();
    for step in 0..20u64 {
        let mut pending = fresh(3);
        let (caller, work) = masks.overlapped(&mut pending, || std::thread::current().id());
        assert_eq!(
            caller,
            std::thread::current().id(),
            "the forward pass runs on the caller"
        );
        threads.push(masks.thread_id().expect("the mask thread runs"));
        assert_eq!(work.masks, 3, "step {step}");
        let ids: Vec<u64> = pending.iter().map(|(s, _)| *s).collect();
        assert_eq!(ids, vec![0, 1, 2], "order kept");
        assert!(
            pending.iter().all(|(_, s)| s.allowed().is_some()),
            "masks computed"
        );
        assert!(masks.is_running());
    }
    // One mask thread for all 20 steps, not the caller's.
    assert!(threads.iter().all(|t| *t == threads[0]));
    assert_ne!(threads[0], std::thread::current().id());
    // A forward pass that panics leaves its batch with the thread; the next step gets its own.
    let mut pending = fresh(2);
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        masks.overlapped(&mut pending, || panic!("injected forward panic"))
    }));
    assert!(caught.is_err());
    let mut next = fresh(5);
    let (_, work) = masks.overlapped(&mut next, || ());
    assert_eq!((work.masks, next.len()), (5, 5));
    assert!(next.iter().all(|(_, s)| s.allowed().is_some()));
    assert_eq!(
        masks.thread_id(),
        Some(threads[0]),
        "the same thread after the panic"
    );
    drop(masks); // joins the thread
}
