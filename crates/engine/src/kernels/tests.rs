//! Every path against the oracle (`reference`), bit for bit, on random weights of each type
//! at every row count the kernels split differently; and each row of a batch equal to the
//! same row alone. Paths this CPU lacks are skipped, saying so.

use super::*;
use candle_core::quantized::QTensor;
use candle_core::{Device, Tensor};

fn random(len: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut state = seed;
    (0..len)
        .map(|_| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (((state >> 33) as f32 / (1u64 << 31) as f32) - 0.5) * scale
        })
        .collect()
}

/// The oracle: `reference`'s row functions over the file's own blocks.
fn oracle(dtype: GgmlDType, (m, k, n): (usize, usize, usize), lhs: &[f32], bytes: &[u8]) -> Vec<f32> {
    let mut out = vec![0f32; m * n];
    for (r, row) in lhs.chunks_exact(k).enumerate() {
        for c in 0..n {
            out[r * n + c] = match dtype {
                GgmlDType::Q4K | GgmlDType::Q6K => {
                    let mut y = vec![BlockQ8K::zeros(); k / 256];
                    BlockQ8K::from_float(row, &mut y);
                    let y: &[Q8K] = cast_blocks(&y);
                    if dtype == GgmlDType::Q4K {
                        reference::q4k_row(&blocks_of::<Q4K>(bytes).unwrap()[c * k / 256..][..k / 256], y)
                    } else {
                        reference::q6k_row(&blocks_of::<Q6K>(bytes).unwrap()[c * k / 256..][..k / 256], y)
                    }
                }
                _ => {
                    let mut y = vec![BlockQ8_0::zeros(); k / 32];
                    BlockQ8_0::from_float(row, &mut y);
                    let y: &[Q8_0] = cast_blocks(&y);
                    if dtype == GgmlDType::Q8_0 {
                        reference::q8_0_row(&blocks_of::<Q8_0>(bytes).unwrap()[c * k / 32..][..k / 32], y)
                    } else {
                        reference::q5_0_row(&blocks_of::<Q5_0>(bytes).unwrap()[c * k / 32..][..k / 32], y)
                    }
                }
            };
        }
    }
    out
}

const TYPES: [GgmlDType; 4] = [GgmlDType::Q4K, GgmlDType::Q6K, GgmlDType::Q5_0, GgmlDType::Q8_0];

fn paths() -> Vec<Path> {
    Path::ALL
        .into_iter()
        .filter(|p| {
            let ok = p.available();
            if !ok {
                eprintln!("{}: this CPU lacks it, so its kernels are not tested here", p.name());
            }
            ok
        })
        .collect()
}

#[test]
fn every_path_is_bit_identical_to_the_reference_at_every_row_count() {
    // 21 output rows: two full groups of 8 and a padded one.
    let (k, n) = (512, 21);
    for dtype in TYPES {
        let w =
            QTensor::quantize(&Tensor::from_vec(random(n * k, 1, 1.0), (n, k), &Device::Cpu).unwrap(), dtype).unwrap();
        let bytes = w.data().unwrap();
        let packed = Packed::new(dtype, n, k, &bytes).unwrap().unwrap();
        for m in [1, 2, 3, 5, 8, 9, 17, 33, 40] {
            let lhs = random(m * k, m as u64 + 7, 4.0);
            let expected = oracle(dtype, (m, k, n), &lhs, &bytes);
            for path in paths() {
                let mut ours = vec![0f32; m * n];
                packed.matmul_on(path, m, &lhs, &mut ours).unwrap();
                assert_eq!(ours, expected, "{dtype:?} on {} at m = {m}", path.name());
            }
        }
    }
}

