// The chat flow in headless Debian chromium (playwright-core) against `specula serve --ui` on
// the real Qwen2.5-Coder pair. Needs SPECULA_BIN (the built CLI), the models from
// scripts/fetch-models.sh and a built ui/dist. Screenshots go to SPECULA_ARTIFACTS (default
// ui/e2e/artifacts).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const here = dirname(fileURLToPath(import.meta.url));
const MODELS = process.env.SPECULA_MODELS_DIR ?? join(homedir(), '.cache/specula/models');
const TARGET = join(MODELS, 'qwen2.5-coder-1.5b-instruct-q4_k_m.gguf');
const DRAFT = join(MODELS, 'qwen2.5-coder-0.5b-instruct-q4_k_m.gguf');
const ARTIFACTS = process.env.SPECULA_ARTIFACTS ?? join(here, 'artifacts');
const PORT = 19000 + Math.floor(Math.random() * 1000);
const BASE = `http://127.0.0.1:${PORT}`;
// The server wants a key (from the environment, as users should pass it): the UI must send it.
const KEY = 'browser-e2e-key';
let server;
let browser;
let page;

before(async () => {
  mkdirSync(ARTIFACTS, { recursive: true });
  const bin = process.env.SPECULA_BIN;
  assert.ok(bin, 'set SPECULA_BIN to the built specula binary');
  server = spawn(bin, ['serve', '--model', TARGET, '--draft', DRAFT, '--ctx', '1024', '--port', String(PORT),
    '--device', 'cpu', '--ui', join(here, '..', 'dist')], {
    stdio: ['ignore', 'inherit', 'inherit'],
    env: { ...process.env, SPECULA_API_KEY: KEY },
  });
  for (let i = 0; i < 600; i++) {
    try {
      if ((await fetch(`${BASE}/health`)).ok) break;
    } catch { /* not up yet */ }
    await new Promise((r) => setTimeout(r, 200));
  }
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
      '--disable-sync', '--no-first-run', '--disable-quic'],
  });
  page = await browser.newPage({ viewport: { width: 1100, height: 760 } });
  page.on('pageerror', (e) => console.error('page error:', e));
  await page.goto(BASE);
  await page.waitForSelector('body[data-ready="true"]');
  // Without the key the UI says so, and Settings takes it.
  await page.waitForSelector('#notice[data-code="invalid_api_key"]');
  await setSettings({ api_key: KEY });
  assert.match(await page.textContent('#engine-status'), /qwen2\.5-coder-1\.5b/);
});

after(async () => {
  await browser?.close();
  server?.kill();
});

async function setSettings(values) {
  await page.click('#settings-button');
  for (const [name, value] of Object.entries(values)) {
    const field = page.locator(`#settings-form [name="${name}"]`);
    if ((await field.evaluate((el) => el.tagName)) === 'SELECT') await field.selectOption(String(value));
    else await field.fill(String(value));
  }
  await page.click('#settings-save');
  await page.waitForSelector('#settings-dialog', { state: 'hidden' });
}

let repliesBefore = 0;

async function ask(text) {
  repliesBefore = Number((await page.getAttribute('body', 'data-replies')) ?? 0);
  await page.fill('#prompt', text);
  await page.press('#prompt', 'Enter');
}

async function replyEnds() {
  await page.waitForFunction((n) => Number(document.body.dataset.replies ?? 0) > n, repliesBefore, { timeout: 300_000 });
}

const lastReply = () => page.locator('#messages .message.assistant').last();

