//! Every configured server and the tools they offer the model, with a runtime of their own:
//! the CLI's chat and the app's engine thread call them from blocking code, and a server that
//! hangs holds one of its tasks, never the caller's thread past the call's limit.

use crate::config::ServerSpec;
use crate::connection::{Connection, Limits, ListedTool, ToolResult};
use serde_json::{json, Value};
use std::collections::HashSet;
use std::sync::Arc;
use tokio::sync::Mutex;

/// A server as the chat sees it: its tools, or why it has none.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerStatus {
    pub name: String,
    pub tools: Vec<String>,
    /// It has not answered yet: its tools come when it does.
    pub starting: bool,
    /// Why it could not be used (it stays listed, with this reason).
    pub error: Option<String>,
    /// Something the user should know while it works (a list cut short).
    pub notice: Option<String>,
}

/// A tool the model may call: the name it is offered under (unique across servers, and in the
/// characters function names allow) and where it lives.
#[derive(Debug, Clone)]
pub struct OfferedTool {
    pub offered_name: String,
    pub server: String,
    pub tool: ListedTool,
}

struct Server {
    spec: ServerSpec,
    connection: Mutex<Option<Connection>>,
}

/// What the servers answered so far. A name once given is never given to another tool (a
/// reply, an approval and a switch all name tools): in the background each server's tools
/// join, named, as it answers, a clash going to the later one; a start that waits for every
/// server names them in the configuration's order.
struct Listing {
    /// The servers' names, in the configuration's order.
    servers: Vec<String>,
    /// One per server: `None` until it answers.
    answers: Vec<Option<Listed>>,
    /// Whether each server's tools are named (in `tools`) yet.
    named: Vec<bool>,
    /// Whether tools are named as their servers answer (else when [`Listing::name_answered`]
    /// is called).
    as_they_answer: bool,
    tools: Vec<OfferedTool>,
}

type Listed = Result<(Vec<ListedTool>, Option<String>), String>;

