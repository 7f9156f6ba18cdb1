//! A real MCP server (tests/mcp/arith_server.py) over Streamable HTTP behind TLS, with a
//! certificate authority of the test's own (tests/mcp/make_cert.py): refused with the reason
//! while the client does not trust it, then trusted through SSL_CERT_FILE, as a user with a
//! private CA would set it. Its own binary: it changes the process's environment.

mod mcp_python;

use mcp_python::{arith_server, mcp_python as python};
use serde_json::json;
use specula_mcp::{Endpoint, Limits, ServerSpec, Toolbox};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_https(port: u16, certs: &Path) -> Server {
    let file = |name: &str| certs.join(name).display().to_string();
    let args =
        [arith_server(), "https".into(), port.to_string(), "sk-tls".into(), file("server.pem"), file("server.key")];
    let server = Server(Command::new(python()).args(args).spawn().unwrap());
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(started.elapsed() < Duration::from_secs(30), "the HTTPS server did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
    server
}

fn spec(port: u16) -> ServerSpec {
    let headers = BTreeMap::from([("Authorization".to_string(), "Bearer sk-tls".to_string())]);
    ServerSpec {
        call_limit: None,
        name: "arith-tls".into(),
        endpoint: Endpoint::Http { url: format!("https://127.0.0.1:{port}/mcp"), headers },
    }
}

#[test]
fn https_is_refused_until_its_authority_is_trusted_then_lists_and_calls() {
    let certs = tempfile::tempdir().unwrap();
    let maker = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/mcp/make_cert.py");
    assert!(Command::new(python()).arg(maker).arg(certs.path()).status().unwrap().success());
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let _server = start_https(port, certs.path());

    let untrusted = Toolbox::start(vec![spec(port)], Limits::default()).unwrap();
    let error = untrusted.status()[0].error.clone().expect("an untrusted certificate is refused");
    eprintln!("refused: {error}");
    assert!(error.contains("invalid peer certificate") && error.contains("SSL_CERT_FILE"), "{error}");
    assert!(!error.contains("sk-tls") && !error.contains("rmcp::"), "{error}");

    // The first toolbox's threads are gone with it: nothing reads the environment meanwhile.
    drop(untrusted);
    std::env::set_var("SSL_CERT_FILE", certs.path().join("ca.pem"));
    let toolbox = Toolbox::start(vec![spec(port)], Limits::default()).unwrap();
    assert_eq!(toolbox.status()[0].tools, ["add", "multiply"], "{:?}", toolbox.status());
    assert_eq!(toolbox.call("multiply", json!({"a": 21, "b": 2}), &|| false).unwrap().text, "42");
}
