//! The step: one pass of each model over the rows of every sequence waiting for one.
//!
//! Each reply runs its own decoding loop on its own thread, exactly as it would alone (plain,
//! speculative, any drafter); its models' passes go through one shared [`Step`]. A pass starts
//! once every reply in the step waits for one, or a short grace after the last pass ended (a
//! reply busy between passes, say reading a long prompt's template, holds no one up for
//! longer), and it takes the rows of all of them: one pass of the target over every sequence
//! waiting on the target, one of the draft over those waiting on the draft. Decode tokens,
//! verify blocks and prompt chunks ride in the same pass; a prompt is read in slices of
//! [`PROMPT_SLICE`] rows while others wait, so their tokens keep coming.
//!
//! Invariants: at most one pass runs at a time; a sequence handed in comes back to its owner
//! with exactly the rows it asked for fed, or, on failure, as it was handed in; since
//! [`Decoder::forward_batch`] gives each sequence the bits of its pass alone, a reply decoded
//! beside others is bit for bit the reply alone, whoever joins or leaves.

use crate::error::{Error, Result};
use crate::models::decoder::{Decoder, Rows};
use crate::models::Passes;
use crate::sequence::Sequence;
use candle_core::Tensor;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long a pass waits, after the last one ended, for replies still busy between passes
/// (sampling, drafting copies, sending events): longer than a step's own work (a sampler over
/// 150k scores is under a millisecond), far shorter than a pass (25 ms for one row of the 1.5B).
pub const GRACE: Duration = Duration::from_millis(4);

/// The longest a pass should take while others decode (the most a decoding reply should wait
/// between two tokens): a prompt read beside them takes as many rows as fit in it, by each
/// model's measured time per row.
pub const PASS_BUDGET: Duration = Duration::from_millis(250);

/// Prompt rows a pass takes of one sequence beside others before the model's time per row is
/// measured: on two cores a row of the 1.5B target's prefill takes about 10 ms.
pub const PROMPT_SLICE: usize = 24;

/// The fewest prompt rows a pass takes beside others: fewer would read a long prompt slower
/// than its replies' users would wait for.
const MIN_SLICE: usize = 8;

/// Replies whose models take their passes together. Cheap to share (`Arc`).
#[derive(Default)]
pub struct Step {
    state: Mutex<State>,
    wake: Condvar,
}

/// What the passes so far took: how well replies shared them.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct StepCounts {
    pub passes: u64,
    pub rows: u64,
    /// Sequences summed over passes (`sequences / passes`: the mean sharing).
    pub sequences: u64,
    pub most_sequences: usize,
    /// The most rows one pass took.
    pub most_rows: usize,
}

#[derive(Default)]
struct State {
    /// Replies in the step: a pass waits for each of them (up to [`GRACE`]).
    replies: usize,
    /// Of them, those busy elsewhere (a reader that does not take its events): not waited for.
    away: usize,
    waiting: Vec<Waiting>,
    finished: Vec<Finished>,
    running: bool,
    last_pass: Option<Instant>,
    /// When the first of the sequences waiting now came.
    waiting_since: Option<Instant>,
    pace: Pace,
    next_id: u64,
    counts: StepCounts,
}

/// A sequence handed in for a pass, with what it asked for.
struct Waiting {
    id: u64,
    decoder: Arc<Decoder>,
    sequence: Sequence,
    tokens: Vec<u32>,
    /// Rows fed so far (a prompt read in slices).
    fed: usize,
    /// Its length when handed in: where a failure leaves it.
    start: usize,
    all_positions: bool,
    /// Fed whole, or failed: it leaves the pass.
    done: bool,
}

struct Finished {
    id: u64,
    sequence: Sequence,
    logits: Result<Tensor>,
}

impl Step {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Enter the step for one reply: passes wait for it until the guard is dropped.
    pub fn join(self: &Arc<Self>) -> Membership {
        self.lock().replies += 1;
        Membership { step: self.clone() }
    }

    /// Run `f`, which may block on something else (a reader not taking events), without
    /// holding the other replies' passes up meanwhile.
    pub fn away<T>(&self, f: impl FnOnce() -> T) -> T {
        self.lock().away += 1;
        self.wake.notify_all();
        let out = f();
        self.lock().away -= 1;
        out
    }

