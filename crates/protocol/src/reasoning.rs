//! A reasoning model's thinking: the `<think>…</think>` block a reply opens with (Qwen3,
//! DeepSeek-R1 and QwQ write it so), told apart from the answer after it. As llama.cpp's
//! server reads it, thinking is recognised only at the start of a reply (or when the prompt
//! itself ended with an open `<think>`): a `<think>` later in an answer is text.
//!
//! One splitter, [`ReasoningSplit`], for every reader: the engine, to say which of a reply's
//! tokens are thinking; the server, to stream `reasoning_content` apart from `content`; and
//! [`split_reasoning`], the whole reply at once, which is the splitter fed the whole text, so
//! a streamed reply's pieces always add up to the non-streamed one's.

use serde::{Deserialize, Serialize};
use specta::Type;

pub const THINK_OPEN: &str = "<think>";
pub const THINK_CLOSE: &str = "</think>";

/// How much of a reply was thinking.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, Type)]
pub struct Reasoning {
    /// The reply's first `tokens` tokens are its thinking, the markers among them; while
    /// `ended` is false, every token so far is.
    pub tokens: u32,
    /// Whether the thinking was closed (`</think>`); a reply that stopped while thinking has
    /// no answer.
    pub ended: bool,
    /// From the reply's first token to the one that closed the thinking (or the last).
    pub ms: f32,
}

/// Text released by the splitter: thinking and answer, either possibly empty.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Released {
    pub reasoning: String,
    pub content: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Nothing but whitespace and a prefix of `<think>` yet: the reply may open thinking.
    Start,
    /// Inside the thinking; `<think>` may still come first when the prompt opened it.
    Thinking,
    /// Just after `</think>`: the whitespace before the answer is dropped.
    Closed,
    /// The answer (or a reply without thinking).
    Answer,
}

/// Splits a reply's text, piece by piece, into thinking and answer. Text that may yet turn
/// out to be a marker (or whitespace at the thinking's end) is held until it is known.
#[derive(Debug, Clone)]
pub struct ReasoningSplit {
    state: State,
    held: String,
    /// Whether any thinking was released (its leading whitespace is dropped until then).
    thought: bool,
    /// Whether the thinking was opened (by the reply or by the prompt).
    opened: bool,
}

impl Default for ReasoningSplit {
    fn default() -> Self {
        Self::new()
    }
}

impl ReasoningSplit {
    /// A reply that may open thinking with `<think>`.
    pub fn new() -> Self {
        Self { state: State::Start, held: String::new(), thought: false, opened: false }
    }

    /// A reply whose prompt ended with an open `<think>`: it begins thinking.
    pub fn opened() -> Self {
        Self { state: State::Thinking, opened: true, ..Self::new() }
    }

    /// Whether the reply is thinking now (what its next token will be).
    pub fn is_thinking(&self) -> bool {
        self.state == State::Thinking
    }

    /// Whether the reply opened thinking at all.
    pub fn has_thinking(&self) -> bool {
        self.opened
    }

    /// Take the next piece of the reply; what can be told apart now.
    pub fn push(&mut self, piece: &str) -> Released {
        self.held.push_str(piece);
        let mut out = Released::default();
        loop {
            let before = self.state;
            match self.state {
                State::Start => self.start(),
                State::Thinking => self.think(&mut out),
                State::Closed => self.close(),
                State::Answer => out.content.push_str(&std::mem::take(&mut self.held)),
            }
            if self.state == before {
                return out;
            }
        }
    }

    /// The reply ended: whatever was held, where it belongs.
    pub fn finish(&mut self) -> Released {
        let held = std::mem::take(&mut self.held);
        match self.state {
            State::Start | State::Answer => Released { content: held, ..Default::default() },
            State::Thinking => {
                let text = if self.thought { held.trim_end() } else { held.trim() };
                // A prompt-opened reply that ended on a partial `<think>` said nothing yet.
                let text = if !self.thought && THINK_OPEN.starts_with(text) { "" } else { text };
                Released { reasoning: text.to_string(), ..Default::default() }
            }
            State::Closed => Released::default(),
        }
    }

