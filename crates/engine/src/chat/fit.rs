//! Fitting a chat into the context by its overflow policy: whole turns leave the model's view
//! (the middle ones, or the oldest), and when what must stay is still too long, tokens are cut
//! from the middle of the prompt, where a marker says so.
//!
//! A turn is a user message and what answers it (the assistant, its tool calls and their
//! results), so that what stays still alternates as templates require (Gemma's raises an
//! error otherwise). The system prompt and the last turn, the question being answered, always
//! stay; truncate-middle keeps the first turn too (what the chat is about).

use super::{Message, Role};
use crate::error::Result;
use specula_protocol::{Overflow, Trim};

/// A prompt that fits, and what was left out of it.
#[derive(Debug, Clone, PartialEq)]
pub struct Fitted {
    pub tokens: Vec<u32>,
    pub trim: Option<Trim>,
}

/// The prompt of `messages` in at most `budget` tokens. `render` gives the prompt of the
/// messages kept; `marker` is put where tokens were cut. With [`Overflow::Stop`], or when
/// everything fits, the prompt is `render(messages)` untouched (a prompt too long for
/// the context is then the caller's error to give).
pub fn fit_chat(
    messages: &[Message],
    overflow: Overflow,
    budget: usize,
    marker: &[u32],
    render: &mut dyn FnMut(&[Message]) -> Result<Vec<u32>>,
) -> Result<Fitted> {
    let whole = render(messages)?;
    if overflow == Overflow::Stop || whole.len() <= budget {
        return Ok(Fitted { tokens: whole, trim: None });
    }
    let system = messages.iter().take_while(|m| m.role == Role::System).count();
    let turns = turn_starts(&messages[system..]);
    // Turns that may go, as indices into `turns`: never the last; the first only when rolling.
    let first_droppable = usize::from(overflow == Overflow::TruncateMiddle);
    let droppable = turns.len().saturating_sub(1).saturating_sub(first_droppable);
    let keep_without = |dropped: usize| -> (Vec<Message>, Trim) {
        let from = turns.get(first_droppable).copied().unwrap_or(0);
        let to = turns.get(first_droppable + dropped).copied().unwrap_or(from);
        let kept = messages[..system + from].iter().chain(&messages[system + to..]).cloned().collect();
        (kept, Trim { first: count(from), messages: count(to - from), tokens: 0 })
    };
    // The fewest turns dropped that fit: a prompt only shortens as turns go.
    let (mut low, mut high) = (1, droppable);
    let mut best = None;
    while low <= high {
        let mid = low + (high - low) / 2;
        let (kept, trim) = keep_without(mid);
        let tokens = render(&kept)?;
        if tokens.len() <= budget {
            best = Some(Fitted { tokens, trim: Some(trim) });
            high = mid - 1;
        } else {
            low = mid + 1;
        }
    }
    if let Some(fitted) = best {
        return Ok(fitted);
    }
    let (kept, mut trim) = keep_without(droppable);
    let tokens = cut_middle(render(&kept)?, budget, marker);
    trim.tokens = count(tokens.1);
    Ok(Fitted { tokens: tokens.0, trim: Some(trim) })
}

/// A count for a [`Trim`] (messages and tokens of one prompt are far fewer than 2^32).
fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Where each turn starts, as indices into `messages` (the chat after its system prompt): at
/// each user message, and at 0 for a chat that starts otherwise.
fn turn_starts(messages: &[Message]) -> Vec<usize> {
    let mut starts: Vec<usize> =
        messages.iter().enumerate().filter(|(i, m)| *i == 0 || m.role == Role::User).map(|(i, _)| i).collect();
    starts.dedup();
    starts
}

