//! Unpredictable numbers for ids and default seeds: the one place kiln draws them.
//!
//! Each value is std's randomly keyed SipHash (`RandomState`, keyed from the OS once per
//! thread) of a process-wide counter and the clock, so two calls never repeat in practice and
//! nothing outside the process can guess them. Not for cryptographic secrets.

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// 64 unpredictable bits; different for every call.
pub fn random_u64() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u128(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.finish()
}

/// An id: `prefix` and 24 random lowercase hex digits (96 bits), as in `chatcmpl-…`,
/// `cmpl-…`, `call_…`, `req-…`.
pub fn random_id(prefix: &str) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(prefix.len() + 24);
    out.push_str(prefix);
    let _ = write!(out, "{:016x}", random_u64());
    let _ = write!(out, "{:08x}", random_u64() >> 32);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_have_their_prefix_and_24_hex_digits_and_do_not_repeat() {
        let ids: Vec<String> = (0..1000).map(|_| random_id("chatcmpl-")).collect();
        for id in &ids {
            let hex = id.strip_prefix("chatcmpl-").expect("prefix");
            assert_eq!(hex.len(), 24, "{id}");
            assert!(hex
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        }
        let distinct: std::collections::HashSet<_> = ids.iter().collect();
        assert_eq!(distinct.len(), ids.len());
    }

    #[test]
    fn seeds_do_not_repeat() {
        let seeds: std::collections::HashSet<u64> = (0..1000).map(|_| random_u64()).collect();
        assert_eq!(seeds.len(), 1000);
    }
}
