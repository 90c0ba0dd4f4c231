//! Instruction-set detection and selection, done once at start-up.
//!
//! A generic release build runs the fastest path the CPU has: detection is at run time
//! (`is_x86_feature_detected!`), never only at compile time. `KILN_ISA=scalar|avx2|avxvnni|avx512|neon`
//! forces a path (tests, benchmarks); asking for one the CPU lacks is a named error from
//! [`Isa::from_env`], and [`isa`] then logs it and uses the best supported path.

use std::fmt;
use std::sync::OnceLock;

/// The kernel families kiln ships.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Isa {
    /// Portable Rust, the reference every SIMD kernel is tested against.
    Scalar,
    /// x86-64 with AVX2 + FMA + F16C (a Zen 2/3 or Skylake client: no AVX-512, no VNNI).
    Avx2,
    /// [`Isa::Avx2`] plus AVX-VNNI (`vpdpbusd` on ymm: Alder Lake and later clients, Zen 5).
    AvxVnni,
    /// x86-64 with AVX-512 F + BW + VL (and AVX2/FMA/F16C); VNNI is used when present
    /// ([`has_avx512_vnni`]), otherwise the AVX2 kernels run.
    Avx512,
    /// aarch64 NEON (with the dot-product extension where present).
    Neon,
}

/// Why `KILN_ISA` could not be honoured.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IsaError {
    #[error("KILN_ISA={0:?} is not one of scalar, avx2, avxvnni, avx512, neon")]
    Unknown(String),
    #[error("KILN_ISA={0} requested but this CPU does not support it")]
    Unsupported(Isa),
}

/// The environment variable that forces the instruction set.
pub const ISA_ENV: &str = "KILN_ISA";

impl Isa {
    /// Every variant, slowest first.
    pub const ALL: [Isa; 5] = [Isa::Scalar, Isa::Avx2, Isa::AvxVnni, Isa::Avx512, Isa::Neon];

    /// Lower-case name, as accepted by `KILN_ISA` and shown by `kiln inspect --isa`.
    pub const fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::AvxVnni => "avxvnni",
            Isa::Avx512 => "avx512",
            Isa::Neon => "neon",
        }
    }

    /// Parses a `KILN_ISA` value (case-insensitive, surrounding spaces ignored).
    pub fn parse(s: &str) -> Result<Isa, IsaError> {
        let t = s.trim();
        Isa::ALL
            .into_iter()
            .find(|i| i.name().eq_ignore_ascii_case(t))
            .ok_or_else(|| IsaError::Unknown(s.to_string()))
    }

    /// The ISA forced by `KILN_ISA`: `Ok(None)` when unset or empty, an error when the value
    /// is unknown or the CPU lacks that ISA.
    pub fn from_env() -> Result<Option<Isa>, IsaError> {
        match std::env::var(ISA_ENV) {
            Ok(v) if !v.trim().is_empty() => {
                let i = Isa::parse(&v)?;
                if supported(i) {
                    Ok(Some(i))
                } else {
                    Err(IsaError::Unsupported(i))
                }
            }
            _ => Ok(None),
        }
    }

    /// The best ISA this CPU supports, ignoring `KILN_ISA`.
    pub fn detect() -> Isa {
        Isa::ALL
            .into_iter()
            .rev()
            .find(|i| supported(*i))
            .unwrap_or(Isa::Scalar)
    }

    /// Every ISA this CPU supports, slowest first.
    pub fn all_supported() -> impl Iterator<Item = Isa> {
        Isa::ALL.into_iter().filter(|i| supported(*i))
    }

    /// The ISAs tests iterate over: every one this CPU supports; each one this architecture
    /// has kernels for but the CPU lacks is reported as a skip ([`crate::test_skip`]).
    #[cfg(test)]
    pub(crate) fn tested() -> Vec<Isa> {
        let arch: &[Isa] = if cfg!(target_arch = "x86_64") {
            &[Isa::Scalar, Isa::Avx2, Isa::AvxVnni, Isa::Avx512]
        } else if cfg!(target_arch = "aarch64") {
            &[Isa::Scalar, Isa::Neon]
        } else {
            &[Isa::Scalar]
        };
        let mut v = Vec::new();
        for &i in arch {
            if supported(i) {
                v.push(i);
            } else {
                crate::test_skip::skip(&format!("this CPU lacks {i}: its kernels are not tested"));
            }
        }
        if v.contains(&Isa::Avx512) && !has_avx512_vnni() {
            crate::test_skip::skip("this CPU lacks AVX-512 VNNI: its panel GEMMs are not tested");
        }
        v
    }
}

