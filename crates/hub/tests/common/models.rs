//! The real models `scripts/fetch-models.sh` puts in the models folder, for the doctor's tests.
#![allow(dead_code)]

use std::path::PathBuf;

pub const TARGET: &str = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf";
pub const DRAFT: &str = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf";
pub const SMOLLM: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// A real model; the tests need them and fail loudly rather than skip.
pub fn model(name: &str) -> PathBuf {
    let path = specula_engine::protocol::app::models_dir().join(name);
    assert!(path.exists(), "{} is missing: run scripts/fetch-models.sh", path.display());
    path
}
