//! `generate`, `chat` and `tokenize`.

use crate::safe_text::{printable, printable_json, PrintableStream};
use crate::tools::ToolArgs;
use crate::{ModelArgs, SamplingArgs};
use clap::Args;
use specula_engine::chat::RenderOptions;
use specula_engine::protocol::Collected;
use specula_engine::protocol::{FinishReason, Reasoning, Trim};
use specula_engine::service::{EngineHandle, Prompt, ReplyEvent, Request, ServiceConfig};
use specula_engine::speculative::KSetting;
use specula_engine::{
    device, Decoding, Flow, GenerateOptions, Generation, Message, ReplyTo, Session, Source, TokenEvent, TokenSink,
};
use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;

#[derive(Args)]
pub struct GenerateArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub remote: RemoteArgs,
    #[command(flatten)]
    pub tools: ToolArgs,
    /// Draft length: 1-16, or auto to choose it per step from measured costs.
    #[arg(long, default_value = "auto")]
    k: KSetting,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// The user's message (or, with --raw, the whole prompt).
    #[arg(long, conflicts_with = "prompt_file", required_unless_present = "prompt_file")]
    prompt: Option<String>,
    /// Read the prompt from a file.
    #[arg(long)]
    prompt_file: Option<PathBuf>,
    /// System prompt (otherwise the chat template's default, if any).
    #[arg(long)]
    pub system: Option<String>,
    /// Use the prompt as it is, without the chat template.
    #[arg(long)]
    pub raw: bool,
    /// Attach a file to the message (repeatable): text, code, Markdown, CSV, JSON or PDF,
    /// inlined under its name; refused with its token count when it would not fit.
    #[arg(long, value_name = "FILE", conflicts_with = "raw")]
    pub attach: Vec<PathBuf>,
    /// Print one JSON object when done instead of streaming text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct ChatArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub remote: RemoteArgs,
    #[command(flatten)]
    pub tools: ToolArgs,
    /// Draft length: 1-16, or auto to choose it per step from measured costs.
    #[arg(long, default_value = "auto")]
    k: KSetting,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    #[arg(long)]
    pub system: Option<String>,
}

/// Where `generate` and `chat` send their turns instead of a local model (crates/cli/src/remote.rs).
#[derive(Args, Clone, Default)]
pub struct RemoteArgs {
    /// Chat with a remote engine (an OpenAI-compatible base URL, e.g. http://gpu-box:8080)
    /// instead of a local model; --model then names the remote's model id.
    #[arg(long)]
    pub remote: Option<String>,
    /// The remote's API key, read from this file (its first line).
    #[arg(long, requires = "remote")]
    pub api_key_file: Option<PathBuf>,
    /// How long to wait for the remote's first token (it reads the whole prompt first)
    /// [default: 600]
    #[arg(long, requires = "remote", value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..))]
    pub remote_timeout: Option<u64>,
}

