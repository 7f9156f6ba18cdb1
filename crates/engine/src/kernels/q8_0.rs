//! Q8_0 × Q8_0, AVX2 (the draft's output layer, and any Q8_0 model): per weight block the
//! absolute values are taken once; each row then costs a `sign`, a `maddubs`, a `madd`, a
//! conversion and an `fma`. Per row, the operations are those of candle's
//! `avx::vec_dot_q8_0_q8_0`, in its order.

use super::Q8_0;
use std::arch::x86_64::*;

super::dot_rows_in_groups!(Q8_0, Q8_0);

/// [`dot_rows`] for a group of `R` rows, each weight block loaded once for all of them.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_group<const R: usize>(column: &[Q8_0], acts: &[Q8_0], blocks_per_row: usize, out: &mut [f32]) {
    debug_assert!(out.len() == R && acts.len() == R * blocks_per_row && column.len() == blocks_per_row);
    let ones = _mm256_set1_epi16(1);
    let mut acc = [_mm256_setzero_ps(); R];
    for (b, x) in column.iter().enumerate() {
        let xd = super::f32_of(x.d);
        let qx = _mm256_loadu_si256(x.qs.as_ptr().cast());
        // maddubs multiplies unsigned by signed bytes: move the weights' signs to the rows.
        let abs_x = _mm256_sign_epi8(qx, qx);
        for r in 0..R {
            let y = &acts[r * blocks_per_row + b];
            let d = _mm256_set1_ps(xd * super::f32_of(y.d));
            let qy = _mm256_loadu_si256(y.qs.as_ptr().cast());
            let pairs = _mm256_madd_epi16(ones, _mm256_maddubs_epi16(abs_x, _mm256_sign_epi8(qy, qx)));
            acc[r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(pairs), acc[r]);
        }
    }
    for (r, out) in out.iter_mut().enumerate() {
        *out = super::hsum_float_8(acc[r]);
    }
}
