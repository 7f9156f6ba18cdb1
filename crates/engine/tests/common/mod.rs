//! Shared helpers for the integration tests: the real models fetched by
//! `scripts/fetch-models.sh`, and the golden files copied into `tests/data`.
#![allow(dead_code)]

pub mod tiny;

use std::path::PathBuf;

pub const TARGET: &str = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf";
pub const DRAFT: &str = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf";
pub const SMOLLM: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
pub const GEMMA: &str = "gemma-3-270m-q4_k_m.gguf";

pub fn models_dir() -> PathBuf {
    match std::env::var_os("SPECULA_MODELS_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(std::env::var_os("HOME").expect("HOME is set")).join(".cache/specula/models"),
    }
}

/// Where the model tests run: the CPU, or the device named by `SPECULA_TEST_DEVICE`
/// (`cuda`, `cuda:N`, `metal`), which `scripts/gpu-check.sh` sets to run them on a GPU.
pub fn device() -> candle_core::Device {
    let spec = std::env::var("SPECULA_TEST_DEVICE").unwrap_or_else(|_| "cpu".into());
    specula_engine::device::select(&spec).unwrap_or_else(|e| panic!("SPECULA_TEST_DEVICE={spec}: {e}"))
}

/// A real model; the tests need them and fail loudly rather than skip.
pub fn model(name: &str) -> PathBuf {
    let path = models_dir().join(name);
    assert!(path.exists(), "{} is missing: run scripts/fetch-models.sh", path.display());
    path
}

pub fn golden(name: &str) -> serde_json::Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/data").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

/// The prompts of the exactness tests: code and prose.
pub const PROMPTS: [&str; 10] = [
    "Write a Python function that checks whether a string is a palindrome.",
    "Write a Rust function that returns the n-th Fibonacci number.",
    "Write a JavaScript function that removes duplicate values from an array.",
    "Write a SQL query that finds the ten customers with the highest total order value.",
    "Write a C function that reverses a linked list in place.",
    "Explain what a hash map is in two sentences.",
    "Write a haiku about the sea.",
    "Describe the water cycle to a ten-year-old.",
    "Give three tips for writing a good cover letter.",
    "Explain why the sky is blue.",
];

/// Checks that every step commits at least one token. (The cache lengths after every step are
/// asserted inside the loop, which these debug-built tests run with assertions on.)
#[derive(Default)]
pub struct InvariantSink {
    pub committed: usize,
    pub at_last_step: usize,
    pub steps: usize,
}

impl specula_engine::TokenSink for InvariantSink {
    fn on_token(&mut self, _: &specula_engine::TokenEvent) -> specula_engine::Flow {
        self.committed += 1;
        specula_engine::Flow::Continue
    }
    fn on_step(&mut self, step: &specula_engine::StepEvent) -> specula_engine::Flow {
        assert!(self.committed > self.at_last_step, "a step committed nothing");
        assert_eq!(step.generated, self.committed);
        self.at_last_step = self.committed;
        self.steps += 1;
        specula_engine::Flow::Continue
    }
}

pub fn ids(g: &specula_engine::Generation) -> Vec<u32> {
    g.tokens.iter().map(|t| t.id).collect()
}
