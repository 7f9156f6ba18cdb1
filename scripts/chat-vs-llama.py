#!/usr/bin/env python3
"""Specula's chat prompts beside llama.cpp's, in one run: each request of
tests/data/chat-templates/cases.json (those llama-server takes as they are) rendered by
`specula chat-template` and by `llama-server --jinja` (`/apply-template`, then `/tokenize`),
on one model. Prints the token counts and whether the prompts are the same bytes.

    scripts/chat-vs-llama.py SPECULA_BINARY [--model M.gguf]
    # llama-server: built by scripts/llama-cpp.sh --server

Token counts differ where a message spells a special token's text: llama.cpp reads
`<|im_end|>` typed by a user as the control token; Specula reads it as text.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = os.path.join(HERE, "..", "tests", "data", "chat-templates", "cases.json")
PORT = 18080


def post(path, body):
    request = urllib.request.Request(
        f"http://127.0.0.1:{PORT}{path}", data=json.dumps(body).encode(), headers={"content-type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as reply:
        return json.load(reply)


def wait_ready(server):
    for _ in range(120):
        if server.poll() is not None:
            sys.exit("llama-server stopped")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{PORT}/health", timeout=2) as reply:
                if b"ok" in reply.read():
                    return
        except OSError:
            pass
        time.sleep(1)
    sys.exit("llama-server did not start")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("specula")
    parser.add_argument("--model", default=os.path.expanduser("~/.cache/specula/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"))
    args = parser.parse_args()
    llama_bin = subprocess.run([os.path.join(HERE, "llama-cpp.sh"), "--server"], capture_output=True, text=True, check=True)
    server = subprocess.Popen(
        [os.path.join(llama_bin.stdout.strip(), "llama-server"), "-m", args.model, "--jinja", "--port", str(PORT), "-c", "2048"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_ready(server)
        with open(CASES, encoding="utf-8") as f:
            cases = json.load(f)
        print(f"{'case':<22} {'llama.cpp':>9} {'specula':>8}  prompt")
        for case in cases:
            if case.get("chat_template_kwargs") or case.get("add_generation_prompt") is False:
                continue
            body = {"messages": case["messages"], **({"tools": case["tools"]} if case.get("tools") else {})}
            theirs = post("/apply-template", body)["prompt"]
            their_count = len(post("/tokenize", {"content": theirs, "add_special": True, "parse_special": True})["tokens"])
            with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
                json.dump(body, f)
            ours = subprocess.run([args.specula, "chat-template", "--model", args.model, "--messages", f.name], capture_output=True, text=True)
            os.unlink(f.name)
            our_count = ours.stderr.split()[0] if ours.returncode == 0 else "error"
            same = "same bytes" if ours.stdout == theirs else "DIFFERENT"
            print(f"{case['name']:<22} {their_count:>9} {our_count:>8}  {same}")
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
