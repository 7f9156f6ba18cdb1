//! CPU matmul kernels for the weight types of the models we run (Q4_K, Q6_K, Q5_0, Q8_0).
//!
//! At load each weight matrix is repacked: 8 output rows ("columns" of the product) are
//! interleaved in groups of 4 bytes, so that one SIMD lane holds one output and a single
//! `vpdpbusd` (VNNI) or `vpmaddubsw` + `vpmaddwd` (AVX2) multiplies 4 weights of each of 8
//! outputs by 4 activations at once. Each block's scales are laid out per lane too, and the
//! bytes per weight stay those of the file (Q4_K grows 3%, for scales kept unpacked).
//!
//! What every path computes is defined in [`reference`]: an exact integer sum per block, then
//! one fixed float step per block. So every path (scalar, AVX2, AVX-512 VNNI, AVX-VNNI) gives
//! the same bits, and a row's result never depends on the rows it is multiplied with: the
//! verification of k+1 tokens reproduces k+1 single-token passes exactly.
//!
//! The path is chosen at run time from the CPU's features; `SPECULA_KERNEL=scalar|avx2|avx512vnni|avxvnni`
//! forces one (tests force each the CPU has). Other weight types keep candle's generic matmul.

mod pool;
mod q4k;
mod q5_0;
mod q6k;
mod q8_0;
mod quantize;
pub mod reference;
#[cfg(target_arch = "x86_64")]
mod x86;

use candle_core::quantized::k_quants::{BlockQ8K, BlockQ8_0, GgmlType};
use candle_core::quantized::GgmlDType;
use half::f16;
use std::sync::OnceLock;

pub(crate) use pool::{parallel_items, pool_threads};

/// Output rows interleaved in one group: one per 32-bit lane of a 256-bit register.
pub const COLS: usize = 8;
/// Activation rows per work item: a tile's rows stay in cache while a thread walks the
/// column groups.
pub const ROW_TILE: usize = 32;

/// An instruction set the kernels can run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Path {
    /// Plain Rust: any CPU; the fallback.
    Scalar,
    /// AVX2 + FMA + F16C (x86-64-v3).
    Avx2,
    /// AVX2 with AVX-512 VNNI on 256-bit registers (and AVX-512 VL's 32 of them; BW's byte masks).
    Avx512Vnni,
    /// AVX2 with AVX-VNNI (the VEX form, on CPUs without AVX-512).
    AvxVnni,
}

impl Path {
    pub const ALL: [Path; 4] = [Path::Scalar, Path::Avx2, Path::Avx512Vnni, Path::AvxVnni];

    pub fn name(self) -> &'static str {
        match self {
            Path::Scalar => "scalar",
            Path::Avx2 => "avx2",
            Path::Avx512Vnni => "avx512vnni",
            Path::AvxVnni => "avxvnni",
        }
    }

    /// Whether this CPU can run the path.
    pub fn available(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            let avx2 = || {
                is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c")
            };
            match self {
                Path::Scalar => true,
                Path::Avx2 => avx2(),
                Path::Avx512Vnni => {
                    avx2()
                        && is_x86_feature_detected!("avx512vnni")
                        && is_x86_feature_detected!("avx512vl")
                        && is_x86_feature_detected!("avx512bw")
                }
                Path::AvxVnni => avx2() && is_x86_feature_detected!("avxvnni"),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            self == Path::Scalar
        }
    }

    /// The fastest path this CPU has.
    pub fn best() -> Path {
        [Path::Avx512Vnni, Path::AvxVnni, Path::Avx2].into_iter().find(|p| p.available()).unwrap_or(Path::Scalar)
    }

    /// Rows multiplied together per unpacked weight block: as many as the accumulators that
    /// fit in registers (16 on AVX2, 32 with AVX-512 VL).
    fn max_group(self) -> usize {
        match self {
            Path::Avx512Vnni => 8,
            _ => 4,
        }
    }
}

impl std::str::FromStr for Path {
    type Err = crate::Error;
    fn from_str(s: &str) -> crate::Result<Self> {
        Path::ALL.into_iter().find(|p| p.name() == s).ok_or_else(|| {
            crate::Error::InvalidSetting(format!("kernel path `{s}`: expected scalar, avx2, avx512vnni or avxvnni"))
        })
    }
}

