//! Quantized weights and the matmul that multiplies by them.
//!
//! Exactness needs one property from every op of the forward pass: a row's result must not
//! depend on which other rows share the call. Then verifying k+1 tokens in one pass gives
//! bit-for-bit the logits of k+1 single-token passes, and greedy speculative output equals
//! plain output by construction, not by luck at near-ties.
//!
//! On the CPU, the weight types of the models we run (Q4_K, Q6_K, Q5_0, Q8_0) are repacked at
//! load for our kernels (`kernels`), which compute each row the same way whatever the batch
//! and whatever the instruction set. Other types use candle's generic `k_quants::matmul`,
//! which is row-exact too (one `vec_dot` per row and column). candle's `QMatMul` is not: on
//! x86 it picks kernels by row count. Other devices use `QMatMul`.

use crate::error::{Error, Result};
use crate::kernels::{self, Packed};
use candle_core::quantized::k_quants::{self, GgmlType};
use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{CpuStorage, CustomOp1, Device, Layout, Module, Shape, Tensor};
use half::f16;
use std::sync::Arc;

/// Weight types candle multiplies with a scalar kernel on the CPU and we have no kernel for:
/// requantized to Q8_0 at load, at the price of more bytes read per token.
pub fn has_slow_cpu_kernel(dtype: GgmlDType) -> bool {
    matches!(dtype, GgmlDType::Q4_1 | GgmlDType::Q5_1) && !kernels::has_kernel(dtype)
}

/// Requantize a weight whose CPU kernel is slow to Q8_0. Q8_0 keeps 8 bits for values that
/// had 4 or 5, so the change to the weights is far below the original quantization error.
pub fn with_fast_cpu_kernel(weight: QTensor, device: &Device) -> Result<QTensor> {
    if !device.is_cpu() || !has_slow_cpu_kernel(weight.dtype()) {
        return Ok(weight);
    }
    let dense = weight.dequantize(device)?;
    Ok(QTensor::quantize(&dense, GgmlDType::Q8_0)?)
}

/// Where a weight's bytes live and which code multiplies by them.
enum Weights {
    /// CPU, a type with a kernel of ours: repacked, the file's layout dropped.
    Packed(Packed),
    /// CPU, any other type: candle's generic row-exact matmul.
    Generic(Arc<QTensor>),
    /// Another device: candle's `QMatMul`.
    Device(QMatMul, Arc<QTensor>),
}

/// `y = x W^T (+ b)` with `W` kept quantized, `[out_features, in_features]`.
pub struct QLinear {
    weights: Weights,
    dtype: GgmlDType,
    /// `(out_features, in_features)`.
    shape: (usize, usize),
    bias: Option<Tensor>,
}

impl QLinear {
    pub fn new(weight: QTensor, bias: Option<Tensor>) -> Result<Self> {
        let dtype = weight.dtype();
        let shape = weight.shape().dims2()?;
        let weights = match weight.device() {
            Device::Cpu => match Packed::new(dtype, shape.0, shape.1, &weight.data()?)? {
                Some(packed) => Weights::Packed(packed),
                None => Weights::Generic(Arc::new(weight)),
            },
            _ => {
                let weight = Arc::new(weight);
                Weights::Device(QMatMul::from_arc(weight.clone())?, weight)
            }
        };
        Ok(Self { weights, dtype, shape, bias })
    }

    pub fn dtype(&self) -> GgmlDType {
        self.dtype
    }

