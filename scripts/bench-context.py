#!/usr/bin/env python3
"""Chats taken in turn: time to the first token when a server goes back to a chat it served
before, `specula serve` beside llama.cpp's llama-server in one run: bench/context.json.

`--chats N` chats (default 3), each opening with a system note of about 1,400 words, are asked
in turn A, B, C, A, B, C, ... for `--rounds` rounds (each turn adds the reply before it and a
new question, as a chat does), greedy, 16 tokens a reply, the real Qwen2.5-Coder pair with its
draft on both servers. The first N turns read their notes cold; from then on a server that kept
the other chats' caches resumes each.
Recorded per turn: the prompt's length (the server's usage) and the time from the request to
the first streamed text, at a Python client on this machine. `specula-no-cache` is the same
server with `--cache-ram 0`: only the last prompt's cache, as before the prompt cache.
`specula-restart` asks chat A once, stops the server, starts it again with the same
`--cache-dir` and asks A's next turn: the first turn after a restart, resumed from disk
(`restart_ttft_s`) against the first, cold turn (`cold_ttft_s`).

    scripts/bench-context.py [--cli target/release/specula] [--llama-server PATH] [--chats 3] [--rounds 4]
                             [--out bench/context.json]

`--many N` measures instead the prompt cache's memory cap and a restart, into
bench/context-many.json: N chats (300-word notes) asked in turn on one `specula serve
--cache-ram MiB`, then the last tenth of them again, with the server's resident size after
each reply (against its size once loaded and the cap); and the first turn after a restart.

    scripts/bench-context.py --many 50 --cache-ram 256 --out bench/context-many.json
"""

import argparse
import http.client
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("bench_app", ROOT / "scripts/bench-app.py")
bench_app = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench_app)

TARGET, DRAFT = bench_app.MODELS / bench_app.TARGET, bench_app.MODELS / bench_app.DRAFT
CONTEXT = 8192
WORDS = ("parser token buffer cache request reply module handler queue index record field value "
         "schema limit thread socket stream window layout column page draft model target step").split()


def note(topic: str, words: int = 1400) -> str:
    """A system note of `words` words about `topic`: varied enough to tokenise like prose."""
    out, i = [], 0
    while len(out) < words:
        a, b, c = WORDS[i % len(WORDS)], WORDS[(i * 7 + 3) % len(WORDS)], WORDS[(i * 11 + 5) % len(WORDS)]
        out += f"Note {i} on {topic}: the {a} checks each {b} before the {c} is written.".split()
        i += 1
    return " ".join(out[:words])


def start(engine: str, cli: str, llama: str, port: int, extra: list = ()) -> subprocess.Popen:
    threads = str(len(os.sched_getaffinity(0)))
    if engine == "llama.cpp":
        command = [llama, "-m", str(TARGET), "-md", str(DRAFT), "--spec-type", "draft-simple", "--port", str(port),
                   "-c", str(CONTEXT), "-t", threads]
    else:
        command = [cli, "serve", "--model", str(TARGET), "--draft", str(DRAFT), "--port", str(port), "--ctx", str(CONTEXT)]
        if engine == "specula-no-cache":
            command += ["--cache-ram", "0"]
        command += list(extra)
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(600):
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            connection.request("GET", "/health")
            if connection.getresponse().status == 200:
                return server
        except OSError:
            pass
        time.sleep(0.5)
    server.kill()
    raise SystemExit(f"{engine} did not come up on port {port}")


def ask(port: int, messages: list) -> dict:
    """One streamed reply: its text, its time to the first text, and its prompt's length."""
    body = json.dumps({"model": TARGET.stem, "messages": messages, "stream": True, "max_tokens": 16, "temperature": 0,
                       "stream_options": {"include_usage": True}})
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    sent = time.perf_counter()
    connection.request("POST", "/v1/chat/completions", body, {"content-type": "application/json"})
    response = connection.getresponse()
    text, first, prompt = "", None, None
    for line in response:
        line = line.decode().strip()
        if not line.startswith("data:") or line == "data: [DONE]":
            continue
        chunk = json.loads(line[5:])
        delta = (chunk.get("choices") or [{}])[0].get("delta", {}).get("content") or ""
        if delta and first is None:
            first = time.perf_counter() - sent
        text += delta
        if chunk.get("usage"):
            prompt = chunk["usage"]["prompt_tokens"]
    return {"ttft_s": round(first or 0.0, 3), "prompt_tokens": prompt, "text": text}


