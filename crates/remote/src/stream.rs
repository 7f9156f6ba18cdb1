//! Reading one streamed reply: chunks become token and step events, the last ones the
//! reply's statistics. Every way a remote can misbehave ends in one `Failed` event with the
//! tokens already sent kept as the partial reply.

use crate::chunk::{self, Chunk, Extension, Timings, Usage};
use crate::sse::{Line, SseError, SseReader};
use crate::ticket::Outlet;
use crate::{bad, Limits};
use specula_protocol::limits::MAX_ALTERNATIVES;
use specula_protocol::{
    ErrorCode, ErrorInfo, FinishReason, Reasoning, RemoteKind, ReplyEvent, Source, SpeculativeStats, StepEvent,
    TokenEvent,
};
use std::io::Read;
use std::time::Instant;

/// What the chunks said beyond their tokens, gathered for the reply's end.
#[derive(Default)]
struct Ending {
    finish: Option<FinishReason>,
    usage: Option<Usage>,
    timings: Option<Timings>,
    remote_stats: Option<specula_protocol::GenerationStats>,
    kind: Option<RemoteKind>,
    done: bool,
}

pub(crate) fn read_reply(outlet: &Outlet, body: impl Read, limits: &Limits, max_tokens: usize, seed: u64) {
    // The remote's own id, prompt and decoding stay its own: the reply is known here by this
    // client's id, and its prompt length arrives with the usage at the end.
    outlet.send(ReplyEvent::Started { request_id: outlet.id, prompt_tokens: None, decoding: None, seed });
    let outcome = read_chunks(outlet, body, limits, max_tokens);
    if outlet.is_cancelled() {
        return;
    }
    match outcome {
        Ok(ending) => outlet.end(done(outlet, ending)),
        Err(error) => outlet.end(ReplyEvent::Failed { error }),
    }
}

fn read_chunks(outlet: &Outlet, body: impl Read, limits: &Limits, max_tokens: usize) -> Result<Ending, ErrorInfo> {
    let mut sse = SseReader::new(body, limits.max_line, limits.max_body);
    let mut ending = Ending::default();
    let budget = Budget::new(max_tokens);
    let mut saw_data = false;
    // Chunks without tokens are not counted: they are bounded by the body's size and the
    // reply's total deadline.
    while let Some(line) = sse.next_line().map_err(stream_error)? {
        if outlet.is_cancelled() {
            return Ok(ending);
        }
        let Line::Data(data) = line else { continue };
        saw_data = true;
        if data.trim() == "[DONE]" {
            ending.done = true;
            break;
        }
        let chunk: Chunk = serde_json::from_str(&data)
            .map_err(|_| bad(format!("the remote sent a chunk that is not OpenAI JSON: {}", preview(&data))))?;
        take_chunk(outlet, chunk, &mut ending, &budget)?;
    }
    if !saw_data {
        return Err(bad("the remote's answer is not an event stream (is the URL an OpenAI API?)".into()));
    }
    if !ending.done && ending.finish.is_none() {
        return Err(ErrorInfo::new(ErrorCode::Unreachable, "the remote closed the stream before the reply ended"));
    }
    Ok(ending)
}

/// How many tokens a reply may bring: what was asked for, with some slack. A text delta is
/// not always exactly one of the remote's tokens (a character split over two deltas, text
/// held back while a stop string might match and then sent in pieces), so a remote that keeps
/// to `max_tokens` may send a few more events; one that runs away is stopped at 5% + 16 past
/// it, however its chunks are cut (one Specula chunk can carry thousands of tokens).
struct Budget {
    max_tokens: usize,
    bound: usize,
}

impl Budget {
    fn new(max_tokens: usize) -> Self {
        Self { max_tokens, bound: max_tokens.saturating_add(max_tokens / 20).saturating_add(16) }
    }

    /// Room for one more token, or the error that ends the reply (the tokens sent are kept).
    fn admit(&self, outlet: &Outlet) -> Result<(), ErrorInfo> {
        if outlet.tally().tokens < self.bound {
            return Ok(());
        }
        let (bound, asked) = (self.bound, self.max_tokens);
        Err(bad(format!("the remote sent more than {bound} tokens for max_tokens {asked}; the reply was stopped")))
    }
}

