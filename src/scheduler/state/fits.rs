//! Whether a request can ever run in a KV pool: the one admission-size check that both the
//! handle (at submission) and the scheduler (at admission) apply.

use super::AdmitError;
use crate::engine::kv_cache::KvLayout;

/// A KV pool as admission sees it: `total` pages of `block_size` positions shared by the
/// layer groups of `layout`.
#[derive(Clone, Copy, Debug)]
pub struct PoolShape<'a> {
    pub layout: &'a KvLayout,
    pub block_size: usize,
    pub total: usize,
}

/// [`check_fits`] for a pool of `total` pages in `layout`, which may release local layers'
/// pages (sliding windows): full-attention groups need every block, windowed groups at most a
/// window plus a step of `max_batch_tokens` for each choice. Without windows it is
/// [`check_fits`] itself.
pub fn check_fits_layout(
    prompt: usize,
    max_tokens: usize,
    n: usize,
    n_ctx: usize,
    max_batch_tokens: usize,
    pool: PoolShape<'_>,
) -> Result<(), AdmitError> {
    let PoolShape {
        layout,
        block_size,
        total,
    } = pool;
    if !layout.has_windows() {
        return check_fits(prompt, max_tokens, n, n_ctx, block_size, total);
    }
    check_fits(prompt, max_tokens, n, n_ctx, 1, usize::MAX)?;
    let bs = block_size.max(1);
    let full = prompt.div_ceil(bs) + n.max(1) * (max_tokens.div_ceil(bs) + 1);
    let pages: usize = (0..layout.n_groups())
        .map(|g| match layout.window(g) {
            None => full,
            Some(w) => full.min(n.max(1) * ((w + max_batch_tokens.max(1)).div_ceil(bs) + 1)),
        })
        .sum();
    if pages > total {
        // In positions of a whole-model page, as the error reports them.
        let groups = layout.n_groups();
        return Err(AdmitError::KvCapacity {
            needed: pages * bs / groups,
            capacity: total * bs / groups,
        });
    }
    Ok(())
}

/// Whether a request can ever run: a non-empty prompt, prompt + `max_tokens` within `n_ctx`,
/// and the prompt's blocks plus `max_tokens` (and a partly filled block) for each of its `n`
/// choices within a pool of `total_blocks` blocks of `block_size` positions. The one check
/// both the handle (at submission) and the scheduler (at admission) apply.
pub fn check_fits(
    prompt: usize,
    max_tokens: usize,
    n: usize,
    n_ctx: usize,
    block_size: usize,
    total_blocks: usize,
) -> Result<(), AdmitError> {
    if prompt == 0 {
        return Err(AdmitError::EmptyPrompt);
    }
    if prompt.saturating_add(max_tokens) > n_ctx {
        return Err(AdmitError::ContextLength {
            prompt,
            max_tokens,
            n_ctx,
        });
    }
    let bs = block_size.max(1);
    let blocks = prompt.div_ceil(bs) + n.max(1) * (max_tokens.div_ceil(bs) + 1);
    if blocks > total_blocks {
        return Err(AdmitError::KvCapacity {
            needed: blocks * bs,
            capacity: total_blocks * bs,
        });
    }
    Ok(())
}
