//! Choosing k each step from measured costs and acceptance.
//!
//! With per-token acceptance α, a step that drafts k tokens yields on average
//! `E(k) = (1 - α^(k+1)) / (1 - α)` tokens (Leviathan et al. 2023) and costs
//! `k·t_draft + t_verify(k+1)`. Auto picks the k in 0..=max with the most tokens per
//! millisecond; k = 0 is plain decoding. Every cost is measured in this process.

pub use specula_protocol::{KSetting, MAX_K};

/// Weight of a new measurement in the running averages.
const EMA: f64 = 0.3;
/// Plain steps before auto probes drafting again. The interval doubles after each probe that
/// does not pay (up to MAX_PROBE_INTERVAL): a probe costs a draft catch-up and a wider target
/// pass, so a pair that never pays must not keep paying for the question.
const FIRST_PROBE_INTERVAL: usize = 16;
const MAX_PROBE_INTERVAL: usize = 1024;
/// Drafting steps before auto re-measures a plain step (which costs nothing but one step's
/// gain). Often enough to notice within a second or two that the host got slower or faster.
const PLAIN_EVERY: usize = 32;
/// Drafting steps after which auto drafts one token more than its best once: the cost of a pass
/// it never makes is never re-measured, and one early, noisy sample of a wide pass (before the
/// caches were warm) kept k at 1 on code, where k = 2 to 4 paid 1.4x, for a whole bench.
const WIDER_EVERY: usize = 4;
/// Drafting steps whose realized rate must be known before a small loss can overrule the
/// model; a large one (twice plain's time per token) overrules it after one step.
const REALIZED_STEPS: f64 = 4.0;
const LARGE_LOSS: f64 = 2.0;
/// Drafting steps a probe is owed before it is judged, as long as drafting could pay at all:
/// one step is one sample of acceptance. Judged after one, a probe whose first draft was
/// rejected (always twice plain's time for its one token) stopped drafting for the code set,
/// whose acceptance is 0.93, on every reply of a 15-prompt bench.
const PROBE_STEPS: usize = 4;
/// How much slower than plain drafting may run, realized, before auto stops it: within the
/// noise of the measurements, not a loss anyone notices.
const TOLERATED_LOSS: f64 = 0.03;
/// How much longer than the measured costs predict drafting steps may take before their
/// realized rate overrules the model. Within it, a realized loss is the text's (a run of
/// rejected drafts), which the acceptance estimate weighs; judged on the realized rate alone,
/// two rejected steps in a row stopped drafting for the rest of a code reply whose acceptance
/// was 0.94.
const COST_TOLERANCE: f64 = 0.15;
/// A drafter whose token costs under this share of a plain step is free (prompt lookup: a few
/// microseconds against tens of milliseconds).
const FREE_DRAFT: f64 = 0.02;
/// Steps without drafts after which a free drafter that the model would not use drafts one
/// token anyway: a pass over two tokens costs about a quarter more than a plain one (3% over
/// 8 steps), and it keeps the acceptance current for when the reply starts to copy.
const FREE_PROBE_INTERVAL: usize = 8;
/// Copies are judged apart by how long a match they continue ([`copy_class`]): a copy after
/// 3 matching tokens is a guess, one after 20 is most likely the reply repeating a block.
const COPY_CLASSES: usize = 3;
/// Each class's prior acceptance, worth [`COPY_PRIOR_TRIALS`] trials. Optimistic for long
/// matches, so that the copy arm gets to show what it delivers beside a draft model that is
/// right 90% of the time: with one prior of 0.6 for every copy it never won a step there, and
/// so never gathered the evidence that would have let it win (PROFILE.md, "Drafters
/// combined"). A long match that is wrong costs one wider pass, and the evidence then speaks.
const COPY_PRIOR: [f64; COPY_CLASSES] = [0.6, 0.8, 0.95];
const COPY_PRIOR_TRIALS: f64 = 2.0;
/// Each step that does not copy, the copies' evidence fades by this share, so that a class
/// whose copies failed for a while gets another try (after some 30 steps its evidence counts
/// half against the prior). Without it, two failed long copies early in a revision kept the
/// arm from ever copying again in that reply, however long its later matches: in the app,
/// 19 copied tokens in a 160-token reply that was mostly the old code.
const COPY_EVIDENCE_FADES: f64 = 1.0 / 32.0;

/// The class of a copy that continues a match of `matched` tokens.
fn copy_class(matched: usize) -> usize {
    match matched {
        0..=4 => 0,
        5..=11 => 1,
        _ => 2,
    }
}

#[derive(Debug, Clone)]
pub struct CostModel {
    /// Running mean time of a target pass over n tokens, by n.
    verify_ms: Vec<Option<f64>>,
    /// Running mean time to draft one token.
    draft_ms: Option<f64>,
    /// Running mean time per token to catch the drafter up on tokens it missed (a batched
    /// pass, like its prompt prefill, where it is measured for free).
    catch_up_ms: Option<f64>,
    /// Acceptance evidence: accepted drafts, and trials (draft positions examined).
    hits: f64,
    trials: f64,
    since_plain: usize,
    since_draft: usize,
    /// Drafting steps since auto last drafted one more than its best ([`WIDER_EVERY`]).
    since_wider: usize,
    probe_interval: usize,
    /// What drafting steps really delivered, whatever the model predicted: running sums of
    /// committed tokens and of wall time (draft, verify and the rest; not a catch-up), decayed.
    realized_tokens: f64,
    realized_ms: f64,
    /// What the measured costs said those steps would take, summed and decayed alike.
    predicted_ms: f64,
    /// Drafting steps measured since the realized sums were last cleared.
    realized_steps: f64,
    /// Drafting was stopped for losing: only a probe restarts it.
    suppressed: bool,
    /// Drafting steps the current probe is still owed ([`PROBE_STEPS`]).
    trial: usize,
    /// The last two drafting steps each took over LARGE_LOSS times what the measured costs say
    /// they should: the host itself got slower, which two steps suffice to show (a rejected
    /// draft does not).
    overrun: bool,
    /// The last drafting step, held back because it took over LARGE_LOSS times its cost.
    held_back: Option<Realized>,
    /// Running mean wall time of a plain step, overheads included.
    plain_step_ms: Option<f64>,
    /// The last drafting step's draft count, and whether the target kept every one.
    last_drafted: usize,
    last_all_kept: bool,
    /// The copy arm (a combined drafter's free copies): its own acceptance evidence (hits,
    /// trials) per class of match length, since copies and a model's drafts are right at
    /// different rates; it drafts in no time, and the target's pass costs above are the same
    /// for both arms.
    copy_evidence: [(f64, f64); COPY_CLASSES],
    /// The last copying step's length, and whether the target kept every copied token.
    copy_last: (usize, bool),
    /// Replies sharing the step now: the extra rows of a wider pass hold each of them up.
    sharing: f64,
}

