//! The tokenizer, built from a GGUF file's own metadata so that one file is enough.
//!
//! SentencePiece vocabularies (Gemma) are built in `spm.rs`. For byte-level BPE (gpt2-style:
//! Qwen, Llama 3, SmolLM2), candle's GGUF-to-tokenizers converter does the work; it knows the
//! `qwen2` and `llama3` pre-tokenizers and falls back to a GPT-2 byte-level one that adds a
//! prefix space. We correct the fallback for the pre-tokenizers llama.cpp defines otherwise
//! (SmolLM's splits every digit and adds no space), as HF's tokenizer.json files do.

mod spm;

use crate::error::{Error, Result};
use crate::gguf::GgufFile;
use candle_core::quantized::tokenizer::TokenizerFromGguf;
use std::collections::BTreeSet;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::PreTokenizerWrapper;

/// Texts of tokens that end a turn in the chat formats llama.cpp knows.
const END_OF_TURN_TEXTS: &[&str] =
    &["<|im_end|>", "<|eot_id|>", "<|end_of_text|>", "<|endoftext|>", "<end_of_turn>", "<|end|>", "<EOT>"];

pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    /// The same tokenizer reading special-token text as plain text: for what users write,
    /// so that typing `<|im_end|>` cannot end a turn or forge a system message.
    literal: tokenizers::Tokenizer,
    /// `tokenizer.ggml.tokens`: the vocabulary by id, as the file spells it.
    tokens: Vec<String>,
    stop_ids: BTreeSet<u32>,
    bos: Option<String>,
    eos: Option<String>,
    /// How the vocabulary spells bytes, for [`Tokenizer::token_bytes`].
    spelling: Spelling,
    /// The parser factory of constrained decoding, built on first use (it indexes the
    /// whole vocabulary once).
    grammar_factory: std::sync::OnceLock<std::sync::Arc<llguidance::ParserFactory>>,
    /// The last schema compiled and its matcher at the start: the choices of one request
    /// (`n`, a list of prompts) share one compilation.
    last_grammar: std::sync::Mutex<Option<(serde_json::Value, llguidance::Matcher)>>,
}

/// How a vocabulary writes a token's bytes.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Spelling {
    /// GPT-2's byte-level BPE: each byte is one printable character.
    ByteLevel,
    /// SentencePiece: `▁` for a space, `<0xNN>` for a raw byte.
    SentencePiece,
    /// The text itself (word-level vocabularies of tests).
    Text,
}

impl Tokenizer {
    pub fn from_gguf(gguf: &GgufFile) -> Result<Self> {
        let (inner, spelling) = match gguf.string("tokenizer.ggml.model").unwrap_or_default().as_str() {
            "llama" => (spm::from_gguf(gguf)?, Spelling::SentencePiece),
            _ => (byte_level_bpe(gguf)?, Spelling::ByteLevel),
        };
        let tokens = gguf.string_array("tokenizer.ggml.tokens")?;
        check_vocabulary(gguf, &tokens)?;
        let id_text = |key: &str| gguf.u32(key).ok().and_then(|id| tokens.get(id as usize).cloned());
        let mut stop_ids: BTreeSet<u32> = ["tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"]
            .iter()
            .filter_map(|key| gguf.u32(key).ok())
            .collect();
        stop_ids.extend(END_OF_TURN_TEXTS.iter().filter_map(|text| inner.token_to_id(text)));
        Ok(Self {
            bos: id_text("tokenizer.ggml.bos_token_id"),
            eos: id_text("tokenizer.ggml.eos_token_id"),
            literal: literal(&inner),
            inner,
            tokens,
            stop_ids,
            spelling,
            grammar_factory: Default::default(),
            last_grammar: Default::default(),
        })
    }

