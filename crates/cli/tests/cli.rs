//! The `specula` binary: its outputs, and one clear error line with exit code 2 for bad input.

use std::path::PathBuf;
use std::process::{Command, Output};

fn models_dir() -> PathBuf {
    match std::env::var_os("SPECULA_MODELS_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache/specula/models"),
    }
}

fn model(name: &str) -> PathBuf {
    let path = models_dir().join(name);
    assert!(path.exists(), "{} is missing: run scripts/fetch-models.sh", path.display());
    path
}

const SMOLLM: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

fn specula(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_specula")).args(args).output().unwrap()
}

/// Exit code 2, one `error:` line on stderr (the last) that contains `needle`, no panic.
/// Informational log lines (such as a requantization notice) may come before it.
fn assert_clear_error(out: &Output, needle: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error: ")).collect();
    assert_eq!(errors.len(), 1, "one error line expected: {stderr}");
    assert_eq!(stderr.lines().last(), Some(errors[0]), "the error comes last: {stderr}");
    assert!(errors[0].contains(needle), "{stderr}");
}

fn generate(model: &str, extra: &[&str]) -> Output {
    let mut args = vec!["generate", "--model", model, "--prompt", "Hello", "--max-tokens", "4", "--device", "cpu"];
    args.extend_from_slice(extra);
    specula(&args)
}

#[test]
fn a_missing_file_is_a_clear_error() {
    assert_clear_error(&generate("/nonexistent/model.gguf", &[]), "No such file");
}

#[test]
fn a_file_that_is_not_gguf_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notes.gguf");
    std::fs::write(&path, "these are not weights\n".repeat(100)).unwrap();
    assert_clear_error(&generate(path.to_str().unwrap(), &[]), "not a GGUF model file");
}

#[test]
fn a_truncated_gguf_is_a_clear_error_wherever_it_is_cut() {
    let full = std::fs::read(model(SMOLLM)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    for cut in [3, 64, 20_000, 1_000_000, full.len() / 2, full.len() - 1] {
        let path = dir.path().join(format!("cut-{cut}.gguf"));
        std::fs::write(&path, &full[..cut]).unwrap();
        let out = generate(path.to_str().unwrap(), &[]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let needle = if cut < 4 { "not a GGUF model file" } else { "truncated" };
        assert_clear_error(&out, needle);
        eprintln!("cut at {cut}: {}", stderr.trim());
    }
}

/// A well-formed GGUF file of an architecture we do not run (a state-space model).
fn foreign_architecture_gguf(dir: &std::path::Path) -> PathBuf {
    use candle_core::quantized::{gguf_file, GgmlDType, QTensor};
    let path = dir.join("mamba.gguf");
    let weight = QTensor::quantize(
        &candle_core::Tensor::zeros((4, 32), candle_core::DType::F32, &candle_core::Device::Cpu).unwrap(),
        GgmlDType::F32,
    )
    .unwrap();
    let arch = gguf_file::Value::String("mamba".into());
    let mut file = std::fs::File::create(&path).unwrap();
    gguf_file::write(&mut file, &[("general.architecture", &arch)], &[("token_embd.weight", &weight)]).unwrap();
    path
}

#[test]
fn an_unsupported_architecture_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let mamba = foreign_architecture_gguf(dir.path());
    assert_clear_error(&generate(mamba.to_str().unwrap(), &[]), "unsupported model architecture `mamba`");
}

#[test]
fn a_prompt_longer_than_the_context_is_a_clear_error() {
    let smol = model(SMOLLM);
    let long = "word ".repeat(200);
    let out =
        specula(&["generate", "--model", smol.to_str().unwrap(), "--prompt", &long, "--ctx", "64", "--device", "cpu"]);
    assert_clear_error(&out, "maximum context length is 64 tokens");
}

#[test]
fn a_prompt_longer_than_the_context_is_answered_under_truncate_middle_and_with_the_default_context() {
    let smol = model(SMOLLM);
    let long = "word ".repeat(200);
    let args =
        ["generate", "--model", smol.to_str().unwrap(), "--prompt", &long, "--device", "cpu", "--mode", "greedy"];
    let out = specula(&[&args[..], &["--ctx", "64", "--overflow", "truncate-middle", "--max-tokens", "8"]].concat());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("tokens from the middle of the prompt left out of the model's view"), "{stderr}");
    assert!(!String::from_utf8_lossy(&out.stdout).trim().is_empty(), "an answer");
    // The default context is the model's trained one (8,192 here), so 5,000 words need no policy.
    let longer = "word ".repeat(5000);
    let fits = [
        "generate",
        "--model",
        smol.to_str().unwrap(),
        "--prompt",
        &longer,
        "--device",
        "cpu",
        "--max-tokens",
        "4",
        "--json",
    ];
    let out = specula(&fits);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let reply: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(reply["stats"]["prompt_tokens"].as_u64().unwrap() > 5000, "{reply}");
    assert!(reply["stats"].get("trimmed").is_none(), "nothing left out: {reply}");
}

#[test]
fn a_model_too_large_for_free_memory_is_a_clear_error() {
    let smol = model(SMOLLM);
    let out = Command::new(env!("CARGO_BIN_EXE_specula"))
        .args(["generate", "--model", smol.to_str().unwrap(), "--prompt", "Hi", "--device", "cpu"])
        .env("SPECULA_MEMORY_LIMIT", (10 << 20).to_string())
        .output()
        .unwrap();
    assert_clear_error(&out, "only 10 MiB is free");
}