#[derive(Args)]
pub struct ServeArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// Draft length: 1-16, or auto.
    #[arg(long, default_value = "auto")]
    k: KSetting,
    /// Loopback by default: the API is for this machine unless you say otherwise.
    #[arg(long, default_value = "127.0.0.1")]
    host: std::net::IpAddr,
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Require `Authorization: Bearer KEY` on every API request, the key read from this file
    /// (its first line). `SPECULA_API_KEY` in the environment does the same.
    #[arg(long)]
    api_key_file: Option<PathBuf>,
    /// The key itself (visible to every user in `ps`: prefer the file or the environment).
    #[arg(long, hide = true)]
    api_key: Option<String>,
    /// Also answer requests for this host name (on a loopback bind only localhost is
    /// answered, against DNS rebinding). Repeatable.
    #[arg(long)]
    allowed_host: Vec<String>,
    /// Serve beyond this machine without an API key.
    #[arg(long)]
    allow_no_key: bool,
    /// Requests queued or running before new ones get 503 with Retry-After.
    #[arg(long, default_value_t = 32)]
    max_queue: usize,
    /// Replies decoded at once, their target (and draft) passes taken together; each is token
    /// for token the reply it would get alone. Fewer when memory cannot hold that many full
    /// contexts; 1 on a GPU. 1: one at a time, the others queued.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=64))]
    parallel: u16,
    /// Connections served at once; more wait.
    #[arg(long, default_value_t = 256)]
    max_connections: usize,
    /// Seconds a request may take, queued time included, before it is cancelled.
    #[arg(long, default_value_t = 600)]
    request_timeout: u64,
    /// MiB of earlier prompts' caches kept in memory, so that a caller who comes back (a chat
    /// taken up again) resumes where it was instead of the prompt being read again; shared by
    /// every caller. Default: a quarter of the memory free after loading, at most 8 GiB; 0: none.
    #[arg(long, value_name = "MIB")]
    cache_ram: Option<usize>,
    /// Keep callers' prompt caches in this folder too, across restarts: written when no
    /// request waits, read when a prompt resumes one no longer in memory. Off by default.
    #[arg(long, value_name = "DIR")]
    cache_dir: Option<PathBuf>,
    /// The most the --cache-dir folder holds, in MiB (least recently used files go first).
    #[arg(long, value_name = "MIB", default_value_t = 4096)]
    cache_dir_mib: u64,
    /// Also serve the built web UI (ui/dist, or the folder given).
    #[arg(long, num_args = 0..=1, default_missing_value = "ui/dist")]
    ui: Option<PathBuf>,
}

#[derive(Args)]
pub struct TokenizeArgs {
    #[arg(long)]
    model: PathBuf,
    #[arg(long, conflicts_with = "file", required_unless_present = "file")]
    text: Option<String>,
    #[arg(long)]
    file: Option<PathBuf>,
}

#[derive(Args)]
pub struct ChatTemplateArgs {
    #[arg(long)]
    model: PathBuf,
    /// A JSON file: the chat's messages as OpenAI's API takes them (a list, or a request
    /// object whose `messages`, `tools` and `chat_template_kwargs` are read).
    #[arg(long)]
    messages: PathBuf,
    /// A JSON file: the tools (OpenAI's `tools` list) the template writes into the prompt.
    #[arg(long)]
    tools: Option<PathBuf>,
    /// Template variables as JSON, for example '{"enable_thinking": false}'.
    #[arg(long)]
    kwargs: Option<String>,
    /// End after the last message, without the header of the assistant's reply.
    #[arg(long)]
    no_generation_prompt: bool,
}

pub type CliResult = Result<(), String>;

pub fn read_file(path: &PathBuf) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// Load the target, and the draft when one is given; refuse `--drafter model` without one.
pub fn open_session(args: &ModelArgs) -> Result<Session, String> {
    if args.drafter == Some(specula_engine::DrafterKind::Model) && args.draft.is_none() {
        return Err("--drafter model needs --draft MODEL.gguf".into());
    }
    let device = device::select(&args.device).map_err(|e| e.to_string())?;
    let mut session = Session::load_with(&args.model, &device, args.ctx, args.kv).map_err(|e| e.to_string())?;
    if let Some(draft) = &args.draft {
        session.load_draft(draft, &device).map_err(|e| e.to_string())?;
        let vocab = args.draft_vocab.map_or(specula_engine::DEFAULT_DRAFT_VOCAB, |n| (n > 0).then_some(n));
        session.set_draft_vocab(vocab).map_err(|e| e.to_string())?;
    }
    Ok(session)
}

/// How replies are decoded: `--drafter` (default: the draft model when one is loaded) and k.
pub fn decoding(args: &ModelArgs, k: KSetting, session: &Session) -> Decoding {
    Decoding { drafter: args.drafter.unwrap_or_else(|| session.default_drafter()), k }
}

