//! Sampling settings as data, applied identically to the target's and the draft's logits so
//! the speculative guarantee holds for the distribution the user asked for.

use crate::constraint::Constraint;
use crate::error::{Error, Result};
use crate::tokenizer::Tokenizer;
use rand::Rng;
use specula_protocol::GenerateOptions;
use std::borrow::Cow;

pub use specula_protocol::{Mode, SamplingParams};

/// [`SamplingParams`] applied to scores: the distribution a token is drawn from.
pub trait TokenDistribution {
    fn penalized<'a>(&self, logits: &'a [f32], history: &[u32]) -> Cow<'a, [f32]>;
    fn probabilities(&self, logits: &[f32], history: &[u32]) -> Result<Vec<f32>>;
    fn greedy_token(&self, logits: &[f32], history: &[u32]) -> u32;
}

impl TokenDistribution for SamplingParams {
    /// Logits with the repetition penalty applied over the last 64 tokens of `history`
    /// (llama.cpp's default window).
    fn penalized<'a>(&self, logits: &'a [f32], history: &[u32]) -> Cow<'a, [f32]> {
        const WINDOW: usize = 64;
        if self.repetition_penalty == 1.0 {
            return Cow::Borrowed(logits); // the usual case: no copy of 150k scores per position
        }
        let mut logits = logits.to_vec();
        let mut seen = std::collections::HashSet::new();
        for &id in &history[history.len().saturating_sub(WINDOW)..] {
            if let Some(l) = logits.get_mut(id as usize) {
                if seen.insert(id) {
                    *l = if *l > 0.0 { *l / self.repetition_penalty } else { *l * self.repetition_penalty };
                }
            }
        }
        Cow::Owned(logits)
    }

    /// The distribution tokens are drawn from: penalty, temperature, top-k, top-p, min-p,
    /// renormalised. In greedy mode it is the plain softmax (for display: p and q).
    /// An error when the scores hold NaN or infinities (corrupt weights give them), which
    /// would otherwise leave no token to draw.
    fn probabilities(&self, logits: &[f32], history: &[u32]) -> Result<Vec<f32>> {
        check_logits(logits)?;
        let logits = self.penalized(logits, history);
        if self.effective_mode() == Mode::Greedy {
            return Ok(softmax(&logits, 1.0));
        }
        let mut probs = softmax(&logits, self.temperature);
        truncate_distribution(&mut probs, self.top_k, self.top_p, self.min_p);
        Ok(probs)
    }

    /// The greedy token: argmax of the penalised logits (first index on ties).
    fn greedy_token(&self, logits: &[f32], history: &[u32]) -> u32 {
        argmax(&self.penalized(logits, history))
    }
}

/// A token chosen under [`SamplingParams`], with the distribution it came from.
pub struct Choice {
    pub token: u32,
    /// The distribution (see [`TokenDistribution::probabilities`]).
    pub probs: Vec<f32>,
}

impl Choice {
    pub fn prob(&self) -> f32 {
        self.probs[self.token as usize]
    }
}

/// Chooses tokens the way the user asked: settings, the random state of sample mode, and the
/// grammar the reply must match, if any.
pub struct Sampler {
    pub params: SamplingParams,
    rng: rand::rngs::StdRng,
    constraint: Option<Constraint>,
}

impl Sampler {
    pub fn new(params: SamplingParams) -> Self {
        use rand::SeedableRng;
        let rng = rand::rngs::StdRng::seed_from_u64(params.seed);
        Self { params, rng, constraint: None }
    }

    /// The sampler of one reply: its sampling settings and its grammar.
    pub fn for_reply(options: &GenerateOptions, tokenizer: &Tokenizer) -> Result<Self> {
        let constraint = options.grammar.as_ref().map(|g| Constraint::new(g, tokenizer)).transpose()?;
        Ok(Self { constraint, ..Self::new(options.sampling.clone()) })
    }

    pub fn mode(&self) -> Mode {
        self.params.effective_mode()
    }

    /// The token at reply `position` after `history`, given its logits.
    pub fn choose(&mut self, logits: &[f32], history: &[u32], position: usize) -> Result<Choice> {
        let logits = self.constrained(logits, history, position)?;
        self.choose_constrained(&logits, history, position)
    }

