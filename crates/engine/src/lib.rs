//! specula-engine: exact speculative decoding on GGUF models.
//!
//! A draft model proposes k tokens, the target scores them all in one forward pass, the
//! longest prefix the target agrees with is kept, and the first rejected position is
//! resampled from the target. The output is exactly the target's: greedy gives the same
//! tokens, sampling the same distribution.
//!
//! The engine knows nothing of user interfaces or async runtimes: output goes to a
//! [`TokenSink`], and a sink that answers [`Flow::Stop`] cancels the generation.

pub mod attention;
pub mod chat;
pub mod compare;
pub mod constraint;
pub mod decode;
pub mod device;
pub mod error;
pub mod fitted;
pub mod gguf;
pub mod inspect;
pub mod kernels;
pub mod kv_cache;
pub mod lanes;
pub mod models;
pub mod quant;
pub mod sampling;
pub mod sequence;
pub mod service;
pub mod session;
pub mod speculative;
pub mod step;
pub mod stop;
#[cfg(feature = "synth")]
pub mod synth;
pub mod thinking;
pub mod tokenizer;

pub use candle_core;
pub use chat::{ChatTemplate, FunctionCall, Message, Role, ToolCall};
pub use decode::{
    generate_plain, Alternative, CachedModel, FinishReason, Flow, GenerateOptions, Generation, GenerationStats,
    NullSink, ReplyEvent, Source, SpeculativeStats, StepEvent, TokenEvent, TokenSink, MAX_ALTERNATIVES,
    PLAIN_STEP_EVERY,
};
pub use error::{Error, ErrorCode, ErrorInfo, Result};
pub use inspect::{check_draft_for, inspect, ModelCard};
pub use models::{CausalLm, ModelInfo};
pub use sampling::{Mode, SamplingParams};
pub use session::{draft_to_load, resolve_drafter, Decoding, DrafterKind, Session};
pub use specula_protocol as protocol;
pub use speculative::{check_pair, generate_speculative, DraftModel, Drafter, KSetting, SpeculativeOptions};
pub use stop::StopStrings;
pub use tokenizer::Tokenizer;

use std::path::Path;

pub use fitted::ReplyTo;
pub use specula_protocol::{KvFormat, Overflow, AUTO_CONTEXT};

/// Tokens a draft may propose by default ([`Session::set_draft_vocab`]), besides the special
/// tokens and the conversation's own; `None`: all of them. Measured with the Qwen2.5-Coder
/// pair (`examples/draft_vocab.rs`, bench/draft-vocab.json): cut to 64k of 151,936 tokens the
/// draft reads 21% fewer bytes a token (its step 16.5 -> 12.5 ms) and keeps its greedy
/// acceptance within 0.4-1.2 points; 32k saves a little more time and loses 3 points, which
/// end to end came out slower (all sets 1.19x against 1.25x in one back-to-back bench).
pub const DEFAULT_DRAFT_VOCAB: Option<usize> = Some(65536);

/// Everything one GGUF file gives: the model, its tokenizer and its chat template.
pub struct LoadedModel {
    pub model: CachedModel,
    /// Shared by the replies running at once on these weights.
    pub tokenizer: std::sync::Arc<Tokenizer>,
    pub template: std::sync::Arc<ChatTemplate>,
    pub info: ModelInfo,
}

impl LoadedModel {
    /// With f32 keys and values, the reference format.
    pub fn load(path: impl AsRef<Path>, device: &candle_core::Device, context: usize) -> Result<Self> {
        Self::load_with(path, device, context, KvFormat::F32)
    }

    /// With keys and values stored as `kv_format`.
    pub fn load_with(
        path: impl AsRef<Path>,
        device: &candle_core::Device,
        context: usize,
        kv_format: KvFormat,
    ) -> Result<Self> {
        let path = path.as_ref();
        let mut gguf = gguf::GgufFile::open(path)?;
        models::check_architecture(&gguf)?;
        let card = inspect::card(&gguf);
        inspect::check_fits_in_memory(&card.path, card.file_bytes, 0)?;
        let tokenizer = Tokenizer::from_gguf(&gguf)?;
        let template = ChatTemplate::from_gguf(&gguf, tokenizer.bos_text(), tokenizer.eos_text())?;
        let (model, info) = models::load_model(&mut gguf, device, context, kv_format)?;
        let mut model = CachedModel::new(model);
        // A saved state is of one KV format and one device's arithmetic: others get another key.
        let variant = format!("kv-{}-{}", kv_format.as_str(), device::describe(device));
        model.set_file_key(decode::disk_cache::model_key(path, &variant).ok());
        Ok(Self { model, tokenizer: tokenizer.into(), template: template.into(), info })
    }

    /// The prompt for a chat, `tools` (OpenAI's function definitions) rendered by the template.
    pub fn chat_prompt(&self, messages: &[Message], tools: &[serde_json::Value]) -> Result<Vec<u32>> {
        self.chat_prompt_with(messages, tools, &chat::RenderOptions::default())
    }

    /// The prompt for a chat as the model's template renders it ([`chat_prompt_ids`]).
    pub fn chat_prompt_with(
        &self,
        messages: &[Message],
        tools: &[serde_json::Value],
        options: &chat::RenderOptions,
    ) -> Result<Vec<u32>> {
        chat_prompt_ids(&self.tokenizer, &self.template, messages, tools, options)
    }

    pub fn generate(
        &mut self,
        prompt: &[u32],
        options: &GenerateOptions,
        sink: &mut dyn TokenSink,
    ) -> Result<Generation> {
        generate_plain(&mut self.model, &self.tokenizer, prompt, options, sink)
    }
}

/// The prompt for a chat as `template` renders it, read with its special tokens, except the
/// special-token texts the messages spell, read as plain text.
pub fn chat_prompt_ids(
    tokenizer: &Tokenizer,
    template: &ChatTemplate,
    messages: &[Message],
    tools: &[serde_json::Value],
    options: &chat::RenderOptions,
) -> Result<Vec<u32>> {
    if messages.is_empty() {
        return Err(Error::InvalidSetting("a chat needs at least one message".into()));
    }
    let specials: Vec<&str> = tokenizer.special_texts().collect();
    let parts = template.render_parts(messages, tools, options, &specials)?;
    let mut ids = Vec::new();
    for (i, part) in parts.iter().enumerate() {
        match part {
            // Only the prompt's start gets the model's BOS.
            chat::PromptPart::Template(text) if i == 0 => ids.extend(tokenizer.encode(text)?),
            chat::PromptPart::Template(text) => ids.extend(tokenizer.encode_without_bos(text)?),
            chat::PromptPart::Content(text) => {
                if i == 0 {
                    ids.extend(tokenizer.prefix_ids()?);
                }
                ids.extend(tokenizer.encode_literal(text)?)
            }
        }
    }
    Ok(ids)
}
