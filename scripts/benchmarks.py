#!/usr/bin/env python3
"""BENCHMARKS.md and the README's benchmark summary, generated from bench/*.json.

A figure lives in one place: the JSON a benchmark command wrote. This script renders every
file into BENCHMARKS.md (with the command that made it, and the CPU and date where the file
records them) and rewrites the summary between the
README's `benchmarks:begin`/`benchmarks:end` markers. `--check` changes nothing and exits 1
when either is stale (scripts/test.sh runs it).

    python3 scripts/benchmarks.py            # regenerate
    python3 scripts/benchmarks.py --check    # CI
"""

import json
from datetime import datetime, timezone
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
M = "M=~/.cache/specula/models; T=$M/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf; D=$M/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"

# Each file: its title, the command that writes it, and what it is for. Files not listed here
# are still rendered, under their own name, so a new bench file is never left out.
SECTIONS = {
    "drafters-auto.json": (
        "Drafters combined step by step (auto: the draft model, and free copies where the reply repeats its context)",
        f"{M}; target/release/specula bench --model $T --draft $D --drafter auto --k auto --max-tokens 128 --repeat 3 --json bench/drafters-auto.json",
        "Every prompt of every built-in set (10 code, 10 prose, 10 edit, and 6 revision turns: a second turn that asks to "
        "change the code or text of the first), greedy, plain and speculative in turn for each prompt, three rounds; each "
        "speculative reply is checked identical to its plain one. The set medians of each round: code 1.45/1.48/1.42x, "
        "prose 1.15/1.19/1.25x, edit 1.71/1.62/1.64x, revision 1.64/1.79/1.78x; the lowest single reply 0.95x (prose; 5 of "
        "90 prose replies under 1.0x). `drafters-model.json` is the draft model alone (`--drafter model --limit 3`, one round).",
    ),
    "drafters-auto-sampled.json": (
        "The combined drafter on prose, sampled at temperature 0.8",
        f"{M}; target/release/specula bench --model $T --draft $D --drafter auto --k auto --max-tokens 128 --repeat 3 --kind prose --mode reproducible --temperature 0.8 --json bench/drafters-auto-sampled.json",
        "Reproducible sampling (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05, noise fixed by seed 42): the speculative "
        "reply is the plain one token for token, so each run is also an identity check. Every prose prompt, three rounds.",
    ),
    "drafters-auto-busy.json": (
        "The combined drafter beside a busy core",
        f"{M}; yes > /dev/null & target/release/specula bench --model $T --draft $D --drafter auto --k auto --max-tokens 128 --repeat 3 --json bench/drafters-auto-busy.json; kill $!",
        "As `drafters-auto.json` while `yes` holds one of the two cores (a desktop with a compile running): plain and "
        "speculative replies both run beside it, and no set may fall below plain. Each round's set ratio (all its tokens over "
        "all its time): code 1.33/1.36/1.10x, prose 1.10/1.05/1.00x, edit 1.40/1.39/1.59x, revision 1.50/1.71/1.64x; 12 of "
        "108 single replies under 1.0x, the lowest 0.60x (a 17-token haiku, where the draft's prompt prefill is most of the "
        "reply's extra work).",
    ),
    "drafters-auto-avx2.json": (
        "The combined drafter on the AVX2 kernels (the stand-in for an AVX2-only host)",
        f"{M}; SPECULA_KERNEL=avx2 target/release/specula bench --model $T --draft $D --drafter auto --k auto --max-tokens 128 --repeat 3 --json bench/drafters-auto-avx2.json",
        "No AVX2-only host was lent to this work, so this runs the AVX2 kernels (`vpmaddubsw` + `vpmaddwd`, no VNNI) on "
        "the AVX-512 host: a wide pass costs what it costs on an AVX2 CPU's arithmetic, while the memory is this host's. "
        "Every prompt, three rounds. Each round's set ratio: code 1.06/1.07/1.02x, prose 1.09/1.08/1.06x, edit "
        "1.35/1.37/1.38x, revision 1.40/1.51/1.49x; 25 of 108 single replies under 1.0x, the lowest 0.75x. A pass over two "
        "tokens costs 1.15 of one here and the draft step 11.4 ms against 22.8 ms for the target's: at the draft's "
        "acceptance on code no k repays its wider pass by much, and auto k mostly decodes plain (1.34 tokens a pass).",
    ),
    "ceiling.json": (
        "What speculation can give at most with this pair on this CPU, and whether a small tree would raise it",
        f"{M}; cargo run --release -p specula-engine --example ceiling -- $T $D bench/ceiling.json 10 128",
        "From the draft step and the target's pass over n = 1..17 tokens measured on this CPU, and the draft's agreement "
        "with the target's own greedy replies (teacher-forced; α: its first choice is the target's token, β: its second "
        "is, when the first is not). `chain`: the expected speedup of the best fixed k; `chain + sibling`: the same with "
        "the draft's second choice verified beside its first (a two-candidate tree, one more row); `hindsight`: each "
        "reply decoded by an oracle that knows the target's tokens and picks each step's best of plain, up to 8 model "
        "drafts and up to 16 copies from the context, with catch-ups and overheads free: no chooser of these drafts "
        "does better. `chain stopping under τ`: the same replies decoded by chains of up to k drafts that stop after a "
        "draft the draft model gave under τ (τ from 0 to 0.8, the best shown). All over plain.",
    ),
    "drafters-model.json": (
        "The draft model alone, the same sets (for comparison with the combined drafter)",
        f"{M}; target/release/specula bench --model $T --draft $D --drafter model --k auto --max-tokens 128 --limit 3 --json bench/drafters-model.json",
        "",
    ),
    "batch-pass.json": (
        "Several sequences in one pass (the floor of serving callers at once)",
        f"{M}; target/release/specula speed --model $T --pp 0 --tg 32 --depth 256 --batch 1,2,4,8 --repeat 3 --json bench/batch-pass.json",
        "N sequences, each with its own 256 tokens read, generating 32 tokens each: one target pass a step over their N rows "
        "(`Decoder::forward_batch`), against the same N generated in turn, one pass each (how the service serves N callers "
        "today). Aggregate tokens per second, medians of 3 rounds in alternating order; every sequence's tokens must agree.",
    ),
    "concurrency.json": (
        "Many clients at once: `specula serve --parallel N` beside llama-server `-np N`",
        "scripts/bench-concurrency.py --parallel 4 --clients 1,2,4,8 --tokens 96",
        "Each engine started once with N lanes (Specula) or slots (llama-server, `-c` 4096 a slot, prompt cache off), on "
        "the same GGUF files, plain and with the 0.5B draft (Specula `--drafter auto`; llama-server `-md` with "
        "`--spec-type draft-simple`); C clients each stream one greedy chat reply of the set's prompts (a different "
        "prompt each), all at once, or arriving one every 2 s, and a 1,000-token prompt arriving beside three decoding "
        "clients (its row: the three's longest gap between tokens). Aggregate: all tokens over the wall time from the "
        "first request to the last token; `x 1` is over the same engine's one client, same set; TTFT and time per output "
        "token are per client (p50/p95); k and acceptance are Specula's own stats of the replies.",
    ),
    "history.json": (
        "The history pool's cost (the auto drafter's copies from earlier conversations)",
        f"{M}; cargo run --release -p specula-engine --example history_cost -- $T bench/history.json 1000",
        "1,000 stored conversations of 1,500 tokens each, every one with its own 3-token keys (the index's worst case).",
    ),
    "imports.json": (
        "Chat imports: hostile files, and memory on a 100 MB export",
        "python3 scripts/hostile-imports.py --cli target/release/specula   # each case into an empty history with `specula chats import`",
        "Each file through `specula chats import` in a fresh data folder; `peak memory` is the import process's peak resident "
        "set (ru_maxrss). Imports stream: a conversation is written as it is read, inside one transaction that any refusal "
        "rolls back, so `chats after` is 0 for every refused file. Texts and message counts are bounded as they are read.",
    ),
    "app.json": (
        "The app itself, beside the engine, in one run",
        "scripts/bench-app.sh --tokens 256,1500 --kinds code,prose --repeat 8,4   # the release app under Xvfb, driven through "
        "tauri-driver as a user drives it (Settings, a new chat, the prompt typed, Send), its figures read from its "
        "history database; specula generate with the same prompt, seed and settings in turn; medians of the rounds",
        "Reproducible mode with a pinned seed, so that plain and speculative replies are the same tokens. App and CLI "
        "rates are the engine's decode rate (tokens over decode time); the displayed speedup is what the app showed "
        "and stored; the measured one is the app's speculative rate over its own plain rate. CPU per token is what "
        "the webview process and the X server spent from Send to the reply's end (in brackets: over the whole "
        "exchange, the prompt typed into the window included).",
    ),
    "remote.json": (
        "A remote engine through the app, beside the same remote called directly, in one run",
        "scripts/bench-remote.sh --engine specula|llama --tokens 256 --repeat 5   # one run per row",
        "The remote runs on this machine (`specula serve` on the Qwen2.5-Coder pair, or llama-server with the same pair and "
        "`--spec-type draft-simple`); the app has no model of its own and chats with the remote's model, chosen in "
        "Settings. Each round asks the same greedy reply directly (a plain HTTP client) and in the app's window (the prompt "
        "set in the composer, Send), in alternating order. Time to first token: directly, at the HTTP client; in the app, at its remote "
        "client (stored with the reply) and in the window (Send to the first token drawn). Decode rate: tokens after "
        "the first over the time from the first to the last. Medians of the rounds. The remote shares the two cores "
        "with the app, so the app's own CPU can slow it, as it slows a local engine: a remote on another machine "
        "would fare no worse.",
    ),
    "context.json": (
        "Chats taken in turn: the first token when a server goes back to a chat",
        "scripts/bench-context.py --chats 3 --rounds 4   # specula serve (with and without --cache-ram 0) and llama-server, "
        "the same pair, one run",
        "Chats (as many as the table's turns name, A, B, C), each opening with a 1,400-word system note, asked in turn "
        "(each turn adds the reply before it and a new question), greedy, 16 tokens a reply, context 8192. Each chat's "
        "first turn reads its note cold; from then on, a server that kept the other chats' caches resumes each. Time "
        "from the request to the first streamed text at a client on this machine; cold is the median of the chats' "
        "first turns, warm of the rest.",
    ),
    "depth.json": (
        "Long contexts: memory with the context filled and decoding at depth, beside llama.cpp in one run",
        "scripts/bench-depth.py --depths 4096,8192,16384 --tg 32   # specula speed --pp 0 --tg 32 --depth D --kv f16|q8_0|f32 "
        "--repeat 1 against llama-bench -p 0 -n 32 -d D -t 2 -r 1 [-ctk q8_0 -ctv q8_0 -fa 1], alternating",
        "The 1.5B target, 2 threads. At each depth (tokens already in the cache) each program reads the depth's tokens "
        "and then generates 32 tokens one pass each; the rate is of those 32. Peak resident size is the process's "
        "ru_maxrss: the weights, the cache filled to the depth and the last pass's scratch. Both programs size their "
        "cache to the depth and the tokens asked; llama.cpp keeps its defaults (f16 cache, the file mapped and its "
        "weights repacked for its CPU kernels), and its q8_0 cache needs its flash attention. Ratios are Specula over "
        "llama.cpp with the same cache format.",
    ),
    "tools.json": (
        "Speculation across a tool turn: the answer after a tool result",
        "scripts/bench-tools.py --rounds 2 --max-tokens 256   # specula generate --mcp-config (tests/mcp/files_server.py) "
        "--allow-tools --json --mode greedy, --drafter auto against none, alternating",
        "The Qwen2.5-Coder pair, greedy. The model reads a file through an MCP tool and answers from it; the figures "
        "are of the answer's round, after the result (median of the rounds). Identical: the drafted answers are the "
        "plain answer's tokens.",
    ),
    "depth-q8.json": (
        "Long contexts with q8_0 keys and values: Specula's and llama.cpp's, beside f16, in one run",
        "scripts/bench-depth.py --depths 4096,8192 --tg 32 --out bench/depth-q8.json   # the same runs as the section "
        "above, with --kv q8_0 and llama-bench -ctk q8_0 -ctv q8_0 -fa 1 added",
        "As above. q8_0 stores llama.cpp's blocks (an f16 scale and 32 signed bytes: 17 KiB a position of the 1.5B "
        "target against f16's 28 KiB); a reply is exact relative to the target run with the same format. The 16,384 "
        "row is q8_0 alone, run later on another host (its note): each of a 16k row's five runs takes 10-12 minutes "
        "on two cores. It was added with --depths 16384 --engines \"specula q8_0\" --append NOTE.",
    ),
    "depth-32k.json": (
        "Long contexts at 32k: memory with the whole context filled, per format of keys and values",
        "scripts/bench-depth.py --depths 32735 --tg 32 --engines \"specula f16,specula q8_0\" --out bench/depth-32k.json",
        "As above, Specula alone: 32,735 tokens read, then 32 generated, which fills the model's trained context "
        "(32,768). The f16 and q8_0 runs took over half an hour each, most of it the prefill; f32 was added later "
        "from another host (its note) with --engines \"specula f32\" --append NOTE. llama.cpp is not in this run: its runs at this depth take more than an hour each on two cores. "
        "At 16,384 llama.cpp's f16 cache took 2,706 MiB, more than Specula's f16 with twice the tokens here.",
    ),
    "context-many.json": (
        "Many chats under the prompt cache's cap, and the first turn after a restart",
        "scripts/bench-context.py --many 50 --cache-ram 256 --out bench/context-many.json   # --restart-only: the restart alone, again",
        "One `specula serve --cache-ram 256` (the Qwen2.5-Coder pair, context 8192, greedy, 16 tokens a reply): 50 "
        "chats, each a 300-word system note and a question, asked in turn, then the last 5 again. Resident size "
        "(VmRSS) after each reply against the size once loaded: the cache keeps its snapshots within the cap, "
        "evicting the least recently used. Restart: chat A with a 1,400-word note asked once on a server with "
        "`--cache-dir`, the server stopped and started again, A's next turn: its first token against the cold one's.",
    ),
    "drafters-vs-llama.json": (
        "Drafters beside llama.cpp's draftless and draft modes, on every set, in one run",
        "scripts/bench-vs-llama.py --drafters --limit 3 --rounds 3   # per prompt, in turn: specula generate --drafter none, "
        "specula generate --drafter auto --k auto, llama-server (plain), llama-server --spec-type ngram-mod, llama-server -md DRAFT "
        "--spec-type draft-simple --spec-draft-n-max 16 --spec-draft-p-min 0.75",
        "Greedy, the same ChatML prompt text (the revision set's earlier turns included) and GGUF files, 2 threads; decode "
        "rates over Specula's plain rate in the same round, medians per set, and the lowest single reply. llama-server "
        "keeps its ngram-mod pool across the requests of a round (its design; it starts afresh each round, so that it "
        "never holds the same prompt's reply); each `specula generate` starts with no history.",
    ),
    "speed-vs-llama.json": (
        "Beside llama.cpp, in one run",
        "scripts/bench-vs-llama.py --speed-only --rounds 2   # llama-bench -m MODEL -p 512 -n 128 [-d 1500 -p 0] -t 2 -r 3 "
        "against specula speed --model MODEL --pp 512 --tg 128 [--depth 1500 --pp 0] --repeat 3, alternating",
        "Prompt processing of 512 tokens (pp512) and generation of 128 (tg128), in tokens per second, on an empty "
        "context and after 1,500 tokens (depth; generation only), the two programs alternating on the same GGUF files "
        "and threads. Ratios are Specula over llama.cpp.",
    ),
    "vs-llama.json": (
        "Beside llama.cpp on the bench prompts, plain and speculative, in one run",
        "scripts/bench-vs-llama.py --prompts-only --limit 5   # per prompt, in turn: specula generate --drafter none, "
        "llama-completion, specula generate --k auto, llama-speculative-simple (--spec-type draft-simple "
        "--spec-draft-n-max 16 --spec-draft-p-min 0.75: drafts up to 16 tokens while the draft is confident), and "
        "specula generate --drafter lookup --k auto on the edit set",
        "Greedy decoding of the same ChatML prompt tokens with the same GGUF files and 2 threads, in generated tokens per "
        "second (medians per set). Specula's auto k chooses its draft length each step from measured costs.",
    ),
    "kernels-model.json": (
        "Speculative vs plain, model draft (after the multi-row kernels)",
        f"{M}; target/release/specula bench --model $T --draft $D --k 2,4,auto --limit 3 --json bench/kernels-model.json",
        "Each prompt decoded plain and speculative back to back (greedy, 64 tokens); `identical` counts "
        "speculative replies equal to plain, token for token.",
    ),
    "kernels-lookup.json": (
        "Speculative vs plain, prompt lookup on edits (after the multi-row kernels)",
        f"{M}; target/release/specula bench --model $T --drafter lookup --k 4,8,auto --kind edit --limit 3 --json bench/kernels-lookup.json",
        "The drafter copies n-grams from the prompt: no draft model.",
    ),
    "sweep-code.json": (
        "Sweep: 10 code prompts x 128 tokens x 5 settings of k (before the kernels)",
        f"{M}; target/release/specula bench --model $T --draft $D --k 1,2,4,8,auto --max-tokens 128 --kind code --json bench/sweep-code.json",
        "A documented command, not a CI step (about 25 minutes); it exits non-zero on any mismatch.",
    ),
    "sweep-prose.json": (
        "Sweep: 10 prose prompts x 128 tokens x 5 settings of k (before the kernels)",
        f"{M}; target/release/specula bench --model $T --draft $D --k 1,2,4,8,auto --max-tokens 128 --kind prose --json bench/sweep-prose.json",
        "As the code sweep, on prose.",
    ),
    "draft-vocab.json": (
        "The pruned draft head: acceptance and cost by the number of tokens kept",
        f"{M}; cargo run --release -p specula-engine --example draft_vocab -- $T $D bench/draft-vocab.json 5",
        "The draft scores only its N most frequent tokens (ranked from crates/engine/data/draft-corpus.txt, the "
        "target's own replies to prompts that are not the bench's), the special tokens and the tokens of the "
        "conversation so far; every other token gets q = 0, and the target still verifies over the whole "
        "vocabulary, so the output is unchanged. Acceptance is the draft's greedy agreement with the target's "
        "greedy replies to 5 prompts a set, teacher-forced; the draft step is the fastest of 20 at a 100-token "
        "context, and c is it over a target step's.",
    ),
    "auto.json": (
        "Auto k over every set",
        f"{M}; target/release/specula bench --model $T --draft $D --k auto --limit 5 --repeat 3 --json bench/auto.json",
        "Auto k alone, code then prose then edit prompts in one session.",
    ),
    "auto-load.json": (
        "Auto k with another process on the CPU",
        f"{M}; yes > /dev/null & target/release/specula bench --model $T --draft $D --k auto --limit 5 "
        "--repeat 3 --json bench/auto-load.json; kill $!",
        "As above while a busy process holds one of the two cores (a desktop with a compile running): plain and "
        "speculative replies both run beside it, and auto k must not lose to plain.",
    ),
    "lookup.json": (
        "Prompt lookup on edits, k 4 and auto",
        f"{M}; target/release/specula bench --model $T --drafter lookup --k 4,auto --kind edit --limit 5 --repeat 3 --json bench/lookup.json",
        "The drafter copies n-grams from the prompt: no draft model, so drafting costs nothing but the wider pass.",
    ),
    "code.json": (
        "Code, k 4 and auto (before the kernels)",
        f"{M}; target/release/specula bench --model $T --draft $D --k 4,auto --limit 3 --kind code --json bench/code.json",
        "",
    ),
    "prose.json": (
        "Prose, k 4 and auto (before the kernels)",
        f"{M}; target/release/specula bench --model $T --draft $D --k 4,auto --limit 3 --kind prose --json bench/prose.json",
        "",
    ),
}



