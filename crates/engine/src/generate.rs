//! Plain decoding, the reference every speculative reply is measured against, and the pieces
//! both loops share: the cached model, the sink, and committing tokens to a reply.

use crate::error::{Error, Result};
use crate::models::CausalLm;
use crate::sampling::{Sampler, SamplingParams};
use crate::stop::StopStrings;
use crate::tokenizer::{TokenStream, Tokenizer};
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// Where a token came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// Plain decoding, no draft.
    Target,
    /// A draft token the target kept.
    Accepted,
    /// Drawn from the target at the first rejection.
    Resampled,
    /// Drawn from the target after every draft was accepted.
    Bonus,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenEvent {
    pub id: u32,
    /// The text this token completes; empty while a UTF-8 character is still partial.
    pub text: String,
    pub source: Source,
    /// The target's probability of this token.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p: Option<f32>,
    /// The draft's probability of this token (drafted and resampled tokens).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub q: Option<f32>,
    /// The target's most likely tokens at this position, most likely first, when
    /// [`GenerateOptions::alternatives`] asks for them (OpenAI's `top_logprobs`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub alternatives: Vec<Alternative>,
}

/// A token the target could have chosen, with its probability.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Alternative {
    pub id: u32,
    /// The token's own text (a byte fragment of a character is shown lossily).
    pub text: String,
    pub p: f32,
}

/// Live figures after one decoding step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepEvent {
    /// Draft length of this step (0: plain).
    pub k: usize,
    pub accepted: usize,
    pub generated: usize,
    pub tokens_per_second: f64,
    /// The reply's rate over plain decoding's, timed by plain steps taken in this reply (see
    /// [`crate::speculative::PlainReference`]); None until enough were timed, and always in
    /// plain decoding, which has nothing to compare.
    pub speedup_vs_plain: Option<f64>,
    /// What that compares against: the median plain step of this reply, and how many there were.
    #[serde(default)]
    pub plain_ms_per_token: Option<f64>,
    #[serde(default)]
    pub plain_steps: usize,
    pub acceptance_rate: Option<f64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Continue,
    Stop,
}

/// Where output goes: the CLI prints, the app forwards to a channel, tests collect.
/// Returning [`Flow::Stop`] from any method is how cancellation reaches the loop, prefill
/// included.
pub trait TokenSink {
    /// The prompt fits: `prompt_tokens` will be read, then the reply begins.
    fn on_start(&mut self, _prompt_tokens: usize) -> Flow {
        Flow::Continue
    }
    /// `done` of the `total` prompt tokens that had to be fed are in the cache. Asked between
    /// prefill chunks, so a long prompt can be abandoned part-way.
    fn on_prefill(&mut self, _done: usize, _total: usize) -> Flow {
        Flow::Continue
    }
    fn on_token(&mut self, token: &TokenEvent) -> Flow;
    fn on_step(&mut self, _step: &StepEvent) -> Flow {
        Flow::Continue
    }
}

/// Prompt tokens fed per target pass during prefill: between chunks the sink may cancel. Long
/// enough that the multi-row kernels run full tiles, short enough that a cancel is heard
/// within a fraction of a second on the CPU.
pub const PREFILL_CHUNK: usize = 128;

/// A sink that only keeps going; the reply is in the returned [`Generation`].
pub struct NullSink;

impl TokenSink for NullSink {
    fn on_token(&mut self, _: &TokenEvent) -> Flow {
        Flow::Continue
    }
}

impl<F: FnMut(&TokenEvent) -> Flow> TokenSink for F {
    fn on_token(&mut self, token: &TokenEvent) -> Flow {
        self(token)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// End-of-turn or end-of-sequence token.
    EndOfTurn,
    StopString,
    MaxTokens,
    ContextFull,
    Cancelled,
}

impl FinishReason {
    /// The one name every front-end shows: OpenAI's `stop` and `length`, and `cancelled`
    /// for a reply stopped by its client, its deadline or the Stop button.
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::EndOfTurn | FinishReason::StopString => "stop",
            FinishReason::MaxTokens | FinishReason::ContextFull => "length",
            FinishReason::Cancelled => "cancelled",
        }
    }
}

