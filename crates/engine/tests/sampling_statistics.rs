//! Sample mode keeps the target's distribution: over 20,000 replies from tiny random models
//! (vocabulary 16, draft and target different), the joint distribution of the first three
//! tokens matches the target's exact distribution (chi-square, p > 0.001). The same test
//! rejects a deliberately wrong rule (accept every draft), which shows it has power. The same
//! holds when the combined drafter copies from a prompt that repeats itself.

mod common;

use common::tiny::Tiny;
use specula_engine::sampling::{Sampler, TokenDistribution};
use specula_engine::speculative::{
    accept_sampled, generate_speculative, Combined, CostModel, DraftModel, Drafter, KSetting, Outcome,
    SpeculativeOptions,
};
use specula_engine::{CachedModel, GenerateOptions, Mode, NullSink, SamplingParams, Source, Tokenizer};
use statrs::distribution::{ChiSquared, ContinuousCDF};
use std::collections::HashMap;

const VOCAB: usize = 16;
const RUNS: usize = 20_000;
const PROMPT: [u32; 2] = [3, 7];

fn tiny_model(seed: u64, noise: f32) -> CachedModel {
    // Room for the repeating prompt (29 tokens) and a reply.
    Tiny { context: 64, ..Tiny::stats(seed, noise) }.model()
}

fn tokenizer() -> Tokenizer {
    Tiny::stats(0, 0.0).tokenizer()
}

/// "3 7", the target's own greedy text after it (24 tokens), then "3 7" and that text's first
/// token again: the first step has a copy to propose (the rest of that text), likely enough
/// under the target that copies are kept as well as rejected.
fn repeating_prompt() -> Vec<u32> {
    let mut target = tiny_model(1, 0.0);
    let options = GenerateOptions { max_tokens: 24, sampling: SamplingParams::greedy(), ..Default::default() };
    let text = specula_engine::generate_plain(&mut target, &tokenizer(), &PROMPT, &options, &mut NullSink).unwrap();
    let ids: Vec<u32> = text.tokens.iter().map(|t| t.id).collect();
    PROMPT.iter().chain(&ids).chain(&PROMPT).chain(&ids[..1]).copied().collect()
}

/// The target's exact probability of every 3-token continuation of `prompt`, by enumeration.
fn exact_joint(target: &mut CachedModel, params: &SamplingParams, prompt: &[u32]) -> Vec<f64> {
    let mut joint = vec![0f64; VOCAB.pow(3)];
    let probs = |model: &mut CachedModel, context: &[u32]| {
        params.probabilities(&model.advance_to(context).unwrap(), context).unwrap()
    };
    let after = |tokens: &[usize]| prompt.iter().copied().chain(tokens.iter().map(|&t| t as u32)).collect::<Vec<_>>();
    let p1 = probs(target, prompt);
    for a in 0..VOCAB {
        if p1[a] == 0.0 {
            continue;
        }
        let p2 = probs(target, &after(&[a]));
        for b in 0..VOCAB {
            if p2[b] == 0.0 {
                continue;
            }
            let p3 = probs(target, &after(&[a, b]));
            for c in 0..VOCAB {
                joint[a * VOCAB * VOCAB + b * VOCAB + c] = p1[a] as f64 * p2[b] as f64 * p3[c] as f64;
            }
        }
    }
    joint
}

/// p-value of a chi-square goodness-of-fit test; cells expected below 5 are pooled.
fn chi_square_p(counts: &[usize], expected: &[f64], runs: usize) -> f64 {
    let (mut stat, mut cells) = (0f64, 0usize);
    let (mut pooled_obs, mut pooled_exp) = (0f64, 0f64);
    for (&o, &p) in counts.iter().zip(expected) {
        let e = p * runs as f64;
        if e >= 5.0 {
            stat += (o as f64 - e).powi(2) / e;
            cells += 1;
        } else {
            pooled_obs += o as f64;
            pooled_exp += e;
        }
    }
    if pooled_exp > 0.0 {
        stat += (pooled_obs - pooled_exp).powi(2) / pooled_exp.max(1e-9);
        cells += 1;
    }
    let p = 1.0 - ChiSquared::new((cells - 1) as f64).unwrap().cdf(stat);
    eprintln!("chi-square {stat:.1} over {cells} cells: p = {p:.4}");
    p
}

fn always_accept(drafts: &[u32], p: &[Vec<f32>], _q: &[Vec<f32>], rng: &mut rand::rngs::StdRng) -> Outcome {
    Outcome {
        accepted: drafts.len(),
        next: specula_engine::sampling::sample(&p[drafts.len()], rng),
        next_source: Source::Bonus,
    }
}

/// The p-value of the fit, and how many tokens came from each source.
fn speculative_p_value(params: SamplingParams, spec: SpeculativeOptions) -> (f64, HashMap<String, usize>) {
    speculative_p_value_with(params, spec, None)
}

/// [`speculative_p_value`] with a draft that may propose only the tokens `pruned`.
fn speculative_p_value_with(
    params: SamplingParams,
    spec: SpeculativeOptions,
    pruned: Option<&[u32]>,
) -> (f64, HashMap<String, usize>) {
    let mut draft = DraftModel::new(tiny_model(1, 0.5));
    if let Some(ids) = pruned {
        assert!(draft.restrict_vocab(Some(ids)).unwrap());
    }
    fit(params, spec, &mut draft, &PROMPT)
}

