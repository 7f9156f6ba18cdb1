//! specula-mcp: tools from MCP servers in Specula's chats, for the CLI and the app alike.
//!
//! [`config`] reads the servers from the `mcp.json` shape other clients write; [`Toolbox`]
//! starts them through the official SDK (`rmcp`; stdio through [`stdio`]'s bounded transport,
//! Streamable HTTP through the SDK's own) and offers their tools; [`reply_with_tools`] runs a
//! reply's call -> approval -> result -> continue loop. Every step is bounded ([`Limits`]) and
//! every failure is a sentence a person can act on: a server can slow a reply, never hang it.

pub mod config;
mod connection;
mod stdio;
mod toolbox;
mod turn;

pub use config::{parse as parse_config, Endpoint, ServerSpec};
pub use connection::{Limits, ListedTool, ToolResult};
pub use specula_protocol::{ToolDecision, ToolOutcome};
pub use toolbox::{OfferedTool, ServerStatus, Toolbox};
pub use turn::{reply_with_tools, Approvals, Hooks, PendingCall};

/// Read an `mcp.json` file.
pub fn read_config(path: &std::path::Path) -> Result<Vec<ServerSpec>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    parse_config(&text).map_err(|e| format!("{}: {e}", path.display()))
}
