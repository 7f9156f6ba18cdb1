//! `specula bench`: every prompt decoded plain and speculative in one process, one after the
//! other, so that the machine's noise hits both alike. Greedy by default (or reproducible
//! sampling), which also checks that each speculative reply equals the plain one.

use crate::run::{open_session, CliResult};
use crate::safe_text::printable;
use crate::ModelArgs;
use clap::Args;
use serde::{Deserialize, Serialize};
use specula_engine::compare::{speedup, PlainVsSpeculative};
use specula_engine::sampling::Mode;
use specula_engine::speculative::KSetting;
use specula_engine::{CachedModel, GenerateOptions, SamplingParams};
use std::path::PathBuf;

const DEFAULT_PROMPTS: &str = include_str!("../prompts/bench.json");

#[derive(Args)]
pub struct BenchArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// Draft lengths to compare, e.g. 1,2,4,8,auto.
    #[arg(long = "k", value_delimiter = ',', default_value = "1,2,4,8,auto")]
    ks: Vec<KSetting>,
    /// JSON list of {"kind", "prompt", "history"?}; the built-in set has 10 code, 10 prose and
    /// 10 edit prompts, and 6 revision turns (a second turn that asks to change the code or
    /// text of the first, given as `history`).
    #[arg(long)]
    prompts: Option<PathBuf>,
    /// Only prompts of this kind (code, prose, ...).
    #[arg(long)]
    kind: Option<String>,
    /// Only the first N prompts of each kind.
    #[arg(long)]
    limit: Option<usize>,
    #[arg(long, default_value_t = 64)]
    max_tokens: usize,
    /// Decode each prompt this many times each way, plain and speculative in turn: on a
    /// noisy host one reply of the same work can take 25% more or less than the next.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    repeat: u32,
    /// greedy, or reproducible: sampling at --temperature with noise fixed by --seed, whose
    /// speculative replies equal the plain ones token for token as greedy ones do (sample mode
    /// gives no two replies alike, so nothing to compare).
    #[arg(long, default_value = "greedy")]
    mode: Mode,
    #[arg(long, default_value_t = 0.8)]
    temperature: f32,
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Write every figure here as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Deserialize, Serialize, Clone)]
struct BenchPrompt {
    kind: String,
    prompt: String,
    /// Earlier turns of the conversation, before `prompt` (the user's last message).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    history: Vec<specula_engine::Message>,
}

#[derive(Serialize)]
struct Run {
    kind: String,
    prompt: String,
    k: String,
    plain_tokens: usize,
    plain_ms: f64,
    spec_tokens: usize,
    spec_ms: f64,
    drafted: usize,
    accepted: usize,
    /// Of those, the copies (the auto drafter's free arm) and the copies kept.
    copied: usize,
    copied_accepted: usize,
    target_passes: usize,
    predicted_speedup: Option<f64>,
    k_min: usize,
    k_max: usize,
    identical: bool,
}

#[derive(Serialize)]
struct Summary {
    kind: String,
    k: String,
    plain_tps: f64,
    spec_tps: f64,
    speedup: f64,
    acceptance: f64,
    tokens_per_pass: f64,
    predicted_speedup: Option<f64>,
    k_range: String,
    identical: String,
}

#[derive(Serialize)]
struct Report<'a> {
    /// The CPU model, its SIMD features and the kernel path used.
    cpu: String,
    /// Seconds since 1970 when the run ended.
    unix_time: u64,
    model: String,
    draft: String,
    max_tokens: usize,
    /// Times each prompt was decoded each way (one run each in `runs`).
    repeat: u32,
    /// "greedy", or "reproducible at temperature T, seed S".
    sampling: String,
    threads: usize,
    forward_costs: &'a [ForwardCost],
    runs: &'a [Run],
    summary: &'a [Summary],
}

/// Median time of a target pass over n tokens (all logits), and its ratio to n = 1.
#[derive(Serialize, Clone)]
pub struct ForwardCost {
    pub n: usize,
    pub ms: f64,
    pub ratio: f64,
}

/// The pass sizes verification of k = 1, 2, 4, 8 and 16 drafted tokens takes (and n = 3).
pub const PASS_SIZES: [usize; 6] = [1, 2, 3, 5, 9, 17];