    /// A word-level tokenizer over `tokens` (id = index) that never stops generation: for
    /// small models built in tests, which have no GGUF file.
    pub fn from_vocab(tokens: Vec<String>) -> Result<Self> {
        let vocab = tokens.iter().enumerate().map(|(i, t)| (t.clone(), i as u32)).collect();
        let model = tokenizers::models::wordlevel::WordLevel::builder()
            .vocab(vocab)
            .unk_token(tokens.first().cloned().unwrap_or_default())
            .build()
            .map_err(|e| Error::Tokenizer(e.to_string()))?;
        let inner = tokenizers::Tokenizer::new(model);
        Ok(Self {
            literal: literal(&inner),
            inner,
            tokens,
            stop_ids: BTreeSet::new(),
            bos: None,
            eos: None,
            spelling: Spelling::Text,
            grammar_factory: Default::default(),
            last_grammar: Default::default(),
        })
    }

    /// Token ids of `text`, special tokens parsed (never split), with the model's own BOS setting.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let encoding = self.inner.encode(text, true).map_err(|e| Error::Tokenizer(e.to_string()))?;
        Ok(encoding.get_ids().to_vec())
    }

    /// Token ids of text inside a prompt: special tokens parsed, no BOS.
    pub fn encode_without_bos(&self, text: &str) -> Result<Vec<u32>> {
        let encoding = self.inner.encode(text, false).map_err(|e| Error::Tokenizer(e.to_string()))?;
        Ok(encoding.get_ids().to_vec())
    }

    /// How many tokens `text` a user wrote takes (as [`Self::encode_literal`] counts), exactly
    /// when that is at most `limit`. A long text is counted in pieces of [`COUNT_PIECE`] bytes
    /// cut after a newline, and the count stops once it passes `limit`: a 16 MiB file is
    /// refused for a context of 32k tokens in the memory of one piece, where tokenizing it whole
    /// took about 190 bytes per byte of text. The pieces' sum may differ from the whole's by a
    /// token or two a piece, so a text near `limit` is counted whole.
    pub fn count_within(&self, text: &str, limit: usize) -> Result<TokenCount> {
        if text.len() > COUNT_PIECE {
            let mut counted = 0;
            for piece in pieces(text, COUNT_PIECE) {
                counted += self.encode_literal(piece)?.len();
                if counted > limit.saturating_add(limit / 16 + 16) {
                    return Ok(TokenCount::MoreThan(counted));
                }
            }
        }
        let exact = self.encode_literal(text)?.len();
        Ok(match exact <= limit {
            true => TokenCount::Exact(exact),
            false => TokenCount::MoreThan(exact),
        })
    }

    /// The texts of the special tokens (`<|im_end|>`), for defusing them in user text.
    pub fn special_texts(&self) -> impl Iterator<Item = &str> + '_ {
        self.tokens.iter().map(String::as_str).filter(|t| self.inner.get_added_vocabulary().is_special_token(t))
    }

    /// Token ids of text a user wrote: special-token text in it is read as plain text, and
    /// no BOS is added (it goes inside a prompt).
    pub fn encode_literal(&self, text: &str) -> Result<Vec<u32>> {
        let encoding = self.literal.encode(text, false).map_err(|e| Error::Tokenizer(e.to_string()))?;
        Ok(encoding.get_ids().to_vec())
    }

    /// The ids a prompt starts with (BOS for models that add one).
    pub fn prefix_ids(&self) -> Result<Vec<u32>> {
        self.encode("")
    }

    /// Whether `id` is a special (control) token: text a user writes must never become one.
    pub fn is_special(&self, id: u32) -> bool {
        self.inner.get_added_vocabulary().is_special_token(self.tokens.get(id as usize).map_or("", String::as_str))
    }

    /// The text of `ids`, special tokens included.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.inner.decode(ids, false).map_err(|e| Error::Tokenizer(e.to_string()))
    }

    /// Tokens that end generation: EOS, end-of-turn and their relatives.
    pub fn is_stop(&self, id: u32) -> bool {
        self.stop_ids.contains(&id)
    }

    pub fn stop_ids(&self) -> impl Iterator<Item = u32> + '_ {
        self.stop_ids.iter().copied()
    }

    pub fn vocab(&self) -> &[String] {
        &self.tokens
    }

    /// The bytes each token stands for, by id. Special tokens are their text after a 0xFF
    /// byte (no text is spelled with it), so that no grammar over text can produce them.
    pub fn token_bytes(&self) -> Vec<Vec<u8>> {
        let byte_of = gpt2_unicode_to_byte();
        (0..self.tokens.len() as u32).map(|id| self.bytes_of(id, &byte_of)).collect()
    }

    fn bytes_of(&self, id: u32, byte_of: &std::collections::HashMap<char, u8>) -> Vec<u8> {
        let text = self.tokens[id as usize].as_str();
        if self.is_special(id) {
            return [&[0xFF], text.as_bytes()].concat();
        }
        match self.spelling {
            Spelling::ByteLevel => match text.chars().map(|c| byte_of.get(&c).copied()).collect::<Option<Vec<u8>>>() {
                Some(bytes) => bytes,
                None => text.as_bytes().to_vec(),
            },
            Spelling::SentencePiece => match sentencepiece_byte(text) {
                Some(byte) => vec![byte],
                None => text.replace('\u{2581}', " ").into_bytes(),
            },
            Spelling::Text => text.as_bytes().to_vec(),
        }
    }

    /// The end-of-turn token a constrained reply ends with: the first stop token.
    pub fn end_of_turn(&self) -> Option<u32> {
        END_OF_TURN_TEXTS.iter().find_map(|t| self.inner.token_to_id(t)).or_else(|| self.stop_ids.first().copied())
    }

    /// The parser factory of constrained decoding over this vocabulary.
    pub(crate) fn grammar_factory(&self) -> Result<std::sync::Arc<llguidance::ParserFactory>> {
        if let Some(factory) = self.grammar_factory.get() {
            return Ok(factory.clone());
        }
        let eos = self.end_of_turn().unwrap_or(self.tokens.len() as u32);
        let info = toktrie::TokRxInfo::new(self.tokens.len() as u32, eos);
        let trie = toktrie::TokTrie::from(&info, &self.token_bytes());
        let env: toktrie::TokEnv = std::sync::Arc::new(toktrie::ApproximateTokEnv::new(trie));
        let mut factory = llguidance::ParserFactory::new_simple(&env).map_err(|e| Error::Grammar(e.to_string()))?;
        factory.quiet();
        Ok(self.grammar_factory.get_or_init(|| std::sync::Arc::new(factory)).clone())
    }

    /// A matcher of `schema` at the reply's start, compiled unless it is the last one.
    pub(crate) fn grammar_matcher(&self, schema: serde_json::Value) -> Result<llguidance::Matcher> {
        let mut last = self.last_grammar.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((_, matcher)) = last.as_ref().filter(|(compiled, _)| *compiled == schema) {
            return Ok(matcher.deep_clone());
        }
        let grammar = llguidance::api::TopLevelGrammar::from_json_schema(schema.clone());
        let matcher = llguidance::Matcher::new(self.grammar_factory()?.create_parser(grammar));
        if let Some(e) = matcher.get_error() {
            return Err(Error::Grammar(e));
        }
        *last = Some((schema, matcher.deep_clone()));
        Ok(matcher)
    }

    pub fn bos_text(&self) -> Option<&str> {
        self.bos.as_deref()
    }

    pub fn eos_text(&self) -> Option<&str> {
        self.eos.as_deref()
    }

    /// A streaming decoder for one reply.
    pub fn stream(&self) -> TokenStream<'_> {
        TokenStream { tokenizer: self, ids: Vec::new(), prefix: 0, read: 0 }
    }
}