    /// `x`: `[.., in_features]` f32 → `[.., out_features]`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let y = match &self.weights {
            Weights::Device(qmatmul, _) => qmatmul.forward(x)?,
            cpu => x.contiguous()?.apply_op1_no_bwd(&RowExactMatMul {
                weights: cpu,
                shape: self.shape,
                dtype: self.dtype,
            })?,
        };
        self.add_bias(y)
    }

    fn add_bias(&self, y: Tensor) -> Result<Tensor> {
        Ok(match &self.bias {
            Some(bias) => y.broadcast_add(bias)?,
            None => y,
        })
    }

    /// `[layer.forward(x) for layer in layers]`, in one matmul where the layers' weights are
    /// all packed for the CPU kernels and share the input width: attention's q, k and v and
    /// the MLP's gate and up, so the input is quantized once and the threads meet once.
    pub fn forward_many<const N: usize>(layers: [&QLinear; N], x: &Tensor) -> Result<[Tensor; N]> {
        let one_by_one = || try_map(layers, |layer| layer.forward(x));
        let Some((&k, batch)) = x.dims().split_last() else { return one_by_one() };
        let packed: Option<Vec<&Packed>> = layers
            .iter()
            .map(|layer| match &layer.weights {
                Weights::Packed(packed) if layer.shape.1 == k => Some(packed),
                _ => None,
            })
            .collect();
        let Some(packed) = packed else { return one_by_one() };
        let m: usize = batch.iter().product();
        let x = x.contiguous()?;
        let (storage, layout) = x.storage_and_layout();
        let candle_core::Storage::Cpu(CpuStorage::F32(data)) = &*storage else {
            drop(storage);
            return one_by_one();
        };
        let lhs = &data[layout.start_offset()..layout.start_offset() + m * k];
        let mut outs: Vec<Vec<f32>> = layers.iter().map(|layer| vec![0f32; m * layer.shape.0]).collect();
        let mut dsts: Vec<&mut [f32]> = outs.iter_mut().map(Vec::as_mut_slice).collect();
        Packed::matmul_many(&packed, m, lhs, &mut dsts)?;
        let mut outs = outs.into_iter();
        try_map(layers, |layer| {
            let y =
                Tensor::from_vec(outs.next().unwrap_or_default(), output_shape(batch, layer.shape.0), &Device::Cpu)?;
            layer.add_bias(y)
        })
    }

    /// A linear layer of the rows `ids` of this one (outputs in that order), where the weights
    /// are packed for the CPU kernels; `None` elsewhere. With `smaller`, packed rows are
    /// quantized again as that type where it takes fewer bytes than theirs (a draft's output
    /// layer; a draft's precision moves only its acceptance, never the output).
    pub fn gather_rows(&self, ids: &[u32], smaller: Option<GgmlDType>) -> Result<Option<QLinear>> {
        let bias = match &self.bias {
            Some(bias) => Some(bias.index_select(&Tensor::new(ids, bias.device())?, 0)?),
            None => None,
        };
        let weights = match &self.weights {
            Weights::Packed(packed) => {
                let rows = packed.gather_rows(ids)?;
                Weights::Packed(match smaller {
                    Some(dtype) if bytes_per_weight(dtype) < bytes_per_weight(rows.dtype()) => {
                        rows.requantized(dtype)?
                    }
                    _ => rows,
                })
            }
            // Other CPU types: the rows dequantized and quantized again (exact for f32 and f16;
            // the draft's precision only moves acceptance, never the output).
            Weights::Generic(weight) => {
                let rows = dequantize_rows(weight, ids, &Device::Cpu)?;
                Weights::Generic(Arc::new(QTensor::quantize(&rows, weight.dtype())?))
            }
            Weights::Device(..) => return Ok(None),
        };
        let dtype = match &weights {
            Weights::Packed(packed) => packed.dtype(),
            _ => self.dtype,
        };
        Ok(Some(QLinear { weights, dtype, shape: (ids.len(), self.shape.1), bias }))
    }

    /// Rows `ids` of the weight matrix, dequantized: the token embedding lookup (a tied
    /// output layer shares its matrix). Dequantizing the whole table would cost 0.9 GB of f32
    /// for a 151k vocabulary.
    pub fn rows(&self, ids: &[u32], device: &Device) -> Result<Tensor> {
        let (rows, cols) = self.shape;
        if let Some(&bad) = ids.iter().find(|&&id| id as usize >= rows) {
            return Err(Error::InvalidSetting(format!("token id {bad} is outside the vocabulary of {rows}")));
        }
        match &self.weights {
            Weights::Packed(packed) => {
                let mut out = vec![0f32; ids.len() * cols];
                for (dst, &id) in out.chunks_exact_mut(cols).zip(ids) {
                    packed.dequantize_row(id as usize, dst)?;
                }
                Ok(Tensor::from_vec(out, (ids.len(), cols), device)?)
            }
            Weights::Generic(weight) | Weights::Device(_, weight) => dequantize_rows(weight, ids, device),
        }
    }
}

