#!/usr/bin/env python3
"""Hostile and huge chat exports through `specula chats import`, each in a fresh data folder:
what happens (imported, or refused with which message), how long it takes, and the process's
peak memory beside the file's size. Writes bench/imports.json (rendered into BENCHMARKS.md).

    python3 scripts/hostile-imports.py --cli target/release/specula [--out bench/imports.json]

The cases: a truncated file, a cycle in a ChatGPT `mapping`, a 50,000-deep chain, 10^6 nodes in
one conversation, a field of the wrong type, one 100 MB message, and an ordinary 100 MB export
(2,000 conversations) that must import within twice its size in memory. After every refusal
the history is checked to hold nothing.
"""

import argparse
import gc
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def cpu() -> dict:
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = next((l.split(":", 1)[1].strip() for l in info.splitlines() if l.startswith("model name")), platform.processor())
    flags = next((l.split(":", 1)[1].split() for l in info.splitlines() if l.startswith("flags")), [])
    wanted = [f for f in flags if f in ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "fma", "f16c")]
    return {"model": model, "cores": os.cpu_count(), "flags": wanted}


def node(nid, parent, role, text, t, children=()):
    message = None if role is None else {
        "id": nid, "author": {"role": role}, "create_time": t,
        "content": {"content_type": "text", "parts": [text]}, "metadata": {},
    }
    return {"id": nid, "message": message, "parent": parent, "children": list(children)}


def chain(conversation_id: str, n: int, text_of=lambda i: f"message {i}") -> dict:
    """One conversation: a root and a chain of n messages, user and assistant in turn."""
    mapping = {"root": node("root", None, None, "", 0, ["m0"])}
    for i in range(n):
        mapping[f"m{i}"] = node(f"m{i}", "root" if i == 0 else f"m{i-1}", "user" if i % 2 == 0 else "assistant",
                               text_of(i), 1_700_000_000 + i, [f"m{i+1}"] if i + 1 < n else [])
    return {"title": f"Chain {n}", "create_time": 1_700_000_000, "update_time": 1_700_000_100,
            "mapping": mapping, "current_node": f"m{n-1}", "conversation_id": conversation_id}


def write_json(path: Path, value) -> int:
    with path.open("w") as f:
        json.dump(value, f)
    return path.stat().st_size


def cases(dir: Path):
    fixture = (ROOT / "crates/store/tests/fixtures/chatgpt-conversations.json").read_text()
    p = dir / "truncated.json"
    p.write_text(fixture[: len(fixture) // 2])
    yield "truncated JSON", p, False

    looped = chain("loop", 4)
    looped["mapping"]["m0"]["parent"] = "m3"
    yield "a cycle in a mapping", dir / "cycle.json", [looped]

    yield "a 50,000-deep chain", dir / "deep.json", [chain("deep", 50_000)]
    yield "10^6 nodes in one conversation", dir / "million.json", [chain("million", 1_000_000, lambda i: "x")]

    wrong = json.loads(fixture)
    wrong[1]["mapping"] = ["not", "an", "object"]
    yield "a field of the wrong type", dir / "wrong-type.json", wrong

    yield "one 100 MB message", dir / "huge-string.json", [chain("huge", 2, lambda i: "y" * (100 << 20) if i == 1 else "hi")]

    # An ordinary export of 100 MB: 2,000 conversations of 50 messages of about 1 KB.
    paragraph = ("The quick brown fox jumps over the lazy dog; " * 23)[:1000]
    yield "an ordinary 100 MB export (2,000 chats)", dir / "big.json", [
        chain(f"big-{c}", 50, lambda i, c=c: f"{c}.{i} {paragraph}") for c in range(2000)
    ]


def peak_rss_kib(cli: str, data: Path, path: Path) -> tuple:
    """Run one import and read its peak resident memory from its rusage (ru_maxrss, KiB on
    Linux; it counts the parent's pages from before the exec, hence a small parent)."""
    started = time.monotonic()
    log = path.with_suffix(".log")
    with log.open("w") as out:
        pid = os.posix_spawn(cli, [cli, "chats", "import", str(path)], {**os.environ, "SPECULA_DATA_DIR": str(data)},
                             file_actions=[(os.POSIX_SPAWN_DUP2, out.fileno(), 1), (os.POSIX_SPAWN_DUP2, out.fileno(), 2)])
        _, status, usage = os.wait4(pid, 0)
    said = log.read_text().strip()
    log.unlink()
    return os.waitstatus_to_exitcode(status), said, usage.ru_maxrss, time.monotonic() - started


def write_cases(dir: Path) -> None:
    """Write every case's file into `dir`, with a list of them (name, file) in cases.json."""
    listed = []
    for name, path, content in cases(dir):
        if content is not False:
            write_json(path, content)
        del content
        gc.collect()
        listed.append([name, str(path)])
    (dir / "cases.json").write_text(json.dumps(listed))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cli", default=str(ROOT / "target/release/specula"))
    parser.add_argument("--out", default=str(ROOT / "bench/imports.json"))
    parser.add_argument("--write-cases", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.write_cases:
        return write_cases(Path(args.write_cases))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        # The files are made by another process: this one stays small, so the imports it
        # starts are measured alone.
        subprocess.run([sys.executable, __file__, "--write-cases", str(tmp)], check=True)
        for i, (name, path) in enumerate(json.loads((tmp / "cases.json").read_text())):
            path = Path(path)
            data = tmp / f"data-{i}"
            code, said, rss_kib, seconds = peak_rss_kib(args.cli, data, path)
            listed = subprocess.run([args.cli, "chats", "list"], env={**os.environ, "SPECULA_DATA_DIR": str(data)},
                                    capture_output=True, text=True).stdout
            size = path.stat().st_size
            rows.append({
                "case": name, "bytes": size, "exit": code, "said": said.splitlines()[-1][:300] if said else "",
                "chats_after": len(listed.splitlines()), "peak_rss_bytes": rss_kib * 1024,
                "rss_over_size": round(rss_kib * 1024 / size, 2), "seconds": round(seconds, 2),
            })
            print(json.dumps(rows[-1]), file=sys.stderr)
            path.unlink()
    out = {"kind": "imports", "cpu": cpu(), "unix_time": int(time.time()), "cli": args.cli, "cases": rows}
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
