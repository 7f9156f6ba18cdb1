//! What the importers of other apps' exports share once a file is parsed: turning a
//! conversation's nodes (each naming its parent by id, some of them skipped) into Specula's
//! ordered, keyed message tree, and the conversation around it.
//!
//! Everything here is iterative: an export's tree is hostile input, and a 50,000-deep chain
//! must not overflow the stack.

use std::collections::{HashMap, HashSet};

use specula_protocol::Role;

use super::{check, ArchivedConversation, ArchivedMessage, ImportError};

/// One node of a foreign conversation tree, as its importer read it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Node {
    /// Unique within its conversation.
    pub id: String,
    /// The node it follows. An id that is not in the conversation counts as none: llama.cpp's
    /// export of the branch on screen leaves out the root its first message hangs from.
    pub parent: Option<String>,
    /// What the history keeps of it; none for a node that is only structure (a root, a tool
    /// call, a hidden message): it is left out and its children hang from its nearest kept
    /// ancestor, so no branch below it is lost.
    pub message: Option<(Role, String)>,
    /// Milliseconds since the Unix epoch; none when the export does not say (the node then
    /// takes its parent's time).
    pub created_at: Option<i64>,
}

/// A foreign conversation, its nodes not yet ordered.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Foreign {
    pub source_id: String,
    pub title: String,
    /// The conversation's own system prompt where the app keeps one apart from the messages.
    pub system_prompt: String,
    pub created_at: Option<i64>,
    pub updated_at: Option<i64>,
    pub nodes: Vec<Node>,
    /// The node the app showed last; none or an unknown id falls back to the newest message.
    pub current: Option<String>,
}

/// The ordered messages of a conversation and the key of its current one.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Tree {
    pub messages: Vec<ArchivedMessage>,
    pub current: Option<u32>,
}

/// How a conversation is named in an error: `conversation 3 ("Title")`, the title cut short
/// so a hostile one cannot flood the message.
pub(crate) fn label(index: usize, title: &str) -> String {
    const MAX_CHARS: usize = 60;
    let mut shown: String = title.chars().take(MAX_CHARS).collect();
    if title.chars().nth(MAX_CHARS).is_some() {
        shown.push('…');
    }
    format!("conversation {index} ({shown:?})")
}

/// Seconds (as the exports write them, fractions allowed) to milliseconds; see [`millis`].
pub(crate) fn seconds_to_ms(seconds: Option<f64>) -> Option<i64> {
    millis(seconds.map(|s| s * 1000.0))
}

/// Milliseconds as a time; none for a value no clock gives (negative, not finite, past the
/// year 275,000), which a hostile file could write and which would sort wrong.
pub(crate) fn millis(ms: Option<f64>) -> Option<i64> {
    ms.filter(|ms| ms.is_finite() && (0.0..8.64e15).contains(ms)).map(|ms| ms.round() as i64)
}

/// What the history keeps of a message read as `role` with `text`. A system or assistant
/// message with no text is left out (ChatGPT's empty system root, a reply that is only a
/// tool call or was stopped before its first word); a user's is kept, as its question may
/// have been only an image and the turn still happened. A tool result is never kept: the
/// history has no place for it (see [`check`]).
pub(crate) fn kept(role: Role, text: String) -> Option<(Role, String)> {
    match role {
        Role::Tool => None,
        Role::System | Role::Assistant if text.trim().is_empty() => None,
        _ => Some((role, text)),
    }
}

/// Hands on the conversations of one file as each is read, refusing a conversation whose
/// source id an earlier one of the file already has (the store would keep one and silently
/// drop the other).
pub(crate) struct Collector<'a> {
    seen: HashMap<String, usize>,
    take: super::Take<'a>,
}

impl<'a> Collector<'a> {
    pub fn new(take: super::Take<'a>) -> Self {
        Self { seen: HashMap::new(), take }
    }

    /// Orders and checks the `index`th conversation of the file and hands it on; one with no
    /// message left is dropped (nothing of it would show).
    pub fn add(&mut self, index: usize, foreign: Foreign) -> Result<(), ImportError> {
        let at = label(index, &foreign.title);
        if let Some(first) = self.seen.get(&foreign.source_id) {
            return Err(ImportError(format!("{at}: has the same id as conversation {first} ({})", foreign.source_id)));
        }
        self.seen.insert(foreign.source_id.clone(), index);
        let Some(conversation) = assemble(foreign).map_err(|why| ImportError(format!("{at}: {why}")))? else {
            return Ok(());
        };
        check(&conversation, &at)?;
        (self.take)(conversation)
    }
}

