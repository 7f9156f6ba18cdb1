//! What the auto drafter's history pool costs: its memory at 1,000 stored conversations, the
//! time to remember a token and to look a context up, with the target's real tokenizer over
//! real text (the draft corpus: the default target's own replies to code and prose prompts).
//! Each "conversation" is a window of that text at its own offset with its token ids shifted
//! by its own amount, so that no two share a 3-token key: the index's worst case, where a real
//! history (which repeats itself) needs fewer keys. Writes JSON to the path given.
//!
//! `cargo run --release -p specula-engine --example history_cost -- TARGET.gguf OUT.json [conversations]`

use specula_engine::kernels::cpu_description;
use specula_engine::speculative::History;
use specula_engine::LoadedModel;
use std::time::Instant;

/// Tokens a stored conversation holds (a question and a long answer).
const CONVERSATION_TOKENS: usize = 1_500;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, target, out, rest @ ..] = args.as_slice() else {
        return Err("usage: history_cost TARGET.gguf OUT.json [conversations]".into());
    };
    let conversations: usize = rest.first().map_or(Ok(1_000), |s| s.parse())?;
    let model = LoadedModel::load(target, &candle_core::Device::Cpu, 256)?;
    let text = include_str!("../data/draft-corpus.txt");
    let corpus = model.tokenizer.encode(text)?;
    let mut history = History::new(specula_engine::session::HISTORY_BYTES);
    let started = Instant::now();
    let mut remembered = 0;
    let vocab = model.tokenizer.vocab().len() as u32;
    let mut windows = Vec::new();
    for i in 0..conversations {
        let offset = (i * 7919) % corpus.len();
        let shift = (i as u32).wrapping_mul(1009);
        let window: Vec<u32> =
            corpus.iter().cycle().skip(offset).take(CONVERSATION_TOKENS).map(|&t| (t + shift) % vocab).collect();
        windows.push(window.clone());
        history.remember(&window);
        remembered += window.len();
    }
    let remember_ns = started.elapsed().as_nanos() as f64 / remembered as f64;
    let lookups = 10_000;
    let started = Instant::now();
    let mut found = 0;
    for i in 0..lookups {
        // The end of some stored conversation's first half: a context the pool has seen.
        let window = &windows[windows.len() - 1 - i % windows.len().min(500)];
        let at = 8 + (i * 104_729) % (window.len() / 2);
        found += usize::from(history.lookup(&window[..at], 8).is_some());
    }
    let lookup_us = started.elapsed().as_secs_f64() * 1e6 / lookups as f64;
    let report = serde_json::json!({
        "kind": "history",
        "cpu": cpu_description(),
        "unix_time": std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_secs(),
        "conversations": conversations,
        "tokens_offered": remembered,
        "tokens_kept": history.len(),
        "cap_bytes": specula_engine::session::HISTORY_BYTES,
        "bytes": history.bytes(),
        "bytes_per_token_kept": history.bytes() as f64 / history.len().max(1) as f64,
        "remember_ns_per_token": remember_ns,
        "lookup_us": lookup_us,
        "lookups_found": found as f64 / lookups as f64,
    });
    println!("{}", serde_json::to_string_pretty(&report)?);
    std::fs::write(out, serde_json::to_string_pretty(&report)?)?;
    Ok(())
}