    fn start(&mut self) {
        let text = self.held.trim_start();
        if let Some(rest) = text.strip_prefix(THINK_OPEN) {
            self.held = rest.to_string();
            self.state = State::Thinking;
            self.opened = true;
        } else if !THINK_OPEN.starts_with(text) {
            self.state = State::Answer;
        }
    }

    fn think(&mut self, out: &mut Released) {
        if !self.thought {
            // Leading whitespace, and a `<think>` the model wrote after the prompt opened one.
            let text = self.held.trim_start();
            if let Some(rest) = text.strip_prefix(THINK_OPEN) {
                self.held = rest.to_string();
                return self.think(out);
            }
            if text.is_empty() {
                self.held.clear(); // leading whitespace of the thinking is never shown
                return;
            }
            if THINK_OPEN.starts_with(text) {
                return;
            }
            self.held = text.to_string();
        }
        if let Some(at) = self.held.find(THINK_CLOSE) {
            out.reasoning.push_str(self.held[..at].trim_end());
            self.held.drain(..at + THINK_CLOSE.len());
            self.state = State::Closed;
            return;
        }
        // Hold a possible start of `</think>` and the whitespace before it.
        let partial = (1..THINK_CLOSE.len()).rev().find(|&k| self.held.ends_with(&THINK_CLOSE[..k])).unwrap_or(0);
        let cut = self.held[..self.held.len() - partial].trim_end().len();
        if cut > 0 {
            out.reasoning.push_str(&self.held[..cut]);
            self.held.drain(..cut);
            self.thought = true;
        }
    }

    fn close(&mut self) {
        let text = self.held.trim_start();
        if text.is_empty() {
            self.held.clear(); // the whitespace before the answer is never shown
        } else {
            self.held = text.to_string();
            self.state = State::Answer;
        }
    }
}

/// A whole reply's thinking (None when it opened none) and answer; `opened` when its prompt
/// opened the thinking.
pub fn split_reasoning(text: &str, opened: bool) -> (Option<String>, String) {
    let mut split = if opened { ReasoningSplit::opened() } else { ReasoningSplit::new() };
    let mut all = split.push(text);
    let rest = split.finish();
    all.reasoning.push_str(&rest.reasoning);
    all.content.push_str(&rest.content);
    (split.has_thinking().then_some(all.reasoning), all.content)
}

