//! A remote whose reply and errors carry terminal control sequences (set the window title
//! with OSC 0, write the clipboard with OSC 52, clear the screen with CSI 2J in its 7-bit
//! and C1 forms, return over a line with a bare CR): `specula generate --remote` shows them
//! escaped on stdout and in its `error:` line, and never writes one raw. A stand-in server on
//! a loopback port plays the remote; no model is needed.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Output};

/// A server on a loopback port that answers every connection with `behave(stream, request)`.
fn standin(behave: impl Fn(&mut TcpStream, &str) + Send + Sync + 'static) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let behave = std::sync::Arc::new(behave);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let behave = behave.clone();
            std::thread::spawn(move || {
                let request = read_request(&mut stream);
                behave(&mut stream, &request);
            });
        }
    });
    url
}

/// The request's head and body, as text.
fn read_request(stream: &mut TcpStream) -> String {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut head = String::new();
    let mut length = 0;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        }
        head.push_str(&line);
    }
    let mut body = vec![0; length];
    let _ = reader.read_exact(&mut body);
    head + &String::from_utf8_lossy(&body)
}

fn answer(stream: &mut TcpStream, status: &str, content_type: &str, body: &str) {
    let _ = write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

/// `GET /v1/models` answered with one model, `m`; anything else by `chat`.
fn openai(chat: impl Fn(&mut TcpStream) + Send + Sync + 'static) -> String {
    standin(move |s, request| match request.starts_with("GET /v1/models") {
        true => answer(s, "200 OK", "application/json", r#"{"object":"list","data":[{"id":"m","object":"model"}]}"#),
        false => chat(s),
    })
}

const SSE_HEAD: &str = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n";

fn sse(value: serde_json::Value) -> String {
    format!("data: {value}\n\n")
}

fn delta(content: &str) -> String {
    sse(serde_json::json!({"choices": [{"index": 0, "delta": {"content": content}, "finish_reason": null}]}))
}

/// The reply's deltas: each attack in its own delta, and a `\r\n` split across two.
const DELTAS: [&str; 8] = [
    "Hello\x1b]0;pwned\x07",
    " clip\x1b]52;c;ZWNobyBoaQ==\x07",
    " \x1b[2J",
    " \u{9b}2J",
    " line\r",
    "\nnext\r",
    "$ fake prompt",
    "\x7f end",
];

/// What stdout shows of `DELTAS` (and the newline after the reply).
const SHOWN: &str = "Hello\\x1b]0;pwned\\x07 clip\\x1b]52;c;ZWNobyBoaQ==\\x07 \\x1b[2J \\u{9b}2J line\r\nnext\\x0d$ \
                     fake prompt\\x7f end\n";

fn hostile_reply(s: &mut TcpStream) {
    let mut body = String::from(SSE_HEAD);
    for d in DELTAS {
        body += &delta(d);
    }
    body += &sse(serde_json::json!({
        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": DELTAS.len()},
    }));
    body += "data: [DONE]\n\n";
    let _ = s.write_all(body.as_bytes());
}

fn generate(url: &str, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_specula"))
        .args(["generate", "--remote", url, "--model", "m", "--prompt", "hi"])
        .args(extra)
        .env("NO_COLOR", "1")
        .output()
        .unwrap()
}

/// No ESC, BEL, bare CR, DEL or C1 control anywhere in `bytes`.
fn assert_inert(bytes: &[u8], what: &str) {
    let text = String::from_utf8_lossy(bytes);
    assert!(!bytes.contains(&0x1b), "raw ESC in {what}: {text:?}");
    assert!(!bytes.contains(&0x07), "raw BEL in {what}: {text:?}");
    assert!(!bytes.contains(&0x7f), "raw DEL in {what}: {text:?}");
    assert!(!text.chars().any(|c| ('\u{80}'..='\u{9f}').contains(&c)), "raw C1 control in {what}: {text:?}");
    let bare_cr = bytes.iter().enumerate().any(|(i, &b)| b == b'\r' && bytes.get(i + 1) != Some(&b'\n'));
    assert!(!bare_cr, "bare CR in {what}: {text:?}");
}

#[test]
fn a_remote_reply_that_drives_the_terminal_is_printed_escaped() {
    let url = openai(hostile_reply);
    let out = generate(&url, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_inert(&out.stdout, "stdout");
    assert_inert(&out.stderr, "stderr");
    let stdout = String::from_utf8(out.stdout).unwrap();
    for shown in ["\\x1b]0;pwned\\x07", "\\x1b]52;c;ZWNobyBoaQ==\\x07", "\\x1b[2J", "\\u{9b}2J", "\\x0d$ fake"] {
        assert!(stdout.contains(shown), "{shown} missing from {stdout:?}");
    }
    assert_eq!(stdout, SHOWN);

    // --json is the exact reply: JSON escapes the control characters itself.
    let out = generate(&url, &["--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_inert(&out.stdout, "--json stdout");
    let reply: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(reply["text"], DELTAS.concat());
}

const HOSTILE_ERROR: &str = "overloaded\x1b]0;pwned\x07\x1b]52;c;ZWNobyBoaQ==\x07\x1b[2J\u{9b}2J\r$ ";

#[test]
fn a_remote_error_that_drives_the_terminal_is_one_escaped_error_line() {
    let as_json = serde_json::json!({"error": {"message": HOSTILE_ERROR, "type": "server_error"}}).to_string();
    let in_stream = sse(serde_json::json!({"error": {"message": HOSTILE_ERROR}}));
    let servers = [
        ("a JSON error body", openai(move |s| answer(s, "500 Internal Server Error", "application/json", &as_json))),
        ("a plain error body", openai(|s| answer(s, "503 Service Unavailable", "text/plain", HOSTILE_ERROR))),
        (
            "an error in the stream",
            openai(move |s| {
                let _ = write!(s, "{SSE_HEAD}{}{in_stream}", delta("partial "));
            }),
        ),
    ];
    for (case, url) in servers {
        let out = generate(&url, &[]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{case}: {stderr}");
        assert_inert(&out.stderr, case);
        assert_inert(&out.stdout, case);
        let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error: ")).collect();
        assert_eq!(errors.len(), 1, "{case}: {stderr}");
        for shown in ["overloaded\\x1b]0;pwned\\x07", "\\x1b]52;c;ZWNobyBoaQ==\\x07", "\\x1b[2J\\u{9b}2J\\x0d$"] {
            assert!(errors[0].contains(shown), "{case}: {shown} missing from {:?}", errors[0]);
        }
    }
}
