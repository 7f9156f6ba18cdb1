//! Running an API call on the engine service and answering it in OpenAI's shapes: one JSON body,
//! or SSE chunks. A call may ask for several choices (`n`, and a legacy completion's list of
//! prompts); they run one after another, each with its own seed.
//!
//! Streamed text is held back while it may still become a stop string or a tool call
//! ([`Holdback`]), so a streamed reply's text is the non-streamed reply's, byte for byte.

use crate::api::{finish_reason, Extension, StreamExtension, Usage};
use crate::stream_text::Holdback;
use crate::tools::{self, Offer};
use crate::{ApiError, Kind};
use axum::http::StatusCode;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use specula_engine::protocol::{split_reasoning, Collected, ReasoningSplit, Released};
use specula_engine::service::{EngineHandle, Prompt, ReplyEvent, Request, Ticket};
use specula_engine::{Generation, TokenEvent};
use std::hash::{BuildHasher, Hasher};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// The request every choice starts from.
pub struct Base {
    pub request: Request,
    /// The client's seed; `None` draws a fresh one per choice.
    pub seed: Option<u64>,
    /// Choices per prompt.
    pub n: usize,
}

/// One API call, read and checked.
pub struct Call {
    pub kind: Kind,
    pub model: String,
    pub base: Base,
    /// Prompts after the base request's own (a legacy completion's list).
    pub prompts: Vec<Prompt>,
    pub stream: bool,
    pub include_usage: bool,
    /// `Some(n)`: each token's log-probability and its `n` most likely alternatives.
    pub logprobs: Option<usize>,
    pub tools: Offer,
}

/// One choice to make: its index in the answer and its own request.
struct Choice {
    index: usize,
    request: Request,
    seed: u64,
    /// The first choice of its prompt: its prompt tokens count in the usage.
    counts_prompt: bool,
}

impl Call {
    /// Each prompt, `n` times.
    fn choice_count(&self) -> usize {
        (1 + self.prompts.len()) * self.base.n
    }

    /// The `index`-th choice, made when its turn comes: each holds a copy of its prompt, so
    /// they are made one at a time, never all at once.
    fn choice(&self, index: usize) -> Choice {
        let (prompt, i) = (index / self.base.n, index % self.base.n);
        let seed = self.base.seed.map_or_else(fresh_seed, |s| s.wrapping_add(i as u64));
        let mut request = self.base.request.clone();
        if prompt > 0 {
            request.prompt = self.prompts[prompt - 1].clone();
        }
        request.options.sampling.seed = seed;
        Choice { index, request, seed, counts_prompt: i == 0 }
    }

    fn route(&self) -> &'static str {
        match self.kind {
            Kind::Chat => "/v1/chat/completions",
            Kind::Text => "/v1/completions",
        }
    }
}

/// A seed no earlier reply used (as far as 64 random bits go).
fn fresh_seed() -> u64 {
    std::collections::hash_map::RandomState::new().build_hasher().finish()
}

/// A submitted choice: running (with its `Started` event), or already over (cancelled while
/// queued).
enum Pending {
    Running(Ticket, Box<ReplyEvent>),
    Over(Box<Generation>),
}

/// Submit `request` and wait until its prompt is known to fit: an error before the first
/// token (a prompt too long, a busy queue) is the call's HTTP error, not a broken stream.
async fn start(engine: &EngineHandle, request: Request) -> Result<Pending, ApiError> {
    let ticket = engine.submit(request)?;
    let mut reply = Collected::default();
    loop {
        let event = ticket.recv_async().await.ok_or_else(engine_stopped)?;
        if let started @ ReplyEvent::Started { .. } = event {
            return Ok(Pending::Running(ticket, Box::new(started)));
        }
        if let Some(end) = reply.add(event) {
            return Ok(Pending::Over(Box::new(end?)));
        }
    }
}

