//! Real GGUF models score every position and roll back.

mod common;

use candle_core::{Device, Tensor};
use common::*;
use specula_engine::gguf::GgufFile;
use specula_engine::models::load_model;
use specula_engine::CausalLm;

fn load(name: &str) -> Box<dyn CausalLm> {
    let mut gguf = GgufFile::open(model(name)).unwrap();
    load_model(&mut gguf, &device(), 512, Default::default()).unwrap().0
}

fn input(name: &str, len: usize) -> Vec<u32> {
    // Real text in the model's own tokens, so the logits are those of ordinary use.
    let gguf = GgufFile::open(model(name)).unwrap();
    let tokenizer = specula_engine::Tokenizer::from_gguf(&gguf).unwrap();
    let text = "fn main() {\n    let numbers = vec![1, 2, 3, 4, 5];\n    let total: i32 = numbers.iter().sum();\n    println!(\"The total is {}\", total);\n    for n in numbers.iter().filter(|n| *n % 2 == 0) {\n        println!(\"even: {n}\");\n    }\n}\n";
    let ids = tokenizer.encode(text).unwrap();
    assert!(ids.len() >= len, "{} tokens", ids.len());
    ids[..len].to_vec()
}

fn rows(t: &Tensor) -> Vec<Vec<f32>> {
    t.to_vec2().unwrap()
}

fn argmax(v: &[f32]) -> usize {
    specula_engine::sampling::argmax(v) as usize
}

/// One forward over n tokens against n single-token forwards, at 20 spread positions.
fn all_positions_match_single_steps(name: &str) {
    let tokens = input(name, 60);
    let mut model = load(name);
    let batched = rows(&model.forward(&tokens).unwrap());
    assert_eq!(batched.len(), 60);
    model.truncate(0);
    let mut single = Vec::new();
    for &t in &tokens {
        single.push(rows(&model.forward(&[t]).unwrap()).remove(0));
    }
    let positions: Vec<usize> = (0..20).map(|i| (i * 37 + 11) % 60).collect();
    for &pos in &positions {
        let (a, b) = (&batched[pos], &single[pos]);
        let range = b.iter().copied().fold(f32::MIN, f32::max) - b.iter().copied().fold(f32::MAX, f32::min);
        let diff = a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
        assert!(diff <= 1e-3 * range, "{name} position {pos}: max diff {diff}, range {range}");
        assert_eq!(argmax(a), argmax(b), "{name} position {pos}");
        // Stronger than asked: every op is row-independent, so the logits are bit-identical.
        assert_eq!(a, b, "{name} position {pos}: batched and single-step logits differ");
    }
}

#[test]
fn qwen2_scores_every_position() {
    all_positions_match_single_steps(TARGET);
}

#[test]
fn llama_scores_every_position() {
    all_positions_match_single_steps(SMOLLM);
}

#[test]
fn gemma3_scores_every_position() {
    all_positions_match_single_steps(GEMMA);
}

fn rollback_forgets_rejected_tokens(name: &str) {
    let tokens = input(name, 40);
    let (prefix, extra) = tokens.split_at(30);
    let mut model = load(name);
    model.forward(prefix).unwrap();
    model.forward(extra).unwrap();
    assert_eq!(model.len(), 40);
    model.truncate(30);
    assert_eq!(model.len(), 30);
    let next = rows(&model.forward(&[tokens[5]]).unwrap()).remove(0);

    let mut fresh = load(name);
    fresh.forward(prefix).unwrap();
    let expected = rows(&fresh.forward(&[tokens[5]]).unwrap()).remove(0);
    assert_eq!(next, expected, "{name}: logits after rollback differ from a cache that never saw the extra tokens");
}

#[test]
fn qwen2_rollback_is_exact() {
    rollback_forgets_rejected_tokens(TARGET);
}

#[test]
fn llama_rollback_is_exact() {
    rollback_forgets_rejected_tokens(SMOLLM);
}

#[test]
fn gemma3_rollback_is_exact() {
    rollback_forgets_rejected_tokens(GEMMA);
}

