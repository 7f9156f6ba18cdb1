//! The remote client against a stand-in server that misbehaves on purpose: down, a wrong
//! key, a redirect to another host, a stream cut mid-reply, silence, malformed and non-JSON
//! chunks, a 100 MB line, an endless stream, a flood of tokens in one chunk, keep-alive
//! comments dripped for ever, a model list dripped a byte at a time and an error inside the
//! stream. Each ends in one clear error (or, for Stop, at once), with the tokens already
//! streamed kept.

use specula_protocol::ReplyEvent;
use specula_protocol::{ErrorCode, FinishReason, GenerateOptions, Message, Role};
use specula_remote::{Limits, Remote, RemoteTicket};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A server on a loopback port that answers every connection with `behave`; counts them.
struct Standin {
    url: String,
    connections: Arc<AtomicUsize>,
}

fn standin(behave: impl Fn(&mut TcpStream, &str) + Send + Sync + 'static) -> Standin {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let connections = Arc::new(AtomicUsize::new(0));
    let counted = connections.clone();
    let behave = Arc::new(behave);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            counted.fetch_add(1, Ordering::SeqCst);
            let behave = behave.clone();
            std::thread::spawn(move || {
                let request = read_request(&mut stream);
                behave(&mut stream, &request);
            });
        }
    });
    Standin { url, connections }
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

const SSE_HEAD: &str = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n";

fn chunk(text: &str) -> String {
    format!("data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":{text:?}}},\"finish_reason\":null}}]}}\n\n")
}