async fn finish(pending: Pending) -> Result<Generation, ApiError> {
    let ticket = match pending {
        Pending::Over(generation) => return Ok(*generation),
        Pending::Running(ticket, _) => ticket,
    };
    let mut reply = Collected::default();
    loop {
        let event = ticket.recv_async().await.ok_or_else(engine_stopped)?;
        if let Some(end) = reply.add(event) {
            return Ok(end?);
        }
    }
}

fn engine_stopped() -> ApiError {
    ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", "internal_error", "the engine stopped")
}

/// Answer `call`: a JSON body, or an SSE stream.
pub async fn answer(engine: EngineHandle, call: Call) -> Result<Response, ApiError> {
    let started = Instant::now();
    let id = format!("{}-{}", if call.kind == Kind::Chat { "chatcmpl" } else { "cmpl" }, now_nanos());
    let first = call.choice(0);
    let rest = 1..call.choice_count();
    let pending = match start(&engine, first.request.clone()).await {
        Ok(pending) => pending,
        Err(e) => {
            log(&id, &call, &Usage::default(), None, started, &e.message);
            return Err(e);
        }
    };
    if call.stream {
        return Ok(stream(engine, call, id, first, pending, rest, started).into_response());
    }
    let mut made = vec![(first, finish(pending).await)];
    for choice in rest.map(|index| call.choice(index)) {
        let generation = match start(&engine, choice.request.clone()).await {
            Ok(pending) => finish(pending).await,
            Err(e) => Err(e),
        };
        made.push((choice, generation));
    }
    let mut done = Vec::new();
    for (choice, generation) in made {
        match generation {
            Ok(g) => done.push((choice, g)),
            Err(e) => {
                log(&id, &call, &Usage::default(), None, started, &e.message);
                return Err(e);
            }
        }
    }
    let body = full_body(&call, &id, &done);
    let usage = usage_of(&done);
    log(&id, &call, &usage, done.first().map(|(_, g)| g), started, "ok");
    Ok(Json(body).into_response())
}

fn usage_of(done: &[(Choice, Generation)]) -> Usage {
    let mut usage = Usage::default();
    for (choice, g) in done {
        let one = Usage::of(&g.stats);
        if choice.counts_prompt {
            usage.prompt_tokens += one.prompt_tokens;
        }
        usage.completion_tokens += one.completion_tokens;
    }
    usage.total_tokens = usage.prompt_tokens + usage.completion_tokens;
    usage
}

/// One line per request, for whoever runs the server.
fn log(id: &str, call: &Call, usage: &Usage, first: Option<&Generation>, started: Instant, outcome: &str) {
    let speedup = first
        .and_then(|g| g.stats.speculative.as_ref())
        .and_then(|s| s.speedup_vs_plain)
        .map_or("-".to_string(), |x| format!("{x:.2}x"));
    tracing::info!(
        "{id} {} prompt={} completion={} speedup={speedup} {} ms: {outcome}",
        call.route(),
        usage.prompt_tokens,
        usage.completion_tokens,
        started.elapsed().as_millis(),
    );
}

/// A chat reply's thinking (`reasoning_content`, as llama-server and vLLM return it) and the
/// rest of its text; a completion's text is all content.
fn split_thinking(call: &Call, g: &Generation) -> (Option<String>, String) {
    match call.kind {
        Kind::Chat => split_reasoning(&g.text, g.stats.reasoning.is_some()),
        Kind::Text => (None, g.text.clone()),
    }
}

/// The reply's text split into content and tool calls (none unless tools were offered).
fn split_calls(call: &Call, text: &str) -> (String, Vec<tools::Call>) {
    if !call.tools.is_active() {
        return (text.to_string(), Vec::new());
    }
    let parsed = tools::parse(text, &call.tools.names());
    (parsed.content, parsed.calls)
}

fn call_id() -> String {
    format!("call_{:016x}", fresh_seed())
}

fn tool_calls_json(calls: &[tools::Call], streamed: bool) -> Value {
    let entries: Vec<Value> = calls
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let mut entry = json!({
                "id": call_id(),
                "type": "function",
                "function": { "name": c.name, "arguments": c.arguments },
            });
            if streamed {
                entry["index"] = i.into();
            }
            entry
        })
        .collect();
    Value::Array(entries)
}

