//! `generate` and `chat` against a remote engine (`--remote URL`): any server that speaks the
//! OpenAI API. The reply prints as a local one does, coloured by provenance where the remote
//! reports it (another `specula serve`); any failure is one `error:` line and exit status 2.

use crate::run::{
    chat_loop, options, print_reply, print_stats, read_file, user_prompt, ChatArgs, CliResult, GenerateArgs, Printer,
    RemoteArgs,
};
use crate::{ModelArgs, SamplingArgs};
use specula_engine::{Generation, Message};
use specula_remote::{Limits, Remote, RemoteTicket};
use std::time::Duration;

impl RemoteArgs {
    /// The remote to talk to, or `None` for a local model. Local-only options are refused
    /// with the reason: a remote drafts, or not, as it was started.
    pub fn open(&self, model: &ModelArgs) -> Result<Option<(Remote, String)>, String> {
        let Some(url) = &self.remote else { return Ok(None) };
        if model.draft.is_some() || model.drafter.is_some() || model.draft_vocab.is_some() {
            return Err("--draft, --drafter and --draft-vocab are the remote's own: start it with its draft".into());
        }
        let key = match &self.api_key_file {
            Some(path) => Some(read_file(path)?.lines().next().unwrap_or_default().trim().to_string()),
            None => None,
        };
        let limits = match self.remote_timeout {
            Some(secs) => Limits::default().with_first_token(Duration::from_secs(secs)),
            None => Limits::default(),
        };
        let remote = Remote::with_limits(url, key, limits).map_err(|e| e.to_string())?;
        Ok(Some((remote, model.model.to_string_lossy().into_owned())))
    }
}

/// `specula generate --remote ...`; `None` when no remote was named (a local model's reply).
pub fn try_generate(args: &GenerateArgs) -> Option<CliResult> {
    let reply = || -> CliResult {
        let Some((remote, model)) = args.remote.open(&args.model)? else { return Ok(()) };
        if args.raw {
            return Err("--raw needs a local model: a remote takes chat messages".into());
        }
        let mut messages: Vec<Message> = args.system.iter().map(Message::system).collect();
        // Files go inlined; the remote, whose tokenizer this side lacks, refuses what is too long.
        let files = crate::attach::read_all(&args.attach)?;
        messages.push(Message::user(specula_attach::inline(&user_prompt(args)?, &files)));
        generate(&remote, &model, &messages, &args.sampling, args.json)
    };
    args.remote.remote.is_some().then(reply)
}

/// `specula chat --remote ...`; `None` when no remote was named.
pub fn try_chat(args: &ChatArgs) -> Option<CliResult> {
    let turns = || -> CliResult {
        let Some((remote, model)) = args.remote.open(&args.model)? else { return Ok(()) };
        chat(&remote, &model, args.system.as_deref(), &args.sampling)
    };
    args.remote.remote.is_some().then(turns)
}

/// One reply from the remote, streamed to stdout (or as JSON at the end).
pub fn generate(remote: &Remote, model: &str, messages: &[Message], sampling: &SamplingArgs, json: bool) -> CliResult {
    let ticket = remote.chat(model, messages, &options(sampling));
    let generation = if json { print_remote(&ticket, None) } else { print_remote(&ticket, Some(&mut Printer::new())) };
    if !json {
        println!();
    }
    let generation = generation?;
    if json {
        let json = serde_json::to_string(&generation).map_err(|e| e.to_string())?;
        println!("{}", crate::safe_text::printable_json(&json));
    }
    print_stats(&generation);
    Ok(())
}

/// A terminal chat with the remote (the same turns as a local chat, `run::chat_loop`).
pub fn chat(remote: &Remote, model: &str, system: Option<&str>, sampling: &SamplingArgs) -> CliResult {
    let options = options(sampling);
    let who = format!("{model} at {}", remote.base_url());
    chat_loop(system, &who, |messages| print_remote(&remote.chat(model, messages, &options), Some(&mut Printer::new())))
}

fn print_remote(ticket: &RemoteTicket, printer: Option<&mut Printer>) -> Result<Generation, String> {
    print_reply(|| ticket.recv(), || ticket.cancel(), printer)
}
