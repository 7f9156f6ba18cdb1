//! Causal attention of new queries over a [`KvCache`].
//!
//! On the CPU a custom op gives each query row its own arithmetic in a fixed order (rows are
//! worked on in blocks, but no row's sums mix with another's), so a row's output is the same
//! whether it is verified in a batch of k+1 or decoded alone (see `quant.rs` for why that
//! matters). It also reads the cache in place, with grouped-query
//! heads mapped by index instead of materialised copies. Other devices use candle's ops.

use crate::error::Result;
use crate::kv_cache::KvCache;
use candle_core::{CpuStorage, CustomOp3, DType, Layout, Shape, Tensor, D};

/// `q`: `[n_head, n, head_dim]` for positions `pos .. pos + n`, whose keys and values are
/// already in `cache`. With a sliding `window`, position p sees only the `window` positions
/// ending at p (llama.cpp's standard SWA). Returns `[n, n_head * head_dim]`.
pub fn causal_attention(q: &Tensor, cache: &KvCache, pos: usize, window: Option<usize>) -> Result<Tensor> {
    let (k, v) = cache.buffers();
    let window = window.unwrap_or(usize::MAX);
    if q.device().is_cpu() {
        let op = RowExactAttention { pos, kv_len: cache.len(), window };
        Ok(q.contiguous()?.apply_op3_no_bwd(k, v, &op)?)
    } else {
        tensor_attention(q, k, v, pos, cache.len(), window)
    }
}

/// The first position that query position `p` attends to.
fn window_start(p: usize, window: usize) -> usize {
    (p + 1).saturating_sub(window)
}

/// The same computation in candle's tensor ops, for devices without the custom op.
pub fn tensor_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    pos: usize,
    kv_len: usize,
    window: usize,
) -> Result<Tensor> {
    let (n_head, n, head_dim) = q.dims3()?;
    let n_kv_head = k.dims()[0];
    // An f16 cache is widened for the matmuls with the f32 queries: its live rows only.
    let live = |t: &Tensor| t.narrow(1, 0, kv_len)?.to_dtype(DType::F32);
    let (k, v) = (&live(k)?, &live(v)?);
    let group = n_head / n_kv_head;
    let repeat = |t: &Tensor| -> candle_core::Result<Tensor> {
        let t = t.narrow(1, 0, kv_len)?;
        // [n_kv, kv, d] -> [n_kv, group, kv, d] -> [n_head, kv, d]
        t.unsqueeze(1)?.broadcast_as((n_kv_head, group, kv_len, head_dim))?.reshape((n_head, kv_len, head_dim))
    };
    let (k, v) = (repeat(k)?, repeat(v)?);
    let scale = 1.0 / (head_dim as f64).sqrt();
    let scores = (q.contiguous()?.matmul(&k.t()?)? * scale)?;
    let visible = |i: usize, j: usize| j <= pos + i && j >= window_start(pos + i, window);
    let mask: Vec<f32> =
        (0..n).flat_map(|i| (0..kv_len).map(move |j| if visible(i, j) { 0.0 } else { f32::NEG_INFINITY })).collect();
    let mask = Tensor::from_vec(mask, (1, n, kv_len), q.device())?.to_dtype(DType::F32)?;
    let probs = candle_nn::ops::softmax(&scores.broadcast_add(&mask)?, D::Minus1)?;
    let out = probs.matmul(&v.contiguous()?)?; // [n_head, n, d]
    Ok(out.transpose(0, 1)?.reshape((n, n_head * head_dim))?)
}

struct RowExactAttention {
    pos: usize,
    kv_len: usize,
    window: usize,
}

impl CustomOp3 for RowExactAttention {
    fn name(&self) -> &'static str {
        "row-exact-attention"
    }

    fn cpu_fwd(
        &self,
        q: &CpuStorage,
        lq: &Layout,
        k: &CpuStorage,
        lk: &Layout,
        v: &CpuStorage,
        lv: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (n_head, n, head_dim) = lq.shape().dims3()?;
        let (n_kv_head, capacity, _) = lk.shape().dims3()?; // rows of keys in the buffer
        if !lk.is_contiguous() || !lv.is_contiguous() || self.pos + n > self.kv_len || self.kv_len > capacity {
            candle_core::bail!("attention: bad cache layout or length")
        }
        let q = &q.as_slice::<f32>()?[lq.start_offset()..];
        let shape = Shape::from((n, n_head * head_dim));
        let dims = (n_head, n, head_dim);
        let out = match (k, v) {
            (CpuStorage::F32(k), CpuStorage::F32(v)) => {
                self.attend(q, &k[lk.start_offset()..], &v[lv.start_offset()..], dims, n_kv_head, capacity)
            }
            (CpuStorage::F16(k), CpuStorage::F16(v)) => {
                self.attend_stored(q, &k[lk.start_offset()..], &v[lv.start_offset()..], dims, n_kv_head, capacity)
            }
            (CpuStorage::U8(k), CpuStorage::U8(v)) => {
                let (k, v) = (Q8_0::blocks(&k[lk.start_offset()..]), Q8_0::blocks(&v[lv.start_offset()..]));
                self.attend_stored(q, k, v, dims, n_kv_head, capacity)
            }
            _ => candle_core::bail!("attention: keys and values of another type"),
        };
        Ok((CpuStorage::F32(out), shape))
    }
}

