//! A reply whose prompt is fitted to the context by an overflow policy, and which goes on
//! when it fills the context: the chat is fitted again around the reply so far, whose tokens
//! follow the shortened prompt as they were decoded, and decoding resumes there. Each part
//! is an ordinary reply (greedy output stays the target's for the prompt it was given);
//! the sink hears one reply.

use crate::chat::fit::{fit_chat, Fitted};
use crate::chat::{Message, RenderOptions};
use crate::decode::{Flow, GenerateOptions, Generation, StepEvent, TokenEvent, TokenSink};
use crate::error::{Error, Result};
use crate::session::{Decoding, Session};
use crate::thinking::{prompt_opens_thinking, Thinking};
use crate::tokenizer::TokenCount;
use specula_protocol::{FinishReason, Overflow, SpeculativeStats, Trim};

/// What a reply answers.
#[derive(Clone, Copy)]
pub enum ReplyTo<'a> {
    /// A chat, rendered with the target's template; an overflow policy drops whole turns.
    Chat { messages: &'a [Message], tools: &'a [serde_json::Value], render: &'a RenderOptions },
    /// A prompt as tokens; an overflow policy cuts its middle.
    Tokens(&'a [u32]),
}

/// How many of a prompt's last tokens are read for an open `<think>`.
const PROMPT_TAIL: usize = 8;

/// Put where tokens were cut from the middle of a prompt, so the model sees a gap.
pub const CUT_MARKER: &str = "\n\n[…]\n\n";

impl Session {
    /// A reply to `to`, fitted to the context by `overflow` (see [`Overflow`]): the prompt
    /// leaves room for `max_tokens` (at most a quarter of the context), and a reply that fills
    /// the context goes on after the chat is fitted again, unless the policy is `stop`.
    pub fn reply(
        &mut self,
        to: ReplyTo,
        overflow: Overflow,
        options: &GenerateOptions,
        decoding: Decoding,
        sink: &mut dyn TokenSink,
    ) -> Result<Generation> {
        let capacity = self.target.model.capacity();
        let room = options.max_tokens.clamp(1, (capacity / 4).max(1));
        if overflow == Overflow::Stop {
            self.refuse_a_message_past_the_context(to, capacity, room)?;
        }
        let marker = self.target.tokenizer.encode_literal(CUT_MARKER)?;
        let first = self.fit(to, overflow, capacity.saturating_sub(room), &marker, &[])?;
        // A chat reply may think first; a prompt given as tokens is continued as it is.
        if !matches!(to, ReplyTo::Chat { .. }) {
            return self.reply_fitted(to, overflow, first, options, decoding, sink);
        }
        let tail = &first.tokens[first.tokens.len().saturating_sub(PROMPT_TAIL)..];
        let opened = prompt_opens_thinking(&self.target.tokenizer.decode(tail)?);
        let mut thinking = Thinking::new(sink, opened);
        let mut reply = self.reply_fitted(to, overflow, first, options, decoding, &mut thinking)?;
        reply.stats.reasoning = thinking.finish();
        Ok(reply)
    }

    /// [`Self::reply`] once its prompt is `first`.
    fn reply_fitted(
        &mut self,
        to: ReplyTo,
        overflow: Overflow,
        first: Fitted,
        options: &GenerateOptions,
        decoding: Decoding,
        sink: &mut dyn TokenSink,
    ) -> Result<Generation> {
        let capacity = self.target.model.capacity();
        let marker = self.target.tokenizer.encode_literal(CUT_MARKER)?;
        if let Some(trim) = &first.trim {
            if sink.on_trim(trim) == Flow::Stop {
                return Ok(Generation::cancelled(first.tokens.len()));
            }
        }
        let mut reply = self.generate(&first.tokens, options, decoding, sink)?;
        reply.stats.trimmed = first.trim;
        // A constrained reply (a JSON schema, a tool call) cannot go on in a new part: its
        // grammar would start again partway through. It ends as full.
        let may_continue = overflow != Overflow::Stop && options.grammar.is_none();
        while reply.finish_reason == FinishReason::ContextFull && may_continue {
            let left = options.max_tokens.saturating_sub(reply.tokens.len());
            let so_far: Vec<u32> = reply.tokens.iter().map(|t| t.id).collect();
            let next = self.fit(to, overflow, capacity - capacity / 4, &marker, &so_far)?;
            // Nothing more can leave the view: the reply ends as full.
            if left == 0 || next.tokens.len() + 1 >= capacity || next.trim == reply.stats.trimmed {
                break;
            }
            let Some(trim) = next.trim else { break };
            if sink.on_trim(&trim) == Flow::Stop {
                reply.finish_reason = FinishReason::Cancelled;
                break;
            }
            // Positions start again in the new part: its draws get their own noise.
            let mut more_options = GenerateOptions { max_tokens: left, ..options.clone() };
            let part = (reply.tokens.len() as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            more_options.sampling.seed = options.sampling.seed ^ part;
            let more = self.generate(&next.tokens, &more_options, decoding, &mut Continuing(sink))?;
            reply = joined(reply, more);
            reply.stats.trimmed = next.trim;
        }
        Ok(reply)
    }

    /// Refuse, before the prompt is rendered and tokenized whole, a chat one of whose messages
    /// is longer than the context by itself (under `stop`, where nothing would be cut): a 7.5
    /// MiB message to the server took it from 583 MiB to a 2,164 MiB peak to be refused. Each
    /// long message is counted in pieces that stop past the context.
    fn refuse_a_message_past_the_context(&self, to: ReplyTo, capacity: usize, room: usize) -> Result<()> {
        let ReplyTo::Chat { messages, .. } = to else { return Ok(()) };
        for message in messages.iter().filter(|m| m.content.len() > crate::tokenizer::COUNT_PIECE) {
            if let TokenCount::MoreThan(counted) = self.target.tokenizer.count_within(&message.content, capacity)? {
                return Err(Error::ContextOverflow { prompt_tokens: counted, context: capacity, reserve: room });
            }
        }
        Ok(())
    }

    /// The prompt of `to` in `budget` tokens, followed by `so_far` (a reply being continued).
    fn fit(&self, to: ReplyTo, overflow: Overflow, budget: usize, marker: &[u32], so_far: &[u32]) -> Result<Fitted> {
        let mut render = |kept: &[Message]| -> Result<Vec<u32>> {
            let mut tokens = match to {
                ReplyTo::Chat { tools, render, .. } => self.target.chat_prompt_with(kept, tools, render)?,
                ReplyTo::Tokens(tokens) => tokens.to_vec(),
            };
            tokens.extend_from_slice(so_far);
            Ok(tokens)
        };
        let messages = match to {
            ReplyTo::Chat { messages, .. } => messages,
            ReplyTo::Tokens(_) => &[],
        };
        fit_chat(messages, overflow, budget, marker, &mut render)
    }
}

/// The sink of a reply's later part: the reply has started already.
struct Continuing<'a>(&'a mut dyn TokenSink);

impl TokenSink for Continuing<'_> {
    fn on_prefill(&mut self, done: usize, total: usize) -> Flow {
        self.0.on_prefill(done, total)
    }
    fn on_token(&mut self, token: &TokenEvent) -> Flow {
        self.0.on_token(token)
    }
    fn on_step(&mut self, step: &StepEvent) -> Flow {
        self.0.on_step(step)
    }
    fn on_reasoning(&mut self, reasoning: &specula_protocol::Reasoning) -> Flow {
        self.0.on_reasoning(reasoning)
    }
}