/// The most alternatives a token event lists (OpenAI's limit for `top_logprobs`).
pub const MAX_ALTERNATIVES: usize = 20;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GenerateOptions {
    pub max_tokens: usize,
    pub sampling: SamplingParams,
    /// Stop when the reply contains one of these; the reply ends before it.
    pub stop: Vec<String>,
    /// How many of the target's most likely tokens each token event lists (0 to
    /// [`MAX_ALTERNATIVES`]).
    #[serde(default)]
    pub alternatives: usize,
    /// What the reply must match (a JSON schema); the reply ends when it is complete.
    #[serde(default)]
    pub grammar: Option<crate::constraint::Grammar>,
}

impl GenerateOptions {
    /// Options a reply can be made with: at least one token, stop strings within bounds
    /// ([`crate::stop::StopStrings::check`]). The grammar is not compiled here: the reply
    /// compiles it against the vocabulary before it starts, and a server that wants the
    /// error earlier calls [`crate::constraint::Grammar::validate`] off its async threads.
    pub fn validate(&self) -> Result<()> {
        if self.max_tokens == 0 {
            return Err(Error::InvalidSetting("max_tokens must be at least 1".into()));
        }
        crate::stop::StopStrings::check(&self.stop)?;
        if self.alternatives > MAX_ALTERNATIVES {
            let n = self.alternatives;
            return Err(Error::InvalidSetting(format!("{n} alternatives per token: at most {MAX_ALTERNATIVES}")));
        }
        self.sampling.validate()
    }
}

impl Default for GenerateOptions {
    fn default() -> Self {
        Self { max_tokens: 512, sampling: SamplingParams::default(), stop: Vec::new(), alternatives: 0, grammar: None }
    }
}

