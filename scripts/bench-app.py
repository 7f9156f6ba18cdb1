#!/usr/bin/env python3
"""The desktop app's own speed, beside the engine's, in one run: bench/app.json.

Starts the real app (a release build) under the display this runs in (scripts/bench-app.sh
gives it Xvfb), drives it as a user does through tauri-driver (opens Settings to choose the
drafter, starts a new chat, types the prompt, presses Send), and reads each reply's figures
back from the app's history database, never from the page: polling the page would cost the
webview the very time being measured. The same prompts, seed and settings then run through
`specula generate` in the same run, alternating with the app. Reproducible mode with a pinned
seed makes plain and speculative replies the same tokens, so their rates compare directly.

For each reply it records the app's decode rate (the engine's own clock inside the app), the
CLI's, the speedup the app displayed and the one measured (the app's speculative over its own
plain rate), and the CPU time the webview (WebKitWebProcess) and the X server spent per
generated token.

    scripts/bench-app.sh [--tokens 256,1500] [--kinds code,prose] [--repeat N] [--out bench/app.json]
"""

import argparse
import json
import os
import platform
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS = Path(os.environ.get("SPECULA_MODELS_DIR", Path.home() / ".cache/specula/models"))
TARGET = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
DRAFT = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
SEED = 7
CONTEXT = 4096

# Prompts that run long (a 1,500-token reply must not end at 300), one set a kind.
PROMPTS = {
    "code": "Write a complete Python module for a library management system: classes for books, members, "
    "loans and the library itself, with type hints, docstrings, error handling, and a long set of unit "
    "tests with unittest at the end. Write all of the code.",
    "prose": "Write a long story, in twenty numbered chapters of three paragraphs each, about a lighthouse keeper on "
    "a remote island who finds a message in a bottle. Write every chapter in full.",
}


class WebDriver:
    """Just enough of the W3C WebDriver protocol to drive the app through tauri-driver."""

    def __init__(self, base: str):
        self.base = base
        self.session = None

    def request(self, method: str, path: str, body=None):
        url = f"{self.base}/session/{self.session}{path}" if self.session else f"{self.base}{path}"
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, method=method, headers={"content-type": "application/json"})
        with urllib.request.urlopen(req, timeout=600) as response:
            value = json.loads(response.read())["value"]
        if isinstance(value, dict) and value.get("error"):
            raise RuntimeError(f"{method} {path}: {value}")
        return value

    def start(self, app: str):
        self.session = self.request("POST", "/session", {"capabilities": {"alwaysMatch": {"tauri:options": {"application": app}}}})["sessionId"]

    def execute(self, script: str, *args):
        return self.request("POST", "/execute/sync", {"script": script, "args": list(args)})

    def element(self, css: str) -> str:
        return next(iter(self.request("POST", "/element", {"using": "css selector", "value": css}).values()))

    def click(self, css: str):
        self.request("POST", f"/element/{self.element(css)}/click", {})

    def type(self, css: str, text: str):
        self.request("POST", f"/element/{self.element(css)}/value", {"text": text})

    def wait_for(self, script: str, timeout: float = 300, what: str = ""):
        end = time.time() + timeout
        while time.time() < end:
            try:
                if self.execute(script):
                    return
            except (RuntimeError, OSError):
                pass
            time.sleep(0.5)
        raise TimeoutError(f"waiting for {what or script}")

    def screenshot(self, path: Path):
        # The screen as the X server shows it: WebKit's own snapshot never answers while the
        # app draws without GPU compositing (src-tauri/lib.rs).
        display = os.environ["DISPLAY"]
        subprocess.run(f"xwd -root -display '{display}' | xwdtopnm 2>/dev/null | pnmtopng > '{path}'", shell=True, check=True)


def cpu_ticks(names: tuple) -> int:
    """User and system clock ticks of every process whose command name is one of `names`."""
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        comm = text[text.index("(") + 1 : text.rindex(")")]
        if comm in names:
            fields = text[text.rindex(")") + 2 :].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total


WEBVIEW = ("WebKitWebProces",)  # /proc truncates command names to 15 characters
XSERVER = ("Xvfb", "Xorg")
TICK = os.sysconf("SC_CLK_TCK")


