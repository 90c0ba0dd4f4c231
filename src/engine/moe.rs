//! The compute of a mixture-of-experts FFN (llama.cpp's `build_moe_ffn`), over the team:
//! routing per token, then tokens grouped by expert so each chosen expert runs ONE multi-token
//! GEMM over the tokens routed to it (its weights read once per step, an unchosen expert's
//! bytes never touched), then per token the weighted sum of its experts' outputs.
//!
//! Routing, per token (`route`): the router logits (plus the router bias, gpt-oss); softmax of
//! them (max subtracted, `expf`, the sum in f64, then one f32 scale: `ggml_soft_max`), the
//! `n_expert_used` most probable experts (descending; equal probabilities by lower index),
//! their probabilities as weights, divided by their f64 sum (clamped at 6.1e-5) when the
//! family normalizes them. gpt-oss's gating (`SoftmaxWeight`) picks the top-k of the logits
//! themselves and softmaxes the k chosen logits into the weights.
//!
//! An expert's row: `gate = Wg x (+ bg)`, `up = Wu x (+ bu)` (the biases of gpt-oss, ggml's
//! `add_id`), `h = act(gate, up)`, `down = Wd h (+ bd)`, each in f32 as ggml adds them.
//!
//! Batch invariance: a grouped row is the token's own normed row quantized by the weight's
//! activation quantizer (per row, as the dense path does), the GEMM's output for a row is
//! bit-identical whatever the other rows and the row chunking (the kernels' contract), the
//! activation is per row, and the sum runs per token over its slots in order of probability
//! (`out = w0 * e0; out += w1 * e1; ...`, ggml's mul then chain of adds). So a token's bits do
//! not depend on the batch nor on which other tokens chose the same expert.

use crate::engine::hparams::{Activation, Gating};
use crate::engine::line_buf::LineBuf;
use crate::engine::model::desc::MoeDesc;
use crate::engine::ops::{add_in_place, geglu, swiglu, swiglu_oai};
use crate::engine::team::{SendPtr, Team};
use crate::engine::weights::{Expert, MoeFfn, Weight, ROW_ALIGN};

/// Tasks per team thread the expert GEMMs aim at (row chunks of each chosen expert).
const TASKS_PER_THREAD: usize = 4;
/// Below this many grouped rows, quantization runs on the calling thread.
const PAR_ROWS_MIN: usize = 16;
/// ggml clamps the sum of the chosen weights at the smallest normal f16 before dividing.
const MIN_WEIGHT_SUM: f32 = 1.0 / 16384.0;

/// Which matrix of an expert a GEMM multiplies.
#[derive(Clone, Copy)]
enum Part {
    Gate,
    Up,
    Down,
}

impl Part {
    fn of(self, e: &Expert) -> &Weight {
        match self {
            Part::Gate => &e.gate,
            Part::Up => &e.up,
            Part::Down => &e.down,
        }
    }
}

/// The routing and grouping of one step, and the buffers of its expert GEMMs: allocated once
/// for `max_tokens` (see [`crate::engine::scratch::BatchLimits`]).
pub struct MoeScratch {
    /// Router logits `[T][n_expert]`.
    pub(crate) logits: LineBuf,
    /// The shared expert's gate logit per token `[T]` (qwen35moe).
    pub(crate) shexp_gate: LineBuf,
    /// One token's probabilities `[n_expert]`.
    probs: Vec<f32>,
    /// The expert of slot `j` of token `t` at `t * k + j` (slots by descending weight).
    sel: Vec<u32>,
    /// The weight of that slot.
    wts: Vec<f32>,
    /// First grouped row of each expert (`n_expert + 1` entries): expert `e`'s tokens are
    /// grouped rows `start[e]..start[e + 1]`, in token order.
    start: Vec<usize>,
    fill: Vec<usize>,
    /// Grouped row of slot `t * k + j`.
    pos_of: Vec<u32>,
    /// Token of each grouped row.
    tok_at: Vec<u32>,
    /// Expert of each grouped row.
    exp_at: Vec<u32>,
    /// The experts chosen by at least one token this step, ascending.
    active: Vec<u32>,
    /// Quantized grouped input rows for gate and for up (one buffer when their activation
    /// formats agree), and for down.
    act: [Vec<u8>; 2],
    act_down: Vec<u8>,
    /// Grouped rows `[T * k][n_ff_exp]` of gate, up and their activation.
    gate: LineBuf,
    up: LineBuf,
    hidden: LineBuf,
    /// Grouped rows `[T * k][d]` of the experts' outputs.
    down: LineBuf,
    /// Task outputs before they are written to their grouped rows.
    tmp: LineBuf,
}

