//! The definition of what every kernel computes, written as plainly as possible over the
//! weights as GGUF stores them (not the repacked layout): the oracle the tests hold every path
//! to, bit for bit.
//!
//! For each output (activation row r, weight row c) and each block of the row:
//! 1. an exact integer sum of the block: the quants times the 8-bit activations, each
//!    sub-block's sum times its integer scale, minus the offsets the format implies;
//! 2. one rounding step into the float accumulator, `acc = fma(d_w · d_y, isum as f32, acc)`
//!    (Q4_K also `acc = fma(-(dmin_w · d_y), imin as f32, acc)` for its mins), in block order.
//!
//! Step 1 is exact whatever the order of its additions, so SIMD kernels may sum in any
//! order; step 2 is a fixed sequence of single roundings per output. A row's result therefore
//! never depends on the other rows of its call, nor on the instruction set that computed it.

use super::{Q4K, Q5_0, Q6K, Q8K, Q8_0};

/// The 6-bit scales and mins of a Q4_K block (ggml's `get_scale_min_k4`).
pub fn q4k_scales_and_mins(packed: &[u8; 12]) -> ([u8; 8], [u8; 8]) {
    let (mut scales, mut mins) = ([0u8; 8], [0u8; 8]);
    for j in 0..8 {
        if j < 4 {
            scales[j] = packed[j] & 63;
            mins[j] = packed[j + 4] & 63;
        } else {
            scales[j] = (packed[j + 4] & 0xF) | ((packed[j - 4] >> 6) << 4);
            mins[j] = (packed[j + 4] >> 4) | ((packed[j] >> 6) << 4);
        }
    }
    (scales, mins)
}

/// Q4_K quant `i` (0..256) of a block, 0..15.
pub fn q4k_quant(x: &Q4K, i: usize) -> i32 {
    let byte = x.qs[32 * (i / 64) + i % 32];
    i32::from(if (i / 32).is_multiple_of(2) { byte & 0xF } else { byte >> 4 })
}

pub fn q4k_row(x: &[Q4K], y: &[Q8K]) -> f32 {
    let mut acc = 0f32;
    for (x, y) in x.iter().zip(y) {
        let (scales, mins) = q4k_scales_and_mins(&x.scales);
        let isum: i32 = (0..8)
            .map(|j| {
                i32::from(scales[j])
                    * (0..32).map(|i| q4k_quant(x, 32 * j + i) * i32::from(y.qs[32 * j + i])).sum::<i32>()
            })
            .sum();
        let imin: i32 =
            (0..8).map(|j| i32::from(mins[j]) * (i32::from(y.bsums[2 * j]) + i32::from(y.bsums[2 * j + 1]))).sum();
        acc = (x.d.to_f32() * y.d).mul_add(isum as f32, acc);
        acc = (-(x.dmin.to_f32() * y.d)).mul_add(imin as f32, acc);
    }
    acc
}

/// Q6_K quant `i` (0..256) of a block, 0..63 (the format subtracts 32).
pub fn q6k_quant(x: &Q6K, i: usize) -> i32 {
    let (n, rest) = (i / 128, i % 128);
    let (quarter, l) = (rest / 32, rest % 32);
    let low = x.ql[64 * n + 32 * (quarter % 2) + l];
    let low = if quarter < 2 { low & 0xF } else { low >> 4 };
    let high = (x.qh[32 * n + l] >> (2 * quarter)) & 3;
    i32::from(low | (high << 4))
}

pub fn q6k_row(x: &[Q6K], y: &[Q8K]) -> f32 {
    let mut acc = 0f32;
    for (x, y) in x.iter().zip(y) {
        let isum: i32 = (0..16)
            .map(|j| {
                let sub: i32 = (0..16).map(|i| (q6k_quant(x, 16 * j + i) - 32) * i32::from(y.qs[16 * j + i])).sum();
                i32::from(x.scales[j]) * sub
            })
            .sum();
        acc = (x.d.to_f32() * y.d).mul_add(isum as f32, acc);
    }
    acc
}

/// Q5_0 quant `i` (0..32), 0..31 (the format subtracts 16).
pub fn q5_0_quant(x: &Q5_0, i: usize) -> i32 {
    let nibble = (x.qs[i % 16] >> (4 * (i / 16))) & 0xF;
    let fifth = (u32::from_le_bytes(x.qh) >> i) & 1;
    i32::from(nibble) | (fifth as i32) << 4
}

pub fn q5_0_row(x: &[Q5_0], y: &[Q8_0]) -> f32 {
    let mut acc = 0f32;
    for (x, y) in x.iter().zip(y) {
        let isum: i32 = (0..32).map(|i| (q5_0_quant(x, i) - 16) * i32::from(y.qs[i])).sum();
        acc = (x.d.to_f32() * y.d.to_f32()).mul_add(isum as f32, acc);
    }
    acc
}

pub fn q8_0_row(x: &[Q8_0], y: &[Q8_0]) -> f32 {
    let mut acc = 0f32;
    for (x, y) in x.iter().zip(y) {
        let isum: i32 = (0..32).map(|i| i32::from(x.qs[i]) * i32::from(y.qs[i])).sum();
        acc = (x.d.to_f32() * y.d.to_f32()).mul_add(isum as f32, acc);
    }
    acc
}
