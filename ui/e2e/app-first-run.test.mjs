// The app's first run, as a new user meets it after installing the .deb: no model anywhere, so
// the window opens on the Library with the pair recommended for this machine and one button
// that downloads both (from a stand-in for Hugging Face Hub serving the real files), loads them,
// and the chat works: a reply with provenance colours and the speed panel.
// SPECULA_APP names the app to drive: the installed /usr/bin/specula-app in scripts/test.sh.
// Same set-up as app.test.mjs (tauri-driver, xvfb-run, the models of scripts/fetch-models.sh).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { createReadStream, mkdirSync, statSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { homedir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { fileURLToPath } from 'node:url';
import { scratch } from './scratch.mjs';
import { startDriver, WebDriver } from './webdriver.mjs';
import { appSession } from './app-session.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const REAL_MODELS = process.env.SPECULA_MODELS_DIR ?? join(homedir(), '.cache/specula/models');
const ARTIFACTS = process.env.SPECULA_ARTIFACTS ?? join(here, 'artifacts');
const PORT = 16444 + Math.floor(Math.random() * 500);
// Free memory as the app sees it: room for the 1.5B pair and not the 3B, so the recommendation
// is the pair this test can serve whatever the machine's cores.
const MEMORY_LIMIT = 4500 * 2 ** 20;

const sha256 = async (path) => {
  const hash = createHash('sha256');
  await pipeline(createReadStream(path), hash);
  return hash.digest('hex');
};

// The stand-in Hub: `…/resolve/main/<file>` serves that file of the real models folder with the
// Hub's headers and Range support; it records what was asked for.
const requested = [];
const shas = new Map();
const hub = createServer(async (req, res) => {
  const match = /\/resolve\/main\/([^/?]+)$/.exec(req.url);
  const path = match && join(REAL_MODELS, basename(decodeURIComponent(match[1])));
  let size;
  try {
    size = statSync(path).size;
  } catch {
    res.writeHead(404).end('Entry not found');
    return;
  }
  if (!shas.has(path)) shas.set(path, await sha256(path));
  if (req.method === 'GET') requested.push(basename(path));
  const start = Number(/bytes=(\d+)-/.exec(req.headers.range ?? '')?.[1] ?? 0);
  res.writeHead(start ? 206 : 200, {
    'x-repo-commit': '0123456789abcdef0123456789abcdef01234567',
    'x-linked-etag': `"${shas.get(path)}"`,
    'x-linked-size': String(size),
    'content-length': String(size - start),
    ...(start ? { 'content-range': `bytes ${start}-${size - 1}/${size}` } : {}),
  });
  if (req.method === 'HEAD') return res.end();
  createReadStream(path, { start }).pipe(res);
});
await new Promise((r) => hub.listen(0, '127.0.0.1', r));

const wd = new WebDriver(`http://127.0.0.1:${PORT}`);
const { setSettings, ask, replyEnds, lastReplySources } = appSession(wd);
let driver;

before(async () => {
  assert.ok(process.env.SPECULA_APP, 'set SPECULA_APP to the app to drive');
  mkdirSync(ARTIFACTS, { recursive: true });
  const fresh = scratch('specula-first-run');
  driver = await startDriver(PORT, {
    SPECULA_DATA_DIR: fresh('data'),
    SPECULA_MODELS_DIR: fresh('models'),
    HF_HOME: fresh('hf'),
    HF_ENDPOINT: `http://127.0.0.1:${hub.address().port}`,
    SPECULA_MEMORY_LIMIT: String(MEMORY_LIMIT),
  });
  await wd.start({ 'tauri:options': { application: process.env.SPECULA_APP } });
  await wd.waitFor("return document.body.dataset.ready === 'true'", { timeout: 120_000, what: 'the app to start' });
});

after(async () => {
  await wd.quit();
  driver?.stop();
  hub.close();
  hub.closeAllConnections();
});

test('with no model, the app opens the Library on the recommended pair and one button gets it chatting', async () => {
  await wd.waitFor("return document.querySelector('#library-dialog').open && !document.querySelector('#recommended').hidden", {
    what: 'the Library to open on the recommended pair',
  });
  const facts = await wd.execute("return document.querySelector('#recommended .facts').textContent");
  assert.equal(facts, 'Qwen2.5-Coder-1.5B-Instruct answers, Qwen2.5-Coder-0.5B-Instruct drafts · 1535 MB to download');
  assert.match(await wd.execute("return document.querySelector('#recommended .reason').textContent"), /^\d+ CPU cores and 4\.4 GB free: /);
  writeFileSync(join(ARTIFACTS, 'first-run-library.png'), await wd.screenshot());

  await wd.click('#recommended button');
  await wd.waitFor("return document.querySelector('#recommended .status').textContent.includes('MB/s')", { what: 'download progress' });
  await wd.waitFor("return !document.querySelector('#library-dialog').open", { timeout: 300_000, what: 'both models to download and load' });
  assert.deepEqual(requested, ['qwen2.5-coder-1.5b-instruct-q4_k_m.gguf', 'qwen2.5-coder-0.5b-instruct-q4_k_m.gguf']);
  assert.match(await wd.execute("return document.querySelector('#engine-status').textContent"), /target qwen2\.5-coder-1\.5b.* draft qwen2\.5-coder-0\.5b/);

  // k is fixed so the reply shows drafted tokens whatever auto k decides on this CPU.
  await setSettings({ mode: 'greedy', max_tokens: 64, k: '4' });
  await ask('Write a Python function that returns the sum of a list of numbers.');
  await replyEnds();
  const sources = await lastReplySources();
  assert.ok(sources.includes('accepted'), `draft tokens accepted: ${[...new Set(sources)]}`);
  assert.match(await wd.execute("return document.querySelector('[data-figure=speedup]').textContent"), /^\d+\.\d\dx$/);
  writeFileSync(join(ARTIFACTS, 'first-run-chat.png'), await wd.screenshot());
});
