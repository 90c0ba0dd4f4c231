//! Rotary position embedding, computed as llama.cpp does (`ggml_rope_cache_init` + `rope_yarn`):
//! for pair `i` of the first `n_dims` dims, `theta_i = pos * base^(-2i/n_dims) / factor_i`
//! (accumulated in f32 by repeated multiplication like ggml), scaled by `freq_scale`; with YaRN
//! (`ext_factor` 1) each pair's angle is mixed between the scaled and unscaled one by a ramp over
//! the correction dims and the magnitude is corrected; cos and sin are multiplied by
//! `attn_factor`. The dims past `n_dims` pass through unrotated (partial RoPE).

/// Which dims form a rotated pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeKind {
    /// Adjacent pairs `(2i, 2i+1)`: llama files (the converter permutes Q/K rows for it).
    Normal,
    /// Halves `(i, i + n_dims/2)`: GPT-NeoX style, used by qwen, gemma, phi3.
    NeoX,
}

/// RoPE settings of a model (or of one kind of layer: gemma's local layers have their own).
#[derive(Clone, Debug, PartialEq)]
pub struct RopeTable {
    pub kind: RopeKind,
    /// Rotated dims per head (`rope.dimension_count`), even, <= head_dim.
    pub n_dims: usize,
    pub freq_base: f32,
    /// `1 / scaling factor` (1.0 without scaling).
    pub freq_scale: f32,
    /// Per-pair frequency divisors (`rope_freqs.weight`, Llama 3.1; phi3's LongRoPE factors),
    /// `n_dims / 2` long.
    pub freq_factors: Option<Vec<f32>>,
    /// YaRN's extrapolation mix (llama.cpp's `ext_factor`): 0 off, 1 for YaRN files.
    pub ext_factor: f32,
    /// cos and sin are multiplied by this (llama.cpp's `attn_factor`): 1, phi3's
    /// `rope.scaling.attn_factor`, or YaRN's magnitude correction.
    pub attn_factor: f32,
    /// YaRN's correction dims (see [`yarn_corr_dims`]); unused when `ext_factor` is 0.
    pub corr_dims: [f32; 2],
}

/// llama.cpp's `ggml_rope_yarn_corr_dim`: the dim whose wavelength makes `n_rot` turns over
/// `n_ctx_orig` positions.
fn yarn_corr_dim(n_dims: usize, n_ctx_orig: u32, n_rot: f32, base: f32) -> f32 {
    n_dims as f32 * (n_ctx_orig as f32 / (n_rot * 2.0 * std::f32::consts::PI)).ln()
        / (2.0 * base.ln())
}

/// YaRN's ramp bounds over pair indices, as `ggml_rope_yarn_corr_dims` computes them.
pub fn yarn_corr_dims(
    n_dims: usize,
    n_ctx_orig: u32,
    freq_base: f32,
    beta_fast: f32,
    beta_slow: f32,
) -> [f32; 2] {
    let start = yarn_corr_dim(n_dims, n_ctx_orig, beta_fast, freq_base).floor();
    let end = yarn_corr_dim(n_dims, n_ctx_orig, beta_slow, freq_base).ceil();
    let lo = if 0.0 > start { 0.0 } else { start };
    let top = (n_dims - 1) as f32;
    let hi = if top < end { top } else { end };
    [lo, hi]
}

/// `rope_yarn_ramp`: 1 below the low correction dim, 0 above the high one, linear between.
fn yarn_ramp(low: f32, high: f32, pair: usize) -> f32 {
    let y = (pair as f32 - low) / 0.001f32.max(high - low);
    1.0 - 1.0f32.min(0.0f32.max(y))
}

impl RopeTable {
    /// A plain table: no scaling, no factors, magnitude 1.
    pub fn new(kind: RopeKind, n_dims: usize, freq_base: f32) -> RopeTable {
        RopeTable {
            kind,
            n_dims,
            freq_base,
            freq_scale: 1.0,
            freq_factors: None,
            ext_factor: 0.0,
            attn_factor: 1.0,
            corr_dims: [0.0, 0.0],
        }
    }

    /// Fills `cache` (`n_dims` long) with `cos, sin` of each pair's angle at position `pos`.
    pub fn fill(&self, pos: usize, cache: &mut [f32]) {
        assert_eq!(cache.len(), self.n_dims, "rope cache length");
        let theta_scale = self.freq_base.powf(-2.0 / self.n_dims as f32);
        // YaRN's magnitude correction is the same for every pair.
        let mscale = if self.ext_factor != 0.0 {
            self.attn_factor * 0.1f32.mul_add((1.0 / self.freq_scale).ln(), 1.0)
        } else {
            self.attn_factor
        };
        let mut theta = pos as f32;
        for (i, cs) in cache.chunks_exact_mut(2).enumerate() {
            let ff = self.freq_factors.as_ref().map_or(1.0, |f| f[i]);
            let extrap = theta / ff;
            let interp = self.freq_scale * extrap;
            let angle = if self.ext_factor != 0.0 {
                let mix = yarn_ramp(self.corr_dims[0], self.corr_dims[1], i) * self.ext_factor;
                // GCC fuses the first product of `interp * (1 - mix) + extrap * mix`.
                interp.mul_add(1.0 - mix, extrap * mix)
            } else {
                interp
            };
            cs[0] = angle.cos() * mscale;
            cs[1] = angle.sin() * mscale;
            theta *= theta_scale;
        }
    }