    pub fn counts(&self) -> StepCounts {
        self.lock().counts
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A pass runs outside the lock and catches its panics: a poisoned lock still holds
        // consistent state.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Passes for Step {
    fn sharing(&self) -> usize {
        let state = self.lock();
        state.replies.saturating_sub(state.away).max(1)
    }

    /// Append `tokens` to `sequence` in a pass shared with the other replies; the logits of
    /// every new position (`all_positions`) or of the last, as [`Decoder::forward`] gives them.
    fn forward(
        &self,
        decoder: &Arc<Decoder>,
        sequence: &mut Sequence,
        tokens: &[u32],
        all_positions: bool,
    ) -> Result<Tensor> {
        let mut state = self.lock();
        let id = state.next_id;
        state.next_id += 1;
        let start = sequence.len();
        let sequence_in = std::mem::replace(sequence, Sequence::new(Vec::new()));
        if state.waiting.is_empty() {
            state.waiting_since = Some(Instant::now());
        }
        state.waiting.push(Waiting {
            id,
            decoder: decoder.clone(),
            sequence: sequence_in,
            tokens: tokens.to_vec(),
            fed: 0,
            start,
            all_positions,
            done: false,
        });
        self.wake.notify_all();
        loop {
            if let Some(at) = state.finished.iter().position(|f| f.id == id) {
                let finished = state.finished.swap_remove(at);
                *sequence = finished.sequence;
                return finished.logits;
            }
            if state.running {
                state = self.wake.wait(state).unwrap_or_else(|e| e.into_inner());
                continue;
            }
            let wait = state.wait_left(Instant::now());
            if wait.is_zero() {
                state = self.lead(state);
                continue;
            }
            state = self.wake.wait_timeout(state, wait).unwrap_or_else(|e| e.into_inner()).0;
        }
    }
}

impl Step {
    /// Run one pass over everything waiting, outside the lock; the lock again after it.
    fn lead<'a>(&'a self, mut state: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        state.running = true;
        let mut pass = std::mem::take(&mut state.waiting);
        let mut finished = Vec::new();
        let mut pace = std::mem::take(&mut state.pace);
        drop(state);
        let counts = run_pass(&mut pass, &mut finished, &mut pace);
        let mut state = self.lock();
        state.pace = pace;
        state.counts.passes += counts.passes;
        state.counts.rows += counts.rows;
        state.counts.sequences += counts.sequences;
        state.counts.most_sequences = state.counts.most_sequences.max(counts.most_sequences);
        state.counts.most_rows = state.counts.most_rows.max(counts.most_rows);
        // Prompts with rows left wait again, ahead of what arrived during the pass.
        pass.append(&mut state.waiting);
        state.waiting = pass;
        state.finished.append(&mut finished);
        state.running = false;
        state.last_pass = Some(Instant::now());
        self.wake.notify_all();
        state
    }
}

impl State {
    /// How much longer the sequences waiting should wait for others; zero: run the pass now.
    fn wait_left(&self, now: Instant) -> Duration {
        if self.waiting.is_empty() {
            return GRACE;
        }
        let present = self.replies.saturating_sub(self.away);
        if self.waiting.len() >= present {
            return Duration::ZERO;
        }
        // From the later of the last pass's end and the first arrival: replies that start
        // together meet in their first pass too.
        let since = self.last_pass.max(self.waiting_since).unwrap_or(now);
        (since + GRACE).saturating_duration_since(now)
    }
}

/// Leaves the step when dropped: passes stop waiting for this reply.
pub struct Membership {
    step: Arc<Step>,
}

impl Drop for Membership {
    fn drop(&mut self) {
        self.step.lock().replies -= 1;
        self.step.wake.notify_all();
    }
}