test('a reply streams with provenance classes, the speedup and a summary', async () => {
  // k is fixed: on a CPU where drafting does not pay, auto (the default) probes once and then
  // decodes plain, and this reply is here to show the colours of drafted tokens.
  await setSettings({ mode: 'greedy', max_tokens: 64, k: '4', draft: `model:${(await page.evaluate(async (key) => (await (await fetch('/health', { headers: { authorization: `Bearer ${key}` } })).json()).draft, KEY))}` });
  await ask('Write a Python function that returns the sum of a list of numbers.');
  // While it streams: tokens appear in the DOM with their classes.
  await page.waitForSelector('#messages .message.assistant.streaming .tok');
  await replyEnds();
  const sources = await lastReply().locator('.tok').evaluateAll((spans) => spans.map((s) => s.dataset.source));
  assert.ok(sources.length >= 10, `tokens rendered: ${sources.length}`);
  assert.ok(sources.some((s) => s === 'accepted'), `some draft tokens accepted: ${[...new Set(sources)]}`);
  assert.ok(sources.every((s) => ['accepted', 'resampled', 'bonus', 'target'].includes(s)));
  const title = await lastReply().locator('.tok.src-accepted').first().getAttribute('title');
  assert.match(title, /draft accepted · p \d\.\d{3} · q \d\.\d{3} · accept min\(1, p\/q\) = \d\.\d{3}/);
  // The code block reads as code and keeps its provenance: syntax colours inside the token spans.
  const keywords = await lastReply().locator('pre .tok .hljs-keyword').allTextContents();
  assert.ok(keywords.includes('def') || keywords.includes('return'), `keywords coloured: ${keywords}`);
  assert.match(await page.textContent('[data-figure="speedup"]'), /^\d+\.\d\dx$/);
  assert.match(await page.textContent('#summary'), /(faster than plain|of plain)/);
  assert.match(await lastReply().locator('.reply-summary').textContent(), /accepted.*draft model · k 4 · greedy/);
  await page.screenshot({ path: join(ARTIFACTS, 'browser-light.png') });
  await page.click('#theme-toggle');
  assert.equal(await page.getAttribute('html', 'data-theme'), 'dark');
  await page.screenshot({ path: join(ARTIFACTS, 'browser-dark.png') });
  await page.click('#theme-toggle');
});

test('plain reading hides the colours and renders markdown with highlighted code', async () => {
  await page.uncheck('#colours-toggle');
  assert.equal(await lastReply().locator('.tok').count(), 0);
  assert.ok((await lastReply().locator('pre code.hljs').count()) >= 1, 'a highlighted code block');
  assert.ok((await lastReply().locator('pre .copy').count()) >= 1, 'a copy button');
  await page.check('#colours-toggle');
  assert.ok((await lastReply().locator('.tok').count()) > 0);
});

