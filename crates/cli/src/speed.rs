//! `specula speed`: what llama.cpp's `llama-bench` measures, measured the same way, so that the
//! two can be run side by side (`scripts/bench-vs-llama.sh`): prompt processing of `--pp`
//! tokens (`ppN`), and generating `--tg` tokens one pass each (`tgN`), after `--depth` tokens
//! already in the cache, as the median of `--repeat` runs. Tokens are fixed ids (text does not
//! change the cost); generation takes the argmax and ignores end-of-turn, as llama-bench does.

use clap::Args;
use serde::Serialize;
use specula_engine::{device, CachedModel, LoadedModel};
use std::path::PathBuf;
use std::time::Instant;

#[derive(Args)]
pub struct SpeedArgs {
    #[arg(long)]
    model: PathBuf,
    /// Prompt tokens to process in one prefill (0: skip).
    #[arg(long, default_value_t = 512)]
    pp: usize,
    /// Tokens to generate, one pass each (0: skip).
    #[arg(long, default_value_t = 128)]
    tg: usize,
    /// Tokens already in the cache before each measurement (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "0")]
    depth: Vec<usize>,
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    #[arg(long, default_value = "cpu")]
    device: String,
    /// How the KV cache stores keys and values (f16, q8_0 or f32).
    #[arg(long, default_value = specula_engine::protocol::DEFAULT_KV_FORMAT.as_str())]
    kv: specula_engine::KvFormat,
    /// Write the figures here as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Serialize)]
struct Measurement {
    test: String,
    depth: usize,
    tokens: usize,
    /// Median over the repeats.
    tokens_per_second: f64,
    runs: Vec<f64>,
}

impl Measurement {
    /// The figures of `runs` (tokens per second each), summarised by their median.
    fn new(test: String, depth: usize, tokens: usize, runs: Vec<f64>) -> Self {
        Self { test, depth, tokens, tokens_per_second: median(&runs), runs }
    }
}

#[derive(Serialize)]
struct Report {
    model: String,
    cpu: String,
    threads: usize,
    kv_format: &'static str,
    results: Vec<Measurement>,
}

/// Fixed ids spread over the vocabulary (avoiding its first ids, often control tokens).
fn tokens(n: usize, vocab: usize) -> Vec<u32> {
    (0..n).map(|i| (1000 + (i * 7919) % (vocab - 1000).max(1)) as u32).collect()
}

fn median(values: &[f64]) -> f64 {
    let mut values = values.to_vec();
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// One prefill of `pp` tokens after `depth`: tokens per second.
fn prompt_processing(model: &mut CachedModel, depth: &[u32], pp: &[u32]) -> Result<f64, String> {
    model.truncate(0);
    model.prefill(depth).map_err(|e| e.to_string())?;
    let started = Instant::now();
    let mut context = depth.to_vec();
    context.extend_from_slice(pp);
    model.prefill(&context).map_err(|e| e.to_string())?;
    Ok(pp.len() as f64 / started.elapsed().as_secs_f64())
}

/// `tg` single-token passes after `depth`, each feeding the previous argmax: tokens per second.
pub fn generation(model: &mut CachedModel, depth: &[u32], tg: usize) -> Result<f64, String> {
    model.truncate(0);
    model.prefill(depth).map_err(|e| e.to_string())?;
    let mut next = depth.last().copied().unwrap_or(1000);
    let started = Instant::now();
    for _ in 0..tg {
        let logits = model.forward_all(&[next]).map_err(|e| e.to_string())?;
        next = specula_engine::sampling::argmax(&logits[0]);
    }
    Ok(tg as f64 / started.elapsed().as_secs_f64())
}

pub fn speed(args: SpeedArgs) -> Result<(), String> {
    let device = device::select(&args.device).map_err(|e| e.to_string())?;
    let longest = args.depth.iter().max().copied().unwrap_or(0) + args.pp.max(args.tg) + 1;
    let mut loaded = LoadedModel::load_with(&args.model, &device, longest, args.kv).map_err(|e| e.to_string())?;
    if loaded.model.capacity() < longest {
        return Err(format!("the model holds {} positions; depth + tokens needs {longest}", loaded.model.capacity()));
    }
    let vocab = loaded.info.vocab_size;
    let repeat = args.repeat.max(1);
    let mut results = Vec::new();
    for &depth in &args.depth {
        let context = tokens(depth, vocab);
        let suffix = if depth > 0 { format!(" @ d{depth}") } else { String::new() };
        if args.pp > 0 {
            let pp = tokens(args.pp + depth, vocab)[depth..].to_vec();
            let runs = (0..repeat)
                .map(|_| prompt_processing(&mut loaded.model, &context, &pp))
                .collect::<Result<Vec<_>, _>>()?;
            results.push(Measurement::new(format!("pp{}{suffix}", args.pp), depth, args.pp, runs));
        }
        if args.tg > 0 {
            let runs =
                (0..repeat).map(|_| generation(&mut loaded.model, &context, args.tg)).collect::<Result<Vec<_>, _>>()?;
            results.push(Measurement::new(format!("tg{}{suffix}", args.tg), depth, args.tg, runs));
        }
    }
    let report = Report {
        model: args.model.display().to_string(),
        cpu: specula_engine::kernels::cpu_description(),
        threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
        kv_format: args.kv.as_str(),
        results,
    };
    println!("{}\n| test | t/s |\n|---|---|", report.cpu);
    for m in &report.results {
        println!("| {} | {:.2} |", m.test, m.tokens_per_second);
    }
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
        std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}
