//! The engine service every front-end drives: per-call options that cannot leak, a job that
//! panics or computes garbage answered with an error while the next job runs, cancellation
//! while queued and during prefill, a full queue refused clearly, bounded event buffers, and
//! a health report that tells the truth.

mod common;

use common::tiny::{Faulty, Tiny};
use specula_engine::service::{
    EngineHandle, EngineState, LoadSpec, Prompt, ReplyEvent, Request, ServiceConfig, Ticket,
};
use specula_engine::speculative::KSetting;
use specula_engine::{DrafterKind, FinishReason, GenerateOptions, Generation, SamplingParams, Session};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn greedy(max_tokens: usize) -> GenerateOptions {
    GenerateOptions { max_tokens, sampling: SamplingParams::greedy(), stop: vec![], ..Default::default() }
}

fn tokens(n: usize) -> Prompt {
    Prompt::Tokens((0..n).map(|i| (i * 7 % 90) as u32 + 1).collect())
}

/// A tiny target with no draft model, around a model that can be told to panic or be slow.
fn session_with(panics: Arc<AtomicBool>, delay_per_token: Duration, context: usize) -> Session {
    let tiny = Tiny { context, ..Tiny::chat(1, 0.0) };
    Session::new(tiny.loaded_with(Box::new(Faulty { inner: tiny.decoder(), panics, delay_per_token })))
}

fn service(session: Session, config: ServiceConfig) -> EngineHandle {
    EngineHandle::spawn(session, config)
}

fn request(prompt: Prompt, max_tokens: usize) -> Request {
    Request::new(prompt, greedy(max_tokens))
}

/// Waits for an event matching `what`, failing the test after 10 s.
fn wait_for(ticket: &Ticket, what: impl Fn(&ReplyEvent) -> bool) -> ReplyEvent {
    let started = Instant::now();
    while let Some(event) = ticket.recv() {
        if what(&event) {
            return event;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "timed out waiting");
    }
    panic!("the ticket ended before the event came");
}

#[test]
fn per_call_k_and_drafter_do_not_leak_into_the_next_call() {
    // The server's old bug, step for step: a request asks for k = 4 with the draft model, which
    // is not loaded, and fails; later requests must not draft with its k.
    let engine = service(session_with(Arc::default(), Duration::ZERO, 512), ServiceConfig::default());
    let mut first = request(tokens(12), 16);
    first.k = Some(KSetting::Fixed(4));
    first.drafter = Some(DrafterKind::Model);
    let err = engine.submit(first).unwrap().wait().unwrap_err();
    assert_eq!(err.code, "invalid_setting", "{err}");

    // No drafter named: the default, plain decoding (no draft is loaded).
    let plain = engine.submit(request(tokens(12), 16)).unwrap().wait().unwrap();
    assert!(plain.stats.speculative.is_none(), "a request that named no drafter drafted");

    // Lookup named, k not: auto, whose first probe drafts 3 (a leaked k = 4 drafts 4 at
    // every step).
    let mut lookup = request(Prompt::Tokens([3, 4, 5, 6].repeat(6)), 24);
    lookup.drafter = Some(DrafterKind::Lookup);
    let g = engine.submit(lookup).unwrap().wait().unwrap();
    let s = g.stats.speculative.unwrap();
    assert!(s.k_min <= 3, "k {}..{}: the earlier request's k leaked", s.k_min, s.k_max);

    // And a fixed k applies to its own request only.
    let mut fixed = request(Prompt::Tokens([3, 4, 5, 6].repeat(6)), 24);
    fixed.drafter = Some(DrafterKind::Lookup);
    fixed.k = Some(KSetting::Fixed(6));
    let s = engine.submit(fixed).unwrap().wait().unwrap().stats.speculative.unwrap();
    assert_eq!(s.k_max, 6);
    let plain_again = engine.submit(request(tokens(12), 16)).unwrap().wait().unwrap();
    assert!(plain_again.stats.speculative.is_none());
}

#[test]
fn a_job_that_panics_is_answered_with_an_error_and_the_next_job_succeeds() {
    let panics = Arc::new(AtomicBool::new(false));
    let engine = service(session_with(panics.clone(), Duration::ZERO, 512), ServiceConfig::default());
    let before = engine.submit(request(tokens(10), 12)).unwrap().wait().unwrap();

    panics.store(true, Ordering::SeqCst);
    let err = engine.submit(request(tokens(10), 12)).unwrap().wait().unwrap_err();
    assert_eq!(err.code, "engine_panic", "{err}");
    assert!(err.to_string().contains("told to panic"), "{err}");
    let health = engine.health();
    assert_eq!(health.state, EngineState::Ready, "the service goes on");
    assert_eq!(health.last_failure.as_ref().map(|f| f.code.as_str()), Some("engine_panic"));

    panics.store(false, Ordering::SeqCst);
    let after = engine.submit(request(tokens(10), 12)).unwrap().wait().unwrap();
    assert_eq!(after.text, before.text, "the caches were reset, not left half-written");
    assert_eq!(engine.health().pending, 0);
}