impl RowExactAttention {
    /// Attention over keys and values stored narrower than f32. A batch (a prefill chunk, a
    /// verification) widens the live rows once here, not once per query row; one query reads
    /// them in place. The same values either way, so the same bits.
    fn attend_stored<T: Rows>(
        &self,
        q: &[f32],
        k: &[T],
        v: &[T],
        dims: (usize, usize, usize),
        n_kv_head: usize,
        capacity: usize,
    ) -> Vec<f32> {
        let (_, n, head_dim) = dims;
        match n > 1 {
            true => {
                let widen = |rows: &[T]| widened(rows, n_kv_head, capacity, self.kv_len, head_dim);
                let (k, v) = (widen(k), widen(v));
                self.attend(q, &k, &v, dims, n_kv_head, self.kv_len)
            }
            false => self.attend(q, k, v, dims, n_kv_head, capacity),
        }
    }

    /// Every query row over the cache's keys and values (stored as `T`), `[n, n_head * d]`.
    fn attend<T: Rows>(
        &self,
        q: &[f32],
        k: &[T],
        v: &[T],
        (n_head, n, head_dim): (usize, usize, usize),
        n_kv_head: usize,
        capacity: usize,
    ) -> Vec<f32> {
        let group = n_head / n_kv_head;
        let scale = 1.0 / (head_dim as f32).sqrt();
        let row = T::units(head_dim);
        let mut out = vec![0f32; n * n_head * head_dim];
        let out_ptr = out.as_mut_ptr() as usize;
        // An item is a block of query positions, one kv head and a run of the query heads that
        // share it: the kv head's cached keys and values are read once for the block and the
        // run, not once per position and query head (at 1,500 positions a kv head's are 1.5 MB,
        // past a core's L2). Runs are only shortened to give every thread an item; a head's
        // arithmetic is the same in any block and run, so no bit depends on the split.
        let threads = crate::kernels::pool_threads();
        let blocks = n.div_ceil(QUERY_BLOCK);
        let runs = threads.div_ceil(blocks * n_kv_head).clamp(1, group);
        let run_len = group.div_ceil(runs);
        let runs = group.div_ceil(run_len);
        let attend = |items: std::ops::Range<usize>| {
            let mut scratch = Scratch::default();
            for idx in items {
                let (block, rest) = (idx / (n_kv_head * runs), idx % (n_kv_head * runs));
                let (kv_head, run) = (rest / runs, rest % runs);
                let first = kv_head * group + run * run_len;
                let count = run_len.min((kv_head + 1) * group - first);
                let positions = block * QUERY_BLOCK..n.min((block + 1) * QUERY_BLOCK);
                let mut queries: Vec<Query> = positions
                    .map(|i| {
                        let p = self.pos + i;
                        let start = window_start(p, self.window);
                        let heads = QueryHeads { q: &q[(first * n + i) * head_dim..], stride: n * head_dim, count };
                        // SAFETY: the heads `first .. first + count` of query `i` are this item's
                        // alone, contiguous in the output `[n, n_head, head_dim]`.
                        let out = unsafe {
                            let at = (out_ptr as *mut f32).add((i * n_head + first) * head_dim);
                            std::slice::from_raw_parts_mut(at, count * head_dim)
                        };
                        Query { heads, start, end: p + 1, out }
                    })
                    .collect();
                // The block's last position sees the furthest.
                let end = queries.last().map_or(0, |query| query.end);
                let keys = &k[kv_head * capacity * row..][..end * row];
                let values = &v[kv_head * capacity * row..][..end * row];
                attend_block(&Cached { keys, values, scale, d: head_dim }, &mut queries, &mut scratch);
            }
        };
        // On the matmuls' pool (whose worker is spinning between them; rayon's sleeping
        // threads had to be woken three times a layer), unless the work is too small to share.
        let items = blocks * n_kv_head * runs;
        match n * n_head * self.kv_len * head_dim >= PARALLEL_WORK {
            true => crate::kernels::parallel_items(items, 1, attend),
            false => attend(0..items),
        }
        out
    }
}

/// The first `len` of each head's `capacity` rows of `d`, as f32: `[heads, len, d]`.
fn widened<T: Rows>(rows: &[T], heads: usize, capacity: usize, len: usize, d: usize) -> Vec<f32> {
    let mut out = vec![0f32; heads * len * d];
    for (head, dst) in out.chunks_exact_mut(len * d).enumerate() {
        T::widen_into(&rows[head * capacity * T::units(d)..], 0, len, d, dst);
    }
    out
}

/// How cached keys and values are stored: f32 as they are; f16 and q8_0 widened a block at a
/// time as they are read, the same way whatever the batch, so a row's result still never
/// depends on it. An f16 cache reads half the bytes, a q8_0 cache about a quarter.
pub trait Rows: Copy + Send + Sync + 'static {
    /// Elements of `Self` that a row of `d` values takes.
    #[inline(always)]
    fn units(d: usize) -> usize {
        d
    }

    /// `count` rows of `d` from row `from` of `rows`, as f32 into `dst` (`count * d` long).
    fn widen_into(rows: &[Self], from: usize, count: usize, d: usize, dst: &mut [f32]);

    /// `count` rows of `d` from row `from` of `rows`, as f32: widened into `buf` (f32 rows
    /// are a view instead).
    #[inline(always)]
    fn rows_f32<'a>(rows: &'a [Self], from: usize, count: usize, d: usize, buf: &'a mut Vec<f32>) -> &'a [f32] {
        buf.resize(count * d, 0.0);
        Self::widen_into(rows, from, count, d, buf);
        &buf[..]
    }
}

