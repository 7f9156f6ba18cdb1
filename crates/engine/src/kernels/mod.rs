//! Multi-row CPU matmul kernels: each weight block is read and unpacked once, then multiplied
//! with every activation row of the call (the k+1 rows of a verification pass).
//!
//! candle's generic `k_quants::matmul` runs a full `vec_dot` per (row, column), so a block is
//! unpacked and its scales decoded again for every row and a pass over n rows costs nearly n
//! times the arithmetic (PROFILE.md). Here the per-row work is only the multiply-adds.
//!
//! Exactness: every kernel computes a row's dot product with the same instructions in the
//! same order whatever the number of rows, so a row never depends on its batch. For Q4_K, Q6_K
//! and Q8_0 these are exactly the operations of candle's AVX2 `vec_dot`, so results are
//! bit-identical to candle's; Q5_0 (where candle has only a scalar kernel) sums its exact
//! integer block products in another float order. The tests check all of this.
//!
//! Dispatch is at run time: AVX2 + FMA + F16C use these kernels; any other CPU, and any other weight
//! type, keep candle's generic path ([`matmul`] answers `false`).

// Off x86-64 the kernels are not compiled, and with them the uses of the driver below.
#![cfg_attr(not(target_arch = "x86_64"), allow(dead_code, unused_imports, unused_macros))]

#[cfg(target_arch = "x86_64")]
mod q4k;
#[cfg(target_arch = "x86_64")]
mod q5_0;
#[cfg(target_arch = "x86_64")]
mod q6k;
#[cfg(target_arch = "x86_64")]
mod q8_0;

use candle_core::quantized::k_quants::{BlockQ8K, BlockQ8_0, GgmlType};
use candle_core::quantized::GgmlDType;
use half::f16;

/// Activation rows per work item: longer prompts are cut into tiles of this many rows, which
/// stay in cache while a thread walks the columns.
pub const ROW_TILE: usize = 32;

/// Rows multiplied together per unpacked weight block, their accumulators held in registers
/// (the kernels are instantiated for each count up to this). A tile's rows are split into
/// near-equal groups of at most this many.
const MAX_GROUP: usize = 8;

/// Defines a kernel file's `dot_rows` (what [`run`] calls for one column and one tile of rows):
/// the tile's rows in near-equal groups of at most `MAX_GROUP`, each handed to the file's
/// `dot_group::<R>` with R a compile-time constant, so its loops over rows unroll.
macro_rules! dot_rows_in_groups {
    ($weight:ty, $act:ty) => {
        /// `out[r] = Σ_blocks column · row r` for the rows of one tile, in groups of rows.
        ///
        /// # Safety
        /// The CPU must have AVX2, FMA and F16C; `acts` holds `out.len()` rows of
        /// `blocks_per_row` blocks and `column` one row of weights of as many blocks.
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(super) unsafe fn dot_rows(column: &[$weight], acts: &[$act], blocks_per_row: usize, out: &mut [f32]) {
            let rows = out.len();
            let groups = rows.div_ceil(super::MAX_GROUP);
            let mut start = 0;
            for g in 0..groups {
                let len = (rows - start) / (groups - g);
                let acts = &acts[start * blocks_per_row..(start + len) * blocks_per_row];
                let out = &mut out[start..start + len];
                match len {
                    1 => dot_group::<1>(column, acts, blocks_per_row, out),
                    2 => dot_group::<2>(column, acts, blocks_per_row, out),
                    3 => dot_group::<3>(column, acts, blocks_per_row, out),
                    4 => dot_group::<4>(column, acts, blocks_per_row, out),
                    5 => dot_group::<5>(column, acts, blocks_per_row, out),
                    6 => dot_group::<6>(column, acts, blocks_per_row, out),
                    7 => dot_group::<7>(column, acts, blocks_per_row, out),
                    8 => dot_group::<8>(column, acts, blocks_per_row, out),
                    _ => unreachable!("groups hold 1 to MAX_GROUP rows"),
                }
                start += len;
            }
        }
    };
}
#[cfg(target_arch = "x86_64")]
use dot_rows_in_groups;