/// Verification cost by size: a pass over n tokens after `context`, then rolled back.
pub fn forward_costs(model: &mut CachedModel, context: &[u32]) -> Result<Vec<ForwardCost>, String> {
    const REPEATS: usize = 5;
    if context.len() < PASS_SIZES[PASS_SIZES.len() - 1] {
        return Err(format!("a context of {} tokens is too short to measure passes", context.len()));
    }
    model.truncate(0);
    model.prefill(context).map_err(|e| e.to_string())?;
    let mut costs: Vec<ForwardCost> = Vec::new();
    for n in PASS_SIZES {
        let mut times = Vec::with_capacity(REPEATS);
        for _ in 0..REPEATS {
            let started = std::time::Instant::now();
            model.forward_all(&context[..n]).map_err(|e| e.to_string())?;
            times.push(started.elapsed().as_secs_f64() * 1000.0);
            model.truncate(context.len());
        }
        times.sort_by(f64::total_cmp);
        let ms = times[REPEATS / 2];
        let ratio = costs.first().map_or(1.0, |one| ms / one.ms);
        costs.push(ForwardCost { n, ms, ratio });
    }
    Ok(costs)
}

/// A ~100-token context of ordinary text in the model's own tokens.
fn cost_context(session: &specula_engine::Session) -> Result<Vec<u32>, String> {
    let text = "The quick brown fox jumps over the lazy dog. ".repeat(10);
    session.target.tokenizer.encode(&text).map_err(|e| e.to_string())
}

pub fn bench(args: BenchArgs) -> CliResult {
    use specula_engine::DrafterKind;
    if args.model.draft.is_none() && !matches!(args.model.drafter, Some(DrafterKind::Lookup | DrafterKind::Auto)) {
        return Err("bench compares plain with speculative decoding: give --draft or --drafter lookup".into());
    }
    let prompts = load_prompts(&args)?;
    let sampling = sampling(&args)?;
    let mut session = open_session(&args.model)?;
    let context = cost_context(&session)?;
    let costs = forward_costs(&mut session.target.model, &context)?;
    println!("{}\n", specula_engine::kernels::cpu_description());
    println!("| target pass over n tokens | ms | x one token |\n|---|---|---|");
    for c in &costs {
        println!("| {} | {:.1} | {:.2} |", c.n, c.ms, c.ratio);
    }
    println!();
    let options = GenerateOptions { max_tokens: args.max_tokens, sampling, ..Default::default() };
    let mut runs = Vec::new();
    for (i, item) in prompts.iter().enumerate() {
        let mut messages = item.history.clone();
        messages.push(specula_engine::Message::user(item.prompt.clone()));
        let prompt = session.chat_prompt(&messages, &[]).map_err(|e| e.to_string())?;
        for k in args.ks.iter().flat_map(|k| std::iter::repeat_n(k, args.repeat as usize)) {
            // Plain and speculative back to back, per k, so both see the same machine state.
            let decoding = crate::run::decoding(&args.model, *k, &session);
            let both = PlainVsSpeculative::run(&mut session, &prompt, &options, decoding).map_err(|e| e.to_string())?;
            let run = record(item, k, &both);
            eprintln!(
                "[{}/{}] {:5} k={:4} plain {:5.2} tok/s  spec {:5.2} tok/s  {:.2}x  accepted {}/{}{}{}",
                i + 1,
                prompts.len(),
                printable(&item.kind),
                run.k,
                rate(run.plain_tokens, run.plain_ms),
                rate(run.spec_tokens, run.spec_ms),
                speedup(rate(run.spec_tokens, run.spec_ms), rate(run.plain_tokens, run.plain_ms)),
                run.accepted,
                run.drafted,
                match run.copied {
                    0 => String::new(),
                    copied => format!(" (copies {}/{copied})", run.copied_accepted),
                },
                if run.identical { "" } else { "  MISMATCH" }
            );
            runs.push(run);
        }
    }
    let summary = summarise(&runs);
    print_table(&summary);
    if let Some(path) = &args.json {
        let report = Report {
            cpu: specula_engine::kernels::cpu_description(),
            unix_time: std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()),
            model: args.model.model.display().to_string(),
            draft: args.model.draft.as_ref().map(|d| d.display().to_string()).unwrap_or_default(),
            max_tokens: args.max_tokens,
            repeat: args.repeat,
            sampling: match args.mode {
                Mode::Greedy => "greedy".into(),
                _ => format!("reproducible at temperature {}, seed {}", args.temperature, args.seed),
            },
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            forward_costs: &costs,
            runs: &runs,
            summary: &summary,
        };
        let text = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
        std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    if runs.iter().any(|r| !r.identical) {
        return Err("speculative output differed from plain output (see MISMATCH above)".into());
    }
    Ok(())
}

/// Greedy, or reproducible sampling: the two modes in which speculative decoding gives the
/// plain reply exactly, so that every run is also an identity check.
fn sampling(args: &BenchArgs) -> Result<SamplingParams, String> {
    let sampling = match args.mode {
        Mode::Greedy => SamplingParams::greedy(),
        Mode::Reproducible => SamplingParams {
            mode: Mode::Reproducible,
            temperature: args.temperature,
            seed: args.seed,
            ..Default::default()
        },
        Mode::Sample => {
            return Err("bench compares replies: --mode greedy or reproducible (sample mode gives no two alike)".into())
        }
    };
    sampling.validate().map_err(|e| e.to_string())?;
    Ok(sampling)
}