impl Default for CostModel {
    fn default() -> Self {
        Self::new()
    }
}

fn ema(old: Option<f64>, new: f64) -> Option<f64> {
    Some(old.map_or(new, |o| o + EMA * (new - o)))
}

impl CostModel {
    pub fn new() -> Self {
        Self {
            verify_ms: vec![None; MAX_K + 2],
            draft_ms: None,
            catch_up_ms: None,
            hits: 0.0,
            trials: 0.0,
            since_plain: 0,
            since_draft: 0,
            since_wider: 0,
            probe_interval: FIRST_PROBE_INTERVAL,
            realized_tokens: 0.0,
            realized_ms: 0.0,
            predicted_ms: 0.0,
            realized_steps: 0.0,
            suppressed: false,
            trial: 0,
            overrun: false,
            held_back: None,
            plain_step_ms: None,
            last_drafted: 0,
            last_all_kept: false,
            copy_evidence: [(0.0, 0.0); COPY_CLASSES],
            copy_last: (0, false),
            sharing: 1.0,
        }
    }

    /// `replies` share the step from now on (1: alone). A pass wider by k rows then costs
    /// each of them its extra time, so the extra time is priced that many times over (draft
    /// times are priced so as they are recorded).
    pub fn set_sharing(&mut self, replies: f64) {
        self.sharing = replies.max(1.0);
    }

    /// A pass over `n` tokens as this step prices it: the plain pass, and the extra rows' time
    /// once for each reply sharing the step.
    fn priced_verify(&self, n: usize) -> Option<f64> {
        let t1 = self.plain_ms()?;
        Some(t1 + self.sharing * (self.verify_cost(n)? - t1).max(0.0))
    }

    /// A new reply begins. What passes and drafts cost is the host's and is kept; how often
    /// drafts are right is the text's, so earlier replies' acceptance counts half and a
    /// suppressed draft gets a probe. Kept whole, one reply that paraphrased stopped drafting
    /// for the replies after it: 40 in a row of a 45-reply bench, code among them.
    pub fn new_reply(&mut self) {
        self.hits *= 0.5;
        self.trials *= 0.5;
        for (hits, trials) in &mut self.copy_evidence {
            (*hits, *trials) = (*hits * 0.5, *trials * 0.5);
        }
        self.copy_last = (0, false);
        self.forget_realized();
        self.overrun = false;
        self.held_back = None;
        self.probe_interval = FIRST_PROBE_INTERVAL;
        if self.draft_ms.is_some() && !self.drafter_is_free() {
            // Owed a probe; `auto_k` still drafts nothing when no k could pay at all.
            self.suppressed = false;
            self.trial = PROBE_STEPS;
        }
    }

    /// A target pass over `n` tokens took `ms`.
    pub fn record_verify(&mut self, n: usize, ms: f64) {
        if let Some(slot) = self.verify_ms.get_mut(n) {
            *slot = ema(*slot, ms);
        }
        if n == 1 {
            self.since_plain = 0;
        } else {
            self.since_plain += 1;
        }
    }

    /// `k` drafts took `ms`, and the target kept `accepted` of them.
    pub fn record_draft(&mut self, k: usize, accepted: usize, ms: f64) {
        for (hits, trials) in &mut self.copy_evidence {
            (*hits, *trials) = (*hits * (1.0 - COPY_EVIDENCE_FADES), *trials * (1.0 - COPY_EVIDENCE_FADES));
        }
        if k == 0 {
            self.since_draft += 1;
            return;
        }
        self.since_draft = 0;
        (self.last_drafted, self.last_all_kept) = (k, accepted == k);
        self.trial = self.trial.saturating_sub(1);
        self.draft_ms = ema(self.draft_ms, ms / k as f64);
        // Geometric model: each kept draft is a success; the first rejection is one failure.
        let (hits, trials) = (accepted as f64, (accepted + usize::from(accepted < k)) as f64);
        self.hits = self.hits * (1.0 - EMA / 4.0) + hits;
        self.trials = self.trials * (1.0 - EMA / 4.0) + trials;
    }