/// `tokens` in `budget`: the first half and the last half kept, `marker` between; with how
/// many tokens were cut. A budget smaller than the marker keeps only the end.
pub fn cut_middle(tokens: Vec<u32>, budget: usize, marker: &[u32]) -> (Vec<u32>, usize) {
    if tokens.len() <= budget {
        return (tokens, 0);
    }
    if budget <= marker.len() {
        let cut = tokens.len() - budget;
        return (tokens[cut..].to_vec(), cut);
    }
    let room = budget - marker.len();
    let head = room / 2;
    let tail = room - head;
    let mut kept = Vec::with_capacity(budget);
    kept.extend_from_slice(&tokens[..head]);
    kept.extend_from_slice(marker);
    kept.extend_from_slice(&tokens[tokens.len() - tail..]);
    (kept, tokens.len() - head - tail)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One token per character of each message, and one for each message's frame.
    fn render(messages: &[Message]) -> Result<Vec<u32>> {
        Ok(messages.iter().flat_map(|m| std::iter::once(0).chain(m.content.chars().map(|c| c as u32))).collect())
    }

    fn chat() -> Vec<Message> {
        vec![
            Message::system("sys"),
            Message::user("q1"),
            Message::assistant("a1"),
            Message::user("q2"),
            Message::assistant("a2"),
            Message::user("q3"),
            Message::assistant("a3"),
            Message::user("q4"),
        ]
    }

    fn fit(overflow: Overflow, budget: usize) -> Fitted {
        fit_chat(&chat(), overflow, budget, &[9, 9], &mut render).unwrap()
    }

    fn texts(tokens: &[u32]) -> String {
        tokens.iter().map(|&t| if t == 0 { '|' } else { char::from_u32(t).unwrap_or('?') }).collect()
    }

    #[test]
    fn what_fits_and_stop_are_left_alone() {
        assert_eq!(fit(Overflow::TruncateMiddle, 100).trim, None);
        let stopped = fit(Overflow::Stop, 5);
        assert_eq!((stopped.tokens.len(), stopped.trim), (render(&chat()).unwrap().len(), None));
    }

    #[test]
    fn truncate_middle_keeps_the_system_prompt_and_the_first_exchange_and_drops_the_fewest_turns() {
        // The system prompt is 4 tokens and each other message 3: 25 in all.
        let fitted = fit(Overflow::TruncateMiddle, 19);
        assert_eq!(texts(&fitted.tokens), "|sys|q1|a1|q3|a3|q4");
        assert_eq!(fitted.trim, Some(Trim { first: 2, messages: 2, tokens: 0 }));
        let tighter = fit(Overflow::TruncateMiddle, 18);
        assert_eq!(texts(&tighter.tokens), "|sys|q1|a1|q4");
        assert_eq!(tighter.trim, Some(Trim { first: 2, messages: 4, tokens: 0 }));
    }

    #[test]
    fn rolling_drops_the_oldest_turns() {
        let fitted = fit(Overflow::Rolling, 19);
        assert_eq!(texts(&fitted.tokens), "|sys|q2|a2|q3|a3|q4");
        assert_eq!(fitted.trim, Some(Trim { first: 0, messages: 2, tokens: 0 }));
    }

    #[test]
    fn a_question_too_long_by_itself_loses_its_middle_behind_a_marker() {
        let long = "abcdefghijklmnopqrstuvwxyz";
        let messages = vec![Message::system("s"), Message::user(long)];
        let fitted = fit_chat(&messages, Overflow::TruncateMiddle, 12, &[9, 9], &mut render).unwrap();
        assert_eq!(fitted.tokens.len(), 12);
        assert_eq!(texts(&fitted.tokens), "|s|ab\t\tvwxyz");
        assert_eq!(fitted.trim, Some(Trim { first: 0, messages: 0, tokens: 19 }));
    }

    #[test]
    fn turns_start_at_each_question() {
        let tool_turn = [
            Message::user("q"),
            Message::assistant("calls"),
            Message { role: Role::Tool, ..Message::user("result") },
            Message::assistant("a"),
            Message::user("q2"),
        ];
        assert_eq!(turn_starts(&tool_turn), [0, 4]);
        assert_eq!(turn_starts(&[Message::assistant("hello"), Message::user("q")]), [0, 1]);
    }

    #[test]
    fn a_cut_keeps_both_ends() {
        assert_eq!(cut_middle((0..10).collect(), 6, &[99]), (vec![0, 1, 99, 7, 8, 9], 5));
        assert_eq!(cut_middle((0..10).collect(), 1, &[99, 99]), (vec![9], 9));
        assert_eq!(cut_middle((0..3).collect(), 6, &[99]), (vec![0, 1, 2], 0));
    }
}
