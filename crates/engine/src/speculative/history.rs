//! Free drafts from what a session has seen before this conversation: the prompts and
//! replies of earlier requests (the app: the user's stored conversations). Users ask for the
//! same kinds of things again, and a reply often repeats code or text from an earlier one;
//! SuffixDecoding (arXiv 2411.04975) and llama.cpp's `ngram-mod` draft from such a pool.
//!
//! The pool is a token arena with an index from every 3-token sequence to its latest places.
//! It is bounded: past its cap, the oldest half is forgotten and the index rebuilt (amortised,
//! a constant cost per token added). Nothing is added by decoding itself: whoever owns the
//! session says what to remember, so that a benchmark that decodes the same prompt twice does
//! not draft the second reply from the first.

use std::collections::HashMap;

/// Tokens a match is looked up by.
const KEY_TOKENS: usize = 3;
/// Places kept per key: the latest ones, which vote on the continuation.
const PLACES: usize = 4;
/// How far back a match is measured, beyond its key.
pub(crate) const LONGEST_MATCH: usize = 32;
/// Between documents: no continuation runs across it.
const BOUNDARY: u32 = u32::MAX;

/// The latest places (arena offsets just after a key's tokens), newest first; empty slots
/// are `u32::MAX`.
type Places = [u32; PLACES];

#[derive(Clone)]
pub struct History {
    tokens: Vec<u32>,
    index: HashMap<u64, Places>,
    cap_tokens: usize,
}

/// A continuation found in the pool, and the tokens of context it matched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Match {
    pub tokens: Vec<u32>,
    pub matched: usize,
}

impl History {
    /// A pool that keeps at most `cap_bytes` of tokens and index (about 40 bytes a token).
    pub fn new(cap_bytes: usize) -> Self {
        Self { tokens: Vec::new(), index: HashMap::new(), cap_tokens: (cap_bytes / Self::BYTES_PER_TOKEN).max(64) }
    }

    /// What a remembered token costs: its place in the arena and, at worst, a key of its own.
    pub const BYTES_PER_TOKEN: usize = 4 + 8 + 4 * PLACES + 12;

    /// Remember one document (a prompt, a reply). Past the cap the oldest half is forgotten.
    pub fn remember(&mut self, document: &[u32]) {
        let document = &document[document.len().saturating_sub(self.cap_tokens / 2)..];
        if self.tokens.len() + document.len() + 1 > self.cap_tokens {
            self.forget_oldest_half();
        }
        let start = self.tokens.len();
        self.tokens.extend(document.iter().filter(|&&t| t != BOUNDARY));
        self.tokens.push(BOUNDARY);
        self.index_from(start);
    }

    /// Tokens remembered (boundaries included).
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Memory held, in bytes (arena and index, without allocator slack).
    pub fn bytes(&self) -> usize {
        self.tokens.capacity() * 4 + self.index.capacity() * (8 + 4 * PLACES)
    }

    /// Up to `max` tokens that followed the longest earlier match of the context's end (the
    /// latest among equals), or `None` when the last 3 tokens were never seen.
    pub fn lookup(&self, context: &[u32], max: usize) -> Option<Match> {
        let key = key(context.get(context.len().checked_sub(KEY_TOKENS)?..)?)?;
        let places = self.index.get(&key)?;
        let (place, matched) = places
            .iter()
            .take_while(|&&p| p != u32::MAX)
            .map(|&p| (p as usize, self.match_length(context, p as usize)))
            .max_by_key(|&(p, matched)| (matched, p))?;
        let tokens: Vec<u32> = self.tokens[place..].iter().take(max).take_while(|&&t| t != BOUNDARY).copied().collect();
        (!tokens.is_empty()).then_some(Match { tokens, matched })
    }

    /// How many tokens of `context`'s end match the arena before `place`.
    fn match_length(&self, context: &[u32], place: usize) -> usize {
        context
            .iter()
            .rev()
            .zip(self.tokens[..place].iter().rev())
            .take(LONGEST_MATCH)
            .take_while(|(a, b)| a == b)
            .count()
    }

    fn index_from(&mut self, start: usize) {
        for end in (start + KEY_TOKENS).max(KEY_TOKENS)..self.tokens.len() {
            let Some(key) = key(&self.tokens[end - KEY_TOKENS..end]) else { continue };
            let places = self.index.entry(key).or_insert([u32::MAX; PLACES]);
            places.copy_within(0..PLACES - 1, 1);
            places[0] = end as u32;
        }
    }

    fn forget_oldest_half(&mut self) {
        let cut = self.tokens.len() / 2;
        // Forget whole documents: cut after a boundary.
        let cut = self.tokens[cut..].iter().position(|&t| t == BOUNDARY).map_or(self.tokens.len(), |i| cut + i + 1);
        self.tokens.drain(..cut);
        self.index.clear();
        self.index_from(0);
    }
}

/// The three tokens as one number (exact for ids below 2^21), or `None` across a boundary.
fn key(tokens: &[u32]) -> Option<u64> {
    if tokens.contains(&BOUNDARY) {
        return None;
    }
    Some(tokens.iter().fold(0u64, |k, &t| (k << 21) ^ u64::from(t)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continues_the_longest_earlier_match() {
        let mut history = History::new(1 << 20);
        history.remember(&[1, 2, 3, 4, 5, 6]);
        history.remember(&[9, 2, 3, 4, 7, 8]);
        // "1 2 3 4" matches the first document further back than "2 3 4" matches the second.
        let found = history.lookup(&[0, 1, 2, 3, 4], 8).unwrap();
        assert_eq!(found, Match { tokens: vec![5, 6], matched: 4 });
        // Equal matches: the latest wins.
        assert_eq!(history.lookup(&[2, 3, 4], 1).unwrap().tokens, vec![7]);
        assert_eq!(history.lookup(&[5, 5, 5], 4), None, "never seen");
    }

    #[test]
    fn no_continuation_runs_into_the_next_document() {
        let mut history = History::new(1 << 20);
        history.remember(&[1, 2, 3]);
        history.remember(&[4, 5, 6]);
        assert_eq!(history.lookup(&[1, 2, 3], 4), None, "the first document ends there");
        assert_eq!(history.lookup(&[3, 4, 5], 4), None, "no key spans two documents");
    }

    #[test]
    fn stays_within_its_cap_and_forgets_the_oldest_first() {
        let cap_tokens = 1000;
        let mut history = History::new(cap_tokens * History::BYTES_PER_TOKEN);
        for doc in 0..100u32 {
            let document: Vec<u32> = (0..50).map(|i| doc * 1000 + i).collect();
            history.remember(&document);
            assert!(history.len() <= cap_tokens, "{} tokens", history.len());
        }
        assert!(history.lookup(&[99_000, 99_001, 99_002], 2).is_some(), "the newest is kept");
        assert!(history.lookup(&[0, 1, 2], 2).is_none(), "the oldest is gone");
    }
}
