"""Each API feature through each popular client: the official `openai` SDK, `litellm` and
`langchain-openai`, against `specula serve` on the real pair. Prints a Markdown table (feature x
client: ok, or what went wrong) and writes it as JSON. A documented command, not a CI step (the
openai SDK suite, tests/sdk/test_openai_sdk.py, is the CI one):

    python3 -m venv ~/.cache/specula/client-matrix-venv
    ~/.cache/specula/client-matrix-venv/bin/pip install -r tests/sdk/client-matrix-requirements.txt
    SPECULA_BIN=target/debug/specula ~/.cache/specula/client-matrix-venv/bin/python \\
        tests/sdk/client_matrix.py --json docs/client-matrix/$(git rev-parse --short HEAD).json
"""

import json
import os
import random
import subprocess
import sys
import time
import urllib.request
from importlib.metadata import version
from pathlib import Path

import litellm
import openai
import pydantic
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool as langchain_tool
from langchain_openai import ChatOpenAI

MODELS = Path(os.environ.get("SPECULA_MODELS_DIR", Path.home() / ".cache/specula/models"))
MODEL = "qwen2.5-coder-1.5b-instruct-q4_k_m"
KEY = "matrix-key"
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
ASK_WEATHER = [{"role": "user", "content": "What is the weather in Paris? Use the tool."}]
COUNT = [{"role": "user", "content": "Count from 1 to 20, separated by commas, and nothing else."}]
CITY = [{"role": "user", "content": "Give the name and the country of one city, as a JSON object."}]


class Language(pydantic.BaseModel):
    name: str
    year: int


@langchain_tool
def get_weather(city: str) -> str:
    """Get the current weather in a city"""
    return "sunny"