#[test]
fn a_row_of_a_batch_equals_the_row_alone() {
    let (k, n) = (256, 16);
    for dtype in TYPES {
        let w =
            QTensor::quantize(&Tensor::from_vec(random(n * k, 3, 1.0), (n, k), &Device::Cpu).unwrap(), dtype).unwrap();
        let packed = Packed::new(dtype, n, k, &w.data().unwrap()).unwrap().unwrap();
        let lhs = random(11 * k, 5, 2.0);
        let mut batched = vec![0f32; 11 * n];
        packed.matmul(11, &lhs, &mut batched).unwrap();
        for (row, expected) in lhs.chunks_exact(k).zip(batched.chunks_exact(n)) {
            let mut alone = vec![0f32; n];
            packed.matmul(1, row, &mut alone).unwrap();
            assert_eq!(alone, expected, "{dtype:?}");
        }
    }
}

#[test]
fn packed_rows_dequantize_as_the_file_does() {
    let (k, n) = (512, 13);
    for dtype in TYPES {
        let w =
            QTensor::quantize(&Tensor::from_vec(random(n * k, 9, 1.0), (n, k), &Device::Cpu).unwrap(), dtype).unwrap();
        let dense: Vec<Vec<f32>> = w.dequantize(&Device::Cpu).unwrap().to_vec2().unwrap();
        let packed = Packed::new(dtype, n, k, &w.data().unwrap()).unwrap().unwrap();
        for (row, expected) in dense.iter().enumerate() {
            let mut out = vec![0f32; k];
            packed.dequantize_row(row, &mut out).unwrap();
            assert_eq!(&out, expected, "{dtype:?} row {row}");
        }
    }
}

#[test]
fn close_to_the_dense_product() {
    // The reference itself: within the 8-bit rounding of the activations of the f32 product.
    let (k, n, m) = (1024, 24, 3);
    for dtype in TYPES {
        let w =
            QTensor::quantize(&Tensor::from_vec(random(n * k, 11, 1.0), (n, k), &Device::Cpu).unwrap(), dtype).unwrap();
        let dense: Vec<Vec<f32>> = w.dequantize(&Device::Cpu).unwrap().to_vec2().unwrap();
        let packed = Packed::new(dtype, n, k, &w.data().unwrap()).unwrap().unwrap();
        let lhs = random(m * k, 13, 2.0);
        let mut ours = vec![0f32; m * n];
        packed.matmul(m, &lhs, &mut ours).unwrap();
        for r in 0..m {
            for c in 0..n {
                let exact: f32 = lhs[r * k..(r + 1) * k].iter().zip(&dense[c]).map(|(a, b)| a * b).sum();
                let got = ours[r * n + c];
                assert!((got - exact).abs() < 0.03 * (1.0 + exact.abs()), "{dtype:?} ({r}, {c}): {got} vs {exact}");
            }
        }
    }
}

#[test]
fn sizes_that_do_not_fit_are_errors() {
    let w =
        QTensor::quantize(&Tensor::from_vec(random(8 * 256, 1, 1.0), (8, 256), &Device::Cpu).unwrap(), GgmlDType::Q4K)
            .unwrap();
    let bytes = w.data().unwrap();
    assert!(Packed::new(GgmlDType::Q4K, 9, 256, &bytes).is_err(), "more rows than blocks");
    let packed = Packed::new(GgmlDType::Q4K, 8, 256, &bytes).unwrap().unwrap();
    assert!(packed.matmul(2, &[0.0; 256], &mut [0.0; 16]).is_err(), "lhs of the wrong length");
    assert!(Packed::new(GgmlDType::Q4_0, 8, 256, &[]).unwrap().is_none(), "no kernel for Q4_0");
}

