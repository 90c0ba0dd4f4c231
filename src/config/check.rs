//! The checks every section's validation shares: errors naming their key, ranges, KV budgets.

use super::raw::RawSize;
use super::settings::KvBudget;
use super::{parse_bytes, ConfigError};
use crate::engine::kv_cache::KvType;

/// Upper bound on `engine.threads`, to catch typos such as 20000.
pub(super) const MAX_THREADS: usize = 1024;

pub(super) fn invalid(key: &'static str, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key,
        message: message.into(),
    }
}

/// `v`, or an error unless `lo <= v <= hi`.
pub(super) fn in_range<T>(key: &'static str, v: T, lo: T, hi: T) -> Result<T, ConfigError>
where
    T: PartialOrd + std::fmt::Display + Copy,
{
    if lo <= v && v <= hi {
        Ok(v)
    } else {
        Err(invalid(key, format!("{v} is not between {lo} and {hi}")))
    }
}

/// A KV budget (`engine.kv_cache`, `models.kv_cache`): "auto", a size, or positions; never
/// zero (nothing could run).
pub(super) fn kv_budget(key: &'static str, raw: Option<RawSize>) -> Result<KvBudget, ConfigError> {
    let b = match raw {
        None => KvBudget::Auto,
        Some(RawSize::Number(p)) => KvBudget::Positions(p),
        Some(RawSize::Text(t)) if t.trim().eq_ignore_ascii_case("auto") => KvBudget::Auto,
        Some(RawSize::Text(t)) => KvBudget::Bytes(parse_bytes(&t).ok_or_else(|| {
            invalid(
                key,
                format!(
                    "{t:?} is not a size (\"2GiB\", \"512MiB\"), \"auto\" or a number of positions"
                ),
            )
        })?),
    };
    if matches!(b, KvBudget::Positions(0) | KvBudget::Bytes(0)) {
        return Err(invalid(key, "0 holds no position: no request could run"));
    }
    Ok(b)
}

/// A KV storage type (`engine.kv_type`, `models.kv_type`): "f16" or "q8_0"; `None` when unset.
pub(super) fn kv_type(
    key: &'static str,
    raw: Option<String>,
) -> Result<Option<KvType>, ConfigError> {
    raw.map(|t| {
        KvType::parse(t.trim()).ok_or_else(|| {
            let names: Vec<&str> = KvType::ALL.iter().map(|k| k.name()).collect();
            invalid(
                key,
                format!("{t:?} is not a KV cache type ({})", names.join(", ")),
            )
        })
    })
    .transpose()
}
