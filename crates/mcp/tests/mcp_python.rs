//! The Python with the official MCP SDK (tests/mcp/requirements.txt), which runs the real
//! server of the tool tests: `SPECULA_MCP_PYTHON`, or the venv scripts/test.sh makes.

use std::path::PathBuf;

pub fn mcp_python() -> String {
    let python = match std::env::var_os("SPECULA_MCP_PYTHON") {
        Some(path) => PathBuf::from(path),
        None => PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache/specula/mcp-venv/bin/python"),
    };
    assert!(
        python.exists(),
        "{} is missing: scripts/test.sh makes it from tests/mcp/requirements.txt",
        python.display()
    );
    python.display().to_string()
}

/// tests/mcp/arith_server.py, the real server.
pub fn arith_server() -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/mcp/arith_server.py").display().to_string()
}
