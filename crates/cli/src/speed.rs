//! `specula speed`: what llama.cpp's `llama-bench` measures, measured the same way, so that the
//! two can be run side by side (`scripts/bench-vs-llama.sh`): prompt processing of `--pp`
//! tokens (`ppN`), and generating `--tg` tokens one pass each (`tgN`), after `--depth` tokens
//! already in the cache, as the median of `--repeat` runs. Tokens are fixed ids (text does not
//! change the cost); generation takes the argmax and ignores end-of-turn, as llama-bench does.
//!
//! `--batch 1,2,4,8`: N sequences at `--depth` each generating `--tg` tokens, one pass a step
//! over their N rows, against the same N generated in turn one pass each (how the engine serves
//! N callers today): aggregate tokens per second each way, in alternating order, and whether
//! the tokens came out the same.

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
    /// Sequences decoded together in one pass a step (comma-separated), each against the same
    /// decoded in turn; none: not measured.
    #[arg(long, value_delimiter = ',')]
    batch: Vec<usize>,
    /// Write the figures here as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Serialize)]
struct BatchMeasurement {
    sequences: usize,
    depth: usize,
    /// Tokens each sequence generates.
    tokens: usize,
    /// Medians over the repeats, all sequences' tokens together.
    in_turn_tokens_per_second: f64,
    together_tokens_per_second: f64,
    /// Together over in turn, the medians'.
    speedup: f64,
    /// Every sequence's tokens the same both ways, in every repeat.
    identical: bool,
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
    #[serde(skip_serializing_if = "Vec::is_empty")]
    batch: Vec<BatchMeasurement>,
    date: String,
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
    drop(loaded);
    let batch = match args.batch.is_empty() {
        true => Vec::new(),
        false => batches(&args, &device, longest + args.batch.iter().max().copied().unwrap_or(0))?,
    };
    let report = Report {
        model: args.model.display().to_string(),
        cpu: specula_engine::kernels::cpu_description(),
        threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
        kv_format: args.kv.as_str(),
        results,
        batch,
        date: chrono::Utc::now().format("%Y-%m-%d %H:%M UTC").to_string(),
    };
    println!("{}\n| test | t/s |\n|---|---|", report.cpu);
    for m in &report.results {
        println!("| {} | {:.2} |", m.test, m.tokens_per_second);
    }
    if !report.batch.is_empty() {
        println!("\n| sequences | depth | in turn t/s | together t/s | together / in turn | identical |\n|---|---|---|---|---|---|");
        for b in &report.batch {
            println!(
                "| {} | {} | {:.2} | {:.2} | {:.2}x | {} |",
                b.sequences, b.depth, b.in_turn_tokens_per_second, b.together_tokens_per_second, b.speedup, b.identical
            );
        }
    }
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
        std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

/// `--batch`: for each count and depth, that many sequences generating `--tg` tokens together
/// and in turn, in alternating order over `--repeat` rounds.
fn batches(
    args: &SpeedArgs,
    device: &specula_engine::candle_core::Device,
    context: usize,
) -> Result<Vec<BatchMeasurement>, String> {
    let mut gguf = specula_engine::gguf::GgufFile::open(&args.model).map_err(|e| e.to_string())?;
    let (decoder, info) =
        specula_engine::models::load_decoder(&mut gguf, device, context, args.kv).map_err(|e| e.to_string())?;
    let mut measured = Vec::new();
    for &sequences in &args.batch {
        for &depth in &args.depth {
            let (mut in_turn, mut together, mut identical) = (Vec::new(), Vec::new(), true);
            for round in 0..args.repeat.max(1) {
                let run =
                    |batched: bool| decode_sequences(&decoder, sequences, depth, args.tg, info.vocab_size, batched);
                let ((a, a_tokens), (b, b_tokens)) = match round % 2 {
                    0 => (run(false)?, run(true)?),
                    _ => {
                        let together = run(true)?;
                        (run(false)?, together)
                    }
                };
                in_turn.push(a);
                together.push(b);
                identical &= a_tokens == b_tokens;
            }
            let (in_turn, together) = (median(&in_turn), median(&together));
            measured.push(BatchMeasurement {
                sequences,
                depth,
                tokens: args.tg,
                in_turn_tokens_per_second: in_turn,
                together_tokens_per_second: together,
                speedup: together / in_turn,
                identical,
            });
        }
    }
    Ok(measured)
}

/// `count` sequences, each with its own `depth` tokens read, generating `tg` tokens each:
/// one pass a step over all (`together`) or one pass a sequence (in turn). The aggregate
/// tokens per second of the generation, and every sequence's tokens.
fn decode_sequences(
    decoder: &specula_engine::models::decoder::Decoder,
    count: usize,
    depth: usize,
    tg: usize,
    vocab: usize,
    together: bool,
) -> Result<(f64, Vec<Vec<u32>>), String> {
    use specula_engine::models::decoder::Rows;
    let err = |e: specula_engine::Error| e.to_string();
    let mut sequences = Vec::with_capacity(count);
    let mut next = Vec::with_capacity(count);
    for s in 0..count {
        // Each its own context: the fixed ids shifted by the sequence's number.
        let context = tokens(depth + 1 + s, vocab)[s..].to_vec();
        let mut sequence = decoder.new_sequence().map_err(err)?;
        for chunk in context[..depth].chunks(specula_engine::decode::PREFILL_CHUNK) {
            decoder.forward(&mut sequence, chunk, false).map_err(err)?;
        }
        sequences.push(sequence);
        next.push(context[depth]);
    }
    let mut generated = vec![Vec::with_capacity(tg); count];
    let started = Instant::now();
    for _ in 0..tg {
        let logits: Vec<specula_engine::candle_core::Tensor> = match together {
            true => {
                let fed: Vec<[u32; 1]> = next.iter().map(|&t| [t]).collect();
                let mut rows: Vec<Rows> = sequences
                    .iter_mut()
                    .zip(&fed)
                    .map(|(sequence, tokens)| Rows { sequence, tokens, all_positions: false })
                    .collect();
                decoder.forward_batch(&mut rows).map_err(err)?.into_iter().collect::<Result<_, _>>().map_err(err)?
            }
            false => sequences
                .iter_mut()
                .zip(&next)
                .map(|(sequence, &token)| decoder.forward(sequence, &[token], false))
                .collect::<Result<_, _>>()
                .map_err(err)?,
        };
        for ((logits, next), generated) in logits.iter().zip(next.iter_mut()).zip(generated.iter_mut()) {
            let row: Vec<f32> = logits.squeeze(0).and_then(|l| l.to_vec1()).map_err(|e| e.to_string())?;
            *next = specula_engine::sampling::argmax(&row);
            generated.push(*next);
        }
    }
    Ok(((count * tg) as f64 / started.elapsed().as_secs_f64(), generated))
}
