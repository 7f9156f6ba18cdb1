//! The limits and defaults every part shares: the engine enforces them, the server and the
//! app fill requests with them, the UI shows them (generated into its TypeScript).

/// The longest draft a step may propose (a fixed k is 1 to this).
pub const MAX_K: usize = 16;
/// The largest draft auto k tries by default.
pub const DEFAULT_AUTO_K_MAX: usize = 8;
/// The context asked for as "auto" (the default everywhere): the positions the model was
/// trained for, capped by the memory free beside its weights. The KV cache takes memory as a
/// chat fills it (the 1.5B target: 28 layers x 2 x 2 heads x 128 x 4 B = 57 KiB a position).
pub const AUTO_CONTEXT: usize = 0;
/// The positions a chat is assumed to fill where memory is estimated before a model is chosen
/// (the Library's figures, its recommended pair).
pub const TYPICAL_CONTEXT: usize = 8192;
/// Tokens a reply may have when the request names no limit.
pub const DEFAULT_MAX_TOKENS: usize = 512;
/// The most alternatives a token event lists (OpenAI's limit for `top_logprobs`).
pub const MAX_ALTERNATIVES: usize = 20;
/// The most stop strings a reply may have (OpenAI allows 4; some clients send a few more).
pub const MAX_STOP_STRINGS: usize = 16;
/// The longest stop string, in bytes.
pub const MAX_STOP_BYTES: usize = 256;