fn answer(stream: &mut TcpStream, status: &str, content_type: &str, body: &str) {
    let _ = write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

fn limits() -> Limits {
    Limits { connect: Duration::from_secs(2), idle: Duration::from_secs(2), ..Limits::default() }
}

fn ask(url: &str, key: Option<&str>) -> RemoteTicket {
    ask_with(url, key, limits(), 16)
}

fn ask_with(url: &str, key: Option<&str>, limits: Limits, max_tokens: usize) -> RemoteTicket {
    let remote = Remote::with_limits(url, key.map(String::from), limits).unwrap();
    let options = GenerateOptions { max_tokens, ..Default::default() };
    remote.chat("m", &[Message::new(Role::User, "hi")], &options)
}

/// A chunk of `specula serve`'s extension carrying `tokens` tokens, each with `alternatives`.
fn specula_chunk(tokens: usize, alternatives: usize) -> String {
    let alternative = r#"{"id":2,"text":"b","p":0.1}"#;
    let alternatives = vec![alternative; alternatives].join(",");
    let token = format!(r#"{{"id":1,"text":"a","source":"target","alternatives":[{alternatives}]}}"#);
    let tokens = vec![token.as_str(); tokens].join(",");
    let event = format!(r#"{{"kind":"tokens","tokens":[{tokens}]}}"#);
    format!("data: {{\"choices\":[{{\"index\":0,\"delta\":{{}}}}],\"specula\":{{\"event\":{event}}}}}\n\n")
}

/// Write a `: keep-alive` comment `every` so long, and between two listen for the client
/// closing the connection (its end of file, or a reset); then set `closed`.
fn drip_comments(s: &mut TcpStream, every: Duration, closed: &AtomicBool) {
    s.set_read_timeout(Some(every)).unwrap();
    while s.write_all(b": keep-alive\n\n").and_then(|_| s.flush()).is_ok() {
        match s.read(&mut [0; 64]) {
            Ok(0) => break,
            Err(e) if !matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => break,
            _ => {}
        }
    }
    closed.store(true, Ordering::SeqCst);
}

/// The tokens' texts and how the reply ended.
fn outcome(ticket: RemoteTicket) -> (Vec<String>, Result<FinishReason, specula_protocol::ErrorInfo>) {
    let mut texts = Vec::new();
    while let Some(event) = ticket.recv() {
        match event {
            ReplyEvent::Tokens { tokens } => texts.extend(tokens.into_iter().map(|t| t.text)),
            ReplyEvent::Done { finish_reason, .. } => return (texts, Ok(finish_reason)),
            ReplyEvent::Failed { error } => return (texts, Err(error)),
            _ => {}
        }
    }
    panic!("no outcome")
}

/// Whether the reply's first event after its start is a token.
fn starts_with_a_token(ticket: &RemoteTicket) -> bool {
    matches!(ticket.recv(), Some(ReplyEvent::Started { .. }))
        && matches!(ticket.recv(), Some(ReplyEvent::Tokens { .. }))
}

#[test]
fn a_remote_that_streams_well_gives_tokens_usage_and_llama_cpp_draft_counts() {
    let server = standin(|s, _| {
        let _ = write!(s, "{SSE_HEAD}{}{}", chunk("Hello"), chunk(" world"));
        let _ = write!(
            s,
            "data: {{\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"length\"}}],\
             \"usage\":{{\"prompt_tokens\":9,\"completion_tokens\":2}},\
             \"timings\":{{\"prompt_n\":9,\"predicted_n\":2,\"draft_n\":4,\"draft_n_accepted\":3}}}}\n\ndata: [DONE]\n\n"
        );
    });
    let reply = ask(&server.url, None).wait().unwrap();
    assert_eq!(reply.text, "Hello world");
    assert_eq!(reply.finish_reason, FinishReason::MaxTokens);
    assert_eq!((reply.stats.prompt_tokens, reply.stats.generated_tokens), (9, 2));
    let spec = reply.stats.speculative.unwrap();
    assert_eq!((spec.drafted, spec.accepted), (4, 3));
}

#[test]
fn a_remote_that_is_down_is_reported_as_unreachable_at_once() {
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let (_, end) = outcome(ask(&format!("http://127.0.0.1:{port}"), None));
    assert_eq!(end.unwrap_err().code, ErrorCode::Unreachable);
}

#[test]
fn a_wrong_key_is_shown_as_refused_and_never_echoed() {
    let server = standin(|s, request| {
        assert!(request.to_ascii_lowercase().contains("authorization: bearer sk-wrong"), "{request}");
        answer(s, "401 Unauthorized", "application/json", r#"{"error":{"message":"Invalid API Key"}}"#);
    });
    let error = outcome(ask(&server.url, Some("sk-wrong"))).1.unwrap_err();
    assert_eq!(error.code, ErrorCode::Unauthorized);
    assert!(error.message.contains("401") && error.message.contains("Invalid API Key"), "{}", error.message);
    assert!(!error.message.contains("sk-wrong"));
}

#[test]
fn a_redirect_to_another_host_is_not_followed_so_the_key_stays_home() {
    let elsewhere = standin(|s, _| answer(s, "200 OK", "text/event-stream", "data: [DONE]\n\n"));
    let location = format!("{}/v1/chat/completions", elsewhere.url);
    let server = standin(move |s, _| {
        let _ = write!(s, "HTTP/1.1 307 Temporary Redirect\r\nLocation: {location}\r\nContent-Length: 0\r\n\r\n");
    });
    let error = outcome(ask(&server.url, Some("sk-key"))).1.unwrap_err();
    assert_eq!(error.code, ErrorCode::BadResponse);
    assert!(error.message.contains("redirected to") && error.message.contains(&elsewhere.url), "{}", error.message);
    assert_eq!(elsewhere.connections.load(Ordering::SeqCst), 0, "the other host was contacted");
}

#[test]
fn a_stream_cut_mid_reply_keeps_its_tokens_and_says_so() {
    let server = standin(|s, _| {
        let _ = write!(s, "{SSE_HEAD}{}{}{}", chunk("one"), chunk(" two"), chunk(" three"));
    });
    let (texts, end) = outcome(ask(&server.url, None));
    assert_eq!(texts, ["one", " two", " three"]);
    let error = end.unwrap_err();
    assert_eq!(error.code, ErrorCode::Unreachable);
    assert!(error.message.contains("before the reply ended"), "{}", error.message);
}

#[test]
fn a_silent_remote_times_out_and_stop_ends_the_reply_at_once() {
    let server = standin(|s, _| {
        let _ = write!(s, "{SSE_HEAD}{}", chunk("slow"));
        let _ = s.flush();
        std::thread::sleep(Duration::from_secs(30));
    });
    let (texts, end) = outcome(ask(&server.url, None));
    assert_eq!(texts, ["slow"]);
    assert_eq!(end.unwrap_err().code, ErrorCode::Timeout);

    let ticket = ask(&server.url, None);
    assert!(starts_with_a_token(&ticket));
    let stopped = Instant::now();
    ticket.cancel();
    let (_, end) = outcome(ticket);
    assert_eq!(end.unwrap(), FinishReason::Cancelled);
    // The remote is silent for 30 s; Stop does not wait for it (nor for the 2 s idle limit).
    assert!(stopped.elapsed() < Duration::from_secs(1), "{:?}", stopped.elapsed());
}

#[test]
fn malformed_and_non_json_answers_are_bad_responses() {
    let cases: [(&str, &str); 4] = [
        ("data: {not json\n\n", "not OpenAI JSON"),
        ("data: [1, 2\n\n", "not OpenAI JSON"),
        ("<html><body>Welcome to nginx</body></html>\n", "not an event stream"),
        ("data: \u{1}\u{2}binary\n\n", "not OpenAI JSON"),
    ];
    for (body, says) in cases {
        let server = standin(move |s, _| {
            let _ = write!(s, "{SSE_HEAD}{body}");
        });
        let error = outcome(ask(&server.url, None)).1.unwrap_err();
        assert_eq!(error.code, ErrorCode::BadResponse, "{body}");
        assert!(error.message.contains(says), "{body}: {}", error.message);
    }
}

#[test]
fn a_100_mb_line_is_refused_after_its_first_megabyte() {
    let written = Arc::new(AtomicUsize::new(0));
    let count = written.clone();
    let server = standin(move |s, _| {
        let _ = write!(s, "{SSE_HEAD}data: {{\"choices\":[{{\"delta\":{{\"content\":\"");
        let piece = vec![b'x'; 64 * 1024];
        for _ in 0..(100 << 20) / piece.len() {
            if s.write_all(&piece).is_err() {
                return;
            }
            count.fetch_add(piece.len(), Ordering::SeqCst);
        }
    });
    let error = outcome(ask(&server.url, None)).1.unwrap_err();
    assert_eq!(error.code, ErrorCode::BadResponse);
    assert!(error.message.contains("line over 1024 KiB"), "{}", error.message);
    std::thread::sleep(Duration::from_millis(200));
    // The client stopped reading at its bound and closed: the remote could not send it all.
    assert!(written.load(Ordering::SeqCst) < 20 << 20, "{} bytes", written.load(Ordering::SeqCst));
}

#[test]
fn an_endless_stream_is_stopped_past_what_was_asked_for() {
    let server = standin(|s, _| {
        let _ = write!(s, "{SSE_HEAD}");
        loop {
            if s.write_all(chunk("again").as_bytes()).is_err() {
                return;
            }
        }
    });
    let (texts, end) = outcome(ask(&server.url, None));
    let error = end.unwrap_err();
    assert_eq!(error.code, ErrorCode::BadResponse);
    // 16 asked for, 5% + 16 of slack.
    assert!(error.message.contains("more than 32 tokens for max_tokens 16"), "{}", error.message);
    assert_eq!(texts.len(), 32);
}

#[test]
fn a_flood_of_tokens_in_one_chunk_is_stopped_at_the_bound_and_keeps_what_came_within_it() {
    let flood = specula_chunk(100_000, 0);
    let server = standin(move |s, _| {
        let _ = write!(s, "{SSE_HEAD}{flood}data: [DONE]\n\n");
    });
    // A line large enough for the whole chunk, so that the token bound is what stops it.
    let limits = Limits { max_line: 16 << 20, ..limits() };
    let started = Instant::now();
    let (texts, end) = outcome(ask_with(&server.url, None, limits, 5));
    let error = end.unwrap_err();
    assert_eq!(error.code, ErrorCode::BadResponse);
    assert!(error.message.contains("more than 21 tokens for max_tokens 5; the reply was stopped"), "{}", error.message);
    assert_eq!(texts.len(), 21);
    assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
}

#[test]
fn alternatives_past_the_protocols_limit_are_dropped() {
    let server = standin(|s, _| {
        let _ = write!(s, "{SSE_HEAD}{}data: [DONE]\n\n", specula_chunk(2, 500));
    });
    let ticket = ask(&server.url, None);
    let mut counts = Vec::new();
    while let Some(event) = ticket.recv() {
        match event {
            ReplyEvent::Tokens { tokens } => counts.extend(tokens.iter().map(|t| t.alternatives.len())),
            ReplyEvent::Done { .. } => break,
            ReplyEvent::Failed { error } => panic!("{error}"),
            _ => {}
        }
    }
    assert_eq!(counts, [specula_protocol::MAX_ALTERNATIVES; 2]);
}

#[test]
fn keep_alive_comments_do_not_hold_off_the_first_token_deadline() {
    let server = standin(|s, _| {
        let _ = write!(s, "{SSE_HEAD}");
        drip_comments(s, Duration::from_millis(100), &AtomicBool::new(false));
    });
    let limits = Limits { first_token: Duration::from_secs(1), ..limits() };
    let started = Instant::now();
    let (texts, end) = outcome(ask_with(&server.url, None, limits, 16));
    let error = end.unwrap_err();
    assert!(texts.is_empty());
    assert_eq!(error.code, ErrorCode::Timeout);
    let host = server.url.trim_start_matches("http://");
    assert_eq!(error.message, format!("no first token from {host} within 1 s"));
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
}

#[test]
fn a_reply_that_drips_comments_after_a_token_ends_at_its_total_deadline() {
    let server = standin(|s, _| {
        let _ = write!(s, "{SSE_HEAD}{}", chunk("one"));
        drip_comments(s, Duration::from_millis(100), &AtomicBool::new(false));
    });
    let limits = Limits { first_token: Duration::from_secs(1), total: Duration::from_millis(1500), ..limits() };
    let started = Instant::now();
    let (texts, end) = outcome(ask_with(&server.url, None, limits, 16));
    let error = end.unwrap_err();
    assert_eq!(texts, ["one"]);
    assert_eq!(error.code, ErrorCode::Timeout);
    assert!(error.message.ends_with("ran past its 1.5 s limit"), "{}", error.message);
    assert!(started.elapsed() < Duration::from_secs(6), "{:?}", started.elapsed());
}

#[test]
fn stop_during_a_dripping_stream_closes_its_connection_at_once() {
    let closed = Arc::new(AtomicBool::new(false));
    let seen = closed.clone();
    // A comment every 5 s: the reading thread, blocked between two, would notice Stop only
    // at the next one if its socket were not closed under it.
    let server = standin(move |s, _| {
        let _ = write!(s, "{SSE_HEAD}{}", chunk("one"));
        drip_comments(s, Duration::from_secs(5), &seen);
    });
    let limits = Limits { idle: Duration::from_secs(30), ..limits() };
    let ticket = ask_with(&server.url, None, limits, 16);
    assert!(starts_with_a_token(&ticket));
    std::thread::sleep(Duration::from_millis(300));
    let stopped = Instant::now();
    ticket.cancel();
    assert_eq!(outcome(ticket).1.unwrap(), FinishReason::Cancelled);
    // The server sees the connection closed at once, not at its next comment.
    while !closed.load(Ordering::SeqCst) {
        assert!(stopped.elapsed() < Duration::from_secs(3), "the connection is still open");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn an_error_inside_the_stream_and_an_error_status_carry_the_remotes_words() {
    let server = standin(|s, _| {
        let _ = write!(s, "{SSE_HEAD}{}data: {{\"error\":{{\"message\":\"CUDA out of memory\"}}}}\n\n", chunk("a"));
    });
    let (texts, end) = outcome(ask(&server.url, None));
    assert_eq!(texts, ["a"]);
    let error = end.unwrap_err();
    assert_eq!((error.code, error.message.contains("CUDA out of memory")), (ErrorCode::RemoteError, true));

    let server = standin(|s, _| answer(s, "404 Not Found", "application/json", r#"{"error":"model 'm' not found"}"#));
    let error = outcome(ask(&server.url, None)).1.unwrap_err();
    assert_eq!(error.code, ErrorCode::RemoteError);
    assert!(error.message.contains("404") && error.message.contains("model 'm' not found"), "{}", error.message);
}

#[test]
fn a_model_list_is_read_within_bounds_and_names_the_engine() {
    let server = standin(|s, _| {
        answer(s, "200 OK", "application/json", r#"{"object":"list","data":[{"id":"qwen","owned_by":"llamacpp"}]}"#)
    });
    let remote = Remote::with_limits(&server.url, None, limits()).unwrap();
    let check = remote.check();
    assert_eq!(check.models, ["qwen"]);
    assert_eq!(check.kind, specula_protocol::RemoteKind::LlamaCpp);
    assert!(check.error.is_none() && check.round_trip_ms > 0.0);

    let huge = standin(|s, _| answer(s, "200 OK", "application/json", &"[".repeat(2 << 20)));
    let check = Remote::with_limits(&huge.url, None, limits()).unwrap().check();
    assert_eq!(check.error.unwrap().code, ErrorCode::BadResponse);
}

#[test]
fn a_model_list_dripped_a_byte_a_second_ends_the_check_at_its_limit() {
    assert_eq!(specula_remote::CHECK_LIMIT, Duration::from_secs(15));
    let closed = Arc::new(AtomicBool::new(false));
    let seen = closed.clone();
    let server = standin(move |s, _| {
        let body = r#"{"object":"list","data":[{"id":"qwen","owned_by":"llamacpp"}]}"#;
        let head =
            format!("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n", body.len());
        for byte in head.bytes().chain(body.bytes()) {
            if s.write_all(&[byte]).and_then(|_| s.flush()).is_err() {
                seen.store(true, Ordering::SeqCst);
                return;
            }
            std::thread::sleep(Duration::from_secs(1));
        }
    });
    // The idle limit (2 s) never fires: a byte comes every second.
    let remote = Remote::with_limits(&server.url, None, limits()).unwrap();
    let started = Instant::now();
    let check = remote.check_within(Duration::from_secs(2));
    let error = check.error.unwrap();
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    assert_eq!(error.code, ErrorCode::Timeout);
    let host = server.url.trim_start_matches("http://");
    assert_eq!(error.message, format!("{host} did not answer within 2 s"));
    assert!(check.models.is_empty());
    // And its connection was closed rather than left to drip.
    while !closed.load(Ordering::SeqCst) {
        assert!(started.elapsed() < Duration::from_secs(8), "the check's connection is still open");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn thinking_chunk(text: &str) -> String {
    format!("data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"reasoning_content\":{text:?}}},\"finish_reason\":null}}]}}\n\n")
}

#[test]
fn thinking_sent_apart_opens_before_its_tokens_and_closes_where_the_answer_begins() {
    let server = standin(|s, request| {
        assert!(request.contains(r#""chat_template_kwargs":{"enable_thinking":true}"#), "{request}");
        let (a, b) = (thinking_chunk("Hm"), thinking_chunk(" ok"));
        // Thinking after the answer began is more of the answer, as the engine reads its own.
        let (c, d) = (chunk("Yes"), thinking_chunk(" late"));
        let _ = write!(s, "{SSE_HEAD}{a}{b}{c}{d}");
        let _ = write!(
            s,
            "data: {{\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"stop\"}}]}}\n\ndata: [DONE]\n\n"
        );
    });
    let remote = Remote::with_limits(&server.url, None, limits()).unwrap();
    let kwargs = serde_json::json!({ "enable_thinking": true }).as_object().unwrap().clone();
    let options = GenerateOptions { max_tokens: 16, ..Default::default() };
    let ticket = remote.chat_with("m", &[Message::new(Role::User, "hi")], &options, &kwargs);
    let mut heard = Vec::new();
    let stats = loop {
        match ticket.recv().expect("an outcome") {
            ReplyEvent::Tokens { tokens } => heard.extend(tokens.into_iter().map(|t| t.text)),
            ReplyEvent::Reasoning { reasoning } => heard.push(format!("[{} {}]", reasoning.tokens, reasoning.ended)),
            ReplyEvent::Done { stats, .. } => break stats,
            ReplyEvent::Failed { error } => panic!("{error}"),
            _ => {}
        }
    };
    assert_eq!(heard, ["[0 false]", "Hm", " ok", "[2 true]", "Yes", " late"]);
    let reasoning = stats.reasoning.unwrap();
    assert_eq!((reasoning.tokens, reasoning.ended), (2, true));
}
