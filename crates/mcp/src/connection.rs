//! One server, connected through the SDK: started (or reached), its tools listed, its tools
//! called, each step bounded by [`Limits`] and every failure told as a sentence.

use crate::config::{Endpoint, ServerSpec};
use crate::stdio::{ChildTransport, Faults, SharedFaults};
use rmcp::model::CallToolRequestParams;
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::ServiceExt;
use serde_json::Value;
use std::collections::HashMap;
use std::future::Future;
use std::time::{Duration, Instant};

/// Every bound on what a server may cost a chat.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Starting a server and its `initialize` answer (`npx` may fetch a package first).
    pub connect: Duration,
    /// Listing its tools.
    pub list: Duration,
    /// One call.
    pub call: Duration,
    /// One JSON-RPC message from the server: larger closes the connection.
    pub max_message: usize,
    /// The tools one server may offer the model: every offered schema is prompt text.
    pub max_tools: usize,
    /// A result's text as the model reads it; longer is cut, and the cut is marked.
    pub max_result_chars: usize,
    /// Calls in one reply before the model must answer without tools.
    pub max_calls_per_reply: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            connect: Duration::from_secs(60),
            list: Duration::from_secs(20),
            call: Duration::from_secs(60),
            max_message: 16 << 20,
            max_tools: 64,
            max_result_chars: 16_000,
            max_calls_per_reply: 8,
        }
    }
}

/// Pages of `tools/list` read at most: a server that pages for ever is cut off there.
const MAX_PAGES: usize = 16;
/// A tool's schema and description, each, at most: all of it is prompt text in every reply.
const MAX_SCHEMA_BYTES: usize = 16 << 10;
const MAX_DESCRIPTION_BYTES: usize = 4 << 10;

/// A tool as its server lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct ListedTool {
    pub name: String,
    pub description: String,
    /// Its arguments' JSON schema.
    pub schema: Value,
}

/// What a call gave back: the text the model reads.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult {
    pub text: String,
    /// The server said the tool failed (the text says how); the model reads it all the same.
    pub is_error: bool,
    /// The result was longer than [`Limits::max_result_chars`] characters: this many.
    pub cut_from: Option<usize>,
    pub ms: u64,
}

/// What a stdio server inherits of Specula's environment: what finding programs, the user's
/// home and temporary folder, the terminal and the locale need (the MCP SDKs' default
/// environment, and Claude Desktop's). Nothing else: keys such as `SPECULA_API_KEY`, `HF_TOKEN`
/// or a cloud's secrets reach a server only when its entry's `env` names them.
const INHERITED: &[&str] = &[
    "HOME",
    "LOGNAME",
    "PATH",
    "SHELL",
    "TERM",
    "USER",
    "TMPDIR",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_CTYPE",
    // Windows
    "APPDATA",
    "HOMEDRIVE",
    "HOMEPATH",
    "LOCALAPPDATA",
    "PROCESSOR_ARCHITECTURE",
    "PROGRAMFILES",
    "SYSTEMDRIVE",
    "SYSTEMROOT",
    "TEMP",
    "USERNAME",
    "USERPROFILE",
];

fn inherited_environment() -> impl Iterator<Item = (std::ffi::OsString, std::ffi::OsString)> {
    std::env::vars_os().filter(|(name, _)| name.to_str().is_some_and(|name| INHERITED.contains(&name)))
}

pub struct Connection {
    service: RunningService<RoleClient, ()>,
    faults: Option<SharedFaults>,
}

