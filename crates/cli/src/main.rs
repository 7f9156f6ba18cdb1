//! `specula`: generate, chat, tokenize and bench with exact speculative decoding.
//! The first client of every engine feature.

mod attach;
mod bench;
mod chats;
mod device_check;
mod library;
mod remote;
mod run;
mod safe_text;
mod speed;
mod tools;

use clap::{Args, Parser, Subcommand};
use specula_engine::sampling::{Mode, SamplingParams};
use specula_engine::DrafterKind;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "specula", version, about = "Local LLMs, faster: exact speculative decoding on GGUF models")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Generate one reply and stream it to stdout.
    Generate(run::GenerateArgs),
    /// A multi-turn chat in the terminal.
    Chat(run::ChatArgs),
    /// Print the token ids of a text as a JSON list.
    Tokenize(run::TokenizeArgs),
    /// Print the prompt a model's chat template makes of a chat, and its token count.
    ChatTemplate(run::ChatTemplateArgs),
    /// Plain vs speculative decoding, side by side on a prompt set.
    Bench(bench::BenchArgs),
    /// Prompt processing and generation speed, as llama.cpp's llama-bench measures them.
    Speed(speed::SpeedArgs),
    /// An OpenAI-compatible HTTP server (and the web UI with --ui).
    Serve(run::ServeArgs),
    /// Whether two models can pair as target and draft, and if not, exactly why.
    Doctor(DoctorArgs),
    /// The desktop app's chats: list, export (Specula JSON or Markdown) and import (Specula,
    /// ChatGPT, Open WebUI, llama.cpp's web UI).
    Chats(chats::ChatsArgs),
    /// Download a GGUF file from Hugging Face Hub (resumes, checks sha256).
    Pull(library::PullArgs),
    /// The models on this machine: the Hugging Face cache and Specula's models folder.
    Models(library::ModelsArgs),
    /// Write a synthetic GGUF: a real model's shapes and tokenizer, random weights (for
    /// measuring costs where the real weights cannot go).
    Synth(SynthArgs),
    /// Exactness and costs on a device with synthetic models only (the GPU check that travels:
    /// scripts/gpu-bundle.sh).
    DeviceCheck(device_check::DeviceCheckArgs),
}

