#!/usr/bin/env python3
"""Many clients at once: `specula serve --parallel N` beside llama-server `-np N`, in one run,
on the same model files: bench/concurrency.json and a table.

For each engine (Specula plain and with the draft model, llama-server plain and with the same
draft, `--spec-type draft-simple`), started once with N lanes/slots, and each prompt set (code,
prose: the bench prompts, a different prompt per client so that no client reads another's
cache), C clients at once (C in --clients) each stream one chat reply of --tokens tokens,
greedy. Then staggered arrivals (C clients, a new one every --stagger seconds), and a long
prompt (about 1,000 tokens) arriving beside three decoding clients.

Recorded per run: aggregate tokens per second (all tokens over the wall time from the first
request to the last token), p50/p95 time to first token, p50/p95 time per output token (each
client's time from its first token to its last over its tokens after the first), the longest
gap between two tokens of one client, and for Specula the mean k and acceptance (the reply's
own stats). Tokens are counted from each reply's `usage`.

    scripts/bench-concurrency.py [--parallel 4] [--clients 1,2,4,8] [--tokens 96] [--engines specula,specula-draft,llama,llama-draft]
"""
import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET_DIR = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
MODELS = Path(os.environ.get("SPECULA_MODELS_DIR", Path.home() / ".cache/specula/models"))
TARGET = MODELS / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
DRAFT = MODELS / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
THREADS = str(len(os.sched_getaffinity(0)))
PROMPTS = json.loads((ROOT / "crates/cli/prompts/bench.json").read_text())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu() -> dict:
    info = Path("/proc/cpuinfo").read_text()
    model = next((l.split(":", 1)[1].strip() for l in info.splitlines() if l.startswith("model name")), "?")
    flags = next((l.split(":", 1)[1].split() for l in info.splitlines() if l.startswith("flags")), [])
    wanted = [f for f in flags if f.startswith(("avx", "fma", "f16c", "amx"))]
    return {"model": model, "cores": len(os.sched_getaffinity(0)), "flags": wanted}


class Server:
    def __init__(self, engine: str, parallel: int, llama_bin: Path | None):
        self.engine, self.port = engine, free_port()
        if engine.startswith("specula"):
            command = [str(TARGET_DIR / "release/specula"), "serve", "--device", "cpu", "--port", str(self.port),
                       "--model", str(TARGET), "--parallel", str(parallel), "--ctx", "4096", "--cache-ram", "0"]
            if engine == "specula-draft":
                command += ["--draft", str(DRAFT), "--drafter", "auto"]
        else:
            command = [str(llama_bin / "llama-server"), "-m", str(TARGET), "-t", THREADS, "-np", str(parallel),
                       "-c", str(4096 * parallel), "--port", str(self.port), "--no-cache-prompt"]
            if engine == "llama-draft":
                command += ["-md", str(DRAFT), "--spec-type", "draft-simple", "--spec-draft-n-max", "8"]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        start_new_session=True)
        self.model = "m"
        for _ in range(900):
            try:
                connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
                connection.request("GET", "/v1/models")
                self.model = json.loads(connection.getresponse().read())["data"][0]["id"]
                self.stream([{"role": "user", "content": "Hi"}], 2)
                return
            except (OSError, ValueError, KeyError):
                time.sleep(0.2)
        raise RuntimeError(f"{engine} did not start")

    def stream(self, messages, tokens) -> dict:
        """One streamed chat reply: when it was asked, each content chunk's time, its usage."""
        body = json.dumps({"model": self.model, "messages": messages, "stream": True, "max_tokens": tokens,
                           "temperature": 0, "stream_options": {"include_usage": True}})
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=900)
        asked = time.perf_counter()
        connection.request("POST", "/v1/chat/completions", body, {"content-type": "application/json"})
        response = connection.getresponse()
        if response.status != 200:
            raise OSError(f"status {response.status}: {response.read()[:200]!r}")
        times, usage, stats = [], None, None
        for line in response:
            line = line.strip()
            if not line.startswith(b"data:") or line == b"data: [DONE]":
                continue
            chunk = json.loads(line[5:])
            if (chunk.get("choices") or [{}])[0].get("delta", {}).get("content"):
                times.append(time.perf_counter())
            usage = chunk.get("usage") or usage
            event = (chunk.get("specula") or {}).get("event") or {}
            if event.get("kind") == "done":
                stats = event.get("stats")
        connection.close()
        return {"asked": asked, "times": times, "tokens": (usage or {}).get("completion_tokens", len(times)),
                "stats": stats}

    def close(self):
        self.process.kill()
        self.process.wait()


