//! The compatibility doctor: whether two models can pair as target and draft and, if not,
//! exactly why, from their headers alone, with a draft from the catalogue that would pair.

use crate::catalogue::{family_like, family_of, CatalogueModel};
use serde::Serialize;
use specula_engine::chat::Message;
use specula_engine::compare::{PlainVsSpeculative, Verdict};
use specula_engine::decode::GenerateOptions;
use specula_engine::gguf::GgufFile;
use specula_engine::inspect::{card, ModelCard};
use specula_engine::models;
use specula_engine::sampling::SamplingParams;
use specula_engine::session::{Decoding, DrafterKind, Session};
use specula_engine::speculative::KSetting;
use specula_engine::{Error, Result};
use std::fmt;
use std::path::Path;

/// How many differing tokens a diagnosis spells out.
const EXAMPLES: usize = 5;

#[derive(Debug, Clone, Serialize)]
pub struct TokenDifference {
    pub id: usize,
    pub target: Option<String>,
    pub draft: Option<String>,
}

/// A special token (BOS, EOS, or one the chat template writes) and its id in each model.
#[derive(Debug, Clone, Serialize)]
pub struct SpecialToken {
    pub role: String,
    pub text: String,
    pub target_id: Option<usize>,
    pub draft_id: Option<usize>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Diagnosis {
    pub target: ModelCard,
    pub draft: ModelCard,
    pub compatible: bool,
    pub target_vocab: usize,
    pub draft_vocab: usize,
    /// Ids below both vocabulary sizes whose text differs.
    pub differing_ids: usize,
    pub examples: Vec<TokenDifference>,
    pub special_tokens: Vec<SpecialToken>,
    /// Drafts from the catalogue that pair with the target's family.
    pub suggested_drafts: Vec<CatalogueModel>,
}

/// Compare the vocabularies and special tokens of `target` and `draft`.
pub fn diagnose(target: impl AsRef<Path>, draft: impl AsRef<Path>) -> Result<Diagnosis> {
    let (target, draft) = (GgufFile::open(target)?, GgufFile::open(draft)?);
    models::check_architecture(&target)?;
    models::check_architecture(&draft)?;
    let (t, d) = (target.string_array("tokenizer.ggml.tokens")?, draft.string_array("tokenizer.ggml.tokens")?);
    let differing: Vec<usize> = (0..t.len().min(d.len())).filter(|&i| t[i] != d[i]).collect();
    let examples = differing
        .iter()
        .chain(&[t.len().min(d.len())]) // the first id only one of them has
        .filter(|&&i| i < t.len().max(d.len()))
        .take(EXAMPLES)
        .map(|&id| TokenDifference { id, target: t.get(id).cloned(), draft: d.get(id).cloned() })
        .collect();
    let special_tokens = special_tokens(&target, &t, &d);
    let compatible = differing.is_empty() && t.len() == d.len();
    Ok(Diagnosis {
        suggested_drafts: suggestions(&target, t.len()),
        target: card(&target),
        draft: card(&draft),
        compatible,
        target_vocab: t.len(),
        draft_vocab: d.len(),
        differing_ids: differing.len(),
        examples,
        special_tokens,
    })
}

/// BOS, EOS and the control tokens the target's chat template writes, looked up by text in
/// both vocabularies: a draft that spells `<|im_end|>` with another id cannot follow a chat.
fn special_tokens(target: &GgufFile, t: &[String], d: &[String]) -> Vec<SpecialToken> {
    let id_of = |vocab: &[String], text: &str| vocab.iter().position(|v| v == text);
    let mut found: Vec<(String, String)> = Vec::new();
    for (role, key) in [("bos", "tokenizer.ggml.bos_token_id"), ("eos", "tokenizer.ggml.eos_token_id")] {
        if let Some(text) = target.u32(key).ok().and_then(|id| t.get(id as usize)) {
            found.push((role.into(), text.clone()));
        }
    }
    let template = target.string("tokenizer.chat_template").unwrap_or_default();
    let types = target.i32_array("tokenizer.ggml.token_type").unwrap_or_default();
    const CONTROL: i32 = 3;
    for (id, text) in t.iter().enumerate() {
        let control = types.get(id) == Some(&CONTROL);
        if control && text.len() > 2 && template.contains(text.as_str()) && !found.iter().any(|(_, x)| x == text) {
            found.push(("chat template".into(), text.clone()));
        }
    }
    found
        .into_iter()
        .map(|(role, text)| SpecialToken { target_id: id_of(t, &text), draft_id: id_of(d, &text), role, text })
        .collect()
}

fn suggestions(target: &GgufFile, vocab: usize) -> Vec<CatalogueModel> {
    let file = target.path().file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let family = family_of(&file).or_else(|| family_like(&target.architecture().unwrap_or_default(), vocab));
    family.map(|f| f.drafts.to_vec()).unwrap_or_default()
}

impl fmt::Display for Diagnosis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "target: {} ({}, {})", self.target.name, self.target.architecture, self.target.quantization)?;
        writeln!(f, "draft:  {} ({}, {})", self.draft.name, self.draft.architecture, self.draft.quantization)?;
        match self.compatible {
            true => writeln!(f, "verdict: they can pair: both vocabularies are the same {} tokens", self.target_vocab)?,
            false => writeln!(f, "verdict: they cannot pair")?,
        }
        if self.target_vocab != self.draft_vocab {
            writeln!(f, "- vocabulary size: {} in the target, {} in the draft", self.target_vocab, self.draft_vocab)?;
        }
        if self.differing_ids > 0 {
            let common = self.target_vocab.min(self.draft_vocab);
            writeln!(f, "- {} of the {common} shared ids spell different tokens, for example:", self.differing_ids)?;
        }
        for e in &self.examples {
            let show = |s: &Option<String>| s.as_ref().map_or("(none)".to_string(), |s| format!("{s:?}"));
            writeln!(f, "    id {}: target {}, draft {}", e.id, show(&e.target), show(&e.draft))?;
        }
        for s in &self.special_tokens {
            let show = |id: Option<usize>| id.map_or("missing".to_string(), |id| id.to_string());
            let mark = if s.target_id == s.draft_id { "same" } else { "DIFFERS" };
            writeln!(
                f,
                "- {} {:?}: id {} in the target, {} in the draft ({mark})",
                s.role,
                s.text,
                show(s.target_id),
                show(s.draft_id)
            )?;
        }
        if !self.compatible {
            match self.suggested_drafts.as_slice() {
                [] => writeln!(f, "suggestion: use a smaller model of the target's own family")?,
                drafts => {
                    for d in drafts {
                        writeln!(
                            f,
                            "suggestion: {} (specula pull {} --file {}, about {} MB)",
                            d.name, d.repo, d.file, d.file_mb
                        )?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// The trial's prompt: code, where drafts of the same family agree most, so a pair that does
/// not pay here will not pay on prose either.
const TRIAL_PROMPT: &str = "Write a Python function that tells whether a string is a palindrome.";
/// The draft length of the trial: the middle of what auto k chooses on these pairs.
const TRIAL_K: usize = 4;

/// A short run of a loaded pair on this machine: one prompt decoded plain and speculatively
/// (greedy) back to back, so the user sees the speedup before committing to the pair.
#[derive(Debug, Clone, Serialize)]
pub struct Trial {
    pub tokens: usize,
    pub k: usize,
    pub plain_tokens_per_second: f64,
    pub speculative_tokens_per_second: f64,
    pub measured_speedup: f64,
    pub acceptance_rate: f64,
    pub tokens_per_pass: f64,
    /// Draft/target cost ratio per token.
    pub cost_ratio: Option<f64>,
    /// Leviathan et al.'s speedup from the measured acceptance and cost ratio.
    pub predicted_speedup: Option<f64>,
    /// The two replies agree token for token, as exactness demands.
    pub identical: bool,
}

/// Decode the trial prompt for `tokens` tokens, plain then speculative with the session's draft.
pub fn trial(session: &mut Session, tokens: usize) -> Result<Trial> {
    if session.draft_info().is_none() {
        return Err(Error::InvalidSetting("the trial needs a draft model".into()));
    }
    let prompt = session.chat_prompt(&[Message::user(TRIAL_PROMPT)], &[])?;
    let options = GenerateOptions {
        max_tokens: tokens,
        sampling: SamplingParams::greedy(),
        stop: Vec::new(),
        ..Default::default()
    };
    let decoding = Decoding { drafter: DrafterKind::Model, k: KSetting::Fixed(TRIAL_K) };
    let both = PlainVsSpeculative::run(session, &prompt, &options, decoding)?;
    let stats = both.speculative.stats.speculative.clone().unwrap_or_default();
    Ok(Trial {
        tokens: both.speculative.stats.generated_tokens,
        k: TRIAL_K,
        plain_tokens_per_second: both.plain.stats.tokens_per_second,
        speculative_tokens_per_second: both.speculative.stats.tokens_per_second,
        measured_speedup: both.speedup(),
        acceptance_rate: stats.acceptance_rate,
        tokens_per_pass: stats.tokens_per_pass,
        cost_ratio: stats.cost_ratio,
        predicted_speedup: stats.predicted_speedup,
        identical: both.identical(),
    })
}

impl fmt::Display for Trial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "trial ({} tokens of code, greedy, k = {}): plain {:.1} tok/s, speculative {:.1} tok/s: {:.2}x",
            self.tokens,
            self.k,
            self.plain_tokens_per_second,
            self.speculative_tokens_per_second,
            self.measured_speedup
        )?;
        write!(
            f,
            "  {:.0}% of drafts accepted, {:.2} tokens per target pass",
            self.acceptance_rate * 100.0,
            self.tokens_per_pass
        )?;
        if let (Some(c), Some(p)) = (self.cost_ratio, self.predicted_speedup) {
            write!(f, "; draft costs {c:.2} of a target step; Leviathan et al. predict {p:.2}x")?;
        }
        writeln!(f)?;
        writeln!(f, "  verdict: {}", Verdict::of(self.measured_speedup).as_str())
    }
}
