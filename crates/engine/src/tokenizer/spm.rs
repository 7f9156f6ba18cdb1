//! SentencePiece vocabularies (`tokenizer.ggml.model` = `llama`: Gemma, Llama 2, Mistral) as a
//! `tokenizers` BPE with byte fallback.
//!
//! A GGUF file stores the pieces and their scores but no merges. SentencePiece merges the
//! adjacent pair whose joined piece scores highest; a BPE whose merges are ranked by the
//! joined piece's score does the same, so we derive the merges as HF's `SpmConverter` does:
//! every split of a piece into two pieces of the vocabulary, best score first. Spaces become
//! `▁` and nothing pre-splits the text, as in llama.cpp's SPM tokenizer.

use crate::error::{Error, Result};
use crate::gguf::GgufFile;
use std::collections::HashMap;
use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence as DecoderSequence;
use tokenizers::models::bpe::BPE;
use tokenizers::normalizers::{Prepend, Replace};
use tokenizers::processors::template::TemplateProcessing;
use tokenizers::{AddedToken, DecoderWrapper, NormalizerWrapper};

const SPACE: &str = "\u{2581}";

/// llama.cpp's token types (`tokenizer.ggml.token_type`).
const CONTROL: i32 = 3;
const USER_DEFINED: i32 = 4;

pub fn from_gguf(gguf: &GgufFile) -> Result<tokenizers::Tokenizer> {
    let pieces = gguf.string_array("tokenizer.ggml.tokens")?;
    let scores = gguf.f32_array("tokenizer.ggml.scores")?;
    let types = gguf.i32_array("tokenizer.ggml.token_type").unwrap_or_else(|_| vec![1; pieces.len()]);
    if scores.len() != pieces.len() || types.len() != pieces.len() {
        return Err(Error::BadMetadata("tokenizer scores or types do not match the vocabulary".into()));
    }
    let unk = gguf.u32("tokenizer.ggml.unknown_token_id").ok().and_then(|id| pieces.get(id as usize).cloned());
    let mut bpe =
        BPE::builder().vocab_and_merges(vocab(&pieces), merges(&pieces, &scores)).byte_fallback(true).fuse_unk(true);
    if let Some(unk) = unk {
        bpe = bpe.unk_token(unk);
    }
    let bpe = bpe.build().map_err(|e| Error::Tokenizer(e.to_string()))?;
    let mut tokenizer = tokenizers::Tokenizer::new(bpe);
    tokenizer.with_normalizer(Some(normalizer(gguf)?)).map_err(|e| Error::Tokenizer(e.to_string()))?;
    tokenizer.with_decoder(Some(decoder(gguf)?));
    // Control tokens (<bos>, <start_of_turn>) and user-defined ones (runs of spaces, HTML
    // tags) are matched whole before the BPE sees the text, as llama.cpp does.
    let added = |kind: i32, special: bool| {
        let pieces = pieces.iter().zip(&types).filter(move |(_, t)| **t == kind);
        pieces.map(move |(p, _)| AddedToken::from(p.clone(), special).normalized(false)).collect::<Vec<_>>()
    };
    tokenizer.add_special_tokens(added(CONTROL, true)).map_err(|e| Error::Tokenizer(e.to_string()))?;
    tokenizer.add_tokens(added(USER_DEFINED, false)).map_err(|e| Error::Tokenizer(e.to_string()))?;
    if let Some(bos) = bos_processor(gguf, &pieces)? {
        tokenizer.with_post_processor(Some(bos));
    }
    Ok(tokenizer)
}

fn vocab(pieces: &[String]) -> tokenizers::models::bpe::Vocab {
    pieces.iter().enumerate().map(|(id, p)| (p.clone(), id as u32)).collect()
}

/// Every `(left, right)` whose join is a piece, best joined score first; among splits of one
/// piece, the longer left part first, then by id, as HF's converter orders them.
fn merges(pieces: &[String], scores: &[f32]) -> Vec<(String, String)> {
    let ids: HashMap<&str, usize> = pieces.iter().enumerate().map(|(id, p)| (p.as_str(), id)).collect();
    let mut found: Vec<(f32, usize, usize, usize)> = Vec::new();
    for (joined, piece) in pieces.iter().enumerate() {
        for (at, _) in piece.char_indices().skip(1) {
            if let (Some(&l), Some(&r)) = (ids.get(&piece[..at]), ids.get(&piece[at..])) {
                found.push((scores[joined], at, l, r));
            }
        }
    }
    found.sort_by(|a, b| b.0.total_cmp(&a.0).then(b.1.cmp(&a.1)).then((a.2, a.3).cmp(&(b.2, b.3))));
    found.into_iter().map(|(_, _, l, r)| (pieces[l].clone(), pieces[r].clone())).collect()
}

fn add_space_prefix(gguf: &GgufFile) -> bool {
    // SentencePiece's default; Gemma turns it off.
    gguf.bool("tokenizer.ggml.add_space_prefix").unwrap_or(true)
}

fn normalizer(gguf: &GgufFile) -> Result<NormalizerWrapper> {
    let replace: NormalizerWrapper = Replace::new(" ", SPACE).map_err(|e| Error::Tokenizer(e.to_string()))?.into();
    Ok(match add_space_prefix(gguf) {
        true => tokenizers::normalizers::Sequence::new(vec![Prepend::new(SPACE.into()).into(), replace]).into(),
        false => replace,
    })
}

fn decoder(gguf: &GgufFile) -> Result<DecoderWrapper> {
    let replace = tokenizers::decoders::DecoderWrapper::Replace(
        Replace::new(SPACE, " ").map_err(|e| Error::Tokenizer(e.to_string()))?,
    );
    let mut steps = vec![replace, ByteFallback::new().into(), Fuse::new().into()];
    if add_space_prefix(gguf) {
        steps.push(tokenizers::decoders::strip::Strip::new(' ', 1, 0).into());
    }
    Ok(DecoderSequence::new(steps).into())
}

fn bos_processor(gguf: &GgufFile, pieces: &[String]) -> Result<Option<TemplateProcessing>> {
    if !gguf.bool("tokenizer.ggml.add_bos_token").unwrap_or(true) {
        return Ok(None);
    }
    let Some(id) = gguf.u32("tokenizer.ggml.bos_token_id").ok() else { return Ok(None) };
    let Some(bos) = pieces.get(id as usize) else { return Ok(None) };
    let processor = TemplateProcessing::builder()
        .try_single(format!("{bos} $A"))
        .and_then(|b| b.try_pair(format!("{bos} $A {bos} $B:1")))
        .map_err(|e| Error::Tokenizer(e.to_string()))?
        .special_tokens(vec![(bos.clone(), id)])
        .build()
        .map_err(|e| Error::Tokenizer(e.to_string()))?;
    Ok(Some(processor))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_rank_by_the_joined_piece_score() {
        let pieces: Vec<String> = ["a", "b", "c", "ab", "bc", "abc"].iter().map(|s| s.to_string()).collect();
        let scores = [0.0, 0.0, 0.0, -2.0, -1.0, -3.0];
        let merges = merges(&pieces, &scores);
        let pair = |l: &str, r: &str| (l.to_string(), r.to_string());
        assert_eq!(merges, vec![pair("b", "c"), pair("a", "b"), pair("ab", "c"), pair("a", "bc")]);
    }
}