#[test]
fn a_model_that_computes_nan_fails_its_jobs_clearly_and_health_says_so() {
    let tiny = Tiny::chat(3, 0.0);
    let engine = service(Session::new(tiny.loaded_with(Box::new(NanModel(tiny.decoder())))), ServiceConfig::default());
    for _ in 0..2 {
        let err = engine.submit(request(tokens(5), 4)).unwrap().wait().unwrap_err();
        assert_eq!(err.code, "invalid_logits", "{err}");
    }
    assert_eq!(engine.health().last_failure.unwrap().code, "invalid_logits");
    assert_eq!(engine.health().pending, 0, "nothing stays queued behind the failures");
}

/// A model whose scores are all NaN, as corrupt weights give.
struct NanModel(specula_engine::models::decoder::LiveDecoder);

impl specula_engine::CausalLm for NanModel {
    fn forward(&mut self, tokens: &[u32]) -> specula_engine::Result<candle_core::Tensor> {
        Ok((self.0.forward(tokens)? * f64::NAN)?)
    }
    fn forward_last(&mut self, tokens: &[u32]) -> specula_engine::Result<candle_core::Tensor> {
        Ok((self.0.forward_last(tokens)? * f64::NAN)?)
    }
    fn truncate(&mut self, len: usize) {
        self.0.truncate(len)
    }
    fn len(&self) -> usize {
        self.0.len()
    }
    fn capacity(&self) -> usize {
        self.0.capacity()
    }
    fn vocab_size(&self) -> usize {
        self.0.vocab_size()
    }
}

#[test]
fn cancel_during_prefill_returns_within_a_second_and_the_next_job_starts_at_once() {
    // 3,000 prompt tokens at 2 ms each: a 6 s prefill uncancelled.
    let engine = service(session_with(Arc::default(), Duration::from_millis(2), 4096), ServiceConfig::default());
    let long = engine.submit(request(tokens(3000), 8)).unwrap();
    let waiting = engine.submit(request(tokens(8), 4)).unwrap();
    wait_for(&long, |e| matches!(e, ReplyEvent::Prefill { .. }));
    let cancelled_at = Instant::now();
    long.cancel();
    let ReplyEvent::Done { finish_reason, stats, .. } = wait_for(&long, |e| e.is_last()) else {
        panic!("the cancelled job failed instead of ending")
    };
    let took = cancelled_at.elapsed();
    assert_eq!(finish_reason, FinishReason::Cancelled);
    assert_eq!(stats.generated_tokens, 0);
    assert!(took < Duration::from_secs(1), "the cancel took {took:?}");
    wait_for(&waiting, |e| matches!(e, ReplyEvent::Started { .. }));
    assert!(cancelled_at.elapsed() < Duration::from_secs(1), "the next job waited {:?}", cancelled_at.elapsed());
    assert!(!waiting.wait().unwrap().tokens.is_empty());
}

#[test]
fn a_ticket_dropped_or_cancelled_while_queued_never_runs() {
    let engine = service(session_with(Arc::default(), Duration::from_millis(1), 4096), ServiceConfig::default());
    let running = engine.submit(request(tokens(500), 4)).unwrap();
    let cancelled = engine.submit(request(tokens(8), 4)).unwrap();
    drop(engine.submit(request(tokens(2000), 4)).unwrap()); // its client went away
    cancelled.cancel();
    running.wait().unwrap();
    let g = cancelled.wait().unwrap();
    assert_eq!((g.finish_reason, g.tokens.len()), (FinishReason::Cancelled, 0));
    let started = Instant::now();
    engine.submit(request(tokens(8), 4)).unwrap().wait().unwrap();
    assert!(started.elapsed() < Duration::from_millis(900), "the dropped 2,000-token job ran");
}

#[test]
fn a_deadline_cancels_the_reply() {
    let engine = service(session_with(Arc::default(), Duration::from_millis(2), 4096), ServiceConfig::default());
    let mut slow = request(tokens(2000), 8);
    slow.deadline = Some(Instant::now() + Duration::from_millis(300));
    let started = Instant::now();
    let g = engine.submit(slow).unwrap().wait().unwrap();
    assert_eq!(g.finish_reason, FinishReason::Cancelled);
    assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
}

