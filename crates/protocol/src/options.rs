//! How a reply is made: its sampling, its limits, what it must match and who drafts it.
//! Each type checks its own ranges; applying them is the engine's.

use crate::error::InvalidSetting;
use crate::limits::{
    DEFAULT_AUTO_K_MAX, DEFAULT_MAX_TOKENS, MAX_ALTERNATIVES, MAX_K, MAX_STOP_BYTES, MAX_STOP_STRINGS,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use specta::Type;

type Checked<T = ()> = Result<T, InvalidSetting>;

fn invalid<T>(message: String) -> Checked<T> {
    Err(InvalidSetting(message))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, Type)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// The most likely token.
    Greedy,
    /// Random draws; speculative decoding keeps the target's distribution (Leviathan et al.).
    Sample,
    /// Gumbel-max sampling with noise fixed by (seed, position in the reply): target-distributed,
    /// and token-identical to plain decoding with the same seed for any draft and any k.
    #[default]
    Reproducible,
}

impl Mode {
    /// The mode's name, as serde writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Greedy => "greedy",
            Mode::Sample => "sample",
            Mode::Reproducible => "reproducible",
        }
    }
}

impl std::str::FromStr for Mode {
    type Err = InvalidSetting;
    fn from_str(s: &str) -> Checked<Self> {
        match s {
            "greedy" => Ok(Mode::Greedy),
            "sample" => Ok(Mode::Sample),
            "reproducible" => Ok(Mode::Reproducible),
            _ => invalid(format!("mode `{s}`: expected greedy, sample or reproducible")),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Type)]
#[serde(default)]
pub struct SamplingParams {
    pub mode: Mode,
    pub temperature: f32,
    /// Keep the k most likely tokens; 0 keeps all.
    pub top_k: usize,
    /// Keep the smallest set whose probability reaches top_p; 1 keeps all.
    pub top_p: f32,
    /// Drop tokens below min_p times the most likely one's probability; 0 keeps all.
    pub min_p: f32,
    /// Divide positive logits (multiply negative ones) of tokens already seen; 1 is off.
    pub repetition_penalty: f32,
    pub seed: u64,
}

impl Default for SamplingParams {
    /// llama.cpp's defaults, with reproducible sampling.
    fn default() -> Self {
        Self {
            mode: Mode::Reproducible,
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repetition_penalty: 1.0,
            seed: 42,
        }
    }
}

impl SamplingParams {
    pub fn greedy() -> Self {
        Self { mode: Mode::Greedy, ..Self::default() }
    }

    /// Greedy when asked for, or when the temperature is zero.
    pub fn effective_mode(&self) -> Mode {
        if self.temperature <= 0.0 {
            Mode::Greedy
        } else {
            self.mode
        }
    }

    pub fn validate(&self) -> Checked {
        if !(self.temperature >= 0.0 && self.temperature.is_finite()) {
            return invalid(format!("temperature {} must be 0 or more", self.temperature));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return invalid(format!("top_p {} must be in (0, 1]", self.top_p));
        }
        if !(0.0..1.0).contains(&self.min_p) {
            return invalid(format!("min_p {} must be in [0, 1)", self.min_p));
        }
        if !(self.repetition_penalty > 0.0 && self.repetition_penalty.is_finite()) {
            return invalid(format!("repetition_penalty {} must be positive", self.repetition_penalty));
        }
        Ok(())
    }
}

/// What a reply must match.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Type)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Grammar {
    /// Any JSON object (OpenAI's `response_format: json_object`).
    JsonObject,
    /// A value of this JSON schema (`json_schema`, and forced tool calls).
    JsonSchema { schema: Value },
}

impl Grammar {
    /// The JSON schema a reply must be a value of.
    pub fn schema(&self) -> Value {
        let mut schema = match self {
            Grammar::JsonObject => serde_json::json!({ "type": "object" }),
            Grammar::JsonSchema { schema } => schema.clone(),
        };
        // Compact JSON: with free whitespace a model can pad a reply with newlines until its
        // token limit, and nothing is lost without it.
        if let Some(object) = schema.as_object_mut() {
            object.insert("x-guidance".into(), serde_json::json!({ "whitespace_flexible": false, "lenient": true }));
        }
        schema
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Type)]
pub struct GenerateOptions {
    pub max_tokens: usize,
    pub sampling: SamplingParams,
    /// Stop when the reply contains one of these; the reply ends before it.
    pub stop: Vec<String>,
    /// How many of the target's most likely tokens each token event lists (0 to
    /// [`MAX_ALTERNATIVES`]).
    #[serde(default)]
    pub alternatives: usize,
    /// What the reply must match (a JSON schema); the reply ends when it is complete.
    #[serde(default)]
    pub grammar: Option<Grammar>,
}