impl Connection {
    /// Start or reach the server and complete the MCP handshake, within `limits.connect`.
    pub async fn open(spec: &ServerSpec, limits: &Limits) -> Result<Self, String> {
        let (handshake, faults) = match &spec.endpoint {
            Endpoint::Stdio { command, args, env, cwd } => {
                let mut process = tokio::process::Command::new(command);
                process.args(args).env_clear().envs(inherited_environment()).envs(env);
                if let Some(cwd) = cwd {
                    process.current_dir(cwd);
                }
                let (transport, faults) = ChildTransport::spawn(process, limits.max_message)
                    .map_err(|e| format!("`{command}` could not be started: {e}"))?;
                (Box::pin(().serve(transport)) as Handshake, Some(faults))
            }
            Endpoint::Http { url, headers } => {
                (Box::pin(().serve(http_transport(url, headers, limits)?)) as Handshake, None)
            }
        };
        let seconds = limits.connect.as_secs();
        match tokio::time::timeout(limits.connect, handshake).await {
            Ok(Ok(service)) => Ok(Self { service, faults }),
            Ok(Err(e)) => Err(explained(&faults, format!("the MCP handshake failed: {}", with_hint(with_causes(&e))))),
            Err(_) => Err(explained(&faults, format!("no answer to the MCP handshake within {seconds} s"))),
        }
    }

    /// Its tools, at most `limits.max_tools` of them (pages are read until there are that
    /// many, at most [`MAX_PAGES`]), and a notice of what was left out: tools past the limit,
    /// and tools whose description or schema is larger than a prompt should carry.
    pub async fn tools(&self, limits: &Limits) -> Result<(Vec<ListedTool>, Option<String>), String> {
        let (listed, more) = self.bounded(limits.list, "listing its tools", self.list_pages(limits.max_tools)).await?;
        let count = listed.len();
        let (fitting, oversized): (Vec<ListedTool>, Vec<ListedTool>) = listed
            .into_iter()
            .map(|tool| ListedTool {
                name: tool.name.to_string(),
                description: tool.description.map(|d| d.to_string()).unwrap_or_default(),
                schema: Value::Object((*tool.input_schema).clone()),
            })
            .partition(|t| {
                t.schema.to_string().len() <= MAX_SCHEMA_BYTES && t.description.len() <= MAX_DESCRIPTION_BYTES
            });
        let tools: Vec<ListedTool> = fitting.into_iter().take(limits.max_tools).collect();
        let mut notices = Vec::new();
        if more || count - oversized.len() > tools.len() {
            let listed = if more { format!("more than {count}") } else { count.to_string() };
            notices.push(format!(
                "it lists {listed} tools; the first {} are offered (each one's schema is prompt text)",
                tools.len()
            ));
        }
        if !oversized.is_empty() {
            let names: Vec<&str> = oversized.iter().take(5).map(|t| t.name.as_str()).collect();
            notices.push(format!(
                "{} left out: a description over {} KB or a schema over {} KB ({})",
                oversized.len(),
                MAX_DESCRIPTION_BYTES >> 10,
                MAX_SCHEMA_BYTES >> 10,
                names.join(", ")
            ));
        }
        Ok((tools, (!notices.is_empty()).then(|| notices.join("; "))))
    }

    /// Tools page by page until `enough`; whether the server had more.
    async fn list_pages(&self, enough: usize) -> Result<(Vec<rmcp::model::Tool>, bool), rmcp::ServiceError> {
        let mut tools = Vec::new();
        let mut cursor = None;
        for _ in 0..MAX_PAGES {
            let params = rmcp::model::PaginatedRequestParams::default().with_cursor(cursor);
            let page = self.service.list_tools(Some(params)).await?;
            tools.extend(page.tools);
            cursor = page.next_cursor;
            if cursor.is_none() || tools.len() > enough {
                break;
            }
        }
        Ok((tools, cursor.is_some()))
    }

    /// Call `tool` with `arguments` (a JSON object), within `limits.call`; the result's text
    /// cut to `limits.max_result_chars`. Dropping the future cancels the call on the server.
    pub async fn call(&self, tool: &str, arguments: Value, limits: &Limits) -> Result<ToolResult, String> {
        let arguments = match arguments {
            Value::Object(map) => map,
            Value::Null => Default::default(),
            other => return Err(format!("the arguments are not a JSON object: {other}")),
        };
        let started = Instant::now();
        let params = CallToolRequestParams::new(tool.to_string()).with_arguments(arguments);
        let result = self.bounded(limits.call, "the call", self.service.call_tool(params)).await?;
        let text = result_text(&serde_json::to_value(&result).unwrap_or_default());
        let (text, cut_from) = cut(text, limits.max_result_chars);
        let ms = started.elapsed().as_millis() as u64;
        Ok(ToolResult { text, is_error: result.is_error == Some(true), cut_from, ms })
    }

