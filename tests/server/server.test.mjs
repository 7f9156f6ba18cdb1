// `specula serve` on the real Qwen2.5-Coder pair, driven by the official OpenAI client.
// Needs SPECULA_BIN (the built CLI) and the models from scripts/fetch-models.sh.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { homedir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';

const MODELS = process.env.SPECULA_MODELS_DIR ?? join(homedir(), '.cache/specula/models');
const TARGET = join(MODELS, 'qwen2.5-coder-1.5b-instruct-q4_k_m.gguf');
const DRAFT = join(MODELS, 'qwen2.5-coder-0.5b-instruct-q4_k_m.gguf');
const MODEL_ID = 'qwen2.5-coder-1.5b-instruct-q4_k_m';
const KEY = 'test-key';
const PORT = 18000 + Math.floor(Math.random() * 1000);
const BASE = `http://127.0.0.1:${PORT}`;
let server;

before(async () => {
  const bin = process.env.SPECULA_BIN;
  assert.ok(bin, 'set SPECULA_BIN to the built specula binary');
  server = spawn(bin, ['serve', '--model', TARGET, '--draft', DRAFT, '--k', 'auto', '--ctx', '512',
    '--port', String(PORT), '--device', 'cpu'], { stdio: ['ignore', 'inherit', 'inherit'], env: { ...process.env, SPECULA_API_KEY: KEY } });
  for (let i = 0; i < 600; i++) {
    try {
      if ((await fetch(`${BASE}/health`)).ok) return;
    } catch { /* not up yet */ }
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error('server did not start');
});

after(() => server?.kill());

const client = new OpenAI({ baseURL: `${BASE}/v1`, apiKey: KEY, maxRetries: 0 });
const greedy = { temperature: 0 };

async function pending() {
  return (await (await fetch(`${BASE}/health`, { headers: { authorization: `Bearer ${KEY}` } })).json()).pending;
}

test('lists the model', async () => {
  const models = await client.models.list();
  assert.deepEqual(models.data.map((m) => m.id), [MODEL_ID]);
});

test('streams a chat completion with provenance and speculative stats', async () => {
  const stream = await client.chat.completions.create({
    model: MODEL_ID, stream: true, max_tokens: 24, ...greedy,
    messages: [{ role: 'user', content: 'Write a Python function that checks whether a string is a palindrome.' }],
    speculative: { k: 4, drafter: 'model' },
  });
  let text = '';
  const sources = new Set();
  const kinds = new Set();
  let last;
  for await (const chunk of stream) {
    text += chunk.choices[0]?.delta?.content ?? '';
    const event = chunk.specula?.event;
    kinds.add(event?.kind);
    for (const t of event?.kind === 'tokens' ? event.tokens : []) {
      sources.add(t.source);
      assert.equal(typeof t.p, 'number');
      if (t.source === 'accepted' || t.source === 'resampled') assert.equal(typeof t.q, 'number');
    }
    last = chunk;
  }
  assert.ok(text.length > 10, text);
  assert.ok(sources.has('accepted'), [...sources].join(','));
  assert.equal(last.choices[0].finish_reason, 'length');
  // The engine's own events ride the chunks unchanged: its start, its tokens, its steps, its end.
  for (const kind of ['started', 'tokens', 'step', 'done']) assert.ok(kinds.has(kind), [...kinds].join(','));
  assert.equal(last.specula.event.kind, 'done');
  assert.equal(last.specula.event.text, text);
  const spec = last.specula.event.stats.speculative;
  for (const key of ['drafted', 'accepted', 'acceptance_rate', 'target_passes', 'plain_steps']) {
    assert.equal(typeof spec[key], 'number', key);
  }
  // 24 tokens time too few plain steps for a speedup figure: the field is there, and null.
  assert.ok('speedup_vs_plain' in spec && (spec.speedup_vs_plain === null || spec.plain_steps >= 3), JSON.stringify(spec));
  assert.ok(spec.accepted > 0 && spec.target_passes < 24);
});

test('a streamed reply of two choices ends each with its own event', async () => {
  const stream = await client.chat.completions.create({
    model: MODEL_ID, stream: true, n: 2, max_tokens: 6, temperature: 1.0, seed: 3,
    messages: [{ role: 'user', content: 'Name a colour.' }],
  });
  const texts = ['', ''];
  const done = [];
  const seeds = [];
  for await (const chunk of stream) {
    const choice = chunk.choices[0];
    if (choice) texts[choice.index] += choice.delta?.content ?? '';
    const event = chunk.specula?.event;
    if (event?.kind === 'started') seeds.push(event.seed);
    if (event?.kind === 'done') done[choice.index] = event;
  }
  assert.equal(done.length, 2);
  // Each choice's end carries its own reply (its text as released) and its own seed started it.
  done.forEach((event, i) => assert.equal(event.text, texts[i], `choice ${i}`));
  assert.deepEqual(seeds, [3, 4]);
});

test('non-streaming chat and text completions carry stats', async () => {
  const chat = await client.chat.completions.create({
    model: MODEL_ID, max_tokens: 8, ...greedy, messages: [{ role: 'user', content: 'Say hello.' }],
  });
  assert.ok(chat.choices[0].message.content.length > 0);
  assert.equal(chat.usage.completion_tokens, chat.specula.stats.generated_tokens);
  const text = await client.completions.create({ model: MODEL_ID, prompt: 'def add(a, b):', max_tokens: 8, ...greedy });
  assert.ok(text.choices[0].text.length > 0);
  assert.ok(text.specula.tokens.length > 0);
});

test('errors have OpenAI shape and status', async () => {
  const bad = await fetch(`${BASE}/v1/chat/completions`, {
    method: 'POST', headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' }, body: '{"model": ',
  });
  assert.equal(bad.status, 400);
  assert.equal((await bad.json()).error.code, 'invalid_json');

  await assert.rejects(
    client.chat.completions.create({ model: 'gpt-4', messages: [{ role: 'user', content: 'hi' }] }),
    (e) => e.status === 404 && e.code === 'model_not_found',
  );
  await assert.rejects(
    client.chat.completions.create({ model: MODEL_ID, messages: [{ role: 'user', content: 'word '.repeat(1000) }] }),
    (e) => e.status === 400 && e.code === 'context_length_exceeded',
  );
  const wrong = new OpenAI({ baseURL: `${BASE}/v1`, apiKey: 'wrong', maxRetries: 0 });
  await assert.rejects(wrong.models.list(), (e) => e.status === 401 && e.code === 'invalid_api_key');
});

test('a client that disconnects stops its generation', async () => {
  const controller = new AbortController();
  const stream = await client.chat.completions.create({
    model: MODEL_ID, stream: true, max_tokens: 400, ...greedy,
    messages: [{ role: 'user', content: 'Write a long essay about the history of computing.' }],
  }, { signal: controller.signal });
  let chunks = 0;
  try {
    for await (const _ of stream) {
      if (++chunks === 3) controller.abort();
    }
  } catch { /* aborted */ }
  // 400 tokens would take minutes here; a cancelled job leaves within a step.
  const started = Date.now();
  while ((await pending()) > 0) {
    assert.ok(Date.now() - started < 15000, 'the engine kept generating for a gone client');
    await new Promise((r) => setTimeout(r, 100));
  }
  const next = await client.chat.completions.create({ model: MODEL_ID, max_tokens: 2, ...greedy, messages: [{ role: 'user', content: 'Hi' }] });
  assert.ok(next.choices[0].message.content !== undefined);
});

test('20 concurrent streams complete in full without interleaving', async () => {
  const prompts = Array.from({ length: 20 }, (_, i) => `Count from ${i} to ${i + 5}, separated by commas.`);
  const request = (content, stream) => client.chat.completions.create({
    model: MODEL_ID, stream, max_tokens: 6, ...greedy, messages: [{ role: 'user', content }],
  });
  const results = await Promise.all(prompts.map(async (content) => {
    const stream = await request(content, true);
    let text = '';
    let ids = new Set();
    let finish;
    for await (const chunk of stream) {
      ids.add(chunk.id);
      text += chunk.choices[0]?.delta?.content ?? '';
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    return { content, text, ids, finish };
  }));
  for (const r of results) {
    assert.equal(r.ids.size, 1, 'one completion id per stream');
    assert.ok(r.finish === 'length' || r.finish === 'stop');
  }
  // Each stream holds exactly its own reply: greedy replies are reproducible, so every
  // stream's text equals the same prompt answered alone.
  for (const r of results.slice(0, 4)) {
    const alone = await request(r.content, false);
    assert.equal(r.text, alone.choices[0].message.content, r.content);
  }
});