/// A foreign conversation as an archived one; none when no message is left of it.
fn assemble(foreign: Foreign) -> Result<Option<ArchivedConversation>, String> {
    let fallback = foreign.created_at.or_else(|| foreign.nodes.iter().filter_map(|n| n.created_at).min()).unwrap_or(0);
    let tree = build(foreign.nodes, foreign.current.as_deref(), fallback)?;
    if tree.messages.is_empty() {
        return Ok(None);
    }
    let created_at =
        foreign.created_at.unwrap_or_else(|| tree.messages.iter().map(|m| m.created_at).min().unwrap_or(0));
    let newest = tree.messages.iter().map(|m| m.created_at).max().unwrap_or(created_at);
    Ok(Some(ArchivedConversation {
        source_id: foreign.source_id,
        title: foreign.title,
        system_prompt: foreign.system_prompt,
        created_at,
        updated_at: foreign.updated_at.unwrap_or(newest).max(created_at),
        current: tree.current,
        messages: tree.messages,
    }))
}

/// Orders `nodes` parents first, keys the kept ones 1.. in that order, and finds the current
/// message. Siblings go oldest first (then by id, so the order never depends on the file's);
/// each branch is laid out whole before the next (depth first), as a reader expects.
///
/// Refused: an id used twice, and parent links that loop (a cycle would leave its nodes
/// without a root, so they could not be placed). Children lists the exports also carry are
/// never read: the `parent` link alone decides, so a file whose two disagree reads one way.
pub(crate) fn build(mut nodes: Vec<Node>, current: Option<&str>, default_time: i64) -> Result<Tree, String> {
    // The texts move into the messages rather than being copied: a big export stays one copy.
    let mut contents: Vec<_> = nodes.iter_mut().map(|n| n.message.take()).collect();
    let index = index_ids(&nodes)?;
    let (roots, mut children) = link(&nodes, &index);
    let placed = place(&nodes, &mut contents, roots, &mut children, default_time);
    if let Some(stranded) = placed.resolved.iter().position(Option::is_none) {
        return Err(describe_cycle(&nodes, &index, stranded));
    }
    let current = current
        .and_then(|id| index.get(id))
        .and_then(|&i| placed.resolved[i].flatten())
        .or_else(|| newest(&placed.messages));
    Ok(Tree { messages: placed.messages, current })
}

/// Each id's position, refusing one used twice (which node a child meant would be a guess).
fn index_ids(nodes: &[Node]) -> Result<HashMap<&str, usize>, String> {
    let mut index = HashMap::with_capacity(nodes.len());
    for (i, node) in nodes.iter().enumerate() {
        if index.insert(node.id.as_str(), i).is_some() {
            return Err(format!("message id {:?} is used twice", node.id));
        }
    }
    Ok(index)
}

/// The roots (nodes with no parent in the conversation) and each node's children.
fn link(nodes: &[Node], index: &HashMap<&str, usize>) -> (Vec<usize>, Vec<Vec<usize>>) {
    let mut roots = Vec::new();
    let mut children = vec![Vec::new(); nodes.len()];
    for (i, node) in nodes.iter().enumerate() {
        match node.parent.as_deref().and_then(|p| index.get(p)) {
            Some(&parent) => children[parent].push(i),
            None => roots.push(i),
        }
    }
    (roots, children)
}

/// The messages in order, and for each node the key of itself or of its nearest kept
/// ancestor (`Some(None)`: placed, with no kept ancestor; `None`: never reached, so on a cycle).
struct Placed {
    messages: Vec<ArchivedMessage>,
    resolved: Vec<Option<Option<u32>>>,
}

/// Depth-first from the roots with an explicit stack, each node carrying the key its kept
/// children hang from and the time its undated children take.
fn place(
    nodes: &[Node],
    contents: &mut [Option<(Role, String)>],
    mut roots: Vec<usize>,
    children: &mut [Vec<usize>],
    default_time: i64,
) -> Placed {
    let mut messages = Vec::new();
    let mut resolved = vec![None; nodes.len()];
    sort_siblings(nodes, &mut roots, default_time);
    let mut stack: Vec<(usize, Option<u32>, i64)> = roots.into_iter().rev().map(|r| (r, None, default_time)).collect();
    while let Some((i, parent_key, parent_time)) = stack.pop() {
        let node = &nodes[i];
        let time = node.created_at.unwrap_or(parent_time);
        let key = match contents[i].take() {
            Some((role, text)) => {
                let key = messages.len() as u32 + 1;
                messages.push(ArchivedMessage::plain(key, parent_key, role, text, time));
                Some(key)
            }
            None => parent_key,
        };
        resolved[i] = Some(key);
        let mut kids = std::mem::take(&mut children[i]);
        sort_siblings(nodes, &mut kids, time);
        stack.extend(kids.into_iter().rev().map(|c| (c, key, time)));
    }
    Placed { messages, resolved }
}

