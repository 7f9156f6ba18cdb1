//! Float math written so that the compiler keeps eight values in one register (AVX2 and FMA,
//! chosen at run time): the exponential, for the sampler's softmax over 150k scores and for
//! the SiLU of the feed-forward layers. libm's `expf`, one call a value, was most of both.
//! A process keeps one path, so plain and speculative decoding see the same bits.

use candle_core::{CpuStorage, CustomOp2, Layout, Shape, Tensor};

/// Whether the CPU has AVX2 and FMA (asked once): the floating-point paths outside the
/// matmuls (attention, softmax, SiLU) need no more.
pub(crate) fn has_avx2_fma() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static AVX2_FMA: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *AVX2_FMA.get_or_init(|| is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"))
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// `a · b + c`, fused where the path has FMA (where it has not, `mul_add` would be a slow call).
#[inline(always)]
pub(crate) fn multiply_add<const FMA: bool>(a: f32, b: f32, c: f32) -> f32 {
    if FMA {
        a.mul_add(b, c)
    } else {
        a * b + c
    }
}

/// Independent lanes, so that the compiler may keep eight of them in one register.
const LANES: usize = 8;

#[inline(always)]
pub(crate) fn max_of(xs: &[f32]) -> f32 {
    let mut lanes = [f32::NEG_INFINITY; LANES];
    let chunks = xs.chunks_exact(LANES);
    let mut max = f32::NEG_INFINITY;
    for &x in chunks.remainder() {
        max = larger(max, x);
    }
    for chunk in chunks {
        for (lane, &x) in lanes.iter_mut().zip(chunk) {
            *lane = larger(*lane, x);
        }
    }
    for lane in lanes {
        max = larger(max, lane);
    }
    max
}

#[inline(always)]
pub(crate) fn sum_f64(xs: &[f32]) -> f64 {
    let mut lanes = [0f64; LANES];
    let chunks = xs.chunks_exact(LANES);
    let mut sum = 0f64;
    for &x in chunks.remainder() {
        sum += x as f64;
    }
    for chunk in chunks {
        for (lane, &x) in lanes.iter_mut().zip(chunk) {
            *lane += x as f64;
        }
    }
    for lane in lanes {
        sum += lane;
    }
    sum
}

#[inline(always)]
fn larger(a: f32, b: f32) -> f32 {
    if b > a {
        b
    } else {
        a
    }
}

/// ln of f32's smallest normal and of its largest value.
const SMALLEST: f32 = -87.336_54;
const LARGEST: f32 = 88.722_83;

/// e^x: Cephes' expf without branches, within 2 ulp of libm's. Below -87.3 it is 0 (as a
/// score masked to -inf must be), above 88.7 infinite.
#[inline(always)]
pub(crate) fn exp<const FMA: bool>(x: f32) -> f32 {
    const ROUND: f32 = 12_582_912.0; // 1.5 * 2^23: adding it rounds to an integer
    let clamped = x.clamp(SMALLEST, LARGEST);
    let shifted = multiply_add::<FMA>(clamped, std::f32::consts::LOG2_E, ROUND);
    let n = shifted - ROUND;
    // r = x - n ln 2, with ln 2 in two parts so that r keeps its low bits.
    let r = multiply_add::<FMA>(n, 2.121_944_4e-4, multiply_add::<FMA>(n, -0.693_359_4, clamped));
    let mut p = 1.987_569_2e-4f32;
    for c in [1.398_199_9e-3, 8.333_452e-3, 4.166_579_6e-2, 1.666_666_5e-1, 0.5] {
        p = multiply_add::<FMA>(p, r, c);
    }
    let y = multiply_add::<FMA>(p, r * r, r) + 1.0;
    // 2^n from n's bits in `shifted`'s mantissa (`n as i32` would not vectorize: it
    // saturates). At the top n is 128, past f32's exponents: 2^127 twice.
    let n_bits = shifted.to_bits().wrapping_sub(ROUND.to_bits());
    let half_n = n_bits.wrapping_add(254) >> 1; // (n + 127) / 2 + 63, biased halves of 2^n
    let low = f32::from_bits(half_n << 23);
    let high = f32::from_bits(n_bits.wrapping_add(127).wrapping_sub(half_n.wrapping_sub(127)) << 23);
    if x < SMALLEST {
        0.0
    } else if x > LARGEST {
        f32::INFINITY
    } else {
        y * low * high
    }
}

/// e^x evaluated in f64 and rounded once to f32: the correctly rounded value but for a few
/// arguments in a million (libm's `expf` is within 0.502 ulp, and differs from it in 6 of
/// 10,000), four lanes to a register. Attention's softmax uses it: with [`exp`]'s 2 ulp the
/// greedy golden replies moved (a flipped rounding in the next layer's 8-bit activations is
/// enough), and libm's, one call a value, was a quarter of attention at 1,500 positions.
#[inline(always)]
pub(crate) fn exp_rounded<const FMA: bool>(x: f32) -> f32 {
    const ROUND: f64 = 6_755_399_441_055_744.0; // 1.5 * 2^52: adding it rounds to an integer
                                                // Below -104 the result rounds to 0, above 89 to infinity; in between 2^n is an f64.
    let clamped = (x as f64).clamp(-104.0, 89.0);
    let fused = |a: f64, b: f64, c: f64| if FMA { a.mul_add(b, c) } else { a * b + c };
    let shifted = fused(clamped, std::f64::consts::LOG2_E, ROUND);
    let n = shifted - ROUND;
    let r = fused(n, -std::f64::consts::LN_2, clamped); // |r| <= ln 2 / 2
                                                        // Taylor to r^11: the first term left out is under 2e-13 of the result.
    let mut p = 1.0 / 39_916_800.0;
    for c in [3_628_800.0, 362_880.0, 40_320.0, 5_040.0, 720.0, 120.0, 24.0, 6.0, 2.0, 1.0, 1.0] {
        p = fused(p, r, 1.0 / c);
    }
    let two_n = f64::from_bits(shifted.to_bits().wrapping_sub(ROUND.to_bits()).wrapping_add(1023) << 52);
    match x.is_nan() {
        true => x,
        false => (p * two_n) as f32,
    }
}

/// silu(gate) · up element by element, in one pass: candle's `silu` called `expf` per value
/// (33 µs for the draft's 4,864, in each of its 24 layers, per token) and the product was a
/// second pass. On the CPU for f32 of one shape; elsewhere candle's ops.
pub fn silu_mul(gate: &Tensor, up: &Tensor) -> candle_core::Result<Tensor> {
    let fits = gate.device().is_cpu()
        && gate.dtype() == candle_core::DType::F32
        && up.dtype() == candle_core::DType::F32
        && gate.shape() == up.shape();
    match fits {
        true => gate.contiguous()?.apply_op2_no_bwd(&up.contiguous()?, &SiluMul),
        false => candle_nn::ops::silu(gate)? * up,
    }
}

struct SiluMul;

/// Values from which the work is split over the matmuls' pool (a prompt's, not a token's).
const PARALLEL_VALUES: usize = 1 << 16;
const CHUNK: usize = 4096;

impl CustomOp2 for SiluMul {
    fn name(&self) -> &'static str {
        "silu-mul"
    }

    fn cpu_fwd(
        &self,
        g: &CpuStorage,
        lg: &Layout,
        u: &CpuStorage,
        lu: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let len = lg.shape().elem_count();
        let gate = &g.as_slice::<f32>()?[lg.start_offset()..][..len];
        let up = &u.as_slice::<f32>()?[lu.start_offset()..][..len];
        let mut out = vec![0f32; len];
        let out_ptr = out.as_mut_ptr() as usize;
        let chunks = |range: std::ops::Range<usize>| {
            for c in range {
                let span = c * CHUNK..len.min((c + 1) * CHUNK);
                // SAFETY: each chunk owns its span of `out`, inside its `len` values.
                let dst = unsafe { std::slice::from_raw_parts_mut((out_ptr as *mut f32).add(span.start), span.len()) };
                silu_mul_into(&gate[span.clone()], &up[span], dst);
            }
        };
        match len >= PARALLEL_VALUES {
            true => crate::kernels::parallel_items(len.div_ceil(CHUNK), 1, chunks),
            false => chunks(0..len.div_ceil(CHUNK)),
        }
        Ok((CpuStorage::F32(out), lg.shape().clone()))
    }
}