/// One pass of each model over `pass`: the rows each sequence still has to feed (a prompt's in
/// slices when others share the pass). Sequences done (or failed) leave `pass` for the
/// thread's finished list; those with prompt rows left stay.
fn run_pass(pass: &mut Vec<Waiting>, finished: &mut Vec<Finished>, pace: &mut Pace) -> StepCounts {
    let shared = pass.len() > 1;
    let mut counts = StepCounts::default();
    let mut models: Vec<Arc<Decoder>> = Vec::new();
    for waiting in pass.iter() {
        if !models.iter().any(|m| Arc::ptr_eq(m, &waiting.decoder)) {
            models.push(waiting.decoder.clone());
        }
    }
    for decoder in &models {
        let mut group: Vec<&mut Waiting> = pass.iter_mut().filter(|w| Arc::ptr_eq(&w.decoder, decoder)).collect();
        let decoding: usize = group.iter().filter(|w| w.all_positions).map(|w| w.tokens.len() - w.fed).sum();
        // The target's and the draft's passes of one step share its budget.
        let slice = pace.slice(decoder, decoding, PASS_BUDGET / models.len() as u32);
        let take: Vec<usize> = group.iter().map(|w| rows_to_take(w, shared, slice)).collect();
        let started = Instant::now();
        counts.passes += 1;
        counts.rows += take.iter().sum::<usize>() as u64;
        counts.most_rows = counts.most_rows.max(take.iter().sum());
        counts.sequences += group.len() as u64;
        counts.most_sequences = counts.most_sequences.max(group.len());
        let results = {
            let mut rows: Vec<Rows> = group
                .iter_mut()
                .zip(&take)
                .map(|(w, &n)| Rows {
                    sequence: &mut w.sequence,
                    tokens: &w.tokens[w.fed..w.fed + n],
                    all_positions: w.all_positions,
                })
                .collect();
            catch_unwind(AssertUnwindSafe(|| decoder.forward_batch(&mut rows)))
        };
        let rows = take.iter().sum();
        pace.measured(decoder, rows, started.elapsed());
        tracing::debug!("pass: {} sequences, {rows} rows, {:?}", group.len(), started.elapsed());
        let results: Vec<Result<Tensor>> = match results {
            Ok(Ok(each)) => each,
            Ok(Err(e)) => {
                (0..group.len()).map(|_| Err(Error::JobPanicked(format!("a shared pass failed: {e}")))).collect()
            }
            Err(panic) => {
                let what = crate::error::panic_message(&panic);
                (0..group.len()).map(|_| Err(Error::JobPanicked(format!("a shared pass panicked: {what}")))).collect()
            }
        };
        for ((waiting, n), result) in group.iter_mut().zip(take).zip(results) {
            match result {
                Ok(logits) => {
                    waiting.fed += n;
                    if waiting.fed == waiting.tokens.len() {
                        finish(waiting, Ok(logits), finished);
                    }
                }
                Err(e) => {
                    let start = waiting.start;
                    waiting.sequence.truncate(start);
                    finish(waiting, Err(e), finished);
                }
            }
        }
    }
    pass.retain(|w| !w.done);
    counts
}

/// The rows of `waiting` this pass feeds: all of them, but a prompt's (no logits but the last
/// wanted) only `slice` when other sequences share the pass.
fn rows_to_take(waiting: &Waiting, shared: bool, slice: usize) -> usize {
    let left = waiting.tokens.len() - waiting.fed;
    match shared && !waiting.all_positions {
        true => left.min(slice),
        false => left,
    }
}

/// Each model's measured time per row of a wide pass, to size prompt slices.
#[derive(Default)]
struct Pace {
    /// By decoder (its address while the step holds it), milliseconds a row.
    row_ms: Vec<(usize, f64)>,
}

impl Pace {
    fn key(decoder: &Arc<Decoder>) -> usize {
        Arc::as_ptr(decoder) as usize
    }

    /// Prompt rows one pass of `decoder` takes beside `decoding` rows within `budget`.
    fn slice(&self, decoder: &Arc<Decoder>, decoding: usize, budget: Duration) -> usize {
        let key = Self::key(decoder);
        match self.row_ms.iter().find(|(k, _)| *k == key) {
            Some(&(_, ms)) => {
                let rows = (budget.as_secs_f64() * 1e3 / ms.max(1e-3)) as usize;
                rows.saturating_sub(decoding).clamp(MIN_SLICE, crate::models::PREFILL_CHUNK)
            }
            None => PROMPT_SLICE,
        }
    }

    /// A pass of `rows` took `took`: wide passes (where the time is the rows', not the weights'
    /// reading) move the estimate.
    fn measured(&mut self, decoder: &Arc<Decoder>, rows: usize, took: Duration) {
        if rows < MIN_SLICE {
            return;
        }
        let ms = took.as_secs_f64() * 1e3 / rows as f64;
        let key = Self::key(decoder);
        match self.row_ms.iter_mut().find(|(k, _)| *k == key) {
            Some((_, old)) => *old = 0.7 * *old + 0.3 * ms,
            None => self.row_ms.push((key, ms)),
        }
    }
}

/// Hand `waiting`'s sequence and logits to its owner, and mark it to leave the pass.
fn finish(waiting: &mut Waiting, logits: Result<Tensor>, finished: &mut Vec<Finished>) {
    let sequence = std::mem::replace(&mut waiting.sequence, Sequence::new(Vec::new()));
    finished.push(Finished { id: waiting.id, sequence, logits });
    waiting.done = true;
}