/// The p-value of the fit of replies to `prompt` drafted by `drafter`, and their sources.
fn fit(
    params: SamplingParams,
    spec: SpeculativeOptions,
    draft: &mut dyn Drafter,
    prompt: &[u32],
) -> (f64, HashMap<String, usize>) {
    let mut target = tiny_model(1, 0.0);
    let tokenizer = tokenizer();
    let expected = exact_joint(&mut target, &params, prompt);
    let mut counts = vec![0usize; VOCAB.pow(3)];
    let mut sources: HashMap<String, usize> = HashMap::new();
    for run in 0..RUNS {
        let options = GenerateOptions {
            max_tokens: 3,
            sampling: SamplingParams { seed: run as u64, ..params.clone() },
            ..Default::default()
        };
        let g = generate_speculative(
            &mut target,
            &mut *draft,
            &tokenizer,
            prompt,
            &options,
            &spec,
            &mut CostModel::new(),
            &mut NullSink,
        )
        .unwrap();
        let ids: Vec<usize> = g.tokens.iter().map(|t| t.id as usize).collect();
        assert_eq!(ids.len(), 3);
        counts[ids[0] * VOCAB * VOCAB + ids[1] * VOCAB + ids[2]] += 1;
        for t in &g.tokens {
            *sources.entry(format!("{:?}", t.source)).or_default() += 1;
        }
    }
    eprintln!("provenance: {sources:?}");
    (chi_square_p(&counts, &expected, RUNS), sources)
}

fn sample_params(top_p: f32) -> SamplingParams {
    SamplingParams {
        mode: Mode::Sample,
        temperature: 1.0,
        top_k: 0,
        top_p,
        min_p: 0.0,
        repetition_penalty: 1.0,
        seed: 0,
    }
}

fn exact() -> SpeculativeOptions {
    SpeculativeOptions { k: KSetting::Fixed(2), sampled_accept: accept_sampled }
}

/// Every path of the rule must have been taken for the fit to mean something.
fn assert_all_paths_taken(sources: &HashMap<String, usize>) {
    for source in ["Accepted", "Resampled", "Bonus"] {
        assert!(sources.get(source).copied().unwrap_or(0) > RUNS / 50, "{source} too rare: {sources:?}");
    }
}

#[test]
fn sample_mode_is_target_distributed_at_temperature_one() {
    let (p, sources) = speculative_p_value(sample_params(1.0), exact());
    assert_all_paths_taken(&sources);
    assert!(p > 0.001, "p = {p}");
}

#[test]
fn sample_mode_is_target_distributed_at_top_p() {
    let (p, sources) = speculative_p_value(sample_params(0.8), exact());
    assert_all_paths_taken(&sources);
    assert!(p > 0.001, "p = {p}");
}

#[test]
fn sample_mode_is_target_distributed_with_a_pruned_draft() {
    // The draft may propose only tokens 0..8 of 16: q is zero on the rest, which the target
    // then reaches only by resampling. Its distribution must still be the target's.
    let ids: Vec<u32> = (0..8).collect();
    let (p, sources) = speculative_p_value_with(sample_params(1.0), exact(), Some(&ids));
    assert_all_paths_taken(&sources);
    assert!(p > 0.001, "p = {p}");
}

#[test]
fn sample_mode_is_target_distributed_with_copies_and_drafts_combined() {
    // Copies are proposed with certainty (q one-hot): kept with probability p, and on a
    // rejection the target resamples from what is left of p.
    let prompt = repeating_prompt();
    let mut combined = Combined::new(DraftModel::new(tiny_model(1, 0.5)));
    let (p, sources) = fit(sample_params(1.0), exact(), &mut combined, &prompt);
    let count = |source: &str| sources.get(source).copied().unwrap_or(0);
    assert!(count("Copied") > RUNS / 50 && count("Resampled") > RUNS / 50, "{sources:?}");
    assert!(count("Bonus") > RUNS / 500, "every copy kept, too rare: {sources:?}");
    assert!(p > 0.001, "p = {p}");
    let broken = SpeculativeOptions { k: KSetting::Fixed(2), sampled_accept: always_accept };
    let mut combined = Combined::new(DraftModel::new(tiny_model(1, 0.5)));
    let (p, _) = fit(sample_params(1.0), broken, &mut combined, &prompt);
    assert!(p < 0.001, "a broken verifier passed with copies: p = {p}");
}

#[test]
fn the_test_rejects_a_verifier_that_accepts_everything() {
    let broken = SpeculativeOptions { k: KSetting::Fixed(2), sampled_accept: always_accept };
    let (p, _) = speculative_p_value(sample_params(1.0), broken);
    assert!(p < 0.001, "a broken verifier passed: p = {p}");
}

/// After steps without drafting, the draft cache catches up outside the timed draft, to within
/// the two tokens a normal step feeds, and what it then proposes is what it would have
/// proposed catching up lazily.
#[test]
fn a_draft_catches_up_on_plain_steps_without_changing_its_proposals() {
    let context: Vec<u32> = vec![3, 7, 1, 4, 1, 5, 9, 2, 6, 5, 3];
    let params = SamplingParams { mode: Mode::Greedy, temperature: 0.0, ..SamplingParams::default() };
    let mut caught_up = DraftModel::new(tiny_model(2, 0.5));
    let mut lazy = DraftModel::new(tiny_model(2, 0.5));
    for draft in [&mut caught_up, &mut lazy] {
        draft.prefill(&context[..3], &mut |_, _| specula_engine::Flow::Continue).unwrap();
    }
    caught_up.catch_up(&context).unwrap();
    assert_eq!(caught_up.cached_len(), context.len() - 2);
    caught_up.catch_up(&context).unwrap();
    assert_eq!(caught_up.cached_len(), context.len() - 2, "nothing more to catch up");
    let propose = |d: &mut DraftModel| {
        let tokens: Vec<u32> =
            d.propose(&context, 3, &mut Sampler::new(params.clone()), 0).unwrap().iter().map(|x| x.token).collect();
        tokens
    };
    assert_eq!(propose(&mut caught_up), propose(&mut lazy));
}
