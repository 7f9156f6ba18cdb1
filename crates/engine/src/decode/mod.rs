//! Decoding, and the pieces both loops share (plain here, speculative in `crate::speculative`):
//! the sink a reply goes to, the cached model, committing tokens to a reply.
//!
//! Invariant: a [`CachedModel`]'s ids are exactly the positions its model's live sequence
//! holds; a sequence parked in the prompt cache or written to disk is kept with the ids it
//! was fed, and is resumed only for a prompt those ids begin (on disk, only once the file's
//! seal holds).

mod cached;
pub mod disk_cache;
mod plain;
pub mod prompt_cache;
pub(crate) mod reply;
mod sink;

pub use crate::models::PREFILL_CHUNK;
pub use crate::tokenizer::common_prefix;
pub use cached::{check_context, CachedModel};
pub use disk_cache::DiskCache;
pub use plain::{generate_plain, PLAIN_STEP_EVERY};
pub use prompt_cache::PromptCache;
pub(crate) use reply::{ms, prefill_prompt, start, Reply};
pub use sink::{Flow, NullSink, Progress, TokenSink};
pub use specula_protocol::events::{
    Alternative, FinishReason, Generation, GenerationStats, ReplyEvent, Source, SpeculativeStats, StepEvent, TokenEvent,
};
pub use specula_protocol::{GenerateOptions, MAX_ALTERNATIVES};
