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
}

impl Tokenizer {
    pub fn from_gguf(gguf: &GgufFile) -> Result<Self> {
        let inner = match gguf.string("tokenizer.ggml.model").unwrap_or_default().as_str() {
            "llama" => spm::from_gguf(gguf)?,
            _ => byte_level_bpe(gguf)?,
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
        Ok(Self { literal: literal(&inner), inner, tokens, stop_ids: BTreeSet::new(), bos: None, eos: None })
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
