//! Sequences: what one conversation has left in a model, held apart from the model's weights.
//!
//! A [`Sequence`] is a conversation's state in one decoder: every layer's keys and values and,
//! for a draft whose output layer is cut down, the conversation's own tokens that layer scores
//! besides its frequent ones. The model reads its weights through `&self` and is handed the
//! sequence to run, so sequences are values: the prompt cache parks an idle one by moving it
//! (its buffers, not its rows), and a new one that shares a prefix with another starts from a
//! copy of that prefix alone.
//!
//! Invariants: every layer holds `len()` positions; every conversation token was first fed
//! below `len()`, in rising order; a sequence runs only on the model that made it (its layer
//! count, head shape and KV format), which that model checks when it takes one back.

use crate::error::Result;
use crate::kv_cache::KvCache;
use candle_core::Tensor;

/// One conversation's state in one model.
pub struct Sequence {
    /// One cache a layer, all of one length.
    layers: Vec<KvCache>,
    /// What a cut output layer scores of this conversation (empty for a full layer).
    conversation: Conversation,
}

/// The conversation's tokens a cut output layer scores besides its own, with their rows of the
/// full layer.
#[derive(Clone, Default)]
pub struct Conversation {
    /// Each token with the position it was first fed at (rising): a rollback forgets those
    /// fed after it.
    pub tokens: Vec<(u32, usize)>,
    /// Their rows of the full output layer, `[tokens.len(), hidden]`; never written in place,
    /// so a copy shares them.
    pub rows: Option<Tensor>,
}

impl Conversation {
    pub fn contains(&self, id: u32) -> bool {
        self.tokens.iter().any(|&(t, _)| t == id)
    }

    /// Forget the tokens first fed at `len` or later.
    pub fn truncate(&mut self, len: usize) {
        let keep = self.tokens.partition_point(|&(_, at)| at < len);
        self.tokens.truncate(keep);
        self.rows = match keep {
            0 => None,
            _ => self.rows.take().and_then(|rows| rows.narrow(0, 0, keep).ok()),
        };
    }

    /// Host memory its rows take.
    pub fn bytes(&self) -> usize {
        self.rows.as_ref().map_or(0, |r| r.elem_count() * r.dtype().size_in_bytes())
    }
}

/// A sequence whose buffers are more than this fraction empty is compacted when parked: idle,
/// its room would only take memory from other parked sequences.
const PARKED_SLACK: f64 = 0.25;

impl Sequence {
    /// A sequence of these layers' caches (all empty, of one model) and no conversation.
    pub fn new(layers: Vec<KvCache>) -> Self {
        Self { layers, conversation: Conversation::default() }
    }

    pub fn len(&self) -> usize {
        self.layers.first().map_or(0, KvCache::len)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The most positions it may hold.
    pub fn capacity(&self) -> usize {
        self.layers.first().map_or(0, KvCache::capacity)
    }

    pub fn layers(&self) -> &[KvCache] {
        &self.layers
    }

    pub fn layers_mut(&mut self) -> &mut [KvCache] {
        &mut self.layers
    }

    pub fn conversation(&self) -> &Conversation {
        &self.conversation
    }

    pub fn conversation_mut(&mut self) -> &mut Conversation {
        &mut self.conversation
    }

    /// Forget every position from `len` on: as if they had never been fed.
    pub fn truncate(&mut self, len: usize) {
        self.layers.iter_mut().for_each(|c| c.truncate(len));
        self.conversation.truncate(len);
    }

    /// Memory it holds: its buffers as allocated, and the conversation's rows.
    pub fn bytes(&self) -> usize {
        self.layers.iter().map(KvCache::bytes).sum::<usize>() + self.conversation.bytes()
    }

    /// Memory its live positions and conversation take (what a copy of it takes).
    pub fn live_bytes(&self) -> usize {
        self.layers.iter().map(KvCache::live_bytes).sum::<usize>() + self.conversation.bytes()
    }

    /// A new sequence holding a copy of this one's first `len` positions (at most its length)
    /// and their conversation: what a conversation that shares this prefix starts from.
    pub fn prefix(&self, len: usize) -> Result<Self> {
        let layers = self.layers.iter().map(|c| c.prefix(len)).collect::<Result<Vec<_>>>()?;
        let mut conversation = self.conversation.clone();
        conversation.truncate(len);
        Ok(Self { layers, conversation })
    }

    /// This sequence, ready to be parked: moved as it is, or copied into buffers of its size
    /// where more than a quarter of them would be idle room (and memory allows).
    pub fn parked(self) -> Self {
        let live = self.layers.iter().map(|c| c.len() as f64).sum::<f64>();
        let allocated = self.layers.iter().map(|c| c.allocated() as f64).sum::<f64>();
        if allocated <= live * (1.0 + PARKED_SLACK) {
            return self;
        }
        self.prefix(self.len()).unwrap_or(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    fn sequence(layers: usize, limit: usize) -> Sequence {
        Sequence::new((0..layers).map(|_| KvCache::new(1, limit, 4, &Device::Cpu).unwrap()).collect())
    }

    fn feed(sequence: &mut Sequence, n: usize) {
        let rows = Tensor::ones((1, n, 4), candle_core::DType::F32, &Device::Cpu).unwrap();
        sequence.layers_mut().iter_mut().for_each(|c| c.append(&rows, &rows).unwrap());
    }

    #[test]
    fn a_rollback_forgets_the_conversation_fed_after_it() {
        let mut s = sequence(2, 64);
        feed(&mut s, 10);
        s.conversation_mut().tokens = vec![(7, 2), (9, 5), (11, 8)];
        s.conversation_mut().rows = Some(Tensor::zeros((3, 4), candle_core::DType::F32, &Device::Cpu).unwrap());
        s.truncate(6);
        assert_eq!(s.len(), 6);
        assert_eq!(s.conversation().tokens, vec![(7, 2), (9, 5)]);
        assert_eq!(s.conversation().rows.as_ref().unwrap().dims(), &[2, 4]);
        assert!(s.conversation().contains(9) && !s.conversation().contains(11));
        s.truncate(0);
        assert!(s.conversation().rows.is_none() && s.is_empty());
    }

    #[test]
    fn a_full_sequence_parks_by_moving_and_one_mostly_room_is_compacted() {
        // Limit 8: the first allocation is the whole of it; 7 of 8 positions live is under
        // the slack, so the very buffers move.
        let mut full = sequence(2, 8);
        feed(&mut full, 7);
        let buffer = full.layers()[0].buffers().0.id();
        let parked = full.parked();
        assert_eq!(parked.layers()[0].buffers().0.id(), buffer, "moved, not copied");
        // 3 of 1,024 positions live: copied into buffers of 3.
        let mut roomy = sequence(2, 4096);
        feed(&mut roomy, 3);
        let before = roomy.bytes();
        let parked = roomy.parked();
        assert_eq!((parked.len(), parked.layers()[1].allocated()), (3, 3));
        assert!(parked.bytes() * 100 < before);
    }
}