/// The path matmuls use: `SPECULA_KERNEL` if it names one this CPU has, else the best.
pub fn current_path() -> Path {
    static CHOSEN: OnceLock<Path> = OnceLock::new();
    *CHOSEN.get_or_init(|| match std::env::var("SPECULA_KERNEL").ok().map(|s| s.parse::<Path>()) {
        Some(Ok(path)) if path.available() => path,
        Some(Ok(path)) => {
            tracing::warn!("SPECULA_KERNEL={}: this CPU lacks it; using {}", path.name(), Path::best().name());
            Path::best()
        }
        Some(Err(e)) => {
            tracing::warn!("{e}; using {}", Path::best().name());
            Path::best()
        }
        None => Path::best(),
    })
}

/// The CPU's model name and the SIMD features the kernels care about, for benchmark records.
pub fn cpu_description() -> String {
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string());
    let features: Vec<&str> = Path::ALL.into_iter().filter(|p| p.available()).map(Path::name).collect();
    format!("{model} ({}; kernels use {})", features.join(", "), current_path().name())
}

/// Whether a weight type has a kernel here.
pub fn has_kernel(dtype: GgmlDType) -> bool {
    matches!(dtype, GgmlDType::Q4K | GgmlDType::Q6K | GgmlDType::Q5_0 | GgmlDType::Q8_0)
}

/// A weight matrix `[n, k]` in the kernels' layout.
pub struct Packed {
    dtype: GgmlDType,
    n: usize,
    k: usize,
    data: PackedData,
}

enum PackedData {
    Q4K(Vec<q4k::Group>),
    Q6K(Vec<q6k::Group>),
    Q5_0(Vec<q5_0::Group>),
    Q8_0(Vec<q8_0::Group>),
}

impl Packed {
    /// Repack the bytes of a CPU `QTensor` of `dtype` and shape `[n, k]`; `None` for a type
    /// without a kernel.
    pub fn new(dtype: GgmlDType, n: usize, k: usize, bytes: &[u8]) -> candle_core::Result<Option<Self>> {
        let data = match dtype {
            GgmlDType::Q4K => PackedData::Q4K(pack(blocks_of(bytes)?, n, k, q4k::pack)?),
            GgmlDType::Q6K => PackedData::Q6K(pack(blocks_of(bytes)?, n, k, q6k::pack)?),
            GgmlDType::Q5_0 => PackedData::Q5_0(pack(blocks_of(bytes)?, n, k, q5_0::pack)?),
            GgmlDType::Q8_0 => PackedData::Q8_0(pack(blocks_of(bytes)?, n, k, q8_0::pack)?),
            _ => return Ok(None),
        };
        Ok(Some(Self { dtype, n, k, data }))
    }

    pub fn dtype(&self) -> GgmlDType {
        self.dtype
    }

    pub fn shape(&self) -> (usize, usize) {
        (self.n, self.k)
    }

    /// `dst[m, n] = lhs[m, k] · Wᵀ` on the current path.
    pub fn matmul(&self, m: usize, lhs: &[f32], dst: &mut [f32]) -> candle_core::Result<()> {
        self.matmul_on(current_path(), m, lhs, dst)
    }

    /// [`Self::matmul`] on a given path (which this CPU must have).
    pub fn matmul_on(&self, path: Path, m: usize, lhs: &[f32], dst: &mut [f32]) -> candle_core::Result<()> {
        Self::matmul_many_on(path, &[self], m, lhs, &mut [dst])
    }

    /// `dsts[i][m, n_i] = lhs[m, k] · W_iᵀ` for matrices of one input width (attention's q, k
    /// and v; the MLP's gate and up): the input quantized once per activation type, and one
    /// split over the threads for all, so the threads meet once rather than once a matrix.
    pub fn matmul_many(mats: &[&Packed], m: usize, lhs: &[f32], dsts: &mut [&mut [f32]]) -> candle_core::Result<()> {
        Self::matmul_many_on(current_path(), mats, m, lhs, dsts)
    }