def llama_build(build) -> str:
    """The llama.cpp build a figure stands beside: a sentence (older files), or the
    build-info.json scripts/llama-cpp.sh writes (version, compiler, ISA options)."""
    if isinstance(build, str):
        return build
    isa = " ".join(o.removeprefix("-D").removesuffix("=ON") for o in build["cmake_options"]
                   if o.startswith("-DGGML_") and o.endswith("=ON"))
    return f"llama-cpp-python {build['llama_cpp_python']}'s tree, Release, {isa}, {build['compiler']}"

def cpu_line(data: dict) -> str:
    cpu = data.get("cpu")
    if isinstance(cpu, dict):
        return f"{cpu.get('model', '?')}, {cpu.get('cores', '?')} cores, flags {' '.join(cpu.get('flags', []))}"
    if isinstance(cpu, str):
        return cpu
    return "not recorded (written before `specula bench` recorded the CPU; an AMD EPYC host with 2 cores)"


def table(header: list, rows: list) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def pct(x) -> str:
    return "" if x is None else f"{100 * x:.0f}%"


def speculative_tables(data: dict) -> str:
    parts = [
        f"Target `{Path(data['model']).name}`"
        + (f", draft `{Path(data['draft']).name}`" if data.get("draft") else "")
        + f", {data['max_tokens']} tokens per reply, {data['threads']} threads"
        + (f", each prompt decoded {data['repeat']} times each way, in turn." if data.get("repeat", 1) > 1 else "."),
        "Cost of one target pass over n tokens:",
        table(["n", "ms", "x one token"], [[c["n"], f"{c['ms']:.1f}", f"{c['ratio']:.2f}"] for c in data["forward_costs"]]),
        "Per set and k (all the set's tokens over all its time; `speedup` is speculative over plain, same prompts, same run):",
        table(
            ["set", "k", "plain tok/s", "spec tok/s", "speedup", "accepted", "tokens/pass", "k used", "identical"],
            [
                [s["kind"], s["k"], f"{s['plain_tps']:.2f}", f"{s['spec_tps']:.2f}", f"{s['speedup']:.2f}x",
                 pct(s.get("acceptance")) or "none drafted", f"{s['tokens_per_pass']:.2f}", s["k_range"], s["identical"]]
                for s in data["summary"]
            ],
        ),
    ]
    return "\n\n".join(parts)


