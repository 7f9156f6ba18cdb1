//! The plain rate a speculative reply is compared against, measured in that reply.
//!
//! "1.4x faster than plain" is a claim about this reply on this machine as it is now. One
//! single-token pass timed during the prefill could not carry it: it excludes a step's
//! overheads, it is one sample, and the load on the machine (a webview painting, a build)
//! changes while a reply streams. So plain steps are taken during the reply (auto k takes some
//! of its own; the rest are owed here), their wall time is kept, and the figure is the time
//! plain decoding would have taken over the time the reply took, shown only once enough of
//! them have been timed. Plain time is priced stretch by stretch: the tokens of the drafting
//! steps between two plain steps at the plain rate of that moment (the median of the last
//! three plain steps), since the host's speed moves within a reply (a trace on a 2-core host:
//! plain steps at 45-48 ms early in a reply, 27-30 ms later) and one rate for the whole reply,
//! set against drafting steps taken at other moments, inherited that drift. A plain step
//! commits a token like any other, so taking one changes no token of the reply.

/// Plain steps timed before a speedup figure is given.
pub const MIN_PLAIN_SAMPLES: usize = 3;
/// Drafting steps between timed plain steps while the figure still lacks samples (the first
/// figure shows after about 15 steps, some 45 tokens), and once it has them (auto k's own
/// re-measuring interval, so that with auto k nothing more is owed).
const EARLY_GAP: usize = 4;
const LATE_GAP: usize = 32;

/// The plain steps of one reply.
#[derive(Debug, Clone, Default)]
pub struct PlainReference {
    /// Wall time of each plain step, in milliseconds.
    samples: Vec<f64>,
    /// Drafting steps since the last plain one.
    since_plain: usize,
    /// Tokens committed since the last plain step, not yet priced.
    open_tokens: usize,
    /// Tokens priced, and what plain decoding would have taken for them.
    priced_tokens: usize,
    priced_ms: f64,
}

impl PlainReference {
    /// Whether the next step must be plain, to time plain decoding now.
    pub fn owed(&self) -> bool {
        let gap = if self.samples.len() < MIN_PLAIN_SAMPLES { EARLY_GAP } else { LATE_GAP };
        self.since_plain >= gap
    }

    /// A whole step that drafted `k` tokens and committed `tokens` took `ms` of wall time.
    pub fn record_step(&mut self, k: usize, tokens: usize, ms: f64) {
        self.open_tokens += tokens;
        if k > 0 {
            self.since_plain += 1;
            return;
        }
        self.samples.push(ms);
        self.since_plain = 0;
        let rate = self.rate_now().unwrap_or(ms);
        self.priced_ms += self.open_tokens as f64 * rate;
        self.priced_tokens += self.open_tokens;
        self.open_tokens = 0;
    }

    /// Plain decoding's cost per token now: the median of the last three plain steps, so
    /// that one step a page fault held up moves nothing.
    fn rate_now(&self) -> Option<f64> {
        let recent = &self.samples[self.samples.len().saturating_sub(3)..];
        median(recent)
    }

    pub fn samples(&self) -> usize {
        self.samples.len()
    }

    /// The median plain step of this reply, once [`MIN_PLAIN_SAMPLES`] were timed. The median,
    /// not the mean: one step that a page fault or the neighbour's burst held up must not move
    /// the figure. The samples are spread over the reply, so it also sits at the reply's middle
    /// context length, where plain decoding's mean step is.
    pub fn ms_per_token(&self) -> Option<f64> {
        if self.samples.len() < MIN_PLAIN_SAMPLES {
            return None;
        }
        median(&self.samples)
    }

