#!/usr/bin/env python3
"""A remote engine through the app, beside the same remote called directly, in one run:
bench/remote.json.

Starts the remote (`specula serve` on the real Qwen2.5-Coder pair, or llama.cpp's llama-server
with the same pair and `--spec-type draft-simple`), then the real app (no local model: its
target is the remote, chosen in Settings as a user does), and alternates, round by round, a
reply asked directly over HTTP (Python's own client, streaming) with the same reply asked in
the app's window (the prompt set in the composer, Send). Greedy, the same prompt and token budget each time.

Recorded per reply: time to first token and the decode rate (tokens after the first over the
time from the first to the last). Directly: at the Python client. In the app: at the app's
remote client (the stored reply's stats), and in the window (a MutationObserver stamps Send,
the first token drawn and the reply's end). The ratios compare medians.

    scripts/bench-remote.sh [--engine specula|llama] [--tokens 256] [--repeat 5] [--out bench/remote.json]

The remote shares this machine's two cores with the app, so the app's own CPU (painting, the
history) can slow the remote's decoding as it slows a local engine's: a remote on another
machine would fare no worse. (Giving the remote a core of its own with taskset squeezed the
app onto the other one, which measured the squeeze, not the client.)
"""

import argparse
import http.client
import importlib.util
import json
import os
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("bench_app", ROOT / "scripts/bench-app.py")
bench_app = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench_app)

MODELS = bench_app.MODELS
TARGET, DRAFT = MODELS / bench_app.TARGET, MODELS / bench_app.DRAFT
KEY = "sk-bench-remote"
PROMPT = bench_app.PROMPTS["code"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_remote(engine: str, cli: str, llama: str, port: int) -> subprocess.Popen:
    if engine == "llama":
        command = [llama, "-m", str(TARGET), "-md", str(DRAFT), "--spec-type", "draft-simple", "--spec-draft-n-max", "8",
                   "--port", str(port), "--api-key", KEY, "-c", "4096",
                   "-t", str(len(os.sched_getaffinity(0)))]
    else:
        key_file = Path(tempfile.mkdtemp()) / "key"
        key_file.write_text(KEY + "\n")
        command = [cli, "serve", "--device", "cpu", "--port", str(port), "--model", str(TARGET), "--draft", str(DRAFT),
                   "--api-key-file", str(key_file)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    for _ in range(600):
        try:
            req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/models", headers={"authorization": f"Bearer {KEY}"})
            with urllib.request.urlopen(req, timeout=2) as r:
                model = json.loads(r.read())["data"][0]["id"]
                return process, model
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"{engine} did not start")


def direct_reply(port: int, model: str, max_tokens: int) -> dict:
    """One streamed reply at a plain HTTP client: time to first token, decode rate."""
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": PROMPT}], "stream": True,
                       "stream_options": {"include_usage": True}, "max_tokens": max_tokens, "temperature": 0,
                       "top_p": 0.95, "seed": 42})
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    started = time.perf_counter()
    connection.request("POST", "/v1/chat/completions", body, {"content-type": "application/json", "authorization": f"Bearer {KEY}"})
    response = connection.getresponse()
    first = last = None
    chunks = 0
    for line in response:
        line = line.strip()
        if not line.startswith(b"data:") or line == b"data: [DONE]":
            continue
        chunk = json.loads(line[5:])
        content = (chunk.get("choices") or [{}])[0].get("delta", {}).get("content")
        if content:
            now = time.perf_counter()
            first = first or now
            last = now
            chunks += 1
    connection.close()
    return {"ttft_ms": round((first - started) * 1e3, 1), "tokens": chunks,
            "tokens_per_second": round((chunks - 1) / (last - first), 2) if chunks > 1 else None}


