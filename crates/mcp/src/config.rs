//! The servers a user configures, read from the `mcp.json` shape that Claude Desktop, LM
//! Studio, Jan and Cursor write: `{"mcpServers": {"name": {...}}}`, where an entry is a
//! command to start (`command`, `args`, `env`, `cwd`) or a Streamable HTTP endpoint (`url`,
//! `headers`).

use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

/// One configured server.
#[derive(Clone, PartialEq)]
pub struct ServerSpec {
    pub name: String,
    pub endpoint: Endpoint,
    /// How long each of its requests (the handshake, the tool list, a call) may take: the
    /// entry's `timeout`, in seconds, as Cline writes it; none: the toolbox's limits.
    pub call_limit: Option<std::time::Duration>,
}

#[derive(Clone, PartialEq)]
pub enum Endpoint {
    /// A child process speaking JSON-RPC on its stdin and stdout.
    Stdio { command: String, args: Vec<String>, env: BTreeMap<String, String>, cwd: Option<PathBuf> },
    /// A Streamable HTTP endpoint; `headers` may carry a bearer key.
    Http { url: String, headers: BTreeMap<String, String> },
}

impl ServerSpec {
    /// How the server is reached, for a person: the command, or the URL without its query
    /// (which may carry a key), with the names of its variables or headers but not their values.
    pub fn endpoint_shown(&self) -> String {
        match &self.endpoint {
            Endpoint::Stdio { command, args, env, .. } => {
                let names: Vec<&String> = env.keys().collect();
                format!("{command} {:?} (env {names:?})", shown_args(args))
            }
            Endpoint::Http { url, headers } => {
                let names: Vec<&String> = headers.keys().collect();
                format!("{} (headers {names:?})", shown_url(url))
            }
        }
    }
}

/// Words in a flag or a name that say its value is a secret.
const SECRET_WORDS: [&str; 7] = ["key", "token", "secret", "password", "auth", "bearer", "header"];

fn secret_name(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    SECRET_WORDS.iter().any(|word| name.contains(word))
}

/// Arguments as shown: a value given to a key-like flag (`--api-key X`, `--token=X`,
/// `--header "Authorization: Bearer X"`) hidden, and URLs without their user or query.
fn shown_args(args: &[String]) -> Vec<String> {
    let mut shown = Vec::with_capacity(args.len());
    let mut hide_next = false;
    for arg in args {
        shown.push(match arg.split_once('=') {
            _ if hide_next => "…".to_string(),
            _ if arg.contains("://") => shown_url(arg),
            Some((name, _)) if secret_name(name) => format!("{name}=…"),
            _ if secret_name(arg) && !arg.starts_with('-') => "…".to_string(),
            _ => arg.clone(),
        });
        hide_next = arg.starts_with('-') && !arg.contains('=') && secret_name(arg);
    }
    shown
}

/// A URL without its user and password or its query (either may carry a key); other text as
/// it is.
fn shown_url(text: &str) -> String {
    let Some((scheme, rest)) = text.split_once("://") else { return text.to_string() };
    let rest = rest.split_once('?').map_or(rest, |(path, _)| path);
    let rest = match rest.split_once('/') {
        Some((host, path)) => format!("{}/{path}", host.rsplit_once('@').map_or(host, |(_, h)| h)),
        None => rest.rsplit_once('@').map_or(rest, |(_, h)| h).to_string(),
    };
    format!("{scheme}://{rest}")
}

// By hand: header values are keys, and a spec is logged (never its secrets).
impl fmt::Debug for ServerSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.name, self.endpoint_shown())
    }
}

/// An entry as the file writes it: every client's fields, each read where it means the same;
/// fields only other clients read (`autoApprove`, `description`, ...) are ignored, so that a
/// file written for them imports as it is.
#[derive(Deserialize)]
struct Entry {
    #[serde(rename = "type", alias = "transport")]
    kind: Option<String>,
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    cwd: Option<PathBuf>,
    #[serde(alias = "serverUrl")]
    url: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    disabled: bool,
    /// Seconds a request may take.
    timeout: Option<f64>,
}

#[derive(Deserialize)]
struct File {
    #[serde(rename = "mcpServers", alias = "servers")]
    servers: serde_json::Map<String, serde_json::Value>,
}

/// The enabled servers of an `mcp.json` text, in the file's order; an entry that cannot be
/// used is an error naming it (a typo should not silently drop a server).
pub fn parse(text: &str) -> Result<Vec<ServerSpec>, String> {
    let file: File = serde_json::from_str(text)
        .map_err(|e| format!("not an mcp.json file ({e}); expected {{\"mcpServers\": {{\"name\": {{...}}}}}}"))?;
    let mut specs = Vec::new();
    for (name, value) in file.servers {
        let entry: Entry = serde_json::from_value(value)
            .map_err(|e| format!("MCP server `{name}`: {}", without_values(&e.to_string())))?;
        if entry.disabled {
            continue;
        }
        let call_limit = match entry.timeout {
            Some(secs) if secs.is_finite() && secs > 0.0 => {
                Some(std::time::Duration::from_secs_f64(secs.min(86_400.0)))
            }
            Some(_) => return Err(format!("MCP server `{name}`: `timeout` is a number of seconds above 0")),
            None => None,
        };
        let endpoint = endpoint(entry).map_err(|why| format!("MCP server `{name}`: {why}"))?;
        specs.push(ServerSpec { name, endpoint, call_limit });
    }
    Ok(specs)
}