impl MoeScratch {
    /// Buffers for `max_tokens` tokens of a model `d` wide with mixture `m`.
    pub fn new(m: &MoeDesc, d: usize, max_tokens: usize) -> MoeScratch {
        let rows = max_tokens * m.n_expert_used;
        let f = m.n_ff_exp;
        // Any activation format takes at most an f32's 4 bytes per value.
        let act_row = |k: usize| 4 * k;
        MoeScratch {
            logits: LineBuf::zeroed(max_tokens * m.n_expert),
            shexp_gate: LineBuf::zeroed(max_tokens),
            probs: vec![0.0; m.n_expert],
            sel: vec![0; rows],
            wts: vec![0.0; rows],
            start: vec![0; m.n_expert + 1],
            fill: vec![0; m.n_expert],
            pos_of: vec![0; rows],
            tok_at: vec![0; rows],
            exp_at: vec![0; rows],
            active: Vec::with_capacity(m.n_expert),
            act: [vec![0; rows * act_row(d)], vec![0; rows * act_row(d)]],
            act_down: vec![0; rows * act_row(f)],
            gate: LineBuf::zeroed(rows * f),
            up: LineBuf::zeroed(rows * f),
            hidden: LineBuf::zeroed(rows * f),
            down: LineBuf::zeroed(rows * d),
            tmp: LineBuf::zeroed(rows * f.max(d) * 2),
        }
    }
}

/// `probs` = softmax of `logits` as ggml computes it.
fn softmax(logits: &[f32], probs: &mut [f32]) {
    let max = logits.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
    let mut sum = 0f64;
    for (p, &x) in probs.iter_mut().zip(logits) {
        *p = (x - max).exp();
        sum += f64::from(*p);
    }
    let scale = (1.0 / sum) as f32;
    for p in probs.iter_mut() {
        *p *= scale;
    }
}

/// One token's routing: `sel`/`wts` = its `k` experts and their weights, from its router
/// `logits` (`probs` is room for `n_expert` values).
fn route_token(m: &MoeDesc, logits: &[f32], probs: &mut [f32], sel: &mut [u32], wts: &mut [f32]) {
    match m.gating {
        Gating::Softmax => softmax(logits, probs),
        Gating::SoftmaxWeight => probs.copy_from_slice(logits),
    }
    for j in 0..sel.len() {
        let mut best = usize::MAX;
        for (e, &p) in probs.iter().enumerate() {
            if sel[..j].contains(&(e as u32)) {
                continue;
            }
            // Strictly greater: among equal probabilities the lower index comes first; NaN
            // never wins over a number, and a NaN row still picks distinct experts.
            if best == usize::MAX || p > probs[best] {
                best = e;
            }
        }
        sel[j] = best as u32;
        wts[j] = probs[best];
    }
    if m.gating == Gating::SoftmaxWeight {
        // ggml_soft_max over the k chosen logits (in `probs`' first k values: its inputs).
        let k = wts.len();
        probs[..k].copy_from_slice(wts);
        softmax(&probs[..k], wts);
    }
    if m.norm_weights {
        let sum = wts.iter().fold(0f64, |s, &w| s + f64::from(w)) as f32;
        let sum = sum.max(MIN_WEIGHT_SUM);
        for w in wts.iter_mut() {
            *w /= sum;
        }
    }
}

/// Routes the `n_tok` tokens whose router logits are in `s.logits` (plus `bias`, added to
/// them there) and groups them by expert. Returns the grouped row count.
fn route(m: &MoeDesc, bias: Option<&[f32]>, n_tok: usize, s: &mut MoeScratch) -> usize {
    let (ne, k) = (m.n_expert, m.n_expert_used);
    for t in 0..n_tok {
        if let Some(b) = bias {
            add_in_place(&mut s.logits[t * ne..(t + 1) * ne], b);
        }
        route_token(
            m,
            &s.logits[t * ne..(t + 1) * ne],
            &mut s.probs[..ne],
            &mut s.sel[t * k..(t + 1) * k],
            &mut s.wts[t * k..(t + 1) * k],
        );
    }
    // Counting sort of the slots by expert, tokens ascending within an expert.
    s.fill.iter_mut().for_each(|c| *c = 0);
    for &e in &s.sel[..n_tok * k] {
        s.fill[e as usize] += 1;
    }
    s.active.clear();
    s.start[0] = 0;
    for e in 0..ne {
        if s.fill[e] > 0 {
            s.active.push(e as u32);
        }
        s.start[e + 1] = s.start[e] + s.fill[e];
        s.fill[e] = s.start[e];
    }
    for (slot, &e) in s.sel[..n_tok * k].iter().enumerate() {
        let pos = s.fill[e as usize];
        s.fill[e as usize] += 1;
        s.pos_of[slot] = pos as u32;
        s.tok_at[pos] = (slot / k) as u32;
        s.exp_at[pos] = e;
    }
    n_tok * k
}