fn literal(inner: &tokenizers::Tokenizer) -> tokenizers::Tokenizer {
    let mut literal = inner.clone();
    literal.set_encode_special_tokens(true);
    literal
}

/// A vocabulary the rest of the metadata agrees with: not empty, token types one per token,
/// special ids inside it.
fn check_vocabulary(gguf: &GgufFile, tokens: &[String]) -> Result<()> {
    if tokens.is_empty() {
        return Err(Error::BadMetadata("the vocabulary (`tokenizer.ggml.tokens`) is empty".into()));
    }
    if gguf.content().metadata.contains_key("tokenizer.ggml.token_type") {
        let types = gguf.i32_array("tokenizer.ggml.token_type")?;
        if types.len() != tokens.len() {
            let (t, v) = (types.len(), tokens.len());
            return Err(Error::BadMetadata(format!("{t} token types for a vocabulary of {v}")));
        }
    }
    for key in ["bos", "eos", "eot", "unknown", "padding", "pad"].map(|k| format!("tokenizer.ggml.{k}_token_id")) {
        if gguf.content().metadata.contains_key(&key) {
            let id = gguf.u32(&key)?;
            if id as usize >= tokens.len() {
                return Err(Error::BadMetadata(format!("`{key}` is {id}, outside the vocabulary of {}", tokens.len())));
            }
        }
    }
    Ok(())
}