/// Speculative figures of one reply.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SpeculativeStats {
    pub drafter: String,
    pub drafted: usize,
    pub accepted: usize,
    pub acceptance_rate: f64,
    pub target_passes: usize,
    pub tokens_per_pass: f64,
    pub draft_ms: f64,
    pub verify_ms: f64,
    /// The median plain step timed in this reply, what `speedup_vs_plain` compares against;
    /// None while fewer than [`crate::speculative::reference::MIN_PLAIN_SAMPLES`] were timed.
    pub plain_ms_per_token: Option<f64>,
    /// Plain steps timed in this reply.
    #[serde(default)]
    pub plain_steps: usize,
    pub speedup_vs_plain: Option<f64>,
    /// Leviathan et al.'s expected speedup from the measured acceptance and cost ratio.
    pub predicted_speedup: Option<f64>,
    /// Draft/target cost ratio per token.
    pub cost_ratio: Option<f64>,
    pub k_min: usize,
    pub k_max: usize,
    pub k_mean: f64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GenerationStats {
    pub prompt_tokens: usize,
    /// Prompt tokens whose cache was reused from the previous turn.
    pub cached_prompt_tokens: usize,
    pub generated_tokens: usize,
    pub prefill_ms: f64,
    pub decode_ms: f64,
    pub tokens_per_second: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub speculative: Option<SpeculativeStats>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Generation {
    pub text: String,
    pub tokens: Vec<TokenEvent>,
    pub finish_reason: FinishReason,
    pub stats: GenerationStats,
}

impl Generation {
    /// A reply cancelled before its first token (while queued or reading the prompt).
    pub fn cancelled(prompt_tokens: usize) -> Self {
        Self {
            text: String::new(),
            tokens: Vec::new(),
            finish_reason: FinishReason::Cancelled,
            stats: GenerationStats { prompt_tokens, ..Default::default() },
        }
    }
}

/// Asked between prefill chunks with (tokens fed, tokens to feed); [`Flow::Stop`] abandons.
pub type Progress<'a> = &'a mut dyn FnMut(usize, usize) -> Flow;

/// A model and the token ids its KV cache holds, so that a new prompt reuses the longest
/// cached prefix (the previous turns of a chat) and a rollback keeps both in step.
pub struct CachedModel {
    model: Box<dyn CausalLm>,
    ids: Vec<u32>,
}

impl CachedModel {
    pub fn new(model: Box<dyn CausalLm>) -> Self {
        Self { model, ids: Vec::new() }
    }

    pub fn model(&self) -> &dyn CausalLm {
        self.model.as_ref()
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    pub fn capacity(&self) -> usize {
        self.model.capacity()
    }

    pub fn cached_ids(&self) -> &[u32] {
        &self.ids
    }

    pub fn truncate(&mut self, len: usize) {
        self.ids.truncate(len);
        self.model.truncate(self.ids.len());
    }

    /// Score only `ids` from now on (`None`: every token); whether the model could.
    pub fn restrict_output(&mut self, ids: Option<&[u32]>) -> Result<bool> {
        self.model.restrict_output(ids)
    }

    /// Make the cache hold exactly `context`, feeding only what it lacks; the logits after its
    /// last token. The last token is fed again when the whole context was already cached.
    pub fn advance_to(&mut self, context: &[u32]) -> Result<Vec<f32>> {
        let keep = common_prefix(&self.ids, context).min(context.len().saturating_sub(1));
        self.truncate(keep);
        let logits = self.model.forward_last(&context[keep..])?;
        self.ids.extend_from_slice(&context[keep..]);
        Ok(logits.squeeze(0)?.to_vec1()?)
    }

    /// Make the cache hold `context` (no logits needed): prompt prefill. Returns how many
    /// tokens it fed (those not already cached).
    pub fn prefill(&mut self, context: &[u32]) -> Result<usize> {
        Ok(self.prefill_with(context, &mut |_, _| Flow::Continue)?.unwrap_or(0))
    }

    /// [`Self::prefill`] in chunks of [`PREFILL_CHUNK`], asking `progress` after each whether
    /// to go on. `None` when it was told to stop; the cache then holds the chunks fed so far
    /// (a later prompt with the same start reuses them).
    pub fn prefill_with(&mut self, context: &[u32], progress: Progress) -> Result<Option<usize>> {
        let keep = common_prefix(&self.ids, context);
        self.truncate(keep);
        let total = context.len() - keep;
        for chunk in context[keep..].chunks(PREFILL_CHUNK) {
            self.model.forward_last(chunk)?;
            self.ids.extend_from_slice(chunk);
            if progress(self.ids.len() - keep, total) == Flow::Stop {
                return Ok(None);
            }
        }
        Ok(Some(total))
    }

    /// Feed `tokens` and return the logits of every one of them, `[n][vocab]`.
    pub fn forward_all(&mut self, tokens: &[u32]) -> Result<Vec<Vec<f32>>> {
        let logits = self.model.forward(tokens)?;
        self.ids.extend_from_slice(tokens);
        Ok(logits.to_vec2()?)
    }
}

pub fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Check the prompt fits with room to generate at least one token.
pub fn check_context(prompt_tokens: usize, capacity: usize) -> Result<()> {
    if prompt_tokens == 0 {
        return Err(Error::InvalidSetting("the prompt is empty".into()));
    }
    if prompt_tokens >= capacity {
        return Err(Error::ContextOverflow { prompt_tokens, context: capacity, reserve: 1 });
    }
    Ok(())
}

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
        self.context.push(id);
        let text = self.stream.push(id)?;
        let checked = self.text.len();
        self.text.push_str(&text);
        let p = target.get(id as usize).copied();
        let alternatives = self.alternatives(target);
        let event = TokenEvent { id, text, source, p, q, alternatives };
        let flow = self.sink.on_token(&event);
        self.tokens.push(event);
        if let Some(at) = self.stops.find_new(&self.text, checked) {
            self.text.truncate(at);
            self.finish = Some(FinishReason::StopString);
        } else if flow == Flow::Stop {
            self.finish = Some(FinishReason::Cancelled);
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
        if self.finish != Some(FinishReason::StopString) {
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
    let reused = common_prefix(target.cached_ids(), prompt).min(prompt.len() - 1);
    let fed = target.prefill_with(&prompt[..prompt.len() - 1], &mut |done, total| sink.on_prefill(done, total))?;
    Ok(fed.map(|_| reused))
}

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
    };
    reply.finish(stats)
}