    /// Rotates each `head_dim`-long head of `x` in place using `cache` from [`RopeTable::fill`].
    /// Rounding as llama.cpp's x86 build (GCC contracts its `x0*c - x1*s`): `fma(x0, c, -(x1 * s))`
    /// and `fma(x0, s, x1 * c)`, so the rotated values are bit-identical to the reference's.
    pub fn apply(&self, cache: &[f32], x: &mut [f32], head_dim: usize) {
        #[cfg(target_arch = "x86_64")]
        if is_x86_feature_detected!("fma") {
            // SAFETY: FMA was just detected.
            return unsafe { self.apply_fma(cache, x, head_dim) };
        }
        self.apply_impl(cache, x, head_dim)
    }

    /// [`RopeTable::apply`] compiled with FMA, so `mul_add` is one instruction instead of a
    /// library call (the same single rounding either way, so the same bits).
    ///
    /// # Safety
    /// The CPU must support FMA.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "fma")]
    unsafe fn apply_fma(&self, cache: &[f32], x: &mut [f32], head_dim: usize) {
        self.apply_impl(cache, x, head_dim)
    }

    #[inline(always)]
    fn apply_impl(&self, cache: &[f32], x: &mut [f32], head_dim: usize) {
        let half = self.n_dims / 2;
        for head in x.chunks_exact_mut(head_dim) {
            match self.kind {
                RopeKind::Normal => {
                    for (pair, cs) in head[..self.n_dims]
                        .chunks_exact_mut(2)
                        .zip(cache.chunks_exact(2))
                    {
                        let (x0, x1) = (pair[0], pair[1]);
                        pair[0] = x0.mul_add(cs[0], -(x1 * cs[1]));
                        pair[1] = x0.mul_add(cs[1], x1 * cs[0]);
                    }
                }
                RopeKind::NeoX => {
                    let (lo, hi) = head[..self.n_dims].split_at_mut(half);
                    for ((a, b), cs) in lo.iter_mut().zip(hi).zip(cache.chunks_exact(2)) {
                        let (x0, x1) = (*a, *b);
                        *a = x0.mul_add(cs[0], -(x1 * cs[1]));
                        *b = x0.mul_add(cs[1], x1 * cs[0]);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(kind: RopeKind) -> RopeTable {
        RopeTable::new(kind, 8, 10000.0)
    }

    #[test]
    fn position_zero_is_identity_and_norm_is_kept() {
        for kind in [RopeKind::Normal, RopeKind::NeoX] {
            let t = table(kind);
            let mut cache = vec![0.0; 8];
            t.fill(0, &mut cache);
            let x0: Vec<f32> = (0..16).map(|i| i as f32 - 3.0).collect();
            let mut x = x0.clone();
            t.apply(&cache, &mut x, 8);
            assert_eq!(x, x0);
            t.fill(37, &mut cache);
            t.apply(&cache, &mut x, 8);
            let n0: f32 = x0.iter().map(|v| v * v).sum();
            let n1: f32 = x.iter().map(|v| v * v).sum();
            assert!((n0 - n1).abs() < 1e-3);
        }
    }

    /// The FMA-compiled path (what x86 machines run) gives the library `fmaf` path's bits.
    #[test]
    fn fma_path_matches_library_path() {
        for kind in [RopeKind::Normal, RopeKind::NeoX] {
            let t = RopeTable {
                n_dims: 64,
                ..table(kind)
            };
            let mut cache = vec![0.0; 64];
            for pos in [1, 17, 300, 4095] {
                t.fill(pos, &mut cache);
                let x0: Vec<f32> = (0..192)
                    .map(|i| ((i * 7919 % 263) as f32 - 131.0) / 37.0)
                    .collect();
                let (mut a, mut b) = (x0.clone(), x0.clone());
                t.apply(&cache, &mut a, 64);
                t.apply_impl(&cache, &mut b, 64);
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&a), bits(&b), "{kind:?} at {pos}");
            }
        }
    }

    #[test]
    fn normal_rotates_adjacent_pairs() {
        let t = table(RopeKind::Normal);
        let mut cache = vec![0.0; 8];
        t.fill(1, &mut cache);
        // First pair has frequency 1: angle = 1 radian.
        let mut x = vec![1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0];
        t.apply(&cache, &mut x, 8);
        assert!((x[0] - 1f32.cos()).abs() < 1e-6 && (x[1] - 1f32.sin()).abs() < 1e-6);
        let t = table(RopeKind::NeoX);
        let mut x = vec![1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0];
        t.apply(&cache, &mut x, 8);
        assert!((x[0] - 1f32.cos()).abs() < 1e-6 && (x[4] - 1f32.sin()).abs() < 1e-6);
    }
}
