//! `specula pull` and `specula models` against a local stand-in for Hugging Face Hub.

#[path = "../../hub/tests/common/mod.rs"]
mod stand_in;

use stand_in::{real_model, StandIn};
use std::process::{Command, Output};

const REPO: &str = "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF";

fn specula(args: &[&str], server: &StandIn, hf_home: &std::path::Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_specula"))
        .args(args)
        .env("HF_ENDPOINT", &server.url)
        .env("HF_HOME", hf_home)
        .env("SPECULA_MODELS_DIR", hf_home.join("no-such-folder"))
        .env_remove("HF_TOKEN")
        .output()
        .unwrap()
}

#[test]
fn pull_shows_progress_resumes_a_cut_and_the_library_lists_the_file() {
    let (file, data) = real_model();
    let server = StandIn::start(REPO, &file, data);
    server.behaviour.lock().unwrap().cuts = vec![40_000_000];
    let home = tempfile::tempdir().unwrap();

    let out = specula(&["pull", REPO], &server, home.path());
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{stderr}");
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains(&format!("pulling {REPO}/{file}")), "{stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| l.contains("MB/s")).collect();
    assert!(lines.len() >= 5, "progress as it goes: {lines:?}");
    assert!(lines.last().unwrap().contains("100.0%") || stderr.contains("100.0%"), "{stderr}");
    assert!(stderr.contains("ETA"), "{stderr}");
    let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        path.ends_with(&file) && path.contains("models--HuggingFaceTB--SmolLM2-135M-Instruct-GGUF/snapshots/"),
        "{path}"
    );
    use sha2::{Digest, Sha256};
    let sha: String = Sha256::digest(std::fs::read(&path).unwrap()).iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(sha, server.sha256);

    let listed = specula(&["models", "--json"], &server, home.path());
    let models: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(models[0]["repo"], REPO);
    assert_eq!(models[0]["path"], path.as_str());

    let again = specula(&["pull", REPO, "--file", &file], &server, home.path());
    assert!(String::from_utf8_lossy(&again.stderr).contains("already in the library"));
}

#[test]
fn pulling_a_missing_file_is_a_clear_error() {
    let (file, data) = real_model();
    let server = StandIn::start(REPO, &file, data);
    let home = tempfile::tempdir().unwrap();
    let out = specula(&["pull", REPO, "--file", "nope.gguf"], &server, home.path());
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("error:") && stderr.contains("was not found"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}
