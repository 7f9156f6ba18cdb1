// The desktop app on a remote engine: a second `specula serve` (the real Qwen2.5-Coder pair,
// k 4) by default, or llama.cpp's llama-server when LLAMA_SERVER names its binary (the
// documented run in docs/remote.md). The app has no model of its own, so its first run opens
// the Library, where the remote is connected (a wrong key refused as such); its model is
// chosen in Settings; a reply streams with the remote's colours and acceptance; Regenerate asks
// again; Stop stops it;
// the remote going down mid-reply keeps the partial reply, marked. Same set-up as
// app.test.mjs (SPECULA_APP, tauri-driver, xvfb-run); the server binary is SPECULA_BIN, or
// `specula` beside the app.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { writeFileSync, mkdirSync } from 'node:fs';
import { createServer } from 'node:net';
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { scratch } from './scratch.mjs';
import { startDriver, WebDriver } from './webdriver.mjs';
import { appSession } from './app-session.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const REAL_MODELS = process.env.SPECULA_MODELS_DIR ?? join(homedir(), '.cache/specula/models');
const ARTIFACTS = process.env.SPECULA_ARTIFACTS ?? join(here, 'artifacts');
const TARGET = join(REAL_MODELS, 'qwen2.5-coder-1.5b-instruct-q4_k_m.gguf');
const DRAFT = join(REAL_MODELS, 'qwen2.5-coder-0.5b-instruct-q4_k_m.gguf');
const LLAMA = process.env.LLAMA_SERVER;
// LLAMA_DRAFT=0: llama-server without a draft model, which reports no drafting.
const DRAFTS = process.env.LLAMA_DRAFT !== '0';
const ENGINE = LLAMA ? (DRAFTS ? 'llama' : 'llama-plain') : 'specula';
const KEY = 'sk-remote-test';
const PORT = 16444 + Math.floor(Math.random() * 500);
const folder = scratch('specula-app-remote');
const keyFile = join(folder('key'), 'key');
writeFileSync(keyFile, `${KEY}\n`);

const freePort = () =>
  new Promise((resolve) => {
    const s = createServer().listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });

let remote;
let remoteUrl;

