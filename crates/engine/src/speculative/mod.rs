//! Speculative decoding: draft k tokens, verify them in one target pass, keep the prefix the
//! target agrees with, resample the first rejected position, roll both caches back.

pub mod accept;
pub mod adaptive;
pub mod combined;
pub mod drafter;
pub mod history;
pub mod lookup;
pub mod reference;

pub use accept::{accept_matching, accept_sampled, Outcome, SampledAccept};
pub use adaptive::{CostModel, KSetting, MAX_K};
pub use combined::Combined;
pub use drafter::{Draft, DraftModel, Drafter};
pub use history::History;
pub use lookup::PromptLookup;
pub use reference::PlainReference;

use crate::decode::{
    ms, prefill_prompt, start, CachedModel, FinishReason, Flow, GenerateOptions, Generation, GenerationStats, Reply,
    Source, SpeculativeStats, StepEvent, TokenSink,
};
use crate::error::Result;
use crate::sampling::{gumbel_token, Mode, Sampler, TokenDistribution};
use crate::tokenizer::Tokenizer;
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct SpeculativeOptions {
    pub k: KSetting,
    /// The sample-mode rule; [`accept_sampled`] unless a test swaps in a broken one.
    pub sampled_accept: SampledAccept,
}

impl Default for SpeculativeOptions {
    fn default() -> Self {
        Self { k: KSetting::default(), sampled_accept: accept_sampled }
    }
}

pub use crate::tokenizer::{check_pair, check_vocabularies};

/// Running totals of a reply.
#[derive(Default)]
struct Totals {
    drafted: usize,
    accepted: usize,
    copied: usize,
    copied_accepted: usize,
    passes: usize,
    draft_ms: f64,
    verify_ms: f64,
    k_min: Option<usize>,
    k_max: usize,
    k_sum: usize,
    drafting_steps: usize,
}

/// A reply's drafting side: who proposes, what auto k knows of the costs, and the figures the
/// reply's steps add up to.
struct Speculation<'a> {
    drafter: &'a mut dyn Drafter,
    spec: &'a SpeculativeOptions,
    costs: &'a mut CostModel,
    totals: Totals,
    plain: PlainReference,
    /// Replies whose passes share this one's step now (1: alone). While this reply drafts,
    /// each of the others waits on its draft passes, so auto k prices a draft at that many
    /// times its own time: as the batch grows, a draft must buy more to pay, and k falls.
    sharing: f64,
}

/// Who drafts a step and how far.
struct StepPlan {
    /// Drafts asked for; a drafter may propose fewer.
    k: usize,
    /// The copy arm drafts the step, from `copy`, which continues a match of `matched` tokens.
    copying: bool,
    copy: Vec<u32>,
    matched: usize,
}

/// A step's drafts, and what catching the drafter up and drafting took, timed apart.
struct Drafted {
    drafts: Vec<Draft>,
    catch_up_ms: f64,
    draft_ms: f64,
}

/// What a step measured, for its report.
#[derive(Clone, Copy)]
struct StepFigures {
    /// When the step began (its room and plan included): its wall time runs to the report.
    started: Instant,
    /// Drafts proposed, and how many of them the target kept.
    k: usize,
    accepted: usize,
    /// Tokens the step committed.
    committed: usize,
    catch_up_ms: f64,
    draft_ms: f64,
    verify_ms: f64,
}

