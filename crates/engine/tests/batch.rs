//! One pass over several sequences gives each sequence the bits of its pass alone: sequences
//! at different depths mixing a one-row decode, a k+1 verification and a prefill chunk, on
//! tiny synthetic models in the real pair's weight types (Q4_K with Q6_K and Q8_0; Q5_0 tied)
//! and f32, with keys and values in f32, f16 and q8_0, and a draft's cut output layer. The
//! rows go through the kernels of this CPU's best path (`tests/kernels.rs` holds every path
//! to the same bits, row count by row count).

mod common;

use candle_core::Device;
use specula_engine::gguf::GgufFile;
use specula_engine::models::decoder::{Decoder, Rows};
use specula_engine::models::load_decoder;
use specula_engine::sequence::Sequence;
use specula_engine::{synth, KvFormat};

fn decoder(preset: &str, kv: KvFormat) -> Decoder {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.gguf");
    synth::write(&synth::Spec::preset(preset, 5).unwrap(), &synth::tiny_tokenizer(), &path).unwrap();
    let mut gguf = GgufFile::open(&path).unwrap();
    load_decoder(&mut gguf, &Device::Cpu, 512, kv).unwrap().0
}

fn tokens(n: usize, seed: u32) -> Vec<u32> {
    (0..n as u32).map(|i| (i * 37 + seed * 101) % 250).collect()
}

fn bits(logits: &candle_core::Tensor) -> Vec<Vec<u32>> {
    let rows: Vec<Vec<f32>> = logits.to_vec2().unwrap();
    rows.iter().map(|row| row.iter().map(|v| v.to_bits()).collect()).collect()
}

/// A sequence that has been fed `history` (in chunks, as a prefill feeds it).
fn fed(decoder: &Decoder, history: &[u32]) -> Sequence {
    let mut sequence = decoder.new_sequence().unwrap();
    for chunk in history.chunks(48) {
        decoder.forward(&mut sequence, chunk, false).unwrap();
    }
    sequence
}

/// The rows of one pass for each sequence: its tokens and whether all its logits are wanted.
type Step = Vec<(Vec<u32>, bool)>;

/// Feed `steps` to sequences with `histories`, batched and one at a time; every logit and
/// every cache after must agree bit for bit.
fn check(decoder: &Decoder, histories: &[Vec<u32>], steps: &[Step], rollback: &[usize], what: &str) {
    let mut batched: Vec<Sequence> = histories.iter().map(|h| fed(decoder, h)).collect();
    let mut alone: Vec<Sequence> = histories.iter().map(|h| fed(decoder, h)).collect();
    for (s, step) in steps.iter().enumerate() {
        let mut rows: Vec<Rows> = batched
            .iter_mut()
            .zip(step)
            .map(|(sequence, (tokens, all_positions))| Rows { sequence, tokens, all_positions: *all_positions })
            .collect();
        let together = decoder.forward_batch(&mut rows).unwrap();
        for (i, ((sequence, (tokens, all)), logits)) in alone.iter_mut().zip(step).zip(together).enumerate() {
            let single = decoder.forward(sequence, tokens, *all).unwrap();
            assert_eq!(bits(&logits.unwrap()), bits(&single), "{what}: step {s}, sequence {i}");
        }
        // A verification's rejected rows forgotten, in both.
        for (sequence, &back) in batched.iter_mut().chain(alone.iter_mut()).zip(rollback.iter().cycle()) {
            sequence.truncate(sequence.len() - back.min(sequence.len()));
        }
    }
    // The caches hold the same: one more row scores the same in each.
    for (i, (b, a)) in batched.iter_mut().zip(alone.iter_mut()).enumerate() {
        assert_eq!(b.len(), a.len());
        let (x, y) = (decoder.forward(b, &[7], true).unwrap(), decoder.forward(a, &[7], true).unwrap());
        assert_eq!(bits(&x), bits(&y), "{what}: sequence {i} after the steps");
    }
}

/// Four sequences at depths 100, 37, 0 and 200: a decode, a verification of 5, a prefill chunk
/// of 64 (last logits only) and a decode wanting all its logits; then other mixes.
fn mixes() -> (Vec<Vec<u32>>, Vec<Step>, Vec<usize>) {
    let histories = vec![tokens(100, 1), tokens(37, 2), Vec::new(), tokens(200, 4)];
    let steps = vec![
        vec![(vec![11], false), (tokens(5, 6), true), (tokens(64, 7), false), (vec![12], true)],
        vec![(tokens(4, 8), true), (vec![13], false), (tokens(30, 9), false), (tokens(9, 10), true)],
        vec![(vec![14], false), (vec![15], false), (vec![16], false), (vec![17], false)],
    ];
    // After each step the first sequence keeps all, the second forgets 2 rows (a rejection).
    (histories, steps, vec![0, 2, 0, 0])
}