fn finish_of(g: &Generation, calls: &[tools::Call]) -> &'static str {
    if calls.is_empty() {
        finish_reason(g)
    } else {
        "tool_calls"
    }
}

fn full_body(call: &Call, id: &str, done: &[(Choice, Generation)]) -> Value {
    let choices: Vec<Value> = done
        .iter()
        .map(|(choice, g)| {
            let (reasoning, content) = split_thinking(call, g);
            let (content, calls) = split_calls(call, &content);
            let logprobs = call.logprobs.map_or(Value::Null, |top| logprobs_json(call.kind, &g.tokens, top));
            let mut body = match call.kind {
                Kind::Chat => {
                    let mut message = json!({ "role": "assistant", "content": content });
                    if let Some(reasoning) = reasoning {
                        message["reasoning_content"] = reasoning.into();
                    }
                    if !calls.is_empty() {
                        if content.is_empty() {
                            message["content"] = Value::Null;
                        }
                        message["tool_calls"] = tool_calls_json(&calls, false);
                    }
                    json!({ "index": choice.index, "message": message })
                }
                Kind::Text => json!({ "index": choice.index, "text": content }),
            };
            body["logprobs"] = logprobs;
            body["finish_reason"] = finish_of(g, &calls).into();
            body
        })
        .collect();
    let first = done.first().map(|(_, g)| g);
    let extension = Extension {
        tokens: first.map(|g| g.tokens.clone()).unwrap_or_default(),
        stats: first.map(|g| g.stats.clone()),
        finish_reason: first.map(|g| g.finish_reason),
        seeds: done.iter().map(|(c, _)| c.seed).collect(),
    };
    json!({
        "id": id,
        "object": if call.kind == Kind::Chat { "chat.completion" } else { "text_completion" },
        "created": now(),
        "model": call.model,
        "system_fingerprint": fingerprint(),
        "choices": choices,
        "usage": usage_of(done),
        "specula": extension,
    })
}

fn fingerprint() -> String {
    format!("specula-{}", env!("CARGO_PKG_VERSION"))
}

/// The log-probability OpenAI reports: ln p, finite (a token the filters ruled out gets
/// OpenAI's floor, -9999).
fn logprob(p: f32) -> f64 {
    if p > 0.0 {
        f64::from(p).ln()
    } else {
        -9999.0
    }
}

/// Each token's log-probability in the target's distribution after the sampling filters, and
/// its `top` most likely alternatives: chat's `content` list, or the legacy completion shape.
fn logprobs_json(kind: Kind, tokens: &[TokenEvent], top: usize) -> Value {
    match kind {
        Kind::Chat => {
            let content: Vec<Value> = tokens
                .iter()
                .map(|t| {
                    let alternatives: Vec<Value> = t
                        .alternatives
                        .iter()
                        .take(top)
                        .map(|a| json!({ "token": a.text, "logprob": logprob(a.p), "bytes": a.text.as_bytes() }))
                        .collect();
                    json!({
                        "token": t.text,
                        "logprob": logprob(t.p.unwrap_or(0.0)),
                        "bytes": t.text.as_bytes(),
                        "top_logprobs": alternatives,
                    })
                })
                .collect();
            json!({ "content": content })
        }
        Kind::Text => {
            let mut offset = 0;
            let mut text_offset = Vec::new();
            for t in tokens {
                text_offset.push(offset);
                offset += t.text.len();
            }
            let top_logprobs: Vec<Value> = tokens
                .iter()
                .map(|t| {
                    let map: serde_json::Map<String, Value> =
                        t.alternatives.iter().take(top).map(|a| (a.text.clone(), logprob(a.p).into())).collect();
                    Value::Object(map)
                })
                .collect();
            json!({
                "tokens": tokens.iter().map(|t| t.text.as_str()).collect::<Vec<_>>(),
                "token_logprobs": tokens.iter().map(|t| logprob(t.p.unwrap_or(0.0))).collect::<Vec<_>>(),
                "top_logprobs": top_logprobs,
                "text_offset": text_offset,
            })
        }
    }
}