fn bytes_per_weight(dtype: GgmlDType) -> f64 {
    dtype.type_size() as f64 / dtype.block_size() as f64
}

struct RowExactMatMul<'a> {
    weights: &'a Weights,
    shape: (usize, usize),
    dtype: GgmlDType,
}

impl CustomOp1 for RowExactMatMul<'_> {
    fn name(&self) -> &'static str {
        "row-exact-qmatmul"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let (n, k) = self.shape;
        let dims = layout.shape().dims();
        let Some((&last, batch)) = dims.split_last() else { candle_core::bail!("matmul input has no dimensions") };
        if last != k {
            candle_core::bail!("matmul input {dims:?} does not match weight [{n}, {k}]")
        }
        let m: usize = batch.iter().product();
        let lhs = match storage {
            CpuStorage::F32(data) => &data[layout.start_offset()..layout.start_offset() + m * k],
            _ => candle_core::bail!("matmul input must be f32"),
        };
        let mut dst = vec![0f32; m * n];
        match self.weights {
            Weights::Packed(packed) => packed.matmul(m, lhs, &mut dst)?,
            Weights::Generic(weight) => candle_matmul(self.dtype, (m, k, n), lhs, &weight.data()?, &mut dst)?,
            Weights::Device(..) => candle_core::bail!("a device weight in a CPU matmul"),
        }
        Ok((CpuStorage::F32(dst), output_shape(batch, n)))
    }
}

/// candle's generic CPU matmul, `dst[m, n] = lhs[m, k] · W[n, k]ᵀ`, for the weight bytes of a
/// CPU `QTensor` of any type: the path where no kernel of ours applies, and the reference the
/// kernels are tested against. Sizes are checked here, since candle's matmul panics on them.
pub fn candle_matmul(
    dtype: GgmlDType,
    mkn: (usize, usize, usize),
    lhs: &[f32],
    weights: &[u8],
    dst: &mut [f32],
) -> candle_core::Result<()> {
    fn typed<T: GgmlType>(
        (m, k, n): (usize, usize, usize),
        lhs: &[f32],
        weights: &[u8],
        dst: &mut [f32],
    ) -> candle_core::Result<()> {
        let blocks = kernels::blocks_of::<T>(weights)?;
        if k % T::BLCK_SIZE != 0 || blocks.len() != n * k / T::BLCK_SIZE || lhs.len() != m * k || dst.len() != m * n {
            candle_core::bail!(
                "matmul sizes: {} weight blocks, lhs {}, dst {} for ({m}, {k}, {n})",
                blocks.len(),
                lhs.len(),
                dst.len()
            );
        }
        k_quants::matmul((m, k, n), lhs, blocks, dst)
    }
    match dtype {
        GgmlDType::F32 => typed::<f32>(mkn, lhs, weights, dst),
        GgmlDType::F16 => typed::<f16>(mkn, lhs, weights, dst),
        GgmlDType::Q4_0 => typed::<k_quants::BlockQ4_0>(mkn, lhs, weights, dst),
        GgmlDType::Q4_1 => typed::<k_quants::BlockQ4_1>(mkn, lhs, weights, dst),
        GgmlDType::Q5_0 => typed::<k_quants::BlockQ5_0>(mkn, lhs, weights, dst),
        GgmlDType::Q5_1 => typed::<k_quants::BlockQ5_1>(mkn, lhs, weights, dst),
        GgmlDType::Q8_0 => typed::<k_quants::BlockQ8_0>(mkn, lhs, weights, dst),
        GgmlDType::Q2K => typed::<k_quants::BlockQ2K>(mkn, lhs, weights, dst),
        GgmlDType::Q3K => typed::<k_quants::BlockQ3K>(mkn, lhs, weights, dst),
        GgmlDType::Q4K => typed::<k_quants::BlockQ4K>(mkn, lhs, weights, dst),
        GgmlDType::Q5K => typed::<k_quants::BlockQ5K>(mkn, lhs, weights, dst),
        GgmlDType::Q6K => typed::<k_quants::BlockQ6K>(mkn, lhs, weights, dst),
        other => candle_core::bail!("no CPU matmul for weight type {other:?}"),
    }
}

