//! `specula device-check`: exactness and costs on a device where neither Rust nor the real
//! models can go (the GPU machine `scripts/gpu-bundle.sh` packs for). Every model it uses is
//! synthetic (`synth`), written here from a seed:
//! - exactness, on tiny models in the real pair's weight types: a pass over n tokens scores
//!   each position bit for bit as n single-token passes do, a rollback leaves the cache as if
//!   the rejected tokens had never been fed, and speculative replies (greedy and reproducible;
//!   k 1, 4 and auto; a draft that agrees and one that does not) are the plain replies, id for
//!   id. Any difference fails the check: there is no tolerance to loosen.
//! - costs, on models of the real sizes: plain decode rates, the cost of a pass over n tokens
//!   V(n), the draft's cost c per target step; and, from the acceptance measured with the real
//!   pair on the CPU (`specula bench` JSON files), the speedup they predict per k.
//!
//! Writes `device-check.json` and `device-check.md` to `--out`; exit status 1 when a check fails.

use crate::bench::{forward_costs, ForwardCost, PASS_SIZES};
use clap::Args;
use serde::Serialize;
use specula_engine::candle_core::{self, quantized::gguf_file::Value};
use specula_engine::compare::PlainVsSpeculative;
use specula_engine::sampling::Mode;
use specula_engine::speculative::KSetting;
use specula_engine::{synth, CachedModel, Decoding, DrafterKind, GenerateOptions, LoadedModel, Message};
use specula_engine::{SamplingParams, Session};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Args)]
pub struct DeviceCheckArgs {
    /// auto, cpu, cuda, cuda:N or metal.
    #[arg(long, default_value = "cuda")]
    device: String,
    /// Where the report goes (device-check.json and device-check.md).
    #[arg(long)]
    out: PathBuf,
    /// Where the synthetic models are written (gigabytes for the real sizes); default: --out.
    #[arg(long)]
    models: Option<PathBuf>,
    /// A GGUF whose tokenizer the real-size models copy (`specula synth --tokenizer-only`
    /// writes a small one); default: a tiny byte-level tokenizer.
    #[arg(long)]
    tokenizer_from: Option<PathBuf>,
    /// Synthetic targets whose costs to measure (comma-separated `synth` presets; `none` for
    /// exactness alone).
    #[arg(long, value_delimiter = ',', default_value = "qwen2.5-1.5b,qwen2.5-7b")]
    targets: Vec<String>,
    /// The synthetic draft measured beside each target.
    #[arg(long, default_value = "qwen2.5-0.5b")]
    draft: String,
    /// `specula bench` JSON files of the real pair: their acceptance predicts the speedups.
    #[arg(long)]
    acceptance: Vec<PathBuf>,
    /// Tokens per reply in the identity checks and per decode-rate measurement.
    #[arg(long, default_value_t = 48)]
    tokens: usize,
}

/// One exactness check's outcome.
#[derive(Serialize)]
struct Check {
    model: String,
    check: String,
    passed: bool,
    detail: String,
}

/// What one target and the draft cost on the device.
#[derive(Serialize)]
struct Costs {
    target: String,
    draft: String,
    target_tokens_per_second: f64,
    draft_tokens_per_second: f64,
    /// A draft step's time over a target step's.
    c: f64,
    passes: Vec<ForwardCost>,
    predictions: Vec<Prediction>,
}

/// The speedup the costs predict for one prompt set's acceptance and one k.
#[derive(Serialize)]
struct Prediction {
    set: String,
    /// Per-token acceptance α, from the set's tokens per pass at a fixed k on the real pair.
    alpha: f64,
    k: usize,
    speedup: f64,
}

#[derive(Serialize)]
struct Report {
    device: String,
    unix_time: u64,
    passed: bool,
    checks: Vec<Check>,
    costs: Vec<Costs>,
    acceptance_from: Vec<String>,
}