fn silu_mul_into(gate: &[f32], up: &[f32], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() {
        // SAFETY: the CPU has AVX2 and FMA (checked above).
        return unsafe { silu_mul_avx2(gate, up, out) };
    }
    silu_mul_with::<false>(gate, up, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn silu_mul_avx2(gate: &[f32], up: &[f32], out: &mut [f32]) {
    silu_mul_with::<true>(gate, up, out)
}

#[inline(always)]
fn silu_mul_with<const FMA: bool>(gate: &[f32], up: &[f32], out: &mut [f32]) {
    // A loop, not a closure: a closure would be compiled without the caller's features.
    for ((o, &g), &u) in out.iter_mut().zip(gate).zip(up) {
        *o = g / (1.0 + exp::<FMA>(-g)) * u;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Distance in units in the last place between two positive floats.
    fn ulps(a: f32, b: f32) -> u32 {
        a.to_bits().abs_diff(b.to_bits())
    }

    #[test]
    fn exp_is_within_two_ulp_of_libm_and_zero_below_the_normals() {
        let mut worst = 0;
        for i in 0..=2_000_000 {
            let x = -87.3 + 175.0 * i as f32 / 2_000_000.0; // -87.3 ..= 87.7
            worst = worst.max(ulps(exp::<true>(x), x.exp())).max(ulps(exp::<false>(x), x.exp()));
        }
        assert!(worst <= 2, "{worst} ulp");
        for x in [f32::NEG_INFINITY, -1e30, -104.0, -87.34] {
            assert_eq!((exp::<true>(x), exp::<false>(x)), (0.0, 0.0), "e^{x}");
        }
        assert_eq!(exp::<true>(0.0), 1.0);
    }

    #[test]
    fn exp_rounded_is_correctly_rounded_but_for_a_few_in_a_million() {
        let (mut differ, mut worst, total) = (0, 0, 4_000_001);
        for i in 0..total {
            let x = -104.0 + 193.0 * i as f32 / (total - 1) as f32; // -104 ..= 89
            let exact = (x as f64).exp() as f32;
            for value in [exp_rounded::<true>(x), exp_rounded::<false>(x)] {
                let ulp = ulps(value, exact);
                differ += usize::from(ulp != 0);
                worst = worst.max(ulp);
            }
        }
        assert!(worst <= 1 && differ <= 2 * total / 100_000, "{differ} of {} differ, by up to {worst} ulp", 2 * total);
        for x in [f32::NEG_INFINITY, -1e30, -104.0] {
            assert_eq!(exp_rounded::<true>(x), 0.0, "e^{x}");
        }
        assert_eq!(exp_rounded::<true>(0.0), 1.0);
        assert_eq!(exp_rounded::<false>(89.0), f32::INFINITY);
        assert_eq!(exp_rounded::<true>(f32::INFINITY), f32::INFINITY);
        assert!(exp_rounded::<true>(f32::NAN).is_nan());
    }

    #[test]
    fn exp_saturates_to_infinity_above_the_largest_float() {
        assert_eq!(exp::<true>(88.8), f32::INFINITY);
        assert_eq!(exp::<false>(f32::INFINITY), f32::INFINITY);
        assert!(exp::<true>(88.72).is_finite() && ulps(exp::<true>(88.72), 88.72f32.exp()) <= 2);
    }

    #[test]
    fn silu_mul_is_candles_silu_times_up_to_a_few_ulp() {
        let device = candle_core::Device::Cpu;
        for len in [7, 4864, 150_000] {
            let gate: Vec<f32> = (0..len).map(|i| ((i * 7919) % 4001) as f32 * 0.05 - 100.0).collect();
            let up: Vec<f32> = (0..len).map(|i| ((i * 104_729) % 997) as f32 * 0.01 - 5.0).collect();
            let gate = Tensor::from_vec(gate, (1, len), &device).unwrap();
            let up = Tensor::from_vec(up, (1, len), &device).unwrap();
            let fused: Vec<f32> = silu_mul(&gate, &up).unwrap().flatten_all().unwrap().to_vec1().unwrap();
            let two_ops = (candle_nn::ops::silu(&gate).unwrap() * &up).unwrap();
            let two_ops: Vec<f32> = two_ops.flatten_all().unwrap().to_vec1().unwrap();
            for (a, b) in fused.iter().zip(&two_ops) {
                assert!((a - b).abs() <= 4.0 * f32::EPSILON * b.abs() + 1e-30, "{a} vs {b}");
            }
        }
    }
}
