//! A real MCP server (tests/mcp/arith_server.py, the official Python SDK) over both
//! transports: stdio, and Streamable HTTP behind a bearer key.

mod mcp_python;

use mcp_python::{arith_server as server_script, mcp_python as python};
use serde_json::json;
use specula_mcp::{Endpoint, Limits, ServerSpec, Toolbox};
use std::collections::BTreeMap;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// The HTTP server, killed when dropped.
struct HttpServer(Child);

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn start_http(port: u16, key: &str) -> HttpServer {
    let child =
        Command::new(python()).args([server_script(), "http".into(), port.to_string(), key.into()]).spawn().unwrap();
    let server = HttpServer(child);
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(started.elapsed() < Duration::from_secs(30), "the HTTP server did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
    server
}

fn http_spec(port: u16, key: &str) -> ServerSpec {
    let headers = BTreeMap::from([("Authorization".to_string(), format!("Bearer {key}"))]);
    ServerSpec {
        call_limit: None,
        name: "arith-http".into(),
        endpoint: Endpoint::Http { url: format!("http://127.0.0.1:{port}/mcp"), headers },
    }
}

#[test]
fn stdio_lists_and_calls_the_sdk_servers_tools() {
    let spec = ServerSpec {
        call_limit: None,
        name: "arith".into(),
        endpoint: Endpoint::Stdio {
            command: python(),
            args: vec![server_script(), "stdio".into()],
            env: Default::default(),
            cwd: None,
        },
    };
    let toolbox = Toolbox::start(vec![spec], Limits::default()).unwrap();
    assert_eq!(toolbox.status()[0].tools, ["add", "multiply"], "{:?}", toolbox.status());
    let offered = toolbox.offered();
    assert_eq!(offered[0]["function"]["description"], "Add two numbers.");
    assert_eq!(offered[0]["function"]["parameters"]["required"], json!(["a", "b"]));
    let result = toolbox.call("multiply", json!({"a": 12, "b": 12}), &|| false).unwrap();
    assert_eq!((result.text.as_str(), result.is_error), ("144", false));
    // A call the server rejects (a missing argument) is its error text, marked as an error.
    let rejected = toolbox.call("add", json!({"a": 1}), &|| false).unwrap();
    assert!(rejected.is_error, "{rejected:?}");
}

#[test]
fn streamable_http_with_a_bearer_key() {
    let port = free_port();
    let _server = start_http(port, "sk-test-key");
    let toolbox = Toolbox::start(vec![http_spec(port, "sk-test-key")], Limits::default()).unwrap();
    assert_eq!(toolbox.status()[0].tools, ["add", "multiply"], "{:?}", toolbox.status());
    assert_eq!(toolbox.call("add", json!({"a": 1234, "b": 5678}), &|| false).unwrap().text, "6912");
    // The wrong key: refused at the handshake, with the reason and without the key.
    let wrong = Toolbox::start(vec![http_spec(port, "sk-wrong")], Limits::default()).unwrap();
    let error = wrong.status()[0].error.clone().unwrap();
    assert!(error.contains("HTTP 401 Unauthorized") && !error.contains("sk-wrong"), "{error}");
    assert!(!error.contains("rmcp::"), "{error}");
}