/// GPT-2 style byte-level BPE (`tokenizer.ggml.model` = `gpt2`: Qwen, Llama 3, SmolLM2).
fn byte_level_bpe(gguf: &GgufFile) -> Result<tokenizers::Tokenizer> {
    let mut inner =
        tokenizers::Tokenizer::from_gguf(gguf.content()).map_err(|e| Error::Tokenizer(crate::error::first_line(&e)))?;
    let pre = gguf.string("tokenizer.ggml.pre").unwrap_or_default();
    if let Some(pre_tokenizer) = corrected_pre_tokenizer(&pre) {
        inner.with_pre_tokenizer(Some(pre_tokenizer));
    }
    Ok(inner)
}

fn corrected_pre_tokenizer(pre: &str) -> Option<PreTokenizerWrapper> {
    match pre {
        // candle builds these right.
        "qwen2" | "llama3" | "llama-bpe" | "smaug-bpe" | "lfm2" => None,
        "smollm" => {
            Some(Sequence::new(vec![Digits::new(true).into(), ByteLevel::new(false, true, true).into()]).into())
        }
        _ => Some(ByteLevel::new(false, true, true).into()),
    }
}

/// GPT-2's byte-level alphabet, read backwards: the printable character that stands for
/// each byte in a byte-level BPE vocabulary.
fn gpt2_unicode_to_byte() -> std::collections::HashMap<char, u8> {
    let printable = |b: u8| matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    let mut shifted = 0u32;
    (0..=255u8)
        .map(|b| match printable(b) {
            true => (char::from(b), b),
            false => {
                shifted += 1;
                (char::from_u32(255 + shifted).expect("a valid code point"), b)
            }
        })
        .collect()
}

/// The byte of a SentencePiece byte token, `<0x0A>`.
fn sentencepiece_byte(text: &str) -> Option<u8> {
    let hex = text.strip_prefix("<0x")?.strip_suffix('>')?;
    (hex.len() == 2).then(|| u8::from_str_radix(hex, 16).ok()).flatten()
}

/// Incremental detokenisation: text is released only once it forms whole UTF-8 characters.
///
/// A byte-level BPE token can hold part of a character (emoji, CJK); decoding it alone gives
/// U+FFFD. We decode a short window of recent ids and release the new suffix only when the
/// window no longer ends in a replacement character.
pub struct TokenStream<'a> {
    tokenizer: &'a Tokenizer,
    ids: Vec<u32>,
    /// Start of the decode window.
    prefix: usize,
    /// End of the text already released.
    read: usize,
}

