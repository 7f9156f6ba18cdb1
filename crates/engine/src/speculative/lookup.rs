//! Prompt lookup: draft by copying what followed the latest earlier occurrence of the last few
//! tokens. It costs almost nothing, and wins when the reply repeats its input ("fix this
//! code", "rewrite this paragraph"). Its proposals are deterministic (q is one-hot).

use super::drafter::{Draft, Drafter};
use super::history::{Match, LONGEST_MATCH};
use crate::decode::Progress;
use crate::error::Result;
use crate::sampling::Sampler;

pub struct PromptLookup {
    /// Longest n-gram to match; longer matches are tried first.
    pub max_ngram: usize,
    pub min_ngram: usize,
}

impl Default for PromptLookup {
    fn default() -> Self {
        Self { max_ngram: 4, min_ngram: 2 }
    }
}

impl PromptLookup {
    /// The continuation after the most recent earlier match of the context's last n tokens.
    pub fn lookup(&self, context: &[u32], k: usize) -> Vec<u32> {
        self.find(context, k).map_or_else(Vec::new, |found| found.tokens)
    }

    /// [`Self::lookup`], with how many tokens the match really spans (up to [`LONGEST_MATCH`],
    /// beyond `max_ngram`): the longer, the likelier the context goes on as it did.
    pub fn find(&self, context: &[u32], k: usize) -> Option<Match> {
        if k == 0 {
            return None;
        }
        for n in (self.min_ngram..=self.max_ngram).rev() {
            if context.len() <= n {
                continue;
            }
            let end = context.len() - n;
            let pattern = &context[end..];
            // Search right to left, excluding the pattern's own position.
            let Some(start) = (0..end).rev().find(|&start| &context[start..start + n] == pattern) else { continue };
            let before = context[..start].iter().rev().zip(context[..end].iter().rev());
            let matched = n + before.take(LONGEST_MATCH.saturating_sub(n)).take_while(|(a, b)| a == b).count();
            let from = start + n;
            let tokens = context[from..(from + k).min(context.len())].to_vec();
            return Some(Match { tokens, matched });
        }
        None
    }
}

impl Drafter for PromptLookup {
    fn name(&self) -> &str {
        "lookup"
    }

    fn prefill(&mut self, _context: &[u32], _progress: Progress) -> Result<Option<usize>> {
        Ok(Some(0))
    }

    fn propose(&mut self, context: &[u32], k: usize, _sampler: &mut Sampler, _position: usize) -> Result<Vec<Draft>> {
        Ok(self.lookup(context, k).into_iter().map(Draft::copied).collect())
    }

    fn rollback(&mut self, _n_past: usize) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_what_followed_the_latest_match() {
        let lookup = PromptLookup::default();
        // "a b c d e ... a b" -> proposes "c d e"
        let context = [1, 2, 3, 4, 5, 9, 1, 2];
        assert_eq!(lookup.lookup(&context, 3), vec![3, 4, 5]);
        assert_eq!(lookup.lookup(&context, 10), vec![3, 4, 5, 9, 1, 2]);
    }

    #[test]
    fn prefers_longer_and_later_matches() {
        let lookup = PromptLookup::default();
        let context = [7, 8, 1, 7, 8, 2, 6, 7, 8];
        assert_eq!(lookup.lookup(&context, 1), vec![2], "the latest occurrence of 7 8");
        assert!(lookup.lookup(&[1, 2, 3], 4).is_empty(), "no repeat, no draft");
    }

    #[test]
    fn measures_how_far_a_match_really_reaches() {
        let lookup = PromptLookup { max_ngram: 3, min_ngram: 2 };
        // "9 1 2 3 4 5" appears twice; the context ends on its second "1 2 3 4 5".
        let context = [0, 9, 1, 2, 3, 4, 5, 6, 8, 9, 1, 2, 3, 4, 5];
        let found = lookup.find(&context, 2).unwrap();
        assert_eq!(found, Match { tokens: vec![6, 8], matched: 6 }, "matched beyond max_ngram");
        assert_eq!(lookup.find(&[4, 5, 4, 5], 2).unwrap().matched, 2);
        assert_eq!(lookup.find(&context, 0), None);
    }
}
