//! How far a draft's output layer can be cut: for each N, the greedy acceptance of a draft
//! that may propose only the N most frequent tokens, the special tokens and the tokens of
//! the conversation so far,
//! measured teacher-forced on the target's own greedy replies to the bench prompts, and the
//! cost of one draft step. Writes its figures as JSON to the path given.
//!
//! `cargo run --release -p specula-engine --example draft_vocab -- TARGET DRAFT OUT.json [prompts per kind]`

use specula_engine::kernels::cpu_description;
use specula_engine::session::pruned_vocab;
use specula_engine::{GenerateOptions, LoadedModel, Message, NullSink, SamplingParams};
use std::time::Instant;

const SIZES: [usize; 6] = [8192, 16384, 24576, 32768, 65536, usize::MAX];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, target, draft, out, rest @ ..] = args.as_slice() else {
        return Err("usage: draft_vocab TARGET DRAFT OUT.json [prompts per kind]".into());
    };
    let per_kind: usize = rest.first().map_or(Ok(5), |s| s.parse())?;
    let device = candle_core::Device::Cpu;
    let mut target = LoadedModel::load(target, &device, 1024)?;
    let mut draft = LoadedModel::load(draft, &device, 1024)?;
    let prompts: Vec<serde_json::Value> = serde_json::from_str(&std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../cli/prompts/bench.json"
    ))?)?;
    let vocab = target.tokenizer.vocab().len();
    let ranked = std::env::var("RANK_FROM").ok().map(|dir| rank_by_text(&target.tokenizer, std::path::Path::new(&dir)));
    let specials: Vec<u32> =
        (0..vocab as u32).filter(|&id| target.tokenizer.is_special(id) || target.tokenizer.is_stop(id)).collect();
    let by_id: Vec<Vec<u32>> = SIZES.iter().map(|&n| pruned_vocab(&target.tokenizer, n.min(vocab))).collect();
    let allowed_ids = |n: usize| -> Vec<u32> {
        match &ranked {
            Some(order) => {
                let mut ids: Vec<u32> = order.iter().take(n).copied().collect();
                ids.extend(&specials);
                ids.sort();
                ids.dedup();
                ids
            }
            None => by_id[SIZES.iter().position(|&s| s == n).unwrap_or(0)].clone(),
        }
    };
    let allowed: Vec<Vec<bool>> = SIZES
        .iter()
        .map(|&n| {
            let mut mask = vec![false; vocab];
            allowed_ids(n).iter().for_each(|&id| mask[id as usize] = true);
            mask
        })
        .collect();
    let mut hits = std::collections::BTreeMap::<(String, usize), (usize, usize)>::new();
    let options =
        GenerateOptions { max_tokens: 64, sampling: SamplingParams::greedy(), stop: vec![], ..Default::default() };
    let mut taken = std::collections::HashMap::<String, usize>::new();
    for p in &prompts {
        let kind = p["kind"].as_str().unwrap_or("?").to_string();
        let count = taken.entry(kind.clone()).or_default();
        if *count >= per_kind {
            continue;
        }
        *count += 1;
        let prompt = target.chat_prompt(&[Message::user(p["prompt"].as_str().unwrap_or(""))], &[])?;
        let reply = target.generate(&prompt, &options, &mut NullSink)?;
        let mut sequence = prompt.clone();
        sequence.extend(reply.tokens.iter().map(|t| t.id));
        draft.model.truncate(0);
        let logits = draft.model.forward_all(&sequence[..sequence.len() - 1])?;
        // A pruned head also scores the conversation's own tokens (the prompt's and the
        // reply's so far), as the draft does.
        let mut in_context = vec![false; vocab];
        for i in prompt.len() - 1..sequence.len() - 1 {
            sequence[..=i].iter().for_each(|&id| in_context[id as usize] = true);
            let wanted = sequence[i + 1] as usize;
            for (s, mask) in SIZES.iter().zip(&allowed) {
                let best = (0..vocab)
                    .filter(|&id| mask[id] || in_context[id])
                    .max_by(|&a, &b| logits[i][a].total_cmp(&logits[i][b]));
                let entry = hits.entry((kind.clone(), *s)).or_default();
                entry.0 += usize::from(best == Some(wanted));
                entry.1 += 1;
            }
        }
        eprintln!("{kind}: {} reply tokens", reply.tokens.len());
    }
    // The cost of one draft step at a 100-token context, per N (fastest of 20).
    let context: Vec<u32> = (0..100).map(|i| (i * 37 % 5000) as u32 + 100).collect();
    let mut costs = Vec::new();
    for &n in &SIZES {
        let ids = allowed_ids(n);
        draft.model.restrict_output((n < vocab).then_some(ids.as_slice()))?;
        draft.model.truncate(0);
        draft.model.prefill(&context)?;
        let mut best = f64::MAX;
        for _ in 0..20 {
            let t = Instant::now();
            draft.model.forward_all(&[42])?;
            best = best.min(t.elapsed().as_secs_f64() * 1e3);
            draft.model.truncate(context.len());
        }
        costs.push(best);
    }
    draft.model.restrict_output(None)?;
    let mut plain = f64::MAX;
    target.model.truncate(0);
    target.model.prefill(&context)?;
    for _ in 0..20 {
        let t = Instant::now();
        target.model.forward_all(&[42])?;
        plain = plain.min(t.elapsed().as_secs_f64() * 1e3);
        target.model.truncate(context.len());
    }
    println!("{}", cpu_description());
    println!("| N | draft step ms | c | acceptance (code) | acceptance (prose) | acceptance (edit) |\n|---|---|---|---|---|---|");
    let mut rows = Vec::new();
    for (s, ms) in SIZES.iter().zip(&costs) {
        let rate = |kind: &str| hits.get(&(kind.to_string(), *s)).map_or(0.0, |(h, n)| *h as f64 / (*n).max(1) as f64);
        let label = if *s >= vocab { format!("{vocab} (all)") } else { s.to_string() };
        let (code, prose, edit) = (rate("code"), rate("prose"), rate("edit"));
        println!("| {label} | {ms:.2} | {:.3} | {code:.3} | {prose:.3} | {edit:.3} |", ms / plain);
        rows.push(serde_json::json!({
            "n": s.min(&vocab), "draft_step_ms": ms, "c": ms / plain,
            "acceptance_code": code, "acceptance_prose": prose, "acceptance_edit": edit,
        }));
    }
    let report = serde_json::json!({
        "what": "greedy acceptance of a draft cut to its N most frequent tokens, teacher-forced on the target's greedy replies",
        "cpu": cpu_description(),
        "unix_time": std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_secs(),
        "target_step_ms": plain,
        "prompts_per_kind": per_kind,
        "sizes": rows,
    });
    std::fs::write(out, serde_json::to_string_pretty(&report)?)?;
    Ok(())
}

/// Token ids by how often they occur in the text files under `dir`, then by id.
fn rank_by_text(tokenizer: &specula_engine::Tokenizer, dir: &std::path::Path) -> Vec<u32> {
    let mut counts = vec![0u64; tokenizer.vocab().len()];
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if path.is_dir() && !name.starts_with('.') && !["target", "node_modules", "dist"].contains(&name) {
                stack.push(path);
            } else if ["rs", "ts", "md", "mjs", "json", "toml", "sh", "html", "css", "py"]
                .iter()
                .any(|e| name.ends_with(e))
            {
                if let Ok(text) = std::fs::read_to_string(&path) {
                    for id in tokenizer.encode_literal(&text).unwrap_or_default() {
                        counts[id as usize] += 1;
                    }
                }
            }
        }
    }
    let mut ids: Vec<u32> = (0..counts.len() as u32).collect();
    ids.sort_by_key(|&id| (std::cmp::Reverse(counts[id as usize]), id));
    eprintln!("{} distinct tokens in the text", counts.iter().filter(|&&c| c > 0).count());
    ids
}