impl GenerateOptions {
    /// Options a reply can be made with: at least one token, stop strings within bounds
    /// ([`check_stop_strings`]). The grammar is not compiled here: the engine compiles it
    /// against the vocabulary before the reply starts, and a server that wants the error
    /// earlier compiles it off its async threads.
    pub fn validate(&self) -> Checked {
        if self.max_tokens == 0 {
            return invalid("max_tokens must be at least 1".into());
        }
        check_stop_strings(&self.stop)?;
        if self.alternatives > MAX_ALTERNATIVES {
            let n = self.alternatives;
            return invalid(format!("{n} alternatives per token: at most {MAX_ALTERNATIVES}"));
        }
        self.sampling.validate()
    }
}

impl Default for GenerateOptions {
    fn default() -> Self {
        Self {
            max_tokens: DEFAULT_MAX_TOKENS,
            sampling: SamplingParams::default(),
            stop: Vec::new(),
            alternatives: 0,
            grammar: None,
        }
    }
}

/// Stop strings a reply may have: not empty (found everywhere, the reply would end before
/// it began), at most [`MAX_STOP_STRINGS`] of at most [`MAX_STOP_BYTES`] each.
pub fn check_stop_strings(strings: &[String]) -> Checked {
    if strings.len() > MAX_STOP_STRINGS {
        let n = strings.len();
        return invalid(format!("{n} stop strings: at most {MAX_STOP_STRINGS}"));
    }
    if strings.iter().any(String::is_empty) {
        return invalid("a stop string is empty".into());
    }
    if let Some(long) = strings.iter().find(|s| s.len() > MAX_STOP_BYTES) {
        let n = long.len();
        return invalid(format!("a stop string of {n} bytes: at most {MAX_STOP_BYTES}"));
    }
    Ok(())
}

/// Who proposes tokens for the target to verify.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Type)]
#[serde(rename_all = "lowercase")]
pub enum DrafterKind {
    /// Plain decoding.
    None,
    /// The loaded draft model.
    Model,
    /// n-grams from the conversation.
    Lookup,
    /// The draft model, and free copies from the conversation where it repeats itself:
    /// whichever is expected to deliver more takes each step.
    Auto,
}

impl DrafterKind {
    /// The drafter's name, as serde writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            DrafterKind::None => "none",
            DrafterKind::Model => "model",
            DrafterKind::Lookup => "lookup",
            DrafterKind::Auto => "auto",
        }
    }
}

impl std::str::FromStr for DrafterKind {
    type Err = InvalidSetting;
    fn from_str(s: &str) -> Checked<Self> {
        match s {
            "none" => Ok(DrafterKind::None),
            "model" => Ok(DrafterKind::Model),
            "lookup" => Ok(DrafterKind::Lookup),
            "auto" => Ok(DrafterKind::Auto),
            _ => invalid(format!("drafter `{s}`: expected auto, model, lookup or none")),
        }
    }
}

/// What happens when a chat no longer fits the context.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, Type)]
#[serde(rename_all = "kebab-case")]
pub enum Overflow {
    /// Refuse the prompt with a clear error; a reply that fills the context ends there
    /// ("context full"). The API's default, as llama-server's.
    #[default]
    Stop,
    /// Keep the system prompt and the first exchange, drop whole turns after it, oldest
    /// first, and cut the middle of a single message too long by itself. The app's default.
    TruncateMiddle,
    /// Keep the system prompt, drop whole turns from the oldest.
    Rolling,
}

impl Overflow {
    pub const ALL: [Overflow; 3] = [Overflow::Stop, Overflow::TruncateMiddle, Overflow::Rolling];

    /// The policy's name, as serde writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Overflow::Stop => "stop",
            Overflow::TruncateMiddle => "truncate-middle",
            Overflow::Rolling => "rolling",
        }
    }
}

impl std::str::FromStr for Overflow {
    type Err = InvalidSetting;
    fn from_str(s: &str) -> Checked<Self> {
        match Overflow::ALL.into_iter().find(|o| o.as_str() == s) {
            Some(overflow) => Ok(overflow),
            None => invalid(format!("overflow `{s}`: expected stop, truncate-middle or rolling")),
        }
    }
}