/// Whether this CPU runs the kernels here: AVX2, FMA and F16C (checked once).
pub fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static AVX2_FMA: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *AVX2_FMA.get_or_init(|| {
            is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c")
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Whether a weight type has a multi-row kernel on this CPU.
pub fn has_kernel(dtype: GgmlDType) -> bool {
    available() && matches!(dtype, GgmlDType::Q4K | GgmlDType::Q6K | GgmlDType::Q5_0 | GgmlDType::Q8_0)
}

/// `dst[m, n] = lhs[m, k] · W[n, k]ᵀ` for the weight bytes of a CPU `QTensor` of `dtype`.
/// Returns `Ok(false)` (and leaves `dst` alone) when no kernel here handles `dtype`.
pub fn matmul(
    dtype: GgmlDType,
    (m, k, n): (usize, usize, usize),
    lhs: &[f32],
    weights: &[u8],
    dst: &mut [f32],
) -> candle_core::Result<bool> {
    if !has_kernel(dtype) {
        return Ok(false);
    }
    if lhs.len() != m * k || dst.len() != m * n {
        candle_core::bail!("matmul sizes: lhs {} dst {} for ({m}, {k}, {n})", lhs.len(), dst.len());
    }
    #[cfg(target_arch = "x86_64")]
    match dtype {
        GgmlDType::Q4K => {
            run::<BlockQ8K, Q8K, _, _>((m, k, n), lhs, blocks_of(weights)?, dst, Q8K::clone, q4k::dot_rows)
        }
        GgmlDType::Q6K => {
            run::<BlockQ8K, Q8K, _, _>((m, k, n), lhs, blocks_of(weights)?, dst, q6k::prepare, q6k::dot_rows)
        }
        GgmlDType::Q5_0 => {
            run::<BlockQ8_0, Q8_0, _, _>((m, k, n), lhs, blocks_of(weights)?, dst, q5_0::prepare, q5_0::dot_rows)
        }
        GgmlDType::Q8_0 => {
            run::<BlockQ8_0, Q8_0, _, _>((m, k, n), lhs, blocks_of(weights)?, dst, Q8_0::clone, q8_0::dot_rows)
        }
        _ => unreachable!("has_kernel admits only the types above"),
    }?;
    Ok(true)
}

/// One column's dot products with a tile of rows: `(weight blocks of the column, activation
/// blocks of the tile's rows, blocks per row, one output per row)`.
/// Unsafe because it may only be called where [`available`] is true.
type DotRows<W, A> = unsafe fn(&[W], &[A], usize, &mut [f32]);

/// Quantizes the activation rows once (candle's `Act` blocks, seen as their mirror `M`) and
/// prepares them for the kernel (per-row sums it would otherwise recompute for every column),
/// then splits (row tile, column) items over candle's thread pool, row-tile major so one tile
/// of activations stays hot in cache.
fn run<Act: GgmlType, M, A: Sync, W: Sync>(
    (m, k, n): (usize, usize, usize),
    lhs: &[f32],
    weights: &[W],
    dst: &mut [f32],
    prepare: fn(&M) -> A,
    dot_rows: DotRows<W, A>,
) -> candle_core::Result<()> {
    let blocks_per_row = k / Act::BLCK_SIZE;
    if k % Act::BLCK_SIZE != 0 || weights.len() != n * blocks_per_row {
        candle_core::bail!("weights of {} blocks do not make [{n}, {k}]", weights.len());
    }
    let mut quantized = vec![Act::zeros(); m * blocks_per_row];
    for (row, out) in lhs.chunks_exact(k).zip(quantized.chunks_exact_mut(blocks_per_row)) {
        Act::from_float(row, out);
    }
    let acts: Vec<A> = cast_blocks::<Act, M>(&quantized).iter().map(prepare).collect();
    let tiles = m.div_ceil(ROW_TILE);
    let dst_ptr = dst.as_mut_ptr() as usize;
    candle_core::utils::barrier_pool().execute_chunked(tiles * n, |items| {
        let mut out = [0f32; ROW_TILE];
        for item in items {
            let (tile, column) = (item / n, item % n);
            let rows = tile * ROW_TILE..m.min((tile + 1) * ROW_TILE);
            let out = &mut out[..rows.len()];
            let column_blocks = &weights[column * blocks_per_row..(column + 1) * blocks_per_row];
            let tile_acts = &acts[rows.start * blocks_per_row..rows.end * blocks_per_row];
            // SAFETY: `matmul` runs only where `available()` said AVX2, FMA and F16C are present.
            unsafe { dot_rows(column_blocks, tile_acts, blocks_per_row, out) };
            for (i, row) in rows.enumerate() {
                // SAFETY: each (row, column) belongs to exactly one item, so no two workers
                // write the same element, and row * n + column < m * n = dst.len().
                unsafe { *(dst_ptr as *mut f32).add(row * n + column) = out[i] };
            }
        }
    });
    Ok(())
}

/// The blocks behind a CPU `QTensor`'s bytes, as candle's block type or this module's mirror
/// of it. Only for such bytes and such plain-data types: candle stores a CPU QTensor as a Vec
/// of its block type, and any bit pattern is a valid value of these integer/float structs.
pub(crate) fn blocks_of<T>(bytes: &[u8]) -> candle_core::Result<&[T]> {
    let size = std::mem::size_of::<T>();
    if bytes.as_ptr().align_offset(std::mem::align_of::<T>()) != 0 || bytes.len() % size != 0 {
        candle_core::bail!("weight bytes ({}) are not whole, aligned blocks of {size} bytes", bytes.len());
    }
    // SAFETY: aligned and whole (checked above), and valid values of T (see above).
    Ok(unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<T>(), bytes.len() / size) })
}