    /// The connection is gone (the server exited or was cut off): the next use reconnects.
    /// (`RunningService::is_closed` stays false when the server's side ends; the peer's
    /// channel closes with the connection's task.)
    pub fn is_closed(&self) -> bool {
        self.service.is_closed() || self.service.peer().is_transport_closed()
    }

    async fn bounded<T, E: std::error::Error + 'static>(
        &self,
        limit: Duration,
        what: &str,
        work: impl Future<Output = Result<T, E>>,
    ) -> Result<T, String> {
        match tokio::time::timeout(limit, work).await {
            Ok(Ok(value)) => Ok(value),
            // A fault the transport saw (the server exited, said too much) is the reason; the
            // SDK's own words for it ("Transport closed") add nothing then.
            Ok(Err(e)) => Err(match self.faults.as_ref().and_then(Faults::explain) {
                Some(fault) => format!("{what} failed: {fault}"),
                None => format!("{what} failed: {}", with_causes(&e)),
            }),
            Err(_) => Err(explained(&self.faults, format!("no answer to {what} within {} s", limit.as_secs()))),
        }
    }
}

type Handshake = std::pin::Pin<
    Box<dyn Future<Output = Result<RunningService<RoleClient, ()>, rmcp::service::ClientInitializeError>> + Send>,
>;

fn http_transport(
    url: &str,
    headers: &std::collections::BTreeMap<String, String>,
    limits: &Limits,
) -> Result<StreamableHttpClientTransport<reqwest::Client>, String> {
    let mut config = StreamableHttpClientTransportConfig::with_uri(url.to_string())
        .max_json_response_size(limits.max_message)
        .max_sse_event_size(limits.max_message);
    let mut custom = HashMap::new();
    for (name, value) in headers {
        // The SDK sends the bearer key itself (and keeps it out of its logs).
        if name.eq_ignore_ascii_case("authorization") {
            if let Some(key) = value.strip_prefix("Bearer ").or_else(|| value.strip_prefix("bearer ")) {
                config = config.auth_header(key.trim().to_string());
                continue;
            }
        }
        let header = http::HeaderName::try_from(name.as_str()).map_err(|_| format!("`{name}` is not a header name"))?;
        let value = http::HeaderValue::try_from(value.as_str())
            .map_err(|_| format!("the value of header `{name}` is not a header value"))?;
        custom.insert(header, value);
    }
    Ok(StreamableHttpClientTransport::from_config(config.custom_headers(custom)))
}

/// The error with what caused it, each cause its text once: an HTTP client says only "error
/// sending request" where the cause is an untrusted certificate or a refused connection.
fn with_causes(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = without_type_names(error);
    let mut cause = cause_of(error);
    while let Some(inner) = cause {
        let said = without_type_names(inner);
        if !said.is_empty() && !text.contains(&said) {
            text = format!("{text}: {said}");
        }
        cause = cause_of(inner);
    }
    text
}

/// A handshake's failure, with what a person can do about the usual one.
fn with_hint(why: String) -> String {
    match why.contains("UnknownIssuer") {
        true => format!("{why} (a server with a private certificate authority: set SSL_CERT_FILE to its certificate)"),
        false => why,
    }
}

/// What caused `error`: its source, or where the SDK keeps a cause without naming it as its
/// source (the transport's error in a failed handshake, the HTTP client's in the transport's).
fn cause_of<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a (dyn std::error::Error + 'static)> {
    use rmcp::transport::streamable_http_client::StreamableHttpError;
    if let Some(rmcp::service::ClientInitializeError::TransportError { error, .. }) = error.downcast_ref() {
        return Some(error);
    }
    if let Some(StreamableHttpError::Client(client)) = error.downcast_ref::<StreamableHttpError<reqwest::Error>>() {
        return Some(client);
    }
    error.source()
}