def llama_tables(data: dict) -> str:
    def cells(r, test):
        if test not in r["specula"]:
            return ["–", "–", "–"]
        return [f"{r['llama_cpp'][test]:.1f}", f"{r['specula'][test]:.1f}", f"{r['ratio'][test]:.2f}"]

    rows = [[r["model"], r.get("depth", 0), r["round"], *cells(r, "pp512"), *cells(r, "tg128")] for r in data["rounds"]]
    header = ["model", "depth", "round", "llama.cpp pp512", "Specula pp512", "ratio", "llama.cpp tg128", "Specula tg128", "ratio"]
    return f"llama.cpp: {llama_build(data['llama_cpp'])}.\n\n" + table(header, rows)


def prompt_tables(data: dict) -> str:
    rate = lambda x: "–" if x is None else f"{x:.1f}"
    ratio = lambda x: "–" if x is None else f"{x:.2f}x"
    rows = []
    for kind, s in data["summary"].items():
        lookup = f" (lookup {rate(s.get('specula_lookup'))}, {ratio(s.get('lookup_vs_plain'))})" if s.get("specula_lookup") else ""
        rows.append([kind, rate(s["llama_plain"]), rate(s["specula_plain"]), ratio(s["specula_plain"] / s["llama_plain"] if s["llama_plain"] else None),
                     rate(s["llama_speculative"]), rate(s["specula_auto"]) + lookup, ratio(s.get("auto_vs_llama_speculative")),
                     ratio(s["auto_vs_plain"]), s["identical"] + (f" (lookup {s['lookup_identical']})" if "lookup_identical" in s else "")])
    header = ["set", "llama.cpp plain", "Specula plain", "ratio", "llama.cpp speculative", "Specula auto k", "ratio",
              "Specula auto / plain", "identical to plain"]
    return f"llama.cpp: {llama_build(data['llama_cpp'])}. {data['tokens']} tokens per reply.\n\n" + table(header, rows)


