//! Hostile MCP servers (tests/servers/hostile.py, a hand-written stdio server per fault): each
//! fault is bounded by the limits and told as a reason a person can read, and the toolbox
//! keeps working (the well-behaved server beside it still answers).

use serde_json::json;
use specula_mcp::{Endpoint, Limits, ServerSpec, Toolbox};
use std::path::PathBuf;
use std::time::{Duration, Instant};

fn hostile(mode: &str) -> ServerSpec {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/servers/hostile.py");
    ServerSpec {
        call_limit: None,
        name: mode.to_string(),
        endpoint: Endpoint::Stdio {
            command: "python3".into(),
            args: vec![script.display().to_string(), mode.into()],
            env: Default::default(),
            cwd: None,
        },
    }
}

fn limits() -> Limits {
    Limits {
        connect: Duration::from_secs(5),
        list: Duration::from_secs(5),
        call: Duration::from_secs(2),
        ..Limits::default()
    }
}

/// A toolbox with the hostile server and a well-behaved one beside it.
fn toolbox(mode: &str) -> Toolbox {
    Toolbox::start(vec![hostile(mode), hostile("well")], limits()).unwrap()
}

/// Call the hostile server's `echo` (its name prefixed: the well one offers `echo` too), then
/// check the well one still answers.
fn call_fails(mode: &str) -> String {
    let toolbox = toolbox(mode);
    assert_eq!(toolbox.status()[0].error, None, "{:?}", toolbox.status());
    let started = Instant::now();
    let error = toolbox.call("echo", json!({"text": "hi"}), &|| false).unwrap_err();
    // Bounded: the call's limit and a little more, never the server's whim.
    assert!(started.elapsed() < Duration::from_secs(15), "{mode}: took {:?}", started.elapsed());
    let well = toolbox.call("well__echo", json!({"text": "still here"}), &|| false).unwrap();
    assert_eq!(well.text, "still here");
    error
}

#[test]
fn a_server_that_never_answers_fails_its_start_with_the_reason_and_the_others_work() {
    let started = Instant::now();
    let toolbox = toolbox("silent");
    assert!(started.elapsed() < Duration::from_secs(15));
    let status = toolbox.status();
    assert!(status[0].error.as_deref().unwrap().contains("no answer to the MCP handshake within 5 s"), "{status:?}");
    assert_eq!(status[1].tools, ["echo"]);
    assert_eq!(toolbox.call("echo", json!({"text": "ok"}), &|| false).unwrap().text, "ok");
}

#[test]
fn a_call_that_never_returns_ends_at_the_time_limit() {
    let error = call_fails("hang");
    assert!(error.contains("no answer to the call within 2 s"), "{error}");
}

#[test]
fn a_100_mb_answer_closes_the_connection_with_the_size_named() {
    let error = call_fails("huge");
    assert!(error.contains("a message over 16 MiB"), "{error}");
}

#[test]
fn malformed_json_rpc_is_quoted_in_the_time_out() {
    let error = call_fails("garbage");
    assert!(error.contains("not JSON-RPC: `{this is not json-rpc`"), "{error}");
}

#[test]
fn a_server_that_exits_mid_call_is_told_with_its_last_words_and_restarts() {
    let toolbox = toolbox("exit");
    let error = toolbox.call("echo", json!({"text": "hi"}), &|| false).unwrap_err();
    assert!(error.contains("exit status: 3") && error.contains("boom: the server fell over"), "{error}");
}

#[test]
fn the_call_after_a_server_exited_starts_it_again() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("started-once");
    let mut spec = hostile("exit-once");
    if let Endpoint::Stdio { args, .. } = &mut spec.endpoint {
        args.push(marker.display().to_string());
    }
    let toolbox = Toolbox::start(vec![spec], limits()).unwrap();
    let error = toolbox.call("echo", json!({"text": "hi"}), &|| false).unwrap_err();
    assert!(error.contains("exit status: 3"), "{error}");
    // A new process: it finds its marker and answers.
    assert_eq!(toolbox.call("echo", json!({"text": "back"}), &|| false).unwrap().text, "back");
}

#[test]
fn ten_thousand_tools_are_cut_to_the_limit_with_a_notice() {
    let toolbox = toolbox("many");
    let status = &toolbox.status()[0];
    assert_eq!(status.tools.len(), 64);
    assert!(status.notice.as_deref().unwrap().contains("lists 10000 tools; the first 64"), "{status:?}");
    assert_eq!(toolbox.offered().len(), 65);
}

