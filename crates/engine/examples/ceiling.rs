//! What speculation can give at most with this pair on this CPU, and whether verifying a small
//! tree would raise it.
//!
//! Measured on this CPU: the draft step (with the engine's pruned head) and the target pass
//! over n tokens, n = 1..=17 (fastest of several rounds, the sizes interleaved so the host's
//! drift is shared). Measured teacher-forced on the target's own greedy replies to the bench
//! prompts: α, how often the draft's first choice is the target's token, and β, how often its
//! second choice is when the first is not (with the draft's whole head, which agrees a little
//! more often than the pruned one: the figures below lean high, as a ceiling should).
//!
//! From these, per set, in units of a plain step:
//! - **chain**: the expected speedup of the best fixed k (positions independent, each kept
//!   with chance α), as auto k aims for;
//! - **chain + sibling**: the same with the draft's second choice as a sibling of its first,
//!   one more row in the pass, one more token when the first misses and the sibling is right;
//! - **stopping under τ**: these very replies decoded by chains of up to k drafts that stop
//!   after a draft the draft model gave under τ (a dynamic draft length, as llama.cpp's
//!   `--spec-draft-p-min`), best k per τ;
//! - **hindsight**: each reply decoded by an oracle that knows the target's tokens and picks,
//!   step by step, the best of a plain step, k model drafts (k ≤ 8, kept as far as the draft's
//!   first choices match) and k copies from the context (k ≤ 16, the combined drafter's prompt
//!   lookup), with the draft's catch-up after copies and all overheads free. No chooser of
//!   these drafts can do better, so a set's hindsight figure bounds what auto can reach.
//!
//! `cargo run --release -p specula-engine --example ceiling -- TARGET DRAFT OUT.json [prompts per kind] [tokens]`

use specula_engine::kernels::cpu_description;
use specula_engine::session::pruned_vocab;
use specula_engine::speculative::adaptive::expected_tokens as expected;
use specula_engine::speculative::lookup::PromptLookup;
use specula_engine::{GenerateOptions, LoadedModel, Message, NullSink, SamplingParams};
use std::collections::BTreeMap;
use std::time::Instant;

/// The widest pass measured: 16 copies and the token before them.
const MAX_PASS: usize = 17;
const MAX_DRAFTS: usize = 8;
const ROUNDS: usize = 8;
/// Draft confidences under which a chain of drafts stops (0: never).
const THRESHOLDS: [f64; 6] = [0.0, 0.3, 0.5, 0.6, 0.7, 0.8];
/// The combined drafter's context copies (`speculative::combined`).
const COPIES: PromptLookup = PromptLookup { max_ngram: 8, min_ngram: 3 };

#[derive(serde::Deserialize)]
struct Prompt {
    kind: String,
    prompt: String,
    #[serde(default)]
    history: Vec<Message>,
}

/// One reply, as the oracle sees it: for each position, how many of the draft's first choices
/// from there on are the target's tokens, and how many of the context's copies are.
struct Reply {
    draft_run: Vec<usize>,
    /// The probability the draft gives its first choice at each position.
    draft_confidence: Vec<f64>,
    copy_run: Vec<usize>,
}

#[derive(Default)]
struct SetCounts {
    positions: usize,
    first: usize,
    second: usize,
    replies: Vec<Reply>,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, target, draft, out, rest @ ..] = args.as_slice() else {
        return Err("usage: ceiling TARGET DRAFT OUT.json [prompts per kind] [tokens]".into());
    };
    let per_kind: usize = rest.first().map_or(Ok(10), |s| s.parse())?;
    let tokens: usize = rest.get(1).map_or(Ok(128), |s| s.parse())?;
    let device = candle_core::Device::Cpu;
    let mut target = LoadedModel::load(target, &device, 4096)?;
    let mut draft = LoadedModel::load(draft, &device, 4096)?;
    let prompts: Vec<Prompt> = serde_json::from_str(&std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../cli/prompts/bench.json"
    ))?)?;
    let options =
        GenerateOptions { max_tokens: tokens, sampling: SamplingParams::greedy(), stop: vec![], ..Default::default() };
    let mut sets = BTreeMap::<String, SetCounts>::new();
    for (i, p) in prompts.iter().enumerate() {
        if prompts[..i].iter().filter(|q| q.kind == p.kind).count() >= per_kind {
            continue;
        }
        let reply = analyse(&mut target, &mut draft, p, &options, sets.entry(p.kind.clone()).or_default())?;
        eprintln!("{}: {} reply tokens", p.kind, reply);
    }

    let (draft_ms, pass_ms) = measure_costs(&mut target, &mut draft)?;
    let plain = pass_ms[1];
    let c = draft_ms / plain;
    let verify = |n: usize| pass_ms[n] / plain;

    println!("{}", cpu_description());
    println!("draft step {draft_ms:.2} ms, plain pass {plain:.2} ms, c = {c:.3}");
    let passes: Vec<String> = (1..=MAX_PASS).map(|n| format!("{n}: {:.2}", verify(n))).collect();
    println!("pass over n / one: {}\n", passes.join(", "));
    println!("| set | positions | α | β | chain | chain + sibling | chain, stopping under τ (these replies) | hindsight, model | hindsight, model + copies |");
    println!("|---|---|---|---|---|---|---|---|---|");
    let rows: Vec<serde_json::Value> = sets.iter().map(|(kind, set)| set_figures(kind, set, c, &verify)).collect();
    let report = serde_json::json!({
        "kind": "ceiling",
        "cpu": cpu_description(),
        "unix_time": std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_secs(),
        "max_tokens": tokens,
        "prompts_per_kind": per_kind,
        "draft_step_ms": draft_ms,
        "plain_pass_ms": plain,
        "c": c,
        "pass_ratio_by_n": (1..=MAX_PASS).map(verify).collect::<Vec<_>>(),
        "sets": rows,
    });
    std::fs::write(out, serde_json::to_string_pretty(&report)?)?;
    Ok(())
}

