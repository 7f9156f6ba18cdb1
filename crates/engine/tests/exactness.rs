//! The fast exactness tier, on tiny random models (seconds, not minutes): greedy and
//! reproducible speculative replies are token-identical to plain decoding for every k from 1
//! to 8 and auto, with a close draft, a poor draft, prompt lookup and a draft combined with
//! copies; a batched pass scores
//! every position as single-token passes do; a rollback leaves the cache as if the rejected
//! tokens had never been fed. `speculative.rs` checks the same on the real pair.

mod common;

use common::tiny::Tiny;
use common::{ids, InvariantSink};
use specula_engine::speculative::{
    generate_speculative, Combined, CostModel, DraftModel, Drafter, KSetting, PromptLookup,
};
use specula_engine::{
    generate_plain, CachedModel, GenerateOptions, Generation, Mode, NullSink, SamplingParams, Source,
    SpeculativeOptions, Tokenizer,
};

/// Prompts of the tiny vocabulary; the last ones repeat themselves, which prompt lookup needs.
fn prompts() -> Vec<Vec<u32>> {
    vec![
        vec![5, 17, 42],
        vec![1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12],
        vec![60, 61, 62, 63, 60, 61, 62, 63, 60, 61],
        vec![9; 20],
        (0..40).map(|i| (i * 7 % 96) as u32).collect(),
        vec![30, 31, 32, 80, 81, 30, 31, 32, 80, 81, 30, 31],
    ]
}

fn drafters() -> Vec<(&'static str, Box<dyn Drafter>)> {
    // A draft cut to half the vocabulary, as the pruned draft head is: the target still
    // verifies over all of it, so the output cannot change.
    let mut pruned = DraftModel::new(Tiny::chat(1, 0.05).model());
    assert!(pruned.restrict_vocab(Some(&(0..48).collect::<Vec<u32>>())).unwrap());
    vec![
        ("close draft", Box::new(DraftModel::new(Tiny::chat(1, 0.05).model()))),
        ("poor draft", Box::new(DraftModel::new(Tiny::chat(77, 0.0).model()))),
        ("pruned draft", Box::new(pruned)),
        ("prompt lookup", Box::new(PromptLookup::default())),
        ("draft and copies", Box::new(Combined::new(DraftModel::new(Tiny::chat(1, 0.05).model())))),
    ]
}

fn ks() -> Vec<KSetting> {
    (1..=8).map(KSetting::Fixed).chain([KSetting::Auto { max: 8 }]).collect()
}

fn speculate(
    target: &mut CachedModel,
    drafter: &mut dyn Drafter,
    tokenizer: &Tokenizer,
    prompt: &[u32],
    options: &GenerateOptions,
    k: KSetting,
) -> Generation {
    let spec = SpeculativeOptions { k, ..Default::default() };
    let mut sink = InvariantSink::default();
    let g = generate_speculative(target, drafter, tokenizer, prompt, options, &spec, &mut CostModel::new(), &mut sink)
        .unwrap();
    let n_past = prompt.len() + g.tokens.len() - 1;
    assert_eq!(target.len(), n_past, "the target cache holds the committed tokens but the newest");
    assert!(drafter.cached_len() <= n_past, "the draft cache holds nothing uncommitted");
    g
}

/// Every drafter and k against plain decoding under `sampling`; returns how many tokens came
/// from each source, so the caller can check the comparison exercised every path.
fn compare_with_plain(
    sampling: SamplingParams,
    tokens: usize,
) -> std::collections::HashMap<(&'static str, Source), usize> {
    let tiny = Tiny::chat(1, 0.0);
    let (mut target, tokenizer) = (tiny.model(), tiny.tokenizer());
    let options = GenerateOptions { max_tokens: tokens, sampling, stop: vec![], ..Default::default() };
    let mut sources = std::collections::HashMap::new();
    for (name, mut drafter) in drafters() {
        for prompt in prompts() {
            let plain = generate_plain(&mut target, &tokenizer, &prompt, &options, &mut NullSink).unwrap();
            assert_eq!(plain.tokens.len(), tokens);
            for k in ks() {
                let spec = speculate(&mut target, drafter.as_mut(), &tokenizer, &prompt, &options, k);
                assert_eq!(ids(&spec), ids(&plain), "{name}, {k:?}, prompt {prompt:?}");
                for t in &spec.tokens {
                    *sources.entry((name, t.source)).or_default() += 1;
                }
            }
        }
    }
    sources
}

