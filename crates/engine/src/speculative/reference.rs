//! The plain rate a speculative reply is compared against, measured in that reply.
//!
//! "1.4x faster than plain" is a claim about this reply on this machine as it is now. One
//! single-token pass timed during the prefill could not carry it: it excludes a step's
//! overheads, it is one sample, and the load on the machine (a webview painting, a build)
//! changes while a reply streams. So plain steps are taken during the reply (auto k takes some
//! of its own; the rest are owed here), their wall time is kept, and the figure is the reply's
//! rate over the median plain step's, shown only once enough of them have been timed. A plain
//! step commits a token like any other, so taking one changes no token of the reply.

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
}

impl PlainReference {
    /// Whether the next step must be plain, to time plain decoding now.
    pub fn owed(&self) -> bool {
        let gap = if self.samples.len() < MIN_PLAIN_SAMPLES { EARLY_GAP } else { LATE_GAP };
        self.since_plain >= gap
    }

    /// A whole step that drafted `k` tokens took `ms` of wall time.
    pub fn record_step(&mut self, k: usize, ms: f64) {
        if k == 0 {
            self.samples.push(ms);
            self.since_plain = 0;
        } else {
            self.since_plain += 1;
        }
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
        let mut sorted = self.samples.clone();
        sorted.sort_by(f64::total_cmp);
        let mid = sorted.len() / 2;
        Some(if sorted.len() % 2 == 1 { sorted[mid] } else { (sorted[mid - 1] + sorted[mid]) / 2.0 })
    }

    /// How many times faster than plain decoding `generated` tokens in `elapsed_ms` were.
    pub fn speedup(&self, generated: usize, elapsed_ms: f64) -> Option<f64> {
        Some(self.ms_per_token()? * generated as f64 / elapsed_ms.max(1e-9))
    }
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
            r.record_step(k, if k == 0 { 50.0 } else { 90.0 });
        }
        assert_eq!(&plain_at[..MIN_PLAIN_SAMPLES], &[EARLY_GAP, 2 * EARLY_GAP + 1, 3 * EARLY_GAP + 2]);
        let later: Vec<usize> = plain_at.windows(2).skip(MIN_PLAIN_SAMPLES - 1).map(|w| w[1] - w[0]).collect();
        assert!(later.iter().all(|&gap| gap == LATE_GAP + 1), "{later:?}");
    }

    #[test]
    fn auto_ks_own_plain_steps_count_and_reset_the_gap() {
        let mut r = PlainReference::default();
        for _ in 0..EARLY_GAP - 1 {
            r.record_step(3, 80.0);
        }
        r.record_step(0, 40.0);
        assert!(!r.owed());
        assert_eq!(r.samples(), 1);
    }

    #[test]
    fn no_figure_until_enough_plain_steps_then_the_median_against_the_rate() {
        let mut r = PlainReference::default();
        r.record_step(0, 50.0);
        r.record_step(0, 1000.0); // held up once: the median ignores it
        assert_eq!(r.speedup(10, 250.0), None);
        r.record_step(0, 60.0);
        assert_eq!(r.ms_per_token(), Some(60.0));
        // 10 tokens in 400 ms, plain takes 60 ms a token: 1.5x.
        assert!((r.speedup(10, 400.0).unwrap() - 1.5).abs() < 1e-12);
        r.record_step(0, 40.0);
        assert_eq!(r.ms_per_token(), Some(55.0));
    }
}