TOPICS = ("parsing", "storage", "networking", "rendering", "scheduling")


def chats_in_turn(port: int, chats: int, rounds: int) -> list:
    names = "ABCDE"[:chats]
    notes = {name: [{"role": "system", "content": note(topic)}] for name, topic in zip(names, TOPICS)}
    turns = []
    for turn in range(rounds * chats):
        name = names[turn % chats]
        messages = notes[name]
        messages.append({"role": "user", "content": f"Question {turn // chats + 1}: which note mentions step {turn + 3}?"})
        reply = ask(port, messages)
        messages.append({"role": "assistant", "content": reply.pop("text")})
        turns.append({"turn": turn + 1, "chat": name, **reply})
        print(f"  turn {turn + 1} ({name}): {reply['prompt_tokens']} prompt tokens, first token {reply['ttft_s']} s",
              file=sys.stderr)
    return turns


def after_restart(cli: str, port: int, cache_dir: str) -> dict:
    """Chat A's first turn, the server restarted, A's second turn: both times to first token."""
    messages = [{"role": "system", "content": note("parsing")}, {"role": "user", "content": "Question 1: which note mentions step 3?"}]
    times = []
    for turn in range(2):
        server = start("specula-restart", cli, "", port, ["--cache-dir", cache_dir])
        try:
            reply = ask(port, messages)
        finally:
            server.terminate()
            server.wait(timeout=60)
        times.append(reply["ttft_s"])
        print(f"  turn {turn + 1} (A, {'cold' if turn == 0 else 'after a restart'}): first token {reply['ttft_s']} s",
              file=sys.stderr)
        messages += [{"role": "assistant", "content": reply["text"]},
                     {"role": "user", "content": "Question 2: which note mentions step 4?"}]
    return {"cold_ttft_s": times[0], "restart_ttft_s": times[1], "restart_over_cold": round(times[1] / times[0], 3)}