    /// A whole step (draft, verify, sampling, commit; a catch-up is priced before a probe, not
    /// here) that drafted `k` and committed `tokens` took `ms` of wall time: what the choice of
    /// k really delivered.
    pub fn record_step(&mut self, k: usize, tokens: usize, ms: f64) {
        if k == 0 {
            self.plain_step_ms = ema(self.plain_step_ms, ms);
            return;
        }
        let predicted = self.step_cost(k).unwrap_or(ms);
        // One step far over its cost is more often a neighbour's burst (the app's own webview
        // painting) than a slower host, and a burst would have held up a plain step as much:
        // it is set aside, and only a second such step in a row says the host got slower
        // (then both count, and what came before them is forgotten: it was another host).
        // Taken at face value, single bursts stopped drafting for stretches of the app's
        // replies (26 plain steps of 90 in a 256-token code reply beside a light bursty
        // neighbour, against 5 alone).
        let step = Realized { tokens: tokens as f64, ms, predicted };
        let overran = ms > LARGE_LOSS * predicted;
        let steps = match (overran, self.overrun, self.held_back.take()) {
            (true, true, _) => vec![step],
            (true, false, None) => {
                self.held_back = Some(step);
                return;
            }
            (true, false, Some(first)) => {
                self.forget_realized();
                vec![first, step]
            }
            (false, _, _) => vec![step],
        };
        self.overrun = overran;
        // The last ten or so drafting steps count: the host's load can change under us, but a
        // window of three (a weight of 0.3 a step) read a run of two rejected drafts as a
        // lasting loss and stopped drafting that paid for 32 steps (a trace of a code reply).
        let keep = 1.0 - EMA / 3.0;
        for step in steps {
            self.realized_tokens = self.realized_tokens * keep + step.tokens;
            self.realized_ms = self.realized_ms * keep + step.ms;
            self.predicted_ms = self.predicted_ms * keep + step.predicted;
            self.realized_steps += 1.0;
        }
    }

    fn forget_realized(&mut self) {
        (self.realized_tokens, self.realized_ms, self.predicted_ms, self.realized_steps) = (0.0, 0.0, 0.0, 0.0);
    }

    /// What a step drafting `k` costs by the measured draft and pass times.
    fn step_cost(&self, k: usize) -> Option<f64> {
        Some(k as f64 * self.draft_ms? + self.priced_verify(k + 1)?)
    }

    /// Whether drafting, as realized, has been slower than plain decoding (beyond the noise).
    fn drafting_loses(&self) -> bool {
        let (Some(plain), true) = (self.plain_step_ms, self.realized_steps > 0.0) else { return false };
        let per_token = self.realized_ms / self.realized_tokens.max(1.0);
        let costs_are_off = self.realized_ms > self.predicted_ms * (1.0 + COST_TOLERANCE);
        (per_token > plain * LARGE_LOSS && (self.overrun || (costs_are_off && self.realized_steps >= 2.0)))
            || (costs_are_off && self.realized_steps >= REALIZED_STEPS && per_token > plain * (1.0 + TOLERATED_LOSS))
    }

    /// The drafter was fed `tokens` in one go (a prompt prefill or a catch-up) in `ms`.
    pub fn record_catch_up(&mut self, tokens: usize, ms: f64) {
        if tokens > 0 {
            self.catch_up_ms = ema(self.catch_up_ms, ms / tokens as f64);
        }
    }

    /// Time to catch the drafter up by one token: measured, or before that the price of a
    /// draft step (an upper bound: a batched pass costs no more per token than single ones).
    pub fn catch_up_ms(&self) -> Option<f64> {
        self.catch_up_ms.or(self.draft_ms)
    }

    /// Per-token acceptance, with a weak prior of 0.6 before evidence.
    pub fn alpha(&self) -> f64 {
        ((self.hits + 1.2) / (self.trials + 2.0)).clamp(0.0, 0.999)
    }

    /// The measured time of one plain target step.
    pub fn plain_ms(&self) -> Option<f64> {
        self.verify_ms[1]
    }

    pub fn draft_ms(&self) -> Option<f64> {
        self.draft_ms
    }

    /// Time of a target pass over `n` tokens: measured, interpolated between measured sizes,
    /// extrapolated along the measured slope, or, before any wider pass was measured, with a
    /// prior slope of 10% of a plain pass.
    pub fn verify_cost(&self, n: usize) -> Option<f64> {
        let t1 = self.plain_ms()?;
        if let Some(Some(t)) = self.verify_ms.get(n) {
            return Some(*t);
        }
        let below = (1..n).rev().find_map(|m| self.verify_ms[m].map(|t| (m, t)));
        let above = (n + 1..self.verify_ms.len()).find_map(|m| self.verify_ms[m].map(|t| (m, t)));
        Some(match (below, above) {
            (Some((a, ta)), Some((b, tb))) => ta + (tb - ta) * (n - a) as f64 / (b - a) as f64,
            // Past the widest measured pass, the measured cost per extra token continues: a
            // prior slope there once let auto believe that k = 8 could pay on a CPU where each
            // extra token costs 70% of a pass, and keep probing (and catching up the draft).
            (Some((a, ta)), None) if a > 1 => ta + (ta - t1).max(0.0) / (a - 1) as f64 * (n - a) as f64,
            _ => t1 * (1.0 + 0.1 * (n - 1) as f64),
        })
    }

    /// Expected tokens per millisecond when drafting `k` (0: plain).
    pub fn rate(&self, k: usize) -> Option<f64> {
        let verify = self.priced_verify(k + 1)?;
        let draft = if k == 0 { 0.0 } else { self.draft_ms? * k as f64 };
        Some(expected_tokens(self.alpha(), k) / (draft + verify))
    }

    /// Whether some k could beat plain decoding even if every draft were accepted, after
    /// catching the drafter up on `backlog` tokens first. When it cannot, probing is pure loss
    /// (a catch-up and a wider pass each time): auto stops.
    pub fn could_pay(&self, max: usize, backlog: usize) -> bool {
        if self.draft_ms.is_none() {
            return true;
        }
        (1..=max).any(|k| self.saving_per_token(k, 1.0).is_some_and(|saving| self.repays_catch_up(saving, backlog)))
    }

    /// Milliseconds per token that drafting `k` saves over plain decoding at acceptance
    /// `alpha` (negative when it loses).
    fn saving_per_token(&self, k: usize, alpha: f64) -> Option<f64> {
        let step = k as f64 * self.draft_ms? + self.priced_verify(k + 1)?;
        let tokens = if alpha >= 1.0 { (k + 1) as f64 } else { expected_tokens(alpha, k) };
        Some(self.plain_ms()? - step / tokens)
    }