class RemoteApp:
    """The app with no local model, its target the remote, driven through tauri-driver."""

    def __init__(self, app: str, url: str, port: int, log: Path | None):
        self.data = Path(tempfile.mkdtemp(prefix="specula-bench-remote-"))
        models = Path(tempfile.mkdtemp(prefix="specula-bench-remote-models-"))
        env = {**os.environ, "SPECULA_DATA_DIR": str(self.data), "SPECULA_MODELS_DIR": str(models)}
        self.driver, self.wd = bench_app.launch(app, port, env, log)
        self.connect(url)

    def connect(self, url: str):
        """Library: connect; Settings: the remote's model as target, greedy."""
        self.wd.wait_for("return document.querySelector('#library-dialog').open", what="the first run's Library")
        self.wd.execute("const [url, key] = arguments;"
                        "document.querySelector('#add-connection [name=url]').value = url;"
                        "document.querySelector('#add-connection [name=key]').value = key;"
                        "document.querySelector('#add-connection button').click();", url, KEY)
        self.wd.wait_for("return document.querySelector('#add-connection-status').dataset.state === 'added'", what="the connection")
        self.wd.execute("document.querySelector('#library-close').click()")
        self.wd.click("#settings-button")
        self.wd.wait_for("return [...document.querySelectorAll('#settings-form [name=target] option')].some((o) => o.value.startsWith('remote:'))")

    def settings(self, max_tokens: int):
        self.wd.execute("const [n] = arguments; const form = document.querySelector('#settings-form');"
                        "const target = form.querySelector('[name=target]');"
                        "target.value = [...target.options].find((o) => o.value.startsWith('remote:')).value;"
                        "target.dispatchEvent(new Event('change'));"
                        "form.querySelector('[name=mode]').value = 'greedy';"
                        "form.querySelector('[name=max_tokens]').value = String(n);"
                        "document.querySelector('#settings-save').click();", max_tokens)
        self.wd.wait_for("return !document.querySelector('#settings-dialog').open", what="the settings to apply")

    def ask(self) -> dict:
        """A new chat, the prompt in the composer, Send; timed in the window and by the app's client."""
        self.wd.click("#new-chat")
        replies = self.wd.execute("return Number(document.body.dataset.replies ?? 0)")
        # Set, not typed: typing thousands of keys through WebDriver on a starved core closed
        # its session, and the typing is not what is measured here.
        self.wd.execute("const [text] = arguments; document.querySelector('#prompt').value = text;", PROMPT)
        # Stamps: Send, the first token drawn, the reply's end (the window's own clock).
        self.wd.execute("""
            const marks = (window.__bench = { sent: 0, first: 0 });
            document.querySelector('#send').addEventListener('click', () => (marks.sent = performance.now()), { once: true, capture: true });
            new MutationObserver((_, observer) => {
              if (!marks.first && document.querySelector('#messages .message.assistant.streaming .tok')) {
                marks.first = performance.now();
                observer.disconnect();
              }
            }).observe(document.querySelector('#messages'), { childList: true, subtree: true });""")
        self.wd.click("#send")
        self.wd.wait_for(f"return Number(document.body.dataset.replies ?? 0) > {replies}", what="the reply")
        marks = self.wd.execute("return window.__bench")
        with sqlite3.connect(f"file:{self.data / 'specula.db'}?mode=ro", uri=True) as db:
            stats = json.loads(db.execute("SELECT stats FROM messages WHERE role = 'assistant' ORDER BY id DESC LIMIT 1").fetchone()[0])
        return {"client": {"ttft_ms": round(stats["prefill_ms"], 1), "tokens": stats["generated_tokens"],
                           "tokens_per_second": round(stats["tokens_per_second"], 2)},
                "window_ttft_ms": round(marks["first"] - marks["sent"], 1)}

    def close(self):
        try:
            os.killpg(self.driver.pid, 9)
        except ProcessLookupError:
            pass


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--app", required=True)
    parser.add_argument("--cli", required=True)
    parser.add_argument("--llama-server", help="default: the one scripts/llama-cpp.sh --server builds for this CPU")
    parser.add_argument("--engine", choices=["specula", "llama"], default="specula")
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", default=str(ROOT / "bench/remote.json"))
    parser.add_argument("--screenshot")
    parser.add_argument("--app-log", type=Path, help="the app's and the driver's log")
    args = parser.parse_args()
    if args.engine == "llama" and not args.llama_server:
        built = subprocess.run([str(ROOT / "scripts/llama-cpp.sh"), "--server"], capture_output=True, text=True, check=True)
        args.llama_server = str(Path(built.stdout.strip()) / "llama-server")
    port = free_port()
    remote, model = start_remote(args.engine, args.cli, args.llama_server, port)
    app = None
    rounds = []
    try:
        app = RemoteApp(args.app, f"http://127.0.0.1:{port}", bench_app.free_port_pair(), args.app_log)
        app.settings(args.tokens)
        direct_reply(port, model, 8)  # the remote's first pass is not timed
        for i in range(args.repeat):
            # ABBA: drift across a round favours neither side.
            order = ["direct", "app"] if i % 2 == 0 else ["app", "direct"]
            one = {}
            for side in order:
                one[side] = direct_reply(port, model, args.tokens) if side == "direct" else app.ask()
            rounds.append(one)
            print(json.dumps(one), flush=True)
        if args.screenshot:
            app.wd.screenshot(Path(args.screenshot))
    finally:
        if app:
            app.close()
        os.killpg(remote.pid, 9)
    med = bench_app.median
    direct_ttft = med([r["direct"]["ttft_ms"] for r in rounds])
    direct_rate = med([r["direct"]["tokens_per_second"] for r in rounds])
    app_ttft = med([r["app"]["client"]["ttft_ms"] for r in rounds])
    app_rate = med([r["app"]["client"]["tokens_per_second"] for r in rounds])
    window_ttft = med([r["app"]["window_ttft_ms"] for r in rounds])
    result = {
        "command": f"scripts/bench-remote.sh --engine {args.engine} --tokens {args.tokens} --repeat {args.repeat}",
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": bench_app.cpu_record(),
        "engine": args.engine,
        "summary": {
            "direct_ttft_ms": direct_ttft, "app_ttft_ms": app_ttft, "window_ttft_ms": window_ttft,
            "direct_tokens_per_second": direct_rate, "app_tokens_per_second": app_rate,
            "app_over_direct_rate": bench_app.ratio(app_rate, direct_rate),
            "app_ttft_added_ms": round(app_ttft - direct_ttft, 1), "window_ttft_added_ms": round(window_ttft - direct_ttft, 1),
        },
        "rounds": rounds,
    }
    if args.engine == "llama":
        # Which llama.cpp build the remote was (scripts/llama-cpp.sh writes it beside the binary).
        info = Path(args.llama_server).parent / "build-info.json"
        if info.exists():
            result["llama_cpp"] = json.loads(info.read_text())
    out = Path(args.out)
    if out.exists() and out.read_text().strip():
        # One file for both engines: each run replaces its own engine's entry.
        kept = json.loads(out.read_text())
        runs = [r for r in kept.get("runs", []) if r["engine"] != args.engine] + [result]
    else:
        runs = [result]
    out.write_text(json.dumps({"runs": sorted(runs, key=lambda r: r["engine"])}, indent=1) + "\n")
    print(json.dumps(result["summary"]))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
