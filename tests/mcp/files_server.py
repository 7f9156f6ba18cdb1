"""An MCP server (the official Python SDK) that hands out three small files by name, for
scripts/bench-tools.py: what a model answers after a tool result is often that result again,
which speculation should draft well. `files_server.py` speaks stdio."""
from mcp.server.mcpserver import MCPServer

FILES = {
    "fib.rs": '''use std::collections::HashMap;

pub fn fibonacci(n: u64) -> u64 {
    let (mut a, mut b) = (0u64, 1u64);
    for _ in 0..n {
        let next = a.wrapping_add(b);
        a = b;
        b = next;
    }
    a
}

pub fn fibonacci_memo(n: u64, memo: &mut HashMap<u64, u64>) -> u64 {
    if n < 2 {
        return n;
    }
    if let Some(&value) = memo.get(&n) {
        return value;
    }
    let value = fibonacci_memo(n - 1, memo).wrapping_add(fibonacci_memo(n - 2, memo));
    memo.insert(n, value);
    value
}

pub fn is_fibonacci(x: u64) -> bool {
    let mut n = 0;
    while fibonacci(n) < x {
        n += 1;
    }
    fibonacci(n) == x
}
''',
    "config.json": '''{
  "server": {
    "host": "127.0.0.1",
    "port": 8080,
    "workers": 4,
    "timeout_seconds": 30
  },
  "database": {
    "url": "postgres://localhost/app",
    "pool_size": 10,
    "migrations": true
  },
  "logging": {
    "level": "info",
    "format": "json",
    "file": "/var/log/app.log"
  }
}
''',
    "notes.md": '''# Release notes, version 2.4

The importer now reads CSV files with quoted fields that span lines, and it reports the line
of the first malformed record instead of failing silently. Large imports are about twice as
fast because rows are inserted in batches of five hundred.

The web dashboard gained a dark theme, which follows the system setting unless the user picks
one. Charts keep their colours readable in both themes.

Two problems were fixed: exports with non-ASCII file names no longer fail on Windows, and the
session timer no longer logs users out while an upload is still running.

Support for the old XML export format ends with version 3.0; a warning is shown when it is used.
''',
}

server = MCPServer("files")


@server.tool()
def read_file(name: str) -> str:
    """Read a project file by its name: fib.rs, config.json or notes.md."""
    return FILES.get(name, f"no file named {name}; the files are " + ", ".join(FILES))


if __name__ == "__main__":
    server.run("stdio")
