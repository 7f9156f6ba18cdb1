#!/usr/bin/env python3
"""Long contexts beside llama.cpp, in one run: the memory a filled context takes and the decode
rate at depth, `specula speed` against `llama-bench` on the 1.5B target: bench/depth.json.

For each depth (tokens already in the cache) each program generates --tg tokens one pass each
after reading the depth's tokens, with 2 threads: Specula with f16, q8_0 and f32 keys and
values (`--kv`), llama.cpp with its default f16 cache and with q8_0 (`-ctk q8_0 -ctv q8_0`,
which needs its flash attention, `-fa 1`). Recorded per run: the decode rate and the peak
resident size of the process (the kernel's ru_maxrss: weights, the filled cache and the
scratch of the last pass), and the run's wall seconds (mostly reading the depth's tokens).
Both programs size their cache to the depth and the tokens asked, so the resident size is what
that many filled positions cost. The order alternates by depth. llama.cpp is built by
scripts/llama-cpp.sh. --engines picks some of the five (a 32k row of all five takes hours on
two cores).

    scripts/bench-depth.py [--depths 4096,8192,16384] [--tg 32] [--engines "specula f16,..."]
                           [--out bench/depth.json] [--append "why this row came later"]
"""
import argparse
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
spec = importlib.util.spec_from_file_location("bench_vs_llama", ROOT / "scripts/bench-vs-llama.py")
vs_llama = importlib.util.module_from_spec(spec)
spec.loader.exec_module(vs_llama)


def run_peak(command):
    """Run `command` and wait for it with wait4: its stdout, peak resident MiB and wall seconds."""
    started = time.monotonic()
    process = subprocess.Popen([str(c) for c in command], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    out = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode:
        sys.exit(f"{command} exited {process.returncode}")
    return out, round(usage.ru_maxrss / 1024, 1), round(time.monotonic() - started, 1)


def specula(cli, depth, tg, kv):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "speed.json"
        _, rss, wall = run_peak([cli, "speed", "--model", vs_llama.TARGET, "--pp", "0", "--tg", tg, "--depth", depth,
                           "--repeat", "1", "--kv", kv, "--json", path])
        result = json.loads(path.read_text())["results"][0]
    return {"tokens_per_second": round(result["tokens_per_second"], 2), "peak_rss_mib": rss, "wall_s": wall}


def llama(bin_dir, depth, tg, kv="f16"):
    cache = [] if kv == "f16" else ["-ctk", kv, "-ctv", kv, "-fa", "1"]
    out, rss, wall = run_peak([bin_dir / "llama-bench", "-m", vs_llama.TARGET, "-p", "0", "-n", tg, "-d", depth,
                         "-t", vs_llama.THREADS, "-r", "1", "-o", "json", *cache])
    return {"tokens_per_second": round(json.loads(out)[0]["avg_ts"], 2), "peak_rss_mib": rss, "wall_s": wall}


ENGINES = ["specula f16", "specula q8_0", "specula f32", "llama.cpp f16", "llama.cpp q8_0"]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cli", default=str(vs_llama.TARGET_DIR / "release/specula"))
    parser.add_argument("--depths", default="4096,8192,16384")
    parser.add_argument("--tg", type=int, default=32)
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--out", default=str(ROOT / "bench/depth.json"))
    parser.add_argument("--append", metavar="NOTE",
                        help="add the rows to --out's, each with this note and its own CPU (a row measured later)")
    args = parser.parse_args()
    engines = args.engines.split(",")
    # Building llama.cpp takes minutes: only when a row runs it.
    bin_dir = (Path(subprocess.run([ROOT / "scripts/llama-cpp.sh"], capture_output=True, text=True, check=True)
                    .stdout.strip().splitlines()[-1]) if any(e.startswith("llama.cpp") for e in engines) else None)
    kept = json.loads(Path(args.out).read_text())["rows"] if args.append else []
    rows = []
    for i, depth in enumerate(int(d) for d in args.depths.split(",")):
        runs = [("specula f16", lambda: specula(args.cli, depth, args.tg, "f16")),
                ("specula q8_0", lambda: specula(args.cli, depth, args.tg, "q8_0")),
                ("specula f32", lambda: specula(args.cli, depth, args.tg, "f32")),
                ("llama.cpp f16", lambda: llama(bin_dir, depth, args.tg)),
                ("llama.cpp q8_0", lambda: llama(bin_dir, depth, args.tg, "q8_0"))]
        runs = [(name, fn) for name, fn in runs if name in engines]
        got = {}
        row = {"depth": depth, "tg": args.tg, "engines": got}
        for name, fn in (runs if i % 2 == 0 else runs[::-1]):
            got[name] = fn()
            write(args.out, bin_dir, kept, rows + [row], args.append)  # a long row is kept run by run
        for kv in ("f16", "q8_0"):
            ours, theirs = got.get(f"specula {kv}"), got.get(f"llama.cpp {kv}")
            if ours and theirs:
                row[f"ratio_{kv}"] = {
                    "tokens_per_second": round(ours["tokens_per_second"] / theirs["tokens_per_second"], 3),
                    "peak_rss": round(ours["peak_rss_mib"] / theirs["peak_rss_mib"], 3)}
        print(json.dumps(row), flush=True)
        rows.append(row)
    write(args.out, bin_dir, kept, rows, args.append)


def write(out, bin_dir, kept, rows, note=None):
    """The file: fresh, or with `note` the one read at the start (its date, CPU and build) plus the new rows,
    each marked with the note and the CPU it ran on, in depth order."""
    if note:
        data = json.loads(Path(out).read_text())
        rows = [{**row, "note": note, "cpu": vs_llama.cpu()} for row in rows]
        data["rows"] = sorted(kept + rows, key=lambda r: r["depth"])
    else:
        data = {"kind": "depth", "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "cpu": vs_llama.cpu(), "rows": rows}
        if bin_dir:
            data["llama_cpp"] = json.loads((bin_dir / "build-info.json").read_text())
    Path(out).write_text(json.dumps(data, indent=1) + "\n")


if __name__ == "__main__":
    main()
