//! Plain decoding: one target pass per token, the reference every speculative reply is
//! measured against.

use super::reply::{ms, prefill_prompt, start, Reply};
use super::{CachedModel, FinishReason, GenerateOptions, Generation, GenerationStats, Source, StepEvent, TokenSink};
use crate::error::Result;
use crate::sampling::Sampler;
use crate::tokenizer::Tokenizer;
use std::time::Instant;

/// Tokens between the step events of plain decoding: often enough for a live rate and for a
/// front-end that saves the reply at each step, rarely enough to cost nothing.
pub const PLAIN_STEP_EVERY: usize = 8;

/// Plain decoding's live figures: its rate, and no speedup, since nothing drafts.
fn plain_step_event(reply: &Reply) -> StepEvent {
    let generated = reply.tokens.len();
    StepEvent {
        k: 0,
        accepted: 0,
        generated,
        tokens_per_second: generated as f64 / reply.decode_elapsed().as_secs_f64().max(1e-9),
        speedup_vs_plain: None,
        plain_ms_per_token: None,
        plain_steps: 0,
        acceptance_rate: None,
    }
}

/// Plain decoding: one target pass per token. The reference for every exactness test.
pub fn generate_plain(
    target: &mut CachedModel,
    tokenizer: &Tokenizer,
    prompt: &[u32],
    options: &GenerateOptions,
    sink: &mut dyn TokenSink,
) -> Result<Generation> {
    options.validate()?;
    // The grammar is compiled against the vocabulary before the reply is said to start: a
    // schema the model's tokens cannot spell is the request's error, not a broken stream.
    let mut sampler = Sampler::for_reply(options, tokenizer)?;
    if !start(target, prompt, sink)? {
        return Ok(Generation::cancelled(prompt.len()));
    }
    let started = Instant::now();
    let Some(cached) = prefill_prompt(target, prompt, sink)? else {
        return Ok(Generation::cancelled(prompt.len()));
    };
    let prefill = started.elapsed();
    let mut reply = Reply::new(tokenizer, prompt, options, sink);
    while !reply.is_done() {
        if reply.context.len() >= target.capacity() {
            reply.finish = Some(FinishReason::ContextFull);
            break;
        }
        let logits = target.advance_to(&reply.context)?;
        let choice = sampler.choose(&logits, &reply.context, reply.position())?;
        reply.commit(choice.token, Source::Target, &choice.probs, None)?;
        if reply.tokens.len().is_multiple_of(PLAIN_STEP_EVERY) {
            let step = plain_step_event(&reply);
            reply.step(&step);
        }
    }
    let decode = reply.decode_elapsed();
    let generated = reply.tokens.len();
    let stats = GenerationStats {
        prompt_tokens: prompt.len(),
        cached_prompt_tokens: cached,
        generated_tokens: generated,
        prefill_ms: ms(prefill),
        decode_ms: ms(decode),
        tokens_per_second: generated as f64 / decode.as_secs_f64().max(1e-9),
        speculative: None,
        trimmed: None,
        reasoning: None,
    };
    reply.finish(stats)
}