/// What a stream sends of one choice so far. The reply's text passes three stages: the stop
/// strings hold back what may yet be cut, the thinking is told apart from the answer (chat
/// only), and the answer holds back what may be a tool call.
struct StreamedChoice {
    index: usize,
    stops: Holdback,
    thinking: Option<ReasoningSplit>,
    calls: Holdback,
    first: bool,
}

impl StreamedChoice {
    fn new(call: &Call, choice: &Choice) -> Self {
        let markers = match call.tools.is_active() {
            true => tools::MARKERS.iter().map(|m| m.to_string()).collect(),
            false => Vec::new(),
        };
        Self {
            index: choice.index,
            stops: Holdback::new(choice.request.options.stop.clone(), false),
            thinking: (call.kind == Kind::Chat).then(ReasoningSplit::new),
            calls: Holdback::new(markers, call.tools.is_active()),
            first: true,
        }
    }

    /// The engine said the prompt opened the thinking, before any token.
    fn opened(&mut self) {
        if let Some(thinking) = &mut self.thinking {
            *thinking = ReasoningSplit::opened();
        }
    }

    /// What may be sent of a token's text now: thinking, and answer.
    fn take(&mut self, text: &str) -> Released {
        let safe = self.stops.push(text);
        self.release(&safe)
    }

    /// The rest, once the reply is `g`: thinking, and the answer without its tool calls.
    fn finish(&mut self, call: &Call, g: &Generation) -> (Released, Vec<tools::Call>) {
        let rest = self.stops.finish(&g.text);
        let mut out = self.release(&rest);
        if let Some(thinking) = &mut self.thinking {
            let last = thinking.finish();
            out.reasoning += &last.reasoning;
            out.content += &self.calls.push(&last.content);
        }
        let (_, content) = split_thinking(call, g);
        let (content, calls) = split_calls(call, &content);
        out.content += &self.calls.finish(&content);
        (out, calls)
    }

    fn release(&mut self, text: &str) -> Released {
        let mut out = match &mut self.thinking {
            Some(thinking) => thinking.push(text),
            None => Released { reasoning: String::new(), content: text.to_string() },
        };
        out.content = self.calls.push(&out.content);
        out
    }

    /// The chunk's part for thinking (chat only).
    fn reasoning_part(&mut self, reasoning: &str) -> Value {
        let mut part = self.part(Kind::Chat, "", None, None);
        part["delta"]["reasoning_content"] = reasoning.into();
        if let Some(delta) = part["delta"].as_object_mut() {
            delta.remove("content");
        }
        part
    }

    /// The choice part of a chunk: a delta (chat) or text (completion).
    fn part(&mut self, kind: Kind, text: &str, tool_calls: Option<Value>, finish: Option<&str>) -> Value {
        let mut part = match kind {
            Kind::Chat => {
                let mut delta = json!({});
                if self.first {
                    delta["role"] = "assistant".into();
                }
                if !text.is_empty() || (finish.is_none() && tool_calls.is_none()) {
                    delta["content"] = text.into();
                }
                if let Some(calls) = tool_calls {
                    delta["tool_calls"] = calls;
                }
                json!({ "index": self.index, "delta": delta })
            }
            Kind::Text => json!({ "index": self.index, "text": text }),
        };
        self.first = false;
        part["logprobs"] = Value::Null;
        part["finish_reason"] = finish.map_or(Value::Null, Value::from);
        part
    }
}

struct Chunks<'a> {
    call: &'a Call,
    id: &'a str,
    created: u64,
}

impl Chunks<'_> {
    fn chunk(&self, choices: Vec<Value>, extension: StreamExtension) -> SseEvent {
        let body = json!({
            "id": self.id,
            "object": if self.call.kind == Kind::Chat { "chat.completion.chunk" } else { "text_completion" },
            "created": self.created,
            "model": self.call.model,
            "system_fingerprint": fingerprint(),
            "choices": choices,
            "specula": extension,
        });
        SseEvent::default().data(body.to_string())
    }
}

