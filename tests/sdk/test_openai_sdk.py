"""`specula serve` on the real Qwen2.5-Coder pair, driven by the official `openai` Python SDK
(pinned in tests/sdk/requirements.txt; scripts/test.sh installs it into a venv).

Each test is one thing a real client does. Replies are short (a few tokens), so the whole
suite takes a few minutes on two cores. Needs SPECULA_BIN (the built CLI) and the models from
scripts/fetch-models.sh; SPECULA_BASE_URL reuses a server already running instead.
"""

import json
import os
import random
import subprocess
import time
import unittest
import urllib.request
from pathlib import Path

import openai
import pydantic

MODELS = Path(os.environ.get("SPECULA_MODELS_DIR", Path.home() / ".cache/specula/models"))
TARGET = MODELS / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
DRAFT = MODELS / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
MODEL = "qwen2.5-coder-1.5b-instruct-q4_k_m"
KEY = "sdk-test-key"
CONTEXT = 1024

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "The local time in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}

server = None
client = None


def setUpModule():
    global server, client
    base = os.environ.get("SPECULA_BASE_URL")
    if not base:
        port = 19000 + random.randrange(900)
        base = f"http://127.0.0.1:{port}"
        command = [os.environ["SPECULA_BIN"], "serve", "--model", TARGET, "--draft", DRAFT, "--k", "auto",
                   "--ctx", str(CONTEXT), "--port", str(port), "--device", "cpu"]
        server = subprocess.Popen([str(c) for c in command], env={**os.environ, "SPECULA_API_KEY": KEY})
        for _ in range(600):
            try:
                urllib.request.urlopen(f"{base}/health", timeout=1)
                break
            except OSError:
                time.sleep(0.2)
        else:
            raise RuntimeError("the server did not start")
    client = openai.OpenAI(base_url=f"{base}/v1", api_key=KEY, max_retries=0, timeout=300)


def tearDownModule():
    if server:
        server.terminate()
        server.wait(timeout=30)


def chat(**kw):
    kw.setdefault("model", MODEL)
    kw.setdefault("max_tokens", 8)
    return client.chat.completions.create(**kw)


def user(text):
    return [{"role": "user", "content": text}]


COUNT = user("Count from 1 to 20, separated by commas, and nothing else.")


class Stops(unittest.TestCase):
    def test_a_streamed_reply_equals_the_full_reply_and_omits_the_stop(self):
        # Two stops: the target writes "1, 2" or "1,2" by a near tie at its second token, which
        # the last bits of a kernel's arithmetic can tip either way.
        full = chat(messages=COUNT, temperature=0, max_tokens=30, stop=[", 5", ",5"])
        text = full.choices[0].message.content
        self.assertEqual(full.choices[0].finish_reason, "stop")
        self.assertNotIn("5", text)
        streamed = ""
        finish = None
        for chunk in chat(messages=COUNT, temperature=0, max_tokens=30, stop=[", 5", ",5"], stream=True):
            if chunk.choices:
                streamed += chunk.choices[0].delta.content or ""
                finish = chunk.choices[0].finish_reason or finish
        self.assertEqual(streamed, text)
        self.assertEqual(finish, "stop")


# The coder model is no reasoning model, but it follows this note: its replies open with a
# <think> block the way Qwen3's and DeepSeek-R1's do.
THINK = [
    {"role": "system", "content": "You think before you answer. Begin every reply with <think>, write your "
                                  "reasoning, close it with </think>, then give the answer."},
    {"role": "user", "content": "What is 17 times 3?"},
]


class Reasoning(unittest.TestCase):
    def test_thinking_comes_back_as_reasoning_content_and_a_streamed_reply_adds_up_to_it(self):
        full = chat(messages=THINK, temperature=0, max_tokens=200)
        message = full.choices[0].message
        reasoning = message.model_extra.get("reasoning_content")
        self.assertTrue(reasoning, message)
        self.assertNotIn("<think>", reasoning)
        self.assertNotIn("</think>", reasoning + (message.content or ""))
        # Closed or cut off at max_tokens (a near tie on another CPU may make it longer), it is
        # reasoning either way.
        stats = full.model_extra["specula"]["stats"]["reasoning"]
        self.assertGreater(stats["tokens"], 5, stats)
        streamed_reasoning, streamed_content = "", ""
        for chunk in chat(messages=THINK, temperature=0, max_tokens=200, stream=True):
            if chunk.choices:
                delta = chunk.choices[0].delta
                streamed_reasoning += (delta.model_extra or {}).get("reasoning_content") or ""
                streamed_content += delta.content or ""
        self.assertEqual(streamed_reasoning, reasoning)
        self.assertEqual(streamed_content, message.content or "")

    def test_a_reply_cut_off_while_thinking_is_all_reasoning(self):
        full = chat(messages=THINK, temperature=0, max_tokens=6)
        self.assertTrue(full.choices[0].message.model_extra.get("reasoning_content"))
        self.assertEqual(full.choices[0].message.content, "")
        self.assertEqual(full.choices[0].finish_reason, "length")