/// One set's row: printed as a table row, returned as JSON.
fn set_figures(kind: &str, set: &SetCounts, c: f64, verify: &dyn Fn(usize) -> f64) -> serde_json::Value {
    let alpha = set.first as f64 / set.positions.max(1) as f64;
    let beta = set.second as f64 / (set.positions - set.first).max(1) as f64;
    let chain = best_of((1..=MAX_DRAFTS).map(|k| (k, expected(alpha, k) / (k as f64 * c + verify(k + 1)))));
    let tree = best_of(
        (1..=MAX_DRAFTS).map(|k| (k, (expected(alpha, k) + (1.0 - alpha) * beta) / (k as f64 * c + verify(k + 2)))),
    );
    let tokens: usize = set.replies.iter().map(|r| r.copy_run.len()).sum();
    let over_plain = |steps: &dyn Fn(&Reply) -> f64| tokens as f64 / set.replies.iter().map(steps).sum::<f64>();
    let model_only = over_plain(&|r| oracle(r, c, verify, false));
    let with_copies = over_plain(&|r| oracle(r, c, verify, true));
    let stopping: Vec<(f64, usize, f64)> = THRESHOLDS
        .iter()
        .map(|&threshold| {
            let (k, speedup) =
                best_of((1..=MAX_DRAFTS).map(|k| (k, over_plain(&|r| confident_chain(r, k, threshold, c, verify)))));
            (threshold, k, speedup)
        })
        .collect();
    let stopping_text: Vec<String> = stopping.iter().map(|(t, k, s)| format!("τ {t}: k {k} {s:.2}x")).collect();
    println!(
        "| {kind} | {} | {alpha:.3} | {beta:.3} | k {} {:.2}x | k {} {:.2}x | {} | {model_only:.2}x | {with_copies:.2}x |",
        set.positions,
        chain.0,
        chain.1,
        tree.0,
        tree.1,
        stopping_text.join(", ")
    );
    serde_json::json!({
        "kind": kind, "replies": set.replies.len(), "positions": set.positions, "alpha": alpha, "beta": beta,
        "chain_k": chain.0, "chain_speedup": chain.1, "tree_k": tree.0, "tree_speedup": tree.1,
        "hindsight_model": model_only, "hindsight_model_and_copies": with_copies,
        "stopping": stopping.iter().map(|(t, k, s)| serde_json::json!({"threshold": t, "k": k, "speedup": s})).collect::<Vec<_>>(),
    })
}

/// Decode the prompt's reply with the target alone, score it with the draft (teacher-forced),
/// and add what the oracle needs to `set`. Returns the reply's length.
fn analyse(
    target: &mut LoadedModel,
    draft: &mut LoadedModel,
    p: &Prompt,
    options: &GenerateOptions,
    set: &mut SetCounts,
) -> Result<usize, Box<dyn std::error::Error>> {
    let mut messages = p.history.clone();
    messages.push(Message::user(&p.prompt));
    let prompt = target.chat_prompt(&messages, &[])?;
    let reply = target.generate(&prompt, options, &mut NullSink)?;
    let mut sequence = prompt.clone();
    sequence.extend(reply.tokens.iter().map(|t| t.id));
    draft.model.truncate(0);
    let logits = draft.model.forward_all(&sequence[..sequence.len() - 1])?;
    let start = prompt.len();
    let n = sequence.len() - start;
    let mut first_right = Vec::with_capacity(n);
    let mut draft_confidence = Vec::with_capacity(n);
    for j in 0..n {
        let row = &logits[start - 1 + j];
        let (first, second) = top_two(row);
        draft_confidence.push(top_probability(row));
        let wanted = sequence[start + j];
        set.positions += 1;
        set.first += usize::from(first == wanted);
        set.second += usize::from(first != wanted && second == wanted);
        first_right.push(first == wanted);
    }
    let mut draft_run = vec![0; n + 1];
    for j in (0..n).rev() {
        draft_run[j] = if first_right[j] { draft_run[j + 1] + 1 } else { 0 };
    }
    let copy_run = (0..n)
        .map(|j| {
            let copy = COPIES.lookup(&sequence[..start + j], MAX_PASS - 1);
            copy.iter().zip(&sequence[start + j..]).take_while(|(a, b)| a == b).count()
        })
        .collect();
    set.replies.push(Reply { draft_run, draft_confidence, copy_run });
    Ok(n)
}

