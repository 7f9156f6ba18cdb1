//! Q6_K × Q8_K, AVX2: per weight block the 6-bit quants are assembled and the 16 scales
//! widened once; each activation row then costs a `maddubs`, a `sub`, a `madd` and an `add`
//! per 32 weights. Per row, the integer lanes and float operations are those of candle's
//! `avx::vec_dot_q6k_q8k`, so results are bit-identical to it.

use super::{Q6K, Q8K};
use std::arch::x86_64::*;

/// An activation block with the quants' `-32` offset terms, which depend on the activations
/// alone: candle recomputes them (one `maddubs` in three) for every column.
pub(super) struct Q8KOffsets {
    y: Q8K,
    /// `32 · (y[2j] + y[2j+1])` for the 16 pairs of each 32 activations: candle's
    /// `maddubs(32, y)`, lane for lane.
    offsets: [[i16; 16]; 8],
}

pub(super) fn prepare(y: &Q8K) -> Q8KOffsets {
    let offsets = std::array::from_fn(|i| {
        std::array::from_fn(|j| 32 * (y.qs[32 * i + 2 * j] as i16 + y.qs[32 * i + 2 * j + 1] as i16))
    });
    Q8KOffsets { y: y.clone(), offsets }
}

/// The 8 vectors of 32 quants (0..63, offset by 32 in the dot product) of a block, in the
/// order of the activations they multiply.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn quants(x: &Q6K) -> [__m256i; 8] {
    let m4 = _mm256_set1_epi8(0xF);
    let m2 = _mm256_set1_epi8(3);
    let mut out = [_mm256_setzero_si256(); 8];
    for j in 0..2 {
        let low1 = _mm256_loadu_si256(x.ql.as_ptr().add(64 * j).cast());
        let low2 = _mm256_loadu_si256(x.ql.as_ptr().add(64 * j + 32).cast());
        let high = _mm256_loadu_si256(x.qh.as_ptr().add(32 * j).cast());
        let high_at = |shift: i32| {
            let bits = match shift {
                0 => high,
                2 => _mm256_srli_epi16(high, 2),
                4 => _mm256_srli_epi16(high, 4),
                _ => _mm256_srli_epi16(high, 6),
            };
            _mm256_slli_epi16(_mm256_and_si256(bits, m2), 4)
        };
        out[4 * j] = _mm256_or_si256(_mm256_and_si256(low1, m4), high_at(0));
        out[4 * j + 1] = _mm256_or_si256(_mm256_and_si256(low2, m4), high_at(2));
        out[4 * j + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(low1, 4), m4), high_at(4));
        out[4 * j + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(low2, 4), m4), high_at(6));
    }
    out
}

super::dot_rows_in_groups!(Q6K, Q8KOffsets);

/// [`dot_rows`] for a group of `R` rows, each weight block unpacked once for all of them.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_group<const R: usize>(column: &[Q6K], acts: &[Q8KOffsets], blocks_per_row: usize, out: &mut [f32]) {
    debug_assert!(out.len() == R && acts.len() == R * blocks_per_row && column.len() == blocks_per_row);
    let mut acc = [_mm256_setzero_ps(); R];
    for (b, x) in column.iter().enumerate() {
        let xd = super::f32_of(x.d);
        let quants = quants(x);
        // Each 32 quants span two sub-blocks of 16, each with its own scale.
        let scales: [__m256i; 8] = std::array::from_fn(|i| {
            let (low, high) = (x.scales[2 * i] as i16, x.scales[2 * i + 1] as i16);
            _mm256_set_m128i(_mm_set1_epi16(high), _mm_set1_epi16(low))
        });
        for r in 0..R {
            let Q8KOffsets { y, offsets } = &acts[r * blocks_per_row + b];
            let d = y.d * xd;
            let mut sumi = _mm256_setzero_si256();
            for i in 0..8 {
                let q8 = _mm256_loadu_si256(y.qs.as_ptr().add(32 * i).cast());
                let offset = _mm256_loadu_si256(offsets[i].as_ptr().cast());
                let p16 = _mm256_sub_epi16(_mm256_maddubs_epi16(quants[i], q8), offset);
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(scales[i], p16));
            }
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc[r]);
        }
    }
    for (r, out) in out.iter_mut().enumerate() {
        *out = super::hsum_float_8(acc[r]);
    }
}
