//! Budgets for one render, and the error that marks a size cap being hit.

use minijinja::{Error, ErrorKind};

/// Budgets that keep a hostile or buggy template from running away.
#[derive(Clone, Copy, Debug)]
pub struct RenderLimits {
    /// Template VM instructions per render (minijinja fuel).
    pub fuel: u64,
    /// Bytes of output per render; also the cap on any single string the template builds.
    pub max_output_bytes: usize,
    /// Nesting depth of macro calls, includes and nested blocks.
    pub max_recursion: usize,
}

impl Default for RenderLimits {
    /// 10M instructions (about half a second; the reference templates use ~100 per message,
    /// so ~30k for a 300-message conversation), 16 MiB of output, recursion depth 256 (about 40
    /// nested macro calls; each costs 4 plus its loop frames).
    fn default() -> Self {
        RenderLimits {
            fuel: 10_000_000,
            max_output_bytes: 16 << 20,
            max_recursion: 256,
        }
    }
}

/// Most items a list built by `+`, `*`, `|batch` or `|slice` may hold.
pub const MAX_SEQ_ITEMS: usize = 1 << 20;

/// Marks an error as a size cap being hit (found again in the error's source chain).
#[derive(Debug)]
pub struct SizeExceeded {
    pub limit: usize,
}

impl std::fmt::Display for SizeExceeded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "size limit of {} exceeded", self.limit)
    }
}

impl std::error::Error for SizeExceeded {}

/// The error for a string that would exceed `cap` bytes.
pub fn size_error(cap: usize) -> Error {
    Error::new(
        ErrorKind::InvalidOperation,
        format!("a string would exceed {cap} bytes"),
    )
    .with_source(SizeExceeded { limit: cap })
}

/// The error for a list that would exceed [`MAX_SEQ_ITEMS`].
pub fn items_error() -> Error {
    Error::new(
        ErrorKind::InvalidOperation,
        format!("a list would exceed {MAX_SEQ_ITEMS} items"),
    )
    .with_source(SizeExceeded {
        limit: MAX_SEQ_ITEMS,
    })
}

/// `Ok` when `len` fits in `cap` bytes.
pub fn check_len(len: usize, cap: usize) -> Result<(), Error> {
    if len > cap {
        Err(size_error(cap))
    } else {
        Ok(())
    }
}