/// Generate a reply with `drafter` proposing and `target` verifying. The reply is exactly the
/// target's: the same tokens as [`crate::generate_plain`] in greedy and reproducible modes,
/// the same distribution in sample mode.
///
/// `costs` carries what earlier replies measured with the same target and drafter (a fresh
/// [`CostModel`] knows nothing), so auto need not pay again to learn that drafting does not pay.
#[allow(clippy::too_many_arguments)]
pub fn generate_speculative(
    target: &mut CachedModel,
    drafter: &mut dyn Drafter,
    tokenizer: &Tokenizer,
    prompt: &[u32],
    options: &GenerateOptions,
    spec: &SpeculativeOptions,
    costs: &mut CostModel,
    sink: &mut dyn TokenSink,
) -> Result<Generation> {
    options.validate()?;
    // The grammar is compiled against the vocabulary before the reply is said to start: a
    // schema the model's tokens cannot spell is the request's error, not a broken stream.
    let mut sampler = Sampler::for_reply(options, tokenizer)?;
    if !start(target, prompt, sink)? {
        return Ok(Generation::cancelled(prompt.len()));
    }
    costs.new_reply();
    let started = Instant::now();
    let Some(cached) = prefill_target_and_drafter(target, drafter, prompt, costs, sink)? else {
        return Ok(Generation::cancelled(prompt.len()));
    };
    let prefill = started.elapsed();
    let mut reply = Reply::new(tokenizer, prompt, options, sink);
    let mut run =
        Speculation { drafter, spec, costs, totals: Totals::default(), plain: PlainReference::default(), sharing: 1.0 };

    while !reply.is_done() {
        let step_started = Instant::now();
        let committed_before = reply.tokens.len();
        let room = target.capacity().saturating_sub(reply.context.len());
        if room == 0 {
            reply.finish = Some(FinishReason::ContextFull);
            break;
        }
        run.sharing = target.sharing() as f64;
        run.costs.set_sharing(run.sharing);
        let plan = run.plan(&reply, room, options.max_tokens);
        let Drafted { drafts, catch_up_ms, draft_ms } = run.draft(&reply, &plan, &mut sampler)?;
        let (logits, verify_ms) = target_pass(target, &reply.context, &drafts)?;
        let (outcome, p) = verify(&mut sampler, &reply.context, reply.position(), &drafts, &logits, spec)?;
        commit(&mut reply, &drafts, &outcome, &p)?;
        rollback(target, run.drafter, reply.context.len());
        let committed = reply.tokens.len() - committed_before;
        let (k, accepted) = (drafts.len(), outcome.accepted);
        let figures = StepFigures { started: step_started, k, accepted, committed, catch_up_ms, draft_ms, verify_ms };
        run.report(&mut reply, &plan, figures);
    }
    run.finish(reply, prompt.len(), cached, prefill)
}

/// Prefill the target (timing a plain step on the way), then the drafter. The prompt tokens
/// the target had cached; `None` when the sink cancelled.
fn prefill_target_and_drafter(
    target: &mut CachedModel,
    drafter: &mut dyn Drafter,
    prompt: &[u32],
    costs: &mut CostModel,
    sink: &mut dyn TokenSink,
) -> Result<Option<usize>> {
    let Some(cached) = prefill_measuring_plain_step(target, prompt, costs, sink)? else {
        return Ok(None);
    };
    let t = Instant::now();
    // The draft's prefill is cancellable too; progress stays at the target's 100%.
    let total = prompt.len() - 1 - cached;
    let Some(fed) = drafter.prefill(prompt, &mut |_, _| sink.on_prefill(total, total))? else {
        return Ok(None);
    };
    costs.record_catch_up(fed, ms(t.elapsed()));
    Ok(Some(cached))
}

impl Speculation<'_> {
    /// Who drafts the next step and how far: no further than the `room` left in the context
    /// and the reply's token budget allow.
    fn plan(&mut self, reply: &Reply, room: usize, max_tokens: usize) -> StepPlan {
        let budget = max_tokens.saturating_sub(reply.position());
        let limit = |k: usize| k.min(room - 1).min(budget.saturating_sub(1));
        let backlog = self.drafter.backlog(reply.context.len());
        // A plain step owed to the speedup figure is taken whatever k would be: it commits the
        // token the target picks, as any step does.
        let owed = self.plain.owed();
        let model_k = if owed { 0 } else { self.costs.next_k(self.spec.k, backlog) };
        // A drafter with a free second source offers copies; the better arm drafts the step.
        let copy = if owed { None } else { self.drafter.copy(&reply.context, MAX_K) };
        let (copy, matched) = copy.map_or((Vec::new(), 0), |found| (found.tokens, found.matched));
        let copy_k = limit(self.costs.copy_k(self.spec.k, copy.len(), matched, model_k));
        let copying = copy_k > 0;
        let k = if copying { copy_k } else { limit(model_k) };
        StepPlan { k, copying, copy, matched }
    }

    /// Draft the step as planned, after catching the drafter up on steps taken without it
    /// (timed apart).
    fn draft(&mut self, reply: &Reply, plan: &StepPlan, sampler: &mut Sampler) -> Result<Drafted> {
        let t = Instant::now();
        let fed = if plan.k > 0 && !plan.copying { self.drafter.catch_up(&reply.context)? } else { 0 };
        let catch_up_ms = ms(t.elapsed());
        self.costs.record_catch_up(fed, catch_up_ms * self.sharing);
        let t = Instant::now();
        let drafts = match (plan.copying, plan.k > 0) {
            (true, _) => plan.copy[..plan.k].iter().map(|&token| Draft::copied(token)).collect(),
            (false, true) => self.drafter.propose(&reply.context, plan.k, sampler, reply.position())?,
            (false, false) => Vec::new(),
        };
        Ok(Drafted { drafts, catch_up_ms, draft_ms: ms(t.elapsed()) })
    }

    /// What the step accepted, and what auto k, the copy arm and the speedup figure learn from
    /// it; the step event shows it.
    fn report(&mut self, reply: &mut Reply, plan: &StepPlan, step: StepFigures) {
        let StepFigures { started, k, accepted, committed, catch_up_ms, draft_ms, verify_ms } = step;
        let copying = plan.copying;
        // The target's pass was over [last, d1 .. dk].
        self.costs.record_verify(k + 1, verify_ms);
        let step_ms = ms(started.elapsed());
        tracing::trace!(k, copying, accepted, draft_ms, verify_ms, step_ms, "step");
        if copying {
            // The copy arm's own evidence; the model arm's realized rate is the model's alone.
            self.costs.record_copy(k, accepted, plan.matched);
        } else {
            self.costs.record_draft(k, accepted, draft_ms * self.sharing);
            // The catch-up is a one-off that auto priced before it probed (`repays_catch_up`);
            // counted in the probe's first step, it read as a loss of twice plain's time and
            // stopped every probe that followed a plain stretch, whatever its acceptance.
            // What the others waited on its drafts counts too (`sharing`).
            self.costs.record_step(k, committed, step_ms - catch_up_ms + (self.sharing - 1.0) * draft_ms);
        }
        self.plain.record_step(k, committed, step_ms);
        let totals = &mut self.totals;
        totals.record(k, accepted, catch_up_ms + draft_ms, verify_ms);
        if copying {
            (totals.copied, totals.copied_accepted) = (totals.copied + k, totals.copied_accepted + accepted);
        }
        let event = step_event(reply, &self.plain, &self.totals, k, accepted);
        reply.step(&event);
    }

    /// The finished reply, with its figures.
    fn finish(self, reply: Reply, prompt_tokens: usize, cached: usize, prefill: Duration) -> Result<Generation> {
        let decode = reply.decode_elapsed();
        let generated = reply.tokens.len();
        let stats = GenerationStats {
            prompt_tokens,
            cached_prompt_tokens: cached,
            generated_tokens: generated,
            prefill_ms: ms(prefill),
            decode_ms: ms(decode),
            tokens_per_second: generated as f64 / decode.as_secs_f64().max(1e-9),
            speculative: Some(self.totals.summary(self.drafter.name(), self.costs, &self.plain, generated, ms(decode))),
            trimmed: None,
            reasoning: None,
        };
        reply.finish(stats)
    }
}