    fn matmul_many_on(
        path: Path,
        mats: &[&Packed],
        m: usize,
        lhs: &[f32],
        dsts: &mut [&mut [f32]],
    ) -> candle_core::Result<()> {
        if !path.available() {
            candle_core::bail!("this CPU cannot run the {} kernels", path.name());
        }
        if mats.len() != dsts.len() {
            candle_core::bail!("{} matrices and {} outputs", mats.len(), dsts.len());
        }
        for (mat, dst) in mats.iter().zip(dsts.iter()) {
            let (n, k) = (mat.n, mat.k);
            if lhs.len() != m * k || dst.len() != m * n {
                candle_core::bail!("matmul sizes: lhs {} dst {} for ({m}, {k}, {n})", lhs.len(), dst.len());
            }
        }
        let k = mats.first().map_or(0, |mat| mat.k);
        let needs = |types: &[GgmlDType]| mats.iter().any(|mat| types.contains(&mat.dtype));
        let q8k = needs(&[GgmlDType::Q4K, GgmlDType::Q6K]).then(|| quantize_rows::<BlockQ8K>(lhs, m, k));
        let q8_0 = needs(&[GgmlDType::Q5_0, GgmlDType::Q8_0]).then(|| quantize_rows::<BlockQ8_0>(lhs, m, k));
        let (q8k, q8_0) = (q8k.as_deref().unwrap_or(&[]), q8_0.as_deref().unwrap_or(&[]));
        let jobs = mats
            .iter()
            .zip(dsts.iter_mut())
            .map(|(mat, dst)| {
                let shape = Shape { m, k, n: mat.n, path };
                match &mat.data {
                    PackedData::Q4K(g) => job::<BlockQ8K, Q8K, _, _>(shape, q8k, g, dst, q4k::prepare, q4k::dot),
                    PackedData::Q6K(g) => job::<BlockQ8K, Q8K, _, _>(shape, q8k, g, dst, q6k::prepare, q6k::dot),
                    PackedData::Q5_0(g) => job::<BlockQ8_0, Q8_0, _, _>(shape, q8_0, g, dst, q5_0::prepare, q5_0::dot),
                    PackedData::Q8_0(g) => job::<BlockQ8_0, Q8_0, _, _>(shape, q8_0, g, dst, q8_0::prepare, q8_0::dot),
                }
            })
            .collect::<candle_core::Result<Vec<_>>>()?;
        run(&jobs);
        Ok(())
    }

    /// A matrix of the rows `ids` of this one, in that order (a draft's output layer cut down
    /// to the tokens it may propose).
    pub fn gather_rows(&self, ids: &[u32]) -> candle_core::Result<Packed> {
        if let Some(&bad) = ids.iter().find(|&&id| id as usize >= self.n) {
            candle_core::bail!("row {bad} of a matrix of {} rows", self.n);
        }
        let blocks = self.k / block_size(self.dtype);
        fn gather<G, B: Clone + ZeroBlock>(
            groups: &[G],
            ids: &[u32],
            blocks: usize,
            k: usize,
            unpack: fn(&G, usize) -> B,
            pack_group: fn(&[&B; COLS]) -> G,
        ) -> candle_core::Result<Vec<G>> {
            let rows: Vec<B> = ids
                .iter()
                .flat_map(|&id| {
                    let (group, lane) = (id as usize / COLS, id as usize % COLS);
                    (0..blocks).map(move |b| unpack(&groups[group * blocks + b], lane))
                })
                .collect();
            pack(&rows, ids.len(), k, pack_group)
        }
        let (k, n) = (self.k, ids.len());
        let data = match &self.data {
            PackedData::Q4K(g) => PackedData::Q4K(gather(g, ids, blocks, k, q4k::unpack, q4k::pack)?),
            PackedData::Q6K(g) => PackedData::Q6K(gather(g, ids, blocks, k, q6k::unpack, q6k::pack)?),
            PackedData::Q5_0(g) => PackedData::Q5_0(gather(g, ids, blocks, k, q5_0::unpack, q5_0::pack)?),
            PackedData::Q8_0(g) => PackedData::Q8_0(gather(g, ids, blocks, k, q8_0::unpack, q8_0::pack)?),
        };
        Ok(Packed { dtype: self.dtype, n, k, data })
    }