def cpu_record() -> dict:
    info = {"model": platform.processor() or "?", "cores": os.cpu_count(), "flags": []}
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name") and info["model"] in ("?", ""):
            info["model"] = line.split(":", 1)[1].strip()
        if line.startswith("flags"):
            flags = line.split(":", 1)[1].split()
            info["flags"] = [f for f in flags if f.startswith(("avx", "fma", "f16c"))]
            break
    return info


def launch(app: str, port: int, env: dict, log: Path | None):
    """tauri-driver on `port` with the app's environment, and a WebDriver session on the app
    once its window is ready: (the driver's process, the session)."""
    driver = os.environ.get("TAURI_DRIVER") or shutil.which("tauri-driver") or str(Path.home() / ".cache/specula/tools/bin/tauri-driver")
    process = subprocess.Popen(
        [driver, "--port", str(port), "--native-port", str(port + 1000)],
        env=env, stdout=subprocess.DEVNULL, stderr=open(log, "w") if log else subprocess.DEVNULL, start_new_session=True,
    )
    wd = WebDriver(f"http://127.0.0.1:{port}")
    for _ in range(100):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=1)
            break
        except OSError:
            time.sleep(0.1)
    wd.start(app)
    wd.wait_for("return document.body.dataset.ready === 'true'", what="the window")
    return process, wd


class App:
    """The app under the driver, with its own data folder, on the real model pair."""

    def __init__(self, app: str, port: int, log: Path | None):
        self.data = Path(tempfile.mkdtemp(prefix="specula-bench-app-"))
        env = {**os.environ, "SPECULA_DATA_DIR": str(self.data), "SPECULA_MODELS_DIR": str(MODELS)}
        # The kernel pool says when it gives up its worker (a serial spell): counted per reply.
        self.log = log
        if log:
            env["RUST_LOG"] = "warn,specula_engine::kernels::pool=debug"
        self.driver, self.wd = launch(app, port, env, log)
        self.wd.wait_for("return !/loading/.test(document.querySelector('#engine-status').textContent)", 300, "the models")

    def settings(self, drafter: str, max_tokens: int):
        """Choose the drafter and the reply's settings in the Settings dialog, as a user does."""
        self.wd.click("#settings-button")
        self.wd.wait_for(
            "return document.querySelector('#settings-dialog').open && "
            "document.querySelector('#settings-form [name=draft]').options.length > 2",
            what="the settings dialog",
        )
        draft = "none" if drafter == "none" else f"model:{MODELS / DRAFT}"
        values = {"draft": draft, "k": "auto", "mode": "reproducible", "seed": SEED, "max_tokens": max_tokens, "context_tokens": CONTEXT}
        self.wd.execute(
            "const [values] = arguments;"
            "for (const [name, value] of Object.entries(values)) {"
            "  const field = document.querySelector('#settings-form [name=\"' + name + '\"]');"
            "  field.value = String(value); field.dispatchEvent(new Event('change')); }"
            # The draft model alone, as `specula generate --draft` drafts (the app's default adds copies).
            "document.querySelector('#settings-form [name=copies]').checked = false;"
            "document.querySelector('#settings-save').click();",
            values,
        )
        self.wd.wait_for("return !document.querySelector('#settings-dialog').open", 300, "the settings to apply")

    def ask(self, prompt: str) -> dict:
        """A new chat, the prompt typed into the composer, Send; the stored reply once it ends."""
        self.wd.click("#new-chat")
        before = self.last_reply_id()
        replies = self.wd.execute("return Number(document.body.dataset.replies ?? 0)")
        self.wd.type("#prompt", prompt)
        self.wd.click("#send")
        # CPU from Send to the stored reply: what streaming costs, without the typing.
        sent = cpu_ticks(WEBVIEW), cpu_ticks(XSERVER)
        while True:
            time.sleep(0.2)
            row = self.last_reply()
            if row and row["id"] != before and row["finish_reason"]:
                break
        row["streaming_ticks"] = (cpu_ticks(WEBVIEW) - sent[0], cpu_ticks(XSERVER) - sent[1])
        # The database has the reply's end before the window does: let the window finish too.
        self.wd.wait_for(f"return Number(document.body.dataset.replies ?? 0) > {replies}", what="the window to end the reply")
        return row

    def query(self, sql: str):
        with sqlite3.connect(f"file:{self.data / 'specula.db'}?mode=ro", uri=True, timeout=5) as db:
            return db.execute(sql).fetchone()

    def last_reply_id(self):
        row = self.query("SELECT max(id) FROM messages WHERE role = 'assistant'")
        return row[0] if row else None

    def last_reply(self):
        row = self.query("SELECT id, stats, finish_reason FROM messages WHERE role = 'assistant' ORDER BY id DESC LIMIT 1")
        if not row:
            return None
        return {"id": row[0], "stats": json.loads(row[1]) if row[1] else None, "finish_reason": row[2]}

    def close(self):
        try:
            os.killpg(self.driver.pid, 9)
        except ProcessLookupError:
            pass
        shutil.rmtree(self.data, ignore_errors=True)


