//! Which of a chat reply's tokens are a reasoning model's thinking: the sink hears when the
//! thinking opens and closes ([`TokenSink::on_reasoning`]), and the reply's stats say how much
//! there was. The text is split by the one splitter every reader uses
//! ([`specula_protocol::ReasoningSplit`]); the tokens themselves pass unchanged.

use crate::decode::{Flow, StepEvent, TokenEvent, TokenSink};
use specula_protocol::{Reasoning, ReasoningSplit, Trim, THINK_OPEN};
use std::time::Instant;

/// Whether a rendered prompt leaves its reply inside thinking: it ends with an open `<think>`
/// (DeepSeek-R1's template, and thinking-only Qwen3 ones, open it for the model).
pub fn prompt_opens_thinking(prompt_tail: &str) -> bool {
    prompt_tail.trim_end().ends_with(THINK_OPEN)
}

/// A sink that watches a reply's text for thinking and tells the sink it wraps.
pub struct Thinking<'a> {
    inner: &'a mut dyn TokenSink,
    split: ReasoningSplit,
    tokens: u32,
    first_token: Option<Instant>,
    reasoning: Option<Reasoning>,
}

impl<'a> Thinking<'a> {
    /// `opened`: the prompt opened the thinking ([`prompt_opens_thinking`]).
    pub fn new(inner: &'a mut dyn TokenSink, opened: bool) -> Self {
        let split = if opened { ReasoningSplit::opened() } else { ReasoningSplit::new() };
        let reasoning = opened.then(Reasoning::default);
        Self { inner, split, tokens: 0, first_token: None, reasoning }
    }

    /// How much of the reply was thinking, once it is over.
    pub fn finish(self) -> Option<Reasoning> {
        let mut reasoning = self.reasoning?;
        if !reasoning.ended {
            reasoning.tokens = self.tokens;
            reasoning.ms = self.elapsed_ms();
        }
        Some(reasoning)
    }

    fn elapsed_ms(&self) -> f32 {
        self.first_token.map_or(0.0, |t| t.elapsed().as_secs_f32() * 1000.0)
    }
}

impl TokenSink for Thinking<'_> {
    fn on_start(&mut self, prompt_tokens: usize) -> Flow {
        self.inner.on_start(prompt_tokens)
    }
    fn on_prefill(&mut self, done: usize, total: usize) -> Flow {
        self.inner.on_prefill(done, total)
    }
    fn on_trim(&mut self, trim: &Trim) -> Flow {
        self.inner.on_trim(trim)
    }
    fn on_step(&mut self, step: &StepEvent) -> Flow {
        self.inner.on_step(step)
    }
    fn on_reasoning(&mut self, reasoning: &Reasoning) -> Flow {
        self.inner.on_reasoning(reasoning)
    }

    fn on_token(&mut self, token: &TokenEvent) -> Flow {
        if self.first_token.is_none() {
            self.first_token = Some(Instant::now());
            // A prompt that opened the thinking: said before the first token.
            if let Some(opened) = self.reasoning {
                if self.inner.on_reasoning(&opened) == Flow::Stop {
                    return Flow::Stop;
                }
            }
        }
        // A token the reader did not take is not the reply's: it is neither read nor counted.
        if self.inner.on_token(token) == Flow::Stop {
            return Flow::Stop;
        }
        let was_thinking = self.split.is_thinking();
        self.split.push(&token.text);
        self.tokens += 1;
        let change = match (was_thinking, self.split.is_thinking(), self.reasoning) {
            // The reply opened its thinking with this token (it may close it too).
            (false, _, None) if self.split.has_thinking() => {
                let ended = !self.split.is_thinking();
                Some(Reasoning { tokens: self.tokens, ended, ms: if ended { self.elapsed_ms() } else { 0.0 } })
            }
            (true, false, _) => Some(Reasoning { tokens: self.tokens, ended: true, ms: self.elapsed_ms() }),
            _ => None,
        };
        if let Some(reasoning) = change {
            self.reasoning = Some(reasoning);
            // The token is taken; a reader gone meanwhile is seen at the next token.
            let _ = self.inner.on_reasoning(&reasoning);
        }
        Flow::Continue
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use specula_protocol::Source;

    #[derive(Default)]
    struct Heard(Vec<String>);

    impl TokenSink for Heard {
        fn on_token(&mut self, token: &TokenEvent) -> Flow {
            self.0.push(token.text.clone());
            Flow::Continue
        }
        fn on_reasoning(&mut self, r: &Reasoning) -> Flow {
            self.0.push(format!("[{} {}]", r.tokens, if r.ended { "ended" } else { "open" }));
            Flow::Continue
        }
    }

    fn heard(pieces: &[&str], opened: bool) -> (Vec<String>, Option<Reasoning>) {
        let mut heard = Heard::default();
        let mut thinking = Thinking::new(&mut heard, opened);
        for (i, text) in pieces.iter().enumerate() {
            let token = TokenEvent {
                id: i as u32,
                text: text.to_string(),
                source: Source::Target,
                p: None,
                q: None,
                alternatives: Vec::new(),
            };
            thinking.on_token(&token);
        }
        let reasoning = thinking.finish();
        (heard.0, reasoning)
    }

    #[test]
    fn the_sink_hears_where_thinking_opens_and_closes() {
        let (events, reasoning) = heard(&["<", "think", ">", "Hm", ".</", "think", ">\n\n", "Yes"], false);
        assert_eq!(events, ["<", "think", ">", "[3 open]", "Hm", ".</", "think", ">\n\n", "[7 ended]", "Yes"]);
        let reasoning = reasoning.unwrap();
        assert_eq!((reasoning.tokens, reasoning.ended), (7, true));
    }

    #[test]
    fn a_prompt_that_opened_thinking_is_said_before_any_token() {
        let (events, reasoning) = heard(&["Hm", "</think>", "Yes"], true);
        assert_eq!(events, ["[0 open]", "Hm", "</think>", "[2 ended]", "Yes"]);
        assert_eq!(reasoning.unwrap().tokens, 2);
    }

    #[test]
    fn a_reply_cut_off_while_thinking_is_thinking_to_its_end() {
        let (_, reasoning) = heard(&["<think>", "Hm", " so"], false);
        let reasoning = reasoning.unwrap();
        assert_eq!((reasoning.tokens, reasoning.ended), (3, false));
    }

    #[test]
    fn a_reply_without_thinking_hears_nothing_more() {
        let (events, reasoning) = heard(&["<b>", "Hi"], false);
        assert_eq!(events, ["<b>", "Hi"]);
        assert_eq!(reasoning, None);
        assert!(prompt_opens_thinking("<|im_start|>assistant\n<think>\n"));
        assert!(!prompt_opens_thinking("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
    }
}