/// Serde's message without the values it quotes (a header written as a string would be
/// quoted whole, key and all): `invalid type: string "…", expected a map`.
fn without_values(message: &str) -> String {
    let mut out = String::new();
    let mut quoted = false;
    for c in message.chars() {
        match (c, quoted) {
            ('"', false) => {
                out.push_str("\"…");
                quoted = true;
            }
            ('"', true) => {
                out.push('"');
                quoted = false;
            }
            (c, false) => out.push(c),
            (_, true) => {}
        }
    }
    out
}

fn endpoint(entry: Entry) -> Result<Endpoint, String> {
    match (entry.kind.as_deref(), entry.command, entry.url) {
        (Some("sse"), _, _) => Err("the legacy SSE transport is not supported; use the server's Streamable HTTP \
                                    endpoint (usually /mcp) or its stdio command"
            .into()),
        (Some(kind), _, _) if !["stdio", "http", "streamable-http", "streamableHttp"].contains(&kind) => {
            Err(format!("unknown type `{kind}`: use stdio or http"))
        }
        (_, Some(_), Some(_)) => Err("give `command` or `url`, not both".into()),
        (_, Some(command), None) if !command.trim().is_empty() => {
            Ok(Endpoint::Stdio { command, args: entry.args, env: entry.env, cwd: entry.cwd })
        }
        (_, None, Some(url)) if url.starts_with("http://") || url.starts_with("https://") => {
            Ok(Endpoint::Http { url, headers: entry.headers })
        }
        (_, None, Some(url)) => Err(format!("`{url}` is not an http:// or https:// URL")),
        _ => Err("needs `command` (a program to start) or `url` (a Streamable HTTP endpoint)".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claude_desktop_and_lm_studio_entries_are_read_in_order() {
        let text = r#"{"mcpServers": {
            "files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"],
                      "env": {"DEBUG": "1"}},
            "remote": {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer sk-secret"}},
            "off": {"command": "x", "disabled": true},
            "typed": {"type": "stdio", "command": "python3", "args": ["server.py"], "autoApprove": []}
        }}"#;
        let specs = parse(text).unwrap();
        let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["files", "remote", "typed"]);
        assert!(
            matches!(&specs[0].endpoint, Endpoint::Stdio { command, args, .. } if command == "npx" && args.len() == 3)
        );
        assert!(matches!(&specs[1].endpoint, Endpoint::Http { url, .. } if url == "https://example.com/mcp"));
        // The key never reaches a log line.
        let logged = format!("{:?}", specs[1]);
        assert!(logged.contains("Authorization") && !logged.contains("sk-secret"), "{logged}");
        let with_query = ServerSpec {
            call_limit: None,
            name: "q".into(),
            endpoint: Endpoint::Http { url: "https://x/mcp?api_key=sk-2".into(), headers: Default::default() },
        };
        assert!(!format!("{with_query:?}").contains("sk-2"));
    }

    #[test]
    fn an_unusable_entry_is_an_error_that_names_it() {
        for (text, expected) in [
            (r#"{"mcpServers": {"a": {"url": "https://x/sse", "type": "sse"}}}"#, "`a`: the legacy SSE"),
            (r#"{"mcpServers": {"b": {"args": ["x"]}}}"#, "`b`: needs `command`"),
            (r#"{"mcpServers": {"c": {"command": "x", "url": "http://y"}}}"#, "`c`: give `command` or `url`"),
            (r#"{"mcpServers": {"d": {"url": "ftp://y"}}}"#, "`d`: `ftp://y` is not"),
            (r#"{"mcpServers": {"e": {"command": "x", "args": "y"}}}"#, "`e`: invalid type"),
            // The value is not echoed: a header written as a string would be the key itself.
            (
                r#"{"mcpServers": {"f": {"url": "https://x", "headers": "Bearer sk-1"}}}"#,
                "string \"…\", expected a map",
            ),
            (r#"{"servers": []}"#, "not an mcp.json file"),
            ("not json", "not an mcp.json file"),
        ] {
            let error = parse(text).unwrap_err();
            assert!(error.contains(expected), "{text}: {error}");
        }
    }

    #[test]
    fn a_shown_endpoint_hides_keys_in_arguments_and_urls() {
        let args: Vec<String> = [
            "mcp-remote",
            "https://user:pw@tools.example.com/mcp?api_key=sk-1",
            "--api-key",
            "sk-2",
            "--token=sk-3",
            "--header",
            "Authorization: Bearer sk-4",
            "--port",
            "8080",
        ]
        .map(String::from)
        .to_vec();
        let spec = ServerSpec {
            call_limit: None,
            name: "x".into(),
            endpoint: Endpoint::Stdio { command: "npx".into(), args, env: Default::default(), cwd: None },
        };
        let shown = spec.endpoint_shown();
        for secret in ["sk-1", "sk-2", "sk-3", "sk-4", "pw"] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
        assert!(shown.contains("https://tools.example.com/mcp") && shown.contains("8080"), "{shown}");
        let http = ServerSpec {
            call_limit: None,
            name: "h".into(),
            endpoint: Endpoint::Http { url: "https://k:s@h.example/mcp?key=sk-5".into(), headers: Default::default() },
        };
        assert_eq!(http.endpoint_shown(), "https://h.example/mcp (headers [])");
    }

    #[test]
    fn a_timeout_in_seconds_bounds_the_servers_calls() {
        let specs =
            parse(r#"{"mcpServers": {"slow": {"command": "x", "timeout": 2.5}, "plain": {"command": "y"}}}"#).unwrap();
        assert_eq!(specs[0].call_limit, Some(std::time::Duration::from_millis(2500)));
        assert_eq!(specs[1].call_limit, None);
        let bad = parse(r#"{"mcpServers": {"slow": {"command": "x", "timeout": 0}}}"#).unwrap_err();
        assert!(bad.contains("`timeout` is a number of seconds above 0"), "{bad}");
    }
}
