#!/usr/bin/env python3
"""Speculation across a tool turn: the answer a model writes after a tool result, drafted or
not, on the 1.5B/0.5B Qwen2.5-Coder pair (bench/tools.json).

Each task asks the model to read a file through an MCP tool (tests/mcp/files_server.py, the
official Python SDK) and then answer from it: show the config with one value changed, say
what is new in the notes. `specula generate --mcp-config ...
--allow-tools --json`, greedy, once with the draft model and prompt lookup (`--drafter auto`)
and once plain (`--drafter none`), alternating which goes first. The figures are of the
answer's round (the one after the result): its tokens a second, the drafts accepted, and
whether the two answers are the same tokens (the promise holds across tool turns too). A
system prompt asks the model to answer from the result rather than call again.

    scripts/bench-tools.py [--rounds 2] [--max-tokens 256] [--out bench/tools.json]
"""
import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("bench_vs_llama", ROOT / "scripts/bench-vs-llama.py")
vs_llama = importlib.util.module_from_spec(spec)
spec.loader.exec_module(vs_llama)
MCP_PYTHON = Path.home() / ".cache/specula/mcp-venv/bin/python"

# Without it the 1.5B coder calls the tool again after its result instead of answering.
SYSTEM = ("You are a helpful assistant. Call a tool only when you need its result. Once a tool has answered, reply to "
          "the user from its result, in plain text, without calling it again.")
TASKS = {
    "edit": "Use the read_file tool to read config.json. Then show the whole file with the port changed to 9090 "
            "and nothing else changed.",
    "prose": "What is new in notes.md? Read it with the read_file tool, then answer in three short bullet points.",
}
# Not measured: asked to rewrite fib.rs or explain one of its functions after reading it, the
# 1.5B coder writes a tool call again (or calls a tool it made up) instead of answering.


def run(cli, config, task, drafter, max_tokens):
    command = [cli, "generate", "--model", vs_llama.TARGET, "--draft", vs_llama.DRAFT, "--drafter", drafter,
               "--mode", "greedy", "--max-tokens", str(max_tokens), "--mcp-config", config, "--allow-tools",
               "--json", "--system", SYSTEM, "--prompt", TASKS[task]]
    done = subprocess.run([str(c) for c in command], capture_output=True, text=True, timeout=900)
    if done.returncode:
        sys.exit(f"{task} {drafter}: exit {done.returncode}: {done.stderr[-2000:]}")
    reply = json.loads(done.stdout.strip().splitlines()[-1])
    called = [line for line in done.stderr.splitlines() if line.startswith("← read_file in")]
    again = [line for line in done.stderr.splitlines() if line.startswith("← read_file: not run")]
    stats, spec = reply["stats"], reply["stats"].get("speculative") or {}
    return {
        "called": len(called),
        "called_again": len(again),
        "tokens": [t["id"] for t in reply.get("tokens", [])] or reply["text"],
        "generated_tokens": stats["generated_tokens"],
        "prompt_tokens": stats["prompt_tokens"],
        "cached_prompt_tokens": stats["cached_prompt_tokens"],
        "tokens_per_second": round(stats["tokens_per_second"], 2),
        "acceptance_rate": spec.get("acceptance_rate"),
        "tokens_per_pass": spec.get("tokens_per_pass"),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cli", default=str(vs_llama.TARGET_DIR / "release/specula"))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--out", default=str(ROOT / "bench/tools.json"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "mcp.json"
        server = {"command": str(MCP_PYTHON), "args": [str(ROOT / "tests/mcp/files_server.py")]}
        config.write_text(json.dumps({"mcpServers": {"files": server}}))
        rows = []
        for task in TASKS:
            runs = {"auto": [], "none": []}
            for r in range(args.rounds):
                order = ["auto", "none"] if r % 2 == 0 else ["none", "auto"]
                for drafter in order:
                    runs[drafter].append(run(args.cli, config, task, drafter, args.max_tokens))
            auto, plain = runs["auto"], runs["none"]
            rate = lambda rs: statistics.median(x["tokens_per_second"] for x in rs)
            row = {
                "task": task,
                "called": all(x["called"] == 1 for x in auto + plain),
                "answered": all(x["called_again"] == 0 for x in auto + plain),
                "identical": all(a["tokens"] == plain[0]["tokens"] for a in auto + plain),
                "answer_tokens": plain[0]["generated_tokens"],
                "prompt_tokens": plain[0]["prompt_tokens"],
                "cached_prompt_tokens": plain[0]["cached_prompt_tokens"],
                "plain_tokens_per_second": rate(plain),
                "auto_tokens_per_second": rate(auto),
                "speedup": round(rate(auto) / rate(plain), 3),
                "acceptance_rate": round(statistics.median(x["acceptance_rate"] or 0 for x in auto), 3),
                "tokens_per_pass": round(statistics.median(x["tokens_per_pass"] or 0 for x in auto), 2),
                "rounds": [{k: v for k, v in x.items() if k != "tokens"} | {"drafter": d}
                           for d, xs in runs.items() for x in xs],
            }
            print(json.dumps({k: v for k, v in row.items() if k != "rounds"}), flush=True)
            rows.append(row)
    data = {"kind": "tools", "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "cpu": vs_llama.cpu(),
            "max_tokens": args.max_tokens, "rows": rows}
    Path(args.out).write_text(json.dumps(data, indent=1) + "\n")


if __name__ == "__main__":
    main()
