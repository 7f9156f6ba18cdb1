//! Hostile model files: a corpus of malformed GGUF variants of a tiny valid model (cut at
//! every section boundary, huge counts and lengths, wrong types, zero and huge
//! hyper-parameters, shapes that lie, NaN weights, templates that loop or flood), each run
//! through `specula tokenize`, `generate` and `doctor` under a 4 GB address-space limit and a
//! 30 s time limit. None may panic, hang or abort: a command that fails exits 2 with one
//! `error:` line.

use candle_core::quantized::gguf_file::Value;
use specula_engine::synth::{self, clone_value, ggml_type_id, put_string, put_value, value_type};
use std::path::{Path, PathBuf};
use std::process::Command;

/// A GGUF to serialize, malformed or not: this writer checks nothing.
struct Raw {
    version: u32,
    metadata: Vec<(String, Value)>,
    tensors: Vec<RawTensor>,
    /// Counts to write instead of the true ones.
    tensor_count: Option<u64>,
    metadata_count: Option<u64>,
}

struct RawTensor {
    name: String,
    /// Outermost first.
    dims: Vec<u64>,
    type_id: u32,
    /// Written instead of the true offset.
    offset: Option<u64>,
    data: Vec<u8>,
}

impl Raw {
    /// The tiny synthetic model, all f32: its tokenizer is byte-level BPE with ChatML.
    fn base() -> Self {
        let spec = synth::Spec::preset("tiny", 1).unwrap();
        let tokenizer = synth::tiny_tokenizer();
        let mut metadata = spec.metadata();
        metadata.extend(tokenizer.iter().map(|(k, v)| (k.clone(), clone_value(v))));
        let mut state = 7u64;
        let tensors = spec
            .tensors(259)
            .into_iter()
            .map(|(name, dims, dtype)| {
                let elements: usize = dims.iter().product();
                let norm = name.ends_with("norm.weight");
                let data = (0..elements)
                    .flat_map(|_| {
                        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                        let v = if norm { 1.0 } else { ((state >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.2 };
                        v.to_le_bytes()
                    })
                    .collect();
                RawTensor {
                    name,
                    dims: dims.iter().map(|&d| d as u64).collect(),
                    type_id: ggml_type_id(dtype),
                    offset: None,
                    data,
                }
            })
            .collect();
        Raw { version: 3, metadata, tensors, tensor_count: None, metadata_count: None }
    }

    fn set(mut self, key: &str, value: Value) -> Self {
        self.metadata.retain(|(k, _)| k != key);
        self.metadata.push((key.into(), value));
        self
    }

    fn remove(mut self, key: &str) -> Self {
        self.metadata.retain(|(k, _)| k != key);
        self
    }

    fn tensor(mut self, name: &str, change: impl FnOnce(&mut RawTensor)) -> Self {
        change(self.tensors.iter_mut().find(|t| t.name == name).unwrap_or_else(|| panic!("no tensor {name}")));
        self
    }

    fn bytes(&self) -> Vec<u8> {
        let mut out = b"GGUF".to_vec();
        out.extend(self.version.to_le_bytes());
        out.extend(self.tensor_count.unwrap_or(self.tensors.len() as u64).to_le_bytes());
        out.extend(self.metadata_count.unwrap_or(self.metadata.len() as u64).to_le_bytes());
        for (key, value) in &self.metadata {
            put_string(&mut out, key);
            out.extend(value_type(value).to_le_bytes());
            put_value(&mut out, value);
        }
        let mut offset = 0u64;
        for t in &self.tensors {
            put_string(&mut out, &t.name);
            out.extend((t.dims.len() as u32).to_le_bytes());
            for d in t.dims.iter().rev() {
                out.extend(d.to_le_bytes());
            }
            out.extend(t.type_id.to_le_bytes());
            out.extend(t.offset.unwrap_or(offset).to_le_bytes());
            offset = (offset + t.data.len() as u64).next_multiple_of(32);
        }
        out.resize(out.len().next_multiple_of(32), 0);
        for t in &self.tensors {
            out.extend(&t.data);
            out.resize(out.len().next_multiple_of(32), 0);
        }
        out
    }

    /// Where the metadata ends (the tensor directory begins), and where the data begins.
    fn boundaries(&self) -> (usize, usize) {
        let mut metadata = Vec::new();
        for (key, value) in &self.metadata {
            put_string(&mut metadata, key);
            metadata.extend(value_type(value).to_le_bytes());
            put_value(&mut metadata, value);
        }
        let metadata_end = 24 + metadata.len();
        let directory: usize = self.tensors.iter().map(|t| 8 + t.name.len() + 4 + 8 * t.dims.len() + 4 + 8).sum();
        (metadata_end, (metadata_end + directory).next_multiple_of(32))
    }
}

impl RawTensor {
    fn shallow(&self) -> RawTensor {
        RawTensor {
            name: self.name.clone(),
            dims: self.dims.clone(),
            type_id: self.type_id,
            offset: self.offset,
            data: Vec::new(),
        }
    }
}

/// What each command must do with a variant.
#[derive(Clone, Copy, Debug)]
enum Broken {
    /// The file itself is unreadable: every command exits 2.
    File,
    /// The tokenizer cannot be built: tokenize and generate exit 2.
    Tokenizer,
    /// The header and tokenizer read, the model cannot run: generate exits 2.
    Model,
}

struct Variant {
    name: String,
    bytes: Vec<u8>,
    broken: Broken,
    /// Extra arguments for `generate`.
    generate_args: Vec<String>,
}

/// Templates that build strings no output cap sees: each step is one instruction of fuel.
const DOUBLING: &str =
    "{% set ns = namespace(s='xxxxxxxx') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}";
const MACRO_DOUBLING: &str =
    "{% macro grow(s, n) %}{% if n > 0 %}{{ grow(s ~ s, n - 1) }}{% else %}{{ s|length }}{% endif %}{% endmacro %}{{ grow('xxxxxxxx', 40) }}";
const SQUARING: &str = "{% set ns = namespace(s='x' * 1000) %}{% for i in range(3) %}{% set ns.s = ns.s|replace('x', ns.s) %}{% endfor %}{{ ns.s|length }}";

fn variant(name: &str, broken: Broken, raw: Raw) -> Variant {
    Variant { name: name.into(), bytes: raw.bytes(), broken, generate_args: Vec::new() }
}

fn bytes_variant(name: &str, broken: Broken, bytes: Vec<u8>) -> Variant {
    Variant { name: name.into(), bytes, broken, generate_args: Vec::new() }
}

fn u32s(values: &[u32]) -> Value {
    Value::Array(values.iter().map(|&v| Value::U32(v)).collect())
}

fn corpus() -> Vec<Variant> {
    use Broken::*;
    let base = Raw::base().bytes();
    let (metadata_end, data_start) = Raw::base().boundaries();
    let mut all = vec![
        bytes_variant("empty file", File, Vec::new()),
        bytes_variant("three bytes", File, b"GGU".to_vec()),
        bytes_variant("a text file", File, b"this is not a model\n".repeat(50)),
        bytes_variant("wrong magic", File, [b"GGUX".as_slice(), &base[4..]].concat()),
    ];
    for version in [0u32, 4, u32::MAX] {
        all.push(bytes_variant(&format!("version {version}"), File, Raw { version, ..Raw::base() }.bytes()));
    }
    // Cut at every section boundary and inside each section.
    let cuts = [
        ("after the magic", 4),
        ("after the version", 8),
        ("after the tensor count", 16),
        ("after the metadata count", 24),
        ("inside the first key", 30),
        ("a quarter into the metadata", metadata_end / 4),
        ("halfway through the metadata", metadata_end / 2),
        ("at the end of the metadata", metadata_end),
        ("inside the tensor directory", (metadata_end + data_start) / 2),
        ("at the start of the data", data_start),
        ("inside the data", (data_start + base.len()) / 2),
        ("one byte short", base.len() - 1),
    ];
    for (where_, at) in cuts {
        all.push(bytes_variant(&format!("cut {where_}"), File, base[..at].to_vec()));
    }
    let huge_counts = [
        ("2^40 tensors", Raw { tensor_count: Some(1 << 40), ..Raw::base() }),
        ("2^64-1 tensors", Raw { tensor_count: Some(u64::MAX), ..Raw::base() }),
        ("2^40 metadata entries", Raw { metadata_count: Some(1 << 40), ..Raw::base() }),
        (
            "one tensor more than listed",
            Raw { tensor_count: Some(Raw::base().tensors.len() as u64 + 1), ..Raw::base() },
        ),
    ];
    all.extend(huge_counts.into_iter().map(|(name, raw)| variant(name, File, raw)));
    let mut long_string = base.clone();
    long_string[24..32].copy_from_slice(&u64::MAX.to_le_bytes()); // the first key's length
    all.push(bytes_variant("a key 2^64-1 bytes long", File, long_string));

    let arch = "llama";
    let key = |k: &str| format!("{arch}.{k}");
    all.extend([
        variant("alignment 0", File, Raw::base().set("general.alignment", Value::U32(0))),
        variant("alignment 3", File, Raw::base().set("general.alignment", Value::U32(3))),
        variant("alignment 2^31", File, Raw::base().set("general.alignment", Value::U32(1 << 31))),
        variant("alignment as a string", File, Raw::base().set("general.alignment", Value::String("32".into()))),
        variant("head_count 0", Model, Raw::base().set(&key("attention.head_count"), Value::U32(0))),
        variant("head_count_kv 0", Model, Raw::base().set(&key("attention.head_count_kv"), Value::U32(0))),
        variant(
            "heads not divisible by kv heads",
            Model,
            Raw::base().set(&key("attention.head_count_kv"), Value::U32(3)),
        ),
        variant("block_count 0", Model, Raw::base().set(&key("block_count"), Value::U32(0))),
        variant("block_count 2^31", Model, Raw::base().set(&key("block_count"), Value::U32(1 << 31))),
        variant("block_count more than the tensors", Model, Raw::base().set(&key("block_count"), Value::U32(3))),
        variant("embedding_length 0", Model, Raw::base().set(&key("embedding_length"), Value::U32(0))),
        variant("embedding_length 2^30", Model, Raw::base().set(&key("embedding_length"), Value::U32(1 << 30))),
        variant("key_length 2^30", Model, Raw::base().set(&key("attention.key_length"), Value::U32(1 << 30))),
        variant("key_length odd", Model, Raw::base().set(&key("attention.key_length"), Value::U32(15))),
        variant("context_length 0", Model, Raw::base().set(&key("context_length"), Value::U32(0))),
        variant(
            "rms epsilon NaN",
            Model,
            Raw::base().set(&key("attention.layer_norm_rms_epsilon"), Value::F32(f32::NAN)),
        ),
        variant(
            "rms epsilon negative",
            Model,
            Raw::base().set(&key("attention.layer_norm_rms_epsilon"), Value::F32(-1.0)),
        ),
        variant("rope base infinite", Model, Raw::base().set(&key("rope.freq_base"), Value::F32(f32::INFINITY))),
        variant(
            "head_count as a string",
            Model,
            Raw::base().set(&key("attention.head_count"), Value::String("4".into())),
        ),
        variant("head_count negative", Model, Raw::base().set(&key("attention.head_count"), Value::I32(-4))),
        variant("embedding_length as a float", Model, Raw::base().set(&key("embedding_length"), Value::F32(64.5))),
        variant("no architecture", Model, Raw::base().remove("general.architecture")),
        variant(
            "an unsupported architecture",
            Model,
            Raw::base().set("general.architecture", Value::String("gpt-neox".into())),
        ),
        variant("architecture as a number", Model, Raw::base().set("general.architecture", Value::U32(7))),
        variant("no head_count", Model, Raw::base().remove(&key("attention.head_count"))),
        variant("no vocabulary", Tokenizer, Raw::base().remove("tokenizer.ggml.tokens")),
        variant("an empty vocabulary", Tokenizer, Raw::base().set("tokenizer.ggml.tokens", Value::Array(Vec::new()))),
        variant("a vocabulary of numbers", Tokenizer, Raw::base().set("tokenizer.ggml.tokens", u32s(&[1, 2, 3]))),
        variant(
            "merges of one piece",
            Tokenizer,
            Raw::base().set("tokenizer.ggml.merges", Value::Array(vec![Value::String("abc".into())])),
        ),
        variant(
            "merges of unknown pieces",
            Tokenizer,
            Raw::base().set("tokenizer.ggml.merges", Value::Array(vec![Value::String("zz qq".into())])),
        ),
        variant(
            "an unknown tokenizer model",
            Tokenizer,
            Raw::base().set("tokenizer.ggml.model", Value::String("wordpiece".into())),
        ),
        variant(
            "token types of another length",
            Model,
            Raw::base().set("tokenizer.ggml.token_type", Value::Array(vec![Value::I32(3); 7])),
        ),
        variant("bos id 2^31", Model, Raw::base().set("tokenizer.ggml.bos_token_id", Value::U32(1 << 31))),
        variant(
            "a template of nested loops",
            Model,
            Raw::base().set(
                "tokenizer.chat_template",
                Value::String(
                    "{% for a in range(100000) %}{% for b in range(100000) %}x{% endfor %}{% endfor %}".into(),
                ),
            ),
        ),
        variant(
            "a template that writes 10 GB",
            Model,
            Raw::base().set(
                "tokenizer.chat_template",
                Value::String("{% for a in range(100000) %}{{ 'x' * 100000 }}{% endfor %}".into()),
            ),
        ),
        variant(
            "a template whose string doubles 40 times",
            Model,
            Raw::base().set("tokenizer.chat_template", Value::String(DOUBLING.into())),
        ),
        variant(
            "a template whose macro doubles its argument",
            Model,
            Raw::base().set("tokenizer.chat_template", Value::String(MACRO_DOUBLING.into())),
        ),
        variant(
            "a template that squares a string with replace",
            Model,
            Raw::base().set("tokenizer.chat_template", Value::String(SQUARING.into())),
        ),
        variant(
            "a template that does not parse",
            Model,
            Raw::base().set("tokenizer.chat_template", Value::String("{% for %}".into())),
        ),
        variant(
            "a template that raises",
            Model,
            Raw::base().set("tokenizer.chat_template", Value::String("{{ raise_exception('no') }}".into())),
        ),
        variant(
            "a tensor of 2^32 x 2^32",
            File,
            Raw::base().tensor("token_embd.weight", |t| t.dims = vec![1 << 32, 1 << 32]),
        ),
        variant(
            "a tensor of 2^64-1 elements",
            File,
            Raw::base().tensor("output_norm.weight", |t| t.dims = vec![u64::MAX]),
        ),
        variant("a tensor of zero dimensions", File, Raw::base().tensor("output_norm.weight", |t| t.dims = Vec::new())),
        variant(
            "a tensor of 5 dimensions",
            File,
            Raw::base().tensor("output_norm.weight", |t| t.dims = vec![1, 1, 1, 1, 64]),
        ),
        variant("a tensor of unknown type", File, Raw::base().tensor("output_norm.weight", |t| t.type_id = 99)),
        variant(
            "a tensor at an unaligned offset",
            File,
            Raw::base().tensor("output_norm.weight", |t| t.offset = Some(3)),
        ),
        variant("a tensor past the end", File, Raw::base().tensor("output_norm.weight", |t| t.offset = Some(1 << 40))),
        variant(
            "a tensor at offset 2^64-32",
            File,
            Raw::base().tensor("output_norm.weight", |t| t.offset = Some(u64::MAX - 31)),
        ),
        variant("a quantized tensor of odd rows", File, Raw::base().tensor("output_norm.weight", |t| t.type_id = 12)),
        variant(
            "a tensor of the wrong shape",
            Model,
            Raw::base().tensor("blk.0.attn_q.weight", |t| t.dims = vec![64, 32]),
        ),
        variant(
            "embeddings of the wrong width",
            Model,
            Raw::base().tensor("token_embd.weight", |t| t.dims = vec![518, 32]),
        ),
        variant("output of another vocabulary", Model, Raw::base().tensor("output.weight", |t| t.dims = vec![128, 64])),
        variant(
            "NaN weights",
            Model,
            Raw::base().tensor("output.weight", |t| {
                t.data = f32::NAN.to_le_bytes().repeat(t.data.len() / 4);
            }),
        ),
    ]);
    let mut missing = Raw::base();
    missing.tensors.retain(|t| t.name != "blk.1.ffn_up.weight");
    all.push(variant("a missing tensor", Model, missing));
    let mut twice = Raw::base();
    let copy = RawTensor { data: twice.tensors[1].data.clone(), ..twice.tensors[1].shallow() };
    twice.tensors.push(copy);
    all.push(variant("a tensor listed twice", File, twice));
    let mut duplicate_key = Raw::base();
    duplicate_key.metadata.push(("general.architecture".into(), Value::String("llama".into())));
    all.push(variant("a key listed twice", File, duplicate_key));
    let nested = (0..8).fold(Value::U32(1), |v, _| Value::Array(vec![v]));
    all.push(variant("arrays nested 8 deep", File, Raw::base().set("general.nested", nested)));
    let mut huge_context =
        variant("a KV cache of 2 TB", Model, Raw::base().set(&key("context_length"), Value::U32(u32::MAX)));
    huge_context.generate_args = vec!["--ctx".into(), (1u64 << 40).to_string()];
    all.push(huge_context);
    all
}

struct Outcome {
    code: Option<i32>,
    stderr: String,
}

/// Run `specula` under a 4 GB address-space limit and a 30 s time limit.
fn run(args: &[&str]) -> Outcome {
    let output = Command::new("sh")
        .arg("-c")
        .arg(r#"ulimit -v 4194304; exec timeout 30 "$0" "$@""#)
        .arg(env!("CARGO_BIN_EXE_specula"))
        .args(args)
        .env("SPECULA_LOG", "warn")
        .output()
        .expect("running specula");
    Outcome { code: output.status.code(), stderr: String::from_utf8_lossy(&output.stderr).into_owned() }
}

/// Why `outcome` is not a clean refusal (or a clean success where one is allowed).
fn fault(outcome: &Outcome, must_fail: bool) -> Option<String> {
    let errors = outcome.stderr.lines().filter(|l| l.starts_with("error:")).count();
    match outcome.code {
        _ if outcome.stderr.contains("panicked") => Some("panicked".into()),
        Some(124) => Some("hung (30 s)".into()),
        None => Some("killed by a signal (an abort?)".into()),
        Some(2) if errors == 1 => None,
        Some(2) => Some(format!("{errors} error lines")),
        Some(0 | 1) if !must_fail => None,
        Some(code) => Some(format!("exit code {code}")),
    }
}

fn path_str(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn the_base_model_of_the_corpus_is_valid() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("base.gguf");
    std::fs::write(&path, Raw::base().bytes()).unwrap();
    let generate =
        run(&["generate", "--model", path_str(&path), "--prompt", "hi", "--max-tokens", "4", "--device", "cpu"]);
    assert_eq!(generate.code, Some(0), "{}", generate.stderr);
    assert_eq!(run(&["tokenize", "--model", path_str(&path), "--text", "hi"]).code, Some(0));
}

#[test]
fn no_hostile_model_file_crashes_hangs_or_escapes() {
    let dir = tempfile::tempdir().unwrap();
    let corpus = corpus();
    assert!(corpus.len() >= 40, "{} variants", corpus.len());
    let mut faults = Vec::new();
    for (i, v) in corpus.iter().enumerate() {
        let path: PathBuf = dir.path().join(format!("variant-{i}.gguf"));
        std::fs::write(&path, &v.bytes).unwrap();
        let p = path_str(&path);
        let mut generate = vec!["generate", "--model", p, "--prompt", "hi", "--max-tokens", "4", "--device", "cpu"];
        generate.extend(v.generate_args.iter().map(String::as_str));
        let checks = [
            (
                "tokenize",
                run(&["tokenize", "--model", p, "--text", "hi"]),
                matches!(v.broken, Broken::File | Broken::Tokenizer),
            ),
            ("generate", run(&generate), true),
            ("doctor", run(&["doctor", p, p]), matches!(v.broken, Broken::File)),
        ];
        for (command, outcome, must_fail) in checks {
            let first_error = outcome.stderr.lines().find(|l| l.starts_with("error:")).unwrap_or("").to_string();
            eprintln!("{:<40} {command:<8} exit {:?}  {first_error}", v.name, outcome.code);
            if let Some(why) = fault(&outcome, must_fail) {
                faults.push(format!("{} / {command}: {why}\n{}", v.name, outcome.stderr));
            }
        }
    }
    assert!(faults.is_empty(), "{} faults:\n{}", faults.len(), faults.join("\n"));
}