/// The SDK's error without the Rust type names it writes into it (`Transport [rmcp::...]`),
/// which tell a person nothing.
fn without_type_names(error: &dyn std::fmt::Display) -> String {
    let text = error.to_string();
    let Some(start) = text.find(" [rmcp::") else { return text };
    let mut depth = 0;
    for (at, c) in text[start + 1..].char_indices() {
        match c {
            '[' => depth += 1,
            ']' if depth == 1 => return format!("{}{}", &text[..start], &text[start + 1 + at + 1..]),
            ']' => depth -= 1,
            _ => {}
        }
    }
    text
}

/// `why`, with what the server's faults tell of it.
fn explained(faults: &Option<SharedFaults>, why: String) -> String {
    match faults.as_ref().and_then(Faults::explain) {
        Some(fault) => format!("{why}: {fault}"),
        None => why,
    }
}

/// The text of a result's content blocks, one per line; other kinds named, not inlined (an
/// image's base64 is no use to a text model); the structured content when there is no text.
fn result_text(result: &Value) -> String {
    let blocks = result.get("content").and_then(Value::as_array).cloned().unwrap_or_default();
    let mut parts: Vec<String> = blocks
        .iter()
        .map(|block| match block.get("type").and_then(Value::as_str) {
            Some("text") => block.get("text").and_then(Value::as_str).unwrap_or_default().to_string(),
            Some("resource") => block
                .pointer("/resource/text")
                .and_then(Value::as_str)
                .map(str::to_string)
                .unwrap_or_else(|| "[a binary resource]".into()),
            Some(kind) => format!("[{kind} content]"),
            None => "[content of no type]".into(),
        })
        .collect();
    if parts.is_empty() {
        if let Some(structured) = result.get("structuredContent") {
            parts.push(structured.to_string());
        }
    }
    parts.join("\n")
}

/// `text` cut to `max` characters with the cut marked, and the length it had.
pub fn cut(text: String, max: usize) -> (String, Option<usize>) {
    let chars = text.chars().count();
    if chars <= max {
        return (text, None);
    }
    let kept: String = text.chars().take(max).collect();
    (format!("{kept}\n[… cut: the tool returned {chars} characters; the first {max} are shown]"), Some(chars))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_long_result_is_cut_and_the_cut_is_marked() {
        let (text, from) = cut("é".repeat(50), 10);
        assert_eq!(from, Some(50));
        assert!(text.starts_with(&"é".repeat(10)) && text.contains("returned 50 characters; the first 10"));
        assert_eq!(cut("short".into(), 10), ("short".into(), None));
    }

    #[test]
    fn rust_type_names_are_left_out_of_errors() {
        let error = "Send message error Transport [rmcp::W<rmcp::S<reqwest::C>>] error: HTTP 401 Unauthorized";
        assert_eq!(without_type_names(&error), "Send message error Transport error: HTTP 401 Unauthorized");
        assert_eq!(without_type_names(&"plain [unclosed"), "plain [unclosed");
        // A server's own brackets stay.
        assert_eq!(without_type_names(&"bad input [line 3]"), "bad input [line 3]");
    }

    #[test]
    fn text_blocks_are_read_and_other_kinds_named() {
        let result = json!({"content": [
            {"type": "text", "text": "one"},
            {"type": "image", "data": "AAAA", "mimeType": "image/png"},
            {"type": "resource", "resource": {"uri": "file:///a", "text": "two"}}
        ]});
        assert_eq!(result_text(&result), "one\n[image content]\ntwo");
        assert_eq!(result_text(&json!({"content": [], "structuredContent": {"sum": 3}})), "{\"sum\":3}");
    }
}
