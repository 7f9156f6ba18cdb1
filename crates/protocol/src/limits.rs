//! The limits and defaults every part shares: the engine enforces them, the server and the
//! app fill requests with them, the UI shows them (generated into its TypeScript).

/// The longest draft a step may propose (a fixed k is 1 to this).
pub const MAX_K: usize = 16;
/// The largest draft auto k tries by default.
pub const DEFAULT_AUTO_K_MAX: usize = 8;
/// Default KV cache size: long enough for a chat, small enough to preallocate
/// (the 1.5B target needs 28 layers x 2 x 2 heads x 128 x 4 B = 57 KiB per position).
pub const DEFAULT_CONTEXT: usize = 4096;
/// Tokens a reply may have when the request names no limit.
pub const DEFAULT_MAX_TOKENS: usize = 512;
/// The most alternatives a token event lists (OpenAI's limit for `top_logprobs`).
pub const MAX_ALTERNATIVES: usize = 20;
/// The most stop strings a reply may have (OpenAI allows 4; some clients send a few more).
pub const MAX_STOP_STRINGS: usize = 16;
/// The longest stop string, in bytes.
pub const MAX_STOP_BYTES: usize = 256;