def vocab_table(data: dict) -> str:
    rows = [[f"{r['n']:,}", f"{r['draft_step_ms']:.2f}", f"{r['c']:.3f}", f"{r['acceptance_code']:.3f}",
             f"{r['acceptance_prose']:.3f}", f"{r['acceptance_edit']:.3f}"] for r in data["sizes"]]
    header = ["tokens kept", "draft step ms", "c", "acceptance code", "acceptance prose", "acceptance edit"]
    return f"Target step {data['target_step_ms']:.2f} ms.\n\n" + table(header, rows)


def batch_table(data: dict) -> str:
    rows = [[b["sequences"], f"{b['depth']:,}", b["tokens"], f"{b['in_turn_tokens_per_second']:.1f}",
             f"{b['together_tokens_per_second']:.1f}", f"{b['speedup']:.2f}x", "yes" if b["identical"] else "**no**"]
            for b in data["batch"]]
    header = ["sequences", "depth", "tokens each", "in turn tok/s", "together tok/s", "together / in turn", "identical"]
    return table(header, rows)


def history_table(data: dict) -> str:
    rows = [[f"{data['conversations']:,}", f"{data['tokens_kept']:,}", f"{data['bytes'] / 2**20:.1f} MiB (cap {data['cap_bytes'] / 2**20:.0f})",
             f"{data['bytes_per_token_kept']:.1f}", f"{data['remember_ns_per_token']:.0f} ns", f"{data['lookup_us']:.2f} µs",
             f"{data['lookups_found']:.2f}"]]
    header = ["conversations", "tokens kept", "memory", "bytes a token", "remember, a token", "lookup", "lookups that found a copy"]
    return table(header, rows)