#[test]
fn twenty_concurrent_submissions_all_complete_or_are_refused_as_busy() {
    let config = ServiceConfig { max_queue: 8, ..Default::default() };
    let engine = service(session_with(Arc::default(), Duration::ZERO, 512), config);
    let threads: Vec<_> = (0..20)
        .map(|i| {
            let engine = engine.clone();
            std::thread::spawn(move || match engine.submit(request(tokens(10 + i), 16)) {
                Ok(ticket) => Ok(ticket.wait().expect("an accepted job completes")),
                Err(e) => Err(e.code()),
            })
        })
        .collect();
    let results: Vec<Result<Generation, &str>> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let done = results.iter().filter(|r| r.is_ok()).count();
    let busy = results.iter().filter(|r| matches!(r, Err("busy"))).count();
    assert_eq!(done + busy, 20, "{results:?}");
    assert!(done >= 8, "{done} done, {busy} refused");
    assert!(results.iter().flatten().all(|g| g.tokens.len() == 16));
    assert_eq!(engine.health().pending, 0);
}

#[test]
fn a_reader_that_falls_behind_holds_the_engine_back_instead_of_a_growing_queue() {
    let config = ServiceConfig { event_buffer: 4, ..Default::default() };
    let engine = service(session_with(Arc::default(), Duration::ZERO, 512), config);
    let ticket = engine.submit(request(tokens(8), 200)).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    // The engine is waiting on the full buffer; reading everything still gets every token.
    let mut tokens_seen = 0;
    let stats = loop {
        match ticket.recv().unwrap() {
            ReplyEvent::Tokens { tokens } => tokens_seen += tokens.len(),
            ReplyEvent::Done { stats, .. } => break stats,
            ReplyEvent::Failed { error } => panic!("{error}"),
            _ => {}
        }
    };
    assert_eq!(tokens_seen, 200);
    assert_eq!(stats.generated_tokens, 200);
}

#[test]
fn events_come_in_order_and_started_reports_the_prompt() {
    let engine = service(session_with(Arc::default(), Duration::ZERO, 512), ServiceConfig::default());
    let ticket = engine.submit(request(tokens(300), 5)).unwrap();
    let mut events = Vec::new();
    while let Some(event) = ticket.recv() {
        events.push(event);
    }
    let ReplyEvent::Started { request_id, prompt_tokens, decoding, .. } = &events[0] else { panic!("{:?}", events[0]) };
    assert_eq!((*request_id, *prompt_tokens), (ticket.id(), Some(300)));
    // The draft-less session's default, resolved by the engine: plain decoding.
    assert_eq!(decoding.map(|d| d.drafter), Some(DrafterKind::None));
    assert!(matches!(events[1], ReplyEvent::Prefill { .. }));
    assert!(matches!(events.last(), Some(ReplyEvent::Done { .. })));
    let tokens: usize =
        events.iter().map(|e| if let ReplyEvent::Tokens { tokens } = e { tokens.len() } else { 0 }).sum();
    assert_eq!(tokens, 5);
}

#[test]
fn a_model_that_cannot_load_leaves_the_service_usable_with_the_reason() {
    let engine = EngineHandle::spawn_empty(ServiceConfig::default());
    assert_eq!(engine.health().state, EngineState::Empty);
    let missing = LoadSpec {
        target: "/nonexistent/model.gguf".into(),
        draft: None,
        draft_vocab: None,
        context: 256,
        kv_format: Default::default(),
        device: "cpu".into(),
        prompt_cache: None,
    };
    let err = engine.load(missing).recv().unwrap().unwrap_err();
    assert_eq!(err.code, "io");
    let health = engine.health();
    assert_eq!(health.state, EngineState::Failed);
    assert!(health.error.unwrap().message.contains("/nonexistent/model.gguf"));
    let err = engine.submit(request(tokens(4), 4)).unwrap().wait().unwrap_err();
    assert_eq!(err.code, "no_model");
    assert!(err.to_string().contains("/nonexistent/model.gguf"), "the reply says why: {err}");

    let good = LoadSpec {
        target: common::model(common::SMOLLM),
        draft: None,
        draft_vocab: None,
        context: 256,
        kv_format: Default::default(),
        device: "cpu".into(),
        prompt_cache: None,
    };
    let health = engine.load(good.clone()).recv().unwrap().unwrap();
    assert_eq!(health.state, EngineState::Ready);
    let mut reply = request(Prompt::Text("Hello".into()), 4);
    reply.models = Some(good);
    assert_eq!(engine.submit(reply).unwrap().wait().unwrap().tokens.len(), 4);
}