#[derive(Args)]
struct SynthArgs {
    /// tiny, tiny-q4k, tiny-q5, qwen2.5-0.5b, qwen2.5-1.5b or qwen2.5-7b.
    #[arg(long, required_unless_present = "tokenizer_only")]
    preset: Option<String>,
    /// Write no model, only the tokenizer of --tokenizer-from: a small header that gives
    /// synthetic models a real vocabulary where the real model cannot go.
    #[arg(long, requires = "tokenizer_from", conflicts_with = "preset")]
    tokenizer_only: bool,
    /// Where to write the .gguf.
    #[arg(long)]
    out: PathBuf,
    /// Copy the tokenizer (vocabulary, merges, chat template) from this GGUF; default: a tiny
    /// byte-level one.
    #[arg(long)]
    tokenizer_from: Option<PathBuf>,
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

fn synth(args: SynthArgs) -> Result<ExitCode, String> {
    use specula_engine::synth;
    let tokenizer = match &args.tokenizer_from {
        Some(path) => synth::tokenizer_of(path).map_err(|e| e.to_string())?,
        None => synth::tiny_tokenizer(),
    };
    let started = std::time::Instant::now();
    match &args.preset {
        Some(preset) => {
            let spec = synth::Spec::preset(preset, args.seed).map_err(|e| e.to_string())?;
            synth::write(&spec, &tokenizer, &args.out)
        }
        None => synth::write_tokenizer_header(&tokenizer, &args.out),
    }
    .map_err(|e| e.to_string())?;
    let bytes = std::fs::metadata(&args.out).map(|m| m.len()).unwrap_or(0);
    eprintln!("{}: {} MB in {:.1} s", args.out.display(), bytes / 1_000_000, started.elapsed().as_secs_f64());
    Ok(ExitCode::SUCCESS)
}

#[derive(Args)]
struct DoctorArgs {
    target: PathBuf,
    draft: PathBuf,
    /// Print the diagnosis as JSON.
    #[arg(long)]
    json: bool,
    /// When the pair can pair, also decode a short code prompt with it, plain and speculative,
    /// and report the measured speedup on this machine (about 20 s for a 1.5B target on 2 cores).
    #[arg(long)]
    trial: bool,
    /// Tokens the trial decodes.
    #[arg(long, default_value_t = 32)]
    trial_tokens: usize,
    /// Device of the trial: auto, cpu, cuda, cuda:N or metal.
    #[arg(long, default_value = "auto")]
    device: String,
}

/// The trial's context: the prompt and its reply fit with room to spare.
const TRIAL_CONTEXT: usize = 1024;

/// Exit status 0 when the pair can pair, 1 when it cannot, 2 on an error.
fn doctor(args: DoctorArgs) -> Result<ExitCode, String> {
    let diagnosis = specula_hub::doctor::diagnose(&args.target, &args.draft).map_err(|e| e.to_string())?;
    let trial = match args.trial && diagnosis.compatible {
        true => Some(doctor_trial(&args)?),
        false => None,
    };
    if args.json {
        let mut report = serde_json::to_value(&diagnosis).map_err(|e| e.to_string())?;
        report["trial"] = serde_json::to_value(&trial).map_err(|e| e.to_string())?;
        let json = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
        println!("{}", safe_text::printable_json(&json));
    } else {
        // Names and tokens read from the two files: their control characters are shown.
        print!("{}", safe_text::printable(&diagnosis.to_string()));
        if let Some(trial) = &trial {
            print!("{trial}");
        }
    }
    Ok(if diagnosis.compatible { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

fn doctor_trial(args: &DoctorArgs) -> Result<specula_hub::doctor::Trial, String> {
    if args.trial_tokens == 0 {
        return Err("--trial-tokens must be at least 1: a trial of no tokens measures nothing".into());
    }
    let device = specula_engine::device::select(&args.device).map_err(|e| e.to_string())?;
    let mut session = specula_engine::Session::load(&args.target, &device, TRIAL_CONTEXT).map_err(|e| e.to_string())?;
    session.load_draft(&args.draft, &device).map_err(|e| e.to_string())?;
    specula_hub::doctor::trial(&mut session, args.trial_tokens).map_err(|e| e.to_string())
}

/// Model, draft and device options shared by the commands that decode.
#[derive(Args, Clone)]
pub struct ModelArgs {
    /// Target model (.gguf); for generate and chat with --remote, the remote's model id.
    #[arg(long)]
    pub model: PathBuf,
    /// Draft model (.gguf) with the target's vocabulary; enables speculative decoding.
    #[arg(long)]
    pub draft: Option<PathBuf>,
    /// Who drafts: model (the --draft model), lookup (n-grams from the conversation), auto (the
    /// --draft model, and free copies from the conversation where they are expected to do
    /// better, step by step) or none.
    /// Default: model when --draft is given, none otherwise.
    #[arg(long)]
    pub drafter: Option<DrafterKind>,
    /// Let the draft propose only its N most frequent tokens (the output stays exactly the
    /// target's; only acceptance and the draft's cost move). 0: every token. Default: the
    /// engine's choice for the pair, measured (see BENCHMARKS.md).
    #[arg(long)]
    pub draft_vocab: Option<usize>,
    /// KV cache size in tokens, capped at the model's trained context. 0 (the default): the
    /// trained context, capped by the memory free beside the weights (memory is taken as the
    /// context fills).
    #[arg(long, default_value_t = specula_engine::AUTO_CONTEXT)]
    pub ctx: usize,
    /// How the KV cache stores keys and values: f16 (half the memory and half the reads at
    /// depth), q8_0 (about a quarter, each value rounded to 8 bits; CPU only) or f32 (the
    /// reference format).
    #[arg(long, default_value = specula_engine::protocol::DEFAULT_KV_FORMAT.as_str())]
    pub kv: specula_engine::KvFormat,
    /// A prompt longer than the context: stop (an error), truncate-middle (keep the system
    /// prompt and the first exchange, drop middle turns; cut the middle of a single long
    /// message) or rolling (drop the oldest turns). A reply that fills the context goes on
    /// after the same, or ends as "context full" with stop.
    #[arg(long, default_value = "stop")]
    pub overflow: specula_engine::Overflow,
    /// auto, cpu, cuda, cuda:N or metal.
    #[arg(long, default_value = "auto")]
    pub device: String,
}

#[derive(Args, Clone)]
pub struct SamplingArgs {
    /// greedy, sample, or reproducible (Gumbel sampling fixed by the seed: the same reply with
    /// or without a draft).
    #[arg(long, default_value = "reproducible")]
    pub mode: Mode,
    /// 0 means greedy.
    #[arg(long, default_value_t = 0.8)]
    pub temperature: f32,
    #[arg(long, default_value_t = 0.95)]
    pub top_p: f32,
    /// 0 keeps every token.
    #[arg(long, default_value_t = 40)]
    pub top_k: usize,
    #[arg(long, default_value_t = 0.05)]
    pub min_p: f32,
    #[arg(long, default_value_t = 1.0)]
    pub repeat_penalty: f32,
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Most tokens to generate.
    #[arg(long, default_value_t = specula_engine::protocol::DEFAULT_MAX_TOKENS)]
    pub max_tokens: usize,
    /// Stop when the reply contains this text (repeatable).
    #[arg(long)]
    pub stop: Vec<String>,
}

impl SamplingArgs {
    pub fn params(&self) -> SamplingParams {
        SamplingParams {
            mode: self.mode,
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repetition_penalty: self.repeat_penalty,
            seed: self.seed,
        }
    }
}

fn main() -> ExitCode {
    // A model's chat template and an attached PDF are read in a child of this binary, under a
    // memory and a time limit.
    specula_isolate::start(&[&specula_engine::chat::TEMPLATE_RENDER, &specula_attach::PDF_READ]);
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("SPECULA_LOG")
                .unwrap_or_else(|_| "warn,specula_engine=info,specula_server=info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Generate(args) => {
            remote::try_generate(&args).unwrap_or_else(|| run::generate(args)).map(|()| ExitCode::SUCCESS)
        }
        Command::Chat(args) => remote::try_chat(&args).unwrap_or_else(|| run::chat(args)).map(|()| ExitCode::SUCCESS),
        Command::Tokenize(args) => run::tokenize(args).map(|()| ExitCode::SUCCESS),
        Command::ChatTemplate(args) => run::chat_template(args).map(|()| ExitCode::SUCCESS),
        Command::Bench(args) => bench::bench(args).map(|()| ExitCode::SUCCESS),
        Command::Speed(args) => speed::speed(args).map(|()| ExitCode::SUCCESS),
        Command::Serve(args) => run::serve(args).map(|()| ExitCode::SUCCESS),
        Command::Doctor(args) => doctor(args),
        Command::Chats(args) => chats::chats(args).map(|()| ExitCode::SUCCESS),
        Command::Pull(args) => library::pull(args).map(|()| ExitCode::SUCCESS),
        Command::Models(args) => library::models(args).map(|()| ExitCode::SUCCESS),
        Command::Synth(args) => synth(args),
        Command::DeviceCheck(args) => device_check::device_check(args),
    };
    match result {
        Ok(code) => code,
        Err(message) => {
            // The message may carry a remote's words or a file's: shown, never obeyed.
            eprintln!("error: {}", safe_text::printable(&message));
            ExitCode::from(2)
        }
    }
}