class MessageShapes(unittest.TestCase):
    def test_content_parts_developer_and_tool_turns_are_read(self):
        messages = [
            {"role": "developer", "content": "Answer in one word."},
            {"role": "user", "content": [{"type": "text", "text": "Weather in "}, {"type": "text", "text": "Paris?"}]},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris"})}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"},
        ]
        reply = chat(messages=messages, tools=[WEATHER], temperature=0)
        self.assertEqual(reply.choices[0].message.role, "assistant")
        self.assertGreater(reply.usage.prompt_tokens, 40)

    def test_an_image_part_is_refused_by_name(self):
        image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
        with self.assertRaises(openai.BadRequestError) as caught:
            chat(messages=[{"role": "user", "content": [image]}])
        self.assertIn("image_url", str(caught.exception))

    def test_empty_messages_get_a_clear_error(self):
        with self.assertRaises(openai.BadRequestError) as caught:
            chat(messages=[])
        self.assertIn("at least one message", str(caught.exception))

    def test_a_legacy_completion_takes_a_list_of_prompts(self):
        reply = client.completions.create(model=MODEL, prompt=["def add(a, b):", "def sub(a, b):"],
                                          max_tokens=4, temperature=0)
        self.assertEqual([c.index for c in reply.choices], [0, 1])
        self.assertTrue(all(c.text for c in reply.choices))

    def test_echo_is_refused_clearly(self):
        with self.assertRaises(openai.BadRequestError) as caught:
            client.completions.create(model=MODEL, prompt="x", max_tokens=2, echo=True)
        self.assertIn("echo", str(caught.exception))


class Tools(unittest.TestCase):
    def test_a_tool_call_comes_back_as_tool_calls(self):
        reply = chat(messages=user("What is the weather in Paris? Use the tool."), tools=[WEATHER],
                     temperature=0, max_tokens=40)
        choice = reply.choices[0]
        self.assertEqual(choice.finish_reason, "tool_calls", choice.message)
        call = choice.message.tool_calls[0]
        self.assertEqual(call.function.name, "get_weather")
        self.assertEqual(json.loads(call.function.arguments)["city"], "Paris")

    def test_a_streamed_tool_call_arrives_as_deltas(self):
        stream = chat(messages=user("What is the weather in Paris? Use the tool."), tools=[WEATHER],
                      temperature=0, max_tokens=40, stream=True)
        calls, finish, content = {}, None, ""
        for chunk in stream:
            for choice in chunk.choices:
                content += choice.delta.content or ""
                for delta in choice.delta.tool_calls or []:
                    entry = calls.setdefault(delta.index, {"name": "", "arguments": ""})
                    entry["name"] += delta.function.name or ""
                    entry["arguments"] += delta.function.arguments or ""
                finish = choice.finish_reason or finish
        self.assertEqual(finish, "tool_calls")
        self.assertEqual(calls[0]["name"], "get_weather")
        self.assertEqual(json.loads(calls[0]["arguments"])["city"], "Paris")
        self.assertNotIn("get_weather", content)

    def test_tool_choice_none_gets_text(self):
        reply = chat(messages=user("What is the weather in Paris?"), tools=[WEATHER], tool_choice="none",
                     temperature=0)
        self.assertFalse(reply.choices[0].message.tool_calls)

    def test_tool_choice_required_and_named_force_a_call(self):
        # Asked nothing about the weather: only the grammar makes it a call.
        reply = chat(messages=user("Say hello."), tools=[WEATHER], tool_choice="required",
                     temperature=0, max_tokens=40)
        choice = reply.choices[0]
        self.assertEqual(choice.finish_reason, "tool_calls", choice.message)
        self.assertEqual(choice.message.tool_calls[0].function.name, "get_weather")
        self.assertIn("city", json.loads(choice.message.tool_calls[0].function.arguments))
        named = chat(messages=user("What is the weather in Paris?"), tools=[WEATHER, TIME],
                     tool_choice={"type": "function", "function": {"name": "get_time"}}, temperature=0, max_tokens=40)
        self.assertEqual(named.choices[0].message.tool_calls[0].function.name, "get_time")
        with self.assertRaises(openai.BadRequestError):
            chat(messages=user("hi"), tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "nope"}})