#[test]
fn gathered_rows_multiply_as_the_rows_of_the_whole() {
    let (k, n) = (256, 30);
    for dtype in TYPES {
        let w =
            QTensor::quantize(&Tensor::from_vec(random(n * k, 4, 1.0), (n, k), &Device::Cpu).unwrap(), dtype).unwrap();
        let whole = Packed::new(dtype, n, k, &w.data().unwrap()).unwrap().unwrap();
        let ids = [29u32, 0, 7, 8, 15, 3, 3, 22, 9];
        let part = whole.gather_rows(&ids).unwrap();
        let lhs = random(3 * k, 6, 2.0);
        let (mut all, mut some) = (vec![0f32; 3 * n], vec![0f32; 3 * ids.len()]);
        whole.matmul(3, &lhs, &mut all).unwrap();
        part.matmul(3, &lhs, &mut some).unwrap();
        for r in 0..3 {
            for (i, &id) in ids.iter().enumerate() {
                assert_eq!(some[r * ids.len() + i], all[r * n + id as usize], "{dtype:?}");
            }
        }
        assert!(whole.gather_rows(&[30]).is_err());
    }
}

#[test]
fn a_requantized_matrix_multiplies_as_candles_quantization_of_its_rows() {
    let (k, n) = (256, 13);
    for dtype in TYPES {
        let w =
            QTensor::quantize(&Tensor::from_vec(random(n * k, 8, 1.0), (n, k), &Device::Cpu).unwrap(), dtype).unwrap();
        let packed = Packed::new(dtype, n, k, &w.data().unwrap()).unwrap().unwrap();
        for to in [GgmlDType::Q5_0, GgmlDType::Q8_0] {
            let again = packed.requantized(to).unwrap();
            assert_eq!((again.dtype(), again.shape()), (to, (n, k)));
            // What candle makes of the same rows, dequantized from the original.
            let expected = QTensor::quantize(&w.dequantize(&Device::Cpu).unwrap(), to).unwrap();
            let expected = Packed::new(to, n, k, &expected.data().unwrap()).unwrap().unwrap();
            let lhs = random(2 * k, 9, 2.0);
            let (mut got, mut want) = (vec![0f32; 2 * n], vec![0f32; 2 * n]);
            again.matmul(2, &lhs, &mut got).unwrap();
            expected.matmul(2, &lhs, &mut want).unwrap();
            assert_eq!(got, want, "{dtype:?} -> {to:?}");
        }
    }
    let w =
        QTensor::quantize(&Tensor::zeros((1, 256), candle_core::DType::F32, &Device::Cpu).unwrap(), GgmlDType::Q8_0)
            .unwrap();
    let packed = Packed::new(GgmlDType::Q8_0, 1, 256, &w.data().unwrap()).unwrap().unwrap();
    assert!(packed.requantized(GgmlDType::Q4K).is_err(), "no requantizing to a k-quant");
}

#[test]
fn matrices_multiplied_together_give_what_each_gives_alone() {
    // Every type at once, so both activation types are quantized once and shared.
    let k = 512;
    let shapes = [(GgmlDType::Q4K, 24), (GgmlDType::Q6K, 9), (GgmlDType::Q5_0, 17), (GgmlDType::Q8_0, 8)];
    let mats: Vec<Packed> = shapes
        .iter()
        .enumerate()
        .map(|(i, &(dtype, n))| {
            let w = Tensor::from_vec(random(n * k, 20 + i as u64, 1.0), (n, k), &Device::Cpu).unwrap();
            Packed::new(dtype, n, k, &QTensor::quantize(&w, dtype).unwrap().data().unwrap()).unwrap().unwrap()
        })
        .collect();
    for m in [1, 5, 40] {
        let lhs = random(m * k, 30 + m as u64, 3.0);
        let mut together: Vec<Vec<f32>> = shapes.iter().map(|&(_, n)| vec![0f32; m * n]).collect();
        let mut dsts: Vec<&mut [f32]> = together.iter_mut().map(Vec::as_mut_slice).collect();
        Packed::matmul_many(&mats.iter().collect::<Vec<_>>(), m, &lhs, &mut dsts).unwrap();
        for ((mat, &(dtype, n)), together) in mats.iter().zip(&shapes).zip(&together) {
            let mut alone = vec![0f32; m * n];
            mat.matmul(m, &lhs, &mut alone).unwrap();
            assert_eq!(&alone, together, "{dtype:?} at m = {m}");
        }
    }
}
