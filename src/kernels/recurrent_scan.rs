//! The shapes the recurrent mixers' kernels share across instruction sets: the scan's and the
//! delta rule's signatures ([`ScanFn`], [`DeltaFn`]), their lane count and length checks,
//! apart from the dispatch
//! (`kernels::recurrent`) so that each ISA's kernels depend on this file and not on the
//! module that installs them.
//!
//! The scan's dot `y[i] = sum_k S[i][k] C[k]` is summed as [`SCAN_LANES`] partial sums (value
//! `k` into lane `k % 16`) combined by halves (lane `j` + lane `j + 8`, then `j + 4`, `j + 2`,
//! `j + 1`), then the last `d_state % 16` values added in order: the order a 16-lane register
//! gives, and two 8-lane or four 4-lane registers give as well.

/// How many partial sums the scan's dot keeps (value `k` goes to `k % SCAN_LANES`).
pub const SCAN_LANES: usize = 16;

/// One token of one Mamba-2 head's scan (ggml_ssm_scan_f32 with a scalar decay per head): for
/// each row `i` of `state` (`x.len()` rows of `d_state = b.len()` values),
/// `state[i][k] = state[i][k] * da + b[k] * (x[i] * dt_sp)` (two products, one sum, no fused
/// multiply-add) and `y[i] = sum_k state[i][k] * c[k]` in the order of the module doc.
/// Panics when the lengths disagree ([`check_scan`]).
pub type ScanFn =
    fn(state: &mut [f32], x: &[f32], dt_sp: f32, da: f32, b: &[f32], c: &[f32], y: &mut [f32]);

/// One token of one Gated DeltaNet head's delta rule (ggml_gated_delta_net's per-token body):
/// `state` holds `n = v.len()` rows of `n` floats, row `j` being column `j` of the head's
/// matrix `S` (`state[j * n + i] = S[i][j]`, as ggml keeps it). For each row `j`, in order:
/// `r = r * decay` (every value), `delta = (v[j] - r . k) * beta`, `r = r + k * delta` (one
/// product, one sum, no fused multiply-add), `out[j] = (r . q) * scale`; both dots summed as
/// [`SCAN_LANES`] partial sums in the scan's order (module doc of `kernels::recurrent`).
/// `coef` is `(decay, beta, scale)`. Panics when the lengths disagree ([`check_delta`]).
pub type DeltaFn =
    fn(state: &mut [f32], q: &[f32], k: &[f32], v: &[f32], coef: (f32, f32, f32), out: &mut [f32]);

/// The recurrent kernels of one instruction set.
#[derive(Clone, Copy, Debug)]
pub struct RecurrentKernels {
    pub ssm_scan: ScanFn,
    pub delta_rule: DeltaFn,
}

/// Checks a scan's slice lengths: `state` is `x.len() * b.len()`, `c` as long as `b`, `y` as
/// long as `x`. Returns `(rows, d_state)`.
pub fn check_scan(state: &[f32], x: &[f32], b: &[f32], c: &[f32], y: &[f32]) -> (usize, usize) {
    let (rows, ds) = (x.len(), b.len());
    assert!(
        state.len() == rows * ds && c.len() == ds && y.len() == rows,
        "ssm_scan lengths: state {} x {rows} b {ds} c {} y {}",
        state.len(),
        c.len(),
        y.len()
    );
    (rows, ds)
}

/// Checks a delta rule's slice lengths: `q`, `k`, `v` and `out` all `n` long, `state` `n * n`.
/// Returns `n`.
pub fn check_delta(state: &[f32], q: &[f32], k: &[f32], v: &[f32], out: &[f32]) -> usize {
    let n = v.len();
    assert!(
        state.len() == n * n && q.len() == n && k.len() == n && out.len() == n,
        "delta_rule lengths: state {} q {} k {} v {n} out {}",
        state.len(),
        q.len(),
        k.len(),
        out.len()
    );
    n
}