/// `f` over an array, stopping at the first error.
fn try_map<T, U, const N: usize>(items: [T; N], mut f: impl FnMut(T) -> Result<U>) -> Result<[U; N]> {
    let mut out = Vec::with_capacity(N);
    for item in items {
        out.push(f(item)?);
    }
    Ok(out.try_into().unwrap_or_else(|_| unreachable!("N items in, N out")))
}

fn output_shape(batch: &[usize], n: usize) -> Shape {
    let mut dims = batch.to_vec();
    dims.push(n);
    Shape::from(dims)
}

/// Rows `ids` of a quantized `[rows, cols]` matrix, dequantized: the token embedding lookup.
/// Dequantizing the whole table would cost 0.9 GB of f32 for a 151k vocabulary.
pub fn dequantize_rows(weight: &QTensor, ids: &[u32], device: &Device) -> Result<Tensor> {
    let (rows, cols) = weight.shape().dims2()?;
    if let Some(&bad) = ids.iter().find(|&&id| id as usize >= rows) {
        return Err(Error::InvalidSetting(format!("token id {bad} is outside the vocabulary of {rows}")));
    }
    if !matches!(weight.device(), Device::Cpu) {
        let table = weight.dequantize(&weight.device())?;
        let ids = Tensor::new(ids, &weight.device())?;
        return Ok(table.index_select(&ids, 0)?.to_device(device)?);
    }
    let bytes = weight.data()?;
    let mut out = vec![0f32; ids.len() * cols];
    for (dst, &id) in out.chunks_exact_mut(cols).zip(ids) {
        match weight.dtype() {
            GgmlDType::F32 => row_to_float::<f32>(&bytes, id, dst)?,
            GgmlDType::F16 => row_to_float::<f16>(&bytes, id, dst)?,
            GgmlDType::Q4_0 => row_to_float::<k_quants::BlockQ4_0>(&bytes, id, dst)?,
            GgmlDType::Q4_1 => row_to_float::<k_quants::BlockQ4_1>(&bytes, id, dst)?,
            GgmlDType::Q5_0 => row_to_float::<k_quants::BlockQ5_0>(&bytes, id, dst)?,
            GgmlDType::Q5_1 => row_to_float::<k_quants::BlockQ5_1>(&bytes, id, dst)?,
            GgmlDType::Q8_0 => row_to_float::<k_quants::BlockQ8_0>(&bytes, id, dst)?,
            GgmlDType::Q2K => row_to_float::<k_quants::BlockQ2K>(&bytes, id, dst)?,
            GgmlDType::Q3K => row_to_float::<k_quants::BlockQ3K>(&bytes, id, dst)?,
            GgmlDType::Q4K => row_to_float::<k_quants::BlockQ4K>(&bytes, id, dst)?,
            GgmlDType::Q5K => row_to_float::<k_quants::BlockQ5K>(&bytes, id, dst)?,
            GgmlDType::Q6K => row_to_float::<k_quants::BlockQ6K>(&bytes, id, dst)?,
            other => return Err(Error::BadMetadata(format!("cannot dequantize weight type {other:?}"))),
        }
    }
    Ok(Tensor::from_vec(out, (ids.len(), cols), device)?)
}