    /// [`Self::choose`] for logits [`Self::constrained`] already masked.
    pub fn choose_constrained(&mut self, logits: &[f32], history: &[u32], position: usize) -> Result<Choice> {
        let probs = self.params.probabilities(logits, history)?;
        let token = match self.mode() {
            Mode::Greedy => self.params.greedy_token(logits, history),
            Mode::Reproducible => gumbel_token(&probs, self.params.seed, position),
            Mode::Sample => sample(&probs, &mut self.rng),
        };
        Ok(Choice { token, probs })
    }

    /// `logits` with every token the grammar forbids at reply `position` after `history` set
    /// to -inf (copied only when there is a grammar). The target's p and the draft's q at one
    /// position get the same mask: it depends on the reply's tokens alone.
    pub fn constrained<'a>(&mut self, logits: &'a [f32], history: &[u32], position: usize) -> Result<Cow<'a, [f32]>> {
        let Some(constraint) = &mut self.constraint else { return Ok(Cow::Borrowed(logits)) };
        let mut masked = logits.to_vec();
        constraint.mask(&mut masked, reply_of(history, position))?;
        Ok(Cow::Owned(masked))
    }

    /// Whether the grammar lets `token` follow `history` at reply `position`.
    pub fn allows(&mut self, history: &[u32], position: usize, token: u32) -> Result<bool> {
        match &mut self.constraint {
            Some(constraint) => constraint.allows(reply_of(history, position), token),
            None => Ok(true),
        }
    }

    pub fn rng(&mut self) -> &mut rand::rngs::StdRng {
        &mut self.rng
    }
}

/// The reply's tokens within `history`, when the next token is at reply `position`.
fn reply_of(history: &[u32], position: usize) -> &[u32] {
    &history[history.len().saturating_sub(position)..]
}

/// Scores a distribution can be made from: no NaN or +inf, and at least one token finite
/// (-inf marks a token that must not be drawn).
fn check_logits(logits: &[f32]) -> Result<()> {
    // One pass without early exits, which the compiler vectorizes; the position of a bad
    // score is only looked for when there is one.
    let (mut bad, mut finite) = (false, false);
    for &l in logits {
        bad |= l.is_nan() | (l == f32::INFINITY);
        finite |= l.is_finite();
    }
    if !bad && finite {
        return Ok(());
    }
    if let Some(id) = logits.iter().position(|l| l.is_nan() || *l == f32::INFINITY) {
        return Err(Error::InvalidLogits(format!("token {id} scored {}", logits[id])));
    }
    if !logits.iter().any(|l| l.is_finite()) {
        return Err(Error::InvalidLogits("no token has a finite score".into()));
    }
    Ok(())
}

/// The first index of the largest value (NaN never wins).
pub fn argmax(values: &[f32]) -> u32 {
    // The maximum in vector lanes, then its first position: two passes the compiler
    // vectorizes, where one with a branch per score did not.
    let max = crate::lanes::max_of(values);
    values.iter().position(|&v| v == max).unwrap_or(0) as u32
}