#[test]
fn a_cancelled_call_stops_at_once() {
    let toolbox = toolbox("hang");
    let started = Instant::now();
    let error = toolbox.call("echo", json!({}), &|| started.elapsed() > Duration::from_millis(300)).unwrap_err();
    assert_eq!(error, "cancelled");
    assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
}

#[test]
fn a_command_that_does_not_exist_is_named() {
    let spec = ServerSpec {
        call_limit: None,
        name: "ghost".into(),
        endpoint: Endpoint::Stdio {
            command: "no-such-mcp-server".into(),
            args: vec![],
            env: Default::default(),
            cwd: None,
        },
    };
    let toolbox = Toolbox::start(vec![spec], limits()).unwrap();
    let error = toolbox.status()[0].error.clone().unwrap();
    assert!(error.contains("`no-such-mcp-server` could not be started"), "{error}");
}

#[test]
fn each_server_s_tools_are_offered_as_it_answers_not_when_the_slowest_does() {
    // The silent server may take 20 s to fail its handshake; the well one answers at once.
    let silent = ServerSpec { call_limit: Some(Duration::from_secs(20)), ..hostile("silent") };
    let started = Instant::now();
    let toolbox = Toolbox::spawn(vec![silent, hostile("well")], limits()).unwrap();
    assert!(toolbox.starting());
    while toolbox.status()[1].starting {
        assert!(started.elapsed() < Duration::from_secs(15), "{:?}", toolbox.status());
        std::thread::sleep(Duration::from_millis(50));
    }
    let status = toolbox.status();
    assert!(status[0].starting && status[0].error.is_none(), "the silent one is still starting: {status:?}");
    assert_eq!(status[1].tools, ["echo"]);
    assert_eq!(toolbox.offered().len(), 1);
    assert_eq!(toolbox.call("echo", json!({"text": "early"}), &|| false).unwrap().text, "early");
    assert!(started.elapsed() < Duration::from_secs(15));
}

#[test]
fn a_name_once_given_stays_with_its_tool_when_an_earlier_server_answers_late() {
    // Both offer `echo`; the first in the file answers 2 s after the second. In the background
    // the second's `echo` is offered at once, and keeps its name when the first answers: a
    // reply, an approval or a switch that named it still means it.
    let toolbox = Toolbox::spawn(vec![hostile("late"), hostile("well")], limits()).unwrap();
    let started = Instant::now();
    while toolbox.starting() {
        assert!(started.elapsed() < Duration::from_secs(15), "{:?}", toolbox.status());
        std::thread::sleep(Duration::from_millis(50));
    }
    let status = toolbox.status();
    assert_eq!(
        (status[0].tools.clone(), status[1].tools.clone()),
        (vec!["late__echo".to_string()], vec!["echo".to_string()])
    );
    assert_eq!(toolbox.find("echo").unwrap().server, "well");
    // Waiting for every server names them in the file's order instead.
    let waited = Toolbox::start(vec![hostile("late"), hostile("well")], limits()).unwrap();
    assert_eq!(waited.find("echo").unwrap().server, "late");
}

#[test]
fn a_stdio_server_gets_a_clean_environment_and_what_its_entry_names() {
    // The harm (issue 65, item 7): every stdio server was given Specula's whole environment,
    // its API key, the Hub token and cloud secrets among it.
    // Set before any server of this test starts (CI runs one test at a time).
    std::env::set_var("SPECULA_API_KEY", "secret-key");
    std::env::set_var("AWS_SECRET_ACCESS_KEY", "secret-aws");
    let mut spec = hostile("env");
    if let Endpoint::Stdio { env, .. } = &mut spec.endpoint {
        env.insert("NAMED_BY_ITS_ENTRY".into(), "yes".into());
    }
    let toolbox = Toolbox::start(vec![spec], limits()).unwrap();
    let names = toolbox.call("echo", json!({}), &|| false).unwrap().text;
    let names: Vec<&str> = names.split(' ').collect();
    assert!(names.contains(&"PATH") && names.contains(&"NAMED_BY_ITS_ENTRY"), "{names:?}");
    for secret in ["SPECULA_API_KEY", "AWS_SECRET_ACCESS_KEY", "CARGO_PKG_NAME"] {
        assert!(!names.contains(&secret), "{secret} reached the server: {names:?}");
    }
    // (A launcher between may add its own: pyenv's `python3` shim sets PYENV_* and SHLVL.)
}