/// The user's message (or, with --raw, the whole prompt).
pub fn user_prompt(args: &GenerateArgs) -> Result<String, String> {
    match (&args.prompt, &args.prompt_file) {
        (Some(text), _) => Ok(text.clone()),
        (None, Some(path)) => read_file(path),
        (None, None) => Err("give --prompt or --prompt-file".into()),
    }
}

pub fn generate(args: GenerateArgs) -> CliResult {
    let files = crate::attach::read_all(&args.attach)?;
    let user = specula_attach::inline(&user_prompt(&args)?, &files);
    if args.raw && args.tools.mcp_config.is_some() {
        return Err("--mcp-config needs the chat template, which --raw leaves out".into());
    }
    let mut session = open_session(&args.model)?;
    let mut tools = args.tools.open(!args.json)?;
    let decoding = decoding(&args.model, args.k, &session);
    let raw = match args.raw {
        true => session.target.tokenizer.encode(&user).map_err(|e| e.to_string())?,
        false => Vec::new(),
    };
    let render = RenderOptions::default();
    let mut messages: Vec<Message> = args.system.iter().map(Message::system).collect();
    messages.push(Message::user(user));
    crate::attach::check_fit(&session, &messages, &files)?;
    let options = options(&args.sampling);
    let overflow = args.model.overflow;
    let reply_to = |session: &mut Session, to: ReplyTo| {
        let generation = if args.json {
            session.reply(to, overflow, &options, decoding, &mut specula_engine::NullSink)
        } else {
            session.reply(to, overflow, &options, decoding, &mut Printer::new())
        };
        generation.map_err(|e| e.to_string())
    };
    let generation = match (&mut tools, args.raw) {
        (_, true) => reply_to(&mut session, ReplyTo::Tokens(&raw))?,
        (None, false) => reply_to(&mut session, ReplyTo::Chat { messages: &messages, tools: &[], render: &render })?,
        (Some(tools), false) => tools.reply(&mut messages, |messages, offered| {
            reply_to(&mut session, ReplyTo::Chat { messages, tools: offered, render: &render })
        })?,
    };
    if args.json {
        let json = serde_json::to_string(&generation).map_err(|e| e.to_string())?;
        println!("{}", printable_json(&json));
    } else {
        println!();
    }
    print_stats(&generation);
    Ok(())
}

/// A terminal chat, driven through the engine service as the app and the server drive it.
pub fn chat(args: ChatArgs) -> CliResult {
    let session = open_session(&args.model)?;
    let name = session.target.info.name.clone();
    let config =
        ServiceConfig { max_queue: 1, default_k: args.k, default_drafter: args.model.drafter, ..Default::default() };
    let engine = EngineHandle::spawn(session, config);
    let options = options(&args.sampling);
    let mut tools = args.tools.open(true)?;
    let reply = |messages: &[Message], offered: &[serde_json::Value]| {
        let mut request = Request::new(Prompt::Chat(messages.to_vec()), options.clone());
        request.overflow = args.model.overflow;
        request.tools = offered.to_vec();
        let ticket = engine.submit(request).map_err(|e| e.to_string())?;
        print_reply(|| ticket.recv(), || ticket.cancel(), Some(&mut Printer::new()))
    };
    chat_loop(args.system.as_deref(), &name, |messages| match &mut tools {
        Some(tools) => tools.reply(messages, reply),
        None => reply(messages, &[]),
    })
}