def serial_spells(app: App) -> int:
    """How often the kernel pool has given up its worker so far (with --app-log)."""
    return app.log.read_text(errors="replace").count("pool workers late") if app.log else 0


def app_reply(app: App, drafter: str, prompt: str, max_tokens: int) -> dict:
    app.settings(drafter, max_tokens)
    web, x, spells = cpu_ticks(WEBVIEW), cpu_ticks(XSERVER), serial_spells(app)
    started = time.time()
    row = app.ask(prompt)
    wall = time.time() - started
    stats = row["stats"] or {}
    tokens = stats.get("generated_tokens", 0)
    spec = stats.get("speculative") or {}
    per_token = lambda ticks: 1000.0 * ticks / TICK / max(1, tokens)
    return {
        "tokens": tokens,
        "finish_reason": row["finish_reason"],
        "tokens_per_second": stats.get("tokens_per_second"),
        "displayed_speedup": spec.get("speedup_vs_plain"),
        "acceptance": spec.get("acceptance_rate"),
        # What the displayed figure compares against: plain steps timed inside this reply.
        "plain_ms_per_token_in_reply": spec.get("plain_ms_per_token"),
        "plain_steps_in_reply": spec.get("plain_steps"),
        "wall_s": round(wall, 2),
        "webview_cpu_ms_per_token": round(per_token(cpu_ticks(WEBVIEW) - web), 3),
        "x_cpu_ms_per_token": round(per_token(cpu_ticks(XSERVER) - x), 3),
        # From Send to the reply's end (the figures above include typing the prompt).
        "webview_cpu_ms_per_token_streaming": round(per_token(row["streaming_ticks"][0]), 3),
        "x_cpu_ms_per_token_streaming": round(per_token(row["streaming_ticks"][1]), 3),
        **({"pool_serial_spells": serial_spells(app) - spells} if app.log else {}),
    }


def cli_reply(cli: str, drafter: str, prompt: str, max_tokens: int) -> dict:
    command = [cli, "generate", "--model", str(MODELS / TARGET), "--mode", "reproducible", "--seed", str(SEED),
               "--max-tokens", str(max_tokens), "--ctx", str(CONTEXT), "--k", "auto", "--json", "--prompt", prompt]
    command += ["--draft", str(MODELS / DRAFT)] if drafter == "model" else ["--drafter", "none"]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    reply = json.loads(out)
    stats = reply["stats"]
    spec = stats.get("speculative") or {}
    return {
        "tokens": stats["generated_tokens"],
        "finish_reason": reply["finish_reason"],
        "tokens_per_second": stats["tokens_per_second"],
        "displayed_speedup": spec.get("speedup_vs_plain"),
        "acceptance": spec.get("acceptance_rate"),
    }