def resident_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def many_chats(cli: str, port: int, chats: int, cache_mib: int) -> dict:
    """`chats` chats asked in turn, then the last tenth again: resident sizes and times to
    first token (the second visits resume from the cache, which the first ones overflowed)."""
    server = start("specula", cli, "", port, ["--cache-ram", str(cache_mib)])
    try:
        loaded = resident_mib(server.pid)
        chat = lambda i: [{"role": "system", "content": note(f"subject {i}", words=300)},
                          {"role": "user", "content": f"Which note mentions step {i + 3}?"}]
        order = list(range(chats)) + list(range(chats - max(1, chats // 10), chats))
        visits = []
        for n, i in enumerate(order):
            reply = ask(port, chat(i))
            visits.append({"chat": i, "again": n >= chats, "ttft_s": reply["ttft_s"],
                           "prompt_tokens": reply["prompt_tokens"], "rss_mib": resident_mib(server.pid)})
            print(f"  chat {i}{' again' if n >= chats else ''}: first token {reply['ttft_s']} s, "
                  f"resident {visits[-1]['rss_mib']} MiB", file=sys.stderr)
    finally:
        server.terminate()
        server.wait(timeout=30)
    first, again = [v for v in visits if not v["again"]], [v for v in visits if v["again"]]
    median = lambda xs: sorted(xs)[len(xs) // 2]
    peak = max(v["rss_mib"] for v in visits)
    return {"chats": chats, "cache_ram_mib": cache_mib, "rss_loaded_mib": loaded, "rss_peak_mib": peak,
            "rss_growth_over_cap": round((peak - loaded) / cache_mib, 3),
            "first_visit_ttft_s": median([v["ttft_s"] for v in first]),
            "second_visit_ttft_s": median([v["ttft_s"] for v in again]), "visits": visits}


def summary(turns: list, chats: int) -> dict:
    cold = [t["ttft_s"] for t in turns[:chats]]
    warm = [t["ttft_s"] for t in turns[chats:]]
    median = lambda xs: sorted(xs)[len(xs) // 2] if xs else None
    return {"cold_ttft_s": median(cold), "warm_ttft_s": median(warm),
            "warm_over_cold": round(median(warm) / median(cold), 3) if cold and warm and median(cold) else None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cli", default=str(ROOT / "target/release/specula"))
    parser.add_argument("--llama-server", help="default: the one scripts/llama-cpp.sh --server builds for this CPU")
    parser.add_argument("--no-llama", action="store_true", help="measure specula serve alone")
    parser.add_argument("--chats", type=int, default=3, choices=range(2, 6), help="chats asked in turn")
    parser.add_argument("--rounds", type=int, default=4, help="turns per chat")
    parser.add_argument("--out", default=str(ROOT / "bench/context.json"))
    parser.add_argument("--many", type=int, help="measure the cache's cap over this many chats, and a restart")
    parser.add_argument("--cache-ram", type=int, default=256, help="with --many: the server's cap in MiB")
    parser.add_argument("--restart-only", action="store_true", help="with --many: measure the restart again, into --out")
    args = parser.parse_args()
    if args.many and args.restart_only:
        result = json.loads(Path(args.out).read_text())
        with tempfile.TemporaryDirectory() as cache_dir:
            result["restart"] = after_restart(args.cli, bench_app.free_port_pair(), cache_dir)
        result["restart"]["date"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
        print(json.dumps(result["restart"]))
        return 0
    if args.many:
        result = {"kind": "context-many", "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                  "cpu": bench_app.cpu_record(), "context": CONTEXT, "max_tokens": 16}
        print(f"{args.many} chats:", file=sys.stderr)
        result["many"] = many_chats(args.cli, bench_app.free_port_pair(), args.many, args.cache_ram)
        with tempfile.TemporaryDirectory() as cache_dir:
            print("specula-restart:", file=sys.stderr)
            result["restart"] = after_restart(args.cli, bench_app.free_port_pair(), cache_dir)
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
        print(json.dumps({k: v for k, v in result["many"].items() if k != "visits"} | {"restart": result["restart"]}))
        return 0
    # specula-no-cache: the same server keeping no earlier prompt, as every release before had it.
    engines = ["specula", "specula-no-cache"] + ([] if args.no_llama else ["llama.cpp"])
    if "llama.cpp" in engines and not args.llama_server:
        built = subprocess.run([str(ROOT / "scripts/llama-cpp.sh"), "--server"], capture_output=True, text=True, check=True)
        args.llama_server = str(Path(built.stdout.strip()) / "llama-server")
    result = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "cpu": bench_app.cpu_record(),
              "words_per_note": 1400, "chats": args.chats, "rounds": args.rounds, "context": CONTEXT, "max_tokens": 16,
              "engines": {}}
    for engine in engines:
        port = bench_app.free_port_pair()
        print(f"{engine}:", file=sys.stderr)
        server = start(engine, args.cli, args.llama_server, port)
        try:
            turns = chats_in_turn(port, args.chats, args.rounds)
        finally:
            server.terminate()
            server.wait(timeout=30)
        result["engines"][engine] = {"turns": turns, **summary(turns, args.chats)}
    with tempfile.TemporaryDirectory() as cache_dir:
        print("specula-restart:", file=sys.stderr)
        result["engines"]["specula-restart"] = after_restart(args.cli, bench_app.free_port_pair(), cache_dir)
    if "llama.cpp" in engines:
        info = Path(args.llama_server).parent / "build-info.json"
        if info.exists():
            result["llama_cpp"] = json.loads(info.read_text())
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({e: {k: v for k, v in r.items() if k != "turns"} for e, r in result["engines"].items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