/// Verify, first half: one target pass over [last, d1 .. dk], timed; its logits at the k+1
/// positions.
fn target_pass(target: &mut CachedModel, context: &[u32], drafts: &[Draft]) -> Result<(Vec<Vec<f32>>, f64)> {
    let t = Instant::now();
    let n_past = context.len() - 1;
    target.truncate(n_past);
    let mut input = vec![context[n_past]];
    input.extend(drafts.iter().map(|d| d.token));
    let logits = target.forward_all(&input)?;
    Ok((logits, ms(t.elapsed())))
}

/// Commit the drafts the target kept (until the reply ends), then the token it picked after
/// them.
fn commit(reply: &mut Reply, drafts: &[Draft], outcome: &Outcome, p: &[Vec<f32>]) -> Result<()> {
    for (draft, p_i) in drafts.iter().zip(p).take(outcome.accepted) {
        let source = if draft.is_copy() { Source::Copied } else { Source::Accepted };
        if !reply.commit(draft.token, source, p_i, Some(draft.prob()))? {
            break;
        }
    }
    let source = if drafts.is_empty() { Source::Target } else { outcome.next_source };
    let q_next = drafts.get(outcome.accepted).map(|d| d.q(outcome.next));
    reply.commit(outcome.next, source, &p[outcome.accepted], q_next)?;
    Ok(())
}

/// Both caches keep only committed tokens (the newest is fed next step).
fn rollback(target: &mut CachedModel, drafter: &mut dyn Drafter, context_len: usize) {
    let n_past = context_len - 1;
    target.truncate(n_past);
    drafter.rollback(n_past);
    debug_assert_eq!(target.len(), n_past);
    debug_assert!(drafter.cached_len() <= n_past);
}

/// Prefill the prompt but its last token, feeding the one before that alone and timing it:
/// a single-token target pass at this context, measured for free, on which auto's first choice
/// of k stands. (The speedup figure times whole plain steps instead: [`PlainReference`].) `None` when the sink cancelled.
fn prefill_measuring_plain_step(
    target: &mut CachedModel,
    prompt: &[u32],
    costs: &mut CostModel,
    sink: &mut dyn TokenSink,
) -> Result<Option<usize>> {
    let n = prompt.len();
    if n < 2 {
        return prefill_prompt(target, prompt, sink);
    }
    let Some(cached) = prefill_prompt(target, &prompt[..n - 1], sink)? else {
        return Ok(None);
    };
    let t = Instant::now();
    target.prefill(&prompt[..n - 1])?;
    costs.record_verify(1, ms(t.elapsed()));
    Ok((sink.on_prefill(n - 1 - cached, n - 1 - cached) == Flow::Continue).then_some(cached))
}