impl fmt::Display for Isa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Whether this CPU can run `isa`'s kernels.
pub fn supported(isa: Isa) -> bool {
    match isa {
        Isa::Scalar => true,
        Isa::Avx2 => has_avx2(),
        Isa::AvxVnni => has_avx_vnni(),
        Isa::Avx512 => has_avx512(),
        Isa::Neon => has_neon(),
    }
}

#[cfg(target_arch = "x86_64")]
fn has_avx2() -> bool {
    is_x86_feature_detected!("avx2")
        && is_x86_feature_detected!("fma")
        && is_x86_feature_detected!("f16c")
}

#[cfg(target_arch = "x86_64")]
fn has_avx512() -> bool {
    has_avx2()
        && is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vl")
}

/// Whether AVX-VNNI (`vpdpbusd` on ymm, VEX-encoded) is available on top of [`Isa::Avx2`].
#[cfg(target_arch = "x86_64")]
fn has_avx_vnni() -> bool {
    has_avx2() && is_x86_feature_detected!("avxvnni")
}

/// Whether AVX-512 VNNI (`vpdpbusd`) is available on top of [`Isa::Avx512`].
#[cfg(target_arch = "x86_64")]
pub fn has_avx512_vnni() -> bool {
    has_avx512() && is_x86_feature_detected!("avx512vnni")
}

#[cfg(not(target_arch = "x86_64"))]
fn has_avx2() -> bool {
    false
}

#[cfg(not(target_arch = "x86_64"))]
fn has_avx512() -> bool {
    false
}

#[cfg(not(target_arch = "x86_64"))]
fn has_avx_vnni() -> bool {
    false
}

/// Whether AVX-512 VNNI (`vpdpbusd`) is available on top of [`Isa::Avx512`].
#[cfg(not(target_arch = "x86_64"))]
pub fn has_avx512_vnni() -> bool {
    false
}

/// Whether this CPU runs AVX-512 on 256-bit datapaths: AMD's family 19h (Zen 4; Zen 3 of the
/// same family has no AVX-512), which splits each 512-bit operation in two. Its K-quant
/// decode GEMVs from memory ran faster with the AVX2 tiles (`x86::avx512::packed_k::install`).
/// Read from CPUID once.
#[cfg(target_arch = "x86_64")]
pub fn avx512_on_256bit_datapaths() -> bool {
    static HALF: OnceLock<bool> = OnceLock::new();
    *HALF.get_or_init(|| {
        use std::arch::x86_64::__cpuid;
        // CPUID exists on every x86-64 CPU; leaves 0 and 1 always do.
        let (v, f) = (__cpuid(0), __cpuid(1));
        let amd = [v.ebx, v.edx, v.ecx]
            .iter()
            .flat_map(|r| r.to_le_bytes())
            .eq(*b"AuthenticAMD");
        // Family: base 0xF plus the extended family (CPUID.1:EAX bits 8-11 and 20-27).
        let base = (f.eax >> 8) & 0xF;
        let family = if base == 0xF {
            base + ((f.eax >> 20) & 0xFF)
        } else {
            base
        };
        amd && family == 0x19 && has_avx512()
    })
}

/// Whether this CPU runs AVX-512 on 256-bit datapaths (never, off x86-64).
#[cfg(not(target_arch = "x86_64"))]
pub fn avx512_on_256bit_datapaths() -> bool {
    false
}

#[cfg(target_arch = "aarch64")]
fn has_neon() -> bool {
    std::arch::is_aarch64_feature_detected!("neon")
}

#[cfg(not(target_arch = "aarch64"))]
fn has_neon() -> bool {
    false
}

static SELECTED: OnceLock<Isa> = OnceLock::new();

/// The ISA kernels run with: `KILN_ISA` if set and supported, else the best detected.
/// Decided once (first call) and logged.
pub fn isa() -> Isa {
    *SELECTED.get_or_init(|| {
        let best = Isa::detect();
        let chosen = match Isa::from_env() {
            Ok(Some(forced)) => forced,
            Ok(None) => best,
            Err(e) => {
                tracing::warn!("{e}; using {best}");
                best
            }
        };
        tracing::info!(
            isa = chosen.name(),
            avx512_vnni = has_avx512_vnni(),
            avx512_256bit = avx512_on_256bit_datapaths(),
            "kernel instruction set"
        );
        chosen
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_names() {
        for i in Isa::ALL {
            assert_eq!(Isa::parse(i.name()), Ok(i));
            assert_eq!(Isa::parse(&i.name().to_uppercase()), Ok(i));
        }
        assert!(matches!(Isa::parse("sse2"), Err(IsaError::Unknown(_))));
    }

    #[test]
    fn scalar_always_supported_and_detect_is_supported() {
        assert!(supported(Isa::Scalar));
        assert!(supported(Isa::detect()));
        assert!(Isa::all_supported().any(|i| i == Isa::detect()));
    }
}