#[test]
fn greedy_speculative_equals_plain_for_every_k_and_drafter() {
    let sources = compare_with_plain(SamplingParams::greedy(), 48);
    eprintln!("{sources:?}");
    let kept = |name, source| sources.get(&(name, source)).copied().unwrap_or(0);
    for (name, least) in [("close draft", 500), ("pruned draft", 100), ("draft and copies", 100)] {
        assert!(kept(name, Source::Accepted) > least, "{name}: the model's drafts were accepted");
    }
    // Beside a close draft, copies take only the steps where they are expected to deliver more.
    for (name, least) in [("prompt lookup", 30), ("draft and copies", 5)] {
        assert!(kept(name, Source::Copied) > least, "{name}: copies were accepted");
    }
    assert!(sources.get(&("poor draft", Source::Resampled)).copied().unwrap_or(0) > 100, "the poor draft was rejected");
}

#[test]
fn reproducible_speculative_equals_plain_with_the_same_seed() {
    for (seed, temperature) in [(1, 0.8), (2, 1.0), (3, 1.5)] {
        let sampling = SamplingParams { mode: Mode::Reproducible, temperature, seed, ..SamplingParams::default() };
        let sources = compare_with_plain(sampling, 24);
        assert!(sources.get(&("close draft", Source::Accepted)).copied().unwrap_or(0) > 50, "{sources:?}");
    }
}

#[test]
fn a_batched_pass_scores_each_position_as_single_passes_do() {
    let tiny = Tiny::chat(5, 0.0);
    let tokens: Vec<u32> = (0..19).map(|i| (i * 11 % 96) as u32).collect();
    let mut batched = tiny.model();
    batched.prefill(&[1, 2, 3]).unwrap();
    let all = batched.forward_all(&tokens).unwrap();
    let mut single = tiny.model();
    single.prefill(&[1, 2, 3]).unwrap();
    for (i, &token) in tokens.iter().enumerate() {
        let row = single.forward_all(&[token]).unwrap();
        assert_eq!(row[0], all[i], "position {i}");
    }
}

#[test]
fn a_rollback_leaves_the_cache_as_if_the_rejected_tokens_were_never_fed() {
    let tiny = Tiny::chat(6, 0.0);
    let prompt = [4, 8, 15, 16, 23, 42];
    let mut rolled_back = tiny.model();
    rolled_back.prefill(&prompt).unwrap();
    rolled_back.forward_all(&[50, 51, 52, 53]).unwrap(); // a step of four drafts
    rolled_back.truncate(prompt.len() + 1); // the target kept only the first
    assert_eq!(rolled_back.len(), prompt.len() + 1);
    let after_rollback = rolled_back.forward_all(&[70, 71]).unwrap();
    let mut fresh = tiny.model();
    fresh.prefill(&prompt).unwrap();
    fresh.forward_all(&[50]).unwrap();
    assert_eq!(fresh.forward_all(&[70, 71]).unwrap(), after_rollback);
}

#[test]
fn a_chunked_prefill_leaves_the_cache_an_unchunked_one_would() {
    let tiny = Tiny::chat(7, 0.0);
    let prompt: Vec<u32> = (0..300).map(|i| (i * 13 % 96) as u32).collect();
    let mut chunked = tiny.model();
    let mut chunks = 0;
    chunked
        .prefill_with(&prompt, &mut |_, _| {
            chunks += 1;
            specula_engine::Flow::Continue
        })
        .unwrap();
    assert_eq!(chunks, prompt.len().div_ceil(specula_engine::decode::PREFILL_CHUNK));
    let mut whole = tiny.model();
    whole.forward_all(&prompt).unwrap();
    assert_eq!(chunked.forward_all(&[1, 2]).unwrap(), whole.forward_all(&[1, 2]).unwrap());
}