pub struct Toolbox {
    runtime: Option<tokio::runtime::Runtime>,
    servers: Vec<Arc<Server>>,
    listing: Arc<std::sync::Mutex<Listing>>,
    /// The listing tasks still running, for [`Toolbox::start`] to wait on.
    listing_tasks: std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>,
    limits: Limits,
    /// Tools the user turned off (offered names): neither offered nor callable. Behind a lock
    /// of its own, so a switch flips while a reply holds the toolbox.
    disabled: std::sync::Mutex<HashSet<String>>,
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Toolbox {
    /// Start every server and wait until each has listed its tools or failed (each within its
    /// limits, all at once); a server that fails stays in the status with its reason, and the
    /// others work.
    pub fn start(specs: Vec<ServerSpec>, limits: Limits) -> std::io::Result<Self> {
        let toolbox = Self::launch(specs, limits, false)?;
        let tasks = std::mem::take(&mut *lock(&toolbox.listing_tasks));
        if let Some(runtime) = &toolbox.runtime {
            runtime.block_on(async {
                for task in tasks {
                    let _ = task.await;
                }
            });
        }
        lock(&toolbox.listing).name_answered();
        Ok(toolbox)
    }

    /// Start every server in the background and return at once: each server's tools are
    /// offered from the moment it answers, so a slow one holds back only its own.
    pub fn spawn(specs: Vec<ServerSpec>, limits: Limits) -> std::io::Result<Self> {
        Self::launch(specs, limits, true)
    }

    fn launch(specs: Vec<ServerSpec>, limits: Limits, as_they_answer: bool) -> std::io::Result<Self> {
        // The HTTP client's TLS takes the process's provider; another part may have set one.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let runtime =
            tokio::runtime::Builder::new_multi_thread().worker_threads(1).thread_name("mcp").enable_all().build()?;
        let listing = Arc::new(std::sync::Mutex::new(Listing {
            servers: specs.iter().map(|spec| spec.name.clone()).collect(),
            answers: vec![None; specs.len()],
            named: vec![false; specs.len()],
            as_they_answer,
            tools: Vec::new(),
        }));
        let servers: Vec<Arc<Server>> =
            specs.into_iter().map(|spec| Arc::new(Server { spec, connection: Mutex::new(None) })).collect();
        let tasks = servers
            .iter()
            .enumerate()
            .map(|(index, server)| {
                let (server, limits, listing) = (server.clone(), server.limits(&limits), listing.clone());
                runtime.spawn(async move {
                    // In a task of its own, so that a panic in it is a failed server, not a
                    // server left starting for good.
                    let listed = tokio::spawn(async move { server.list(&limits).await })
                        .await
                        .unwrap_or_else(|e| Err(format!("its start failed: {e}")));
                    lock(&listing).answered(index, listed);
                })
            })
            .collect();
        Ok(Self {
            runtime: Some(runtime),
            servers,
            listing,
            listing_tasks: std::sync::Mutex::new(tasks),
            limits,
            disabled: Default::default(),
        })
    }

    /// Each server as it stands, in the configuration's order.
    pub fn status(&self) -> Vec<ServerStatus> {
        lock(&self.listing).status()
    }

    /// Whether a server has yet to answer.
    pub fn starting(&self) -> bool {
        lock(&self.listing).answers.iter().any(Option::is_none)
    }

    /// The tools listed so far, on or off.
    pub fn tools(&self) -> Vec<OfferedTool> {
        lock(&self.listing).tools.clone()
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Turn a tool on or off (by its offered name); false when there is no such tool.
    pub fn set_enabled(&self, offered_name: &str, enabled: bool) -> bool {
        if !lock(&self.listing).tools.iter().any(|t| t.offered_name == offered_name) {
            return false;
        }
        let mut disabled = lock(&self.disabled);
        match enabled {
            true => disabled.remove(offered_name),
            false => disabled.insert(offered_name.to_string()),
        };
        true
    }

    /// Turn these tools off, whether or not their servers have answered yet (the switches the
    /// user left off, at a start).
    pub fn disable(&self, offered_names: impl IntoIterator<Item = String>) {
        lock(&self.disabled).extend(offered_names);
    }

    pub fn is_enabled(&self, offered_name: &str) -> bool {
        !lock(&self.disabled).contains(offered_name)
    }

    /// The enabled tools as the chat template receives them (OpenAI's `tools` entries).
    pub fn offered(&self) -> Vec<Value> {
        lock(&self.listing).tools.iter().filter(|t| self.is_enabled(&t.offered_name)).map(function_entry).collect()
    }

    pub fn find(&self, offered_name: &str) -> Option<OfferedTool> {
        let listing = lock(&self.listing);
        listing.tools.iter().find(|t| t.offered_name == offered_name && self.is_enabled(offered_name)).cloned()
    }

    /// Run a call, blocking this thread at most the call's limit (plus a reconnection's, when
    /// the server went away since). `cancelled` is polled: once true, the call is abandoned
    /// (and cancelled on the server).
    pub fn call(
        &self,
        offered_name: &str,
        arguments: Value,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<ToolResult, String> {
        let tool = self.find(offered_name).ok_or_else(|| format!("no tool `{offered_name}` is offered"))?;
        let server = self.servers.iter().find(|s| s.spec.name == tool.server).cloned();
        let server = server.ok_or_else(|| format!("no server `{}`", tool.server))?;
        let (name, limits) = (tool.tool.name.clone(), server.limits(&self.limits));
        let runtime = self.runtime.as_ref().ok_or("the tools are shut down")?;
        runtime.block_on(async {
            let call = server.call(&name, arguments, &limits);
            tokio::pin!(call);
            let mut poll = tokio::time::interval(std::time::Duration::from_millis(50));
            loop {
                tokio::select! {
                    result = &mut call => return result,
                    _ = poll.tick() => if cancelled() { return Err("cancelled".to_string()) },
                }
            }
        })
    }
}

impl Listing {
    fn answered(&mut self, index: usize, listed: Listed) {
        self.answers[index] = Some(listed);
        if self.as_they_answer {
            self.name_answered();
        }
    }

    /// Name the tools of every server that answered and is not named yet, in the
    /// configuration's order, after the names already given.
    fn name_answered(&mut self) {
        for index in 0..self.servers.len() {
            let Some(Ok((listed, _))) = &self.answers[index] else { continue };
            if self.named[index] {
                continue;
            }
            self.named[index] = true;
            let server = self.servers[index].clone();
            for tool in listed.clone() {
                let offered_name = self.unique_name(&server, &tool.name);
                self.tools.push(OfferedTool { offered_name, server: server.clone(), tool });
            }
        }
    }

    fn status(&self) -> Vec<ServerStatus> {
        let status = |(server, answer): (&String, &Option<Listed>)| {
            let tools = self.tools.iter().filter(|t| &t.server == server).map(|t| t.offered_name.clone()).collect();
            let (error, notice) = match answer {
                Some(Err(why)) => (Some(why.clone()), None),
                Some(Ok((_, cut))) => (None, cut.clone()),
                None => (None, None),
            };
            ServerStatus { name: server.clone(), tools, starting: answer.is_none(), error, notice }
        };
        self.servers.iter().zip(&self.answers).map(status).collect()
    }

    /// The tool's name in the characters OpenAI-style function names allow, prefixed with its
    /// server's when another server already offers that name.
    fn unique_name(&self, server: &str, tool: &str) -> String {
        let clean = |text: &str| -> String {
            text.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).collect()
        };
        let mut name: String = clean(tool).chars().take(64).collect();
        if self.tools.iter().any(|t| t.offered_name == name) {
            name = format!("{}__{}", clean(server), clean(tool)).chars().take(64).collect();
        }
        let base = name.clone();
        let mut n = 2;
        while self.tools.iter().any(|t| t.offered_name == name) {
            name = format!("{base}_{n}");
            n += 1;
        }
        name
    }
}

impl Server {
    /// The toolbox's limits, with this server's own `timeout` (when its entry sets one) for
    /// each request: the handshake, the tool list and every call.
    fn limits(&self, base: &Limits) -> Limits {
        match self.spec.call_limit {
            Some(limit) => Limits { connect: limit, list: limit, call: limit, ..base.clone() },
            None => base.clone(),
        }
    }

    /// The live connection, opened (again) when there is none or it closed.
    async fn connected<'a>(
        &'a self,
        limits: &Limits,
    ) -> Result<tokio::sync::MutexGuard<'a, Option<Connection>>, String> {
        let mut connection = self.connection.lock().await;
        if connection.as_ref().is_none_or(Connection::is_closed) {
            *connection = Some(Connection::open(&self.spec, limits).await?);
        }
        Ok(connection)
    }

    async fn list(&self, limits: &Limits) -> Result<(Vec<ListedTool>, Option<String>), String> {
        let connection = self.connected(limits).await?;
        connection.as_ref().ok_or("not connected")?.tools(limits).await
    }

    async fn call(&self, tool: &str, arguments: Value, limits: &Limits) -> Result<ToolResult, String> {
        let connection = self.connected(limits).await?;
        connection.as_ref().ok_or("not connected")?.call(tool, arguments, limits).await
    }
}

fn function_entry(tool: &OfferedTool) -> Value {
    json!({
        "type": "function",
        "function": {
            "name": tool.offered_name,
            "description": tool.tool.description,
            "parameters": tool.tool.schema,
        }
    })
}

impl Drop for Toolbox {
    fn drop(&mut self) {
        // In the background: dropping a runtime may not block inside another one (the app's),
        // and the children are killed as their handles drop.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}