/// The terminal chat's turns, whoever answers: a line from stdin, the reply printed as it
/// comes by `reply`, its stats; a failed turn is reported and dropped, and the chat goes on.
pub fn chat_loop(
    system: Option<&str>,
    who: &str,
    mut reply: impl FnMut(&mut Vec<Message>) -> Result<Generation, String>,
) -> CliResult {
    let mut messages: Vec<Message> = system.map(Message::system).into_iter().collect();
    let stdin = std::io::stdin();
    let interactive = stdin.is_terminal();
    if interactive {
        eprintln!("Chatting with {}. Empty line or Ctrl-D to quit.", printable(who));
    }
    loop {
        if interactive {
            eprint!("> ");
        }
        let mut line = String::new();
        if stdin.lock().read_line(&mut line).map_err(|e| e.to_string())? == 0 || line.trim().is_empty() {
            return Ok(());
        }
        let before = messages.len();
        messages.push(Message::user(line.trim_end()));
        // The reply may add turns of its own (tool calls and their results) before its answer.
        let answer = reply(&mut messages);
        println!();
        match answer {
            Ok(generation) => {
                print_stats(&generation);
                messages.push(Message::assistant(generation.text));
            }
            Err(e) => {
                // The conversation so far stays; only this turn is dropped.
                messages.truncate(before);
                eprintln!("error: {}", printable(&e));
            }
        }
    }
}

/// Print a reply's tokens as they come (when there is a printer), a local one's or a remote's
/// alike; the reply, or why there is none, at the end. `cancel` stops it (a closed stdout).
pub fn print_reply(
    mut next: impl FnMut() -> Option<ReplyEvent>,
    cancel: impl Fn(),
    mut printer: Option<&mut Printer>,
) -> Result<Generation, String> {
    let mut reply = Collected::default();
    while let Some(event) = next() {
        if let (ReplyEvent::Trimmed { trim }, Some(_)) = (&event, printer.as_ref()) {
            print_trim(trim);
        }
        if let (ReplyEvent::Reasoning { reasoning }, Some(printer)) = (&event, printer.as_mut()) {
            printer.on_reasoning(reasoning);
        }
        if let (ReplyEvent::Tokens { tokens }, Some(printer)) = (&event, printer.as_mut()) {
            if tokens.iter().any(|token| printer.on_token(token) == Flow::Stop) {
                cancel();
            }
        }
        if let Some(end) = reply.add(event) {
            return end.map_err(|e| e.to_string());
        }
    }
    Err("the reply ended without an outcome".into())
}

pub fn serve(args: ServeArgs) -> CliResult {
    if let Some(dir) = &args.ui {
        if !dir.join("index.html").exists() {
            return Err(format!("{}: no built web UI there (build it with `npm run build` in ui/)", dir.display()));
        }
    }
    if let Some(dir) = &args.cache_dir {
        // Refused before the model loads: a folder others control could feed the model forged
        // caches or read the cached prompts.
        specula_engine::decode::disk_cache::prepare_folder(dir).map_err(|e| e.to_string())?;
    }
    let access = access(&args)?;
    let session = open_session(&args.model)?;
    let model_id = args.model.model.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let engine = ServiceConfig {
        max_queue: args.max_queue,
        parallel: args.parallel.into(),
        default_k: args.k,
        default_drafter: args.model.drafter,
        prompt_cache_bytes: args.cache_ram.map(|mib| mib << 20),
        disk_cache: args.cache_dir.clone().map(|dir| (dir, args.cache_dir_mib << 20)),
        ..Default::default()
    };
    let limits = specula_server::listen::Limits { max_connections: args.max_connections, ..Default::default() };
    let config = specula_server::ServerConfig {
        model_id,
        access,
        limits,
        ui_dir: args.ui,
        request_timeout: std::time::Duration::from_secs(args.request_timeout),
        overflow: args.model.overflow,
    };
    let runtime = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
    let addr = std::net::SocketAddr::new(args.host, args.port);
    runtime
        .block_on(specula_server::serve(session, engine, config, addr))
        .map_err(|e| format!("serving on {addr}: {e}"))
}