/// SSE chunks: per token its releasable text with its provenance (and log-probabilities), per
/// decoding step the live figures, then the finish with the stats; with `include_usage` a
/// last chunk with empty `choices` and the usage; then `[DONE]`. Dropping the stream (client
/// gone) drops the ticket, which stops the engine.
fn stream(
    engine: EngineHandle,
    call: Call,
    id: String,
    first: Choice,
    pending: Pending,
    mut rest: std::ops::Range<usize>,
    started: Instant,
) -> Sse<impl futures_util::Stream<Item = Result<SseEvent, std::convert::Infallible>>> {
    let events = async_stream::stream! {
        let chunks = Chunks { call: &call, id: &id, created: now() };
        let mut usage = Usage::default();
        let mut first_generation = None;
        let mut outcome = "ok".to_string();
        let mut next = Some((first, Ok(pending)));
        'choices: while let Some((choice, pending)) = next.take() {
            let mut streamed = StreamedChoice::new(&call, &choice);
            let ticket = match pending {
                Err(e) => {
                    let e: ApiError = e;
                    outcome = e.message.clone();
                    yield Ok(SseEvent::default().data(e.body().to_string()));
                    break 'choices;
                }
                Ok(Pending::Over(g)) => {
                    let part = streamed.part(call.kind, "", None, Some(finish_reason(&g)));
                    yield Ok(chunks.chunk(vec![part], StreamExtension::of(g.into_done())));
                    None
                }
                Ok(Pending::Running(ticket, started)) => {
                    let part = streamed.part(call.kind, "", None, None);
                    yield Ok(chunks.chunk(vec![part], StreamExtension::of(*started)));
                    Some(ticket)
                }
            };
            while let Some(event) = match &ticket { Some(t) => t.recv_async().await, None => None } {
                match event {
                    ReplyEvent::Tokens { tokens } => {
                        let text: String = tokens.iter().map(|t| t.text.as_str()).collect();
                        let released = streamed.take(&text);
                        if !released.reasoning.is_empty() {
                            let part = streamed.reasoning_part(&released.reasoning);
                            yield Ok(chunks.chunk(vec![part], StreamExtension::default()));
                        }
                        let mut part = streamed.part(call.kind, &released.content, None, None);
                        if let Some(top) = call.logprobs {
                            part["logprobs"] = logprobs_json(call.kind, &tokens, top);
                        }
                        yield Ok(chunks.chunk(vec![part], StreamExtension::of(ReplyEvent::Tokens { tokens })));
                    }
                    event @ (ReplyEvent::Step { .. } | ReplyEvent::Prefill { .. } | ReplyEvent::Trimmed { .. } | ReplyEvent::Reasoning { .. }) => {
                        if matches!(event, ReplyEvent::Reasoning { reasoning } if reasoning.tokens == 0) {
                            streamed.opened();
                        }
                        let part = streamed.part(call.kind, "", None, None);
                        yield Ok(chunks.chunk(vec![part], StreamExtension::of(event)));
                    }
                    ReplyEvent::Done { finish_reason: reason, text, stats } => {
                        let g = Generation { text, tokens: Vec::new(), finish_reason: reason, stats: *stats };
                        let (rest, calls) = streamed.finish(&call, &g);
                        let Generation { text, stats, .. } = g;
                        if !rest.reasoning.is_empty() {
                            let part = streamed.reasoning_part(&rest.reasoning);
                            yield Ok(chunks.chunk(vec![part], StreamExtension::default()));
                        }
                        if !rest.content.is_empty() {
                            let part = streamed.part(call.kind, &rest.content, None, None);
                            yield Ok(chunks.chunk(vec![part], StreamExtension::default()));
                        }
                        if !calls.is_empty() {
                            let part = streamed.part(call.kind, "", Some(tool_calls_json(&calls, true)), None);
                            yield Ok(chunks.chunk(vec![part], StreamExtension::default()));
                        }
                        let one = Usage::of(&stats);
                        if choice.counts_prompt {
                            usage.prompt_tokens += one.prompt_tokens;
                        }
                        usage.completion_tokens += one.completion_tokens;
                        usage.total_tokens = usage.prompt_tokens + usage.completion_tokens;
                        let g = Generation { text, tokens: Vec::new(), finish_reason: reason, stats };
                        let part = streamed.part(call.kind, "", None, Some(finish_of(&g, &calls)));
                        let done = ReplyEvent::Done { finish_reason: g.finish_reason, text: g.text.clone(), stats: Box::new(g.stats.clone()) };
                        if first_generation.is_none() {
                            first_generation = Some(g);
                        }
                        yield Ok(chunks.chunk(vec![part], StreamExtension::of(done)));
                        break;
                    }
                    ReplyEvent::Failed { error } => {
                        let e = ApiError::from(error);
                        outcome = e.message.clone();
                        yield Ok(SseEvent::default().data(e.body().to_string()));
                        break 'choices;
                    }
                    ReplyEvent::Started { .. } | ReplyEvent::Unsaved { .. } | ReplyEvent::Tool { .. } => {}
                }
            }
            next = match rest.next().map(|index| call.choice(index)) {
                Some(choice) => {
                    let pending = start(&engine, choice.request.clone()).await;
                    Some((choice, pending))
                }
                None => None,
            };
        }
        if call.include_usage {
            let body = json!({
                "id": id,
                "object": if call.kind == Kind::Chat { "chat.completion.chunk" } else { "text_completion" },
                "created": chunks.created,
                "model": call.model,
                "system_fingerprint": fingerprint(),
                "choices": [],
                "usage": usage,
            });
            yield Ok(SseEvent::default().data(body.to_string()));
        }
        log(&id, &call, &usage, first_generation.as_ref(), started, &outcome);
        yield Ok(SseEvent::default().data("[DONE]"));
    };
    Sse::new(events).keep_alive(KeepAlive::default())
}