#[test]
fn a_batched_pass_gives_each_sequence_the_bits_of_its_pass_alone() {
    let (histories, steps, rollback) = mixes();
    for (preset, formats) in [
        ("tiny", &[KvFormat::F32, KvFormat::F16][..]),
        ("tiny-q4k", &[KvFormat::F32, KvFormat::F16, KvFormat::Q8_0][..]),
        ("tiny-q5", &[KvFormat::F16, KvFormat::Q8_0][..]),
    ] {
        for &kv in formats {
            check(&decoder(preset, kv), &histories, &steps, &rollback, &format!("{preset}, {kv:?}"));
        }
    }
}

#[test]
fn a_cut_output_layer_scores_each_sequence_by_its_own_conversation_in_a_batch() {
    // A draft's head cut to a third of the vocabulary: each sequence's own rare tokens are
    // scored beside it, and another sequence's never leak into its scores.
    let (histories, steps, rollback) = mixes();
    let mut draft = decoder("tiny-q5", KvFormat::F16);
    assert!(draft.restrict_output(Some(&(0..90).collect::<Vec<u32>>())).unwrap());
    check(&draft, &histories, &steps, &rollback, "cut head");
}

#[test]
fn a_sequence_past_its_room_fails_alone_and_the_others_run() {
    let decoder = decoder("tiny-q4k", KvFormat::F16);
    let mut full = fed(&decoder, &tokens(510, 1));
    let (mut a, mut a_alone) = (fed(&decoder, &tokens(20, 2)), fed(&decoder, &tokens(20, 2)));
    let mut rows = vec![
        Rows { sequence: &mut full, tokens: &[1, 2, 3], all_positions: false },
        Rows { sequence: &mut a, tokens: &[4, 5], all_positions: true },
    ];
    let out = decoder.forward_batch(&mut rows).unwrap();
    let mut out = out.into_iter();
    let refused = out.next().unwrap().unwrap_err().to_string();
    assert!(refused.contains("513") || refused.to_lowercase().contains("context"), "{refused}");
    let single = decoder.forward(&mut a_alone, &[4, 5], true).unwrap();
    assert_eq!(bits(&out.next().unwrap().unwrap()), bits(&single));
    assert_eq!((full.len(), a.len()), (510, 22), "the refused sequence is as it was");
}

/// The greedy pick of each row of `logits`' last row.
fn argmax(logits: &candle_core::Tensor) -> u32 {
    let rows: Vec<Vec<f32>> = logits.to_vec2().unwrap();
    let last = rows.last().unwrap();
    (0..last.len()).max_by(|&a, &b| last[a].total_cmp(&last[b]).then(b.cmp(&a))).unwrap() as u32
}

#[test]
fn on_the_real_target_prompts_decoded_together_get_each_the_reply_and_bits_they_get_alone() {
    let path = common::model(common::TARGET);
    let mut gguf = GgufFile::open(&path).unwrap();
    let tokenizer = specula_engine::Tokenizer::from_gguf(&gguf).unwrap();
    let (target, _) = load_decoder(&mut gguf, &common::device(), 1024, KvFormat::F16).unwrap();
    let prompts: Vec<Vec<u32>> = common::PROMPTS[..3].iter().map(|p| tokenizer.encode(p).unwrap()).collect();
    let steps = 12;

    // Each alone: its prompt in one pass, then one token a pass.
    let alone: Vec<(Vec<u32>, Vec<Vec<u32>>)> = prompts
        .iter()
        .map(|prompt| {
            let mut sequence = target.new_sequence().unwrap();
            let mut logits = target.forward(&mut sequence, prompt, false).unwrap();
            let (mut reply, mut all_bits) = (Vec::new(), Vec::new());
            for _ in 0..steps {
                let next = argmax(&logits);
                reply.push(next);
                all_bits.push(bits(&logits).concat());
                logits = target.forward(&mut sequence, &[next], false).unwrap();
            }
            (reply, all_bits)
        })
        .collect();

    // Together: the three prompts (of different lengths) in one pass, then one pass a step
    // for the three sequences' next tokens.
    let mut sequences: Vec<Sequence> = prompts.iter().map(|_| target.new_sequence().unwrap()).collect();
    let mut fed: Vec<Vec<u32>> = prompts.clone();
    let mut replies: Vec<Vec<u32>> = vec![Vec::new(); prompts.len()];
    for step in 0..steps {
        let mut rows: Vec<Rows> = sequences
            .iter_mut()
            .zip(&fed)
            .map(|(sequence, tokens)| Rows { sequence, tokens, all_positions: false })
            .collect();
        let logits = target.forward_batch(&mut rows).unwrap();
        for (i, logits) in logits.into_iter().enumerate() {
            let logits = logits.unwrap();
            assert_eq!(bits(&logits).concat(), alone[i].1[step], "prompt {i}, step {step}: the logits' bits");
            let next = argmax(&logits);
            replies[i].push(next);
            fed[i] = vec![next];
        }
    }
    for (i, reply) in replies.iter().enumerate() {
        assert_eq!(reply, &alone[i].0, "prompt {i}: {:?}", tokenizer.decode(reply));
    }
}