def median_reply(replies: list) -> dict:
    """The reply of median rate among repeats, with every repeat's rate beside it."""
    ranked = sorted(replies, key=lambda r: r["tokens_per_second"] or 0)
    return {**ranked[len(ranked) // 2], "rates": [round(r["tokens_per_second"] or 0, 2) for r in replies]}


def measure(app: App, cli: str, kind: str, max_tokens: int, repeat: int) -> dict:
    """`repeat` rounds of the four replies (app plain, CLI plain, app speculative, CLI
    speculative), each pair back to back so that it ran under the same conditions; medians kept."""
    prompt = PROMPTS[kind]
    replies = {name: [] for name in ("app_plain", "cli_plain", "app_speculative", "cli_speculative")}
    for index in range(repeat):
        # Orders alternate from round to round (app then CLI, CLI then app; plain then
        # speculative, then the reverse), so that a host speeding up or slowing down across
        # a round favours neither side of a ratio.
        flip = index % 2 == 1
        for drafter in ("model", "none") if flip else ("none", "model"):
            name = "plain" if drafter == "none" else "speculative"
            for side in ("cli", "app") if flip else ("app", "cli"):
                reply = app_reply(app, drafter, prompt, max_tokens) if side == "app" else cli_reply(cli, drafter, prompt, max_tokens)
                replies[f"{side}_{name}"].append(reply)
    run = {"kind": kind, "max_tokens": max_tokens, "repeat": repeat}
    run.update({name: median_reply(r) for name, r in replies.items()})
    # Ratios are taken within a round, whose four replies ran minutes apart at most, then the
    # median across rounds: this host's speed drifts by a third between minutes, so a ratio
    # of medians from different minutes would measure the drift.
    rate = lambda name, i: replies[name][i]["tokens_per_second"]
    shown = lambda i: replies["app_speculative"][i]["displayed_speedup"]
    rounds = {
        "app_over_cli_plain": [ratio(rate("app_plain", i), rate("cli_plain", i)) for i in range(repeat)],
        "app_over_cli_speculative": [ratio(rate("app_speculative", i), rate("cli_speculative", i)) for i in range(repeat)],
        "app_measured_speedup": [ratio(rate("app_speculative", i), rate("app_plain", i)) for i in range(repeat)],
    }
    rounds["displayed_over_measured"] = [ratio(shown(i), m) for i, m in enumerate(rounds["app_measured_speedup"])]
    for name, values in rounds.items():
        run[name] = median([v for v in values if v is not None])
    run["rounds"] = rounds
    shown_all = [shown(i) for i in range(repeat) if shown(i)]
    run["app_speculative"]["displayed_speedup"] = median(shown_all)
    run["same_length"] = len({r["tokens"] for group in replies.values() for r in group}) == 1
    return run


def median(values: list):
    if not values:
        return None
    ranked = sorted(values)
    mid = len(ranked) // 2
    return ranked[mid] if len(ranked) % 2 else round((ranked[mid - 1] + ranked[mid]) / 2, 3)


def free_port_pair() -> int:
    """A port for tauri-driver whose native port (+1000) is free too: a driver left running by
    an earlier run on a fixed port answered the new session with a closed connection."""
    import socket

    for port in range(15444, 16444):
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind(("127.0.0.1", port))
                b.bind(("127.0.0.1", port + 1000))
            return port
        except OSError:
            continue
    raise RuntimeError("no free pair of ports for tauri-driver")


def ratio(a, b):
    return round(a / b, 3) if a and b else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--app", default=str(ROOT / "target/release/specula-app"))
    parser.add_argument("--cli", default=str(ROOT / "target/release/specula"))
    parser.add_argument("--tokens", default="256,1500")
    parser.add_argument("--kinds", default="code,prose")
    parser.add_argument("--repeat", default="1", help="rounds per prompt, one figure or one per size (3,1); medians are kept")
    parser.add_argument("--out", default=str(ROOT / "bench/app.json"))
    parser.add_argument("--screenshot", help="a PNG of the window after the last reply")
    parser.add_argument("--app-log", type=Path, help="the app's log, with the kernel pool's serial spells counted per reply")
    args = parser.parse_args()
    port = free_port_pair()
    app = App(args.app, port, args.app_log)
    runs = []
    try:
        # A short reply first: the models' first pass and the page's first paint are not timed.
        app_reply(app, "model", "Say hello.", 8)
        sizes = [int(t) for t in args.tokens.split(",")]
        repeats = [int(r) for r in args.repeat.split(",")]
        for max_tokens, repeat in zip(sizes, repeats + repeats[-1:] * len(sizes)):
            for kind in args.kinds.split(","):
                run = measure(app, args.cli, kind, max_tokens, repeat)
                runs.append(run)
                print(json.dumps(run), flush=True)
        if args.screenshot:
            app.wd.screenshot(Path(args.screenshot))
    finally:
        app.close()
    result = {
        "command": f"scripts/bench-app.sh --tokens {args.tokens} --kinds {args.kinds} --repeat {args.repeat}",
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": cpu_record(),
        "seed": SEED,
        "runs": runs,
    }
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
