//! Constrained decoding: a reply that must match a JSON schema. llguidance compiles the
//! schema and gives, after any prefix of the reply, the set of tokens that keep it valid; the
//! tokens outside it get a score of -inf before any sampling transform.
//!
//! Exactness under speculation: the mask is a function of the reply's tokens alone, so the
//! draft's q and the target's p at one position are masked by the same set, and speculative
//! decoding of the constrained distribution is exact as it is unconstrained. The constraint
//! follows whatever reply it is asked about ([`Constraint::mask`] rolls back or advances to
//! it), so drafting ahead and rolling back need no bookkeeping in the decoding loops.

use crate::error::{Error, Result};
use crate::tokenizer::Tokenizer;
use llguidance::api::TopLevelGrammar;
use llguidance::Matcher;

pub use specula_protocol::Grammar;

/// Compiling a [`Grammar`] to see whether it can be used.
pub trait GrammarCheck {
    /// Refuse a schema llguidance cannot compile, before a reply is queued: compiled against
    /// a vocabulary of single bytes, which every schema error shows on.
    fn validate(&self) -> Result<()>;
}

impl GrammarCheck for Grammar {
    fn validate(&self) -> Result<()> {
        let env = toktrie::ApproximateTokEnv::single_byte_env();
        let mut factory = llguidance::ParserFactory::new_simple(&env).map_err(grammar_error)?;
        factory.quiet();
        let matcher = Matcher::new(factory.create_parser(TopLevelGrammar::from_json_schema(self.schema())));
        match matcher.get_error() {
            Some(e) => Err(Error::Grammar(e)),
            None => Ok(()),
        }
    }
}

pub struct Constraint {
    matcher: Matcher,
    /// The reply tokens the constraint has followed.
    consumed: Vec<u32>,
    /// How many of them the matcher consumed: all, up to the reply's end (a stop token, or
    /// the grammar complete). Tokens past the end are never committed, so any mask serves
    /// there; they are followed without the matcher, and allowed anything.
    matched: usize,
    stop_ids: Vec<u32>,
    /// The allowed set after `consumed`, computed on demand.
    allowed: Option<toktrie::SimpleVob>,
}

impl Constraint {
    pub fn new(grammar: &Grammar, tokenizer: &Tokenizer) -> Result<Self> {
        let matcher = tokenizer.grammar_matcher(grammar.schema())?;
        let stop_ids = tokenizer.stop_ids().collect();
        Ok(Self { matcher, consumed: Vec::new(), matched: 0, stop_ids, allowed: None })
    }

    /// Set the score of every token the grammar forbids after `reply` to -inf.
    pub fn mask(&mut self, logits: &mut [f32], reply: &[u32]) -> Result<()> {
        self.follow(reply)?;
        if self.past_end() {
            return Ok(());
        }
        let allowed = self.allowed()?;
        for (id, score) in logits.iter_mut().enumerate() {
            if !allowed.is_allowed(id as u32) {
                *score = f32::NEG_INFINITY;
            }
        }
        Ok(())
    }

    /// Whether the grammar allows `token` after `reply`.
    pub fn allows(&mut self, reply: &[u32], token: u32) -> Result<bool> {
        self.follow(reply)?;
        Ok(self.past_end() || self.allowed()?.is_allowed(token))
    }

    fn past_end(&self) -> bool {
        self.matched < self.consumed.len()
    }

    fn allowed(&mut self) -> Result<&toktrie::SimpleVob> {
        if self.allowed.is_none() {
            let mask = self.matcher.compute_mask_or_eos().map_err(grammar_error)?;
            self.allowed = Some(mask);
        }
        Ok(self.allowed.as_ref().expect("computed above"))
    }

    /// Bring the matcher to the state after `reply`: roll back what it consumed beyond their
    /// common prefix, then consume the rest up to the reply's end.
    fn follow(&mut self, reply: &[u32]) -> Result<()> {
        let common = crate::tokenizer::common_prefix(&self.consumed, reply);
        if common == self.consumed.len() && common == reply.len() {
            return Ok(());
        }
        if common < self.matched {
            self.matcher.rollback(self.matched - common).map_err(grammar_error)?;
            self.matched = common;
        }
        self.consumed.truncate(common);
        for &token in &reply[common..] {
            let ended = self.past_end() || self.matcher.is_stopped() || self.stop_ids.contains(&token);
            if !ended {
                self.matcher.consume_token(token).map_err(grammar_error)?;
                self.matched += 1;
            }
            self.consumed.push(token);
        }
        self.allowed = None;
        Ok(())
    }
}

/// llguidance's errors, as ours.
fn grammar_error(e: impl std::fmt::Display) -> Error {
    Error::Grammar(e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_schema_that_cannot_compile_is_refused_before_any_reply() {
        assert!(Grammar::JsonObject.validate().is_ok());
        let ok = Grammar::JsonSchema {
            schema: serde_json::json!({"type": "object", "properties": {"a": {"type": "integer"}}}),
        };
        assert!(ok.validate().is_ok());
        let bad = Grammar::JsonSchema { schema: serde_json::json!({"type": "integer", "minimum": 5, "maximum": 1}) };
        let err = bad.validate().unwrap_err();
        assert_eq!(err.code(), "invalid_grammar", "{err}");
        let nonsense = Grammar::JsonSchema { schema: serde_json::json!({"type": "no such type"}) };
        assert!(nonsense.validate().is_err());
    }
}
