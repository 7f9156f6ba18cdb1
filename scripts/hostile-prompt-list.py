#!/usr/bin/env python3
"""Issue 35's first case against a real `specula serve`: one /v1/completions body listing many
one-letter prompts with n = 8. Prints the answer's status, how long it took, and the server's
resident memory before, after and at its peak (VmRSS, VmHWM), as one JSON line.

    scripts/hostile-prompt-list.py BINARY [--prompts 200000] [--port 18181]

BINARY is a built `specula`; the model is the 0.5B of scripts/fetch-models.sh. Before the fix
(2026-12-04): 566 -> 1,194 MB and no answer within 15 s; after: a 400 at once, a few MB."""
import argparse, http.client, json, os, subprocess, time, urllib.request

parser = argparse.ArgumentParser()
parser.add_argument("binary")
parser.add_argument("--prompts", type=int, default=200_000)
parser.add_argument("--port", type=int, default=18181)
args = parser.parse_args()
models = os.environ.get("SPECULA_MODELS_DIR", os.path.expanduser("~/.cache/specula/models"))
model = os.path.join(models, "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")
server = subprocess.Popen([args.binary, "serve", "--model", model, "--port", str(args.port)],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def memory_mb():
    status = open(f"/proc/{server.pid}/status").read().splitlines()
    field = lambda key: int(next(line for line in status if line.startswith(key)).split()[1]) // 1024
    return field("VmRSS:"), field("VmHWM:")


try:
    base = f"http://127.0.0.1:{args.port}"
    for _ in range(600):
        try:
            urllib.request.urlopen(f"{base}/health", timeout=1)
            break
        except OSError:
            time.sleep(0.2)
    before, _ = memory_mb()
    model_id = json.load(urllib.request.urlopen(f"{base}/v1/models"))["data"][0]["id"]
    body = json.dumps({"model": model_id, "prompt": ["a"] * args.prompts, "n": 8, "max_tokens": 1})
    connection = http.client.HTTPConnection("127.0.0.1", args.port, timeout=15)
    started = time.time()
    connection.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    try:
        response = connection.getresponse()
        status, answer = response.status, response.read()[:200].decode(errors="replace")
    except OSError as e:
        status, answer = None, f"no answer within 15 s ({e.__class__.__name__})"
    took = time.time() - started
    after, peak = memory_mb()
    print(json.dumps({"body_bytes": len(body), "status": status, "answer": answer, "seconds": round(took, 2),
                      "resident_before_mb": before, "resident_after_mb": after, "peak_mb": peak}))
finally:
    server.kill()