/// A draft's output layer cut to some tokens (the pruned head) scores them as the full layer
/// does within a smaller type's rounding, scores the tokens it was fed too (the conversation's words, within the
/// activations' rounding), gives every other token -inf, and forgets fed tokens on rollback.
#[test]
fn a_pruned_head_scores_its_tokens_and_the_conversations() {
    let tokens = input(DRAFT, 40);
    let mut full = load(DRAFT);
    let expected = rows(&full.forward(&tokens).unwrap());
    let gguf = GgufFile::open(model(DRAFT)).unwrap();
    let tokenizer = specula_engine::Tokenizer::from_gguf(&gguf).unwrap();
    let ids = specula_engine::session::pruned_vocab(&tokenizer, 2000);
    let mut pruned = load(DRAFT);
    assert!(pruned.restrict_output(Some(&ids)).unwrap());
    let got = rows(&pruned.forward(&tokens).unwrap());
    let frequent: std::collections::HashSet<u32> = ids.iter().copied().collect();
    let fed_later = |t: &u32| !frequent.contains(t) && !tokens[..10].contains(t);
    let rare: Vec<u32> = tokens.iter().copied().filter(|t| !frequent.contains(t)).collect();
    assert!(tokens[10..].iter().any(fed_later), "the input must feed rare tokens after position 10: {rare:?}");
    let best_kept =
        |scores: &[f32]| ids.iter().copied().max_by(|&a, &b| scores[a as usize].total_cmp(&scores[b as usize]));
    let same_best = expected.iter().zip(&got).filter(|(want, have)| best_kept(want) == best_kept(have)).count();
    assert!(
        same_best * 10 >= expected.len() * 9,
        "the best kept token moved at {} of {} positions",
        expected.len() - same_best,
        expected.len()
    );
    for (want, have) in expected.iter().zip(&got) {
        for id in 0..want.len() as u32 {
            let (w, h) = (want[id as usize], have[id as usize]);
            match (frequent.contains(&id), tokens.contains(&id)) {
                // Kept rows are stored as Q5_0 (the draft's precision moves only acceptance):
                // within its rounding (0.62 at most on this input) of the full layer's Q8_0.
                (true, _) => assert!((w - h).abs() < 1.0, "kept token {id}: {h} against {w}"),
                (false, true) => assert!((w - h).abs() < 0.25, "fed token {id}: {h} against {w}"),
                (false, false) => assert_eq!(h, f32::NEG_INFINITY, "token {id} was neither kept nor fed"),
            }
        }
    }
    // Rolled back to 10 positions, the rare tokens first fed after them score -inf again.
    pruned.truncate(10);
    let after = rows(&pruned.forward(&tokens[10..11]).unwrap());
    for id in tokens[11..].iter().filter(|t| fed_later(t) && **t != tokens[10]) {
        assert_eq!(after[0][*id as usize], f32::NEG_INFINITY, "token {id} outlived the rollback");
    }
}

/// The last position against candle-transformers' own quantized model, fed one token at a time.
/// Not bit-exact: on x86 candle multiplies Q4_K/Q6_K weights with repacked tile kernels that
/// quantize activations their own way (and batched prompts take yet other kernels), so the
/// rounding differs and accumulates over the layers to about 1% of the logit range. With
/// weight types that share a kernel (SmolLM2 without requantization) the logits agree exactly
/// for short inputs. The argmax must agree; independent agreement with llama.cpp is the
/// golden greedy test.
fn check_against_reference(ours: &[f32], theirs: &[f32], what: &str, tolerance: f32) {
    let range = theirs.iter().copied().fold(f32::MIN, f32::max) - theirs.iter().copied().fold(f32::MAX, f32::min);
    let diff = ours.iter().zip(theirs).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
    eprintln!("{what}: max |ours - candle| = {diff:.5} over a logit range of {range:.2}");
    assert!(diff <= tolerance * range, "{what}: {diff} vs range {range}");
    assert_eq!(argmax(ours), argmax(theirs), "{what}");
}

fn reference_last_logits(
    tokens: &[u32],
    mut step: impl FnMut(&Tensor, usize) -> candle_core::Result<Tensor>,
) -> Vec<f32> {
    let mut last = None;
    for (pos, &t) in tokens.iter().enumerate() {
        let input = Tensor::new(&[t], &Device::Cpu).unwrap().unsqueeze(0).unwrap();
        last = Some(step(&input, pos).unwrap());
    }
    last.unwrap().squeeze(0).unwrap().to_vec1().unwrap()
}

