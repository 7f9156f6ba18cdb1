//! What a target pass over n tokens (logits at every position) costs against a pass over one:
//! the fastest of many rounds, the sizes interleaved within each round, so this machine's
//! noise mostly drops out (`specula bench` reports medians of 5).
//! `cargo run --release -p specula-engine --example pass_cost -- <model.gguf> [rounds] [every]`
//! (`every`: each n from 1 to 17, not only the sizes verification of k = 1, 2, 4, 8, 16 takes)

use specula_engine::gguf::GgufFile;
use specula_engine::models::load_model;
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args.next().ok_or("usage: pass_cost <model.gguf> [rounds]")?;
    let rounds: usize = args.next().map(|r| r.parse()).transpose()?.unwrap_or(10);
    let mut gguf = GgufFile::open(&path)?;
    let (mut model, _) = load_model(&mut gguf, &candle_core::Device::Cpu, 512, Default::default())?;
    // A 100-token context, as in `specula bench`; which tokens does not change the cost.
    let context: Vec<u32> = (0..100u32).map(|i| 1000 + i * 37).collect();
    model.forward_last(&context)?;
    let sizes: Vec<usize> = match args.next().as_deref() {
        Some("every") => (1..=17).collect(),
        _ => vec![1, 2, 3, 5, 9, 17],
    };
    let mut fastest = vec![f64::MAX; sizes.len()];
    for _ in 0..rounds {
        for (best, &n) in fastest.iter_mut().zip(&sizes) {
            let started = Instant::now();
            model.forward(&context[..n])?;
            *best = best.min(started.elapsed().as_secs_f64() * 1e3);
            model.truncate(context.len());
        }
    }
    for (best, &n) in fastest.iter().zip(&sizes) {
        println!("n = {n:2}: {best:6.1} ms, {:.2}x one token", best / fastest[0]);
    }
    Ok(())
}