/// softmax(logits / temperature). The exponentials are Cephes' expf polynomial (within 2 ulp of
/// libm's) in straight-line code, which compiles to eight scores an instruction where the CPU
/// has AVX2 and FMA: libm's expf, one call a score, was most of sampling a position (150k
/// scores, about 0.6 ms, paid at each drafted and each verified position). A process keeps
/// one path, so plain and speculative decoding see the same bits.
pub fn softmax(logits: &[f32], temperature: f32) -> Vec<f32> {
    #[cfg(target_arch = "x86_64")]
    if crate::lanes::has_avx2_fma() {
        // SAFETY: the CPU has AVX2 and FMA (checked above).
        return unsafe { softmax_avx2(logits, temperature) };
    }
    softmax_with::<false>(logits, temperature)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn softmax_avx2(logits: &[f32], temperature: f32) -> Vec<f32> {
    softmax_with::<true>(logits, temperature)
}

#[inline(always)]
fn softmax_with<const FMA: bool>(logits: &[f32], temperature: f32) -> Vec<f32> {
    // Loops, not closures: a closure is a function of its own, compiled without the
    // caller's target features (its `mul_add` would be a library call per score).
    let max = crate::lanes::max_of(logits);
    let inv_temperature = 1.0 / temperature;
    let mut probs = vec![0f32; logits.len()];
    for (p, &l) in probs.iter_mut().zip(logits) {
        *p = crate::lanes::exp::<FMA>((l - max) * inv_temperature);
    }
    let inv = (1.0 / crate::lanes::sum_f64(&probs)) as f32;
    for p in probs.iter_mut() {
        *p *= inv;
    }
    probs
}

/// Zero every token outside top-k, top-p and min-p, and renormalise.
fn truncate_distribution(probs: &mut [f32], top_k: usize, top_p: f32, min_p: f32) {
    let mut order: Vec<u32> = (0..probs.len() as u32).filter(|&i| probs[i as usize] > 0.0).collect();
    let by_prob_desc = |a: &u32, b: &u32| probs[*b as usize].total_cmp(&probs[*a as usize]).then(a.cmp(b));
    // Sorting 150k entries per position would dominate a step; the kept set is almost always
    // small, so sort a growing head until it covers what top-k and top-p keep.
    let mut head = if top_k > 0 { top_k } else { 64 };
    loop {
        head = head.min(order.len());
        if head < order.len() {
            order.select_nth_unstable_by(head, by_prob_desc);
        }
        order[..head].sort_unstable_by(by_prob_desc);
        let mass: f64 = order[..head].iter().map(|&i| probs[i as usize] as f64).sum();
        if head == order.len() || (top_k > 0 && head == top_k) || mass >= top_p as f64 {
            break;
        }
        head *= 16;
    }
    let mut keep = head;
    if top_p < 1.0 {
        let mut mass = 0f64;
        for (n, &i) in order[..head].iter().enumerate() {
            mass += probs[i as usize] as f64;
            if mass >= top_p as f64 {
                keep = keep.min(n + 1);
                break;
            }
        }
    }
    if min_p > 0.0 {
        let floor = probs[order[0] as usize] * min_p;
        keep = order[..keep].iter().take_while(|&&i| probs[i as usize] >= floor).count().max(1);
    }
    let mut kept = vec![0f32; probs.len()];
    let mut total = 0f64;
    for &i in &order[..keep] {
        kept[i as usize] = probs[i as usize];
        total += probs[i as usize] as f64;
    }
    let inv = (1.0 / total) as f32;
    for (p, k) in probs.iter_mut().zip(kept) {
        *p = k * inv;
    }
}

/// A draw from `probs` (which sum to one).
pub fn sample(probs: &[f32], rng: &mut impl Rng) -> u32 {
    let u: f64 = rng.random();
    let mut acc = 0f64;
    let mut last_nonzero = 0;
    for (i, &p) in probs.iter().enumerate() {
        if p > 0.0 {
            acc += p as f64;
            last_nonzero = i;
            if u < acc {
                return i as u32;
            }
        }
    }
    last_nonzero as u32
}

/// Gumbel-max with noise fixed by (seed, position): `argmax_i log p_i + g_i`, computed as the
/// equivalent exponential race `argmax_i ln(u_i) / p_i`. The noise depends only on the seed,
/// the position in the reply and the token id, so a draft that proposes with it and a target
/// that verifies with it agree exactly when their distributions pick the same token.
pub fn gumbel_token(probs: &[f32], seed: u64, position: usize) -> u32 {
    let mut best = (f64::NEG_INFINITY, 0u32);
    for (i, &p) in probs.iter().enumerate() {
        if p > 0.0 {
            let u = uniform(seed, position as u64, i as u64);
            let key = u.ln() / p as f64;
            if key > best.0 {
                best = (key, i as u32);
            }
        }
    }
    best.1
}

/// A counter-based uniform in (0, 1): splitmix64 over (seed, position, token).
fn uniform(seed: u64, position: u64, token: u64) -> f64 {
    let mut z = seed
        .wrapping_add(position.wrapping_mul(0x9E37_79B9_7F4A_7C15))
        .wrapping_add(token.wrapping_mul(0xD1B5_4A32_D192_ED03));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    ((z >> 11) as f64 + 0.5) / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn softmax_is_libms_to_a_few_ulp_and_masked_scores_get_zero() {
        let mut logits: Vec<f32> = (0..151_939).map(|i| ((i * 7919) % 2003) as f32 * 0.013 - 9.0).collect();
        logits[17] = f32::NEG_INFINITY;
        logits[40_000] = 30.0;
        for temperature in [1.0, 0.7] {
            let probs = softmax(&logits, temperature);
            let args: Vec<f64> = logits.iter().map(|&l| (l as f64 - 30.0) / temperature as f64).collect();
            let sum: f64 = args.iter().map(|x| x.exp()).sum();
            for (&p, x) in probs.iter().zip(&args).filter(|(_, x)| x.is_finite()) {
                // A few ulp, and the f32 argument's roundings (l - max, 1 / T, the product:
                // each relative 2^-24, times |x| after the exponential).
                let exact = x.exp() / sum;
                assert!((p as f64 - exact).abs() <= (4e-7 + 1.8e-7 * x.abs()) * exact + 1e-30, "{p} vs {exact}");
            }
            assert_eq!(probs[17], 0.0);
            assert!((probs.iter().map(|&p| p as f64).sum::<f64>() - 1.0).abs() < 1e-5);
        }
    }

    #[test]
    fn argmax_takes_the_first_of_equals_and_never_nan() {
        let mut values = vec![0.5f32; 1000];
        values[3] = f32::NAN;
        values[700] = 2.0;
        values[900] = 2.0;
        assert_eq!(argmax(&values), 700);
        assert_eq!(argmax(&[f32::NEG_INFINITY; 9]), 0);
        assert_eq!(argmax(&[1.0, f32::NAN, 3.0]), 2);
    }

    #[test]
    fn top_k_top_p_min_p_keep_the_head() {
        let logits: Vec<f32> = [4.0f32, 3.0, 2.0, 1.0, 0.0].iter().map(|x| x.ln()).collect();
        // probs 0.4, 0.3, 0.2, 0.1, 0
        let params = SamplingParams { temperature: 1.0, top_k: 0, top_p: 0.65, min_p: 0.0, ..Default::default() };
        let p = params.probabilities(&logits, &[]).unwrap();
        assert!((p[0] - 4.0 / 7.0).abs() < 1e-6 && (p[1] - 3.0 / 7.0).abs() < 1e-6, "{p:?}");
        assert_eq!(&p[2..], &[0.0, 0.0, 0.0]);
        let params = SamplingParams { temperature: 1.0, top_k: 3, top_p: 1.0, min_p: 0.0, ..Default::default() };
        let p = params.probabilities(&logits, &[]).unwrap();
        assert_eq!(p.iter().filter(|&&x| x > 0.0).count(), 3);
        let params = SamplingParams { temperature: 1.0, top_k: 0, top_p: 1.0, min_p: 0.5, ..Default::default() };
        let p = params.probabilities(&logits, &[]).unwrap();
        assert_eq!(p.iter().filter(|&&x| x > 0.0).count(), 3, "0.2 >= 0.4 * 0.5 stays: {p:?}");
    }

    #[test]
    fn top_p_grows_the_sorted_head_when_needed() {
        let logits = vec![0.0f32; 1000];
        let params = SamplingParams { temperature: 1.0, top_k: 0, top_p: 0.5, min_p: 0.0, ..Default::default() };
        let p = params.probabilities(&logits, &[]).unwrap();
        assert_eq!(p.iter().filter(|&&x| x > 0.0).count(), 500);
    }

    #[test]
    fn nan_or_infinite_scores_are_an_error_not_a_panic() {
        let mut sampler = Sampler::new(SamplingParams::default());
        for bad in [vec![0.5, f32::NAN, 1.0], vec![f32::INFINITY, 0.0], vec![f32::NEG_INFINITY; 4], vec![]] {
            let err = sampler.choose(&bad, &[], 0).err().expect("an error");
            assert_eq!(err.code(), "invalid_logits", "{bad:?}");
        }
        let greedy = SamplingParams::greedy();
        assert!(greedy.probabilities(&[f32::NAN], &[]).is_err());
    }

    #[test]
    fn repetition_penalty_lowers_seen_tokens() {
        let params = SamplingParams { repetition_penalty: 2.0, ..SamplingParams::greedy() };
        assert_eq!(params.greedy_token(&[2.0, 1.5, -1.0], &[0, 0]), 1);
        assert_eq!(*params.penalized(&[2.0, 1.5, -1.0], &[2]), [2.0, 1.5, -2.0]);
    }

    #[test]
    fn gumbel_draws_follow_the_distribution() {
        let probs = [0.5f32, 0.3, 0.2, 0.0];
        let mut counts = [0usize; 4];
        for position in 0..20_000 {
            counts[gumbel_token(&probs, 7, position) as usize] += 1;
        }
        for (c, p) in counts.iter().zip(probs) {
            assert!((*c as f32 / 20_000.0 - p).abs() < 0.015, "{counts:?}");
        }
        assert_eq!(gumbel_token(&probs, 7, 3), gumbel_token(&probs, 7, 3));
    }

    #[test]
    fn sample_draws_follow_the_distribution() {
        let probs = [0.1f32, 0.0, 0.9];
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let hits = (0..10_000).filter(|_| sample(&probs, &mut rng) == 2).count();
        assert!((hits as f32 / 10_000.0 - 0.9).abs() < 0.02);
    }
}