def run_clients(server: Server, prompts: list[str], tokens: int, delays: list[float]) -> list[dict]:
    results = [None] * len(prompts)
    start = time.perf_counter()

    def client(i):
        time.sleep(max(0.0, start + delays[i] - time.perf_counter()))
        results[i] = server.stream([{"role": "user", "content": prompts[i]}], tokens)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(prompts))]
    [t.start() for t in threads]
    [t.join() for t in threads]
    return results


def percentile(values, q):
    values = sorted(values)
    if not values:
        return None
    return values[min(len(values) - 1, round(q / 100 * (len(values) - 1)))]


def summarize(results: list[dict], watched: list[int] | None = None) -> dict:
    first_asked = min(r["asked"] for r in results)
    last = max(r["times"][-1] for r in results if r["times"])
    tokens = sum(r["tokens"] for r in results)
    ttft = [(r["times"][0] - r["asked"]) * 1e3 for r in results if r["times"]]
    tpot = [(r["times"][-1] - r["times"][0]) * 1e3 / (len(r["times"]) - 1) for r in results if len(r["times"]) > 1]
    watched = range(len(results)) if watched is None else watched
    gaps = [max((b - a for a, b in zip(results[i]["times"], results[i]["times"][1:])), default=0) * 1e3
            for i in watched]
    spec = [r["stats"]["speculative"] for r in results if r.get("stats") and r["stats"].get("speculative")]
    out = {
        "clients": len(results),
        "tokens": tokens,
        "aggregate_tps": round(tokens / (last - first_asked), 2),
        "ttft_ms": {"p50": round(percentile(ttft, 50), 1), "p95": round(percentile(ttft, 95), 1)},
        "tpot_ms": {"p50": round(percentile(tpot, 50), 1), "p95": round(percentile(tpot, 95), 1)},
        "longest_gap_ms": round(max(gaps), 1),
    }
    if spec:
        drafted = sum(s["drafted"] for s in spec)
        accepted = sum(s["accepted"] for s in spec)
        out["acceptance"] = round(accepted / drafted, 3) if drafted else None
        out["mean_k"] = round(statistics.mean(s["k_mean"] for s in spec), 2)
    return out


def long_prompt() -> str:
    # About 1,000 tokens: the bench prompts' text, repeated, with a question after it.
    text = " ".join(p["prompt"] for p in PROMPTS)
    while len(text) < 4200:
        text += " " + text
    return text[:4200] + "\n\nSummarize the requests above in one sentence."


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--clients", default="1,2,4,8")
    ap.add_argument("--tokens", type=int, default=96)
    ap.add_argument("--stagger", type=float, default=2.0)
    ap.add_argument("--engines", default="specula,specula-draft,llama,llama-draft")
    ap.add_argument("--sets", default="code,prose")
    ap.add_argument("--llama-bin", help="default: what scripts/llama-cpp.sh --server built for this CPU")
    ap.add_argument("--out", default="bench/concurrency.json")
    args = ap.parse_args()
    engines = args.engines.split(",")
    llama_bin = None
    if any(e.startswith("llama") for e in engines):
        llama_bin = Path(args.llama_bin) if args.llama_bin else Path(subprocess.run(
            ["scripts/llama-cpp.sh", "--server"], cwd=ROOT, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1])
    clients = [int(c) for c in args.clients.split(",")]
    report = {"command": "scripts/bench-concurrency.py " + " ".join(
                  f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if v is not None and k != "out"),
              "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "cpu": cpu(),
              "parallel": args.parallel, "tokens": args.tokens, "runs": []}
    for engine in engines:
        server = Server(engine, args.parallel, llama_bin)
        try:
            for kind in args.sets.split(","):
                prompts = [p["prompt"] for p in PROMPTS if p["kind"] == kind]
                for c in clients:
                    chosen = [prompts[i % len(prompts)] for i in range(c)]
                    result = summarize(run_clients(server, chosen, args.tokens, [0.0] * c))
                    report["runs"].append({"engine": engine, "set": kind, "arrival": "together", **result})
                    print(json.dumps(report["runs"][-1]), flush=True)
                c = max(clients)
                chosen = [prompts[i % len(prompts)] for i in range(c)]
                result = summarize(run_clients(server, chosen, args.tokens, [i * args.stagger for i in range(c)]))
                report["runs"].append({"engine": engine, "set": kind, "arrival": f"every {args.stagger:g} s", **result})
                print(json.dumps(report["runs"][-1]), flush=True)
            # A long prompt beside three decoding clients: their longest gap between tokens.
            code = [p["prompt"] for p in PROMPTS if p["kind"] == "code"]
            results = run_clients(server, code[:3] + [long_prompt()], args.tokens * 2, [0.0, 0.0, 0.0, 2.0])
            result = summarize(results, watched=[0, 1, 2])
            report["runs"].append({"engine": engine, "set": "code", "arrival": "long prompt beside 3", **result})
            print(json.dumps(report["runs"][-1]), flush=True)
        finally:
            server.close()
    out = ROOT / args.out
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
