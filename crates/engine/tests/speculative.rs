//! Exactness of speculative decoding on the real Qwen2.5-Coder pair: greedy and reproducible
//! replies are token-identical to plain decoding, with the invariants checked at every step.

mod common;

use common::*;
use specula_engine::speculative::{generate_speculative, CostModel, DraftModel, Drafter, KSetting, SpeculativeOptions};
use specula_engine::{
    generate_plain, Flow, GenerateOptions, Generation, LoadedModel, Message, Mode, NullSink, SamplingParams, Source,
    StepEvent, TokenEvent, TokenSink,
};

struct Pair {
    target: LoadedModel,
    draft: DraftModel,
}

fn pair() -> Pair {
    let target = LoadedModel::load(model(TARGET), &device(), 1024).unwrap();
    let draft = LoadedModel::load(model(DRAFT), &device(), 1024).unwrap();
    specula_engine::check_pair(&target.tokenizer, &draft.tokenizer).unwrap();
    Pair { target, draft: DraftModel::new(draft.model) }
}

/// Checks that every step commits at least one token. (The cache lengths after every step are
/// asserted inside the loop, which these debug-built tests run with assertions on.)
#[derive(Default)]
struct InvariantSink {
    committed: usize,
    at_last_step: usize,
    steps: usize,
}

impl TokenSink for InvariantSink {
    fn on_token(&mut self, _: &TokenEvent) -> Flow {
        self.committed += 1;
        Flow::Continue
    }
    fn on_step(&mut self, step: &StepEvent) -> Flow {
        assert!(self.committed > self.at_last_step, "a step committed nothing");
        assert_eq!(step.generated, self.committed);
        self.at_last_step = self.committed;
        self.steps += 1;
        Flow::Continue
    }
}

fn ids(g: &Generation) -> Vec<u32> {
    g.tokens.iter().map(|t| t.id).collect()
}

fn speculate(pair: &mut Pair, prompt: &[u32], options: &GenerateOptions, k: KSetting) -> Generation {
    let spec = SpeculativeOptions { k, ..Default::default() };
    let mut sink = InvariantSink::default();
    let g = generate_speculative(
        &mut pair.target.model,
        &mut pair.draft,
        &pair.target.tokenizer,
        prompt,
        options,
        &spec,
        &mut CostModel::new(),
        &mut sink,
    )
    .unwrap();
    // After the reply, both caches hold the committed tokens but the newest.
    let n_past = prompt.len() + g.tokens.len() - 1;
    assert_eq!(pair.target.model.len(), n_past, "target cache after the reply");
    assert!(pair.draft.cached_len() <= n_past, "draft cache after the reply");
    assert!(sink.steps >= 1);
    g
}

fn prompt(pair: &Pair, user: &str) -> Vec<u32> {
    pair.target.chat_prompt(&[Message::user(user)]).unwrap()
}

#[test]
fn greedy_speculative_equals_plain() {
    let mut pair = pair();
    let options = GenerateOptions { max_tokens: 64, sampling: SamplingParams::greedy(), stop: vec![] };
    let mut mismatches = 0;
    for user in PROMPTS {
        let prompt = prompt(&pair, user);
        let plain =
            generate_plain(&mut pair.target.model, &pair.target.tokenizer, &prompt, &options, &mut NullSink).unwrap();
        for k in [KSetting::Fixed(1), KSetting::Fixed(4), KSetting::Auto { max: 8 }] {
            let spec = speculate(&mut pair, &prompt, &options, k);
            let s = spec.stats.speculative.as_ref().unwrap();
            eprintln!(
                "{k:?} {:>3} tokens, {}/{} accepted, {} passes: {:?}",
                spec.tokens.len(),
                s.accepted,
                s.drafted,
                s.target_passes,
                user
            );
            if ids(&spec) != ids(&plain) {
                mismatches += 1;
                eprintln!("MISMATCH {k:?} {user:?}\n plain: {:?}\n spec:  {:?}", plain.text, spec.text);
            }
            assert_eq!(spec.text, plain.text);
            assert!(spec.tokens.iter().any(|t| t.source == Source::Accepted) || s.drafted == 0 || s.accepted == 0);
        }
    }
    assert_eq!(mismatches, 0);
}

#[test]
fn reproducible_speculative_equals_plain_with_the_same_seed() {
    let mut pair = pair();
    for user in PROMPTS {
        let prompt = prompt(&pair, user);
        for seed in [1, 2, 3] {
            let sampling = SamplingParams { mode: Mode::Reproducible, temperature: 0.8, seed, ..Default::default() };
            let options = GenerateOptions { max_tokens: 12, sampling, stop: vec![] };
            let plain =
                generate_plain(&mut pair.target.model, &pair.target.tokenizer, &prompt, &options, &mut NullSink)
                    .unwrap();
            for k in [KSetting::Fixed(1), KSetting::Fixed(4), KSetting::Auto { max: 8 }] {
                let spec = speculate(&mut pair, &prompt, &options, k);
                assert_eq!(ids(&spec), ids(&plain), "seed {seed} {k:?} {user:?}");
            }
        }
    }
}

#[test]
fn provenance_carries_p_and_q() {
    let mut pair = pair();
    let options = GenerateOptions { max_tokens: 24, sampling: SamplingParams::greedy(), stop: vec![] };
    let prompt = prompt(&pair, PROMPTS[0]);
    let g = speculate(&mut pair, &prompt, &options, KSetting::Fixed(4));
    for t in &g.tokens {
        assert!(t.p.is_some(), "{t:?}");
        match t.source {
            Source::Accepted | Source::Resampled => assert!(t.q.is_some(), "{t:?}"),
            Source::Bonus | Source::Target => assert!(t.q.is_none(), "{t:?}"),
        }
    }
    assert!(g.tokens.iter().any(|t| t.source == Source::Accepted));
    let s = g.stats.speculative.unwrap();
    assert!(s.speedup_vs_plain.is_some() && s.predicted_speedup.is_some() && s.plain_ms_per_token.is_some());
    assert!(s.target_passes < g.tokens.len(), "drafts were accepted, so fewer passes than tokens");
}

#[test]
fn a_draft_with_another_vocabulary_is_refused() {
    let mut session = specula_engine::Session::load(model(TARGET), &device(), 256).unwrap();
    let err = session.load_draft(model(SMOLLM), &device()).unwrap_err();
    assert_eq!(err.code(), "incompatible_draft");
    let message = err.to_string();
    eprintln!("{message}");
    assert!(message.contains("in the target but"), "{message}");
    assert!(session.draft_info().is_none(), "the target stays usable without a draft");
}