fn row_to_float<T: GgmlType>(bytes: &[u8], row: u32, dst: &mut [f32]) -> Result<()> {
    let per_row = dst.len() / T::BLCK_SIZE;
    let all = kernels::blocks_of::<T>(bytes)?;
    let start = row as usize * per_row;
    T::to_float(&all[start..start + per_row], dst);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn random(shape: (usize, usize), seed: u64) -> Tensor {
        let mut state = seed;
        let data: Vec<f32> = (0..shape.0 * shape.1)
            .map(|_| {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((state >> 33) as f32 / (1u64 << 31) as f32) - 0.5
            })
            .collect();
        Tensor::from_vec(data, shape, &Device::Cpu).unwrap()
    }

    #[test]
    fn rows_do_not_depend_on_their_batch() {
        // 19 rows span several row tiles of the multi-row kernels; 80 columns, several chunks.
        for dtype in [GgmlDType::Q4K, GgmlDType::Q6K, GgmlDType::Q5_0, GgmlDType::Q8_0, GgmlDType::Q4_0] {
            let w = QTensor::quantize(&random((80, 512), 1), dtype).unwrap();
            let linear = QLinear::new(w, None).unwrap();
            let x = random((19, 512), 2);
            let batched = linear.forward(&x).unwrap();
            for row in 0..19 {
                let single = linear.forward(&x.narrow(0, row, 1).unwrap()).unwrap();
                let a: Vec<f32> = batched.get(row).unwrap().to_vec1().unwrap();
                let b: Vec<f32> = single.get(0).unwrap().to_vec1().unwrap();
                assert_eq!(a, b, "{dtype:?} row {row}");
            }
        }
    }

    #[test]
    fn agrees_with_the_dense_product_to_activation_precision() {
        // The reference is the f32 product with the dequantized weights: ours differs from it
        // only by the 8-bit rounding of the activations. (candle's own QMatMul is no reference
        // on every host: on an AVX-512 one its Q8_0 path was 3% off this product.)
        for dtype in [GgmlDType::Q4K, GgmlDType::Q6K, GgmlDType::Q8_0, GgmlDType::Q5_0] {
            let w = QTensor::quantize(&random((64, 512), 3), dtype).unwrap();
            let dense = w.dequantize(&Device::Cpu).unwrap();
            let x = random((11, 512), 4);
            let theirs: Vec<f32> = x.matmul(&dense.t().unwrap()).unwrap().flatten_all().unwrap().to_vec1().unwrap();
            let ours: Vec<f32> =
                QLinear::new(w, None).unwrap().forward(&x).unwrap().flatten_all().unwrap().to_vec1().unwrap();
            for (a, b) in ours.iter().zip(&theirs) {
                assert!((a - b).abs() < 3e-2 * (1.0 + b.abs()), "{dtype:?}: {a} vs {b}");
            }
        }
    }

    #[test]
    fn embedding_rows_match_full_dequantization() {
        let w = QTensor::quantize(&random((16, 256), 5), GgmlDType::Q4K).unwrap();
        let full = w.dequantize(&Device::Cpu).unwrap();
        let rows = QLinear::new(w, None).unwrap().rows(&[3, 0, 15], &Device::Cpu).unwrap();
        for (i, id) in [3usize, 0, 15].iter().enumerate() {
            let a: Vec<f32> = rows.get(i).unwrap().to_vec1().unwrap();
            let b: Vec<f32> = full.get(*id).unwrap().to_vec1().unwrap();
            assert_eq!(a, b);
        }
        let w = QTensor::quantize(&random((16, 256), 5), GgmlDType::Q4_0).unwrap();
        assert!(QLinear::new(w, None).unwrap().rows(&[16], &Device::Cpu).is_err());
    }

    #[test]
    fn gathered_rows_take_a_smaller_type_only() {
        let ids = [5u32, 1, 7];
        let gathered = |dtype| {
            let w = QTensor::quantize(&random((8, 256), 7), dtype).unwrap();
            QLinear::new(w, None).unwrap().gather_rows(&ids, Some(GgmlDType::Q5_0)).unwrap().unwrap()
        };
        let from_q8 = gathered(GgmlDType::Q8_0);
        assert_eq!((from_q8.dtype(), from_q8.shape), (GgmlDType::Q5_0, (3, 256)));
        assert_eq!(gathered(GgmlDType::Q4K).dtype(), GgmlDType::Q4K, "Q4_K is already smaller");
    }

    #[test]
    fn slow_kernels_are_requantized_on_cpu_only() {
        let w = QTensor::quantize(&random((8, 64), 6), GgmlDType::Q5_1).unwrap();
        let fast = with_fast_cpu_kernel(w, &Device::Cpu).unwrap();
        assert_eq!(fast.dtype(), GgmlDType::Q8_0);
        // Q5_0 has a kernel of ours, and keeps its 5 bits.
        let w = QTensor::quantize(&random((8, 64), 6), GgmlDType::Q5_0).unwrap();
        assert_eq!(with_fast_cpu_kernel(w, &Device::Cpu).unwrap().dtype(), GgmlDType::Q5_0);
    }
}