fn take_chunk(outlet: &Outlet, chunk: Chunk, ending: &mut Ending, budget: &Budget) -> Result<(), ErrorInfo> {
    if let Some(error) = &chunk.error {
        let message = chunk::error_message(error).unwrap_or_else(|| preview(&error.to_string()));
        return Err(ErrorInfo::new(ErrorCode::RemoteError, format!("the remote failed: {message}")));
    }
    ending.usage = chunk.usage.or(ending.usage);
    if chunk.timings.is_some() {
        ending.timings = chunk.timings;
        ending.kind.get_or_insert(RemoteKind::LlamaCpp);
    }
    let choice = chunk.choices.into_iter().next().unwrap_or_default();
    match chunk.specula {
        Some(extension) => {
            ending.kind = Some(RemoteKind::Specula);
            take_extension(outlet, extension, ending, budget)?;
        }
        None => {
            let delta = choice.delta;
            if let Some(thinking) = delta.reasoning_content.filter(|t| !t.is_empty()) {
                think(outlet, false);
                take_text(outlet, thinking, budget)?;
            }
            if let Some(content) = delta.content.filter(|t| !t.is_empty()) {
                think(outlet, true);
                take_text(outlet, content, budget)?;
            }
        }
    }
    if let Some(name) = choice.finish_reason {
        ending.finish = Some(chunk::finish_reason(&name));
    }
    Ok(())
}

/// Thinking sent apart from the answer: said open before its first text, and closed before
/// the answer's (the reply's first tokens are its thinking, as the engine says of its own).
/// Thinking opens only before any answer: what comes as `reasoning_content` after an answer
/// began is read as more of the answer.
fn think(outlet: &Outlet, answer: bool) {
    let change = {
        let mut tally = outlet.tally();
        let tokens = tally.tokens as u32;
        let opened = Reasoning { tokens, ended: false, ms: 0.0 };
        match tally.reasoning.as_mut() {
            None if !answer && tokens == 0 => {
                tally.reasoning = Some((opened, Instant::now()));
                Some(opened)
            }
            Some((reasoning, started)) if answer && !reasoning.ended => {
                *reasoning = Reasoning { tokens, ended: true, ms: started.elapsed().as_secs_f32() * 1e3 };
                Some(*reasoning)
            }
            _ => None,
        }
    };
    if let Some(reasoning) = change {
        outlet.send(ReplyEvent::Reasoning { reasoning });
    }
}

/// A Specula remote: its engine's events, tokens with their provenance and step figures with
/// the rate measured here; its end gives the statistics only this client cannot measure.
fn take_extension(
    outlet: &Outlet,
    extension: Extension,
    ending: &mut Ending,
    budget: &Budget,
) -> Result<(), ErrorInfo> {
    for event in extension.events() {
        take_event(outlet, event, ending, budget)?;
    }
    Ok(())
}

fn take_event(outlet: &Outlet, event: ReplyEvent, ending: &mut Ending, budget: &Budget) -> Result<(), ErrorInfo> {
    match event {
        ReplyEvent::Tokens { tokens } => {
            for mut token in tokens {
                budget.admit(outlet)?;
                // Alternatives only inform the display, most likely first: past the protocol's
                // limit the rest are dropped, and the token (which is sound) is kept.
                token.alternatives.truncate(MAX_ALTERNATIVES);
                send_token(outlet, token);
            }
        }
        ReplyEvent::Step { mut step } => {
            step.tokens_per_second = outlet.tally().tokens_per_second();
            outlet.send(ReplyEvent::Step { step });
        }
        ReplyEvent::Reasoning { reasoning } => {
            outlet.tally().reasoning = Some((reasoning, Instant::now()));
            outlet.send(ReplyEvent::Reasoning { reasoning });
        }
        event @ (ReplyEvent::Prefill { .. } | ReplyEvent::Trimmed { .. }) => {
            outlet.send(event);
        }
        ReplyEvent::Done { stats, .. } => ending.remote_stats = Some(*stats),
        // Its failure comes as the chunk's error; its start, its history and its tools are its own.
        ReplyEvent::Started { .. }
        | ReplyEvent::Failed { .. }
        | ReplyEvent::Unsaved { .. }
        | ReplyEvent::Tool { .. } => {}
    }
    Ok(())
}

