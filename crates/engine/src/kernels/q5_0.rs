//! Q5_0 in groups of 8 rows: per block of 32, the nibble bytes of the 8 rows interleaved 4
//! bytes at a time (as the file has them: low nibbles quants 0..16, high nibbles 16..32), the
//! fifth bits regrouped by k-group (bit `4c + t` of word g is byte `4c + t`'s, so AVX-512
//! turns a word into its bytes with one masked move), and the 8 f16 factors.

use super::reference::q5_0_quant;
use super::{Path, ZeroBlock, COLS, Q5_0};
use half::f16;

#[derive(Clone)]
#[repr(C)]
pub struct Group {
    /// `[k-group g][lane c · 4 + t]` = byte `qs[4g + t]` of row c: low nibble quant `4g + t`,
    /// high nibble quant `16 + 4g + t`.
    pub qs: [[u8; 32]; 4],
    /// `[k-group g]`: bit `4c + t` is the fifth bit of quant `4g + t` of row c.
    pub fifth: [u32; 8],
    pub d: [f16; COLS],
}

pub use super::q8_0::Act;

impl ZeroBlock for Q5_0 {
    const ELEMENTS: usize = 32;
    fn zero() -> Self {
        Q5_0 { d: f16::ZERO, qh: [0; 4], qs: [0; 16] }
    }
}

pub fn pack(rows: &[&Q5_0; COLS]) -> Group {
    let mut group = Group { qs: [[0; 32]; 4], fifth: [0; 8], d: [f16::ZERO; COLS] };
    for (c, row) in rows.iter().enumerate() {
        for g in 0..4 {
            group.qs[g][4 * c..4 * c + 4].copy_from_slice(&row.qs[4 * g..4 * g + 4]);
        }
        let qh = u32::from_le_bytes(row.qh);
        for (g, word) in group.fifth.iter_mut().enumerate() {
            *word |= ((qh >> (4 * g)) & 0xF) << (4 * c);
        }
        group.d[c] = row.d;
    }
    group
}

pub fn unpack(group: &Group, lane: usize) -> Q5_0 {
    let mut qs = [0u8; 16];
    for g in 0..4 {
        qs[4 * g..4 * g + 4].copy_from_slice(&group.qs[g][4 * lane..4 * lane + 4]);
    }
    let qh = (0..8).fold(0u32, |qh, g| qh | ((group.fifth[g] >> (4 * lane)) & 0xF) << (4 * g));
    Q5_0 { d: group.d[lane], qh: qh.to_le_bytes(), qs }
}

pub use super::q8_0::prepare;

pub fn dot(path: Path, groups: &[Group], acts: &[Act], blocks: usize, out: &mut [[f32; COLS]]) {
    #[cfg(target_arch = "x86_64")]
    if path != Path::Scalar {
        return super::x86::q5_0(path, groups, acts, blocks, out);
    }
    let _ = path;
    dot_scalar(groups, acts, blocks, out)
}

/// The canonical arithmetic of `reference::q5_0_row` over the packed layout:
/// `Σ q·y - 16 · Σ y` per block.
fn dot_scalar(groups: &[Group], acts: &[Act], blocks: usize, out: &mut [[f32; COLS]]) {
    for (r, out) in out.iter_mut().enumerate() {
        let mut acc = [0f32; COLS];
        for (b, w) in groups.iter().enumerate() {
            let y = &acts[r * blocks + b];
            for (c, acc) in acc.iter_mut().enumerate() {
                let block = unpack(w, c);
                let biased: i32 = (0..32).map(|i| q5_0_quant(&block, i) * i32::from(y.qs[i])).sum();
                let isum = biased - 16 * y.sum;
                *acc = (w.d[c].to_f32() * y.d).mul_add(isum as f32, *acc);
            }
        }
        *out = acc;
    }
}
