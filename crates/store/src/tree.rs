//! The shape of a conversation: which message follows which, and which are deleted (awaiting
//! undo). Messages form a tree: Regenerate adds a sibling reply, Edit a sibling question, and
//! nothing is removed. A message is shown when neither it nor any message above it is deleted.
//!
//! Every walk here is a loop bounded by the number of messages, never recursion: a chain of
//! 50,000 messages or a cycle from a damaged file must not overflow the stack or spin.

use std::collections::{HashMap, HashSet};

pub(crate) struct Tree {
    parent: HashMap<i64, Option<i64>>,
    deleted: HashSet<i64>,
    /// Each message's children (`None`: the conversation's first messages), oldest first.
    children: HashMap<Option<i64>, Vec<i64>>,
}

impl Tree {
    /// From `(id, parent, deleted)` rows in id order.
    pub(crate) fn new(rows: impl IntoIterator<Item = (i64, Option<i64>, bool)>) -> Self {
        let mut tree = Tree { parent: HashMap::new(), deleted: HashSet::new(), children: HashMap::new() };
        for (id, parent, deleted) in rows {
            tree.parent.insert(id, parent);
            tree.children.entry(parent).or_default().push(id);
            if deleted {
                tree.deleted.insert(id);
            }
        }
        tree
    }

    pub(crate) fn contains(&self, id: i64) -> bool {
        self.parent.contains_key(&id)
    }

    pub(crate) fn parent(&self, id: i64) -> Option<i64> {
        self.parent.get(&id).copied().flatten()
    }

    /// The messages from the first to `leaf`, in order. A `leaf` that is deleted, or under a
    /// deleted message, ends the path at the last message still shown above it.
    pub(crate) fn path_to(&self, leaf: Option<i64>) -> Vec<i64> {
        let mut path = leaf.map(|leaf| self.ancestry(leaf)).unwrap_or_default();
        path.reverse();
        if let Some(hidden) = path.iter().position(|id| self.deleted.contains(id)) {
            path.truncate(hidden);
        }
        path
    }

    /// The shown messages that follow the same message as `id` (itself among them), oldest first.
    pub(crate) fn siblings(&self, id: i64) -> Vec<i64> {
        let parent = self.parent.get(&id).copied().flatten();
        self.shown_children(parent).collect()
    }

    fn shown_children(&self, parent: Option<i64>) -> impl Iterator<Item = i64> + '_ {
        self.children.get(&parent).into_iter().flatten().copied().filter(|c| !self.deleted.contains(c))
    }

    /// The newest shown message at or under `top` (`None`: anywhere): the end of the branch
    /// the user last added to there, which is what switching to `top` shows.
    pub(crate) fn newest_under(&self, top: Option<i64>) -> Option<i64> {
        let mut newest = top.filter(|id| !self.deleted.contains(id));
        let mut stack: Vec<Option<i64>> = vec![top];
        let mut seen = HashSet::new();
        while let Some(at) = stack.pop() {
            if at.is_some_and(|id| self.deleted.contains(&id)) {
                continue;
            }
            for child in self.shown_children(at) {
                if seen.insert(child) {
                    newest = newest.max(Some(child));
                    stack.push(Some(child));
                }
            }
        }
        newest
    }

    /// Every message shown on some branch, oldest first (parents before their children).
    pub(crate) fn shown(&self) -> Vec<i64> {
        let mut shown = Vec::new();
        let mut stack = vec![None];
        while let Some(at) = stack.pop() {
            for child in self.shown_children(at) {
                if shown.len() < self.parent.len() {
                    shown.push(child);
                    stack.push(Some(child));
                }
            }
        }
        shown.sort_unstable();
        shown
    }

    /// Whether `id` is `top` or under it.
    pub(crate) fn is_under(&self, id: i64, top: i64) -> bool {
        self.ancestry(id).contains(&top)
    }

    /// `leaf` and the messages above it, up to the first; none for a message not here.
    fn ancestry(&self, leaf: i64) -> Vec<i64> {
        let mut up = Vec::new();
        let mut next = Some(leaf).filter(|id| self.contains(*id));
        while let Some(id) = next {
            if up.len() > self.parent.len() {
                break; // a cycle: only a damaged file has one
            }
            up.push(id);
            next = self.parent(id);
        }
        up
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 1 -> 2 -> 3, and 2 -> 4 (a regenerated reply), and 1 -> 5 -> 6 (an edited question).
    fn example(deleted: &[i64]) -> Tree {
        let rows = [(1, None), (2, Some(1)), (3, Some(2)), (4, Some(2)), (5, Some(1)), (6, Some(5))];
        Tree::new(rows.map(|(id, p)| (id, p, deleted.contains(&id))))
    }

    #[test]
    fn a_path_runs_from_the_first_message_to_the_leaf() {
        let tree = example(&[]);
        assert_eq!(tree.path_to(Some(3)), [1, 2, 3]);
        assert_eq!(tree.path_to(Some(6)), [1, 5, 6]);
        assert_eq!(tree.path_to(None), Vec::<i64>::new());
        assert_eq!(tree.siblings(3), [3, 4]);
        assert_eq!(tree.siblings(2), [2, 5]);
        assert_eq!(tree.siblings(1), [1]);
    }

    #[test]
    fn deleted_messages_hide_what_is_under_them() {
        let tree = example(&[2]);
        assert_eq!(tree.path_to(Some(3)), [1], "the path stops above the deleted message");
        assert_eq!(tree.siblings(5), [5]);
        assert_eq!(tree.newest_under(Some(1)), Some(6));
        assert_eq!(tree.newest_under(None), Some(6));
        assert!(tree.is_under(3, 2));
        assert!(!tree.is_under(6, 2));
    }

    #[test]
    fn switching_to_a_message_shows_the_newest_branch_under_it() {
        let tree = example(&[]);
        assert_eq!(tree.newest_under(Some(2)), Some(4));
        assert_eq!(tree.newest_under(Some(3)), Some(3));
        assert_eq!(tree.newest_under(None), Some(6));
    }

    #[test]
    fn a_long_chain_and_a_cycle_are_walked_without_recursion_or_end() {
        let n = 50_000;
        let chain = Tree::new((1..=n).map(|id| (id, (id > 1).then_some(id - 1), false)));
        assert_eq!(chain.path_to(Some(n)).len(), n as usize);
        assert_eq!(chain.newest_under(Some(1)), Some(n));
        let cycle = Tree::new([(1, Some(2), false), (2, Some(1), false)]);
        assert!(cycle.path_to(Some(1)).len() <= 3);
        assert_eq!(cycle.newest_under(None), None, "no first message: nothing shown");
    }
}