/// Oldest first, an undated node counting as its parent's time; ties by id.
fn sort_siblings(nodes: &[Node], siblings: &mut [usize], parent_time: i64) {
    siblings.sort_by(|&a, &b| {
        let time = |i: usize| nodes[i].created_at.unwrap_or(parent_time);
        time(a).cmp(&time(b)).then_with(|| nodes[a].id.cmp(&nodes[b].id))
    });
}

/// The message created last (the later in order on a tie): where an app with no current
/// node of its own would open the conversation.
fn newest(messages: &[ArchivedMessage]) -> Option<u32> {
    messages.iter().max_by_key(|m| (m.created_at, m.key)).map(|m| m.key)
}

/// Names a node of the loop that strands `start`: walking up from it must come back to a
/// node already walked, as every stranded node has a parent (the roots were all placed).
fn describe_cycle(nodes: &[Node], index: &HashMap<&str, usize>, start: usize) -> String {
    let mut walked = HashSet::new();
    let mut at = start;
    while walked.insert(at) {
        match nodes[at].parent.as_deref().and_then(|p| index.get(p)) {
            Some(&parent) => at = parent,
            None => break,
        }
    }
    format!("the parent links of message {:?} go round in a cycle, so it has no first message", nodes[at].id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: &str, parent: Option<&str>, text: Option<&str>, time: i64) -> Node {
        Node {
            id: id.into(),
            parent: parent.map(Into::into),
            message: text.map(|t| (Role::User, t.to_string())),
            created_at: Some(time),
        }
    }

    fn texts(tree: &Tree) -> Vec<&str> {
        tree.messages.iter().map(|m| m.content.as_str()).collect()
    }

    #[test]
    fn skipped_nodes_hand_their_children_to_the_nearest_kept_ancestor() {
        let nodes = vec![
            node("c", Some("skip"), Some("C"), 3),
            node("root", None, None, 0),
            node("a", Some("root"), Some("A"), 1),
            node("skip", Some("a"), None, 2),
        ];
        let tree = build(nodes, Some("c"), 0).unwrap();
        assert_eq!(texts(&tree), ["A", "C"]);
        assert_eq!(tree.messages[1].parent, Some(1));
        assert_eq!(tree.current, Some(2));
    }

    #[test]
    fn branches_are_laid_out_whole_oldest_first() {
        let nodes = vec![
            node("q", None, Some("Q"), 1),
            node("late", Some("q"), Some("late"), 5),
            node("early", Some("q"), Some("early"), 2),
            node("early-child", Some("early"), Some("early child"), 9),
        ];
        let tree = build(nodes, None, 0).unwrap();
        assert_eq!(texts(&tree), ["Q", "early", "early child", "late"]);
        // No current node given: the newest message.
        assert_eq!(tree.current, Some(3));
    }

    #[test]
    fn a_cycle_is_refused_and_named() {
        let nodes =
            vec![node("a", None, Some("A"), 1), node("b", Some("c"), Some("B"), 2), node("c", Some("b"), None, 3)];
        let error = build(nodes, None, 0).unwrap_err();
        assert!(error.contains("cycle"), "{error}");
    }

    #[test]
    fn a_node_its_own_parent_is_a_cycle() {
        let error = build(vec![node("a", Some("a"), Some("A"), 1)], None, 0).unwrap_err();
        assert!(error.contains("\"a\"") && error.contains("cycle"), "{error}");
    }

    #[test]
    fn an_id_used_twice_is_refused() {
        let nodes = vec![node("a", None, Some("A"), 1), node("a", None, Some("B"), 2)];
        assert!(build(nodes, None, 0).unwrap_err().contains("used twice"));
    }

    #[test]
    fn an_unknown_parent_makes_a_root() {
        let tree = build(vec![node("a", Some("gone"), Some("A"), 1)], Some("a"), 0).unwrap();
        assert_eq!(tree.messages[0].parent, None);
    }

    #[test]
    fn seconds_out_of_any_clock_are_none() {
        assert_eq!(seconds_to_ms(Some(1.5)), Some(1500));
        assert_eq!(seconds_to_ms(Some(-1.0)), None);
        assert_eq!(seconds_to_ms(Some(f64::INFINITY)), None);
        assert_eq!(seconds_to_ms(Some(1e300)), None);
    }

    #[test]
    fn a_long_title_is_cut_in_a_label() {
        let long = "x".repeat(200);
        assert_eq!(label(2, &long), format!("conversation 2 (\"{}…\")", "x".repeat(60)));
        assert_eq!(label(3, "Hi \"there\""), "conversation 3 (\"Hi \\\"there\\\"\")");
    }
}