/// Any other remote: each text delta is one token of unknown id, decoded as far as the
/// client can tell by the target alone.
fn take_text(outlet: &Outlet, text: String, budget: &Budget) -> Result<(), ErrorInfo> {
    if text.is_empty() {
        return Ok(());
    }
    budget.admit(outlet)?;
    let token = TokenEvent { id: 0, text, source: Source::Target, p: None, q: None, alternatives: Vec::new() };
    let (generated, rate) = send_token(outlet, token);
    outlet.send(ReplyEvent::Step {
        step: StepEvent {
            k: 0,
            accepted: 0,
            generated,
            tokens_per_second: rate,
            speedup_vs_plain: None,
            plain_ms_per_token: None,
            plain_steps: 0,
            acceptance_rate: None,
        },
    });
    Ok(())
}

/// Send a token and count it under the tally's lock: Stop reads the tally for the reply's
/// text, so that text holds exactly the tokens sent before it. The tokens and rate so far.
fn send_token(outlet: &Outlet, token: TokenEvent) -> (usize, f64) {
    let mut tally = outlet.tally();
    tally.add(&token.text);
    outlet.send(ReplyEvent::Tokens { tokens: vec![token] });
    (tally.tokens, tally.tokens_per_second())
}

/// The reply's end with its statistics: rates and times measured here; token counts and
/// speculative figures as the remote reports them, and none where it reports none.
fn done(outlet: &Outlet, ending: Ending) -> ReplyEvent {
    let tally = outlet.tally();
    let mut stats = tally.stats();
    if let Some(remote) = ending.remote_stats {
        stats.prompt_tokens = remote.prompt_tokens;
        stats.cached_prompt_tokens = remote.cached_prompt_tokens;
        stats.speculative = remote.speculative;
        stats.reasoning = remote.reasoning.or(stats.reasoning);
    }
    if let Some(timings) = ending.timings {
        stats.prompt_tokens = timings.prompt_n + timings.cache_n;
        stats.cached_prompt_tokens = timings.cache_n;
        stats.speculative = llama_cpp_drafts(&timings);
    }
    if let Some(timings) = ending.timings.filter(|t| t.predicted_n > 0) {
        stats.generated_tokens = timings.predicted_n.max(tally.tokens);
    }
    if let Some(usage) = ending.usage {
        stats.prompt_tokens = usage.prompt_tokens;
        stats.generated_tokens = usage.completion_tokens.max(tally.tokens);
    }
    let finish_reason = ending.finish.unwrap_or(FinishReason::EndOfTurn);
    ReplyEvent::Done { finish_reason, text: tally.text.clone(), stats: Box::new(stats) }
}

/// llama-server's draft counts (`-md`, or its n-gram drafters) as the panel's acceptance.
fn llama_cpp_drafts(timings: &Timings) -> Option<SpeculativeStats> {
    let drafted = timings.draft_n.filter(|&n| n > 0)?;
    let accepted = timings.draft_n_accepted.unwrap_or(0);
    Some(SpeculativeStats {
        drafter: "llama.cpp draft".into(),
        drafted,
        accepted,
        acceptance_rate: accepted as f64 / drafted as f64,
        ..Default::default()
    })
}

fn stream_error(e: SseError) -> ErrorInfo {
    match e {
        SseError::LineTooLong(n) => bad(format!("the remote sent a line over {} KiB; stopped reading", n / 1024)),
        SseError::BodyTooLarge(n) => bad(format!("the remote's reply passed {} MiB; stopped reading", n >> 20)),
        SseError::NotUtf8 => bad("the remote sent bytes that are not UTF-8 text".into()),
        SseError::Io(e) => crate::io_error(&e),
    }
}

/// The start of a payload, for an error message (never the whole of a hostile one).
pub(crate) fn preview(text: &str) -> String {
    let mut short: String = text.chars().take(80).collect();
    if short.len() < text.len() {
        short.push('…');
    }
    short
}