impl Rows for f32 {
    #[inline(always)]
    fn widen_into(rows: &[Self], from: usize, count: usize, d: usize, dst: &mut [f32]) {
        dst.copy_from_slice(&rows[from * d..][..count * d]);
    }

    #[inline(always)]
    fn rows_f32<'a>(rows: &'a [Self], from: usize, count: usize, d: usize, _: &'a mut Vec<f32>) -> &'a [f32] {
        &rows[from * d..][..count * d]
    }
}

/// One q8_0 block: an f16 scale and 32 signed bytes (34 bytes, byte-aligned, as the cache's
/// u8 buffers hold them).
#[derive(Clone, Copy)]
#[repr(C)]
pub struct Q8_0([u8; specula_protocol::Q8_0_BLOCK_BYTES]);

impl Q8_0 {
    /// A buffer of whole blocks seen as blocks.
    fn blocks(bytes: &[u8]) -> &[Q8_0] {
        let count = bytes.len() / std::mem::size_of::<Q8_0>();
        // SAFETY: `Q8_0` is a byte array (alignment 1, no invalid values); `count` blocks fit.
        unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<Q8_0>(), count) }
    }
}

impl Rows for Q8_0 {
    #[inline(always)]
    fn units(d: usize) -> usize {
        d / specula_protocol::Q8_0_BLOCK
    }

    #[inline(always)]
    fn widen_into(rows: &[Self], from: usize, count: usize, d: usize, dst: &mut [f32]) {
        let blocks = &rows[from * Self::units(d)..][..count * Self::units(d)];
        // SAFETY: blocks are byte arrays laid end to end, so a run of them is a run of bytes.
        let bytes = unsafe { std::slice::from_raw_parts(blocks.as_ptr().cast::<u8>(), std::mem::size_of_val(blocks)) };
        crate::kv_cache::dequantize_q8_0(bytes, dst);
    }
}

impl Rows for half::f16 {
    #[inline(always)]
    fn widen_into(rows: &[Self], from: usize, count: usize, d: usize, dst: &mut [f32]) {
        use half::slice::HalfFloatSliceExt;
        rows[from * d..][..count * d].convert_to_f32_slice(dst);
    }
}

/// Query positions an item attends for together. Each cached key and value row is read from
/// memory once for the block instead of once per position: in a prefill at depth that reading,
/// not the arithmetic, set attention's pace. Sixteen positions' query heads and outputs (6 heads
/// of 128 floats each: 96 KB) stay in the L2 while the rows stream past.
const QUERY_BLOCK: usize = 16;

/// One kv head's cached keys and values (rows `0 .. end` of the block's last query, as `T`).
#[derive(Clone, Copy)]
struct Cached<'a, T> {
    keys: &'a [T],
    values: &'a [T],
    scale: f32,
    d: usize,
}

/// A query position of a block: its heads that share the kv head, the cached positions
/// `start .. end` it sees, and where its heads' outputs go (`heads.count × d`).
struct Query<'a> {
    heads: QueryHeads<'a>,
    start: usize,
    end: usize,
    out: &'a mut [f32],
}

impl Query<'_> {
    /// The part of `from .. to` this query sees, if any.
    fn overlap(&self, from: usize, to: usize) -> Option<(usize, usize)> {
        let (from, to) = (from.max(self.start), to.min(self.end));
        (from < to).then_some((from, to))
    }
}

/// `count` query heads of one position that share a kv head: head `g` at `q[g * stride..]`.
#[derive(Clone, Copy)]
struct QueryHeads<'a> {
    q: &'a [f32],
    stride: usize,
    count: usize,
}

impl QueryHeads<'_> {
    #[inline(always)]
    fn head(&self, g: usize, d: usize) -> &[f32] {
        &self.q[g * self.stride..][..d]
    }
}

/// A thread's buffers, kept from item to item: the block's scores (see `softmax_numerators`),
/// each lane's maximum and then 1 / its sum, rows widened from the cache.
#[derive(Default)]
struct Scratch {
    scores: Vec<f32>,
    inverse_sums: Vec<f32>,
    widened: Vec<f32>,
    padded: Vec<f32>,
}

/// Multiply-adds from which attention is split over threads: the target's decoding from about
/// 170 cached positions on (below, a split's hand-over costs about what it saves).
const PARALLEL_WORK: usize = 1 << 18;