/// Quantizes `n` rows into `dst` (`row_bytes` apart): row `i` is made by `make(i, q)`, which
/// quantizes it into `q`; over the team when there are many.
fn quantize_grouped(
    team: &Team,
    dst: &mut [u8],
    row_bytes: usize,
    n: usize,
    make: &(dyn Fn(usize, &mut [u8]) + Sync),
) {
    if n >= PAR_ROWS_MIN && team.threads() > 1 {
        team.for_chunks(dst, row_bytes, n, make);
    } else {
        for (i, d) in dst[..n * row_bytes].chunks_mut(row_bytes).enumerate() {
            make(i, d);
        }
    }
}

/// For each part `parts[j]`, each chosen expert `e` and its grouped rows `start[e]..start[e+1]`:
/// `outs[j][row] = expert e's matrix · acts[j][row]` (row-major, `n_out` wide). One task per
/// (part, expert, row chunk), so every chosen expert is split over the team.
#[allow(clippy::too_many_arguments)]
fn expert_gemms<const N: usize>(
    team: &Team,
    experts: &[Expert],
    parts: [Part; N],
    acts: [&[u8]; N],
    outs: [&mut [f32]; N],
    start: &[usize],
    active: &[u32],
    tmp: &mut [f32],
) {
    let Some(first) = experts.first() else { return };
    let n_out = parts[0].of(first).n_out;
    let n_rows = start[start.len() - 1];
    let per_part = active.len();
    let want = team.threads() * TASKS_PER_THREAD;
    let chunks_wanted = want.div_ceil((parts.len() * per_part).max(1));
    let rows = n_out
        .div_ceil(chunks_wanted.max(1))
        .next_multiple_of(ROW_ALIGN)
        .min(n_out.next_multiple_of(ROW_ALIGN));
    let chunks = n_out.div_ceil(rows);
    assert!(tmp.len() >= parts.len() * n_rows * n_out, "moe scratch");
    for (o, p) in outs.iter().zip(parts) {
        let w = p.of(first);
        assert!(o.len() >= n_rows * w.n_out, "moe output too short");
    }
    // An array, not a Vec: this runs every step, which allocates nothing.
    let out_ptrs = outs.map(|o| SendPtr(o.as_mut_ptr()));
    let tmp_ptr = SendPtr(tmp.as_mut_ptr());
    let n_tasks = parts.len() * per_part * chunks;
    team.run(n_tasks, &|task, _| {
        let j = task / (per_part * chunks);
        let a = task / chunks % per_part;
        let c = task % chunks;
        let e = active[a] as usize;
        let w = parts[j].of(&experts[e]);
        let (p0, p1) = (start[e], start[e + 1]);
        let n = p1 - p0;
        let r0 = c * rows;
        let r1 = (r0 + rows).min(n_out);
        let nr = r1 - r0;
        let rb = w.act_row_bytes;
        let a_rows = &acts[j][p0 * rb..p1 * rb];
        // SAFETY: part j's tmp region is j * n_rows * n_out + ..n_rows * n_out (inside `tmp`,
        // asserted); this task's part of it, p0 * n_out + r0 * n .. + n * nr, lies within
        // expert e's rows p0..p1 and row chunk r0..r1, which no other task has.
        let part = unsafe {
            std::slice::from_raw_parts_mut(
                tmp_ptr.get().add(j * n_rows * n_out + p0 * n_out + r0 * n),
                n * nr,
            )
        };
        w.gemm_rows(r0, r1, a_rows, n, part, nr);
        for (i, src) in part.chunks_exact(nr).enumerate() {
            // SAFETY: cells (p0 + i) * n_out + r0..r1 lie inside outs[j] (n_rows * n_out,
            // asserted) and only this task writes columns r0..r1 of rows p0..p1 of part j.
            let dst = unsafe {
                std::slice::from_raw_parts_mut(out_ptrs[j].get().add((p0 + i) * n_out + r0), nr)
            };
            dst.copy_from_slice(src);
        }
    });
}