/// The fastest draft step (pruned head, as the engine drafts) and target pass over n tokens
/// (index n), at a 100-token context.
fn measure_costs(
    target: &mut LoadedModel,
    draft: &mut LoadedModel,
) -> Result<(f64, Vec<f64>), Box<dyn std::error::Error>> {
    let context: Vec<u32> = (0..100).map(|i| (i * 37 % 5000) as u32 + 100).collect();
    let ids = specula_engine::DEFAULT_DRAFT_VOCAB.map(|n| pruned_vocab(&draft.tokenizer, n));
    draft.model.restrict_output(ids.as_deref())?;
    draft.model.truncate(0);
    draft.model.prefill(&context)?;
    target.model.truncate(0);
    target.model.prefill(&context)?;
    let mut draft_ms = f64::MAX;
    let mut pass_ms = vec![f64::MAX; MAX_PASS + 1];
    for _ in 0..ROUNDS {
        let t = Instant::now();
        draft.model.forward_all(&[42])?;
        draft_ms = draft_ms.min(t.elapsed().as_secs_f64() * 1e3);
        draft.model.truncate(context.len());
        for (n, best) in pass_ms.iter_mut().enumerate().skip(1) {
            let t = Instant::now();
            target.model.forward_all(&context[..n])?;
            *best = best.min(t.elapsed().as_secs_f64() * 1e3);
            target.model.truncate(context.len());
        }
    }
    Ok((draft_ms, pass_ms))
}

/// Plain steps per token when each step drafts up to `k` and stops after a draft whose
/// probability under the draft is below `threshold` (the reply's tokens unknown to it). Past a
/// wrong draft the draft's confidence is unknown, so it is taken to go on to `k`: the figure
/// leans against stopping.
fn confident_chain(reply: &Reply, k: usize, threshold: f64, c: f64, verify: &dyn Fn(usize) -> f64) -> f64 {
    let n = reply.copy_run.len();
    let (mut i, mut cost) = (0, 0.0);
    while i < n {
        let right = reply.draft_run[i];
        let mut drafted = 0;
        while drafted < k && i + drafted < n {
            let j = i + drafted;
            drafted += 1;
            if drafted > right {
                // Wrong: the draft stops here only if it doubted this token.
                if reply.draft_confidence[j] >= threshold {
                    drafted = k;
                }
                break;
            }
            if reply.draft_confidence[j] < threshold {
                break;
            }
        }
        let kept = right.min(drafted);
        cost += drafted as f64 * c + verify(drafted + 1);
        i += kept + 1;
    }
    cost
}

/// The least time, in plain steps, to decode the reply knowing its tokens: at each position the
/// best of a plain step, k model drafts and (with `copies`) k copies, by dynamic programming
/// from the end.
fn oracle(reply: &Reply, c: f64, verify: &dyn Fn(usize) -> f64, copies: bool) -> f64 {
    let n = reply.copy_run.len();
    let mut best = vec![0.0f64; n + 1];
    for i in (0..n).rev() {
        let after = |advance: usize| best[(i + advance).min(n)];
        let mut cost = 1.0 + after(1);
        for k in 1..=MAX_DRAFTS {
            let kept = reply.draft_run[i].min(k);
            cost = cost.min(k as f64 * c + verify(k + 1) + after(kept + 1));
        }
        if copies {
            for k in 1..MAX_PASS {
                let kept = reply.copy_run[i].min(k);
                cost = cost.min(verify(k + 1) + after(kept + 1));
            }
        }
        best[i] = cost;
    }
    best[0]
}

fn best_of(options: impl Iterator<Item = (usize, f64)>) -> (usize, f64) {
    options.max_by(|a, b| a.1.total_cmp(&b.1)).unwrap_or((0, 1.0))
}

/// The softmax probability of the highest-scoring token.
fn top_probability(row: &[f32]) -> f64 {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    1.0 / row.iter().map(|&l| f64::from(l - max).exp()).sum::<f64>()
}

/// The two highest-scoring token ids.
fn top_two(row: &[f32]) -> (u32, u32) {
    let (mut first, mut second) = (0usize, 1usize);
    if row[second] > row[first] {
        std::mem::swap(&mut first, &mut second);
    }
    for (id, &score) in row.iter().enumerate().skip(2) {
        if score > row[first] {
            second = first;
            first = id;
        } else if score > row[second] {
            second = id;
        }
    }
    (first as u32, second as u32)
}