fn reference_content(name: &str) -> (std::fs::File, candle_core::quantized::gguf_file::Content) {
    let mut file = std::fs::File::open(model(name)).unwrap();
    let content = candle_core::quantized::gguf_file::Content::read(&mut file).unwrap();
    (file, content)
}

#[test]
fn qwen2_last_position_matches_candle_transformers() {
    let tokens = input(TARGET, 60);
    let ours = rows(&load(TARGET).forward(&tokens).unwrap()).pop().unwrap();
    let (mut file, content) = reference_content(TARGET);
    let mut reference =
        candle_transformers::models::quantized_qwen2::ModelWeights::from_gguf(content, &mut file, &Device::Cpu)
            .unwrap();
    let theirs = reference_last_logits(&tokens, |x, pos| reference.forward(x, pos));
    check_against_reference(&ours, &theirs, "qwen2", 2e-2);
}

#[test]
fn llama_last_position_matches_candle_transformers() {
    // SmolLM2's Q4_1 weights are requantized to Q8_0 at load (a faster kernel), so the logits
    // differ by a little more than rounding.
    let tokens = input(SMOLLM, 60);
    let ours = rows(&load(SMOLLM).forward(&tokens).unwrap()).pop().unwrap();
    let (mut file, content) = reference_content(SMOLLM);
    let mut reference =
        candle_transformers::models::quantized_llama::ModelWeights::from_gguf(content, &mut file, &Device::Cpu)
            .unwrap();
    let theirs = reference_last_logits(&tokens, |x, pos| reference.forward(x, pos));
    check_against_reference(&ours, &theirs, "llama", 5e-2);
}

/// Gemma 3 against HF transformers' own implementation (candle-transformers' quantized
/// Gemma 3 gates its MLP with SiLU instead of GELU, so it is no reference). Transformers ran
/// on the file's weights dequantized to f32, we on quantized activations, so logits differ by
/// rounding: our argmax must be its best at nearly all positions of four prompts and their
/// greedy replies, one of its tokens within `NEAR_TIE` of its best at all but one, and within
/// `ROUNDING` at every one. (With the Q5_0 projections multiplied as Q5_0, 98 of 101
/// positions agree exactly; at position 1 of one prompt, two tokens into the sequence, we pick
/// transformers' second choice, 0.45 below its best. Requantized to Q8_0, as before the Q5_0
/// kernel, the weights agreed at 96 and missed no near-tie.)
#[test]
fn gemma3_matches_transformers() {
    const NEAR_TIE: f64 = 0.25;
    const ROUNDING: f64 = 0.5;
    let reference = golden("gemma3_reference.json");
    let ids = |v: &serde_json::Value| -> Vec<u32> {
        v.as_array().unwrap().iter().map(|i| i.as_u64().unwrap() as u32).collect()
    };
    let mut model = load(GEMMA);
    let (mut positions, mut exact, mut wider) = (0, 0, 0);
    for case in reference["cases"].as_array().unwrap() {
        let sequence: Vec<u32> = [ids(&case["prompt"]), ids(&case["greedy"])].concat();
        model.truncate(0);
        let ours: Vec<u32> = rows(&model.forward(&sequence).unwrap()).iter().map(|r| argmax(r) as u32).collect();
        let tops = case["top5"].as_array().unwrap().iter().zip(case["below_best"].as_array().unwrap());
        for (pos, (top5, below)) in tops.enumerate() {
            let top5 = ids(top5);
            let below: Vec<f64> = below.as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
            let within = |margin: f64| -> Vec<u32> {
                top5.iter().zip(&below).filter(|(_, &b)| b < margin).map(|(&t, _)| t).collect()
            };
            let acceptable = within(ROUNDING);
            assert!(
                acceptable.contains(&ours[pos]),
                "position {pos} of {sequence:?}: {} not among {acceptable:?}",
                ours[pos]
            );
            wider += usize::from(!within(NEAR_TIE).contains(&ours[pos]));
            positions += 1;
            exact += usize::from(ours[pos] == top5[0]);
        }
    }
    eprintln!("gemma3: argmax equal to transformers' at {exact} of {positions} positions; {wider} past a near-tie");
    assert!(exact * 10 >= positions * 9, "{exact} of {positions}");
    assert!(wider <= 1, "{wider} positions past a near-tie");
}