/// candle's activation blocks viewed as this module's mirror type of the same layout.
fn cast_blocks<From, To>(blocks: &[From]) -> &[To] {
    assert_eq!(std::mem::size_of::<From>(), std::mem::size_of::<To>(), "mirror type of another size");
    assert_eq!(blocks.as_ptr().align_offset(std::mem::align_of::<To>()), 0, "misaligned blocks");
    // SAFETY: same size and alignment checked above; the mirrors are plain `repr(C)` data.
    unsafe { std::slice::from_raw_parts(blocks.as_ptr().cast::<To>(), blocks.len()) }
}

/// The sum of 8 floats, in the order of candle's `avx::hsum_float_8` (so sums are bit-equal).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn hsum_float_8(x: std::arch::x86_64::__m256) -> f32 {
    use std::arch::x86_64::*;
    let res = _mm_add_ps(_mm256_extractf128_ps(x, 1), _mm256_castps256_ps128(x));
    let res = _mm_add_ps(res, _mm_movehl_ps(res, res));
    let res = _mm_add_ss(res, _mm_movehdup_ps(res));
    _mm_cvtss_f32(res)
}

/// f16 to f32 in one instruction. `half`'s `to_f32` is an out-of-line call behind a feature
/// check, which costs more than the rest of a Q5_0 row's work. The conversion is exact.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn f32_of(h: f16) -> f32 {
    use std::arch::x86_64::*;
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h.to_bits() as i32)))
}

// Mirrors of candle's block layouts (its fields are crate-private). They follow ggml's.

const QK_K: usize = 256;

#[repr(C)]
pub(crate) struct Q4K {
    d: f16,
    dmin: f16,
    scales: [u8; 12],
    qs: [u8; QK_K / 2],
}

#[repr(C)]
pub(crate) struct Q6K {
    ql: [u8; QK_K / 2],
    qh: [u8; QK_K / 4],
    scales: [i8; QK_K / 16],
    d: f16,
}

#[repr(C)]
pub(crate) struct Q5_0 {
    d: f16,
    qh: [u8; 4],
    qs: [u8; 16],
}

#[derive(Clone)]
#[repr(C)]
pub(crate) struct Q8K {
    d: f32,
    qs: [i8; QK_K],
    bsums: [i16; QK_K / 16],
}

#[derive(Clone)]
#[repr(C)]
pub(crate) struct Q8_0 {
    d: f16,
    qs: [i8; 32],
}