/// A reply's thinking and answer by its tokens, the first `reasoning.tokens` of which (all,
/// while it had not ended) were thinking: what a remote that sent its thinking apart (no
/// markers in the text) and a local reply both say.
/// `tokens` are the tokens' texts.
pub fn split_tokens(tokens: &[&str], reasoning: &Reasoning) -> (String, String) {
    let thinking = if reasoning.ended { (reasoning.tokens as usize).min(tokens.len()) } else { tokens.len() };
    let text = |tokens: &[&str]| tokens.concat();
    // A token that closed the thinking may carry the answer's first text.
    let (thought, spilled) = split_reasoning(&text(&tokens[..thinking]), true);
    let answer = spilled + &text(&tokens[thinking..]);
    (thought.unwrap_or_default(), answer.trim_start().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reply fed in `pieces`: (thinking, answer), released piece by piece.
    fn streamed(pieces: &[&str], opened: bool) -> (Option<String>, String) {
        let mut split = if opened { ReasoningSplit::opened() } else { ReasoningSplit::new() };
        let (mut reasoning, mut content) = (String::new(), String::new());
        for piece in pieces.iter().copied() {
            let out = split.push(piece);
            reasoning += &out.reasoning;
            content += &out.content;
        }
        let out = split.finish();
        reasoning += &out.reasoning;
        content += &out.content;
        (split.has_thinking().then_some(reasoning), content)
    }

    #[test]
    fn thinking_at_the_start_is_told_apart_from_the_answer() {
        let reply = "<think>\nTwo and two.\n</think>\n\nFour.";
        assert_eq!(split_reasoning(reply, false), (Some("Two and two.".into()), "Four.".into()));
        assert_eq!(split_reasoning("Four.", false), (None, "Four.".into()));
        assert_eq!(split_reasoning("  <b>bold</b>", false), (None, "  <b>bold</b>".into()));
    }

    #[test]
    fn a_think_tag_after_the_start_is_text() {
        let reply = "Use <think> tags.";
        assert_eq!(split_reasoning(reply, false), (None, reply.into()));
    }

    #[test]
    fn a_prompt_that_opened_thinking_begins_inside_it() {
        assert_eq!(split_reasoning("Hmm.</think>Yes.", true), (Some("Hmm.".into()), "Yes.".into()));
        assert_eq!(split_reasoning("<think>Hmm.</think>Yes.", true), (Some("Hmm.".into()), "Yes.".into()));
        assert_eq!(split_reasoning("still going", true), (Some("still going".into()), String::new()));
        assert_eq!(split_reasoning("", true), (Some(String::new()), String::new()));
    }

    #[test]
    fn thinking_cut_off_has_no_answer() {
        assert_eq!(split_reasoning("<think>First, the ", false), (Some("First, the".into()), String::new()));
        assert_eq!(split_reasoning("<think>a </thi", false), (Some("a </thi".into()), String::new()));
    }

    #[test]
    fn a_reply_cut_inside_the_opening_tag_is_text() {
        assert_eq!(split_reasoning("<thi", false), (None, "<thi".into()));
    }

    #[test]
    fn every_way_of_cutting_a_reply_into_pieces_gives_the_same_split() {
        let replies = [
            ("<think>\nLet me see: 2 < 3 and </b>.\n</think>\n\nIt is **3**.", false),
            ("\n<think>x</think>", false),
            ("Plain <think> answer", false),
            ("<think>unfinished  \n", false),
            ("\n\nthought é</think>\n\n→ done", true),
        ];
        for (reply, opened) in replies {
            let whole = split_reasoning(reply, opened);
            let chars: Vec<&str> = reply.split_inclusive(|_| true).collect();
            assert_eq!(streamed(&chars, opened), whole, "one character a piece: {reply:?}");
            for cut in 1..chars.len() {
                let at = chars[..cut].concat().len();
                assert_eq!(streamed(&[&reply[..at], &reply[at..]], opened), whole, "cut at {at}: {reply:?}");
            }
        }
    }

    #[test]
    fn a_reply_splits_by_its_thinking_tokens_with_or_without_markers() {
        let local = ["<think>", "Hm", "</think>\n\nSo", " yes"];
        let reasoning = Reasoning { tokens: 3, ended: true, ms: 1.0 };
        assert_eq!(split_tokens(&local, &reasoning), ("Hm".into(), "So yes".into()));
        let remote = ["Hm", " ok", "Yes"];
        assert_eq!(split_tokens(&remote, &Reasoning { tokens: 2, ..reasoning }), ("Hm ok".into(), "Yes".into()));
        let cut_off = Reasoning { tokens: 0, ended: false, ms: 0.0 };
        assert_eq!(split_tokens(&remote, &cut_off), ("Hm okYes".into(), String::new()));
    }

    #[test]
    fn thinking_is_released_as_it_comes_and_only_a_possible_marker_is_held() {
        let mut split = ReasoningSplit::new();
        assert_eq!(split.push("<thi"), Released::default());
        assert!(!split.is_thinking());
        assert_eq!(split.push("nk>\nSo"), Released { reasoning: "So".into(), content: String::new() });
        assert!(split.is_thinking());
        assert_eq!(split.push(" it goes </"), Released { reasoning: " it goes".into(), content: String::new() });
        assert_eq!(split.push("think>\n\nAn"), Released { reasoning: String::new(), content: "An".into() });
        assert!(!split.is_thinking() && split.has_thinking());
    }
}
