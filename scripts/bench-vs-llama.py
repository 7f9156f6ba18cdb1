#!/usr/bin/env python3
"""Specula beside llama.cpp, in one run on this machine, alternating the two programs:

1. llama-bench against `specula speed` on the target and the draft: prompt processing of 512
   tokens (pp512) and generation of 128 (tg128), on an empty cache and at a depth of 1,500;
2. on the bench prompts (code, prose, edit; --limit per kind), greedy, 128 tokens: plain
   decoding (llama-completion vs `specula generate --drafter none`) and speculative decoding
   (llama-speculative-simple vs `specula generate --k auto`, and lookup for the edit set).

Both read the same GGUF files, use 2 threads, and see the same prompt tokens (the ChatML text
is given raw to both). Writes bench/vs-llama.json (the CPU and its flags included) and prints
the table with the ratios. llama.cpp is built by scripts/llama-cpp.sh (about 10 minutes once).

    scripts/bench-vs-llama.py [--limit 5] [--rounds 3] [--out bench/vs-llama.json]
    scripts/bench-vs-llama.py --speed-only --rounds 2     # step 1 alone -> bench/speed-vs-llama.json
    scripts/bench-vs-llama.py --prompts-only --limit 5     # step 2 alone -> bench/vs-llama.json
    scripts/bench-vs-llama.py --drafters --limit 3 --rounds 3  # drafters -> bench/drafters-vs-llama.json

--drafters: every set (code, prose, edit and the multi-turn revision set), greedy, per prompt
in turn: Specula plain and auto (`specula generate --drafter none` and `--drafter auto`: the
draft model, with free copies where the reply repeats its context), and llama.cpp's best
draftless and draft modes, each a `llama-server` started once for the run (and one plain, for
reference): `--spec-type ngram-mod` (a rolling-hash n-gram pool shared across requests; the servers start afresh each
round, so that the pool never holds the same prompt's reply from the round before) and `-md DRAFT --spec-type
draft-simple`. Rates are decode rates (llama-server's `timings.predicted_per_second`, Specula's
tokens over decode time); the ratios are over Specula's plain rate in the same round.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET_DIR = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
MODELS = Path(os.environ.get("SPECULA_MODELS_DIR", Path.home() / ".cache/specula/models"))
TARGET = MODELS / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
DRAFT = MODELS / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
THREADS = "2"


def run(cmd, **kw):
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, check=True, **kw)


def cpu():
    info = Path("/proc/cpuinfo").read_text()
    model = re.search(r"model name\s*:\s*(.*)", info)
    flags = re.search(r"flags\s*:\s*(.*)", info)
    wanted = ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx_vnni", "avx512_bf16")
    have = [f for f in (flags.group(1).split() if flags else []) if f in wanted]
    return {"model": model.group(1).strip() if model else "?", "flags": have, "cores": os.cpu_count()}


def prompt_tokens(depth):
    """At a depth the prompt is not measured: what a long context slows is decoding (and the
    1,500 tokens before each measurement already cost a prefill apiece)."""
    return "0" if depth else "512"


def llama_bench(bin_dir, model, depth):
    out = run([bin_dir / "llama-bench", "-m", model, "-p", prompt_tokens(depth), "-n", "128", "-d", str(depth),
               "-t", THREADS, "-r", "3", "-o", "json"]).stdout
    return {("pp512" if r["n_prompt"] else "tg128"): r["avg_ts"] for r in json.loads(out)}


def specula_speed(specula, model, depth):
    out = TARGET_DIR / "speed.json"
    run([specula, "speed", "--model", model, "--pp", prompt_tokens(depth), "--tg", "128", "--depth", str(depth),
         "--repeat", "3", "--json", out])
    return {r["test"].split(" ")[0]: r["tokens_per_second"] for r in json.loads(out.read_text())["results"]}


def speed_rounds(specula, bin_dir, rounds):
    """llama-bench and `specula speed` on each model and depth, alternating which goes first
    each round: one row per (round, model, depth) with both figures and their ratio."""
    rows = []
    for r in range(rounds):
        for model in (TARGET, DRAFT):
            for depth in (0, 1500):
                order = [("specula", specula_speed, specula), ("llama.cpp", llama_bench, bin_dir)]
                got = {who: fn(arg, model, depth) for who, fn, arg in (order if r % 2 == 0 else order[::-1])}
                row = {"round": r + 1, "model": model.stem, "depth": depth, "llama_cpp": got["llama.cpp"],
                       "specula": got["specula"],
                       "ratio": {t: round(got["specula"][t] / got["llama.cpp"][t], 3) for t in got["specula"]}}
                print(json.dumps(row), flush=True)
                rows.append(row)
    return rows


def chatml(user, history=()):
    system = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
    turns = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in history)
    return f"<|im_start|>system\n{system}<|im_end|>\n{turns}<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"


class LlamaServer:
    """A llama-server on a free port, for one speculative mode; raw prompts via /completion."""

    def __init__(self, bin_dir, *mode):
        import socket
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.process = subprocess.Popen([str(bin_dir / "llama-server"), "-m", str(TARGET), "-t", THREADS, "-c", "4096",
                                         "--port", str(self.port), *map(str, mode)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(600):
            try:
                self.complete("Hi", 1)
                return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"llama-server {mode} did not start")

    def complete(self, prompt, tokens):
        import urllib.request
        body = json.dumps({"prompt": prompt, "n_predict": tokens, "temperature": 0, "cache_prompt": False}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}/completion", body, {"content-type": "application/json"})
        with urllib.request.urlopen(req, timeout=600) as r:
            return json.loads(r.read())

    def rate(self, prompt, tokens):
        """Decode rate and acceptance of one greedy reply."""
        t = self.complete(prompt, tokens)["timings"]
        accept = t["draft_n_accepted"] / t["draft_n"] if t.get("draft_n") else None
        return t["predicted_per_second"], accept

    def close(self):
        self.process.kill()
        self.process.wait()


def llama_servers(bin_dir):
    return {"llama_plain": LlamaServer(bin_dir),
            "llama_ngram_mod": LlamaServer(bin_dir, "--spec-type", "ngram-mod"),
            "llama_draft": LlamaServer(bin_dir, "-md", DRAFT, "--spec-type", "draft-simple", "--spec-draft-n-max", "16",
                                       "--spec-draft-p-min", "0.75")}


def drafters_run(specula, bin_dir, limit, rounds, tokens):
    """Specula plain and auto beside llama-server's ngram-mod and draft modes, prompt by prompt.
    The servers start afresh each round: ngram-mod's pool, shared across requests, would
    otherwise hold the very replies of the round before and copy them whole."""
    prompts = json.loads((ROOT / "crates/cli/prompts/bench.json").read_text())
    taken, rows, servers = {}, [], {}
    try:
        for r in range(rounds):
            for server in servers.values():
                server.close()
            servers = llama_servers(bin_dir)
            taken.clear()
            for p in prompts:
                taken[p["kind"]] = taken.get(p["kind"], 0) + 1
                if taken[p["kind"]] > limit:
                    continue
                text = chatml(p["prompt"], p.get("history", []))
                prompt_file = TARGET_DIR / "bench-prompt.txt"
                prompt_file.write_text(text)
                row = {"round": r + 1, "kind": p["kind"], "prompt": p["prompt"][:60]}
                plain, plain_ids, _ = specula_generate(specula, prompt_file, tokens, "--drafter", "none")
                auto, auto_ids, auto_accept = specula_generate(specula, prompt_file, tokens, "--drafter", "auto", "--k", "auto")
                row.update(specula_plain=plain, specula_auto=auto, specula_auto_accept=auto_accept, identical=plain_ids == auto_ids)
                for name, server in servers.items():
                    row[name], row[f"{name}_accept"] = server.rate(text, tokens)
                rows.append(row)
                print(json.dumps(row), flush=True)
    finally:
        for server in servers.values():
            server.close()
    summary = {}
    for kind in dict.fromkeys(r["kind"] for r in rows):
        mine = [r for r in rows if r["kind"] == kind]
        ratio = lambda key: statistics.median(r[key] / r["specula_plain"] for r in mine if r.get(key))
        summary[kind] = {"auto_vs_plain": ratio("specula_auto"), "llama_plain_vs_plain": ratio("llama_plain"),
                         "llama_ngram_mod_vs_plain": ratio("llama_ngram_mod"),
                         "llama_draft_vs_plain": ratio("llama_draft"),
                         "auto_vs_llama_best": statistics.median(
                             r["specula_auto"] / max(r["llama_ngram_mod"], r["llama_draft"]) for r in mine),
                         "identical": f"{sum(r['identical'] for r in mine)}/{len(mine)}",
                         "min_auto_vs_plain": min(r["specula_auto"] / r["specula_plain"] for r in mine)}
    return rows, summary


def llama_plain(bin_dir, prompt, tokens):
    err = run([bin_dir / "llama-completion", "-m", TARGET, "-p", prompt, "-n", str(tokens), "--temp", "0",
               "-t", THREADS, "-no-cnv", "--no-display-prompt"], timeout=600).stderr
    m = re.search(r"eval time =\s*[\d.]+ ms /\s*(\d+) runs\s*\(\s*[\d.]+ ms per token,\s*([\d.]+) tokens per second", err)
    return float(m.group(2)) if m else None


def llama_speculative(bin_dir, prompt, tokens):
    err = run([bin_dir / "llama-speculative-simple", "-m", TARGET, "-md", DRAFT, "-p", prompt, "-n", str(tokens),
               "--temp", "0", "-t", THREADS, "--spec-type", "draft-simple", "--spec-draft-n-max", "16",
               "--spec-draft-p-min", "0.75"], timeout=600).stderr
    m = re.search(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds, speed:\s+([\d.]+) t/s", err)
    accept = re.search(r"accept\s+=\s+([\d.]+)%", err)
    return (float(m.group(3)) if m else None), (float(accept.group(1)) / 100 if accept else None)


def specula_generate(specula, prompt_file, tokens, *extra):
    out = run([specula, "generate", "--model", TARGET, "--draft", DRAFT, "--raw", "--prompt-file", prompt_file,
               "--mode", "greedy", "--max-tokens", str(tokens), "--device", "cpu", "--json", *extra], timeout=600).stdout
    g = json.loads(out)
    spec = g["stats"].get("speculative") or {}
    return g["stats"]["tokens_per_second"], [t["id"] for t in g["tokens"]], spec.get("acceptance_rate")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--limit", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--out", default=str(ROOT / "bench" / "vs-llama.json"))
    ap.add_argument("--speed-only", action="store_true",
                    help="only llama-bench against specula speed, written to bench/speed-vs-llama.json")
    ap.add_argument("--drafters", action="store_true",
                    help="Specula plain and auto beside llama-server's ngram-mod and draft modes on every set, "
                         "written to bench/drafters-vs-llama.json")
    ap.add_argument("--prompts-only", action="store_true",
                    help="only the bench prompts, plain and speculative (step 2), written to --out")
    args = ap.parse_args()

    # llama-server's build carries llama-bench too: --speed-only needs nothing else.
    server = args.drafters or args.speed_only
    bin_dir = Path(run([ROOT / "scripts" / "llama-cpp.sh"] + (["--server"] if server else [])).stdout.strip())
    # What llama.cpp build every figure below stands beside: version, CPU, flags, cmake options.
    llama_build = json.loads((bin_dir / "build-info.json").read_text())
    run(["cargo", "build", "--quiet", "--release", "-p", "specula-cli"], cwd=ROOT)
    specula = TARGET_DIR / "release" / "specula"
    if args.drafters:
        rows, summary = drafters_run(specula, bin_dir, args.limit, args.rounds, args.tokens)
        report = {"command": f"scripts/bench-vs-llama.py --drafters --limit {args.limit} --rounds {args.rounds} --tokens {args.tokens}",
                  "cpu": cpu(), "date": time.strftime("%Y-%m-%d %H:%M"), "threads": int(THREADS), "tokens": args.tokens,
                  "llama_cpp": llama_build,
                  "drafter_rows": rows, "summary": summary}
        (ROOT / "bench" / "drafters-vs-llama.json").write_text(json.dumps(report, indent=2) + "\n")
        print(json.dumps(summary, indent=2))
        return 0
    if args.speed_only:
        report = {"command": f"scripts/bench-vs-llama.py --speed-only --rounds {args.rounds}", "cpu": cpu(),
                  "llama_cpp": llama_build,
                  "date": time.strftime("%Y-%m-%d %H:%M"), "rounds": speed_rounds(specula, bin_dir, args.rounds)}
        (ROOT / "bench" / "speed-vs-llama.json").write_text(json.dumps(report, indent=2) + "\n")
        return 0
    command = f"scripts/bench-vs-llama.py{' --prompts-only' if args.prompts_only else ''} --limit {args.limit} --tokens {args.tokens}"
    report = {"command": command, "cpu": cpu(), "date": time.strftime("%Y-%m-%d %H:%M"), "threads": int(THREADS),
              "llama_cpp": llama_build,
              "tokens": args.tokens, "speed": [], "prompts": []}

    # 1. llama-bench vs specula speed, alternating which goes first each round.
    if not args.prompts_only:
        report["speed"] = speed_rounds(specula, bin_dir, args.rounds)

    # 2. The bench prompts, plain and speculative, each program in turn.
    prompts = json.loads((ROOT / "crates/cli/prompts/bench.json").read_text())
    taken = {}
    for i, p in enumerate(prompts):
        taken[p["kind"]] = taken.get(p["kind"], 0) + 1
        if taken[p["kind"]] > args.limit:
            continue
        text = chatml(p["prompt"])
        prompt_file = TARGET_DIR / "bench-prompt.txt"
        prompt_file.write_text(text)
        row = {"kind": p["kind"], "prompt": p["prompt"][:60]}
        plain_tps, plain_ids, _ = specula_generate(specula, prompt_file, args.tokens, "--drafter", "none")
        row["llama_plain"] = llama_plain(bin_dir, text, args.tokens)
        spec_tps, spec_ids, accept = specula_generate(specula, prompt_file, args.tokens, "--k", "auto")
        row["llama_speculative"], row["llama_accept"] = llama_speculative(bin_dir, text, args.tokens)
        row.update(specula_plain=plain_tps, specula_auto=spec_tps, specula_accept=accept, identical=plain_ids == spec_ids)
        if p["kind"] == "edit":
            lookup_tps, lookup_ids, _ = specula_generate(specula, prompt_file, args.tokens, "--drafter", "lookup", "--k", "auto")
            row.update(specula_lookup=lookup_tps, lookup_identical=plain_ids == lookup_ids)
        report["prompts"].append(row)
        print(json.dumps(row), flush=True)

    summary = {}
    for kind in sorted({r["kind"] for r in report["prompts"]}):
        rows = [r for r in report["prompts"] if r["kind"] == kind]
        med = lambda key: statistics.median(r[key] for r in rows if r.get(key)) if any(r.get(key) for r in rows) else None
        s = {key: med(key) for key in ("specula_plain", "specula_auto", "specula_lookup", "llama_plain", "llama_speculative")}
        s["auto_vs_plain"] = s["specula_auto"] / s["specula_plain"]
        if s["specula_lookup"]:
            s["lookup_vs_plain"] = s["specula_lookup"] / s["specula_plain"]
        if s["llama_speculative"]:
            s["auto_vs_llama_speculative"] = s["specula_auto"] / s["llama_speculative"]
        s["identical"] = f"{sum(r['identical'] for r in rows)}/{len(rows)}"
        if any("lookup_identical" in r for r in rows):
            s["lookup_identical"] = f"{sum(r.get('lookup_identical', False) for r in rows)}/{len(rows)}"
        summary[kind] = s
    report["summary"] = summary
    Path(args.out).write_text(json.dumps(report, indent=2))
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    sys.exit(main())