fn load_prompts(args: &BenchArgs) -> Result<Vec<BenchPrompt>, String> {
    let text = match &args.prompts {
        Some(path) => std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?,
        None => DEFAULT_PROMPTS.to_string(),
    };
    let all: Vec<BenchPrompt> = serde_json::from_str(&text).map_err(|e| format!("prompt set: {e}"))?;
    let mut taken: std::collections::HashMap<String, usize> = Default::default();
    let chosen: Vec<BenchPrompt> = all
        .into_iter()
        .filter(|p| args.kind.as_ref().is_none_or(|k| &p.kind == k))
        .filter(|p| {
            let n = taken.entry(p.kind.clone()).or_default();
            *n += 1;
            args.limit.is_none_or(|limit| *n <= limit)
        })
        .collect();
    if chosen.is_empty() {
        return Err("no prompts selected".into());
    }
    Ok(chosen)
}

fn record(item: &BenchPrompt, k: &KSetting, both: &PlainVsSpeculative) -> Run {
    let (plain, spec) = (&both.plain, &both.speculative);
    let s = spec.stats.speculative.clone().unwrap_or_default();
    Run {
        kind: item.kind.clone(),
        prompt: item.prompt.clone(),
        k: k.to_string(),
        plain_tokens: plain.stats.generated_tokens,
        plain_ms: plain.stats.decode_ms,
        spec_tokens: spec.stats.generated_tokens,
        spec_ms: spec.stats.decode_ms,
        drafted: s.drafted,
        accepted: s.accepted,
        copied: s.copied,
        copied_accepted: s.copied_accepted,
        target_passes: s.target_passes,
        predicted_speedup: s.predicted_speedup,
        k_min: s.k_min,
        k_max: s.k_max,
        identical: both.identical(),
    }
}

fn rate(tokens: usize, ms: f64) -> f64 {
    tokens as f64 / (ms / 1000.0).max(1e-9)
}

fn summarise(runs: &[Run]) -> Vec<Summary> {
    let mut groups: Vec<(String, String)> = Vec::new();
    for r in runs {
        for kind in [r.kind.clone(), "all".to_string()] {
            if !groups.contains(&(kind.clone(), r.k.clone())) {
                groups.push((kind, r.k.clone()));
            }
        }
    }
    groups
        .into_iter()
        .map(|(kind, k)| {
            let rs: Vec<&Run> = runs.iter().filter(|r| (kind == "all" || r.kind == kind) && r.k == k).collect();
            let sum = |f: fn(&Run) -> f64| rs.iter().map(|r| f(r)).sum::<f64>();
            let plain_tps = sum(|r| r.plain_tokens as f64) / (sum(|r| r.plain_ms) / 1000.0);
            let spec_tps = sum(|r| r.spec_tokens as f64) / (sum(|r| r.spec_ms) / 1000.0);
            let predicted: Vec<f64> = rs.iter().filter_map(|r| r.predicted_speedup).collect();
            Summary {
                acceptance: sum(|r| r.accepted as f64) / sum(|r| r.drafted as f64).max(1.0),
                tokens_per_pass: sum(|r| r.spec_tokens as f64) / sum(|r| r.target_passes as f64).max(1.0),
                predicted_speedup: (!predicted.is_empty())
                    .then(|| predicted.iter().sum::<f64>() / predicted.len() as f64),
                k_range: format!(
                    "{}-{}",
                    rs.iter().map(|r| r.k_min).min().unwrap_or(0),
                    rs.iter().map(|r| r.k_max).max().unwrap_or(0)
                ),
                identical: format!("{}/{}", rs.iter().filter(|r| r.identical).count(), rs.len()),
                speedup: speedup(spec_tps, plain_tps),
                plain_tps,
                spec_tps,
                kind,
                k,
            }
        })
        .collect()
}

fn print_table(summary: &[Summary]) {
    println!(
        "| set | k | plain tok/s | spec tok/s | speedup | accepted | tokens/pass | predicted | k used | identical |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for s in summary {
        println!(
            "| {} | {} | {:.2} | {:.2} | {:.2}x | {:.0}% | {:.2} | {} | {} | {} |",
            printable(&s.kind),
            s.k,
            s.plain_tps,
            s.spec_tps,
            s.speedup,
            s.acceptance * 100.0,
            s.tokens_per_pass,
            s.predicted_speedup.map_or("n/a".into(), |p| format!("{p:.2}x")),
            s.k_range,
            s.identical
        );
    }
}