#[test]
fn a_chat_gone_back_to_resumes_from_the_prompt_cache_and_scores_as_a_cold_prefill_does() {
    let tiny = Tiny::chat(8, 0.0);
    let chat = |seed: usize| -> Vec<u32> { (0..300).map(|i| ((i * 7 + seed * 31) % 96) as u32).collect() };
    let next_turn = |chat: &[u32], reply: &[u32], question: &[u32]| [chat, reply, question].concat();
    let (a, b) = (chat(1), chat(2));
    let mut warm = tiny.model();
    warm.set_prompt_cache(64 << 20);
    assert_eq!(warm.prefill(&a).unwrap(), 300);
    warm.forward_all(&[5, 6, 7]).unwrap(); // A's reply
    assert_eq!(warm.prefill(&b).unwrap(), 300, "another chat: read whole, A kept");
    warm.forward_all(&[8, 9]).unwrap(); // B's reply
    let a_again = next_turn(&a, &[5, 6, 7], &[10, 11]);
    assert_eq!(warm.prefill(&a_again).unwrap(), 2, "back to A: only its new turn is read");
    let b_again = next_turn(&b, &[8, 9], &[12]);
    assert_eq!(warm.prefill(&b_again).unwrap(), 1, "and back to B");
    assert_eq!(warm.prompt_cache().len(), 1, "A's latest state kept; B's is the live one");

    let mut cold = tiny.model();
    cold.prefill(&b_again).unwrap();
    assert_eq!(warm.forward_all(&[1, 2]).unwrap(), cold.forward_all(&[1, 2]).unwrap(), "bit for bit");

    let mut off = tiny.model();
    off.prefill(&a).unwrap();
    assert_eq!(off.prefill(&b).unwrap(), 300);
    assert_eq!(off.prefill(&a).unwrap(), 300, "without a budget nothing is kept");
}

#[test]
fn a_parked_sequence_moves_out_and_back_and_a_shared_prefix_starts_from_a_copy() {
    use specula_engine::CausalLm;
    let tiny = Tiny::chat(9, 0.0);
    let long: Vec<u32> = (0..450).map(|i| (i * 11 % 96) as u32).collect();
    // Parking moves the sequence's buffers (450 of 512 positions live: no room to trim), and
    // taking it up again gives them back, with the scores of a sequence never parked.
    let mut live = tiny.decoder();
    live.forward(&long).unwrap();
    let buffers = live.sequence().layers()[0].buffers().0.id();
    let parked = live.park().unwrap().unwrap();
    assert_eq!((live.len(), parked.len), (0, 450), "the model runs an empty sequence meanwhile");
    live.forward(&[1, 2, 3]).unwrap(); // another conversation
    live.restore(parked).unwrap();
    assert_eq!(live.sequence().layers()[0].buffers().0.id(), buffers, "moved back, not copied");
    let mut never_parked = tiny.decoder();
    never_parked.forward(&long).unwrap();
    assert_eq!(
        live.forward(&[4, 5]).unwrap().to_vec2::<f32>().unwrap(),
        never_parked.forward(&[4, 5]).unwrap().to_vec2::<f32>().unwrap()
    );

    // A conversation that shares 200 tokens with the one it replaces reads only the rest, from
    // a copy of that prefix, and scores as a cold prefill; the replaced one is parked whole.
    let a: Vec<u32> = (0..300).map(|i| (i * 7 % 96) as u32).collect();
    let branch = [&a[..200], &[3, 1, 4, 1, 5, 9, 2, 6][..]].concat();
    let mut warm = tiny.model();
    warm.set_prompt_cache(64 << 20);
    warm.prefill(&a).unwrap();
    assert_eq!(warm.prefill(&branch).unwrap(), 8, "only the branch's own tokens are read");
    assert_eq!(warm.prompt_cache().len(), 1, "the first conversation parked");
    let mut cold = tiny.model();
    cold.prefill(&branch).unwrap();
    assert_eq!(warm.forward_all(&[7, 8]).unwrap(), cold.forward_all(&[7, 8]).unwrap(), "bit for bit");
    assert_eq!(warm.prefill(&a).unwrap(), 0, "and the first is taken up again whole");
}