/// The key (file, environment or flag) and the host names to answer. A server reachable from
/// other machines must have a key unless the user says otherwise.
fn access(args: &ServeArgs) -> Result<specula_server::security::Access, String> {
    let from_file = match &args.api_key_file {
        Some(path) => Some(read_file(path)?.lines().next().unwrap_or_default().trim().to_string()),
        None => None,
    };
    if args.api_key.is_some() {
        eprintln!(
            "warning: --api-key is visible to every user of this machine (ps); use --api-key-file or SPECULA_API_KEY"
        );
    }
    let api_key = from_file
        .or_else(|| std::env::var("SPECULA_API_KEY").ok())
        .or_else(|| args.api_key.clone())
        .filter(|k| !k.is_empty());
    let loopback = args.host.is_loopback();
    if !loopback && api_key.is_none() && !args.allow_no_key {
        return Err(format!(
            "serving on {} would let any machine on the network use this one: set SPECULA_API_KEY (or \
             --api-key-file), or pass --allow-no-key",
            args.host
        ));
    }
    let allowed_hosts = loopback.then(|| specula_server::security::loopback_hosts(&args.allowed_host));
    Ok(specula_server::security::Access { api_key, allowed_hosts })
}

pub fn tokenize(args: TokenizeArgs) -> CliResult {
    let text = match (&args.text, &args.file) {
        (Some(text), _) => text.clone(),
        (None, Some(path)) => read_file(path)?,
        (None, None) => return Err("give --text or --file".into()),
    };
    let gguf = specula_engine::gguf::GgufFile::open(&args.model).map_err(|e| e.to_string())?;
    let tokenizer = specula_engine::Tokenizer::from_gguf(&gguf).map_err(|e| e.to_string())?;
    let ids = tokenizer.encode(&text).map_err(|e| e.to_string())?;
    println!("{}", serde_json::to_string(&ids).map_err(|e| e.to_string())?);
    Ok(())
}

/// The prompt, byte for byte, on stdout (control characters shown escaped on a terminal);
/// its token count on stderr.
pub fn chat_template(args: ChatTemplateArgs) -> CliResult {
    let request: serde_json::Value = parse_json(&read_file(&args.messages)?, &args.messages.display().to_string())?;
    let (messages, mut tools, mut kwargs) = match request {
        serde_json::Value::Array(_) => (request, Vec::new(), serde_json::Map::new()),
        mut object => (
            object["messages"].take(),
            object["tools"].as_array().cloned().unwrap_or_default(),
            object["chat_template_kwargs"].as_object().cloned().unwrap_or_default(),
        ),
    };
    if let Some(path) = &args.tools {
        tools = parse_json(&read_file(path)?, &path.display().to_string())?;
    }
    if let Some(text) = &args.kwargs {
        kwargs = parse_json(text, "--kwargs")?;
    }
    let messages: Vec<specula_server::api::ChatMessage> = parse_json(&messages.to_string(), "messages")?;
    let messages = messages.into_iter().enumerate().map(|(i, m)| m.into_message(i)).collect::<Result<Vec<_>, _>>()?;
    let gguf = specula_engine::gguf::GgufFile::open(&args.model).map_err(|e| e.to_string())?;
    let tokenizer = specula_engine::Tokenizer::from_gguf(&gguf).map_err(|e| e.to_string())?;
    let template = specula_engine::ChatTemplate::from_gguf(&gguf, tokenizer.bos_text(), tokenizer.eos_text())
        .map_err(|e| e.to_string())?;
    let options =
        specula_engine::chat::RenderOptions { add_generation_prompt: !args.no_generation_prompt, kwargs, now: None };
    let text = template.render_text(&messages, &tools, &options).map_err(|e| e.to_string())?;
    let ids = specula_engine::chat_prompt_ids(&tokenizer, &template, &messages, &tools, &options)
        .map_err(|e| e.to_string())?;
    // Byte for byte into a pipe or a file; on a terminal, the template's (or the messages')
    // control characters are shown, not obeyed.
    match std::io::stdout().is_terminal() {
        true => print!("{}", printable(&text)),
        false => print!("{text}"),
    }
    let source = if template.from_model { "the model's template" } else { "ChatML (the model has no template)" };
    eprintln!("{} tokens ({source})", ids.len());
    Ok(())
}

