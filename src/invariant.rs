//! Internal invariant checks that stay on where the tests run.
//!
//! `make test` runs the suite on release builds (`cargo test --release`, so the tests share one
//! build of the dependencies with the served binary), where `debug_assert!` is compiled out.
//! `invariant!` and `invariant_eq!` are `assert!` and `assert_eq!` in debug builds and in
//! kiln's own unit tests (`cfg(test)`), and nothing in a release binary, as `debug_assert!`
//! is: use them for checks too costly, or in places too delicate (inside `Drop`, on a worker
//! thread), to panic in production.

/// `assert!` under `debug_assertions` or `cfg(test)`; compiled out otherwise.
macro_rules! invariant {
    ($($arg:tt)*) => {
        if cfg!(any(debug_assertions, test)) {
            assert!($($arg)*);
        }
    };
}

/// `assert_eq!` under `debug_assertions` or `cfg(test)`; compiled out otherwise.
macro_rules! invariant_eq {
    ($($arg:tt)*) => {
        if cfg!(any(debug_assertions, test)) {
            assert_eq!($($arg)*);
        }
    };
}