impl TokenStream<'_> {
    /// Feed one token; returns the text it completes, possibly empty. Special tokens
    /// (end-of-turn markers) are not part of the reply text.
    pub fn push(&mut self, id: u32) -> Result<String> {
        let decode = |ids: &[u32]| self.tokenizer.inner.decode(ids, true).map_err(|e| Error::Tokenizer(e.to_string()));
        let before = decode(&self.ids[self.prefix..self.read])?;
        self.ids.push(id);
        let after = decode(&self.ids[self.prefix..])?;
        if after.len() > before.len() && !after.ends_with('\u{FFFD}') && after.is_char_boundary(before.len()) {
            let text = after[before.len()..].to_string();
            self.prefix = self.read;
            self.read = self.ids.len();
            Ok(text)
        } else {
            Ok(String::new())
        }
    }

    /// Whatever is held back at the end of a reply (an incomplete character), lossily.
    pub fn flush(&mut self) -> Result<String> {
        let before = self.tokenizer.inner.decode(&self.ids[self.prefix..self.read], true);
        let after = self.tokenizer.inner.decode(&self.ids[self.prefix..], true);
        self.prefix = self.ids.len();
        self.read = self.ids.len();
        match (before, after) {
            (Ok(b), Ok(a)) if a.len() > b.len() && a.is_char_boundary(b.len()) => Ok(a[b.len()..].to_string()),
            (Ok(_), Ok(_)) => Ok(String::new()),
            (Err(e), _) | (_, Err(e)) => Err(Error::Tokenizer(e.to_string())),
        }
    }
}
/// Refuse a draft whose vocabulary differs from the target's: its token ids would mean other
/// text, and verification would silently compare unrelated tokens.
pub fn check_pair(target: &Tokenizer, draft: &Tokenizer) -> Result<()> {
    check_vocabularies(target.vocab(), draft.vocab())
}

/// Vocabularies by id, as GGUF files list them: equal token for token, or an error that says
/// where they part.
pub fn check_vocabularies(t: &[String], d: &[String]) -> Result<()> {
    if let Some(id) = (0..t.len().min(d.len())).find(|&i| t[i] != d[i]) {
        return Err(Error::IncompatibleDraft(format!(
            "token {id} is {:?} in the target but {:?} in the draft (vocabularies of {} and {} tokens)",
            t[id],
            d[id],
            t.len(),
            d.len()
        )));
    }
    if t.len() != d.len() {
        return Err(Error::IncompatibleDraft(format!(
            "the target has {} tokens and the draft {}; the first {} agree",
            t.len(),
            d.len(),
            t.len().min(d.len())
        )));
    }
    Ok(())
}

/// How many leading ids `a` and `b` share: what a cache or a constraint keeps of one sequence
/// when the next begins the same way.
pub fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// What [`Tokenizer::count_within`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenCount {
    /// The text's tokens, at most the limit.
    Exact(usize),
    /// More tokens than the limit: those counted before counting stopped (about a lower bound).
    MoreThan(usize),
}

/// The bytes of text [`Tokenizer::count_within`] tokenizes at a time.
pub const COUNT_PIECE: usize = 64 << 10;

/// `text` in pieces of at most about `size` bytes, each ending after a newline where one is
/// near (tokens rarely span lines), else at a character boundary.
fn pieces(text: &str, size: usize) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let mut end = rest.len().min(size);
        while !rest.is_char_boundary(end) {
            end -= 1;
        }
        if end < rest.len() {
            if let Some(newline) = rest.as_bytes()[end / 2..end].iter().rposition(|&b| b == b'\n') {
                end = end / 2 + newline + 1;
            }
        }
        let (piece, after) = rest.split_at(end.max(1).min(rest.len()));
        rest = after;
        Some(piece)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_cover_the_text_end_after_newlines_and_never_split_a_character() {
        let text = "ünïcödé line\n".repeat(1000) + &"é".repeat(3000);
        let parts: Vec<&str> = pieces(&text, 1000).collect();
        assert_eq!(parts.concat(), text);
        assert!(parts.iter().all(|p| p.len() <= 1000 && !p.is_empty()));
        assert!(parts[..10].iter().all(|p| p.ends_with('\n')), "cut after a newline where one is near");
    }
}
