//! Greedy decoding of the 1.5B target against text from an independent engine (llama.cpp).
//! Two engines may pick differently at a near-tie, but nowhere else: each prompt must match up
//! to its first divergence, where our top-two logits must be within 0.1.

mod common;

use common::*;
use specula_engine::{GenerateOptions, LoadedModel, Message, NullSink, SamplingParams};

#[test]
fn greedy_reproduces_llama_cpp_up_to_near_ties() {
    let golden = golden("greedy.json");
    let cases = golden["models"][TARGET].as_array().unwrap();
    let n_predict = golden["n_predict"].as_u64().unwrap() as usize;
    let mut lm = LoadedModel::load(model(TARGET), &device(), 1024).unwrap();
    let options = GenerateOptions {
        max_tokens: n_predict,
        sampling: SamplingParams::greedy(),
        stop: vec![],
        ..Default::default()
    };
    let mut full_matches = 0;
    for case in cases {
        let user = case["user"].as_str().unwrap();
        let expected_prompt = case["prompt"].as_str().unwrap();
        // The default template adds Qwen's default system prompt.
        let rendered = lm.template.render(&[Message::user(user)]).unwrap();
        assert_eq!(rendered, expected_prompt);
        let prompt = lm.tokenizer.encode(&rendered).unwrap();
        let ours = lm.generate(&prompt, &options, &mut NullSink).unwrap();
        let expected = case["greedy_text"].as_str().unwrap();
        if ours.text == expected {
            full_matches += 1;
            eprintln!("match   {user:?}");
            continue;
        }
        // Find the first token where the texts part, and measure our top-two gap there.
        let mut text = String::new();
        let mut diverged_at = ours.tokens.len();
        for (i, t) in ours.tokens.iter().enumerate() {
            text.push_str(&t.text);
            if !expected.starts_with(&text) {
                diverged_at = i;
                break;
            }
        }
        let mut context = prompt.clone();
        context.extend(ours.tokens[..diverged_at].iter().map(|t| t.id));
        let logits = lm.model.advance_to(&context).unwrap();
        let mut sorted = logits.clone();
        sorted.sort_by(|a, b| b.total_cmp(a));
        let gap = sorted[0] - sorted[1];
        eprintln!("diverge {user:?} at token {diverged_at}: top-two logit gap {gap:.4}");
        assert!(gap < 0.1, "{user:?}: diverged at token {diverged_at} with a clear winner (gap {gap})");
    }
    eprintln!("{full_matches} of {} prompts match over all {n_predict} tokens", cases.len());
    assert!(full_matches >= 3, "only {full_matches} full matches");
}