test('stop ends a reply mid-way and the engine is free at once', async () => {
  await setSettings({ max_tokens: 400 });
  await ask('Write a long essay about the history of computing, from Babbage to today.');
  await page.waitForSelector('#stop', { state: 'visible' });
  await page.waitForFunction(() => document.querySelectorAll('#messages .message.assistant.streaming .tok').length >= 4);
  await page.click('#stop');
  await replyEnds();
  assert.match(await lastReply().locator('.reply-summary').textContent(), /stopped/);
  const tokens = await lastReply().locator('.tok').count();
  assert.ok(tokens >= 4 && tokens < 400, `kept ${tokens} streamed tokens`);
  // The engine sees the closed stream at its next token and is free for the next request.
  let pending = 1;
  for (let i = 0; i < 50 && pending > 0; i++) {
    pending = (await (await fetch(`${BASE}/health`, { headers: { authorization: `Bearer ${KEY}` } })).json()).pending;
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.equal(pending, 0);
});

test('the next reply uses changed k and drafter', async () => {
  await setSettings({ max_tokens: 24, k: '2', draft: 'lookup' });
  const request = page.waitForRequest((r) => r.url().endsWith('/v1/chat/completions'));
  await ask('Repeat this sentence exactly: the quick brown fox jumps over the lazy dog.');
  const body = JSON.parse((await request).postData());
  assert.deepEqual(body.speculative, { k: 2, mode: 'greedy', drafter: 'lookup' });
  await replyEnds();
  assert.match(await lastReply().locator('.reply-summary').textContent(), /prompt lookup · k 2 · greedy/);
});

test('Regenerate keeps the first answer in the browser too: ◀ goes back to it', async () => {
  await setSettings({ k: '3' });
  repliesBefore = Number((await page.getAttribute('body', 'data-replies')) ?? 0);
  await lastReply().locator('.regenerate').click();
  await replyEnds();
  assert.equal(await lastReply().locator('.branch-of').textContent(), '2/2');
  assert.match(await lastReply().locator('.reply-summary').textContent(), /k 3 · greedy/);
  await lastReply().locator('[aria-label="Previous branch"]').click();
  await page.waitForFunction(() => [...document.querySelectorAll('#messages .message.assistant')].pop()?.querySelector('.branch-of')?.textContent === '1/2');
  assert.match(await lastReply().locator('.reply-summary').textContent(), /k 2 · greedy/);
  await page.screenshot({ path: join(ARTIFACTS, 'browser-branches.png') });
});

test('a prompt longer than the context gives a readable error and the app keeps working', async () => {
  // The server's context is 1,024 (--ctx); the chat asks for the API's own behaviour.
  await setSettings({ overflow: 'stop' });
  await ask('word '.repeat(1500));
  await replyEnds();
  await page.waitForSelector('#notice:not([hidden])');
  assert.match(await page.textContent('#notice'), /context/i);
  // Nothing is lost: the question is back in the composer and not left in the chat.
  assert.equal((await page.inputValue('#prompt')).length, 'word '.repeat(1500).trim().length);
  assert.equal(await lastReply().locator('.reply-summary').textContent().then((t) => /failed/.test(t)), false);
  await setSettings({ max_tokens: 8, draft: 'none' });
  await ask('Say hi.');
  await replyEnds();
  const sources = await lastReply().locator('.tok').evaluateAll((spans) => spans.map((s) => s.dataset.source));
  assert.ok(sources.length > 0 && sources.every((s) => s === 'target'), `plain tokens: ${sources}`);
});

test('under truncate-middle the same prompt is answered, with a marker where it was cut', async () => {
  await setSettings({ overflow: 'truncate-middle', max_tokens: 4 });
  await ask(`${'word '.repeat(1500)}\nHow many times is "word" written above?`);
  await replyEnds();
  const marker = page.locator('#messages > .trim-marker');
  assert.match(await marker.textContent(), /tokens from the middle of the prompt left out of the model's view/);
  assert.ok((await lastReply().locator('.tok').count()) > 0, 'an answer');
  await marker.scrollIntoViewIfNeeded();
  await page.screenshot({ path: join(ARTIFACTS, 'browser-trimmed.png') });
  await setSettings({ max_tokens: 8 });
});

test('after a reload the conversation is there with its colours', async () => {
  await page.reload();
  await page.waitForSelector('body[data-ready="true"]');
  assert.ok((await page.locator('#conversation-list li').count()) >= 1);
  await page.locator('#conversation-list li .open').first().click();
  assert.ok((await page.locator('#messages .tok.src-accepted').count()) > 0, 'accepted tokens still coloured');
  assert.equal(await page.locator('#messages .branch-of').first().textContent(), '1/2', 'both answers kept, the first shown');
  await page.fill('#search', 'no such conversation');
  await page.waitForFunction(() => document.querySelectorAll('#conversation-list li').length === 0);
  await page.fill('#search', '');
});

test('a reply that thinks first folds its thinking under "Thought for N s", streamed live', async () => {
  // The coder model follows this note as a reasoning model writes: <think>…</think>, then the answer.
  await page.click('#new-chat');
  await page.click('#system-button');
  await page.fill('#system-form [name="system"]',
    'You think before you answer. Begin every reply with <think>, write your reasoning, close it with </think>, then give the answer.');
  await page.click('#system-form [type="submit"]');
  await setSettings({ max_tokens: 200, overflow: 'stop' });
  await ask('What is 17 times 3?');
  // While it thinks, the block is open and grows.
  await page.waitForSelector('#messages .message.assistant.streaming details.thinking[open] .thinking-text:not(:empty)');
  await replyEnds();
  const block = lastReply().locator('details.thinking');
  assert.match(await block.locator('summary').textContent(), /^Thought for \d+\.\d s$/);
  assert.equal(await block.evaluate((d) => d.open), false, 'folded once the thinking is over');
  const thinking = await block.locator('.thinking-text').textContent();
  assert.match(thinking, /17/);
  assert.doesNotMatch(await lastReply().locator('.body').textContent(), /<\/?think>/, 'no markers shown');
  await block.locator('summary').click();
  await page.screenshot({ path: join(ARTIFACTS, 'browser-thinking.png') });
  await setSettings({ max_tokens: 8 });
});