#[test]
fn a_draft_with_another_vocabulary_is_a_clear_error() {
    let smol = model(SMOLLM);
    let qwen = model("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf");
    let out = generate(qwen.to_str().unwrap(), &["--draft", smol.to_str().unwrap()]);
    assert_clear_error(&out, "the draft cannot pair with the target");
}

#[test]
fn generate_json_has_text_tokens_and_stats() {
    let smol = model(SMOLLM);
    let out = generate(smol.to_str().unwrap(), &["--json", "--temperature", "0"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let tokens = v["tokens"].as_array().unwrap();
    assert!(!tokens.is_empty() && tokens.len() <= 4);
    assert_eq!(tokens[0]["source"], "target");
    assert!(tokens[0]["id"].is_u64() && tokens[0]["text"].is_string());
    let text: String = tokens.iter().map(|t| t["text"].as_str().unwrap()).collect();
    assert_eq!(v["text"].as_str().unwrap(), text);
    for key in ["prompt_tokens", "generated_tokens", "prefill_ms", "decode_ms", "tokens_per_second"] {
        assert!(v["stats"][key].is_number(), "stats.{key}");
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("tok/s"), "speeds go to stderr: {stderr}");
}

#[test]
fn speculative_json_has_provenance_and_stats() {
    let qwen = model("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf");
    let q = qwen.to_str().unwrap();
    // Self-speculation: the draft shares the target's file, so every draft is accepted.
    let out = generate(q, &["--json", "--mode", "greedy", "--draft", q, "--k", "2"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let spec = &v["stats"]["speculative"];
    for key in ["drafted", "accepted", "acceptance_rate", "target_passes", "plain_steps"] {
        assert!(spec[key].is_number(), "stats.speculative.{key}: {spec}");
    }
    // Four tokens time too few plain steps for a speedup figure: it is there, and null.
    assert!(spec["speedup_vs_plain"].is_null(), "{spec}");
    assert_eq!(spec["drafted"], spec["accepted"], "a model agrees with itself");
    assert!(v["tokens"].as_array().unwrap().iter().any(|t| t["source"] == "accepted"));
}

#[test]
fn tokenize_prints_ids_as_json() {
    let smol = model(SMOLLM);
    let out = specula(&["tokenize", "--model", smol.to_str().unwrap(), "--text", "Hello, world! How are you today?"]);
    assert!(out.status.success());
    let ids: Vec<u32> = serde_json::from_slice(&out.stdout).unwrap();
    let golden: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/data/tokenize.json")).unwrap(),
    )
    .unwrap();
    let case = golden["models"][SMOLLM]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["text"] == "Hello, world! How are you today?")
        .unwrap();
    let expected: Vec<u32> = case["ids"].as_array().unwrap().iter().map(|i| i.as_u64().unwrap() as u32).collect();
    assert_eq!(ids, expected);
}

#[test]
fn doctor_says_whether_a_pair_can_pair() {
    let target = model("qwen2.5-coder-1.5b-instruct-q4_k_m.gguf");
    let good = specula(&[
        "doctor",
        target.to_str().unwrap(),
        model("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf").to_str().unwrap(),
    ]);
    assert_eq!(good.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&good.stdout).contains("they can pair"));
    let bad =
        specula(&["doctor", target.to_str().unwrap(), model("SmolLM2-135M-Instruct.Q4_1.gguf").to_str().unwrap()]);
    assert_eq!(bad.status.code(), Some(1));
    let text = String::from_utf8_lossy(&bad.stdout);
    assert!(text.contains("they cannot pair") && text.contains("suggestion: Qwen2.5-Coder-0.5B-Instruct"), "{text}");
}

#[test]
fn the_doctor_trial_measures_the_pair_on_this_machine() {
    let out = specula(&[
        "doctor",
        model("qwen2.5-coder-1.5b-instruct-q4_k_m.gguf").to_str().unwrap(),
        model("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf").to_str().unwrap(),
        "--trial",
        "--trial-tokens",
        "12",
        "--device",
        "cpu",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let trial = &report["trial"];
    assert_eq!(trial["tokens"], 12);
    assert_eq!(trial["k"], 4);
    // Exactness holds in the trial too, and its figures are measurements, not placeholders.
    assert_eq!(trial["identical"], true);
    for field in ["plain_tokens_per_second", "speculative_tokens_per_second", "measured_speedup"] {
        assert!(trial[field].as_f64().unwrap() > 0.0, "{field}: {trial}");
    }
    let acceptance = trial["acceptance_rate"].as_f64().unwrap();
    assert!(acceptance > 0.0 && acceptance <= 1.0, "{trial}");
    assert!(trial["cost_ratio"].as_f64().unwrap() > 0.0, "{trial}");

    // A pair that cannot pair gets no trial.
    let bad = specula(&[
        "doctor",
        model("qwen2.5-coder-1.5b-instruct-q4_k_m.gguf").to_str().unwrap(),
        model(SMOLLM).to_str().unwrap(),
        "--trial",
        "--json",
    ]);
    assert_eq!(bad.status.code(), Some(1));
    let report: serde_json::Value = serde_json::from_slice(&bad.stdout).unwrap();
    assert!(report["trial"].is_null());
}

#[test]
fn bench_refuses_a_mode_whose_replies_it_cannot_compare_before_loading_anything() {
    let out = specula(&["bench", "--model", "no-such.gguf", "--drafter", "lookup", "--mode", "sample"]);
    assert_clear_error(&out, "--mode greedy or reproducible");
}