    /// This matrix quantized again as `dtype` (Q5_0 or Q8_0) from its dequantized rows: a
    /// draft's output layer in fewer bytes, since a draft's precision moves only how many of
    /// its tokens are kept, never the output.
    pub fn requantized(&self, dtype: GgmlDType) -> candle_core::Result<Packed> {
        fn quantized_rows<B: GgmlType, M: Clone + ZeroBlock, G>(
            src: &Packed,
            pack_group: fn(&[&M; COLS]) -> G,
        ) -> candle_core::Result<Vec<G>> {
            if src.k == 0 || !src.k.is_multiple_of(B::BLCK_SIZE) {
                candle_core::bail!("rows of {} weights do not make blocks of {}", src.k, B::BLCK_SIZE);
            }
            let per_row = src.k / B::BLCK_SIZE;
            let mut row = vec![0f32; src.k];
            let mut blocks = vec![B::zeros(); src.n * per_row];
            for (r, out) in blocks.chunks_exact_mut(per_row).enumerate() {
                src.dequantize_row(r, &mut row)?;
                B::from_float(&row, out);
            }
            pack(cast_blocks::<B, M>(&blocks), src.n, src.k, pack_group)
        }
        use candle_core::quantized::k_quants::BlockQ5_0;
        let data = match dtype {
            GgmlDType::Q5_0 => PackedData::Q5_0(quantized_rows::<BlockQ5_0, _, _>(self, q5_0::pack)?),
            GgmlDType::Q8_0 => PackedData::Q8_0(quantized_rows::<BlockQ8_0, _, _>(self, q8_0::pack)?),
            other => candle_core::bail!("no kernel to requantize {other:?} for"),
        };
        Ok(Packed { dtype, n: self.n, k: self.k, data })
    }

    /// Weight row `row` dequantized into `out` (`k` floats): the embedding lookup, from the
    /// packed copy so the file's layout need not be kept as well.
    pub fn dequantize_row(&self, row: usize, out: &mut [f32]) -> candle_core::Result<()> {
        if row >= self.n || out.len() != self.k {
            candle_core::bail!("row {row} of [{}, {}] into {} floats", self.n, self.k, out.len());
        }
        let blocks = self.k / block_size(self.dtype);
        let (group, lane) = (row / COLS, row % COLS);
        use candle_core::quantized::k_quants::{BlockQ4K, BlockQ5_0, BlockQ6K};
        match &self.data {
            PackedData::Q4K(g) => unpack_row::<_, _, BlockQ4K>(&g[group * blocks..][..blocks], lane, q4k::unpack, out),
            PackedData::Q6K(g) => unpack_row::<_, _, BlockQ6K>(&g[group * blocks..][..blocks], lane, q6k::unpack, out),
            PackedData::Q5_0(g) => {
                unpack_row::<_, _, BlockQ5_0>(&g[group * blocks..][..blocks], lane, q5_0::unpack, out)
            }
            PackedData::Q8_0(g) => {
                unpack_row::<_, _, BlockQ8_0>(&g[group * blocks..][..blocks], lane, q8_0::unpack, out)
            }
        }
        Ok(())
    }
}

fn block_size(dtype: GgmlDType) -> usize {
    dtype.block_size()
}

/// The original blocks (mirror `M`) of one lane of packed groups, dequantized by candle's
/// block type `B`.
fn unpack_row<G, M, B: GgmlType>(groups: &[G], lane: usize, unpack: fn(&G, usize) -> M, out: &mut [f32]) {
    let blocks: Vec<M> = groups.iter().map(|g| unpack(g, lane)).collect();
    B::to_float(cast_blocks::<M, B>(&blocks), out);
}

/// Groups of [`COLS`] rows of blocks, group-major then block order; the last group padded
/// with zero blocks.
fn pack<B: Clone + ZeroBlock, G>(
    blocks: &[B],
    n: usize,
    k: usize,
    pack_group: fn(&[&B; COLS]) -> G,
) -> candle_core::Result<Vec<G>> {
    let block = B::ELEMENTS;
    if !k.is_multiple_of(block) || blocks.len() != n * (k / block) {
        candle_core::bail!("weights of {} blocks do not make [{n}, {k}]", blocks.len());
    }
    let per_row = k / block;
    let zero = B::zero();
    let mut groups = Vec::with_capacity(n.div_ceil(COLS) * per_row);
    for group in 0..n.div_ceil(COLS) {
        for b in 0..per_row {
            let rows: [&B; COLS] = std::array::from_fn(|c| {
                let row = group * COLS + c;
                if row < n {
                    &blocks[row * per_row + b]
                } else {
                    &zero
                }
            });
            groups.push(pack_group(&rows));
        }
    }
    Ok(groups)
}