/// The step events of a reply.
#[derive(Default)]
struct Steps(Vec<specula_engine::StepEvent>);

impl specula_engine::TokenSink for Steps {
    fn on_token(&mut self, _: &specula_engine::TokenEvent) -> specula_engine::Flow {
        specula_engine::Flow::Continue
    }
    fn on_step(&mut self, step: &specula_engine::StepEvent) -> specula_engine::Flow {
        self.0.push(step.clone());
        specula_engine::Flow::Continue
    }
}

#[test]
fn the_speedup_figure_rests_on_plain_steps_timed_in_the_same_reply() {
    let tiny = Tiny::chat(1, 0.0);
    let (mut target, tokenizer) = (tiny.model(), tiny.tokenizer());
    let mut draft = DraftModel::new(Tiny::chat(1, 0.05).model());
    let options = GenerateOptions { max_tokens: 160, sampling: SamplingParams::greedy(), ..Default::default() };
    let spec = SpeculativeOptions { k: KSetting::Fixed(4), ..Default::default() };
    let mut steps = Steps::default();
    let prompt = &prompts()[1];
    let g = generate_speculative(
        &mut target,
        &mut draft,
        &tokenizer,
        prompt,
        &options,
        &spec,
        &mut CostModel::new(),
        &mut steps,
    )
    .unwrap();
    let plain = generate_plain(&mut target, &tokenizer, prompt, &options, &mut NullSink).unwrap();
    assert_eq!(ids(&g), ids(&plain), "plain steps owed to the figure change no token");

    // Even with k fixed, plain steps are taken: the figure is shown only from the third on.
    let plain_steps: Vec<usize> = steps.0.iter().enumerate().filter(|(_, s)| s.k == 0).map(|(i, _)| i).collect();
    assert!(plain_steps.len() >= 4, "plain steps at {plain_steps:?}");
    let third = plain_steps[2];
    assert!(steps.0[..third].iter().all(|s| s.speedup_vs_plain.is_none()));
    assert!(steps.0[third..].iter().all(|s| s.speedup_vs_plain.is_some() && s.plain_steps >= 3));

    // The stored figure is plain time priced stretch by stretch (reference.rs tests the
    // pricing) over the reply's decode time, with the plain steps the events told of.
    let s = g.stats.speculative.unwrap();
    // The step that ends a reply is told as its end, not as a step: it may be one plain more.
    assert!((plain_steps.len()..=plain_steps.len() + 1).contains(&s.plain_steps), "{s:?}");
    let speedup = s.speedup_vs_plain.unwrap();
    assert!(speedup.is_finite() && speedup > 0.0, "{s:?}");
    assert!(s.plain_ms_per_token.is_some_and(|ms| ms > 0.0), "{s:?}");
}

#[test]
fn plain_decoding_reports_its_rate_and_no_speedup() {
    let tiny = Tiny::chat(1, 0.0);
    let (mut target, tokenizer) = (tiny.model(), tiny.tokenizer());
    let options = GenerateOptions { max_tokens: 40, sampling: SamplingParams::greedy(), ..Default::default() };
    let mut steps = Steps::default();
    let g = generate_plain(&mut target, &tokenizer, &prompts()[0], &options, &mut steps).unwrap();
    assert_eq!(g.tokens.len(), 40);
    let every = specula_engine::PLAIN_STEP_EVERY;
    // Every 8 tokens, but the last: the reply's end is told by its Done.
    assert_eq!(
        steps.0.iter().map(|s| s.generated).collect::<Vec<_>>(),
        (1..40 / every).map(|i| i * every).collect::<Vec<_>>()
    );
    assert!(steps.0.iter().all(|s| s.k == 0 && s.speedup_vs_plain.is_none() && s.tokens_per_second > 0.0));
}