    /// How many times faster than plain decoding `generated` tokens in `elapsed_ms` were:
    /// the plain time of the stretches priced so far, and of the tokens since at today's
    /// rate, over the time taken.
    pub fn speedup(&self, generated: usize, elapsed_ms: f64) -> Option<f64> {
        if self.samples.len() < MIN_PLAIN_SAMPLES {
            return None;
        }
        let unpriced = generated.saturating_sub(self.priced_tokens);
        let plain_ms = self.priced_ms + unpriced as f64 * self.rate_now()?;
        Some(plain_ms / elapsed_ms.max(1e-9))
    }
}

fn median(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    Some(if sorted.len() % 2 == 1 { sorted[mid] } else { (sorted[mid - 1] + sorted[mid]) / 2.0 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_steps_are_owed_often_until_the_figure_has_its_samples_then_rarely() {
        let mut r = PlainReference::default();
        let mut plain_at = Vec::new();
        for step in 0..200 {
            let k = if r.owed() { 0 } else { 4 };
            if k == 0 {
                plain_at.push(step);
            }
            r.record_step(k, k + 1, if k == 0 { 50.0 } else { 90.0 });
        }
        assert_eq!(&plain_at[..MIN_PLAIN_SAMPLES], &[EARLY_GAP, 2 * EARLY_GAP + 1, 3 * EARLY_GAP + 2]);
        let later: Vec<usize> = plain_at.windows(2).skip(MIN_PLAIN_SAMPLES - 1).map(|w| w[1] - w[0]).collect();
        assert!(later.iter().all(|&gap| gap == LATE_GAP + 1), "{later:?}");
    }

    #[test]
    fn auto_ks_own_plain_steps_count_and_reset_the_gap() {
        let mut r = PlainReference::default();
        for _ in 0..EARLY_GAP - 1 {
            r.record_step(3, 4, 80.0);
        }
        r.record_step(0, 1, 40.0);
        assert!(!r.owed());
        assert_eq!(r.samples(), 1);
    }

    #[test]
    fn no_figure_until_enough_plain_steps_then_plain_time_over_the_time_taken() {
        let mut r = PlainReference::default();
        r.record_step(0, 1, 50.0);
        r.record_step(0, 1, 1000.0); // held up once: the median of three ignores it
        assert_eq!(r.speedup(2, 1050.0), None);
        r.record_step(0, 1, 60.0);
        assert_eq!(r.ms_per_token(), Some(60.0));
        // Three plain tokens priced at 50, 60 (median of 50 and 1000... then of three) ...
        let priced = 50.0 + 525.0 + 60.0;
        assert!((r.speedup(3, 1110.0).unwrap() - priced / 1110.0).abs() < 1e-12);
        // ... then 10 drafted tokens in 400 ms, plain at 60 ms a token now: 600 / 400 more.
        r.record_step(4, 10, 400.0);
        let want = (priced + 600.0) / (1110.0 + 400.0);
        assert!((r.speedup(13, 1510.0).unwrap() - want).abs() < 1e-12);
    }

    #[test]
    fn each_stretch_is_priced_at_the_plain_rate_of_its_moment() {
        // A slow moment, then a long fast one: plain 60 ms and drafting 40 ms a token, then
        // 30 and 20. Every stretch is 1.36x faster than plain at its moment: plain would have
        // taken 1,050 ms for what took 770.
        let mut r = PlainReference::default();
        for (plain, drafted, rounds) in [(60.0, 40.0, 1), (30.0, 20.0, 5)] {
            for _ in 0..rounds {
                r.record_step(0, 1, plain);
                r.record_step(3, 4, 4.0 * drafted);
            }
        }
        let speedup = r.speedup(30, 770.0).unwrap();
        // Priced: 60, then 5 tokens at 45 (the median of 60 and 30), 4 x 5 at 30, 4 open at 30.
        assert!((speedup - 1005.0 / 770.0).abs() < 1e-9, "{speedup}");
        // Within 5% of the truth (1.364), where one rate for the whole reply, the median plain
        // step (30 ms), says 30 x 30 / 770 = 1.17.
        assert!((speedup / (1050.0 / 770.0) - 1.0).abs() < 0.05, "{speedup}");
    }
}
