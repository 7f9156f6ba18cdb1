//! One prompt decoded plain and then speculatively on one session, back to back so both see
//! the machine as it is: the exactness check and the speed comparison that `specula doctor`,
//! `specula device-check` and `specula bench` all make, and the one judgement of what a
//! measured speedup means.

use crate::decode::{GenerateOptions, Generation, NullSink};
use crate::error::Result;
use crate::session::{Decoding, Session};

/// The same prompt decoded both ways.
#[derive(Debug, Clone)]
pub struct PlainVsSpeculative {
    pub plain: Generation,
    pub speculative: Generation,
}

impl PlainVsSpeculative {
    /// Decode `prompt` plain, then as `decoding` says.
    pub fn run(session: &mut Session, prompt: &[u32], options: &GenerateOptions, decoding: Decoding) -> Result<Self> {
        let plain = session.generate_plain(prompt, options, &mut NullSink)?;
        let speculative = session.generate(prompt, options, decoding, &mut NullSink)?;
        Ok(Self { plain, speculative })
    }

    /// Token for token the same reply, as exactness demands of greedy and reproducible modes.
    pub fn identical(&self) -> bool {
        let ids = |g: &Generation| g.tokens.iter().map(|t| t.id).collect::<Vec<u32>>();
        ids(&self.plain) == ids(&self.speculative)
    }

    /// How many times faster speculative decoding was than plain (decode rates, prompt
    /// reading apart).
    pub fn speedup(&self) -> f64 {
        speedup(self.speculative.stats.tokens_per_second, self.plain.stats.tokens_per_second)
    }
}

/// `speculative` tokens a second over `plain`'s; 0 when plain measured nothing.
pub fn speedup(speculative: f64, plain: f64) -> f64 {
    if plain > 0.0 {
        speculative / plain
    } else {
        0.0
    }
}

/// What a measured speedup means on this machine: within 5% either way is noise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    WorthIt,
    Even,
    Slower,
}

impl Verdict {
    pub fn of(speedup: f64) -> Self {
        match speedup {
            s if s >= 1.05 => Verdict::WorthIt,
            s if s >= 0.95 => Verdict::Even,
            _ => Verdict::Slower,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::WorthIt => "worth it on this machine",
            Verdict::Even => "about even on this machine",
            Verdict::Slower => "slower on this machine: with k = auto, Specula falls back to plain decoding",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_speedup_within_five_percent_is_even_and_nothing_measured_is_no_speedup() {
        assert_eq!(
            [1.3, 1.0, 0.96, 0.8].map(Verdict::of),
            [Verdict::WorthIt, Verdict::Even, Verdict::Even, Verdict::Slower]
        );
        assert_eq!(speedup(10.0, 0.0), 0.0);
        assert_eq!(speedup(15.0, 10.0), 1.5);
    }
}