fn parse_json<T: serde::de::DeserializeOwned>(text: &str, what: &str) -> Result<T, String> {
    serde_json::from_str(text).map_err(|e| format!("{what}: {e}"))
}

pub fn options(args: &SamplingArgs) -> GenerateOptions {
    GenerateOptions {
        max_tokens: args.max_tokens,
        sampling: args.params(),
        stop: args.stop.clone(),
        ..Default::default()
    }
}

/// Streams text to stdout, coloured by provenance when stdout is a terminal. The tokens'
/// text is the model's (or a remote's): its control characters are shown escaped
/// (`safe_text`), never sent to the terminal; the colour codes around it are ours.
pub struct Printer {
    colour: bool,
    text: PrintableStream,
    /// The reply is thinking: its text is printed dim.
    thinking: bool,
}

impl Printer {
    pub fn new() -> Self {
        Self {
            colour: std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none(),
            text: PrintableStream::default(),
            thinking: false,
        }
    }
}

impl TokenSink for Printer {
    fn on_trim(&mut self, trim: &Trim) -> Flow {
        print_trim(trim);
        Flow::Continue
    }

    fn on_reasoning(&mut self, reasoning: &Reasoning) -> Flow {
        self.thinking = !reasoning.ended;
        Flow::Continue
    }

    fn on_token(&mut self, token: &TokenEvent) -> Flow {
        let mut out = std::io::stdout().lock();
        let colour = match token.source {
            Source::Accepted => "32",  // green
            Source::Copied => "35",    // magenta
            Source::Resampled => "33", // yellow
            Source::Bonus => "36",     // cyan
            Source::Target => "",
        };
        let code = match (self.thinking, colour) {
            (true, "") => "2".to_string(), // dim: the model's thinking
            (true, colour) => format!("2;{colour}"),
            (false, colour) => colour.to_string(),
        };
        let (held, text) = self.text.next(&token.text);
        let written = if self.colour && !code.is_empty() {
            write!(out, "{held}\x1b[{code}m{text}\x1b[0m")
        } else {
            write!(out, "{held}{text}")
        };
        match written.and_then(|_| out.flush()) {
            Ok(()) => Flow::Continue,
            Err(_) => Flow::Stop, // stdout closed (a pipe ended): stop generating
        }
    }
}

/// The marker where the chat left the model's view, on stderr beside the reply.
fn print_trim(trim: &Trim) {
    eprintln!("\n[{}]", specula_engine::fitted::describe_trim(trim));
}

pub fn print_stats(g: &Generation) {
    let s = &g.stats;
    if g.finish_reason == FinishReason::ContextFull {
        eprintln!("[context full: the reply filled the context; --overflow truncate-middle or rolling goes on]");
    }
    let prefill_rate =
        s.prompt_tokens.saturating_sub(s.cached_prompt_tokens) as f64 / (s.prefill_ms / 1000.0).max(1e-9);
    eprintln!(
        "prompt: {} tokens ({} cached) in {:.0} ms, {:.1} tok/s · decode: {} tokens in {:.0} ms, {:.2} tok/s",
        s.prompt_tokens,
        s.cached_prompt_tokens,
        s.prefill_ms,
        prefill_rate,
        s.generated_tokens,
        s.decode_ms,
        s.tokens_per_second
    );
    if let Some(spec) = &s.speculative {
        let speedup = spec.speedup_vs_plain.map_or("n/a".into(), |x| format!("{x:.2}x"));
        let predicted = spec.predicted_speedup.map_or("n/a".into(), |x| format!("{x:.2}x"));
        eprintln!(
            "speculative: {speedup} vs plain (predicted {predicted}) · {}/{} drafts accepted ({:.0}%) · {} target passes, {:.2} tokens each · k {}-{}",
            spec.accepted,
            spec.drafted,
            spec.acceptance_rate * 100.0,
            spec.target_passes,
            spec.tokens_per_pass,
            spec.k_min,
            spec.k_max
        );
    }
}