/// Adds to each grouped row `p` of `buf` (`w` wide) the bias `bias(expert of p)`, when the
/// experts have biases.
fn add_expert_bias(
    buf: &mut [f32],
    w: usize,
    n_rows: usize,
    exp_at: &[u32],
    experts: &[Expert],
    bias: fn(&Expert) -> Option<&Vec<f32>>,
) {
    for (p, row) in buf[..n_rows * w].chunks_exact_mut(w).enumerate() {
        if let Some(b) = bias(&experts[exp_at[p] as usize]) {
            add_in_place(row, b);
        }
    }
}

/// The mixture's output for `n_tok` tokens into `out` (`[n_tok][d]`): `xn` holds their normed
/// rows and `s.logits` their router logits (the caller's router matmul, before its bias).
pub fn experts_forward(
    team: &Team,
    m: &MoeDesc,
    ffn: &MoeFfn,
    (xn, d): (&[f32], usize),
    n_tok: usize,
    s: &mut MoeScratch,
    out: &mut [f32],
) {
    let experts = &ffn.experts[..];
    let Some(first) = experts.first() else { return };
    let n_rows = route(m, ffn.router_bias.as_deref(), n_tok, s);
    let f = m.n_ff_exp;
    // The grouped input rows, quantized per row for gate (and for up when its format differs).
    let two = first.up.vec_dot_type != first.gate.vec_dot_type;
    let tok_at = &s.tok_at;
    for (i, w) in [&first.gate, &first.up]
        .into_iter()
        .enumerate()
        .take(1 + usize::from(two))
    {
        let q = w.quantize_act;
        quantize_grouped(team, &mut s.act[i], w.act_row_bytes, n_rows, &|p, dst| {
            let t = tok_at[p] as usize;
            q(&xn[t * d..(t + 1) * d], dst)
        });
    }
    let [act_gate, act_up] = &s.act;
    let act_up = if two { act_up } else { act_gate };
    expert_gemms(
        team,
        experts,
        [Part::Gate, Part::Up],
        [act_gate, act_up],
        [&mut s.gate, &mut s.up],
        &s.start,
        &s.active,
        &mut s.tmp,
    );
    if m.biases {
        add_expert_bias(&mut s.gate, f, n_rows, &s.exp_at, experts, |e| {
            e.b_gate.as_ref()
        });
        add_expert_bias(&mut s.up, f, n_rows, &s.exp_at, experts, |e| {
            e.b_up.as_ref()
        });
    }
    // act(gate, up) per grouped row, quantized for down in the same region.
    let (gate, up) = (&s.gate, &s.up);
    let act = m.act;
    let hidden = SendPtr(s.hidden.as_mut_ptr());
    let q = first.down.quantize_act;
    quantize_grouped(
        team,
        &mut s.act_down,
        first.down.act_row_bytes,
        n_rows,
        &|p, dst| {
            // SAFETY: grouped row p of `hidden` ([n_rows][f], sized for the largest batch) is
            // written by the task of row p alone.
            let h = unsafe { std::slice::from_raw_parts_mut(hidden.get().add(p * f), f) };
            let (g, u) = (&gate[p * f..(p + 1) * f], &up[p * f..(p + 1) * f]);
            match act {
                Activation::Silu => swiglu(g, u, h),
                Activation::Gelu => geglu(g, u, h),
                Activation::SwigluOai => swiglu_oai(g, u, h),
            }
            q(h, dst)
        },
    );
    expert_gemms(
        team,
        experts,
        [Part::Down],
        [&s.act_down],
        [&mut s.down],
        &s.start,
        &s.active,
        &mut s.tmp,
    );
    if m.biases {
        add_expert_bias(&mut s.down, d, n_rows, &s.exp_at, experts, |e| {
            e.b_down.as_ref()
        });
    }
    // Per token, its experts' outputs times their weights, summed in slot order.
    let k = m.n_expert_used;
    let (down, pos_of, wts) = (&s.down, &s.pos_of, &s.wts);
    let combine = |t: usize, row: &mut [f32]| {
        for j in 0..k {
            let p = pos_of[t * k + j] as usize;
            let (src, w) = (&down[p * d..(p + 1) * d], wts[t * k + j]);
            if j == 0 {
                row.iter_mut().zip(src).for_each(|(o, &x)| *o = x * w);
            } else {
                row.iter_mut().zip(src).for_each(|(o, &x)| *o += x * w);
            }
        }
    };
    if n_tok >= PAR_ROWS_MIN && team.threads() > 1 {
        team.for_chunks(out, d, n_tok, combine);
    } else {
        for (t, row) in out[..n_tok * d].chunks_mut(d).enumerate() {
            combine(t, row);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn desc(n_expert: usize, k: usize, norm: bool) -> MoeDesc {
        MoeDesc {
            n_expert,
            n_expert_used: k,
            n_ff_exp: 32,
            gating: Gating::Softmax,
            norm_weights: norm,
            n_ff_shexp: None,
            shared_gate: false,
            biases: false,
            act: Activation::Silu,
        }
    }

    #[test]
    fn routing_picks_the_most_probable_in_order_and_normalizes() {
        let m = desc(4, 2, true);
        let logits = [0.5f32, 2.0, -1.0, 1.0];
        let mut probs = [0f32; 4];
        let (mut sel, mut wts) = ([0u32; 2], [0f32; 2]);
        route_token(&m, &logits, &mut probs, &mut sel, &mut wts);
        assert_eq!(sel, [1, 3]);
        assert!((wts[0] + wts[1] - 1.0).abs() < 1e-6);
        assert!(wts[0] > wts[1]);
        let m = desc(4, 2, false);
        route_token(&m, &logits, &mut probs, &mut sel, &mut wts);
        assert_eq!(wts[0], probs[1]);
    }

    #[test]
    fn softmax_weight_gating_softmaxes_the_chosen_logits() {
        let m = MoeDesc {
            gating: Gating::SoftmaxWeight,
            ..desc(4, 2, false)
        };
        let logits = [0.5f32, 2.0, -1.0, 1.0];
        let mut probs = [0f32; 4];
        let (mut sel, mut wts) = ([0u32; 2], [0f32; 2]);
        route_token(&m, &logits, &mut probs, &mut sel, &mut wts);
        assert_eq!(sel, [1, 3]);
        let e = 1f32.exp();
        assert!((wts[0] - e / (e + 1.0)).abs() < 1e-6 && (wts[1] - 1.0 / (e + 1.0)).abs() < 1e-6);
    }

    #[test]
    fn the_router_bias_moves_the_choice() {
        let m = desc(4, 1, false);
        let mut s = MoeScratch::new(&m, 32, 1);
        s.logits[..4].copy_from_slice(&[1.0, 0.0, 0.0, 0.0]);
        route(&m, Some(&[0.0, 0.0, 2.0, 0.0]), 1, &mut s);
        assert_eq!(s.sel[0], 2);
        assert_eq!(s.exp_at[0], 2);
    }

    #[test]
    fn ties_go_to_the_lower_index_and_many_experts_work() {
        let m = desc(200, 3, false);
        let mut logits = vec![0f32; 200];
        logits[150] = 3.0;
        logits[7] = 1.0;
        logits[9] = 1.0;
        let mut probs = vec![0f32; 200];
        let (mut sel, mut wts) = ([0u32; 3], [0f32; 3]);
        route_token(&m, &logits, &mut probs, &mut sel, &mut wts);
        assert_eq!(sel, [150, 7, 9]);
    }

    #[test]
    fn grouping_lists_each_expert_s_tokens_in_order() {
        let m = desc(4, 2, true);
        let mut s = MoeScratch::new(&m, 32, 3);
        let rows: [[f32; 4]; 3] = [
            [3.0, 2.0, 0.0, 0.0],
            [0.0, 0.0, 3.0, 2.0],
            [0.0, 3.0, 0.0, 2.0],
        ];
        for (t, r) in rows.iter().enumerate() {
            s.logits[t * 4..(t + 1) * 4].copy_from_slice(r);
        }
        assert_eq!(route(&m, None, 3, &mut s), 6);
        assert_eq!(s.active, [0, 1, 2, 3]);
        assert_eq!(&s.start[..5], &[0, 1, 3, 4, 6]);
        // Expert 1 has tokens 0 and 2; expert 3 tokens 1 and 2.
        assert_eq!(&s.tok_at[..6], &[0, 0, 2, 1, 1, 2]);
        assert_eq!(s.pos_of[0], 0);
        assert_eq!(s.pos_of[4], 2);
    }
}