/// How the KV cache stores keys and values. f16 takes half the memory and half the reads a
/// step at depth; q8_0 (llama.cpp's block format: 32 signed bytes and an f16 scale) takes
/// about a quarter of f32's, at the cost of rounding each key and value; f32 is the reference
/// the exactness tests pin (a reply is exact relative to the target run with the same format).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, Type)]
#[serde(rename_all = "lowercase")]
pub enum KvFormat {
    #[default]
    F32,
    F16,
    Q8_0,
}

/// How the CLI, the server and the app store keys and values unless told otherwise
/// (BENCHMARKS.md, "Long contexts": memory and speed at depth, f16 against f32).
pub const DEFAULT_KV_FORMAT: KvFormat = KvFormat::F16;

impl KvFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            KvFormat::F32 => "f32",
            KvFormat::F16 => "f16",
            KvFormat::Q8_0 => "q8_0",
        }
    }

    /// Bytes that `values` keys or values take (for q8_0, a multiple of its 32-value block).
    pub fn bytes_for(self, values: usize) -> usize {
        match self {
            KvFormat::F32 => values * 4,
            KvFormat::F16 => values * 2,
            KvFormat::Q8_0 => values.div_ceil(Q8_0_BLOCK) * Q8_0_BLOCK_BYTES,
        }
    }
}

/// Values in one q8_0 block, and the block's bytes: an f16 scale, then 32 signed bytes.
pub const Q8_0_BLOCK: usize = 32;
pub const Q8_0_BLOCK_BYTES: usize = 2 + Q8_0_BLOCK;

impl std::str::FromStr for KvFormat {
    type Err = InvalidSetting;
    fn from_str(s: &str) -> Checked<Self> {
        match s {
            "f32" => Ok(KvFormat::F32),
            "f16" => Ok(KvFormat::F16),
            "q8_0" => Ok(KvFormat::Q8_0),
            _ => invalid(format!("KV format `{s}`: expected f16, q8_0 or f32")),
        }
    }
}

/// The draft length: a fixed k from 1 to [`MAX_K`], or auto (chosen each step, 0 included).
/// One type end to end: it reads and writes as a number or `"auto"` in every JSON body and
/// settings file, and parses from the same words on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KSetting {
    Fixed(usize),
    Auto { max: usize },
}

impl std::fmt::Display for KSetting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KSetting::Fixed(k) => write!(f, "{k}"),
            KSetting::Auto { .. } => f.write_str("auto"),
        }
    }
}

impl Serialize for KSetting {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            KSetting::Fixed(k) => serializer.serialize_u64(*k as u64),
            KSetting::Auto { .. } => serializer.serialize_str("auto"),
        }
    }
}

impl<'de> Deserialize<'de> for KSetting {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Wire {
            Integer(i64),
            Float(f64),
            Text(String),
        }
        let text = match Wire::deserialize(deserializer)? {
            Wire::Integer(k) => k.to_string(),
            Wire::Float(k) => k.to_string(),
            Wire::Text(s) => s,
        };
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// KSetting as it is written: a number or the word `auto`.
#[derive(Type)]
#[specta(untagged, rename = "KSetting")]
#[allow(dead_code)] // only its type is read, to describe KSetting to TypeScript
enum KSettingWire {
    Fixed(u32),
    Auto(AutoWord),
}

#[derive(Type)]
#[specta(inline)]
#[allow(dead_code)]
enum AutoWord {
    #[specta(rename = "auto")]
    Auto,
}

impl Type for KSetting {
    fn inline(types: &mut specta::TypeCollection, generics: specta::Generics) -> specta::datatype::DataType {
        KSettingWire::inline(types, generics)
    }
}

impl Default for KSetting {
    fn default() -> Self {
        KSetting::Auto { max: DEFAULT_AUTO_K_MAX }
    }
}

impl std::str::FromStr for KSetting {
    type Err = InvalidSetting;
    fn from_str(s: &str) -> Checked<Self> {
        if s == "auto" {
            return Ok(KSetting::default());
        }
        match s.parse::<usize>() {
            Ok(k) if (1..=MAX_K).contains(&k) => Ok(KSetting::Fixed(k)),
            _ => invalid(format!("k `{s}`: expected 1 to {MAX_K} or auto")),
        }
    }
}

/// How one reply is decoded: who drafts and how far. A value every call carries, so no
/// reply's choice can outlive it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct Decoding {
    pub drafter: DrafterKind,
    pub k: KSetting,
}

impl Decoding {
    pub fn plain() -> Self {
        Self { drafter: DrafterKind::None, k: KSetting::default() }
    }
}
