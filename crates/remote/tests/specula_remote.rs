//! A second `specula serve` as the remote, in-process on a tiny synthetic pair (the draft is
//! the target's own file, so it drafts and is accepted): the reply comes through with each
//! token's provenance and the remote's speculative figures, token for token what the server
//! itself generates; the model list names Specula; Stop closes the stream.

use specula_engine::service::{EngineHandle, ServiceConfig};
use specula_engine::{synth, Session, Source};
use specula_protocol::ReplyEvent;
use specula_protocol::{FinishReason, GenerateOptions, Message, Mode, RemoteKind, Role};
use specula_remote::Remote;
use specula_server::listen::Limits;
use specula_server::security::{loopback_hosts, Access};
use specula_server::ServerConfig;
use std::time::Duration;

struct Server {
    url: String,
    _dir: tempfile::TempDir,
    _runtime: tokio::runtime::Runtime,
}

fn start() -> Server {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("tiny.gguf");
    synth::write(&synth::Spec::preset("tiny", 4).unwrap(), &synth::tiny_tokenizer(), &model).unwrap();
    let mut session = Session::load(&model, &candle_core::Device::Cpu, 512).unwrap();
    session.load_draft(&model, &candle_core::Device::Cpu).unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let limits =
        Limits { max_connections: 16, header_timeout: Duration::from_secs(5), body_timeout: Duration::from_secs(5) };
    let config = ServerConfig {
        model_id: "tiny".into(),
        access: Access { api_key: Some("sk-test".into()), allowed_hosts: Some(loopback_hosts(&[])) },
        limits,
        ui_dir: None,
        request_timeout: Duration::from_secs(60),
        overflow: Default::default(),
    };
    let app = runtime.block_on(async { specula_server::router(EngineHandle::spawn(session, engine_config()), config) });
    runtime.spawn(specula_server::listen::serve(listener, app, limits, std::future::pending()));
    Server { url, _dir: dir, _runtime: runtime }
}

/// A fixed k: auto k would find no gain in a draft as dear as its target and decode plainly.
fn engine_config() -> ServiceConfig {
    ServiceConfig { default_k: specula_engine::speculative::KSetting::Fixed(4), ..Default::default() }
}

fn greedy(max_tokens: usize) -> GenerateOptions {
    let mut options = GenerateOptions { max_tokens, ..Default::default() };
    options.sampling.mode = Mode::Greedy;
    options
}

#[test]
fn a_specula_remote_streams_provenance_and_its_speculative_figures() {
    let server = start();
    let remote = Remote::new(&server.url, Some("sk-test".into())).unwrap();
    let check = remote.check();
    assert_eq!(
        (check.models.as_slice(), check.kind, check.error),
        (&["tiny".to_string()][..], RemoteKind::Specula, None)
    );

    let ticket = remote.chat("tiny", &[Message::new(Role::User, "Count: one two three")], &greedy(24));
    let (mut tokens, mut steps) = (Vec::new(), 0);
    let reply = loop {
        match ticket.recv().expect("an outcome") {
            ReplyEvent::Tokens { tokens: more } => tokens.extend(more),
            ReplyEvent::Step { .. } => steps += 1,
            ReplyEvent::Done { finish_reason, text, stats } => break (finish_reason, text, stats),
            ReplyEvent::Failed { error } => panic!("{error}"),
            _ => {}
        }
    };
    assert_eq!(tokens.len(), 24);
    assert!(steps > 0);
    // The draft is the target itself: every drafted token is kept, so most colours are the
    // draft's and the bonus's (the engine may time a few plain steps for its speedup figure).
    let sources: Vec<Source> = tokens.iter().map(|t| t.source).collect();
    let drafted = sources.iter().filter(|s| matches!(s, Source::Accepted | Source::Bonus)).count();
    assert!(sources.contains(&Source::Accepted) && drafted > sources.len() / 2, "{sources:?}");
    let (finish_reason, text, stats) = reply;
    assert_eq!(finish_reason, FinishReason::MaxTokens);
    let spec = stats.speculative.expect("the remote's speculative figures");
    assert!(spec.drafted > 0 && spec.accepted == spec.drafted, "{spec:?}");
    assert!(stats.tokens_per_second > 0.0);
    assert_eq!(text, tokens.iter().map(|t| t.text.as_str()).collect::<String>());

    // The same request, asked of the server without streaming, gives the same text.
    let again = remote.chat("tiny", &[Message::new(Role::User, "Count: one two three")], &greedy(24)).wait().unwrap();
    assert_eq!(again.text, text);
}

#[test]
fn a_wrong_key_and_stop_against_a_real_server() {
    let server = start();
    let wrong = Remote::new(&server.url, Some("sk-nope".into())).unwrap();
    let error = wrong.chat("tiny", &[Message::new(Role::User, "hi")], &greedy(4)).wait().unwrap_err();
    assert_eq!(error.code, specula_protocol::ErrorCode::Unauthorized);

    let remote = Remote::new(&server.url, Some("sk-test".into())).unwrap();
    let ticket = remote.chat("tiny", &[Message::new(Role::User, "Count")], &greedy(400));
    assert!(matches!(ticket.recv(), Some(ReplyEvent::Started { .. })));
    // The remote's engine says how far it read the prompt, then decodes.
    let decoding = std::iter::from_fn(|| ticket.recv()).find(|e| !matches!(e, ReplyEvent::Prefill { .. }));
    assert!(matches!(decoding, Some(ReplyEvent::Tokens { .. } | ReplyEvent::Step { .. })), "{decoding:?}");
    ticket.cancel();
    let reply = ticket.wait().unwrap();
    assert_eq!(reply.finish_reason, FinishReason::Cancelled);
    assert!(reply.stats.generated_tokens < 400);
}
