//! Acceptance: pure functions from the target's view of the drafts to the accepted prefix and
//! the next token.

use crate::decode::Source;
use crate::sampling::sample;
use rand::Rng;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Drafts kept, a prefix of the proposal.
    pub accepted: usize,
    /// The token after them: resampled at the first rejection, or the bonus.
    pub next: u32,
    pub next_source: Source,
}

/// Greedy and reproducible modes: the target's own choice at each of the k+1 positions is a
/// deterministic function of its logits (argmax, or Gumbel-argmax with fixed noise), so the
/// drafts are kept while they equal it and the first differing choice is the next token.
pub fn accept_matching(drafts: &[u32], target_choices: &[u32]) -> Outcome {
    debug_assert_eq!(target_choices.len(), drafts.len() + 1);
    let accepted = drafts.iter().zip(target_choices).take_while(|(d, t)| d == t).count();
    Outcome {
        accepted,
        next: target_choices[accepted],
        next_source: if accepted == drafts.len() { Source::Bonus } else { Source::Resampled },
    }
}

/// The signature of a sample-mode acceptance rule (so a test can show a wrong one is caught).
pub type SampledAccept = fn(drafts: &[u32], p: &[Vec<f32>], q: &[Vec<f32>], rng: &mut rand::rngs::StdRng) -> Outcome;

/// Sample mode, the rule of Leviathan et al. 2023 and Chen et al. 2023: keep draft `d_i` with
/// probability `min(1, p_i(d_i) / q_i(d_i))`; at the first rejection draw from
/// `norm(max(0, p_i - q_i))`; after k acceptances draw the bonus from `p_k`.
/// `p` has k+1 rows and `q` k rows, each a distribution over the vocabulary.
pub fn accept_sampled(drafts: &[u32], p: &[Vec<f32>], q: &[Vec<f32>], rng: &mut rand::rngs::StdRng) -> Outcome {
    for (i, &d) in drafts.iter().enumerate() {
        let (pd, qd) = (p[i][d as usize], q[i][d as usize]);
        let u: f32 = rng.random();
        if qd <= 0.0 || u >= (pd / qd).min(1.0) {
            return Outcome { accepted: i, next: sample_residual(&p[i], &q[i], rng), next_source: Source::Resampled };
        }
    }
    Outcome { accepted: drafts.len(), next: sample(&p[drafts.len()], rng), next_source: Source::Bonus }
}

/// A draw from `norm(max(0, p - q))`; from `p` when the residual is empty (p == q).
fn sample_residual(p: &[f32], q: &[f32], rng: &mut impl Rng) -> u32 {
    let mut residual: Vec<f32> = p.iter().zip(q).map(|(&a, &b)| (a - b).max(0.0)).collect();
    let total: f64 = residual.iter().map(|&r| r as f64).sum();
    if total <= 0.0 {
        return sample(p, rng);
    }
    let inv = (1.0 / total) as f32;
    residual.iter_mut().for_each(|r| *r *= inv);
    sample(&residual, rng)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn matching_keeps_the_agreeing_prefix() {
        assert_eq!(
            accept_matching(&[5, 6, 7], &[5, 6, 9, 1]),
            Outcome { accepted: 2, next: 9, next_source: Source::Resampled }
        );
        assert_eq!(accept_matching(&[5, 6], &[5, 6, 8]), Outcome { accepted: 2, next: 8, next_source: Source::Bonus });
        assert_eq!(accept_matching(&[], &[3]).accepted, 0);
    }

    #[test]
    fn a_draft_the_target_cannot_produce_is_always_rejected() {
        let p = vec![vec![0.0, 1.0], vec![0.5, 0.5]];
        let q = vec![vec![1.0, 0.0]];
        let mut rng = rand::rngs::StdRng::seed_from_u64(0);
        for _ in 0..100 {
            let o = accept_sampled(&[0], &p, &q, &mut rng);
            assert_eq!((o.accepted, o.next), (0, 1));
        }
    }

    #[test]
    fn equal_distributions_always_accept() {
        let p = vec![vec![0.3, 0.7], vec![1.0, 0.0]];
        let q = vec![vec![0.3, 0.7]];
        let mut rng = rand::rngs::StdRng::seed_from_u64(0);
        for d in [0, 1] {
            let o = accept_sampled(&[d], &p, &q, &mut rng);
            assert_eq!(o, Outcome { accepted: 1, next: 0, next_source: Source::Bonus });
        }
    }

    #[test]
    fn one_step_output_is_target_distributed() {
        // Worked example: p = (0.6, 0.4), q = (0.2, 0.8). The draft proposes from q, the
        // output (accepted draft or resample) must follow p.
        let p = vec![vec![0.6, 0.4], vec![1.0, 0.0]];
        let q = vec![vec![0.2, 0.8]];
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let n = 40_000;
        let mut zeros = 0;
        for _ in 0..n {
            let d = sample(&q[0], &mut rng);
            let o = accept_sampled(&[d], &p, &q, &mut rng);
            let first = if o.accepted == 1 { d } else { o.next };
            zeros += (first == 0) as usize;
        }
        assert!((zeros as f64 / n as f64 - 0.6).abs() < 0.01, "{zeros}");
    }
}
