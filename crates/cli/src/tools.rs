//! Tools from MCP servers in `generate` and `chat` (`--mcp-config FILE`): each call the model
//! writes is shown and asked about on the terminal (or approved by `--allow-tools`), run, and
//! its result printed and given back to the model (crates/mcp runs the loop).

use crate::safe_text::printable;
use clap::Args;
use specula_engine::{Generation, Message};
use specula_mcp::{reply_with_tools, Approvals, Hooks, Limits, PendingCall, ToolDecision, ToolOutcome, Toolbox};
use std::io::{BufRead, Write};
use std::path::PathBuf;

#[derive(Args, Clone, Default)]
pub struct ToolArgs {
    /// Offer the model the tools of these MCP servers: an `mcp.json` file, as Claude Desktop,
    /// LM Studio and Jan write it ({"mcpServers": {"name": {"command": ..., "args": [...]}}},
    /// or {"url": ..., "headers": {...}} for Streamable HTTP). Each call is asked about first.
    #[arg(long, value_name = "FILE", conflicts_with = "remote")]
    pub mcp_config: Option<PathBuf>,
    /// Run every tool call without asking (for scripts).
    #[arg(long, requires = "mcp_config")]
    pub allow_tools: bool,
    /// Seconds one tool call may take [default: 60].
    #[arg(long, requires = "mcp_config", value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..))]
    pub tool_timeout: Option<u64>,
}

/// The servers' tools, with what the chat needs to ask about and run them.
pub struct Tools {
    toolbox: Toolbox,
    approvals: Approvals,
    allow_all: bool,
    /// The reply streams to stdout as text (not `--json`): a call's lines start on a new line.
    streamed: bool,
}

impl ToolArgs {
    /// Start the configured servers (`None` without `--mcp-config`); each one's tools, or why
    /// it has none, is said on stderr. `streamed`: the reply's text goes to stdout as it comes.
    pub fn open(&self, streamed: bool) -> Result<Option<Tools>, String> {
        let Some(path) = &self.mcp_config else { return Ok(None) };
        let specs = specula_mcp::read_config(path)?;
        let mut limits = Limits::default();
        if let Some(secs) = self.tool_timeout {
            limits.call = std::time::Duration::from_secs(secs);
        }
        let toolbox = Toolbox::start(specs, limits).map_err(|e| format!("the MCP runtime could not start: {e}"))?;
        for server in toolbox.status() {
            match &server.error {
                Some(why) => eprintln!("MCP server `{}`: not available: {}", printable(&server.name), printable(why)),
                None => eprintln!("MCP server `{}`: {}", printable(&server.name), printable(&server.tools.join(", "))),
            }
            if let Some(notice) = &server.notice {
                eprintln!("MCP server `{}`: {}", printable(&server.name), printable(notice));
            }
        }
        Ok(Some(Tools { toolbox, approvals: Approvals::default(), allow_all: self.allow_tools, streamed }))
    }
}

impl Tools {
    /// One reply with the tools: `reply` answers the messages with the tools given.
    pub fn reply(
        &mut self,
        messages: &mut Vec<Message>,
        reply: impl FnMut(&[Message], &[serde_json::Value]) -> Result<Generation, String>,
    ) -> Result<Generation, String> {
        let mut hooks = TerminalHooks { allow_all: self.allow_all, asked: false, streamed: self.streamed };
        let offered = self.toolbox.offered();
        reply_with_tools(&self.toolbox, offered, &mut self.approvals, messages, &mut hooks, reply, |g| &g.text)
    }
}

/// Asks on the terminal (stderr, an answer line from stdin) and prints calls and results.
struct TerminalHooks {
    allow_all: bool,
    /// The call being shown was asked about (its line is out, after the reply's text).
    asked: bool,
    streamed: bool,
}

impl TerminalHooks {
    /// End the reply's last line on stdout, where the reply streams (never before `--json`).
    fn end_line(&self) {
        if self.streamed {
            println!();
        }
    }
}

impl Hooks for TerminalHooks {
    fn decide(&mut self, call: &PendingCall) -> ToolDecision {
        self.end_line();
        eprintln!("{}", describe(call));
        self.asked = true;
        if self.allow_all {
            return ToolDecision::Once;
        }
        eprint!("Run it? [y] once, [a] always for this tool, [n] no: ");
        let _ = std::io::stderr().flush();
        let mut answer = String::new();
        match std::io::stdin().lock().read_line(&mut answer) {
            Ok(0) | Err(_) => {
                eprintln!("(no answer: not run; --allow-tools runs calls without asking)");
                ToolDecision::Deny
            }
            Ok(_) => match answer.trim().to_ascii_lowercase().as_str() {
                "y" | "yes" => ToolDecision::Once,
                "a" | "always" => ToolDecision::Always,
                _ => ToolDecision::Deny,
            },
        }
    }

    fn on_done(&mut self, call: &PendingCall, outcome: &ToolOutcome) {
        if !std::mem::take(&mut self.asked) {
            // Not asked about (not run): the reply's text may end mid-line.
            self.end_line();
        }
        let line = match outcome {
            ToolOutcome::Ran { text, is_error, cut_from, ms } => {
                let shown: String = text.chars().take(400).collect();
                let more = if text.chars().count() > 400 { " …" } else { "" };
                let cut = cut_from.map(|n| format!(", cut from {n} characters")).unwrap_or_default();
                let error = if *is_error { " (the tool reports an error)" } else { "" };
                format!("← {} in {ms} ms{error}{cut}: {shown}{more}", call.tool)
            }
            ToolOutcome::Denied => format!("← {}: denied; the model is told so", call.tool),
            ToolOutcome::Failed { reason } => format!("← {}: failed: {reason}", call.tool),
            ToolOutcome::Skipped { reason } => format!("← {}: not run: {reason}", call.tool),
        };
        eprintln!("{}", printable(&line));
    }
}

fn describe(call: &PendingCall) -> String {
    let arguments = serde_json::to_string(&call.arguments).unwrap_or_default();
    printable(&format!("→ tool call: {} {arguments} (server `{}`)", call.tool, call.server)).into_owned()
}