/** The remote engine on a free port, answered once its model list comes back. */
async function startRemote() {
  const port = await freePort();
  remoteUrl = `http://127.0.0.1:${port}`;
  const [command, args] = LLAMA
    ? [LLAMA, ['-m', TARGET, ...(DRAFTS ? ['-md', DRAFT, '--spec-type', 'draft-simple', '--spec-draft-n-max', '8'] : []), '--port', String(port), '--api-key', KEY, '-c', '4096']]
    : [
        process.env.SPECULA_BIN ?? join(dirname(process.env.SPECULA_APP), 'specula'),
        ['serve', '--device', 'cpu', '--port', String(port), '--model', TARGET, '--draft', DRAFT, '--k', '4', '--api-key-file', keyFile],
      ];
  remote = spawn(command, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  remote.stderr.resume(); // its log is read, or its writes would block
  for (let i = 0; i < 600; i++) {
    const ok = await fetch(`${remoteUrl}/v1/models`, { headers: { authorization: `Bearer ${KEY}` } }).then(
      (r) => r.ok,
      () => false,
    );
    if (ok) return;
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`${ENGINE} did not start`);
}

const wd = new WebDriver(`http://127.0.0.1:${PORT}`);
let driver;

before(async () => {
  assert.ok(process.env.SPECULA_APP, 'set SPECULA_APP to the built app');
  mkdirSync(ARTIFACTS, { recursive: true });
  await startRemote();
  // No models here: the app's first run opens the Library.
  driver = await startDriver(PORT, { SPECULA_DATA_DIR: folder('data'), SPECULA_MODELS_DIR: folder('models'), HF_HOME: folder('hf') });
  await wd.start({ 'tauri:options': { application: process.env.SPECULA_APP } });
  await wd.waitFor("return document.body.dataset.ready === 'true'", { timeout: 120_000, what: 'the app to start' });
});

after(async () => {
  await wd.quit();
  driver?.stop();
  remote?.kill('SIGKILL');
});

const { ask, replyEnds, lastReplyText, lastReplySources, invoke } = appSession(wd);

async function connect(key) {
  await wd.execute(
    `const [url, key] = arguments;
     document.querySelector('#add-connection [name=url]').value = url;
     document.querySelector('#add-connection [name=key]').value = key;
     document.querySelector('#add-connection-status').dataset.state = '';
     document.querySelector('#add-connection button').click();`,
    remoteUrl,
    key,
  );
  await wd.waitFor("return ['added', 'error'].includes(document.querySelector('#add-connection-status').dataset.state)", { what: 'the connection' });
  return wd.execute("return document.querySelector('#add-connection-status').textContent");
}

test('the remote is connected from the Library: a wrong key is refused as such, the right one lists its models', async () => {
  await wd.waitFor("return document.querySelector('#library-dialog').open", { what: 'the first run to open the Library' });
  assert.match(await connect('sk-wrong'), /refused the API key \(401\)/);
  assert.match(await connect(KEY), LLAMA ? /^connected: llama\.cpp · 1 model · \d+ ms round trip/ : /^connected: Specula · 1 model · \d+ ms round trip/);
  await wd.waitFor("return document.querySelector('li.connection')?.dataset.state === 'ready'", { what: 'the connection checked' });
  // The key is kept apart from the history and settings, which only know there is one.
  const { value: connections } = await invoke('list_connections');
  assert.equal(connections.length, 1);
  assert.equal(connections[0].has_key, true);
  assert.ok(!JSON.stringify(connections).includes(KEY));
  await wd.execute("document.querySelector('li.connection').scrollIntoView()");
  writeFileSync(join(ARTIFACTS, `app-remote-${ENGINE}-library.png`), await wd.screenshot());
  await wd.execute("document.querySelector('#library-close').click()");
});

test('with the remote model as target, a reply streams with the remote figures, and Stop stops it', async () => {
  await wd.click('#settings-button');
  await wd.waitFor("return document.querySelector('#settings-dialog').open && [...document.querySelectorAll('#settings-form [name=target] option')].some((o) => o.value.startsWith('remote:'))", {
    what: 'the remote model offered',
  });
  await wd.execute(
    `const form = document.querySelector('#settings-form');
     const target = form.querySelector('[name=target]');
     target.value = [...target.options].find((o) => o.value.startsWith('remote:')).value;
     target.dispatchEvent(new Event('change'));
     form.querySelector('[name=mode]').value = 'greedy';
     form.querySelector('[name=max_tokens]').value = '96';`,
  );
  // The local drafting settings do not apply to a remote, and say so.
  assert.equal(await wd.execute("return document.querySelector('#settings-form [name=draft]').disabled && document.querySelector('#settings-form [name=k]').disabled"), true);
  assert.match(await wd.execute("return document.querySelector('#draft-note').textContent"), /remote engine drafts/);
  await wd.execute("document.querySelector('#settings-save').click()");
  await wd.waitFor("return !document.querySelector('#settings-dialog').open", { timeout: 60_000, what: 'settings to apply' });
  assert.match(await wd.execute("return document.querySelector('#engine-status').textContent"), /@ 127\.0\.0\.1:\d+ · draft: the remote's · remote, \d+ ms round trip/);

  await ask('Write a Python function that returns the sum of a list of numbers.');
  await replyEnds();
  const sources = await lastReplySources();
  assert.ok(sources.length >= 10, `tokens rendered: ${sources.length}`);
  const summary = await lastReplyText('.reply-summary');
  assert.match(summary, /tok\/s measured here/);
  assert.match(summary, DRAFTS ? /of the remote's drafts accepted/ : /the remote reports no drafting/);
  assert.match(summary, /remote .* @ 127\.0\.0\.1:\d+ · greedy/);
  // Another Specula reports each token's provenance: its drafted tokens are coloured.
  if (!LLAMA) assert.ok(sources.includes('accepted'), `sources: ${[...new Set(sources)]}`);
  writeFileSync(join(ARTIFACTS, `app-remote-${ENGINE}.png`), await wd.screenshot());

  // Regenerate asks the remote again, in place of the last reply.
  const replies = await wd.execute("return document.querySelectorAll('#messages .message.assistant').length");
  const ended = await wd.execute('return Number(document.body.dataset.replies ?? 0)');
  await wd.execute("[...document.querySelectorAll('#messages .regenerate')].pop().click()");
  await wd.waitFor(`return Number(document.body.dataset.replies ?? 0) > ${ended}`, { timeout: 120_000, what: 'the regenerated reply' });
  assert.equal(await wd.execute("return document.querySelectorAll('#messages .message.assistant').length"), replies);
  assert.match(await lastReplyText('.reply-summary'), /tok\/s measured here.*remote .* @ 127\.0\.0\.1/);

  await setMaxTokens(400);
  await ask('Write a long essay about the history of computing, from Babbage to today.');
  await wd.waitFor("return document.querySelectorAll('#messages .message.assistant.streaming .tok').length >= 4", { timeout: 120_000 });
  await wd.click('#stop');
  await replyEnds();
  assert.match(await lastReplyText('.reply-summary'), /stopped/);
  const n = (await lastReplySources()).length;
  assert.ok(n >= 4 && n < 400, `kept ${n} streamed tokens`);
});

async function setMaxTokens(n) {
  await wd.click('#settings-button');
  await wd.waitFor("return document.querySelector('#settings-dialog').open");
  await wd.execute(`document.querySelector('#settings-form [name=max_tokens]').value = '${n}'; document.querySelector('#settings-save').click();`);
  await wd.waitFor("return !document.querySelector('#settings-dialog').open", { timeout: 60_000 });
}

test('the remote going down mid-reply keeps the partial reply, marked, and says why', async () => {
  await ask('Write a long essay about the history of mathematics.');
  await wd.waitFor("return document.querySelectorAll('#messages .message.assistant.streaming .tok').length >= 4", { timeout: 120_000 });
  remote.kill('SIGKILL');
  await replyEnds();
  const notice = await wd.execute("return document.querySelector('#notice').textContent");
  assert.match(notice, /closed the stream before the reply ended|connection to the remote dropped/);
  assert.match(await lastReplyText('.reply-summary'), /failed/);
  const id = await wd.execute("return Number(document.querySelector('#conversation-list li.current').dataset.id)");
  const { value: conversation } = await invoke('get_conversation', { id });
  const last = conversation.messages.at(-1);
  assert.equal(last.finish_reason, 'error');
  assert.ok(last.tokens.length >= 4 && last.content.length > 0, `kept ${last.tokens.length} tokens`);
  writeFileSync(join(ARTIFACTS, `app-remote-${ENGINE}-down.png`), await wd.screenshot());

  // With the remote gone, the next reply fails at once with the reason.
  await ask('Hello?');
  await replyEnds();
  assert.match(await wd.execute("return document.querySelector('#notice').textContent"), /refused the connection/);
});