def cpu(app: dict, process: str) -> str:
    """CPU per token from Send to the reply's end, and (in brackets) over the whole exchange,
    typing the prompt included; runs before the first figure was kept give the second alone."""
    whole = f"{app[f'{process}_cpu_ms_per_token']:.1f}"
    streaming = app.get(f"{process}_cpu_ms_per_token_streaming")
    return whole if streaming is None else f"{streaming:.1f} ({whole})"


def app_tables(data: dict) -> str:
    rows = []
    for r in data["runs"]:
        for mode in ("plain", "speculative"):
            app, cli = r[f"app_{mode}"], r[f"cli_{mode}"]
            shown = f"{app['displayed_speedup']:.2f}x" if app.get("displayed_speedup") else "–"
            measured = f"{r['app_measured_speedup']:.2f}x" if mode == "speculative" and r.get("app_measured_speedup") else ""
            rows.append([r["kind"], f"{app['tokens']} x{r.get('repeat', 1)}", mode, f"{app['tokens_per_second']:.1f}", f"{cli['tokens_per_second']:.1f}",
                         f"{r[f'app_over_cli_{mode}']:.2f}x", shown if mode == "speculative" else "–", measured,
                         cpu(app, "webview"), cpu(app, "x")])
    header = ["set", "tokens x rounds", "decoding", "app tok/s", "CLI tok/s", "app / CLI", "speedup shown", "speedup measured",
              "webview CPU ms/token", "X CPU ms/token"]
    return table(header, rows)


def remote_tables(data: dict) -> str:
    rows = []
    for r in data["runs"]:
        s = r["summary"]
        rows.append([r["engine"], f"{r['date']} · {len(r['rounds'])} rounds", f"{s['direct_ttft_ms']:.0f}", f"{s['app_ttft_ms']:.0f} (+{s['app_ttft_added_ms']:.0f})",
                     f"{s['window_ttft_ms']:.0f} (+{s['window_ttft_added_ms']:.0f})", f"{s['direct_tokens_per_second']:.1f}",
                     f"{s['app_tokens_per_second']:.1f}", f"{s['app_over_direct_rate']:.3f}x"])
    header = ["remote", "run", "TTFT direct ms", "TTFT app client ms (added)", "TTFT window ms (added)", "direct tok/s", "app tok/s", "app / direct"]
    cpus = "; ".join(dict.fromkeys(cpu_line(r) for r in data["runs"]))
    return table(header, rows) + f"\n\nCPU: {cpus}"


def context_table(data: dict) -> str:
    rows = []
    for engine, r in data["engines"].items():
        if "restart_ttft_s" in r:
            rows.append([engine, f"{r['cold_ttft_s']:.2f}", f"{r['restart_ttft_s']:.2f} (after a restart)",
                         f"{r['restart_over_cold']:.2f}", "", "A, restart, A"])
            continue
        turns = " · ".join(f"{t['chat']} {t['ttft_s']:.2f}" for t in r["turns"])
        rows.append([engine, f"{r['cold_ttft_s']:.2f}", f"{r['warm_ttft_s']:.2f}", f"{r['warm_over_cold']:.2f}",
                     str(r["turns"][-1]["prompt_tokens"]), turns])
    header = ["server", "cold TTFT s", "warm TTFT s", "warm / cold", "last prompt tokens", "each turn's TTFT s"]
    return table(header, rows)