pub fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

fn now_nanos() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos())
}

#[cfg(test)]
mod tests {
    use super::*;
    use specula_engine::{Alternative, Source};

    fn token(text: &str, p: f32, alternatives: &[(&str, f32)]) -> TokenEvent {
        let alternatives = alternatives.iter().map(|&(t, p)| Alternative { id: 1, text: t.into(), p }).collect();
        TokenEvent { id: 1, text: text.into(), source: Source::Target, p: Some(p), q: None, alternatives }
    }

    #[test]
    fn chat_logprobs_are_ln_p_with_the_alternatives_asked_for() {
        let tokens = [token("Hi", 0.5, &[("Hi", 0.5), ("Hello", 0.25), ("Hey", 0.1)])];
        let json = logprobs_json(Kind::Chat, &tokens, 2);
        let entry = &json["content"][0];
        assert_eq!(entry["token"], "Hi");
        assert!((entry["logprob"].as_f64().unwrap() - 0.5f64.ln()).abs() < 1e-6);
        assert_eq!(entry["bytes"], json!([72, 105]));
        assert_eq!(entry["top_logprobs"].as_array().unwrap().len(), 2);
        assert_eq!(entry["top_logprobs"][1]["token"], "Hello");
    }

    #[test]
    fn a_token_the_filters_ruled_out_gets_a_finite_floor() {
        assert_eq!(logprob(0.0), -9999.0);
        assert!(serde_json::to_string(&logprobs_json(Kind::Chat, &[token("x", 0.0, &[])], 0)).is_ok());
    }

    #[test]
    fn legacy_logprobs_have_offsets_and_maps() {
        let tokens = [token("ab", 1.0, &[("ab", 1.0)]), token("c", 0.5, &[("c", 0.5), ("d", 0.5)])];
        let json = logprobs_json(Kind::Text, &tokens, 5);
        assert_eq!(json["tokens"], json!(["ab", "c"]));
        assert_eq!(json["text_offset"], json!([0, 2]));
        assert_eq!(json["top_logprobs"][1].as_object().unwrap().len(), 2);
    }

    #[test]
    fn fresh_seeds_differ() {
        assert_ne!(fresh_seed(), fresh_seed());
    }
}