/// Each query head of the block over the cached positions it sees: softmax(q·k / sqrt(d)) · v
/// into its `out`. Each key and value row is loaded once for all the block's heads. With FMA
/// (checked once per process) the same arithmetic in fused multiply-adds on AVX2 registers; a
/// process keeps one path, and a score, a softmax and a weighted sum each run in position order
/// whatever the block, so a row's result never depends on its batch.
fn attend_block<T: Rows>(cached: &Cached<T>, queries: &mut [Query], scratch: &mut Scratch) {
    #[cfg(target_arch = "x86_64")]
    if crate::lanes::has_avx2_fma() {
        // SAFETY: the CPU has AVX2 and FMA (checked above).
        return unsafe { attend_block_fma(cached, queries, scratch) };
    }
    attend_block_with::<false, T>(cached, queries, scratch)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn attend_block_fma<T: Rows>(cached: &Cached<T>, queries: &mut [Query], scratch: &mut Scratch) {
    attend_block_with::<true, T>(cached, queries, scratch)
}

#[inline(always)]
fn attend_block_with<const FMA: bool, T: Rows>(cached: &Cached<T>, queries: &mut [Query], scratch: &mut Scratch) {
    // No `mul_add` in closures: a closure is compiled without the caller's target features,
    // and `mul_add` there becomes a call to libm's `fmaf` (the closures below only multiply
    // or copy).
    let (from, to) = span(queries);
    let lanes = queries.len() * queries[0].heads.count;
    scratch.scores.resize((to - from) * lanes, 0.0);
    score_keys::<FMA, T>(cached, queries, scratch);
    softmax_numerators::<FMA>(&mut scratch.scores, lanes, &mut scratch.inverse_sums);
    weigh_values::<FMA, T>(cached, queries, scratch);
    let mut inverses = scratch.inverse_sums.iter();
    for query in queries.iter_mut() {
        for (out, inverse) in query.out.chunks_exact_mut(cached.d).zip(&mut inverses) {
            for o in out.iter_mut() {
                *o *= inverse;
            }
        }
    }
}

/// The cached positions some query of the block sees.
fn span(queries: &[Query]) -> (usize, usize) {
    let from = queries.iter().map(|query| query.start).min().unwrap_or(0);
    (from, queries.iter().map(|query| query.end).max().unwrap_or(0))
}

/// Scores are laid out by position: row `j - from` holds every query head's score of key `j`
/// (a lane per query head, query by query), so a tile of positions' weights sits together
/// in L1 beside the tile of values, and the softmax runs down the lanes side by side. A lane's
/// positions that its query does not see hold -inf: left out of its maximum, they weigh +0,
/// which leaves its sum as it was, and the values skip them.
///
/// Each lane's numerators e^(s - max) in place, and 1 / their sum in `inverse_sums`: e^x
/// correctly rounded but for a few in a million (with the 2-ulp `lanes::exp` the greedy golden
/// replies moved), summed in position order in f32 (in f64 they moved too).
#[inline(always)]
fn softmax_numerators<const FMA: bool>(scores: &mut [f32], lanes: usize, inverse_sums: &mut Vec<f32>) {
    inverse_sums.clear();
    inverse_sums.resize(lanes, f32::NEG_INFINITY);
    for row in scores.chunks_exact(lanes) {
        for (max, &s) in inverse_sums.iter_mut().zip(row) {
            *max = if s > *max { s } else { *max };
        }
    }
    for row in scores.chunks_exact_mut(lanes) {
        for (s, &max) in row.iter_mut().zip(inverse_sums.iter()) {
            *s = crate::lanes::exp_rounded::<FMA>(*s - max);
        }
    }
    inverse_sums.fill(0.0);
    for row in scores.chunks_exact(lanes) {
        for (sum, &s) in inverse_sums.iter_mut().zip(row) {
            *sum += s;
        }
    }
    for sum in inverse_sums.iter_mut() {
        *sum = 1.0 / *sum;
    }
}

/// Each query head's score of each key it sees, `q_g · k_j · scale`, into its lane of
/// `scratch.scores`, and -inf where its query does not see the key; each key row is loaded
/// once for all the block's heads.
#[inline(always)]
fn score_keys<const FMA: bool, T: Rows>(cached: &Cached<T>, queries: &[Query], scratch: &mut Scratch) {
    let Cached { keys, scale, d, .. } = *cached;
    let (from, to) = span(queries);
    let Scratch { scores, widened, padded, .. } = scratch;
    let heads = queries[0].heads.count;
    let lanes = queries.len() * heads;
    for (q, query) in queries.iter().enumerate() {
        for j in (from..query.start).chain(query.end..to) {
            scores[(j - from) * lanes + q * heads..][..heads].fill(f32::NEG_INFINITY);
        }
    }
    #[cfg(target_arch = "x86_64")]
    if FMA && d.is_multiple_of(8) {
        // Eight keys at a time: eight independent chains of fused multiply-adds, summed
        // across in one transposing tree. A lane's sum depends on its own key alone, so any
        // eight keys give it the same bits; the last few go through the same code padded with
        // zero rows.
        for first in (from..to).step_by(8) {
            let count = 8.min(to - first);
            let rows = T::rows_f32(keys, first, count, d, widened);
            let rows = match count == 8 {
                true => rows,
                false => {
                    padded.resize(8 * d, 0.0);
                    padded[..rows.len()].copy_from_slice(rows);
                    padded[rows.len()..].fill(0.0);
                    &padded[..]
                }
            };
            for (q, query) in queries.iter().enumerate() {
                let Some((a, b)) = query.overlap(first, first + count) else { continue };
                let mut store = |g: usize, eight: [f32; 8]| {
                    for j in a..b {
                        scores[(j - from) * lanes + q * heads + g] = eight[j - first] * scale;
                    }
                };
                // Two heads at a time share each key load; an odd last head goes alone.
                for g in (0..heads - heads % 2).step_by(2) {
                    // SAFETY: `FMA` is true only on the path `has_avx2_fma` chose; `rows`
                    // holds eight rows of `d`.
                    let [x, y] = unsafe { dot8x2_fma(query.heads.head(g, d), query.heads.head(g + 1, d), rows) };
                    store(g, x);
                    store(g + 1, y);
                }
                if heads % 2 == 1 {
                    // SAFETY: as above.
                    store(heads - 1, unsafe { dot8_fma(query.heads.head(heads - 1, d), rows) });
                }
            }
        }
        return;
    }
    for j in from..to {
        let key = T::rows_f32(keys, j, 1, d, widened);
        for (q, query) in queries.iter().enumerate() {
            if query.overlap(j, j + 1).is_some() {
                for g in 0..heads {
                    scores[(j - from) * lanes + q * heads + g] = dot::<FMA>(query.heads.head(g, d), key) * scale;
                }
            }
        }
    }
}

/// Each query head's output: the sum of the value rows it sees, each times its weight (the
/// softmax's numerator in `scratch.scores`), in position order. A tile of value rows and its
/// rows of weights stay in L1 while every head of the block runs over them, in strips of
/// STRIP floats held in registers.
#[inline(always)]
fn weigh_values<const FMA: bool, T: Rows>(cached: &Cached<T>, queries: &mut [Query], scratch: &mut Scratch) {
    let Cached { values, d, .. } = *cached;
    let (from, to) = span(queries);
    let Scratch { scores, widened, .. } = scratch;
    let heads = queries[0].heads.count;
    let lanes = queries.len() * heads;
    for query in queries.iter_mut() {
        query.out.fill(0.0);
    }
    for first in (from..to).step_by(TILE) {
        let count = TILE.min(to - first);
        let tile = T::rows_f32(values, first, count, d, widened);
        for (q, query) in queries.iter_mut().enumerate() {
            let Some((a, b)) = query.overlap(first, first + count) else { continue };
            let rows = &tile[(a - first) * d..(b - first) * d];
            for (g, out) in query.out.chunks_exact_mut(d).enumerate() {
                // Lane `q * heads + g` of the rows `a .. b`.
                let weights =
                    Strided { values: &scores[(a - from) * lanes + q * heads + g..], stride: lanes, len: b - a };
                for (s, strip) in out.chunks_mut(STRIP).enumerate() {
                    match strip.len() == STRIP {
                        true => accumulate_strip::<FMA>(strip.try_into().unwrap(), weights, rows, s * STRIP, d),
                        false => {
                            for (i, row) in rows.chunks_exact(d).enumerate() {
                                for (o, &x) in strip.iter_mut().zip(&row[s * STRIP..]) {
                                    *o = crate::lanes::multiply_add::<FMA>(weights.at(i), x, *o);
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// `len` values `stride` apart: a lane of the scores.
#[derive(Clone, Copy)]
struct Strided<'a> {
    values: &'a [f32],
    stride: usize,
    len: usize,
}

impl Strided<'_> {
    #[inline(always)]
    fn at(&self, i: usize) -> f32 {
        self.values[i * self.stride]
    }
}

/// `dot8_fma` for two query heads at once, four rows at a time, each row's load shared by both
/// heads: the same chains and the same tree per row, so the same bits.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot8x2_fma(q0: &[f32], q1: &[f32], rows: &[f32]) -> [[f32; 8]; 2] {
    let d = q0.len();
    assert!(q1.len() == d && rows.len() >= 8 * d);
    let ([a0, a1], [b0, b1]) = (dot4x2_fma(q0, q1, rows), dot4x2_fma(q0, q1, &rows[4 * d..]));
    let join = |x: [f32; 4], y: [f32; 4]| std::array::from_fn(|i| if i < 4 { x[i] } else { y[i - 4] });
    [join(a0, b0), join(a1, b1)]
}

/// The dot products of `q0` and of `q1` with the four rows of `rows` (`4 × d`, d a multiple of 8).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline(never)]
unsafe fn dot4x2_fma(q0: &[f32], q1: &[f32], rows: &[f32]) -> [[f32; 4]; 2] {
    use std::arch::x86_64::*;
    let d = q0.len();
    assert!(q1.len() == d && rows.len() >= 4 * d && d.is_multiple_of(8));
    let (p0, p1, pk) = (q0.as_ptr(), q1.as_ptr(), rows.as_ptr());
    let (mut x, mut y) = ([_mm256_setzero_ps(); 4], [_mm256_setzero_ps(); 4]);
    for c in (0..d).step_by(8) {
        let (u, v) = (_mm256_loadu_ps(p0.add(c)), _mm256_loadu_ps(p1.add(c)));
        for r in 0..4 {
            let k = _mm256_loadu_ps(pk.add(r * d + c));
            x[r] = _mm256_fmadd_ps(u, k, x[r]);
            y[r] = _mm256_fmadd_ps(v, k, y[r]);
        }
    }
    [sum4_fma(x), sum4_fma(y)]
}

/// Lane r: the eight lanes of `acc[r]` added as `dot8_fma` adds them, ((0+1)+(2+3))+((4+5)+(6+7)).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn sum4_fma(acc: [std::arch::x86_64::__m256; 4]) -> [f32; 4] {
    use std::arch::x86_64::*;
    let t = _mm256_hadd_ps(_mm256_hadd_ps(acc[0], acc[1]), _mm256_hadd_ps(acc[2], acc[3]));
    let sum = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps::<1>(t));
    let mut out = [0f32; 4];
    _mm_storeu_ps(out.as_mut_ptr(), sum);
    out
}

/// The dot products of `q` with the eight rows of `rows` (`8 × q.len()`, a multiple of 8).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot8_fma(q: &[f32], rows: &[f32]) -> [f32; 8] {
    use std::arch::x86_64::*;
    let d = q.len();
    assert!(rows.len() >= 8 * d && d.is_multiple_of(8));
    let (pq, pk) = (q.as_ptr(), rows.as_ptr());
    let mut acc = [_mm256_setzero_ps(); 8];
    for c in (0..d).step_by(8) {
        let qv = _mm256_loadu_ps(pq.add(c));
        for (r, acc) in acc.iter_mut().enumerate() {
            *acc = _mm256_fmadd_ps(qv, _mm256_loadu_ps(pk.add(r * d + c)), *acc);
        }
    }
    // Pairs, quads, then the two halves: lane r of the result is row r's sum.
    let pairs = |a, b| _mm256_hadd_ps(a, b);
    let (s01, s23, s45, s67) =
        (pairs(acc[0], acc[1]), pairs(acc[2], acc[3]), pairs(acc[4], acc[5]), pairs(acc[6], acc[7]));
    let (t0, t1) = (_mm256_hadd_ps(s01, s23), _mm256_hadd_ps(s45, s67));
    let sum = _mm256_add_ps(_mm256_permute2f128_ps::<0x20>(t0, t1), _mm256_permute2f128_ps::<0x31>(t0, t1));
    let mut out = [0f32; 8];
    _mm256_storeu_ps(out.as_mut_ptr(), sum);
    out
}

/// Value rows per tile: 16 KB of a 128-float head.
const TILE: usize = 32;
/// Floats of a head's output kept in registers: eight AVX2 registers.
const STRIP: usize = 64;

/// `acc += Σ weights[j] · rows[j][offset..offset + STRIP]`, j in order.
#[inline(always)]
fn accumulate_strip<const FMA: bool>(acc: &mut [f32; STRIP], weights: Strided, rows: &[f32], offset: usize, d: usize) {
    let mut sum = *acc;
    for (i, row) in rows.chunks_exact(d).take(weights.len).enumerate() {
        let (w, x): (f32, &[f32; STRIP]) =
            (weights.at(i), row[offset..offset + STRIP].try_into().expect("a strip inside the row"));
        for l in 0..STRIP {
            sum[l] = crate::lanes::multiply_add::<FMA>(w, x[l], sum[l]);
        }
    }
    *acc = sum;
}

/// A dot product, summed in a fixed order, which keeps results reproducible.
#[inline(always)]
fn dot<const FMA: bool>(a: &[f32], b: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if FMA {
        // SAFETY: `FMA` is true only on the path `has_avx2_fma` chose.
        return unsafe { dot_fma(a, b) };
    }
    // Eight independent accumulators, so the compiler vectorizes it.
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca.remainder().iter().zip(cb.remainder()).map(|(x, y)| x * y).sum();
    for (x, y) in ca.zip(cb) {
        for l in 0..8 {
            acc[l] += x[l] * y[l];
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// Four registers of eight products in flight (so the fused adds do not wait on one another),
/// then one fixed tree of adds.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_fma(a: &[f32], b: &[f32]) -> f32 {
    use std::arch::x86_64::*;
    let n = a.len().min(b.len());
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i + 32 <= n {
        for (r, acc) in acc.iter_mut().enumerate() {
            *acc = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i + 8 * r)), _mm256_loadu_ps(pb.add(i + 8 * r)), *acc);
        }
        i += 32;
    }
    while i + 8 <= n {
        acc[0] = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i)), acc[0]);
        i += 8;
    }
    let v = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    let q = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let h = _mm_add_ps(q, _mm_movehl_ps(q, q));
    let mut sum = _mm_cvtss_f32(_mm_add_ss(h, _mm_shuffle_ps::<1>(h, h)));
    while i < n {
        sum = a[i].mul_add(b[i], sum);
        i += 1;
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv_cache::KvFormat;
    use candle_core::Device;

    fn random(shape: (usize, usize, usize), seed: u64) -> Tensor {
        let mut state = seed;
        let n = shape.0 * shape.1 * shape.2;
        let data: Vec<f32> = (0..n)
            .map(|_| {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((state >> 33) as f32 / (1u64 << 31) as f32) - 0.5
            })
            .collect();
        Tensor::from_vec(data, shape, &Device::Cpu).unwrap()
    }

    fn filled_cache(len: usize) -> KvCache {
        let mut cache = KvCache::new(2, 16, 8, &Device::Cpu).unwrap();
        cache.append(&random((2, len, 8), 1), &random((2, len, 8), 2)).unwrap();
        cache
    }

    #[test]
    fn custom_op_matches_tensor_ops() {
        let cache = filled_cache(9);
        let q = random((4, 3, 8), 3); // positions 6, 7, 8
        for window in [None, Some(1), Some(3), Some(100)] {
            let ours: Vec<f32> =
                causal_attention(&q, &cache, 6, window).unwrap().flatten_all().unwrap().to_vec1().unwrap();
            let (k, v) = cache.buffers();
            let theirs: Vec<f32> = tensor_attention(&q, k, v, 6, 9, window.unwrap_or(usize::MAX))
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1()
                .unwrap();
            for (a, b) in ours.iter().zip(&theirs) {
                assert!((a - b).abs() < 1e-5, "window {window:?}: {a} vs {b}");
            }
        }
    }

    #[test]
    fn model_sized_heads_match_tensor_ops() {
        for (n_head, n_kv_head, d, len, n) in [(12, 2, 128, 45, 5), (14, 2, 64, 20, 1), (4, 4, 12, 11, 3)] {
            let mut cache = KvCache::new(n_kv_head, len, d, &Device::Cpu).unwrap();
            cache.append(&random((n_kv_head, len, d), 31), &random((n_kv_head, len, d), 32)).unwrap();
            let q = random((n_head, n, d), 33);
            let ours: Vec<f32> =
                causal_attention(&q, &cache, len - n, None).unwrap().flatten_all().unwrap().to_vec1().unwrap();
            let (k, v) = cache.buffers();
            let theirs: Vec<f32> =
                tensor_attention(&q, k, v, len - n, len, usize::MAX).unwrap().flatten_all().unwrap().to_vec1().unwrap();
            for (a, b) in ours.iter().zip(&theirs) {
                assert!((a - b).abs() < 1e-5, "{n_head} heads of {d}: {a} vs {b}");
            }
        }
    }

    #[test]
    fn the_fused_dot_product_agrees_with_the_plain_one_at_every_length() {
        #[cfg(target_arch = "x86_64")]
        if crate::lanes::has_avx2_fma() {
            let a = random((1, 1, 200), 11).flatten_all().unwrap().to_vec1::<f32>().unwrap();
            let b = random((1, 1, 200), 12).flatten_all().unwrap().to_vec1::<f32>().unwrap();
            for len in [1, 7, 8, 31, 32, 33, 64, 127, 128, 200] {
                let (fused, plain) = (dot::<true>(&a[..len], &b[..len]), dot::<false>(&a[..len], &b[..len]));
                assert!((fused - plain).abs() < 1e-5, "length {len}: {fused} vs {plain}");
            }
        }
    }

    #[test]
    fn a_window_of_one_sees_only_its_own_position() {
        let mut cache = KvCache::new(1, 4, 8, &Device::Cpu).unwrap();
        let v = random((1, 3, 8), 8);
        cache.append(&random((1, 3, 8), 9), &v).unwrap();
        let out: Vec<Vec<f32>> =
            causal_attention(&random((1, 3, 8), 10), &cache, 0, Some(1)).unwrap().to_vec2().unwrap();
        let v: Vec<Vec<f32>> = v.squeeze(0).unwrap().to_vec2().unwrap();
        assert_eq!(out, v);
    }

    #[test]
    fn a_row_is_the_same_alone_or_in_a_batch() {
        let cache = filled_cache(9);
        let q = random((4, 3, 8), 4);
        let batched: Vec<Vec<f32>> = causal_attention(&q, &cache, 6, None).unwrap().to_vec2().unwrap();
        for (i, expected) in batched.iter().enumerate() {
            let mut alone = filled_cache(9);
            alone.truncate(7 + i);
            let qi = q.narrow(1, i, 1).unwrap();
            let row: Vec<Vec<f32>> = causal_attention(&qi, &alone, 6 + i, None).unwrap().to_vec2().unwrap();
            assert_eq!(&row[0], expected);
        }
    }

    #[test]
    fn an_f16_cache_attends_as_its_widened_values_do_and_a_row_is_the_same_alone_or_in_a_batch() {
        use crate::kv_cache::KvFormat;
        let (k, v) = (random((2, 40, 64), 41), random((2, 40, 64), 42));
        let fill = |len: usize| {
            let mut cache = KvCache::with_format(2, 40, 64, KvFormat::F16, &Device::Cpu).unwrap();
            cache.append(&k.narrow(1, 0, len).unwrap(), &v.narrow(1, 0, len).unwrap()).unwrap();
            cache
        };
        let q = random((6, 3, 64), 43); // positions 37, 38, 39
        let batched: Vec<Vec<f32>> = causal_attention(&q, &fill(40), 37, None).unwrap().to_vec2().unwrap();
        // The same as an f32 cache holding the f16-rounded values, within the f32 path's rounding.
        let mut widened = KvCache::new(2, 40, 64, &Device::Cpu).unwrap();
        let round = |t: &Tensor| t.to_dtype(DType::F16).unwrap().to_dtype(DType::F32).unwrap();
        widened.append(&round(&k), &round(&v)).unwrap();
        let reference: Vec<Vec<f32>> = causal_attention(&q, &widened, 37, None).unwrap().to_vec2().unwrap();
        assert_eq!(batched, reference, "widening is exact, so the bits are the f32 path's");
        for (i, expected) in batched.iter().enumerate() {
            let row: Vec<Vec<f32>> =
                causal_attention(&q.narrow(1, i, 1).unwrap(), &fill(38 + i), 37 + i, None).unwrap().to_vec2().unwrap();
            assert_eq!(&row[0], expected, "row {i}");
        }
    }

    #[test]
    fn a_q8_0_cache_attends_as_its_dequantized_values_do_and_a_row_is_the_same_alone_or_in_a_batch() {
        use crate::kv_cache::{dequantize_q8_0, quantize_q8_0, KvFormat};
        let (k, v) = (random((2, 40, 64), 51), random((2, 40, 64), 52));
        let fill = |len: usize| {
            let mut cache = KvCache::with_format(2, 40, 64, KvFormat::Q8_0, &Device::Cpu).unwrap();
            cache.append(&k.narrow(1, 0, len).unwrap(), &v.narrow(1, 0, len).unwrap()).unwrap();
            cache
        };
        let q = random((6, 3, 64), 53); // positions 37, 38, 39
        let batched: Vec<Vec<f32>> = causal_attention(&q, &fill(40), 37, None).unwrap().to_vec2().unwrap();
        let round = |t: &Tensor| {
            let values = t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
            let mut back = vec![0f32; values.len()];
            dequantize_q8_0(&quantize_q8_0(&values), &mut back);
            Tensor::from_vec(back, t.dims3().unwrap(), &Device::Cpu).unwrap()
        };
        let mut dequantized = KvCache::new(2, 40, 64, &Device::Cpu).unwrap();
        dequantized.append(&round(&k), &round(&v)).unwrap();
        let reference: Vec<Vec<f32>> = causal_attention(&q, &dequantized, 37, None).unwrap().to_vec2().unwrap();
        assert_eq!(batched, reference, "the stored values, widened the same way in a batch or alone");
        for (i, expected) in batched.iter().enumerate() {
            let row: Vec<Vec<f32>> =
                causal_attention(&q.narrow(1, i, 1).unwrap(), &fill(38 + i), 37 + i, None).unwrap().to_vec2().unwrap();
            assert_eq!(&row[0], expected, "row {i}");
        }
    }

    #[test]
    fn a_head_gets_the_same_bits_in_any_run_of_heads() {
        // Runs are cut by thread count; whatever the cut, each head computes alone.
        for (d, len) in [(128, 37), (64, 16), (8, 3), (12, 9)] {
            let flat = |shape, seed| random(shape, seed).flatten_all().unwrap().to_vec1::<f32>().unwrap();
            let (q, keys, values) = (flat((6, 1, d), 21), flat((1, len, d), 22), flat((1, len, d), 23));
            let run = |first: usize, count: usize| {
                let heads = QueryHeads { q: &q[first * d..], stride: d, count };
                let mut out = vec![0.0; count * d];
                let cached = Cached { keys: &keys[..], values: &values[..], scale: 0.1, d };
                let mut queries = [Query { heads, start: 0, end: len, out: &mut out }];
                attend_block(&cached, &mut queries, &mut Scratch::default());
                out
            };
            let together = run(0, 6);
            for head in 0..6 {
                assert_eq!(run(head, 1), together[head * d..][..d], "d {d}, {len} positions, head {head}");
            }
            assert_eq!(run(3, 3), together[3 * d..], "d {d}: a run of the last three");
        }
    }

    #[test]
    fn a_row_is_the_same_alone_or_in_blocks_of_a_long_batch_with_or_without_a_window() {
        // Forty rows: three blocks of queries, the last one short; keys in groups of eight and
        // value tiles that start at different places for different rows.
        for (d, window, format) in [
            (64, None, KvFormat::F16),
            (64, Some(13), KvFormat::F32),
            (12, Some(20), KvFormat::F32),
            (64, None, KvFormat::Q8_0),
        ] {
            let (len, n) = (75, 40);
            let (k, v) = (random((2, len, d), 61), random((2, len, d), 62));
            let fill = |rows: usize| {
                let mut cache = KvCache::with_format(2, len, d, format, &Device::Cpu).unwrap();
                let part = |t: &Tensor| t.narrow(1, 0, rows).unwrap().contiguous().unwrap();
                cache.append(&part(&k), &part(&v)).unwrap();
                cache
            };
            let q = random((6, n, d), 63);
            let pos = len - n;
            let batched: Vec<Vec<f32>> = causal_attention(&q, &fill(len), pos, window).unwrap().to_vec2().unwrap();
            for (i, expected) in batched.iter().enumerate() {
                let qi = q.narrow(1, i, 1).unwrap();
                let row: Vec<Vec<f32>> =
                    causal_attention(&qi, &fill(pos + i + 1), pos + i, window).unwrap().to_vec2().unwrap();
                assert_eq!(&row[0], expected, "d {d}, window {window:?}, {format:?}: row {i}");
            }
            if format == KvFormat::F32 {
                let full = fill(len);
                let (k, v) = full.buffers();
                let theirs: Vec<Vec<f32>> =
                    tensor_attention(&q, k, v, pos, len, window.unwrap_or(usize::MAX)).unwrap().to_vec2().unwrap();
                for (a, b) in batched.iter().flatten().zip(theirs.iter().flatten()) {
                    assert!((a - b).abs() < 1e-5, "d {d}, window {window:?}: {a} vs {b}");
                }
            }
        }
    }

    #[test]
    fn a_single_position_returns_its_value() {
        let mut cache = KvCache::new(1, 4, 8, &Device::Cpu).unwrap();
        let v = random((1, 1, 8), 5);
        cache.append(&random((1, 1, 8), 6), &v).unwrap();
        let out: Vec<f32> =
            causal_attention(&random((2, 1, 8), 7), &cache, 0, None).unwrap().flatten_all().unwrap().to_vec1().unwrap();
        let v: Vec<f32> = v.flatten_all().unwrap().to_vec1().unwrap();
        assert_eq!(&out[..8], &v[..]);
        assert_eq!(&out[8..], &v[..]);
    }
}
