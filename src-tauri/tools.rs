//! Tools from MCP servers in the app's chats. The servers are the user's `mcp.json` (the shape
//! Claude Desktop, LM Studio and Jan write), kept beside the history as a file only the user
//! can read (its headers may hold keys); the Tools dialog imports one, removes a server and
//! turns tools on or off. A reply that may call tools runs crates/mcp's loop on the reply's
//! own thread (a call blocks; never on an async worker): each call is a card in the window,
//! asked about (Allow once / Always for this tool / Deny) unless approved for good, and kept
//! with the reply in the history. Nothing here decodes or speaks MCP.

use crate::access::{blocking, with_store};
use crate::engine::{ChainStop, Reply, Stream};
use crate::error::{CommandResult, ErrorCode, ErrorInfo};
use crate::private_file;
use crate::AppState;
use specula_engine::protocol::{McpServer, McpStatus, McpTool, ReplyEvent, ToolCard, ToolDecision, ToolOutcome};
use specula_engine::service::{Prompt, Request, Ticket};
use specula_engine::Message;
use specula_mcp::{Approvals, Hooks, Limits, PendingCall, ServerSpec, Toolbox};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tauri::State;

/// The settings key of the tools the user turned off (their offered names).
pub const DISABLED_TOOLS_KEY: &str = "disabled_tools";

/// The app's MCP servers and what replies need of them.
pub struct Tools {
    path: PathBuf,
    running: Mutex<Running>,
    /// Tools approved for good ("Always for this tool"), per conversation.
    approvals: Mutex<HashMap<i64, Approvals>>,
    /// Calls waiting for the person's answer, by (request id, call id).
    asking: Mutex<HashMap<(u64, String), flume::Sender<ToolDecision>>>,
}