    /// Whether drafting that saves `saving` ms per token repays catching the drafter up on
    /// `backlog` tokens first. The new regime is assumed to last as long as the plain stretch
    /// behind it (at least until the next probe), so a backlog of B tokens must be repaid
    /// within B tokens. Without this a CPU pair whose drafts could barely pay probed after
    /// long plain stretches and spent seconds catching the draft up each time.
    fn repays_catch_up(&self, saving: f64, backlog: usize) -> bool {
        let horizon = backlog.max(self.probe_interval) as f64;
        let catch_up = backlog as f64 * self.catch_up_ms().unwrap_or(0.0);
        saving > 0.0 && saving * horizon > catch_up
    }

    /// The k with the best expected rate given what has been measured.
    pub fn best_k(&self, max: usize) -> usize {
        (0..=max).filter_map(|k| self.rate(k).map(|r| (k, r))).max_by(|a, b| a.1.total_cmp(&b.1)).map_or(0, |(k, _)| k)
    }

    /// The draft length for the next step, when the drafter lacks `backlog` tokens that it
    /// must catch up on before it can draft.
    pub fn next_k(&mut self, setting: KSetting, backlog: usize) -> usize {
        // The first step of a reply is plain: it measures the plain rate at this context,
        // which the speedup figure and auto's choice both need.
        if self.plain_ms().is_none() {
            return 0;
        }
        match setting {
            KSetting::Fixed(k) => k,
            KSetting::Auto { max } => self.auto_k(max, backlog),
        }
    }

    fn auto_k(&mut self, max: usize, backlog: usize) -> usize {
        // The first probe drafts a few tokens so that it also measures a wider pass.
        if self.draft_ms.is_none() {
            self.trial = PROBE_STEPS;
            return max.min(3);
        }
        if self.drafter_is_free() {
            return self.free_k(max);
        }
        // Whatever the model predicts, drafting that has really been slower stops, and waits
        // for a probe (the host may be loaded, or the model's costs off for this host).
        if self.drafting_loses() {
            tracing::debug!(
                realized = self.realized_ms / self.realized_tokens,
                plain = self.plain_step_ms,
                "auto k: drafting loses"
            );
            self.forget_realized();
            self.suppressed = true;
            self.trial = 0;
            self.probe_interval = (self.probe_interval * 2).min(MAX_PROBE_INTERVAL);
            return 0;
        }
        let best = self.best_k(max);
        if self.trial > 0 && self.could_pay(max, backlog) {
            return best.max(1);
        }
        tracing::debug!(
            best,
            backlog,
            alpha = self.alpha(),
            plain_ms = self.plain_ms(),
            draft_ms = self.draft_ms,
            catch_up_ms = self.catch_up_ms,
            verify_5_ms = self.verify_cost(5),
            suppressed = self.suppressed,
            "auto k"
        );
        if best == 0 || self.suppressed {
            if self.since_draft < self.probe_interval || !self.could_pay(max, backlog) {
                return 0;
            }
            self.suppressed = false;
            if best == 0 {
                self.probe_interval = (self.probe_interval * 2).min(MAX_PROBE_INTERVAL);
            }
            // The cheapest probe: one draft a step, for a few steps. Their realized rate, or
            // the model's view of their measurements, decides what follows.
            self.trial = PROBE_STEPS;
            return max.min(1);
        }
        let resumes_paying =
            backlog == 0 || self.saving_per_token(best, self.alpha()).is_some_and(|s| self.repays_catch_up(s, backlog));
        if self.since_plain >= PLAIN_EVERY || !resumes_paying {
            return 0;
        }
        if self.drafting_wins() {
            self.probe_interval = FIRST_PROBE_INTERVAL;
        }
        self.since_wider += 1;
        if best < max && self.since_wider >= WIDER_EVERY {
            self.since_wider = 0;
            return best + 1;
        }
        best
    }

    fn drafter_is_free(&self) -> bool {
        matches!((self.draft_ms, self.plain_ms()), (Some(draft), Some(plain)) if draft < FREE_DRAFT * plain)
    }

    /// k for a drafter that costs nothing (prompt lookup). Its drafts lose only the wider
    /// passes of rejected tokens, which the model prices, so nothing is suppressed and no
    /// probe backs off: judged on realized steps, a reply that paraphrased first and copied
    /// later stopped drafting before the copying began. Copied text comes in runs, so a step
    /// whose drafts were all kept doubles the next one's.
    fn free_k(&self, max: usize) -> usize {
        let mut k = self.best_k(max);
        if self.last_all_kept {
            k = k.max((2 * self.last_drafted).min(max));
        }
        if k == 0 && self.since_draft >= FREE_PROBE_INTERVAL {
            return 1;
        }
        k
    }

    /// How many of the `available` copied tokens (continuing a match of `matched` tokens) the
    /// next step should propose instead of the `model_k` drafts [`Self::next_k`] chose (0:
    /// leave the step to the model, or to plain decoding). The arm with the better expected
    /// rate takes the step: copies at their class's acceptance and no draft time, the model's
    /// drafts at theirs and their measured cost. Copied text comes in runs, so a step whose
    /// copies were all kept doubles the next one.
    pub fn copy_k(&self, setting: KSetting, available: usize, matched: usize, model_k: usize) -> usize {
        if available == 0 || self.plain_ms().is_none() {
            return 0;
        }
        let alpha = self.copy_alpha(matched);
        let k = match setting {
            KSetting::Fixed(k) => k.min(available),
            // Copies may run past auto's usual longest draft: they cost no draft time, and
            // the wider pass is priced like any other.
            KSetting::Auto { max } => {
                let cap = available.min(max.max(MAX_K));
                let best = (1..=cap)
                    .filter_map(|k| self.copy_rate(alpha, k).map(|r| (k, r)))
                    .max_by(|a, b| a.1.total_cmp(&b.1))
                    .map_or(1, |(k, _)| k);
                match self.copy_last {
                    (last, true) => best.max((2 * last).min(cap)),
                    _ => best,
                }
            }
        };
        match (self.copy_rate(alpha, k), self.rate(model_k)) {
            (Some(copy), Some(model)) if copy < model => 0,
            _ => k,
        }
    }