const _: () = {
    use candle_core::quantized::k_quants::{BlockQ4K, BlockQ5_0, BlockQ6K};
    use std::mem::{align_of, size_of};
    assert!(size_of::<Q4K>() == size_of::<BlockQ4K>() && align_of::<Q4K>() == align_of::<BlockQ4K>());
    assert!(size_of::<Q6K>() == size_of::<BlockQ6K>() && align_of::<Q6K>() == align_of::<BlockQ6K>());
    assert!(size_of::<Q5_0>() == size_of::<BlockQ5_0>() && align_of::<Q5_0>() == align_of::<BlockQ5_0>());
    assert!(size_of::<Q8K>() == size_of::<BlockQ8K>() && align_of::<Q8K>() == align_of::<BlockQ8K>());
    assert!(size_of::<Q8_0>() == size_of::<BlockQ8_0>() && align_of::<Q8_0>() == align_of::<BlockQ8_0>());
};

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::quantized::QTensor;
    use candle_core::{Device, Tensor};

    fn random(len: usize, seed: u64) -> Vec<f32> {
        let mut state = seed;
        (0..len)
            .map(|_| {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((state >> 33) as f32 / (1u64 << 31) as f32) - 0.5
            })
            .collect()
    }

    /// candle's generic matmul, the reference: one `vec_dot` per (row, column).
    fn reference(dtype: GgmlDType, mkn: (usize, usize, usize), lhs: &[f32], bytes: &[u8]) -> Vec<f32> {
        let mut dst = vec![0f32; mkn.0 * mkn.2];
        crate::quant::candle_matmul(dtype, mkn, lhs, bytes, &mut dst).unwrap();
        dst
    }

    /// Our result for every row count, checked against candle's reference and against the
    /// same rows multiplied one at a time.
    fn compare_with_candle(dtype: GgmlDType, check: impl Fn(&[f32], &[f32], usize)) {
        let (k, n) = (512, 36);
        let w = Tensor::from_vec(random(n * k, 1), (n, k), &Device::Cpu).unwrap();
        let w = QTensor::quantize(&w, dtype).unwrap();
        let bytes = w.data().unwrap();
        for m in [1, 2, 5, 9, 17, 33] {
            let lhs = random(m * k, m as u64 + 7);
            let mut ours = vec![0f32; m * n];
            assert!(matmul(dtype, (m, k, n), &lhs, &bytes, &mut ours).unwrap());
            check(&ours, &reference(dtype, (m, k, n), &lhs, &bytes), m);
            for (row, batched) in lhs.chunks_exact(k).zip(ours.chunks_exact(n)) {
                let mut alone = vec![0f32; n];
                assert!(matmul(dtype, (1, k, n), row, &bytes, &mut alone).unwrap());
                assert_eq!(batched, alone, "{dtype:?}: a row of a batch of {m} differs from the row alone");
            }
        }
    }

    #[test]
    fn bit_identical_to_candle_for_every_row_count() {
        if !available() {
            eprintln!("no AVX2 + FMA + F16C here: the kernels are not used, nothing to compare");
            return;
        }
        for dtype in [GgmlDType::Q4K, GgmlDType::Q6K, GgmlDType::Q8_0] {
            compare_with_candle(dtype, |ours, theirs, m| assert_eq!(ours, theirs, "{dtype:?} m = {m}"));
        }
    }

    #[test]
    fn q5_0_agrees_with_candle_up_to_float_order() {
        if !available() {
            return;
        }
        // The integer products are exact; the block sums are added in another order.
        compare_with_candle(GgmlDType::Q5_0, |ours, theirs, m| {
            for (a, b) in ours.iter().zip(theirs) {
                assert!((a - b).abs() <= 1e-5 * (1.0 + b.abs()), "m = {m}: {a} vs {b}");
            }
        });
    }

    #[test]
    fn other_types_are_left_to_candle() {
        let mut dst = [0f32; 1];
        assert!(!matmul(GgmlDType::Q4_0, (1, 32, 1), &[0.0; 32], &[0; 18], &mut dst).unwrap());
    }

    #[test]
    fn a_weight_of_the_wrong_size_is_an_error() {
        if available() {
            let mut dst = [0f32; 2];
            let one_block = vec![0u16; 11];
            let bytes: &[u8] = cast_blocks::<u16, [u8; 2]>(&one_block).as_flattened();
            assert!(matmul(GgmlDType::Q5_0, (1, 32, 2), &[0.0; 32], bytes, &mut dst).is_err());
        }
    }
}