#[derive(Default)]
struct Running {
    specs: Vec<ServerSpec>,
    toolbox: Option<Arc<Toolbox>>,
    error: Option<String>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Tools {
    pub fn new(data_dir: &Path) -> Arc<Self> {
        Arc::new(Self {
            path: data_dir.join("mcp.json"),
            running: Default::default(),
            approvals: Default::default(),
            asking: Default::default(),
        })
    }

    /// Start the servers the file names, in the background: each one's tools are offered as
    /// it answers (a server may take up to a minute); `disabled` are the tools the user turned
    /// off.
    pub fn start(self: &Arc<Self>, disabled: HashSet<String>) {
        let specs = match std::fs::read_to_string(&self.path) {
            Ok(text) => specula_mcp::parse_config(&text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
            Err(e) => Err(format!("{}: {e}", self.path.display())),
        };
        let specs = match specs {
            Ok(specs) => specs,
            Err(e) => {
                lock(&self.running).error = Some(e);
                return;
            }
        };
        // "Always" named a tool of the servers as they were; a new set asks again.
        lock(&self.approvals).clear();
        let running = match Toolbox::spawn(specs.clone(), Limits::default()) {
            Ok(toolbox) => {
                toolbox.disable(disabled);
                Running { specs, toolbox: Some(Arc::new(toolbox)), error: None }
            }
            Err(e) => Running { specs, toolbox: None, error: Some(format!("the MCP runtime could not start: {e}")) },
        };
        // The old toolbox's servers stop when the last reply holding it ends.
        *lock(&self.running) = running;
    }

    pub fn status(&self) -> McpStatus {
        let running = lock(&self.running);
        let (status, tools) = running.toolbox.as_ref().map(|t| (t.status(), t.tools())).unwrap_or_default();
        let servers = running
            .specs
            .iter()
            .map(|spec| {
                let listed = status.iter().find(|s| s.name == spec.name);
                let tools = tools
                    .iter()
                    .filter(|t| t.server == spec.name)
                    .map(|t| McpTool {
                        name: t.offered_name.clone(),
                        description: t.tool.description.clone(),
                        enabled: running.toolbox.as_ref().is_some_and(|toolbox| toolbox.is_enabled(&t.offered_name)),
                    })
                    .collect();
                McpServer {
                    name: spec.name.clone(),
                    endpoint: spec.endpoint_shown(),
                    tools,
                    starting: listed.is_some_and(|s| s.starting),
                    error: listed.and_then(|s| s.error.clone()),
                    notice: listed.and_then(|s| s.notice.clone()),
                }
            })
            .collect();
        McpStatus { servers, starting: status.iter().any(|s| s.starting), error: running.error.clone() }
    }

    /// The toolbox when it has a tool to offer.
    pub fn offering(&self) -> Option<Arc<Toolbox>> {
        lock(&self.running).toolbox.clone().filter(|t| !t.offered().is_empty())
    }

    /// The servers of `text` (an mcp.json) added to the file, replacing those of the same
    /// names; checked before anything is written. Returns the file's new text.
    fn import(&self, text: &str) -> Result<(), ErrorInfo> {
        let invalid = |e: String| ErrorInfo::new(ErrorCode::InvalidSetting, e);
        specula_mcp::parse_config(text).map_err(invalid)?;
        let incoming = servers_of(text).map_err(invalid)?;
        self.change(|servers| servers.extend(incoming))
    }

    fn remove(&self, name: &str) -> Result<(), ErrorInfo> {
        self.change(|servers| {
            servers.remove(name);
        })
    }

    /// Change the file's servers under its lock, written whole (0600).
    fn change(&self, edit: impl FnOnce(&mut serde_json::Map<String, serde_json::Value>)) -> Result<(), ErrorInfo> {
        let failed = |e: std::io::Error| ErrorInfo::internal(format!("keeping the MCP servers: {e}"));
        let _lock = private_file::lock(&self.path).map_err(failed)?;
        let mut servers = match std::fs::read_to_string(&self.path) {
            Ok(text) => servers_of(&text).map_err(|e| {
                ErrorInfo::new(
                    ErrorCode::InvalidSetting,
                    format!("{} cannot be read ({e}); fix or remove it", self.path.display()),
                )
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Default::default(),
            Err(e) => return Err(failed(e)),
        };
        edit(&mut servers);
        let file = serde_json::json!({ "mcpServers": servers });
        let text = serde_json::to_string_pretty(&file).map_err(|e| ErrorInfo::internal(e.to_string()))?;
        private_file::write(&self.path, text.as_bytes()).map_err(failed)
    }
}

/// The `mcpServers` object of an mcp.json text.
fn servers_of(text: &str) -> Result<serde_json::Map<String, serde_json::Value>, String> {
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let servers = value.get("mcpServers").or_else(|| value.get("servers"));
    servers.and_then(|s| s.as_object()).cloned().ok_or_else(|| "no \"mcpServers\" object".to_string())
}

fn disabled_tools(state: &AppState) -> HashSet<String> {
    with_store(state, |s| s.setting::<HashSet<String>>(DISABLED_TOOLS_KEY)).ok().flatten().unwrap_or_default()
}

#[tauri::command]
#[specta::specta]
pub fn mcp_status(state: State<'_, AppState>) -> McpStatus {
    state.tools.status()
}

/// Add the servers of an mcp.json (pasted or picked) and start them again.
#[tauri::command]
#[specta::specta]
pub async fn import_mcp_servers(state: State<'_, AppState>, text: String) -> CommandResult<McpStatus> {
    let tools = state.tools.clone();
    blocking(move || tools.import(&text)).await?;
    state.tools.start(disabled_tools(&state));
    Ok(state.tools.status())
}

#[tauri::command]
#[specta::specta]
pub async fn remove_mcp_server(state: State<'_, AppState>, name: String) -> CommandResult<McpStatus> {
    let tools = state.tools.clone();
    blocking(move || tools.remove(&name)).await?;
    state.tools.start(disabled_tools(&state));
    Ok(state.tools.status())
}

/// Offer a tool to the model or not; kept across restarts.
#[tauri::command]
#[specta::specta]
pub fn set_tool_enabled(state: State<'_, AppState>, name: String, enabled: bool) -> CommandResult<McpStatus> {
    let mut disabled = disabled_tools(&state);
    match enabled {
        true => disabled.remove(&name),
        false => disabled.insert(name.clone()),
    };
    with_store(&state, |s| s.set_setting(DISABLED_TOOLS_KEY, &disabled))?;
    if let Some(toolbox) = lock(&state.tools.running).toolbox.as_ref() {
        toolbox.set_enabled(&name, enabled);
    }
    Ok(state.tools.status())
}

/// The person's answer to a call's card; false when it no longer waits.
#[tauri::command]
#[specta::specta]
pub fn decide_tool_call(state: State<'_, AppState>, request_id: u64, call_id: String, decision: ToolDecision) -> bool {
    let waiting = lock(&state.tools.asking).remove(&(request_id, call_id));
    waiting.is_some_and(|sender| sender.send(decision).is_ok())
}

/// What one reply with tools needs besides the engine.
pub struct ToolTurn {
    pub tools: Arc<Tools>,
    pub toolbox: Arc<Toolbox>,
    pub conversation_id: i64,
}

/// The reply's loop, on its own thread: `first` is the engine's reply to `request` already
/// submitted (its id is the reply's), `submit` queues each next one.
pub(crate) fn run(
    turn: ToolTurn,
    request: Request,
    first: Ticket,
    submit: &dyn Fn(Request) -> Result<Ticket, ErrorInfo>,
    stream: Stream<'_>,
    stop: &ChainStop,
) {
    let request_id = first.id();
    let Prompt::Chat(mut messages) = request.prompt.clone() else {
        stream.end(Some(ReplyEvent::Failed { error: ErrorInfo::internal("a reply with tools takes chat messages") }));
        return;
    };
    let mut approvals = lock(&turn.tools.approvals).get(&turn.conversation_id).cloned().unwrap_or_default();
    let offered = request.tools.clone();
    let stream = std::cell::RefCell::new(stream);
    let mut first = Some(first);
    // The last engine reply's end: a reply stopped between rounds ends with its figures.
    let last_done = std::cell::RefCell::new(None);
    let mut hooks =
        WindowHooks { turn: &turn, request_id, stream: &stream, stop, cards: Vec::new(), unanswered: false };
    let reply = |messages: &[Message], offered: &[serde_json::Value]| -> Result<ReplyEvent, String> {
        let ticket = match first.take() {
            Some(ticket) => ticket,
            None => {
                let mut next = request.clone();
                next.prompt = Prompt::Chat(messages.to_vec());
                next.tools = offered.to_vec();
                submit(next).map_err(|e| e.message)?
            }
        };
        stop.follow(&ticket);
        let first_reply = ticket.id() == request_id;
        let last = stream.borrow_mut().pass_on(&Reply::Local(ticket), first_reply);
        match last {
            Some(ReplyEvent::Failed { error }) => Err(error.message),
            Some(done) => {
                *last_done.borrow_mut() = Some(done.clone());
                Ok(done)
            }
            None => Err("the engine ended the reply without an end".into()),
        }
    };
    // Every round is given the tools the first one was (`request.tools`).
    let result = specula_mcp::reply_with_tools(
        &turn.toolbox,
        offered,
        &mut approvals,
        &mut messages,
        &mut hooks,
        reply,
        done_text,
    );
    drop(hooks);
    lock(&turn.tools.approvals).insert(turn.conversation_id, approvals);
    let last = match result {
        Ok(done) => done,
        Err(reason) if stop.stopped() => {
            tracing::debug!("a reply with tools was stopped: {reason}");
            match last_done.into_inner() {
                Some(ReplyEvent::Done { text, stats, .. }) => {
                    ReplyEvent::Done { finish_reason: specula_engine::FinishReason::Cancelled, text, stats }
                }
                _ => specula_engine::Generation::cancelled(0).into_done(),
            }
        }
        Err(reason) => ReplyEvent::Failed { error: ErrorInfo::new(ErrorCode::EngineFailure, reason) },
    };
    stream.into_inner().end(Some(last));
}

/// The text of an engine reply's end (the loop reads its calls there).
fn done_text(event: &ReplyEvent) -> &str {
    match event {
        ReplyEvent::Done { text, .. } => text,
        _ => "",
    }
}

/// The loop's way to the window: each call a card, sent and stored as it changes; a question
/// waits for the card's button (or Stop).
struct WindowHooks<'a, 'b> {
    turn: &'a ToolTurn,
    request_id: u64,
    stream: &'a std::cell::RefCell<Stream<'b>>,
    stop: &'a ChainStop,
    cards: Vec<ToolCard>,
    /// The last question got no answer (Stop, the window gone, or [`ASK_FOR`] passed): its
    /// Deny is no one's.
    unanswered: bool,
}

/// How often a question checks whether the reply was stopped or the window went away.
const ASK_POLL: Duration = Duration::from_millis(100);
/// How long a question waits for its answer: a window reloaded or left open unattended must
/// not hold the reply (and the engine's history lock) for ever.
const ASK_FOR: Duration = Duration::from_secs(600);

impl WindowHooks<'_, '_> {
    /// The card of `call`, made when first seen, changed by `change`, then sent and stored.
    fn update(&mut self, call: &PendingCall, change: impl FnOnce(&mut ToolCard)) {
        let at = self.stream.borrow().tokens() as u32;
        let index = match self.cards.iter().position(|c| c.id == call.id) {
            Some(index) => index,
            None => {
                self.cards.push(ToolCard {
                    id: call.id.clone(),
                    server: call.server.clone(),
                    tool: call.tool.clone(),
                    arguments: call.arguments.clone(),
                    at,
                    running: false,
                    outcome: None,
                });
                self.cards.len() - 1
            }
        };
        change(&mut self.cards[index]);
        let card = self.cards[index].clone();
        let mut stream = self.stream.borrow_mut();
        // The tokens before the card are written first: a card never points past them.
        stream.save_now();
        stream.store_cards(&self.cards);
        stream.send(ReplyEvent::Tool { card });
    }
}

impl Hooks for WindowHooks<'_, '_> {
    fn decide(&mut self, call: &PendingCall) -> ToolDecision {
        let (answer, question) = flume::bounded(1);
        let key = (self.request_id, call.id.clone());
        lock(&self.turn.tools.asking).insert(key.clone(), answer);
        self.update(call, |_| {});
        let deadline = std::time::Instant::now() + ASK_FOR;
        let decision = loop {
            match question.recv_timeout(ASK_POLL) {
                Ok(decision) => break Some(decision),
                Err(flume::RecvTimeoutError::Timeout) if !self.cancelled() && std::time::Instant::now() < deadline => {
                    continue
                }
                Err(_) => break None,
            }
        };
        lock(&self.turn.tools.asking).remove(&key);
        self.unanswered = decision.is_none();
        decision.unwrap_or(ToolDecision::Deny)
    }

    fn on_start(&mut self, call: &PendingCall) {
        self.update(call, |card| card.running = true);
    }

    fn on_done(&mut self, call: &PendingCall, outcome: &ToolOutcome) {
        // A question no one answered is no one's Deny, and a call Stop cut short did not fail.
        let outcome = match outcome {
            ToolOutcome::Failed { .. } if self.stop.stopped() => {
                ToolOutcome::Skipped { reason: "the reply was stopped during the call".into() }
            }
            ToolOutcome::Denied if std::mem::take(&mut self.unanswered) => ToolOutcome::Skipped {
                reason: match self.cancelled() {
                    true => "the reply was stopped".into(),
                    false => format!("no answer within {} minutes", ASK_FOR.as_secs() / 60),
                },
            },
            other => other.clone(),
        };
        self.update(call, |card| {
            card.running = false;
            card.outcome = Some(outcome);
        });
    }

    fn cancelled(&self) -> bool {
        self.stop.stopped() || self.stream.borrow().closed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn imports_merge_servers_by_name_into_a_private_file_and_a_bad_one_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let tools = Tools::new(dir.path());
        tools
            .import(r#"{"mcpServers": {"a": {"command": "x"}, "b": {"command": "y", "env": {"K": "secret"}}}}"#)
            .unwrap();
        tools.import(r#"{"mcpServers": {"b": {"command": "z"}}}"#).unwrap();
        let file = dir.path().join("mcp.json");
        let servers = servers_of(&std::fs::read_to_string(&file).unwrap()).unwrap();
        assert_eq!(servers.keys().collect::<Vec<_>>(), ["a", "b"], "in order, b replaced");
        assert_eq!(servers["b"]["command"], "z");
        #[cfg(unix)]
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&file).unwrap().permissions()) & 0o777,
            0o600
        );
        let before = std::fs::read_to_string(&file).unwrap();
        let refused = tools.import(r#"{"mcpServers": {"c": {"url": "http://h/sse", "type": "sse"}}}"#).unwrap_err();
        assert_eq!(refused.code, ErrorCode::InvalidSetting);
        assert!(tools.import("not json").is_err());
        assert_eq!(std::fs::read_to_string(&file).unwrap(), before, "nothing written");
        tools.remove("a").unwrap();
        assert_eq!(servers_of(&std::fs::read_to_string(&file).unwrap()).unwrap().keys().collect::<Vec<_>>(), ["b"]);
    }
}