/// One reply of two parts: the tokens and text of both, the figures summed.
fn joined(first: Generation, more: Generation) -> Generation {
    let mut stats = first.stats;
    stats.generated_tokens += more.stats.generated_tokens;
    stats.prefill_ms += more.stats.prefill_ms;
    stats.decode_ms += more.stats.decode_ms;
    stats.tokens_per_second = stats.generated_tokens as f64 / (stats.decode_ms / 1000.0).max(1e-9);
    stats.speculative = match (stats.speculative, more.stats.speculative) {
        (Some(a), Some(b)) => Some(joined_speculative(a, b)),
        (a, b) => b.or(a),
    };
    let mut tokens = first.tokens;
    tokens.extend(more.tokens);
    Generation { text: first.text + &more.text, tokens, finish_reason: more.finish_reason, stats }
}

/// Counts summed and their rates recomputed; the measured figures are the later part's.
fn joined_speculative(a: SpeculativeStats, b: SpeculativeStats) -> SpeculativeStats {
    let drafted = a.drafted + b.drafted;
    let accepted = a.accepted + b.accepted;
    let passes = a.target_passes + b.target_passes;
    let tokens = a.tokens_per_pass * a.target_passes as f64 + b.tokens_per_pass * b.target_passes as f64;
    SpeculativeStats {
        drafted,
        accepted,
        copied: a.copied + b.copied,
        copied_accepted: a.copied_accepted + b.copied_accepted,
        acceptance_rate: accepted as f64 / drafted.max(1) as f64,
        target_passes: passes,
        tokens_per_pass: tokens / passes.max(1) as f64,
        draft_ms: a.draft_ms + b.draft_ms,
        verify_ms: a.verify_ms + b.verify_ms,
        k_min: a.k_min.min(b.k_min),
        k_max: a.k_max.max(b.k_max),
        ..b
    }
}

/// `trim`'s words for a person: "3 earlier messages and 1,024 tokens are out of the model's view".
pub fn describe_trim(trim: &Trim) -> String {
    let mut parts = Vec::new();
    if trim.messages > 0 {
        parts.push(format!("{} earlier message{}", trim.messages, if trim.messages == 1 { "" } else { "s" }));
    }
    if trim.tokens > 0 {
        parts.push(format!("{} tokens from the middle of the prompt", trim.tokens));
    }
    format!("{} left out of the model's view to fit the context", parts.join(" and "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trim_reads_as_a_sentence() {
        let trim = Trim { first: 2, messages: 3, tokens: 0 };
        assert_eq!(describe_trim(&trim), "3 earlier messages left out of the model's view to fit the context");
        let both = Trim { first: 2, messages: 1, tokens: 940 };
        assert_eq!(
            describe_trim(&both),
            "1 earlier message and 940 tokens from the middle of the prompt left out of the model's view to fit the context"
        );
    }
}
