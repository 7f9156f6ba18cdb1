//! The sequences a model ran before, parked so that going back to one costs nothing instead of
//! a prefill: switching chats, or a server whose callers alternate. Each entry is a sequence of
//! token ids and the sequence the model parked after them (moved out, its buffers trimmed only
//! where they were mostly room); a new prompt resumes from the entry sharing its longest prefix.
//! Least recently used entries go first when the memory cap is reached.

use crate::models::SavedState;
use crate::tokenizer::common_prefix;

/// Sequences shorter than this are not worth the memory: their prefill is a fraction of a second.
pub const MIN_SAVED_TOKENS: usize = 256;

struct Entry {
    ids: Vec<u32>,
    state: SavedState,
    used: u64,
}

/// Saved sequences of one model, within `budget` bytes.
pub struct PromptCache {
    entries: Vec<Entry>,
    budget: usize,
    clock: u64,
}

impl PromptCache {
    /// A cache of at most `budget` bytes (0 keeps nothing).
    pub fn new(budget: usize) -> Self {
        Self { entries: Vec::new(), budget, clock: 0 }
    }

    pub fn set_budget(&mut self, budget: usize) {
        self.budget = budget;
        self.evict();
    }

    /// Bytes held.
    pub fn used(&self) -> usize {
        self.entries.iter().map(|e| e.state.bytes).sum()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether a sequence of `ids` is worth keeping.
    pub fn wants(&self, ids: &[u32]) -> bool {
        self.budget > 0 && ids.len() >= MIN_SAVED_TOKENS
    }

    /// Keep `state`, the model after `ids`. Entries it extends (a prefix of `ids`: the same
    /// chat, earlier) are dropped: resuming from this one serves them as well.
    pub fn keep(&mut self, ids: Vec<u32>, state: SavedState) {
        if state.bytes > self.budget {
            return;
        }
        self.entries.retain(|e| common_prefix(&e.ids, &ids) < e.ids.len());
        self.clock += 1;
        self.entries.push(Entry { ids, state, used: self.clock });
        self.evict();
    }

    /// The entry that shares at least `at_least` (and at least one) leading tokens with
    /// `context`, the most of them, taken out: its ids and state.
    pub fn take_best(&mut self, context: &[u32], at_least: usize) -> Option<(Vec<u32>, SavedState)> {
        let (index, shared) = self
            .entries
            .iter()
            .enumerate()
            .map(|(i, e)| (i, common_prefix(&e.ids, context)))
            .max_by_key(|&(_, shared)| shared)?;
        if shared < at_least.max(1) {
            return None;
        }
        let entry = self.entries.remove(index);
        Some((entry.ids, entry.state))
    }

    pub fn clear(&mut self) {
        self.entries.clear();
    }

    fn evict(&mut self) {
        while self.used() > self.budget {
            let Some(oldest) = self.entries.iter().enumerate().min_by_key(|(_, e)| e.used).map(|(i, _)| i) else {
                return;
            };
            self.entries.remove(oldest);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(bytes: usize) -> SavedState {
        SavedState::new(0, bytes, ())
    }

    #[test]
    fn the_longest_shared_prefix_wins_and_the_least_recently_used_goes_first() {
        let mut cache = PromptCache::new(300);
        cache.keep(vec![1, 2, 3, 4], state(100));
        cache.keep(vec![1, 2, 9], state(100));
        cache.keep(vec![7, 7], state(100));
        assert!(cache.take_best(&[1, 2, 3, 4, 5], 5).is_none(), "not enough gained");
        let (ids, _) = cache.take_best(&[1, 2, 3, 4, 5], 1).unwrap();
        assert_eq!(ids, [1, 2, 3, 4], "the longest shared start, taken out");
        assert_eq!(cache.len(), 2);
        cache.keep(vec![1, 2, 3, 4], state(100));
        cache.keep(vec![5], state(100));
        assert_eq!(cache.len(), 3, "the cap holds");
        assert!(cache.take_best(&[1, 2, 9], 3).is_none(), "[1, 2, 9] was the least recently used");
        assert!(cache.take_best(&[7, 7], 1).is_some());
        assert!(cache.take_best(&[8], 0).is_none(), "nothing shared is nothing to resume");
    }

    #[test]
    fn a_longer_state_of_the_same_sequence_replaces_the_shorter_and_an_oversized_one_is_not_kept() {
        let mut cache = PromptCache::new(1000);
        cache.keep(vec![1, 2], state(10));
        cache.keep(vec![1, 2, 3], state(10));
        assert_eq!(cache.len(), 1);
        cache.keep(vec![4], state(2000));
        assert_eq!((cache.len(), cache.used()), (1, 10));
        cache.clear();
        assert!(cache.is_empty());
    }
}
