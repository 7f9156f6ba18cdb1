//! specula-protocol: every type that crosses a boundary between Specula's parts (the engine,
//! the history store, the HTTP server, the desktop shell and its web UI), as plain data.
//!
//! Serde and specta only, no tensors: the store and the UI's TypeScript (generated from these
//! types, `ui/src/api/protocol.ts`) read the contract without compiling the engine. A limit
//! or a default lives here once ([`limits`]), and every part takes it from here.

pub mod app;
pub mod chat;
pub mod error;
pub mod events;
pub mod history;
pub mod limits;
pub mod options;
mod pycall;
pub mod reasoning;
pub mod remote;
pub mod tool_calls;
pub mod tool_card;

pub use app::{
    AppSettings, AttachedFile, CatalogueEntry, ContextInfo, Diagnosis, EngineState, EngineStatus, ModelEntry,
    ModelRole, PullEvent, RecommendedPair,
};
pub use chat::{FunctionCall, Message, Role, ToolCall};
pub use error::{ErrorCode, ErrorInfo, InvalidSetting};
pub use events::{
    Alternative, Collected, FinishReason, Gathered, Generation, GenerationStats, ReplyEvent, Source, SpeculativeStats,
    StepEvent, TokenEvent, Trim,
};
pub use history::{Conversation, ConversationSummary, ExportFormat, ImportSummary, ReplyStarted, StoredMessage};
pub use limits::*;
pub use options::{
    Decoding, DrafterKind, GenerateOptions, Grammar, KSetting, KvFormat, Mode, Overflow, SamplingParams,
    DEFAULT_KV_FORMAT, Q8_0_BLOCK, Q8_0_BLOCK_BYTES,
};
pub use reasoning::{split_reasoning, split_tokens, Reasoning, ReasoningSplit, Released, THINK_CLOSE, THINK_OPEN};
pub use remote::{Connection, ConnectionCheck, RemoteKind, RemoteTarget};
pub use tool_card::{McpServer, McpStatus, McpTool, ToolCard, ToolDecision, ToolOutcome};
