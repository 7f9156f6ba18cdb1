//! Committing tokens to a reply: detokenising, stop rules, the sink, the events kept. Both
//! decoding loops build their replies with it.

use super::{
    check_context, Alternative, CachedModel, FinishReason, Flow, GenerateOptions, Generation, GenerationStats, Source,
    StepEvent, TokenEvent, TokenSink,
};
use crate::error::Result;
use crate::stop::StopStrings;
use crate::tokenizer::{TokenStream, Tokenizer};
use std::time::{Duration, Instant};

/// The reply being built: detokenises, applies stop rules, feeds the sink, keeps the events.
pub(crate) struct Reply<'a> {
    stream: TokenStream<'a>,
    tokenizer: &'a Tokenizer,
    sink: &'a mut dyn TokenSink,
    options: &'a GenerateOptions,
    stops: StopStrings,
    pub context: Vec<u32>,
    pub prompt_len: usize,
    pub tokens: Vec<TokenEvent>,
    pub text: String,
    pub finish: Option<FinishReason>,
    pub decode_started: Instant,
}

impl<'a> Reply<'a> {
    pub fn new(
        tokenizer: &'a Tokenizer,
        prompt: &[u32],
        options: &'a GenerateOptions,
        sink: &'a mut dyn TokenSink,
    ) -> Self {
        Self {
            stream: tokenizer.stream(),
            tokenizer,
            sink,
            options,
            stops: StopStrings::new(options.stop.clone()),
            context: prompt.to_vec(),
            prompt_len: prompt.len(),
            tokens: Vec::new(),
            text: String::new(),
            finish: None,
            decode_started: Instant::now(),
        }
    }

    /// Tokens generated so far: the position of the next one in the reply.
    pub fn position(&self) -> usize {
        self.context.len() - self.prompt_len
    }

    pub fn is_done(&self) -> bool {
        self.finish.is_some()
    }

    /// Add a token to the reply, chosen where the target's distribution was `target`; false
    /// once the reply has ended.
    pub fn commit(&mut self, id: u32, source: Source, target: &[f32], q: Option<f32>) -> Result<bool> {
        if self.is_done() {
            return Ok(false);
        }
        if self.tokenizer.is_stop(id) {
            self.finish = Some(FinishReason::EndOfTurn);
            return Ok(false);
        }
        let text = self.stream.push(id)?;
        let p = target.get(id as usize).copied();
        let alternatives = self.alternatives(target);
        let event = TokenEvent { id, text, source, p, q, alternatives };
        if self.sink.on_token(&event) == Flow::Stop {
            // Its reader did not take it (Stop, a deadline, a reader gone): the reply is what
            // the reader has, and the caches forget this token as a rejected draft.
            self.finish = Some(FinishReason::Cancelled);
            return Ok(false);
        }
        self.context.push(id);
        let checked = self.text.len();
        self.text.push_str(&event.text);
        self.tokens.push(event);
        if let Some(at) = self.stops.find_new(&self.text, checked) {
            self.text.truncate(at);
            self.finish = Some(FinishReason::StopString);
        } else if self.position() >= self.options.max_tokens {
            self.finish = Some(FinishReason::MaxTokens);
        }
        Ok(!self.is_done())
    }

    /// The `options.alternatives` most likely tokens of `target`, most likely first.
    fn alternatives(&self, target: &[f32]) -> Vec<Alternative> {
        let n = self.options.alternatives.min(target.len());
        if n == 0 {
            return Vec::new();
        }
        let mut ids: Vec<u32> = (0..target.len() as u32).collect();
        let by_p = |a: &u32, b: &u32| target[*b as usize].total_cmp(&target[*a as usize]).then(a.cmp(b));
        ids.select_nth_unstable_by(n - 1, by_p);
        ids.truncate(n);
        ids.sort_by(by_p);
        let text = |id: u32| self.tokenizer.decode(&[id]).unwrap_or_default();
        ids.into_iter().map(|id| Alternative { id, text: text(id), p: target[id as usize] }).collect()
    }

    pub fn step(&mut self, step: &StepEvent) {
        if !self.is_done() && self.sink.on_step(step) == Flow::Stop {
            self.finish = Some(FinishReason::Cancelled);
        }
    }

    pub fn decode_elapsed(&self) -> Duration {
        self.decode_started.elapsed()
    }

    pub fn finish(mut self, stats: GenerationStats) -> Result<Generation> {
        // A stop string's text is cut, and a cancelled reply's ends where its reader stopped
        // taking tokens: neither releases what the detokeniser still holds.
        if !matches!(self.finish, Some(FinishReason::StopString | FinishReason::Cancelled)) {
            self.text.push_str(&self.stream.flush()?);
        }
        Ok(Generation {
            text: self.text,
            tokens: self.tokens,
            finish_reason: self.finish.unwrap_or(FinishReason::MaxTokens),
            stats,
        })
    }
}

pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Check the prompt fits and tell the sink the reply begins; false when the sink cancels.
pub(crate) fn start(target: &CachedModel, prompt: &[u32], sink: &mut dyn TokenSink) -> Result<bool> {
    check_context(prompt.len(), target.capacity())?;
    Ok(sink.on_start(prompt.len()) == Flow::Continue)
}

/// Prefill the prompt, leaving its last token to be fed by the first decoding step.
/// Returns the tokens reused from the cache, or `None` when the sink cancelled part-way.
pub(crate) fn prefill_prompt(
    target: &mut CachedModel,
    prompt: &[u32],
    sink: &mut dyn TokenSink,
) -> Result<Option<usize>> {
    let context = &prompt[..prompt.len() - 1];
    let fed = target.prefill_with(context, &mut |done, total| sink.on_prefill(done, total))?;
    // What was not fed was cached: by the turn before, or a chat resumed from the prompt cache.
    Ok(fed.map(|fed| context.len() - fed))
}
