//! `--mcp-config`: the 1.5B coder pair calls a tool of a real MCP server
//! (tests/mcp/arith_server.py, written with the official Python SDK, over stdio). In
//! `generate`, allowed, it runs and the answer uses its result; in `chat` (the engine
//! service's path), denied, nothing runs and the model is told so.

#[path = "../../mcp/tests/mcp_python.rs"]
mod mcp_python;

use mcp_python::{arith_server, mcp_python};
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

fn models_dir() -> PathBuf {
    match std::env::var_os("SPECULA_MODELS_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache/specula/models"),
    }
}

fn model(name: &str) -> String {
    let path = models_dir().join(name);
    assert!(path.exists(), "{} is missing: run scripts/fetch-models.sh", path.display());
    path.display().to_string()
}

fn config(dir: &tempfile::TempDir) -> String {
    let server = arith_server();
    let config = serde_json::json!({"mcpServers": {"arith": {"command": mcp_python(), "args": [server, "stdio"]}}});
    let path = dir.path().join("mcp.json");
    std::fs::write(&path, config.to_string()).unwrap();
    path.display().to_string()
}

const PROMPT: &str = "Add 1234 and 5678 with the add tool, then tell me the result in a sentence.";

fn run(command: &str, extra: &[&str], stdin: &str) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let mut args = vec![
        command.to_string(),
        "--model".into(),
        model("qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"),
        "--draft".into(),
        model("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"),
        "--device".into(),
        "cpu".into(),
        "--max-tokens".into(),
        "60".into(),
        "--mcp-config".into(),
        config(&dir),
    ];
    args.extend(extra.iter().map(|a| a.to_string()));
    let mut child = Command::new(env!("CARGO_BIN_EXE_specula"))
        .args(&args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn allowed_the_call_runs_and_the_answer_uses_its_result() {
    let out = run("generate", &["--allow-tools", "--prompt", PROMPT], "");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("MCP server `arith`: add, multiply"), "{stderr}");
    assert!(stderr.contains("→ tool call: add {\"a\":1234,\"b\":5678} (server `arith`)"), "{stderr}");
    assert!(stderr.contains("← add in ") && stderr.contains(" ms: 6912"), "{stderr}");
    // The answer after the call (the last line of the reply) uses the result.
    let answer = stdout.trim_end().lines().last().unwrap_or_default();
    assert!(answer.contains("6912"), "{stdout}");
}

#[test]
fn denied_the_call_does_not_run_and_the_model_is_told() {
    // The chat's turn, the answer to the question about the call, and an empty line to end.
    let out = run("chat", &[], &format!("{PROMPT}\nn\n\n"));
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("Run it? [y] once, [a] always for this tool, [n] no"), "{stderr}");
    assert!(stderr.contains("← add: denied; the model is told so"), "{stderr}");
    assert!(!stderr.contains("← add in "), "it ran: {stderr}");
    // Asked once: the denied tool is not offered again in this reply.
    assert_eq!(stderr.matches("Run it?").count(), 1, "{stderr}");
    let answer = stdout.trim_end().lines().last().unwrap_or_default();
    assert!(!answer.is_empty() && !answer.contains("6912"), "{stdout}");
}