def many_table(data: dict) -> str:
    m, r = data["many"], data["restart"]
    rows = [[str(m["chats"]), f"{m['cache_ram_mib']}", f"{m['rss_loaded_mib']:,.0f}", f"{m['rss_peak_mib']:,.0f}",
             f"{m['rss_peak_mib'] - m['rss_loaded_mib']:,.0f}", f"{m['first_visit_ttft_s']:.2f}",
             f"{m['second_visit_ttft_s']:.2f}"]]
    header = ["chats", "cap MiB", "resident once loaded MiB", "peak resident MiB", "growth MiB",
              "first visit TTFT s (median)", "again TTFT s (median)"]
    restart = table(["cold TTFT s", "after a restart TTFT s", "restart / cold"],
                    [[f"{r['cold_ttft_s']:.2f}", f"{r['restart_ttft_s']:.2f}", f"{r['restart_over_cold']:.3f}"]])
    return table(header, rows) + "\n\n" + restart


def depth_table(data: dict) -> str:
    order = ["specula f16", "specula q8_0", "specula f32", "llama.cpp f16", "llama.cpp q8_0"]
    engines = [k for k in order if any(k in r["engines"] for r in data["rows"])]
    formats = [f for f in ("f16", "q8_0") if any(f"ratio_{f}" in r for r in data["rows"])]
    # A row measured later, with only some engines, shows "—" for the others (its note says when).
    rows_of = lambda: [(f"{r['depth']:,}" + (" *" if r.get("note") else ""), r) for r in data["rows"]]

    def part(metric, unit, cell):
        ratio = {"tokens_per_second": "tokens_per_second", "peak_rss_mib": "peak_rss"}[metric]
        rows = [[depth] + [cell(r["engines"][k][metric]) if k in r["engines"] else "—" for k in engines]
                + [f"{r[f'ratio_{f}'][ratio]:.2f}" if f"ratio_{f}" in r else "—" for f in formats]
                for depth, r in rows_of()]
        header = ["depth"] + [f"{k} {unit}" for k in engines] + [f"Specula / llama.cpp, {f}" for f in formats]
        return table(header, rows)

    rate = part("tokens_per_second", "tok/s", lambda v: f"{v:.1f}")
    memory = part("peak_rss_mib", "MiB", lambda v: f"{v:,.0f}")
    text = f"Decoding at depth:\n\n{rate}\n\nPeak resident size:\n\n{memory}"
    if all("wall_s" in e for r in data["rows"] for e in r["engines"].values()):
        rows = [[depth] + [f"{r['engines'][k]['wall_s'] / 60:.1f}" if k in r["engines"] else "—" for k in engines]
                for depth, r in rows_of()]
        text += "\n\nWall minutes of a run (loading, reading the depth's tokens, then the 32):\n\n"
        text += table(["depth"] + [f"{k} min" for k in engines], rows)
    notes = [f"\\* {r['depth']:,}: {r['note']}" for _, r in rows_of() if r.get("note")]
    if notes:
        text += "\n\n" + "\n".join(notes)
    if formats:
        text += f"\n\nllama.cpp: {llama_build(data['llama_cpp'])}"
    return text


def tools_table(data: dict) -> str:
    rows = [[r["task"], str(r["answer_tokens"]), f"{r['plain_tokens_per_second']:.1f}", f"{r['auto_tokens_per_second']:.1f}",
             f"{r['speedup']:.2f}x", f"{100 * r['acceptance_rate']:.0f}%", f"{r['tokens_per_pass']:.2f}",
             "yes" if r["called"] else "no", "yes" if r.get("answered") else "no (called again)",
             "yes" if r["identical"] else "NO"] for r in data["rows"]]
    header = ["task", "answer tokens", "plain tok/s", "auto tok/s", "auto / plain", "drafts accepted", "tokens a pass",
              "tool called", "answered from the result", "identical"]
    return table(header, rows)


def drafters_llama_table(data: dict) -> str:
    x = lambda v: f"{v:.2f}x"
    rows = [[kind, x(s["auto_vs_plain"]), x(s["min_auto_vs_plain"]), x(s["llama_plain_vs_plain"]), x(s["llama_ngram_mod_vs_plain"]),
             x(s["llama_draft_vs_plain"]),
             x(s["auto_vs_llama_best"]), s["identical"]] for kind, s in data["summary"].items()]
    header = ["set", "Specula auto / plain", "lowest reply", "llama plain / Specula plain", "llama ngram-mod / Specula plain",
              "llama draft / Specula plain",
              "Specula auto / llama's best", "auto identical to plain"]
    build = f"\n\nllama.cpp: {llama_build(data['llama_cpp'])}" if data.get("llama_cpp") else ""
    return table(header, rows) + build


def stopping(row: dict) -> str:
    best = max(row.get("stopping", []), key=lambda r: r["speedup"], default=None)
    return "–" if best is None else f"τ {best['threshold']}, k {best['k']}: {best['speedup']:.2f}x"


def ceiling_table(data: dict) -> str:
    passes = ", ".join(f"{n}: {r:.2f}" for n, r in enumerate(data["pass_ratio_by_n"], 1))
    rows = [[s["kind"], s["replies"], s["positions"], f"{s['alpha']:.3f}", f"{s['beta']:.3f}", f"k {s['chain_k']}: {s['chain_speedup']:.2f}x",
             f"k {s['tree_k']}: {s['tree_speedup']:.2f}x", stopping(s), f"{s['hindsight_model']:.2f}x", f"{s['hindsight_model_and_copies']:.2f}x"]
            for s in data["sets"]]
    header = ["set", "replies", "tokens", "α", "β", "chain", "chain + sibling", "chain stopping under τ (best τ)", "hindsight, model",
              "hindsight, model + copies"]
    return (f"Draft step {data['draft_step_ms']:.2f} ms, plain pass {data['plain_pass_ms']:.2f} ms (c = {data['c']:.3f}); "
            f"a pass over n tokens over one: {passes}. Replies of up to {data['max_tokens']} tokens.\n\n" + table(header, rows))