class Person(pydantic.BaseModel):
    name: str
    year: int


class StructuredOutput(unittest.TestCase):
    def test_json_object_replies_parse(self):
        reply = chat(messages=user("Give the name and birth year of a famous scientist as JSON."),
                     response_format={"type": "json_object"}, temperature=0, max_tokens=60)
        self.assertIsInstance(json.loads(reply.choices[0].message.content), dict)

    def test_the_sdks_parse_gets_a_value_of_the_schema(self):
        reply = client.chat.completions.parse(
            model=MODEL, messages=user("Name one programming language and the year it appeared."),
            response_format=Person, temperature=0, max_tokens=60)
        person = reply.choices[0].message.parsed
        self.assertIsInstance(person, Person)
        self.assertTrue(person.name)

    def test_a_schema_that_cannot_be_met_is_a_400(self):
        with self.assertRaises(openai.BadRequestError) as refused:
            chat(messages=user("hi"), response_format={
                "type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "integer", "minimum": 5, "maximum": 1}}})
        self.assertIn("schema", str(refused.exception))


class Sampling(unittest.TestCase):
    def test_without_a_seed_replies_differ_and_the_seed_replays_one(self):
        prompt = user("Write a random word.")
        replies = [chat(messages=prompt, temperature=1.5, max_tokens=6) for _ in range(3)]
        texts = {r.choices[0].message.content for r in replies}
        self.assertGreater(len(texts), 1, texts)
        seed = replies[0].model_extra["specula"]["seeds"][0]
        again = chat(messages=prompt, temperature=1.5, max_tokens=6, seed=seed)
        self.assertEqual(again.choices[0].message.content, replies[0].choices[0].message.content)

    def test_n_gives_n_choices_each_with_its_seed(self):
        reply = chat(messages=user("Name a colour."), n=2, temperature=1.0, max_tokens=4)
        self.assertEqual([c.index for c in reply.choices], [0, 1])
        self.assertEqual(len(set(reply.model_extra["specula"]["seeds"])), 2)

    def test_logprobs_and_top_logprobs_come_from_the_target(self):
        reply = chat(messages=user("Say hello."), temperature=0, max_tokens=4, logprobs=True, top_logprobs=3)
        content = reply.choices[0].logprobs.content
        self.assertEqual(len(content), reply.usage.completion_tokens)
        for entry in content:
            self.assertLessEqual(entry.logprob, 0.0)
            self.assertEqual(len(entry.top_logprobs), 3)
            # Greedy: the chosen token is the most likely one.
            self.assertEqual(entry.top_logprobs[0].token, entry.token)
        with self.assertRaises(openai.BadRequestError):
            chat(messages=user("x"), logprobs=True, top_logprobs=21)


class Protocol(unittest.TestCase):
    def test_a_model_is_retrieved_by_id_and_an_unknown_one_is_a_json_404(self):
        self.assertEqual(client.models.retrieve(MODEL).id, MODEL)
        with self.assertRaises(openai.NotFoundError) as caught:
            client.models.retrieve("no-such-model")
        self.assertIn("no-such-model", str(caught.exception))

    def test_a_context_overflow_uses_openais_words(self):
        with self.assertRaises(openai.BadRequestError) as caught:
            chat(messages=user("word " * (CONTEXT + 100)))
        self.assertIn("maximum context length", str(caught.exception))

    def test_include_usage_sends_a_usage_chunk_with_no_choices(self):
        chunks = list(chat(messages=user("Say hi."), temperature=0, max_tokens=4, stream=True,
                           stream_options={"include_usage": True}))
        last = chunks[-1]
        self.assertEqual(last.choices, [])
        self.assertGreater(last.usage.completion_tokens, 0)
        self.assertTrue(all(c.usage is None for c in chunks[:-1]))


if __name__ == "__main__":
    unittest.main(verbosity=2)