    /// Expected tokens per millisecond when copying `k` tokens each kept with chance `alpha`.
    fn copy_rate(&self, alpha: f64, k: usize) -> Option<f64> {
        Some(expected_tokens(alpha, k) / self.priced_verify(k + 1)?)
    }

    /// Per-token acceptance of copies that continue a match of `matched` tokens.
    pub fn copy_alpha(&self, matched: usize) -> f64 {
        let class = copy_class(matched);
        let (hits, trials) = self.copy_evidence[class];
        ((hits + COPY_PRIOR[class] * COPY_PRIOR_TRIALS) / (trials + COPY_PRIOR_TRIALS)).clamp(0.0, 0.999)
    }

    /// `k` copied tokens, continuing a match of `matched`, were proposed and the target kept
    /// `accepted` of them.
    pub fn record_copy(&mut self, k: usize, accepted: usize, matched: usize) {
        if k == 0 {
            return;
        }
        self.copy_last = (k, accepted == k);
        let (new_hits, new_trials) = (accepted as f64, (accepted + usize::from(accepted < k)) as f64);
        let (hits, trials) = &mut self.copy_evidence[copy_class(matched)];
        *hits = *hits * (1.0 - EMA / 4.0) + new_hits;
        *trials = *trials * (1.0 - EMA / 4.0) + new_trials;
    }

    /// Whether drafting, as realized, has been faster than plain decoding.
    fn drafting_wins(&self) -> bool {
        let (Some(plain), true) = (self.plain_step_ms, self.realized_steps >= REALIZED_STEPS) else { return false };
        self.realized_ms / self.realized_tokens.max(1.0) < plain
    }

    /// Leviathan et al.'s expected speedup at draft length `k` from the measured acceptance
    /// and cost ratio `c = t_draft / t_plain`: `(1 - α^(k+1)) / ((1 - α)(k·c + 1))`.
    pub fn predicted_speedup(&self, k: f64) -> Option<f64> {
        let c = self.cost_ratio()?;
        let alpha = self.alpha();
        Some((1.0 - alpha.powf(k + 1.0)) / ((1.0 - alpha) * (k * c + 1.0)))
    }

    pub fn cost_ratio(&self) -> Option<f64> {
        Some(self.draft_ms? / self.plain_ms()?)
    }
}

/// What one drafting step delivered, and what the measured costs said it would take.
#[derive(Debug, Clone, Copy)]
struct Realized {
    tokens: f64,
    ms: f64,
    predicted: f64,
}

