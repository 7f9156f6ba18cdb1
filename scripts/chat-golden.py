#!/usr/bin/env python3
"""The golden corpus of chat-template renderings: what Hugging Face's `apply_chat_template`
renders, byte for byte, for each catalogue template and each message shape clients send.
crates/server/tests/chat_templates.rs renders the same cases through Specula and compares.

Pinned reference (from PyPI; no Hub access needed, nothing else is read from the network):

    python3 -m venv ~/.cache/specula/chat-golden-venv
    ~/.cache/specula/chat-golden-venv/bin/pip install transformers==4.57.1 jinja2==3.1.6
    ~/.cache/specula/chat-golden-venv/bin/python scripts/chat-golden.py [--models DIR]

Inputs, in tests/data/chat-templates/:
- templates/*.jinja: the templates as their publishers ship them. qwen2.5-coder (0.5B),
  qwen2.5-coder-1.5b and smollm2 are read from the GGUF files of ../shared/MODELS.md (rewritten here when --models has
  them; Qwen2.5's own template is the same text as Qwen2.5-Coder's, byte for byte, in
  llama-cpp-python's copy of Qwen/Qwen2.5-7B-Instruct); qwen3, llama-3.1 and llama-3.2 are the
  Hub's texts as vendored in
  llama-cpp-python 0.3.36's sdist (vendor/llama.cpp/models/templates); gemma-3 is the Hub's
  text as copied into unsloth 2026.10.9 (unsloth/chat_templates.py), the only PyPI package
  found here that carries it.
- cases.json: requests as OpenAI clients send them (`messages`, `tools`,
  `add_generation_prompt`, `chat_template_kwargs`).

Output: golden.json, one entry per template and case: the rendered prompt, or the error the
template raised. The messages given to transformers are the request's, normalized as an
OpenAI-compatible server must (and as llama.cpp's server does): `developer` is `system`;
tool-call `arguments` sent as a JSON string are parsed to the object templates expect; text
parts are joined with "\\n" unless the template reads content parts itself; `null`
content is "".
"""

import argparse
import datetime
import json
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "tests", "data", "chat-templates")
# The day `strftime_now` sees (Llama 3.x print it): fixed so that the corpus is reproducible.
TODAY = datetime.datetime(2026, 12, 4, 9, 30, 0)

# Each template's special tokens, as its tokenizer gives them to apply_chat_template.
TEMPLATES = {
    "qwen2.5-coder": {"bos_token": "<|endoftext|>", "eos_token": "<|im_end|>"},
    "qwen2.5-coder-1.5b": {"bos_token": "<|endoftext|>", "eos_token": "<|im_end|>"},
    "qwen3": {"bos_token": "<|endoftext|>", "eos_token": "<|im_end|>"},
    "smollm2": {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>"},
    "llama-3.1": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "llama-3.2": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "gemma-3": {"bos_token": "<bos>", "eos_token": "<eos>"},
}
GGUF_TEMPLATES = {
    "qwen2.5-coder": "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    # Not quite the 0.5B's: its tool instructions write `{{"name": ...}}`, braces doubled.
    "qwen2.5-coder-1.5b": "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    "smollm2": "SmolLM2-135M-Instruct.Q4_1.gguf",
}


def gguf_chat_template(path):
    """`tokenizer.chat_template` from a GGUF file's metadata."""
    with open(path, "rb") as f:
        magic, version, _tensors, count = struct.unpack("<IIQQ", f.read(24))
        assert magic == 0x46554747 and version >= 2, path

        def string():
            (n,) = struct.unpack("<Q", f.read(8))
            return f.read(n).decode("utf-8")

        sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

        def skip(kind):
            if kind == 8:
                string()
            elif kind == 9:
                inner, n = struct.unpack("<IQ", f.read(12))
                if inner == 8:
                    for _ in range(n):
                        string()
                else:
                    f.seek(sizes[inner] * n, 1)
            else:
                f.seek(sizes[kind], 1)

        for _ in range(count):
            key = string()
            (kind,) = struct.unpack("<I", f.read(4))
            if key == "tokenizer.chat_template":
                return string()
            skip(kind)
    raise KeyError(f"{path}: no chat template")


def reads_content_parts(template):
    """Whether a template renders a list of content parts itself (Gemma 3 does); the others
    print the list's repr, so the server joins the text first."""
    needle = "PART-NEEDLE"
    messages = [{"role": "user", "content": [{"type": "text", "text": needle}]}]
    try:
        out = template.render(messages=messages, add_generation_prompt=False, bos_token="", eos_token="")
    except Exception:
        return False
    return needle in out and "'type'" not in out and '"type"' not in out


def normalized(messages, parts_ok):
    out = []
    for m in messages:
        m = dict(m)
        if m["role"] == "developer":
            m["role"] = "system"
        content = m.get("content")
        if content is None:
            m["content"] = ""
        elif isinstance(content, list) and not parts_ok:
            m["content"] = "\n".join(p["text"] for p in content if p.get("type") == "text")
        calls = m.get("tool_calls")
        if calls:
            m["tool_calls"] = [dict(c, function=arguments_parsed(c["function"])) for c in calls]
        out.append(m)
    return out


def arguments_parsed(function):
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            pass
    return dict(function, arguments=arguments)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", default=os.path.expanduser("~/.cache/specula/models"))
    args = parser.parse_args()

    import transformers
    from transformers.utils import chat_template_utils

    class Fixed(datetime.datetime):
        @classmethod
        def now(cls, tz=None):
            return TODAY

    chat_template_utils.datetime = Fixed

    for name, file in GGUF_TEMPLATES.items():
        path = os.path.join(args.models, file)
        if os.path.exists(path):
            with open(os.path.join(DATA, "templates", f"{name}.jinja"), "w", encoding="utf-8", newline="") as f:
                f.write(gguf_chat_template(path))

    with open(os.path.join(DATA, "cases.json"), encoding="utf-8") as f:
        cases = json.load(f)
    golden = []
    for name, specials in TEMPLATES.items():
        with open(os.path.join(DATA, "templates", f"{name}.jinja"), encoding="utf-8", newline="") as f:
            source = f.read()
        parts_ok = reads_content_parts(chat_template_utils._compile_jinja_template(source))
        for case in cases:
            entry = {"template": name, "case": case["name"]}
            try:
                entry["prompt"] = chat_template_utils.render_jinja_template(
                    conversations=[normalized(case["messages"], parts_ok)],
                    tools=case.get("tools"),
                    chat_template=source,
                    add_generation_prompt=case.get("add_generation_prompt", True),
                    **specials,
                    **case.get("chat_template_kwargs", {}),
                )[0][0]
            except Exception as e:  # the template's own refusal is part of the corpus
                entry["error"] = f"{type(e).__name__}: {e}"
            golden.append(entry)
    reference = {"transformers": transformers.__version__, "jinja2": sys.modules["jinja2"].__version__}
    with open(os.path.join(DATA, "golden.json"), "w", encoding="utf-8") as f:
        json.dump({"reference": reference, "today": TODAY.isoformat(), "templates": TEMPLATES, "renderings": golden}, f, indent=1, ensure_ascii=False)
        f.write("\n")
    errors = sum("error" in g for g in golden)
    print(f"{len(TEMPLATES)} templates x {len(cases)} cases = {len(golden)} renderings ({errors} refused by the template)")


if __name__ == "__main__":
    main()