/// A weight block type: its element count, and an all-zero block to pad the last group.
pub(crate) trait ZeroBlock: Sized {
    const ELEMENTS: usize;
    fn zero() -> Self;
}

/// Sizes of one matmul.
#[derive(Clone, Copy)]
struct Shape {
    m: usize,
    k: usize,
    n: usize,
    path: Path,
}

/// One column group's dot products with a group of rows: `(path, weight groups of the column
/// group, prepared activations of the rows (row-major), blocks per row, one output per row
/// and lane)`.
type Dot<G, A> = fn(Path, &[G], &[A], usize, &mut [[f32; COLS]]);

/// One matrix's share of a matmul: its (row tile, column group) items, row-tile major.
struct Job<'a> {
    items: usize,
    run: Box<dyn Fn(std::ops::Range<usize>) + Sync + 'a>,
}

/// The job of one matrix: the activations (quantized, candle's `Act` blocks) prepared for the
/// kernel (sums it would otherwise recompute for every column group), and a closure that
/// multiplies a range of items.
fn job<'a, Act: Quantize, M, A: Send + Sync + 'a, G: Sync>(
    Shape { m, k, n, path }: Shape,
    quantized: &[Act],
    groups: &'a [G],
    dst: &'a mut [f32],
    prepare: fn(&M) -> A,
    dot: Dot<G, A>,
) -> candle_core::Result<Job<'a>> {
    let per_row = k / Act::BLCK_SIZE;
    let column_groups = n.div_ceil(COLS);
    if k % Act::BLCK_SIZE != 0 || groups.len() != column_groups * per_row || quantized.len() != m * per_row {
        candle_core::bail!("{} weight groups do not make [{n}, {k}]", groups.len());
    }
    let acts: Vec<A> = cast_blocks::<Act, M>(quantized).iter().map(prepare).collect();
    let dst_ptr = dst.as_mut_ptr() as usize;
    let max_group = path.max_group();
    let run = move |items: std::ops::Range<usize>| {
        let mut out = [[0f32; COLS]; ROW_TILE];
        for item in items {
            let (tile, group) = (item / column_groups, item % column_groups);
            let rows = tile * ROW_TILE..m.min((tile + 1) * ROW_TILE);
            let weights = &groups[group * per_row..(group + 1) * per_row];
            // The tile's rows in near-equal groups of at most `max_group`.
            let count = rows.len().div_ceil(max_group);
            let mut start = 0;
            for g in 0..count {
                let len = (rows.len() - start) / (count - g);
                let first = rows.start + start;
                dot(
                    path,
                    weights,
                    &acts[first * per_row..(first + len) * per_row],
                    per_row,
                    &mut out[start..start + len],
                );
                start += len;
            }
            for (i, row) in rows.enumerate() {
                for (c, &value) in out[i].iter().enumerate() {
                    let column = group * COLS + c;
                    if column < n {
                        // SAFETY: each (row, column) belongs to exactly one item, so no two
                        // workers write the same element, and row * n + column < m * n, the
                        // length of `dst`, which this closure borrows.
                        unsafe { *(dst_ptr as *mut f32).add(row * n + column) = value };
                    }
                }
            }
        }
    };
    Ok(Job { items: m.div_ceil(ROW_TILE) * column_groups, run: Box::new(run) })
}

/// The jobs' items in one split over candle's thread pool.
fn run(jobs: &[Job]) {
    let total = jobs.iter().map(|job| job.items).sum();
    parallel_items(total, MIN_GRAB, |range| {
        let mut offset = 0;
        for job in jobs {
            let (start, end) = (range.start.max(offset), range.end.min(offset + job.items));
            if start < end {
                (job.run)(start - offset..end - offset);
            }
            offset += job.items;
        }
    });
}

/// Fewest column groups a thread takes at once: enough to amortize the shared cursor.
const MIN_GRAB: usize = 4;

/// An activation block type: candle's `from_float`, or the same bits faster.
trait Quantize: GgmlType {
    fn quantize(xs: &[f32], ys: &mut [Self]);
}