/// Mean tokens a step yields when drafting k with per-token acceptance alpha.
pub fn expected_tokens(alpha: f64, k: usize) -> f64 {
    (1.0 - alpha.powi(k as i32 + 1)) / (1.0 - alpha)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measured(t1: f64, slope: f64, draft: f64, accepted_of_4: usize) -> CostModel {
        let mut m = CostModel::new();
        for n in 1..=9 {
            m.record_verify(n, t1 + slope * (n - 1) as f64);
        }
        for _ in 0..40 {
            m.record_draft(4, accepted_of_4, draft * 4.0);
        }
        m
    }

    #[test]
    fn expected_tokens_worked_example() {
        // alpha = 0.5, k = 2: 1 + 0.5 + 0.25
        assert!((expected_tokens(0.5, 2) - 1.75).abs() < 1e-12);
        assert_eq!(expected_tokens(0.0, 5), 1.0);
    }

    #[test]
    fn a_long_match_is_copied_beside_a_good_draft_model_before_any_evidence() {
        // A draft model right nearly every time at a quarter of a plain pass per draft.
        let m = measured(100.0, 3.0, 25.0, 4);
        let model_k = m.best_k(8);
        assert!(model_k >= 4, "{model_k}");
        let auto = KSetting::Auto { max: 8 };
        assert!(m.copy_k(auto, 8, 20, model_k) >= 4, "a 20-token match is worth a try");
        assert_eq!(m.copy_k(auto, 8, 3, model_k), 0, "a 3-token match is a guess: the model drafts");
    }

    #[test]
    fn long_matches_that_fail_give_the_step_back_to_the_model() {
        let mut m = measured(100.0, 3.0, 25.0, 4);
        let (auto, model_k) = (KSetting::Auto { max: 8 }, m.best_k(8));
        for _ in 0..5 {
            let k = m.copy_k(auto, 8, 20, model_k);
            if k == 0 {
                break;
            }
            m.record_copy(k, 0, 20);
        }
        assert_eq!(m.copy_k(auto, 8, 20, model_k), 0, "alpha {}", m.copy_alpha(20));
        assert!(m.copy_alpha(8) > m.copy_alpha(20), "each class keeps its own evidence");
        // The model drafts for a while; then long matches get another try.
        let mut steps = 0;
        while m.copy_k(auto, 8, 20, model_k) == 0 {
            m.record_draft(4, 4, 100.0);
            steps += 1;
            assert!(steps < 200, "the copies never got another try");
        }
        assert!(steps >= 8, "not at once: {steps} steps");
    }

    #[test]
    fn cheap_accurate_drafts_choose_a_long_k() {
        let m = measured(100.0, 3.0, 10.0, 4);
        assert!(m.best_k(8) >= 4, "{}", m.best_k(8));
    }

    #[test]
    fn slow_or_wrong_drafts_fall_back_to_plain() {
        assert_eq!(measured(100.0, 3.0, 10.0, 0).best_k(8), 0, "nothing accepted");
        assert_eq!(measured(100.0, 3.0, 90.0, 2).best_k(8), 0, "draft nearly as slow as the target");
    }

    #[test]
    fn first_step_is_plain_then_probe() {
        let mut m = CostModel::new();
        assert_eq!(m.next_k(KSetting::Fixed(4), 0), 0);
        m.record_verify(1, 100.0);
        assert_eq!(m.next_k(KSetting::Fixed(4), 0), 4);
        assert_eq!(m.next_k(KSetting::Auto { max: 8 }, 0), 3, "probe before any draft is timed");
    }

    #[test]
    fn probes_back_off_while_drafting_does_not_pay() {
        let mut m = measured(100.0, 50.0, 60.0, 0);
        let mut probes = Vec::new();
        for step in 0..400 {
            let k = m.next_k(KSetting::Auto { max: 8 }, 0);
            if k > 0 {
                probes.push(step);
                m.record_draft(k, 0, 60.0 * k as f64);
            } else {
                m.record_draft(0, 0, 0.0);
            }
        }
        let gaps: Vec<usize> = probes.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(probes.len() <= 6, "{probes:?}");
        assert!(gaps.windows(2).all(|g| g[1] >= g[0]), "{gaps:?}");
    }

    #[test]
    fn no_probing_when_even_perfect_drafts_cannot_pay() {
        // Verification costs n x a plain pass and drafting is dear: nothing can pay.
        let mut m = CostModel::new();
        for n in 1..=9 {
            m.record_verify(n, 100.0 * n as f64);
        }
        m.record_draft(4, 4, 4.0 * 70.0);
        assert!(!m.could_pay(8, 0));
        for _ in 0..1000 {
            assert_eq!(m.next_k(KSetting::Auto { max: 8 }, 0), 0);
            m.record_draft(0, 0, 0.0);
        }
        assert!(measured(100.0, 3.0, 10.0, 4).could_pay(8, 0));
    }

    #[test]
    fn verify_cost_interpolates_and_extrapolates() {
        let mut m = CostModel::new();
        m.record_verify(1, 100.0);
        assert_eq!(m.verify_cost(3), Some(120.0), "prior slope before a wider pass is measured");
        m.record_verify(5, 400.0);
        assert_eq!(m.verify_cost(3), Some(250.0));
        assert_eq!(m.verify_cost(7), Some(550.0), "the measured 75 ms per extra token continues");
    }

    #[test]
    fn a_cpu_pair_whose_wide_passes_are_dear_stops_probing() {
        // Measured on the 2-core machine: a plain step 106 ms, a pass over 4 tokens 337 ms,
        // a draft token 68 ms. No k up to 8 can pay even if every draft were accepted.
        let mut m = CostModel::new();
        m.record_verify(1, 106.0);
        m.record_verify(4, 337.0);
        m.record_draft(3, 1, 3.0 * 68.0);
        assert!(!m.could_pay(8, 0));
        for _ in 0..200 {
            m.record_verify(1, 106.0);
            m.record_draft(0, 0, 0.0);
            assert_eq!(m.next_k(KSetting::Auto { max: 8 }, 0), 0);
        }
    }

    /// Plain decoding for `steps`, then the steps at which auto would return to the draft
    /// (the first step of each probe), with a drafter that falls behind by one token per plain
    /// step.
    fn probes_over(m: &mut CostModel, steps: usize) -> Vec<usize> {
        let mut backlog = 0;
        let mut probes = Vec::new();
        for step in 0..steps {
            let k = m.next_k(KSetting::Auto { max: 8 }, backlog);
            if k > 0 {
                if backlog > 0 || probes.is_empty() {
                    probes.push(step);
                }
                backlog = 0;
                m.record_draft(k, 0, 40.0 * k as f64);
            } else {
                backlog += 1;
                m.record_draft(0, 0, 0.0);
            }
        }
        probes
    }

    #[test]
    fn probes_weigh_the_draft_catch_up() {
        // A perfect draft would save 100 - (4 x 40 + 200) / 5 = 28 ms a token at k = 4, but
        // only ever 10% of drafts are accepted: auto runs plain and asks again now and then.
        let setup = |catch_up_ms: f64| {
            let mut m = CostModel::new();
            for n in 1..=9 {
                m.record_verify(n, 100.0 + 25.0 * (n - 1) as f64);
            }
            m.record_draft(4, 0, 160.0);
            m.record_catch_up(64, 64.0 * catch_up_ms);
            m
        };
        assert!(setup(40.0).could_pay(8, 0), "with no backlog a probe could pay");
        // Catching up costs 40 ms a token, more than any draft could save: never worth asking.
        assert!(probes_over(&mut setup(40.0), 2000).is_empty());
        // Where catching up is cheap (a GPU, say), auto still probes, ever more rarely.
        let probes = probes_over(&mut setup(2.0), 2000);
        assert!((3..=12).contains(&probes.len()), "{probes:?}");
    }

    #[test]
    fn drafting_resumes_only_if_it_repays_the_catch_up() {
        // Three drafts of four accepted (alpha 0.75), 40 ms a draft: k = 1 is best and saves
        // 100 - (40 + 125) / 1.75 = 5.7 ms a token; catching up costs 30 ms a token.
        let mut m = CostModel::new();
        for n in 1..=9 {
            m.record_verify(n, 100.0 + 25.0 * (n - 1) as f64);
        }
        for _ in 0..60 {
            m.record_draft(4, 3, 160.0);
        }
        m.record_catch_up(10, 10.0 * 30.0);
        let best = m.best_k(8);
        assert_eq!(best, 1);
        assert_eq!(m.next_k(KSetting::Auto { max: 8 }, 0), best, "nothing to catch up: draft");
        assert_eq!(m.next_k(KSetting::Auto { max: 8 }, 200), 0, "a backlog dearer than the gain");
    }

    #[test]
    fn catch_up_cost_is_measured_or_bounded_by_a_draft_step() {
        let mut m = CostModel::new();
        assert_eq!(m.catch_up_ms(), None);
        m.record_draft(2, 1, 60.0);
        assert_eq!(m.catch_up_ms(), Some(30.0));
        m.record_catch_up(0, 5.0);
        assert_eq!(m.catch_up_ms(), Some(30.0), "nothing fed, nothing learnt");
        m.record_catch_up(40, 400.0);
        assert_eq!(m.catch_up_ms(), Some(10.0));
    }

    #[test]
    fn a_new_reply_probes_a_draft_an_earlier_reply_stopped() {
        // Cheap passes and drafts, but the replies so far rejected every draft.
        let mut m = measured(40.0, 0.1, 6.0, 0);
        assert_eq!(m.next_k(KSetting::Auto { max: 8 }, 0), 0, "no drafting on this reply");
        m.new_reply();
        assert!(m.next_k(KSetting::Auto { max: 8 }, 0) >= 1, "the next reply gets a probe");
        // Where no k could pay even with every draft kept, the new reply does not probe.
        let mut hopeless = measured(40.0, 0.9, 60.0, 0);
        hopeless.new_reply();
        assert_eq!(hopeless.next_k(KSetting::Auto { max: 8 }, 0), 0);
    }

    #[test]
    fn k_reads_and_writes_as_a_number_or_auto() {
        let fixed: KSetting = serde_json::from_str("4").unwrap();
        assert_eq!(fixed, KSetting::Fixed(4));
        assert_eq!(serde_json::from_str::<KSetting>("\"6\"").unwrap(), KSetting::Fixed(6));
        assert_eq!(serde_json::from_str::<KSetting>("\"auto\"").unwrap(), KSetting::default());
        assert_eq!(serde_json::to_string(&KSetting::Fixed(4)).unwrap(), "4");
        assert_eq!(serde_json::to_string(&KSetting::default()).unwrap(), "\"auto\"");
        for bad in ["0", "17", "-1", "\"fast\"", "2.5", "null"] {
            let err = serde_json::from_str::<KSetting>(bad).unwrap_err().to_string();
            assert!(bad == "null" || err.contains("expected 1 to 16 or auto"), "{bad}: {err}");
        }
    }

    /// Decode `steps` steps under auto k with a target whose plain step takes `plain` ms and a
    /// drafter whose every draft is accepted at `draft` ms a token, the model's costs, while a
    /// drafting step really takes `realized(step, k)` ms; returns (drafting steps, total ms,
    /// tokens).
    fn simulate(steps: usize, plain: f64, draft: f64, realized: impl Fn(usize, usize) -> f64) -> (usize, f64, usize) {
        let mut m = CostModel::new();
        let (mut drafting, mut total, mut tokens) = (0, 0.0, 0);
        for step in 0..steps {
            let k = m.next_k(KSetting::Auto { max: 8 }, 0);
            if k == 0 {
                m.record_verify(1, plain);
                m.record_draft(0, 0, 0.0);
                m.record_step(0, 1, plain);
                (total, tokens) = (total + plain, tokens + 1);
            } else {
                m.record_verify(k + 1, plain * (1.0 + 0.1 * k as f64));
                m.record_draft(k, k, draft * k as f64);
                let ms = realized(step, k);
                m.record_step(k, k + 1, ms);
                (drafting, total, tokens) = (drafting + 1, total + ms, tokens + k + 1);
            }
        }
        (drafting, total, tokens)
    }

    #[test]
    fn realized_losses_stop_drafting_that_the_model_thinks_pays() {
        // The model sees a cheap draft and perfect acceptance; a loaded host makes each
        // drafting step cost 10 plain steps (a draft 7 times dearer than a target step, as
        // seen beside a compile). Auto must end up within a few percent of plain.
        let (drafting, total, tokens) = simulate(2000, 100.0, 10.0, |_, _| 1000.0);
        let plain_total = tokens as f64 * 100.0;
        assert!(total < plain_total / 0.97, "{:.3}x of plain, {drafting} drafting steps", plain_total / total);
        assert!(drafting < 12, "{drafting} drafting steps");
    }

    #[test]
    fn one_rejected_probe_does_not_stop_a_draft_that_could_pay() {
        // This CPU's costs: a 55 ms step, 15 ms an extra verified token, a 20 ms draft.
        let mut m = CostModel::new();
        for n in 1..=9 {
            m.record_verify(n, 55.0 + 15.0 * (n - 1) as f64);
        }
        m.record_step(0, 1, 55.0);
        let k = m.next_k(KSetting::Auto { max: 8 }, 0);
        assert_eq!(k, 3, "the first probe");
        m.record_draft(k, 0, 60.0);
        // It cost what the measured costs say (no slower host), for one token.
        m.record_step(k, 1, 60.0 + 100.0);
        assert!(m.next_k(KSetting::Auto { max: 8 }, 0) > 0, "one rejection is one sample");
        // One step that costs far more than the measured costs do may be a neighbour's burst...
        m.record_draft(1, 1, 20.0);
        m.record_step(1, 2, 1000.0);
        assert!(m.next_k(KSetting::Auto { max: 8 }, 0) > 0, "one slow step is a burst");
        // ...two in a row are a slower host: it stops.
        m.record_draft(1, 1, 20.0);
        m.record_step(1, 2, 1000.0);
        assert_eq!(m.next_k(KSetting::Auto { max: 8 }, 0), 0);
    }

    #[test]
    fn a_run_of_rejected_drafts_at_the_measured_costs_is_the_texts_not_a_loss() {
        // This CPU's costs: a 30 ms step, 10 ms an extra verified token, a 10 ms draft.
        let cost = |n: usize| 30.0 + 10.0 * (n - 1) as f64;
        let mut m = CostModel::new();
        (1..=9).for_each(|n| m.record_verify(n, cost(n)));
        m.record_step(0, 1, 30.0);
        let step = |m: &mut CostModel, k: usize, kept: usize| {
            m.record_draft(k, kept, 10.0 * k as f64);
            m.record_verify(k + 1, cost(k + 1));
            m.record_step(k, kept + 1, 10.0 * k as f64 + cost(k + 1));
        };
        for _ in 0..20 {
            let k = m.next_k(KSetting::Auto { max: 8 }, 0);
            step(&mut m, k.max(1), k.max(1));
        }
        // Three steps whose every draft is rejected, each taking what the costs say.
        for _ in 0..3 {
            let k = m.next_k(KSetting::Auto { max: 8 }, 0);
            assert!(k > 0, "drafting stopped after a run of rejections at acceptance {}", m.alpha());
            step(&mut m, k, 0);
        }
        assert!(m.next_k(KSetting::Auto { max: 8 }, 0) > 0);
    }

    #[test]
    fn a_wide_pass_measured_dear_once_is_measured_again() {
        // Passes cost 30 ms and 5 ms an extra token; one early pass over 4 tokens read 90 ms.
        let cost = |n: usize| 30.0 + 5.0 * (n - 1) as f64;
        let mut m = CostModel::new();
        (1..=2).for_each(|n| m.record_verify(n, cost(n)));
        m.record_verify(4, 90.0);
        m.record_step(0, 1, 30.0);
        let mut widest = 0;
        for _ in 0..60 {
            let k = m.next_k(KSetting::Auto { max: 8 }, 0).max(1);
            widest = widest.max(k);
            m.record_draft(k, k, 8.0 * k as f64);
            m.record_verify(k + 1, cost(k + 1));
            m.record_step(k, k + 1, 8.0 * k as f64 + cost(k + 1));
        }
        assert!(m.best_k(8) >= 3, "best k {} (widest drafted {widest})", m.best_k(8));
    }

    #[test]
    fn drafting_that_really_pays_goes_on() {
        let (drafting, total, tokens) = simulate(500, 100.0, 10.0, |_, k| 100.0 + 15.0 * k as f64);
        assert!(drafting > 400, "{drafting}");
        assert!(total < tokens as f64 * 100.0 / 2.0, "a 4x win stays");
    }

    #[test]
    fn a_neighbours_bursts_do_not_stop_drafting_that_pays() {
        // Drafting pays 4x; one step in ten is held up five times over (a webview painting).
        let (drafting, _, _) =
            simulate(1000, 100.0, 10.0, |step, k| (100.0 + 15.0 * k as f64) * if step % 10 == 3 { 5.0 } else { 1.0 });
        assert!(drafting > 900, "{drafting} drafting steps of 1000");
    }

    #[test]
    fn a_host_that_slows_down_is_noticed_within_a_few_steps() {
        let slow_from = 200;
        let (drafting, _, _) =
            simulate(2000, 100.0, 10.0, |step, k| if step < slow_from { 100.0 + 15.0 * k as f64 } else { 1000.0 });
        let before = simulate(slow_from, 100.0, 10.0, |_, k| 100.0 + 15.0 * k as f64).0;
        // A few steps to see it (each 11% dearer than plain per token), then rare one-draft probes.
        assert!(drafting - before < 16, "{} drafting steps after the slowdown", drafting - before);
    }

    /// Auto k over a reply with a free drafter (its tokens cost nothing) whose drafts are kept
    /// where `copying(step)`: a plain step costs 50 ms and each extra token 15 ms. Returns
    /// (total ms, tokens, the k of each step).
    fn free_drafter(steps: usize, copying: impl Fn(usize) -> bool) -> (f64, usize, Vec<usize>) {
        let mut m = CostModel::new();
        let cost = |n: usize| 50.0 + 15.0 * (n - 1) as f64;
        let (mut total, mut tokens, mut ks) = (0.0, 0, Vec::new());
        for step in 0..steps {
            let k = m.next_k(KSetting::Auto { max: 8 }, 0);
            let kept = if copying(step) { k } else { 0 };
            m.record_verify(k + 1, cost(k + 1));
            m.record_draft(k, kept, 0.001 * k as f64);
            m.record_step(k, kept + 1, cost(k + 1));
            (total, tokens) = (total + cost(k + 1), tokens + kept + 1);
            ks.push(k);
        }
        (total, tokens, ks)
    }

    #[test]
    fn a_free_drafter_keeps_drafting_through_rejections_and_lengthens_runs() {
        // The reply paraphrases for 30 steps (every draft rejected), then copies.
        let (_, _, ks) = free_drafter(100, |step| step >= 30);
        assert!(ks[30..].iter().filter(|&&k| k == 0).count() < 10, "drafting resumed: {ks:?}");
        assert!(ks[60..].iter().all(|&k| k == 8), "runs of kept drafts reach the longest k: {ks:?}");
    }

    #[test]
    fn a_free_drafter_that_is_never_right_costs_almost_nothing() {
        let (total, tokens, ks) = free_drafter(1000, |_| false);
        let plain = 50.0 * tokens as f64;
        assert!(total < plain * 1.04, "{:.3}x plain's time; k: {:?}", total / plain, &ks[..40]);
    }

    #[test]
    fn parses_k() {
        assert_eq!("4".parse::<KSetting>().unwrap(), KSetting::Fixed(4));
        assert_eq!("auto".parse::<KSetting>().unwrap(), KSetting::Auto { max: 8 });
        assert!("0".parse::<KSetting>().is_err());
        assert!("17".parse::<KSetting>().is_err());
    }
}