def imports_table(data: dict) -> str:
    def size(n):
        return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 2**10:.1f} KiB"
    rows = [[c["case"], size(c["bytes"]), "imported" if c["exit"] == 0 else "refused", c["chats_after"],
             size(c["peak_rss_bytes"]), f"{c['rss_over_size']:.2f}x" if c["bytes"] >= 2**20 else "", f"{c['seconds']:.2f} s",
             c["said"].split("nothing imported: ")[-1].replace("|", "\\|")]
            for c in data["cases"]]
    return table(["case", "file", "result", "chats after", "peak memory", "memory / file", "time", "said"], rows)


def render_file(path: Path) -> str:
    data = json.loads(path.read_text())
    title, command, about = SECTIONS.get(path.name, (path.stem, "(not recorded)", ""))
    if path.name == "drafters-vs-llama.json":
        body = drafters_llama_table(data)
    elif path.name == "remote.json":
        head = [f"## {title}", f"`bench/{path.name}`"] + ([about] if about else []) + [f"    {command}"]
        return "\n\n".join(head + [remote_tables(data)])
    elif path.name == "app.json":
        body = app_tables(data)
    elif path.name == "context.json":
        body = context_table(data)
    elif data.get("kind") == "context-many":
        body = many_table(data)
    elif data.get("kind") == "depth":
        body = depth_table(data)
    elif data.get("kind") == "tools":
        body = tools_table(data)
    elif data.get("kind") == "ceiling":
        body = ceiling_table(data)
    elif data.get("kind") == "imports":
        body = imports_table(data)
    elif data.get("kind") == "history":
        body = history_table(data)
    elif "runs" in data and "parallel" in data:
        body = concurrency_table(data)
    elif "batch" in data:
        body = batch_table(data)
    elif "rounds" in data:
        body = llama_tables(data)
    elif "prompts" in data:
        body = prompt_tables(data)
    elif "sizes" in data:
        body = vocab_table(data)
    else:
        body = speculative_tables(data)
    date = data.get("date") or (
        datetime.fromtimestamp(data["unix_time"], timezone.utc).strftime("%Y-%m-%d %H:%M UTC") if "unix_time" in data else "date not recorded"
    )
    head = [f"## {title}", f"`bench/{path.name}` · {date} · CPU: {cpu_line(data)}"]
    if about:
        head.append(about)
    head.append(f"    {command}")
    return "\n\n".join(head + [body])


def concurrency_table(data: dict) -> str:
    runs = data["runs"]
    alone = {(r["engine"], r["set"]): r["aggregate_tps"] for r in runs if r["clients"] == 1 and r["arrival"] == "together"}
    peer = {(r["engine"], r["set"], r["arrival"], r["clients"]): r["aggregate_tps"] for r in runs}
    rows = []
    for r in runs:
        one = alone.get((r["engine"], r["set"]))
        llama = {"specula": "llama", "specula-draft": "llama-draft"}.get(r["engine"])
        beside = peer.get((llama, r["set"], r["arrival"], r["clients"])) if llama else None
        rows.append([
            r["engine"], r["set"], r["arrival"], r["clients"], f"{r['aggregate_tps']:.1f}",
            f"{r['aggregate_tps'] / one:.2f}" if one and r["arrival"] == "together" else "",
            f"{r['aggregate_tps'] / beside:.2f}" if beside else "",
            f"{r['ttft_ms']['p50']:.0f} / {r['ttft_ms']['p95']:.0f}",
            f"{r['tpot_ms']['p50']:.0f} / {r['tpot_ms']['p95']:.0f}",
            f"{r['longest_gap_ms']:.0f}",
            "" if r.get("mean_k") is None else f"{r['mean_k']:.2f}",
            pct(r.get("acceptance")),
        ])
    return f"N = {data['parallel']}, {data['tokens']} tokens a reply.\n\n" + table(
        ["engine", "set", "arrival", "clients", "tok/s", "x 1", "x llama", "TTFT ms p50/p95", "ms/token p50/p95",
         "longest gap ms", "mean k", "accepted"], rows)


def ordered_files() -> list:
    files = sorted(BENCH.glob("*.json"))
    rank = {name: i for i, name in enumerate(SECTIONS)}
    return sorted(files, key=lambda p: (rank.get(p.name, len(rank)), p.name))


def benchmarks_md() -> str:
    intro = (
        "# Benchmarks\n\n"
        "Generated by `scripts/benchmarks.py` from `bench/*.json`; do not edit by hand. Each section names the\n"
        "command that wrote its file, so any of them can be rerun and the file replaced. These machines are\n"
        "noisy and differ from one another: compare the ratios measured in one run (speculative over plain,\n"
        "Specula over llama.cpp), not absolute rates across runs. The kernel notebook (why the figures are\n"
        "what they are) is PROFILE.md."
    )
    return "\n\n".join([intro] + [render_file(p) for p in ordered_files()]) + "\n"