impl Quantize for BlockQ8K {
    fn quantize(xs: &[f32], ys: &mut [Self]) {
        quantize::q8k(xs, ys)
    }
}

impl Quantize for BlockQ8_0 {
    fn quantize(xs: &[f32], ys: &mut [Self]) {
        quantize::q8_0(xs, ys)
    }
}

/// Rows from which quantizing the activations is worth the thread pool's wake-up: a prompt's
/// (where it was 7% of a prefill on one thread), not a decoding step's or a verification's.
const PARALLEL_QUANTIZE_ROWS: usize = 32;

/// Each row of `lhs` quantized to `Act` blocks, row-major. A row's blocks depend on that row
/// alone, so splitting the rows over threads changes no bit.
fn quantize_rows<Act: Quantize>(lhs: &[f32], m: usize, k: usize) -> Vec<Act> {
    let per_row = k / Act::BLCK_SIZE;
    let mut blocks = vec![Act::zeros(); m * per_row];
    let blocks_ptr = blocks.as_mut_ptr() as usize;
    let quantize = |rows: std::ops::Range<usize>| {
        for row in rows {
            // SAFETY: each row's blocks belong to one call, inside the m * per_row of `blocks`.
            let out = unsafe { std::slice::from_raw_parts_mut((blocks_ptr as *mut Act).add(row * per_row), per_row) };
            Act::quantize(&lhs[row * k..(row + 1) * k], out);
        }
    };
    match m >= PARALLEL_QUANTIZE_ROWS {
        true => parallel_items(m, 1, quantize),
        false => quantize(0..m),
    }
    blocks
}

/// The blocks behind a CPU `QTensor`'s bytes, as candle's block type or this module's mirror
/// of it. Only for such bytes and such plain-data types: candle stores a CPU QTensor as a Vec
/// of its block type, and any bit pattern is a valid value of these integer/float structs.
pub(crate) fn blocks_of<T>(bytes: &[u8]) -> candle_core::Result<&[T]> {
    let size = std::mem::size_of::<T>();
    if bytes.as_ptr().align_offset(std::mem::align_of::<T>()) != 0 || !bytes.len().is_multiple_of(size) {
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

/// [`cast_blocks`] for writing.
fn cast_blocks_mut<From, To>(blocks: &mut [From]) -> &mut [To] {
    assert_eq!(std::mem::size_of::<From>(), std::mem::size_of::<To>(), "mirror type of another size");
    assert_eq!(blocks.as_ptr().align_offset(std::mem::align_of::<To>()), 0, "misaligned blocks");
    // SAFETY: as in `cast_blocks`; the mirrors accept any bit pattern, so writes through
    // them leave valid values of `From`.
    unsafe { std::slice::from_raw_parts_mut(blocks.as_mut_ptr().cast::<To>(), blocks.len()) }
}

/// Four bytes of activations as one little-endian word: what a lane multiplies by.
#[inline(always)]
fn word(bytes: &[i8], at: usize) -> i32 {
    i32::from_le_bytes([bytes[at] as u8, bytes[at + 1] as u8, bytes[at + 2] as u8, bytes[at + 3] as u8])
}

// Mirrors of candle's block layouts (its fields are crate-private). They follow ggml's.

const QK_K: usize = 256;

#[derive(Clone)]
#[repr(C)]
pub struct Q4K {
    pub d: f16,
    pub dmin: f16,
    pub scales: [u8; 12],
    pub qs: [u8; QK_K / 2],
}

#[derive(Clone)]
#[repr(C)]
pub struct Q6K {
    pub ql: [u8; QK_K / 2],
    pub qh: [u8; QK_K / 4],
    pub scales: [i8; QK_K / 16],
    pub d: f16,
}

#[derive(Clone)]
#[repr(C)]
pub struct Q5_0 {
    pub d: f16,
    pub qh: [u8; 4],
    pub qs: [u8; 16],
}

#[derive(Clone)]
#[repr(C)]
pub struct Q8K {
    pub d: f32,
    pub qs: [i8; QK_K],
    pub bsums: [i16; QK_K / 16],
}

#[derive(Clone)]
#[repr(C)]
pub struct Q8_0 {
    pub d: f16,
    pub qs: [i8; 32],
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
mod tests;