/// The target's distributions at the k+1 positions and the acceptance outcome. Under a
/// grammar, a draft the grammar forbids (prompt lookup proposes blindly) has p = 0 and would
/// be rejected; the drafts end before it, so no position after it is scored.
fn verify(
    sampler: &mut Sampler,
    context: &[u32],
    position: usize,
    drafts: &[Draft],
    logits: &[Vec<f32>],
    spec: &SpeculativeOptions,
) -> Result<(Outcome, Vec<Vec<f32>>)> {
    let mut history = context.to_vec();
    let mut p = Vec::with_capacity(logits.len());
    let mut choices = Vec::with_capacity(logits.len());
    let mut valid = drafts.len();
    for (i, row) in logits.iter().enumerate() {
        let row = sampler.constrained(row, &history, position + i)?;
        let probs = sampler.params.probabilities(&row, &history)?;
        choices.push(match sampler.mode() {
            Mode::Greedy => sampler.params.greedy_token(&row, &history),
            Mode::Reproducible => gumbel_token(&probs, sampler.params.seed, position + i),
            Mode::Sample => 0, // unused: sample mode draws below
        });
        p.push(probs);
        let Some(d) = drafts.get(i) else { break };
        if !sampler.allows(&history, position + i, d.token)? {
            valid = i;
            break;
        }
        history.push(d.token);
    }
    let drafts = &drafts[..valid];
    let tokens: Vec<u32> = drafts.iter().map(|d| d.token).collect();
    let outcome = match sampler.mode() {
        Mode::Greedy | Mode::Reproducible => accept_matching(&tokens, &choices),
        Mode::Sample => {
            let vocab = logits.first().map_or(0, Vec::len);
            let q: Vec<Vec<f32>> = drafts.iter().map(|d| d.dense(vocab)).collect();
            (spec.sampled_accept)(&tokens, &p, &q, sampler.rng())
        }
    };
    Ok((outcome, p))
}

impl Totals {
    fn record(&mut self, k: usize, accepted: usize, draft_ms: f64, verify_ms: f64) {
        self.passes += 1;
        self.draft_ms += draft_ms;
        self.verify_ms += verify_ms;
        if k > 0 {
            self.drafted += k;
            self.accepted += accepted;
            self.k_min = Some(self.k_min.map_or(k, |m| m.min(k)));
            self.k_max = self.k_max.max(k);
            self.k_sum += k;
            self.drafting_steps += 1;
        }
    }

    fn acceptance(&self) -> Option<f64> {
        (self.drafted > 0).then(|| self.accepted as f64 / self.drafted as f64)
    }

    fn summary(
        &self,
        drafter: &str,
        costs: &CostModel,
        plain: &PlainReference,
        generated: usize,
        decode_ms: f64,
    ) -> SpeculativeStats {
        let k_mean = if self.drafting_steps > 0 { self.k_sum as f64 / self.drafting_steps as f64 } else { 0.0 };
        SpeculativeStats {
            drafter: drafter.to_string(),
            drafted: self.drafted,
            accepted: self.accepted,
            copied: self.copied,
            copied_accepted: self.copied_accepted,
            acceptance_rate: self.acceptance().unwrap_or(0.0),
            target_passes: self.passes,
            tokens_per_pass: generated as f64 / self.passes.max(1) as f64,
            draft_ms: self.draft_ms,
            verify_ms: self.verify_ms,
            plain_ms_per_token: plain.ms_per_token(),
            plain_steps: plain.samples(),
            speedup_vs_plain: plain.speedup(generated, decode_ms),
            predicted_speedup: (self.drafting_steps > 0).then(|| costs.predicted_speedup(k_mean)).flatten(),
            cost_ratio: costs.cost_ratio(),
            k_min: self.k_min.unwrap_or(0),
            k_max: self.k_max,
            k_mean,
        }
    }
}

fn step_event(reply: &Reply, plain: &PlainReference, totals: &Totals, k: usize, accepted: usize) -> StepEvent {
    let elapsed = reply.decode_elapsed();
    let generated = reply.tokens.len();
    StepEvent {
        k,
        accepted,
        generated,
        tokens_per_second: generated as f64 / elapsed.as_secs_f64().max(1e-9),
        speedup_vs_plain: plain.speedup(generated, ms(elapsed)),
        plain_ms_per_token: plain.ms_per_token(),
        plain_steps: plain.samples(),
        acceptance_rate: totals.acceptance(),
    }
}