def readme_summary() -> str:
    """The few lines the README shows: the latest side-by-side run and the latest speculative one."""
    lines = []
    app = BENCH / "app.json"
    if app.exists():
        data = json.loads(app.read_text())
        def span(key):
            values = [r[key] for r in data["runs"] if r.get(key) is not None]
            return "-".join(dict.fromkeys(f"{f(values):.2f}" for f in (min, max))) if values else "n/a"

        sizes = "/".join(str(n) for n in dict.fromkeys(r["max_tokens"] for r in data["runs"]))
        shown = span("displayed_over_measured")
        lines.append(
            f"- **The app** ({data['date']}, replies of {sizes} tokens, beside `specula generate` in the same run): plain "
            f"decoding at {span('app_over_cli_plain')}x the CLI's rate, speculative at {span('app_over_cli_speculative')}x; "
            f"speculative over the app's own plain {span('app_measured_speedup')}x, and the speedup it displayed was "
            f"{shown} times that."
        )
    remote = BENCH / "remote.json"
    if remote.exists():
        runs = json.loads(remote.read_text())["runs"]
        parts = [f"{r['engine']} {r['summary']['app_over_direct_rate']:.2f}x the direct rate, first token "
                 f"+{r['summary']['app_ttft_added_ms']:.0f} ms" for r in runs]
        lines.append(f"- **A remote engine through the app** (same run, beside the remote called directly): {'; '.join(parts)}.")
    context = BENCH / "context.json"
    if context.exists():
        engines = json.loads(context.read_text())["engines"]
        ours, llama_cpp = engines.get("specula"), engines.get("llama.cpp")
        beside = f"; llama-server {llama_cpp['warm_ttft_s']:.2f} s" if llama_cpp else ""
        lines.append(f"- **Chats taken in turn** (two 1,400-word notes, A/B/A/B): back to a chat, the first token in "
                     f"{ours['warm_ttft_s']:.2f} s against {ours['cold_ttft_s']:.1f} s cold{beside}, same run.")
    llama = BENCH / "speed-vs-llama.json"
    if llama.exists():
        data = json.loads(llama.read_text())
        for model in dict.fromkeys(r["model"] for r in data["rounds"]):
            rounds = [r for r in data["rounds"] if r["model"] == model]
            span = lambda key, rows: "-".join(dict.fromkeys(f"{f(r['ratio'][key] for r in rows):.2f}" for f in (min, max)))
            empty = [r for r in rounds if not r.get("depth")]
            deep = [r for r in rounds if r.get("depth")]
            text = f"prompt processing {span('pp512', empty)}x, generation {span('tg128', empty)}x"
            if deep:
                text += f", generation at {deep[0]['depth']} tokens of context {span('tg128', deep)}x"
            lines.append(f"- `{model}` beside llama.cpp ({data['date']}, same run): {text}.")
    prompts = BENCH / "vs-llama.json"
    if prompts.exists():
        data = json.loads(prompts.read_text())
        sets = data["summary"]
        plain = ", ".join(f"{k} {s['specula_plain'] / s['llama_plain']:.2f}x" for k, s in sets.items())
        auto = ", ".join(f"{k} {s['auto_vs_plain']:.2f}x" for k, s in sets.items())
        lookup = "".join(f", edit with lookup {s['lookup_vs_plain']:.2f}x" for s in sets.values() if s.get("lookup_vs_plain"))
        over = "-".join(dict.fromkeys(f"{f(s['auto_vs_llama_speculative'] for s in sets.values()):.1f}" for f in (min, max)))
        lines.append(
            f"- On the bench prompts beside llama.cpp ({data['date']}, same run, {data['tokens']} tokens): plain decoding "
            f"{plain}; speculative with auto k over plain {auto}{lookup}; over llama-speculative-simple {over}x."
        )
    combined = BENCH / "drafters-auto.json"
    if combined.exists():
        data = json.loads(combined.read_text())
        rows = [s for s in data["summary"] if s["kind"] != "all"]
        every = next((s for s in data["summary"] if s["kind"] == "all"), {})
        date = datetime.fromtimestamp(data["unix_time"], timezone.utc).strftime("%Y-%m-%d") if "unix_time" in data else ""
        sets = ", ".join(f"{s['kind']} {s['speedup']:.2f}x" for s in rows)
        lines.append(f"- The app's default drafter, the draft model with free copies (`specula bench --drafter auto --repeat {data.get('repeat', 1)}`, "
                     f"every prompt, {date}, {data['max_tokens']} tokens, same prompts in one run): {sets}; every reply identical to plain ({every.get('identical', '?')}).")
    ceiling = BENCH / "ceiling.json"
    if ceiling.exists():
        data = json.loads(ceiling.read_text())
        date = datetime.fromtimestamp(data["unix_time"], timezone.utc).strftime("%Y-%m-%d")
        sets = ", ".join(f"{s['kind']} {s['hindsight_model_and_copies']:.2f}x" for s in data["sets"])
        lines.append(f"- The most this pair can give on this CPU ({date}, `--example ceiling`: an oracle that knows the reply picks each "
                     f"step's best of plain, model drafts and copies, overheads free): {sets}.")
    model = BENCH / "auto.json"
    if model.exists():
        data = json.loads(model.read_text())
        auto = [s for s in data["summary"] if s["k"] == "auto"]
        sets = ", ".join(f"{s['kind']} {s['speedup']:.2f}x" for s in auto if s["kind"] != "all")
        identical = next((s["identical"] for s in auto if s["kind"] == "all"), None)
        tail = f"; every reply identical to plain ({identical})" if identical else ""
        date = datetime.fromtimestamp(data["unix_time"], timezone.utc).strftime("%Y-%m-%d") if "unix_time" in data else ""
        repeat = f" --repeat {data['repeat']}" if data.get("repeat", 1) > 1 else ""
        lines.append(f"- `specula bench --k auto --limit 5{repeat}` ({date}, model draft, {data['max_tokens']} tokens, same prompts in one run): {sets}{tail}.")
    lookup = BENCH / "lookup.json"
    if lookup.exists():
        rows = {s["k"]: s for s in json.loads(lookup.read_text())["summary"] if s["kind"] == "all"}
        lines.append("- Prompt lookup on edits, same run: " + ", ".join(f"k {k} {s['speedup']:.2f}x" for k, s in rows.items()) + ".")
    return "\n".join(lines)


def with_readme_summary(readme: str) -> str:
    begin, end = "<!-- benchmarks:begin -->", "<!-- benchmarks:end -->"
    if begin not in readme or end not in readme:
        sys.exit("README.md lacks the benchmarks:begin/end markers")
    head, rest = readme.split(begin, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{begin}\n{readme_summary()}\n{end}{tail}"


def main() -> int:
    check = "--check" in sys.argv[1:]
    outputs = {
        ROOT / "BENCHMARKS.md": benchmarks_md(),
        ROOT / "README.md": with_readme_summary((ROOT / "README.md").read_text()),
    }
    stale = [p.name for p, text in outputs.items() if not p.exists() or p.read_text() != text]
    if check:
        for name in stale:
            print(f"{name} is stale: run python3 scripts/benchmarks.py", file=sys.stderr)
        return 1 if stale else 0
    for path, text in outputs.items():
        path.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