def start_server():
    port = 19900 + random.randrange(90)
    command = [os.environ["SPECULA_BIN"], "serve", "--model", MODELS / f"{MODEL}.gguf",
               "--draft", MODELS / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", "--ctx", "1024", "--port", str(port)]
    server = subprocess.Popen([str(c) for c in command], env={**os.environ, "SPECULA_API_KEY": KEY},
                              stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            urllib.request.urlopen(f"{base}/health", timeout=1)
            return server, f"{base}/v1"
        except OSError:
            time.sleep(0.2)
    raise RuntimeError("the server did not start")


def openai_features(base):
    client = openai.OpenAI(base_url=base, api_key=KEY, max_retries=0, timeout=300)
    chat = lambda **kw: client.chat.completions.create(model=MODEL, **{"max_tokens": 16, "temperature": 0, **kw})

    def stream(**kw):
        return "".join(c.choices[0].delta.content or "" for c in chat(stream=True, **kw) if c.choices)

    def overflow():
        try:
            chat(messages=[{"role": "user", "content": "word " * 2000}])
        except openai.BadRequestError as e:
            return e.code == "context_length_exceeded"
        return False

    return {
        "chat": lambda: bool(chat(messages=COUNT).choices[0].message.content),
        "stream": lambda: bool(stream(messages=COUNT)),
        "stop (streamed = full)": lambda: stream(messages=COUNT, stop=[", 5", ",5"], max_tokens=24)
        == chat(messages=COUNT, stop=[", 5", ",5"], max_tokens=24).choices[0].message.content,
        "tools (auto)": lambda: chat(messages=ASK_WEATHER, tools=[WEATHER], max_tokens=40)
        .choices[0].message.tool_calls[0].function.name == "get_weather",
        "tool_choice required": lambda: chat(messages=[{"role": "user", "content": "Hi"}], tools=[WEATHER],
                                             tool_choice="required", max_tokens=40)
        .choices[0].message.tool_calls[0].function.name == "get_weather",
        "json_object": lambda: isinstance(json.loads(chat(messages=CITY, response_format={"type": "json_object"},
                                                          max_tokens=200)
                                                     .choices[0].message.content), dict),
        "json_schema (parse)": lambda: isinstance(client.chat.completions.parse(
            model=MODEL, messages=[{"role": "user", "content": "One programming language and its year."}],
            response_format=Language, temperature=0, max_tokens=60).choices[0].message.parsed, Language),
        "n = 2": lambda: len(chat(messages=COUNT, n=2, temperature=1, max_tokens=4).choices) == 2,
        "logprobs": lambda: len(chat(messages=COUNT, logprobs=True, top_logprobs=3, max_tokens=4)
                                .choices[0].logprobs.content[0].top_logprobs) == 3,
        "seed replays": lambda: len({chat(messages=COUNT, temperature=1, seed=7, max_tokens=8).choices[0].message.content
                                     for _ in range(2)}) == 1,
        "context overflow recognised": overflow,
    }


def litellm_features(base):
    common = {"model": f"openai/{MODEL}", "api_base": base, "api_key": KEY, "temperature": 0}
    chat = lambda **kw: litellm.completion(**{**common, "max_tokens": 16, **kw})

    def stream(**kw):
        return "".join(c.choices[0].delta.content or "" for c in chat(stream=True, **kw) if c.choices)

    def overflow():
        try:
            chat(messages=[{"role": "user", "content": "word " * 2000}])
        except litellm.ContextWindowExceededError:
            return True
        except Exception:  # noqa: BLE001 - any other error means it was not recognised
            return False
        return False

    return {
        "chat": lambda: bool(chat(messages=COUNT).choices[0].message.content),
        "stream": lambda: bool(stream(messages=COUNT)),
        "stop (streamed = full)": lambda: stream(messages=COUNT, stop=[", 5", ",5"], max_tokens=24)
        == chat(messages=COUNT, stop=[", 5", ",5"], max_tokens=24).choices[0].message.content,
        "tools (auto)": lambda: chat(messages=ASK_WEATHER, tools=[WEATHER], max_tokens=40)
        .choices[0].message.tool_calls[0].function.name == "get_weather",
        "tool_choice required": lambda: chat(messages=[{"role": "user", "content": "Hi"}], tools=[WEATHER],
                                             tool_choice="required", max_tokens=40)
        .choices[0].message.tool_calls[0].function.name == "get_weather",
        "json_object": lambda: isinstance(json.loads(chat(messages=CITY, response_format={"type": "json_object"},
                                                          max_tokens=200)
                                                     .choices[0].message.content), dict),
        "json_schema (parse)": lambda: Language.model_validate_json(chat(
            messages=[{"role": "user", "content": "One programming language and its year."}],
            response_format=Language, max_tokens=60).choices[0].message.content) is not None,
        "n = 2": lambda: len(chat(messages=COUNT, n=2, temperature=1, max_tokens=4).choices) == 2,
        "logprobs": lambda: len(chat(messages=COUNT, logprobs=True, top_logprobs=3, max_tokens=4)
                                .choices[0].logprobs["content"][0]["top_logprobs"]) == 3,
        "seed replays": lambda: len({chat(messages=COUNT, temperature=1, seed=7, max_tokens=8).choices[0].message.content
                                     for _ in range(2)}) == 1,
        "context overflow recognised": overflow,
    }


def langchain_features(base):
    def llm(**kw):
        return ChatOpenAI(**{"model": MODEL, "base_url": base, "api_key": KEY, "temperature": 0, "max_retries": 0,
                             "max_tokens": 16, **kw})

    ask = [HumanMessage(COUNT[0]["content"])]

    def overflow():
        try:
            llm().invoke("word " * 2000)
        except openai.BadRequestError as e:
            return "maximum context length" in str(e)
        return False

    return {
        "chat": lambda: bool(llm().invoke(ask).content),
        "stream": lambda: bool("".join(c.content for c in llm().stream(ask))),
        "stop (streamed = full)": lambda: "".join(c.content for c in llm(max_tokens=24).stream(ask, stop=[", 5", ",5"]))
        == llm(max_tokens=24).invoke(ask, stop=[", 5", ",5"]).content,
        "tools (auto)": lambda: llm(max_tokens=40).bind_tools([get_weather]).invoke(ASK_WEATHER[0]["content"])
        .tool_calls[0]["name"] == "get_weather",
        "tool_choice required": lambda: llm(max_tokens=40).bind_tools([get_weather], tool_choice="required")
        .invoke("Hi").tool_calls[0]["name"] == "get_weather",
        "json_object": lambda: isinstance(llm(max_tokens=200).with_structured_output(None, method="json_mode")
                                          .invoke(CITY[0]["content"]), dict),
        "json_schema (parse)": lambda: isinstance(llm(max_tokens=60).with_structured_output(Language, method="json_schema")
                                                  .invoke("One programming language and its year."), Language),
        "n = 2": lambda: len(llm(n=2, temperature=1, max_tokens=4).generate([ask]).generations[0]) == 2,
        "logprobs": lambda: len(llm(max_tokens=4, logprobs=True, top_logprobs=3).invoke(ask)
                                .response_metadata["logprobs"]["content"][0]["top_logprobs"]) == 3,
        "seed replays": lambda: len({llm(temperature=1, seed=7, max_tokens=8).invoke(ask).content for _ in range(2)}) == 1,
        "context overflow recognised": overflow,
    }


def run(features):
    results = {}
    for name, check in features.items():
        try:
            results[name] = "ok" if check() else "wrong result"
        except Exception as e:  # noqa: BLE001 - the table records what each client raised
            results[name] = f"{type(e).__name__}: {str(e).splitlines()[0][:80]}"
    return results


def main():
    server, base = start_server()
    try:
        table = {
            f"openai {version('openai')}": run(openai_features(base)),
            f"litellm {version('litellm')}": run(litellm_features(base)),
            f"langchain-openai {version('langchain-openai')}": run(langchain_features(base)),
        }
    finally:
        server.terminate()
        server.wait(timeout=30)
    clients = list(table)
    print("| feature | " + " | ".join(clients) + " |")
    print("|---|" + "---|" * len(clients))
    for feature in next(iter(table.values())):
        print(f"| {feature} | " + " | ".join(table[c][feature] for c in clients) + " |")
    if "--json" in sys.argv:
        Path(sys.argv[sys.argv.index("--json") + 1]).write_text(json.dumps(table, indent=1) + "\n")
    return 0 if all(v == "ok" for r in table.values() for v in r.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
