//! `specula generate --remote` against a second `specula` serving the same model: the same
//! greedy reply as the model run here, and a remote that is down or refuses the key ends in
//! one `error:` line and exit status 2.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};

const SMOLLM: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

fn model() -> PathBuf {
    let dir = std::env::var_os("SPECULA_MODELS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache/specula/models"));
    let path = dir.join(SMOLLM);
    assert!(path.exists(), "{} is missing: run scripts/fetch-models.sh", path.display());
    path
}

/// `specula serve` on a free port with a key; killed when dropped.
struct Served {
    child: Child,
    url: String,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(key_file: &std::path::Path) -> Served {
    serve_with(key_file, &[])
}

fn serve_with(key_file: &std::path::Path, extra: &[&str]) -> Served {
    let mut child = Command::new(env!("CARGO_BIN_EXE_specula"))
        .args(["serve", "--device", "cpu", "--port", "0", "--model"])
        .arg(model())
        .arg("--api-key-file")
        .arg(key_file)
        .args(extra)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
    let url = stderr.by_ref().map_while(Result::ok).find_map(|l| l.strip_prefix("specula serve: ").map(String::from));
    // The server logs each request: its stderr is read to the end, or its writes would fail.
    std::thread::spawn(move || stderr.for_each(drop));
    Served { child, url: url.expect("the server printed its address").trim().to_string() }
}

fn specula(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_specula")).args(args).output().unwrap()
}

const ASK: &[&str] = &["--prompt", "Name three colours.", "--max-tokens", "12", "--mode", "greedy"];

#[test]
fn a_remote_reply_is_the_reply_the_model_gives_here_and_failures_are_one_error_line() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("key");
    std::fs::write(&key, "sk-remote\n").unwrap();
    let served = serve(&key);

    let local_model = model();
    let mut local_args = vec!["generate", "--device", "cpu", "--model", local_model.to_str().unwrap()];
    local_args.extend_from_slice(ASK);
    let local = specula(&local_args);
    assert!(local.status.success(), "{}", String::from_utf8_lossy(&local.stderr));

    let key_arg = key.to_str().unwrap();
    let mut remote_args =
        vec!["generate", "--remote", &served.url, "--api-key-file", key_arg, "--model", "SmolLM2-135M-Instruct.Q4_1"];
    remote_args.extend_from_slice(ASK);
    let remote = specula(&remote_args);
    let stderr = String::from_utf8_lossy(&remote.stderr);
    assert!(remote.status.success(), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&remote.stdout), String::from_utf8_lossy(&local.stdout));
    assert!(stderr.contains("decode: 12 tokens"), "{stderr}");

    let wrong = dir.path().join("wrong");
    std::fs::write(&wrong, "sk-wrong").unwrap();
    remote_args[4] = wrong.to_str().unwrap();
    assert_one_error(&specula(&remote_args), "refused the API key (401)");

    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let down = format!("http://127.0.0.1:{port}");
    remote_args[2] = &down;
    assert_one_error(&specula(&remote_args), "refused the connection");

    let with_draft = ["generate", "--remote", &served.url, "--model", "m", "--draft", "d.gguf", "--prompt", "x"];
    assert_one_error(&specula(&with_draft), "the remote's own");
}

fn assert_one_error(out: &Output, needle: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error: ")).collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    assert!(errors[0].contains(needle), "{stderr}");
}

/// Files under `dir` named `*.kv`, at any depth.
fn kv_files(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |entries| {
        entries
            .flatten()
            .map(|e| match e.path() {
                p if p.is_dir() => kv_files(&p),
                p => usize::from(p.extension().is_some_and(|x| x == "kv")),
            })
            .sum()
    })
}

#[cfg(unix)]
#[test]
fn a_server_stopped_by_sigterm_writes_its_last_chat_to_the_disk_cache_first() {
    let dir = tempfile::tempdir().unwrap();
    let (key, cache) = (dir.path().join("key"), dir.path().join("cache"));
    std::fs::write(&key, "sk-remote\n").unwrap();
    let cache_arg = cache.to_str().unwrap();
    let mut served = serve_with(&key, &["--cache-dir", cache_arg]);
    // Long enough to be worth keeping (the cache skips prompts under 256 tokens).
    let prompt = "Count the words: ".to_string() + &"word ".repeat(400);
    let key_arg = key.to_str().unwrap();
    let ask = ["generate", "--remote", &served.url, "--api-key-file", key_arg, "--model", "SmolLM2-135M-Instruct.Q4_1"];
    let out = specula(&[&ask[..], &["--prompt", &prompt, "--max-tokens", "2"]].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // What systemd, `kill` and container runtimes send: the server settles, then exits.
    let term = Command::new("kill").args(["-TERM", &served.child.id().to_string()]).status().unwrap();
    assert!(term.success());
    let status = served.child.wait().unwrap();
    assert!(status.success(), "a clean exit: {status}");
    assert!(kv_files(&cache) >= 1, "the last chat is on disk under {}", cache.display());
}
