//! A small deterministic generator (SplitMix64) and the laws the synthetic weights are drawn
//! from, in exact arithmetic so that every machine draws the same values.

/// SplitMix64: 64 random bits per call, reproducible from the seed.
pub(super) struct Rng(u64);

impl Rng {
    /// The generator of tensor `name` under `seed` (independent of the order tensors are made).
    pub fn for_tensor(seed: u64, name: &str) -> Rng {
        // FNV-1a of the name, mixed with the seed.
        let mut h = 0xcbf2_9ce4_8422_2325u64;
        for b in name.bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        Rng(h ^ seed.wrapping_mul(0x9e37_79b9_7f4a_7c15))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Two uniforms in `[0, 1)` with 24 bits each (exact in f64) from one draw.
    fn units(&mut self) -> (f64, f64) {
        let r = self.next_u64();
        let scale = (1u64 << 24) as f64;
        (
            (r >> 40) as f64 / scale,
            ((r >> 8) & 0xff_ffff) as f64 / scale,
        )
    }

    /// Uniform in `(-w, w)`.
    pub fn uniform(&mut self, w: f32) -> f32 {
        ((self.units().0 * 2.0 - 1.0) * f64::from(w)) as f32
    }

    /// Normal-like (Irwin-Hall of four uniforms): mean 0, standard deviation `sigma`.
    pub fn normal(&mut self, sigma: f32) -> f32 {
        let (a, b) = self.units();
        let (c, d) = self.units();
        let s = a + b + c + d - 2.0;
        (s * 3f64.sqrt() * f64::from(sigma)) as f32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reproducible_and_scaled() {
        let mut a = Rng::for_tensor(7, "x");
        let mut b = Rng::for_tensor(7, "x");
        assert_eq!(a.next_u64(), b.next_u64());
        assert_ne!(
            Rng::for_tensor(7, "y").next_u64(),
            Rng::for_tensor(7, "x").next_u64()
        );
        let n = 20000;
        let v: Vec<f32> = (0..n).map(|_| a.normal(2.0)).collect();
        let var = v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>() / n as f64;
        assert!((var.sqrt() - 2.0).abs() < 0.05, "{var}");
    }
}