/// The tiny pairs of the exactness checks: (target preset, the other draft's preset).
const EXACTNESS_PAIRS: [(&str, &str); 2] = [("tiny", "tiny"), ("tiny-q4k", "tiny-q5")];
const CONTEXT: usize = 512;
const PROMPTS: [&str; 3] = [
    "Write a Python function that checks whether a string is a palindrome.",
    "Explain what a hash map is in two sentences.",
    "Describe the water cycle to a ten-year-old.",
];

pub fn device_check(args: DeviceCheckArgs) -> Result<ExitCode, String> {
    let device = specula_engine::device::select(&args.device).map_err(|e| e.to_string())?;
    let models = args.models.clone().unwrap_or_else(|| args.out.clone());
    for dir in [&args.out, &models] {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let description = describe_device(&device);
    eprintln!("device-check on {description}");
    let tiny = synth::tiny_tokenizer();
    let mut checks = Vec::new();
    for (target, other) in EXACTNESS_PAIRS {
        let target_path = write_model(&models, "", target, 1, &tiny)?;
        let other_path = write_model(&models, "", other, 2, &tiny)?;
        for path in [&target_path, &other_path] {
            checks.extend(model_checks(path, &device)?);
        }
        checks.extend(identity_checks(&target_path, &other_path, &device, args.tokens)?);
    }
    for check in &checks {
        eprintln!("{} {} {}: {}", if check.passed { "ok  " } else { "FAIL" }, check.model, check.check, check.detail);
    }
    let acceptance = read_acceptance(&args.acceptance)?;
    let tokenizer = match &args.tokenizer_from {
        Some(path) => synth::tokenizer_of(path).map_err(|e| e.to_string())?,
        None => tiny,
    };
    let mut costs = Vec::new();
    for target in args.targets.iter().filter(|t| *t != "none") {
        let target_path = write_model(&models, "sized-", target, 1, &tokenizer)?;
        let draft_path = write_model(&models, "sized-", &args.draft, 2, &tokenizer)?;
        costs.push(measure_costs(&target_path, &draft_path, &device, args.tokens, &acceptance)?);
    }
    let report = Report {
        device: description,
        unix_time: std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()),
        passed: checks.iter().all(|c| c.passed),
        checks,
        costs,
        acceptance_from: args.acceptance.iter().map(|p| p.display().to_string()).collect(),
    };
    let json = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
    write_file(&args.out.join("device-check.json"), &json)?;
    let markdown = markdown(&report);
    write_file(&args.out.join("device-check.md"), &markdown)?;
    println!("{markdown}");
    Ok(if report.passed { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

fn write_file(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}

/// The GPU's name from `nvidia-smi` on CUDA, the CPU's model and features otherwise.
fn describe_device(device: &candle_core::Device) -> String {
    if !device.is_cuda() {
        return format!("{device:?}: {}", specula_engine::kernels::cpu_description());
    }
    let query = ["--query-gpu=name,memory.total,driver_version,compute_cap", "--format=csv,noheader"];
    match std::process::Command::new("nvidia-smi").args(query).output() {
        Ok(out) if out.status.success() => format!("CUDA: {}", String::from_utf8_lossy(&out.stdout).trim()),
        _ => "CUDA (nvidia-smi did not answer)".into(),
    }
}

/// `preset` from `seed`, written into `dir` (`prefix` tells the real vocabulary's apart).
fn write_model(
    dir: &Path,
    prefix: &str,
    preset: &str,
    seed: u64,
    tokenizer: &[(String, Value)],
) -> Result<PathBuf, String> {
    let path = dir.join(format!("{prefix}{preset}-seed{seed}.gguf"));
    let spec = synth::Spec::preset(preset, seed).map_err(|e| e.to_string())?;
    let started = std::time::Instant::now();
    synth::write(&spec, tokenizer, &path).map_err(|e| e.to_string())?;
    eprintln!("wrote {} in {:.1} s", path.display(), started.elapsed().as_secs_f64());
    Ok(path)
}

fn name_of(path: &Path) -> String {
    path.file_stem().map_or_else(String::new, |s| s.to_string_lossy().into_owned())
}

fn load(path: &Path, device: &candle_core::Device) -> Result<LoadedModel, String> {
    LoadedModel::load(path, device, CONTEXT).map_err(|e| format!("{}: {e}", path.display()))
}

/// Text in the model's own tokens, at least `len` of them.
fn input(model: &LoadedModel, len: usize) -> Result<Vec<u32>, String> {
    let text = "fn main() {\n    let numbers = vec![1, 2, 3, 4, 5];\n    println!(\"{}\", numbers.len());\n}\n";
    let mut ids = model.tokenizer.encode(text).map_err(|e| e.to_string())?;
    if ids.is_empty() {
        return Err("the tokenizer encodes the check's text as no tokens".into());
    }
    while ids.len() < len {
        ids.extend_from_within(..);
    }
    ids.truncate(len);
    Ok(ids)
}

/// All positions of one pass against single-token passes, and a rollback against a fresh cache.
fn model_checks(path: &Path, device: &candle_core::Device) -> Result<Vec<Check>, String> {
    let mut loaded = load(path, device)?;
    let tokens = input(&loaded, 24)?;
    let model = &mut loaded.model;
    let err = |e: specula_engine::Error| e.to_string();
    model.truncate(0);
    let batched = model.forward_all(&tokens).map_err(err)?;
    model.truncate(0);
    let mut single = Vec::with_capacity(tokens.len());
    for &t in &tokens {
        single.push(model.forward_all(&[t]).map_err(err)?.remove(0));
    }
    let positions = compare(&batched, &single);

    let (prefix, extra) = tokens.split_at(16);
    model.truncate(0);
    model.forward_all(prefix).map_err(err)?;
    model.forward_all(extra).map_err(err)?;
    model.truncate(prefix.len());
    let after_rollback = model.forward_all(&tokens[3..4]).map_err(err)?;
    let mut fresh = load(path, device)?;
    fresh.model.forward_all(prefix).map_err(err)?;
    let expected = fresh.model.forward_all(&tokens[3..4]).map_err(err)?;
    let rollback = compare(&after_rollback, &expected);

    let model = name_of(path);
    Ok(vec![
        Check {
            model: model.clone(),
            check: format!("one pass over {} tokens = {} single passes", tokens.len(), tokens.len()),
            passed: positions.identical,
            detail: positions.to_string(),
        },
        Check {
            model,
            check: "rollback of 8 tokens = a cache that never saw them".into(),
            passed: rollback.identical,
            detail: rollback.to_string(),
        },
    ])
}

/// How two sets of logits rows differ.
struct Comparison {
    identical: bool,
    rows: usize,
    max_diff: f32,
    argmax_agree: usize,
}

impl std::fmt::Display for Comparison {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.identical {
            true => write!(f, "{} rows bit-identical", self.rows),
            false => write!(
                f,
                "{} rows differ: max |diff| {:e}, argmax agrees at {}/{}",
                self.rows, self.max_diff, self.argmax_agree, self.rows
            ),
        }
    }
}

fn compare(a: &[Vec<f32>], b: &[Vec<f32>]) -> Comparison {
    let argmax = specula_engine::sampling::argmax;
    let max_diff = a.iter().zip(b).flat_map(|(x, y)| x.iter().zip(y).map(|(p, q)| (p - q).abs())).fold(0f32, f32::max);
    Comparison {
        identical: a.len() == b.len()
            && a.iter().zip(b).all(|(x, y)| x.iter().map(|v| v.to_bits()).eq(y.iter().map(|v| v.to_bits()))),
        rows: a.len(),
        max_diff,
        argmax_agree: a.iter().zip(b).filter(|(x, y)| argmax(x) == argmax(y)).count(),
    }
}

/// Speculative replies against plain ones, by token ids: each draft, mode and k.
fn identity_checks(
    target: &Path,
    other: &Path,
    device: &candle_core::Device,
    tokens: usize,
) -> Result<Vec<Check>, String> {
    let mut session = Session::new(load(target, device)?);
    let prompts = PROMPTS
        .iter()
        .map(|p| session.chat_prompt(&[Message::user(*p)], &[]).map_err(|e| e.to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    let mut checks = Vec::new();
    for (draft, label) in [(target, "a draft that agrees (the same weights)"), (other, "a draft that does not")] {
        session.load_draft(draft, device).map_err(|e| e.to_string())?;
        for mode in [Mode::Greedy, Mode::Reproducible] {
            for k in [KSetting::Fixed(1), KSetting::Fixed(4), KSetting::default()] {
                let options = GenerateOptions {
                    max_tokens: tokens,
                    sampling: SamplingParams { mode, ..Default::default() },
                    stop: Vec::new(),
                    ..Default::default()
                };
                let decoding = Decoding { drafter: DrafterKind::Model, k };
                let (mut same, mut drafted, mut accepted) = (0, 0, 0);
                for prompt in &prompts {
                    let both =
                        PlainVsSpeculative::run(&mut session, prompt, &options, decoding).map_err(|e| e.to_string())?;
                    same += usize::from(both.identical());
                    let stats = both.speculative.stats.speculative.unwrap_or_default();
                    (drafted, accepted) = (drafted + stats.drafted, accepted + stats.accepted);
                }
                checks.push(Check {
                    model: name_of(target),
                    check: format!("speculative = plain, {mode:?}, k {k}, {label}"),
                    passed: same == prompts.len(),
                    detail: format!(
                        "{same}/{} replies identical; {accepted}/{drafted} drafted tokens accepted",
                        prompts.len()
                    ),
                });
            }
        }
    }
    Ok(checks)
}

/// Per prompt set, the per-token acceptance α that the real pair's tokens per pass at a fixed
/// k imply ((1 - α^(k+1)) / (1 - α) tokens a pass); the largest fixed k of each set.
fn read_acceptance(files: &[PathBuf]) -> Result<Vec<(String, f64)>, String> {
    let mut best: Vec<(String, usize, f64)> = Vec::new();
    for path in files {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        // "all" pools the sets; each set is predicted on its own.
        for row in json["summary"].as_array().into_iter().flatten().filter(|row| row["kind"] != "all") {
            let (Some(set), Some(k), Some(per_pass)) = (
                row["kind"].as_str(),
                row["k"].as_str().and_then(|k| k.parse::<usize>().ok()),
                row["tokens_per_pass"].as_f64(),
            ) else {
                continue;
            };
            match best.iter_mut().find(|(s, _, _)| s == set) {
                Some(entry) if entry.1 < k => *entry = (set.into(), k, per_pass),
                Some(_) => {}
                None => best.push((set.into(), k, per_pass)),
            }
        }
    }
    Ok(best.into_iter().map(|(set, k, per_pass)| (set, alpha_from_tokens_per_pass(per_pass, k))).collect())
}

/// Tokens a pass of k drafts yields at acceptance α: 1 + α + … + α^k.
fn tokens_per_pass(alpha: f64, k: usize) -> f64 {
    (0..=k).map(|i| alpha.powi(i as i32)).sum()
}

/// The α whose [`tokens_per_pass`] at k is `per_pass` (bisection; it grows with α).
fn alpha_from_tokens_per_pass(per_pass: f64, k: usize) -> f64 {
    let (mut low, mut high) = (0.0, 1.0);
    for _ in 0..60 {
        let mid = (low + high) / 2.0;
        if tokens_per_pass(mid, k) < per_pass {
            low = mid;
        } else {
            high = mid;
        }
    }
    (low + high) / 2.0
}

/// Leviathan et al.'s speedup: the tokens a step yields over its time in target steps, k
/// draft steps of cost c and one pass over k + 1 tokens.
fn predicted_speedup(alpha: f64, k: usize, c: f64, pass_ratio: f64) -> f64 {
    tokens_per_pass(alpha, k) / (k as f64 * c + pass_ratio)
}

fn measure_costs(
    target: &Path,
    draft: &Path,
    device: &candle_core::Device,
    tokens: usize,
    acceptance: &[(String, f64)],
) -> Result<Costs, String> {
    let mut target_model = load(target, device)?;
    let context = input(&target_model, 100)?;
    let decode_rate = |model: &mut CachedModel| crate::speed::generation(model, &context[..32], tokens);
    // One warm-up reply first: a device's first passes load kernels and fill caches.
    decode_rate(&mut target_model.model)?;
    let target_rate = decode_rate(&mut target_model.model)?;
    let passes = forward_costs(&mut target_model.model, &context)?;
    drop(target_model);
    let mut draft_model = load(draft, device)?;
    decode_rate(&mut draft_model.model)?;
    let draft_rate = decode_rate(&mut draft_model.model)?;
    let c = target_rate / draft_rate;
    let predictions = acceptance
        .iter()
        .flat_map(|(set, alpha)| {
            let passes = &passes;
            PASS_SIZES[1..].iter().map(move |&n| {
                let ratio = passes.iter().find(|p| p.n == n).map_or(f64::NAN, |p| p.ratio);
                Prediction {
                    set: set.clone(),
                    alpha: *alpha,
                    k: n - 1,
                    speedup: predicted_speedup(*alpha, n - 1, c, ratio),
                }
            })
        })
        .filter(|p| p.k != 2)
        .collect();
    eprintln!("{}: {target_rate:.1} tok/s, draft {draft_rate:.1} tok/s, c = {c:.3}", name_of(target));
    Ok(Costs {
        target: name_of(target),
        draft: name_of(draft),
        target_tokens_per_second: target_rate,
        draft_tokens_per_second: draft_rate,
        c,
        passes,
        predictions,
    })
}

fn markdown(report: &Report) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "Device: {}\n", report.device);
    let failed = report.checks.iter().filter(|c| !c.passed).count();
    let _ = writeln!(md, "Exactness: {} of {} checks passed\n", report.checks.len() - failed, report.checks.len());
    let _ = writeln!(md, "| model | check | result | detail |\n|---|---|---|---|");
    for c in &report.checks {
        let _ = writeln!(md, "| {} | {} | {} | {} |", c.model, c.check, if c.passed { "ok" } else { "FAIL" }, c.detail);
    }
    for costs in &report.costs {
        let _ = writeln!(
            md,
            "\n{} (synthetic): plain {:.1} tok/s; draft {} {:.1} tok/s; c = {:.3}\n",
            costs.target, costs.target_tokens_per_second, costs.draft, costs.draft_tokens_per_second, costs.c
        );
        let _ = writeln!(md, "| n | pass ms | x one token |\n|---|---|---|");
        for p in &costs.passes {
            let _ = writeln!(md, "| {} | {:.2} | {:.2} |", p.n, p.ms, p.ratio);
        }
        if !costs.predictions.is_empty() {
            let _ = writeln!(md, "\nPredicted speedup (acceptance of the real pair on the CPU):\n");
            let _ = writeln!(md, "| set | α | k | speedup |\n|---|---|---|---|");
            for p in &costs.predictions {
                let _ = writeln!(md, "| {} | {:.2} | {} | {:.2}x |", p.set, p.alpha, p.k, p.speedup);
            }
        }
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alpha_is_recovered_from_tokens_per_pass() {
        for alpha in [0.0, 0.3, 0.7, 0.95] {
            for k in [1, 4, 8] {
                let found = alpha_from_tokens_per_pass(tokens_per_pass(alpha, k), k);
                assert!((found - alpha).abs() < 1e-9, "α {alpha} k {k}: {found}");
            }
        }
    }

    #[test]
    fn a_free_draft_that_is_always_right_gives_k_plus_one_tokens_per_pass() {
        assert_eq!(predicted_speedup(1.0, 4, 0.0, 1.0), 5.0);
        // A draft as dear as the target that is never right halves the speed at k = 1.
        assert_eq!(predicted_speedup(0.0, 1, 1.0, 1.0), 0.5);
    }
}
