// The desktop app in its real webview: tauri-driver hands the session to WebKitWebDriver,
// which drives the built app (target/debug/specula-app) on the real Qwen2.5-Coder pair.
// Run under a display (xvfb-run). Needs SPECULA_APP (the built app), tauri-driver on PATH or
// in TAURI_DRIVER, and the models from scripts/fetch-models.sh. Screenshots go to
// SPECULA_ARTIFACTS (default ui/e2e/artifacts).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { createServer } from 'node:http';
import { existsSync, mkdirSync, readdirSync, readFileSync, realpathSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { scratch } from './scratch.mjs';
import { startDriver, WebDriver } from './webdriver.mjs';
import { appSession } from './app-session.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const REAL_MODELS = process.env.SPECULA_MODELS_DIR ?? join(homedir(), '.cache/specula/models');
const ARTIFACTS = process.env.SPECULA_ARTIFACTS ?? join(here, 'artifacts');
const PORT = 14444 + Math.floor(Math.random() * 500);
const TARGET = 'qwen2.5-coder-1.5b-instruct-q4_k_m.gguf';
const DRAFT = 'qwen2.5-coder-0.5b-instruct-q4_k_m.gguf';
const SMOLLM = 'SmolLM2-135M-Instruct.Q4_1.gguf';

// A models folder of our own: the real models, and one file that only pretends to be a model.
const folder = scratch('specula-app-test');
const models = folder('models');
for (const name of [TARGET, DRAFT, SMOLLM]) symlinkSync(join(REAL_MODELS, name), join(models, name));
writeFileSync(join(models, 'broken.gguf'), 'not a model\n'.repeat(100));
// A real model's first 8 MiB: its header reads, its weights are missing.
writeFileSync(join(models, 'truncated.gguf'), readFileSync(join(REAL_MODELS, SMOLLM)).subarray(0, 8 << 20));
// A folder of the user's own, outside the model folders: a model and a file that pretends.
const own = folder('own');
const ownModel = join(own, 'my-model.gguf');
symlinkSync(join(REAL_MODELS, SMOLLM), ownModel);
const ownFake = join(own, 'fake.gguf');
writeFileSync(ownFake, 'not a model either\n'.repeat(100));
const data = folder('data');
const hfHome = folder('hf');

// A stand-in for Hugging Face Hub: every `resolve` URL serves the real SmolLM2 file with the
// Hub's headers and Range support, slowly enough (about 3 s) to watch and to cancel.
const hubFile = readFileSync(join(REAL_MODELS, SMOLLM));
const hubSha = createHash('sha256').update(hubFile).digest('hex');
const hub = createServer((req, res) => {
  if (!/\/resolve\/main\//.test(req.url)) {
    res.writeHead(404).end('Entry not found');
    return;
  }
  const start = Number(/bytes=(\d+)-/.exec(req.headers.range ?? '')?.[1] ?? 0);
  res.writeHead(start ? 206 : 200, {
    'x-repo-commit': '0123456789abcdef0123456789abcdef01234567',
    'x-linked-etag': `"${hubSha}"`,
    'x-linked-size': String(hubFile.length),
    'content-length': String(hubFile.length - start),
    ...(start ? { 'content-range': `bytes ${start}-${hubFile.length - 1}/${hubFile.length}` } : {}),
  });
  if (req.method === 'HEAD') return res.end();
  let at = start;
  const next = () => {
    if (at >= hubFile.length || res.destroyed) return res.end();
    res.write(hubFile.subarray(at, (at += 1 << 20)));
    setTimeout(next, 30);
  };
  next();
});
await new Promise((r) => hub.listen(0, '127.0.0.1', r));
const hubUrl = `http://127.0.0.1:${hub.address().port}`;

let driver;
const wd = new WebDriver(`http://127.0.0.1:${PORT}`);

async function launch() {
  await wd.start({ 'tauri:options': { application: process.env.SPECULA_APP } });
  await wd.waitFor("return document.body.dataset.ready === 'true'", { timeout: 120_000, what: 'the app to start' });
}

before(async () => {
  assert.ok(process.env.SPECULA_APP, 'set SPECULA_APP to the built app');
  mkdirSync(ARTIFACTS, { recursive: true });
  driver = await startDriver(PORT, { SPECULA_DATA_DIR: data, SPECULA_MODELS_DIR: models, HF_ENDPOINT: hubUrl, HF_HOME: hfHome });
  await launch();
});

after(async () => {
  await wd.quit();
  driver?.stop();
  hub.close();
  hub.closeAllConnections();
});

const { setSettings, ask, replyEnds, lastReplyText, lastReplySources, invoke } = appSession(wd);

test('a reply streams with provenance classes and the speedup', async () => {
  // k is fixed: on a CPU where drafting does not pay, auto (the default) probes once and then
  // decodes plain, and this reply is here to show the colours of drafted tokens.
  await setSettings({ mode: 'greedy', max_tokens: 64, k: '4' });
  await ask('Write a Python function that returns the sum of a list of numbers.');
  await wd.waitFor("return document.querySelector('#messages .message.assistant.streaming .tok')", { timeout: 180_000, what: 'streamed tokens' });
  await replyEnds();
  const sources = await lastReplySources();
  assert.ok(sources.length >= 10, `tokens rendered: ${sources.length}`);
  assert.ok(sources.includes('accepted'), `draft tokens accepted: ${[...new Set(sources)]}`);
  assert.match(await wd.execute("return document.querySelector('[data-figure=speedup]').textContent"), /^\d+\.\d\dx$/);
  // The app's default drafter: the draft model with copies beside it.
  assert.match(await lastReplyText('.reply-summary'), /accepted.*draft model \+ copies · k 4 · greedy/);
  writeFileSync(join(ARTIFACTS, 'app-light.png'), await wd.screenshot());
  await wd.click('#theme-toggle');
  writeFileSync(join(ARTIFACTS, 'app-dark.png'), await wd.screenshot());
  await wd.click('#theme-toggle');
});

test('stop ends a reply mid-way', async () => {
  await setSettings({ max_tokens: 400 });
  await ask('Write a long essay about the history of computing, from Babbage to today.');
  await wd.waitFor("return document.querySelectorAll('#messages .message.assistant.streaming .tok').length >= 4", { timeout: 180_000 });
  await wd.click('#stop');
  await replyEnds();
  assert.match(await lastReplyText('.reply-summary'), /stopped/);
  const n = (await lastReplySources()).length;
  assert.ok(n >= 4 && n < 400, `kept ${n} streamed tokens`);
});

test('the next reply uses the k and drafter chosen in settings', async () => {
  await setSettings({ max_tokens: 24, k: '2', draft: 'lookup' });
  await ask('Repeat this sentence exactly: the quick brown fox jumps over the lazy dog.');
  await replyEnds();
  assert.match(await lastReplyText('.reply-summary'), /prompt lookup · k 2 · greedy/);
  const id = await wd.execute("return Number(document.querySelector('#conversation-list li.current').dataset.id)");
  const { value: conversation } = await invoke('get_conversation', { id });
  const stats = conversation.messages.at(-1).stats.speculative;
  assert.equal(stats.drafter, 'lookup');
  assert.ok(stats.k_max <= 2, `k_max ${stats.k_max}`);
});

test('Regenerate keeps every answer: ◀ 2/3 ▶ switches back to the first, Fork copies a branch, a delete offers Undo', async () => {
  const id = await wd.execute("return Number(document.querySelector('#conversation-list li.current').dataset.id)");
  const lastReply = "[...document.querySelectorAll('#messages .message.assistant')].pop()";
  for (const k of ['3', '4']) {
    await setSettings({ k });
    const replies = await wd.execute('return Number(document.body.dataset.replies ?? 0)');
    await wd.execute(`${lastReply}.querySelector('.regenerate').click()`);
    await wd.waitFor(`return Number(document.body.dataset.replies ?? 0) > ${replies}`, { timeout: 180_000, what: 'the regenerated reply' });
  }
  assert.equal(await lastReplyText('.branch-of'), '3/3');
  assert.match(await lastReplyText('.reply-summary'), /k 4 · greedy/);
  writeFileSync(join(ARTIFACTS, 'app-branches.png'), await wd.screenshot());
  // Back to the first answer, the one made with k 2, one ◀ at a time.
  for (const at of ['2/3', '1/3']) {
    await wd.execute(`${lastReply}.querySelector('[aria-label="Previous branch"]').click()`);
    await wd.waitFor(`return ${lastReply}.querySelector('.branch-of')?.textContent === '${at}'`, { what: `branch ${at}` });
  }
  assert.match(await lastReplyText('.reply-summary'), /prompt lookup · k 2 · greedy/);
  const { value: conversation } = await invoke('get_conversation', { id });
  const first = conversation.messages.at(-1);
  assert.equal(first.siblings.length, 3, 'all three answers kept');
  assert.equal(first.id, first.siblings[0], 'the history shows the first answer again');
  assert.ok(first.tokens.length > 0, 'with its tokens and their provenance');

  // Fork the chat at its question: a new chat with that question alone.
  await wd.execute("document.querySelector('#messages .message.user .fork').click()");
  await wd.waitFor("return document.querySelector('#title').textContent.endsWith('(fork)')", { what: 'the fork' });
  assert.equal(await wd.execute("return document.querySelectorAll('#messages .message').length"), 1);
  writeFileSync(join(ARTIFACTS, 'app-fork.png'), await wd.screenshot());
  // Delete the fork: an Undo brings it back.
  await wd.execute(`document.querySelector('#conversation-list li.current [aria-label="Delete"]').click()`);
  await wd.waitFor("return !document.querySelector('#toast').hidden", { what: 'the Undo toast' });
  writeFileSync(join(ARTIFACTS, 'app-undo.png'), await wd.screenshot());
  await wd.execute("document.querySelector('#toast .undo').click()");
  await wd.waitFor("return document.querySelector('#title').textContent.endsWith('(fork)')", { what: 'the fork back' });
  // Deleted again and the toast dismissed, the fork is gone for good: the tests after this one
  // find the chats they expect.
  await wd.execute(`document.querySelector('#conversation-list li.current [aria-label="Delete"]').click()`);
  await wd.waitFor("return !document.querySelector('#toast').hidden", { what: 'the Undo toast again' });
  await wd.execute(`document.querySelector('#toast [aria-label="Dismiss"]').click()`);
  await wd.waitFor("return document.querySelector('#toast').hidden", { what: 'the toast gone' });
  const { value: listed } = await invoke('list_conversations', { query: '(fork)' });
  assert.deepEqual(listed, []);
  await wd.execute(`document.querySelector('#conversation-list li .open').click()`);
  await wd.waitFor(`return ${lastReply}.querySelector('.branch-of')?.textContent === '1/3'`, { what: 'the first chat again' });
});

test('two chats stream at once, a regenerate in one while the other streams, each as it is alone', async () => {
  await setSettings({ max_tokens: 96 });
  const current = () => wd.execute("return Number(document.querySelector('#conversation-list li.current').dataset.id)");
  const repliesNow = () => wd.execute('return Number(document.body.dataset.replies ?? 0)');
  const stored = async (id) => (await invoke('get_conversation', { id })).value.messages.at(-1);
  const open = async (id) => {
    await wd.execute(`document.querySelector('#conversation-list li[data-id="${id}"] .open').click()`);
    await wd.waitFor(`return Number(document.querySelector('#conversation-list li.current')?.dataset.id) === ${id}`, { what: `chat ${id}` });
  };
  const regenerate = () => wd.execute("[...document.querySelectorAll('#messages .message.assistant')].pop().querySelector('.regenerate').click()");
  const streamed = (n) =>
    wd.waitFor(`return document.querySelectorAll('#messages .message.assistant.streaming .tok').length >= ${n}`, { timeout: 180_000, what: 'streamed tokens' });
  // Each alone first, in a chat of its own.
  const chats = [];
  for (const question of ['Describe the water cycle to a ten-year-old.', 'Give three tips for writing a good cover letter.']) {
    await wd.click('#new-chat');
    await ask(question);
    await replyEnds();
    chats.push(await current());
  }
  const alone = [(await stored(chats[0])).content, (await stored(chats[1])).content];
  // Both again at once: the first chat regenerates, and while it streams the second does too.
  const before = await repliesNow();
  await open(chats[0]);
  await regenerate();
  await streamed(2);
  await open(chats[1]);
  await regenerate();
  await streamed(2);
  const first = await stored(chats[0]);
  assert.ok(!first.finish_reason, `the first chat still streams beside the second (it ended: ${first.finish_reason})`);
  writeFileSync(join(ARTIFACTS, 'app-two-chats.png'), await wd.screenshot());
  await wd.waitFor(`return Number(document.body.dataset.replies ?? 0) >= ${before + 2}`, { timeout: 300_000, what: 'both replies to end' });
  for (const [i, id] of chats.entries()) {
    const reply = await stored(id);
    assert.equal(reply.siblings.length, 2, `chat ${i} keeps both answers`);
    assert.equal(reply.content, alone[i], `chat ${i}'s reply beside the other is its reply alone`);
  }
});

test('bad models, bad drafts and long prompts give readable errors and the app keeps working', async () => {
  const { value: offered } = await invoke('list_models', { target: null });
  const broken = offered.find((m) => m.path.endsWith('broken.gguf'));
  assert.equal(broken.runnable, false);
  assert.match(broken.reason, /not a GGUF model file/);
  const smol = offered.find((m) => m.path.endsWith(SMOLLM));
  assert.equal(smol.compatible, false);
  assert.match(smol.reason, /token \d+ is/);
  // The settings dialog greys out what cannot draft and says why.
  // Wait for the dialog itself: its draft options may still be there from the last opening
  // while this one is still listing models, and a cancel before it opens would leave it open.
  await wd.click('#settings-button');
  await wd.waitFor(
    "return document.querySelector('#settings-dialog').open && document.querySelector('#settings-form [name=draft]').options.length > 2",
    { what: 'the settings dialog' },
  );
  assert.equal(await wd.execute(`return [...document.querySelectorAll('#settings-form [name=draft] option')].find((o) => o.value.endsWith('${SMOLLM}')).disabled`), true);
  assert.match(await wd.execute("return document.querySelector('#draft-note').textContent"), /cannot pair/);
  await wd.execute("document.querySelector('#settings-cancel').click()");
  await wd.waitFor("return !document.querySelector('#settings-dialog').open", { what: 'the settings dialog to close' });

  const { value: settings } = await invoke('get_settings');
  // Paths from the webview are confined to the model folders.
  for (const outside of ['/etc/passwd', join(models, '..', 'x.gguf'), join(homedir(), '.ssh', 'id_rsa')]) {
    const refused = await invoke('apply_models', { settings: { ...settings, target: outside } });
    assert.equal(refused.failure?.code, 'path_not_allowed', outside);
    assert.doesNotMatch(refused.failure.message, /bytes|starts with/);
  }
  assert.equal((await invoke('diagnose', { target: '/etc/passwd', draft: '/etc/shadow' })).failure?.code, 'path_not_allowed');
  assert.equal((await invoke('save_settings', { settings: { ...settings, draft: '/etc/passwd' } })).failure?.code, 'path_not_allowed');
  const corrupt = await invoke('apply_models', { settings: { ...settings, target: join(models, 'broken.gguf') } });
  assert.equal(corrupt.failure?.code, 'not_gguf');
  const mismatched = await invoke('apply_models', { settings: { ...settings, drafter: 'model', draft: join(models, SMOLLM) } });
  assert.equal(mismatched.failure?.code, 'incompatible_draft');
  assert.match(mismatched.failure.message, /the draft cannot pair with the target/);

  // Longer than any context the 1.5B target gets (its trained 32,768): under `stop`, the
  // error; the question stays in the composer.
  await setSettings({ overflow: 'stop' });
  await ask('word '.repeat(40000));
  await replyEnds();
  assert.match(await wd.execute("return document.querySelector('#notice').textContent"), /context/);
  assert.equal(await wd.execute("return document.querySelector('#prompt').value.length"), 'word '.repeat(40000).trim().length);
  await setSettings({ overflow: 'truncate-middle' });

  await setSettings({ max_tokens: 8, draft: 'none' });
  await ask('Say hi.');
  await replyEnds();
  const sources = await lastReplySources();
  assert.ok(sources.length > 0 && sources.every((s) => s === 'target'), `plain tokens after the errors: ${sources}`);
});

/** Every file under the Hugging Face cache of this run. */
function hubFiles(dir = join(hfHome, 'hub')) {
  if (!existsSync(dir)) return [];
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? hubFiles(join(dir, e.name)) : [join(dir, e.name)],
  );
}

test('the library downloads a catalogue model with live progress, cancels another, and the doctor explains a pair', async () => {
  await wd.click('#library-button');
  await wd.waitFor("return document.querySelector('#library-dialog').open && document.querySelectorAll('.catalogue-entry').length > 10", {
    what: 'the catalogue',
  });
  const row = (file) => `.catalogue-entry[data-file="${file}"]`;
  const status = (file) => wd.execute(`return document.querySelector('${row(file)} .status').textContent`);

  // A download that is cancelled part-way leaves nothing behind.
  const cancelled = 'gemma-3-270m-it-Q4_K_M.gguf';
  await wd.execute(`document.querySelector('${row(cancelled)} button').click()`);
  await wd.waitFor(`return / MB\\/s/.test(document.querySelector('${row(cancelled)} .status').textContent)`, { what: 'progress' });
  await wd.execute(`document.querySelector('${row(cancelled)} button').click()`);
  await wd.waitFor(`return /cancelled/.test(document.querySelector('${row(cancelled)} .status').textContent)`, { what: 'the cancel' });
  assert.deepEqual(hubFiles().filter((f) => !f.endsWith('refs/main')), [], 'nothing kept after a cancel');

  const pulled = 'SmolLM2-135M-Instruct-Q8_0.gguf';
  await wd.execute(`document.querySelector('${row(pulled)} button').click()`);
  await wd.waitFor(`return / MB\\/s .* s left/.test(document.querySelector('${row(pulled)} .status').textContent)`, { what: 'progress' });
  assert.match(await status(pulled), /^\d+\.\d \/ 98\.4 MB · \d+\.\d MB\/s · \d+ s left$/);
  await wd.execute(
    `const list = document.querySelector('#catalogue');
     list.scrollTop = document.querySelector('${row(pulled)}').offsetTop - list.offsetTop - 40;`,
  );
  await new Promise((r) => setTimeout(r, 300));
  writeFileSync(join(ARTIFACTS, 'app-library-download.png'), await wd.screenshot());
  await wd.waitFor(`return document.querySelector('${row(pulled)}').dataset.state === 'local'`, { timeout: 120_000, what: 'the download' });
  assert.match(await status(pulled), /verified/);
  const snapshot = hubFiles().find((f) => f.endsWith(pulled));
  assert.ok(snapshot?.includes('models--bartowski--SmolLM2-135M-Instruct-GGUF/snapshots/'), `${hubFiles()}`);
  assert.equal(createHash('sha256').update(readFileSync(realpathSync(snapshot))).digest('hex'), hubSha);
  const { value: offered } = await invoke('list_models', { target: null });
  assert.ok(offered.some((m) => m.path === snapshot), 'the settings offer the downloaded model');

  // The doctor on the downloaded model against the Qwen target.
  await wd.waitFor(`return [...document.querySelectorAll('#doctor-draft option')].some((o) => o.value === '${snapshot}')`);
  await wd.execute(
    `document.querySelector('#doctor-target').value = '${join(models, TARGET)}';
     document.querySelector('#doctor-draft').value = '${snapshot}';
     document.querySelector('#doctor-run').click();`,
  );
  await wd.waitFor("return /verdict/.test(document.querySelector('#doctor-report').textContent)", { what: 'the diagnosis' });
  const report = await wd.execute("return document.querySelector('#doctor-report').textContent");
  assert.match(report, /they cannot pair/);
  assert.match(report, /vocabulary size: 151936 in the target, 49152 in the draft/);
  assert.match(report, /suggestion: Qwen2\.5-Coder-0\.5B-Instruct/);
  writeFileSync(join(ARTIFACTS, 'app-library-doctor.png'), await wd.screenshot());

  // A model file of the user's own, outside the model folders: added by path once it reads as
  // a model, then offered (a file that only pretends to be one is refused, and stays out).
  const addByPath = async (path) => {
    await wd.execute("const [path] = arguments; document.querySelector('#add-model [name=path]').value = path;", path);
    await wd.execute("document.querySelector('#add-model button').click()");
    await wd.waitFor("return ['added', 'error'].includes(document.querySelector('#add-model-status').dataset.state)", { what: 'the added model' });
    return wd.execute("return document.querySelector('#add-model-status').textContent");
  };
  assert.match(await addByPath(ownFake), /not a GGUF file|not_gguf|GGUF/i);
  assert.match(await addByPath(ownModel), /^added .* it is offered in Settings and the doctor$/);
  const { value: withOwn } = await invoke('list_models', { target: null });
  assert.ok(withOwn.some((m) => m.path === ownModel && m.runnable), 'the added model is offered');
  assert.ok(!withOwn.some((m) => m.path === ownFake), 'the refused file is not');
  await wd.execute("document.querySelector('#library-close').click()");
  await wd.waitFor("return !document.querySelector('#library-dialog').open");
});

test('after a restart the conversation is there with its colours', async () => {
  await wd.quit();
  await launch();
  const titles = await wd.execute("return [...document.querySelectorAll('#conversation-list li .open')].map((b) => b.textContent)");
  assert.ok(titles.length >= 1, 'conversations listed');
  await wd.execute("[...document.querySelectorAll('#conversation-list li .open')].pop().click()");
  await wd.waitFor("return document.querySelectorAll('#messages .tok.src-accepted').length > 0", { what: 'coloured tokens after restart' });
  const { value: offered } = await invoke('list_models', { target: null });
  assert.ok(offered.some((m) => m.path === ownModel), 'the model added by path is remembered');
});

test('a saved model that cannot load says why at launch, and the chat works once a good one is chosen', async () => {
  const { value: settings } = await invoke('get_settings');
  const bad = join(models, 'truncated.gguf');
  assert.equal((await invoke('save_settings', { settings: { ...settings, target: bad } })).failure, undefined);
  await wd.quit();
  await launch();
  const notice = await wd.waitFor(
    "const n = document.querySelector('#notice'); return !n.hidden && n.dataset.code === 'truncated' && n.textContent",
    { timeout: 60_000, what: 'the load failure notice' },
  );
  assert.match(notice, /truncated\.gguf: the file is truncated/);
  assert.match(await wd.execute("return document.querySelector('#engine-status').textContent"), /no model loaded/);
  const { value: status } = await invoke('engine_status');
  assert.equal(status.state, 'failed');
  assert.equal(status.target, null);
  // A reply before choosing says why instead of hanging, and the app stays usable.
  await ask('Say hi.');
  await replyEnds();
  assert.match(await wd.execute("return document.querySelector('#notice').textContent"), /no model is loaded: .*truncated/);

  await setSettings({ target: join(models, TARGET), draft: 'none', max_tokens: 8 });
  assert.match(await wd.execute("return document.querySelector('#engine-status').textContent"), /target qwen2\.5-coder-1\.5b/);
  await ask('Say hi.');
  await replyEnds();
  const sources = await lastReplySources();
  assert.ok(sources.length > 0, 'a reply after choosing a good model');
  writeFileSync(join(ARTIFACTS, 'app-recovered.png'), await wd.screenshot());
});

test('the window cannot be navigated away from the app', async () => {
  await wd.execute("location.href = 'https://example.com/'");
  await new Promise((r) => setTimeout(r, 1500));
  assert.equal(await wd.execute('return location.protocol + location.host'), 'tauri:localhost');
  // The same page, still alive: no reload either.
  assert.equal(await wd.execute("return document.body.dataset.ready"), 'true');
});

test('a history it cannot open is moved aside, kept, and the app starts with a notice', async () => {
  await wd.quit();
  const db = join(data, 'specula.db');
  const garbage = 'not a database\n'.repeat(500);
  for (const journal of ['-wal', '-shm']) rmSync(db + journal, { force: true });
  writeFileSync(db, garbage);
  await launch();
  const notice = await wd.waitFor(
    "const n = document.querySelector('#notice'); return !n.hidden && n.dataset.code === 'history_set_aside' && n.textContent",
    { timeout: 60_000, what: 'the notice about the history' },
  );
  const moved = readdirSync(data).filter((name) => name.startsWith('specula.db.unreadable-'));
  assert.equal(moved.length, 1, `moved aside: ${readdirSync(data)}`);
  assert.ok(notice.includes(moved[0]), notice);
  assert.equal(readFileSync(join(data, moved[0]), 'utf8'), garbage, 'kept byte for byte');
  writeFileSync(join(ARTIFACTS, 'app-history-set-aside.png'), await wd.screenshot());
  // The fresh history works.
  await ask('Say hi.');
  await replyEnds();
  assert.ok((await lastReplySources()).length > 0, 'a reply in the fresh history');
});

test('killed mid-way through a plain reply, the app keeps every token its window had shown', async () => {
  // Greedy, and code: a coder model sampled on a story may decline in a dozen tokens.
  await setSettings({ target: join(models, TARGET), draft: 'none', max_tokens: 400, mode: 'greedy' });
  await wd.waitFor("return /^target qwen2\\.5-coder-1\\.5b/.test(document.querySelector('#engine-status').textContent)", {
    timeout: 120_000,
    what: 'the target loaded',
  });
  const repliesBefore = await wd.execute('return Number(document.body.dataset.replies ?? 0)');
  await ask('Write a Python module with ten small string functions, each with a docstring and an example.');
  // Forty tokens on screen, or whatever stopped the reply short, to say why.
  const shown = await wd.waitFor(
    `const m = [...document.querySelectorAll('#messages .message.assistant')].pop();
     const n = m ? m.querySelectorAll('.tok').length : 0;
     if (n >= 40) return n;
     const notice = document.querySelector('#notice');
     if (!notice.hidden) return 'notice: ' + notice.textContent;
     if (Number(document.body.dataset.replies ?? 0) > ${repliesBefore}) return 'ended after ' + n + ' tokens: ' + (m?.textContent ?? '');
     return false;`,
    { timeout: 120_000, what: 'forty tokens on screen' },
  );
  assert.equal(typeof shown, 'number', String(shown));
  const pid = Number(execSync('pgrep -n -x specula-app').toString().trim());
  process.kill(pid, 'SIGKILL');
  await new Promise((r) => setTimeout(r, 500));
  await wd.quit(); // the app is gone; its session is ended (errors ignored)
  await launch();
  await wd.execute("[...document.querySelectorAll('#conversation-list li .open')][0].click()");
  const kept = await wd.waitFor(
    "const m = [...document.querySelectorAll('#messages .message.assistant')].pop(); const n = m?.querySelectorAll('.tok').length; return n > 0 && n",
    { what: 'the interrupted reply after the restart' },
  );
  assert.ok(kept >= shown, `${kept} tokens kept, ${shown} were on screen when the app was killed`);
});

test('a ChatGPT export imports with its branches, a bad one imports nothing, and a chat exports to a file', async () => {
  const text = readFileSync(join(here, '../../crates/store/tests/fixtures/chatgpt-conversations.json'), 'utf8');
  const { value: summary, failure } = await invoke('import_conversations', { text });
  assert.equal(failure, undefined, JSON.stringify(failure));
  assert.deepEqual([summary.format, summary.imported.length, summary.skipped.length], ['chatgpt', 3, 0]);
  const again = await invoke('import_conversations', { text });
  assert.deepEqual([again.value.imported.length, again.value.skipped.length], [0, 3], 'the same export twice adds nothing');
  const cut = await invoke('import_conversations', { text: text.slice(0, text.length / 2) });
  assert.match(cut.failure.message, /nothing of it was.*ends early/);

  // The window lists them (the search redraws the list) and shows the edited question's branches.
  await wd.execute("const s = document.querySelector('#search'); s.value = 'Capital'; s.dispatchEvent(new Event('input'));");
  await wd.waitFor("return document.querySelectorAll('#conversation-list li').length === 1", { what: 'the imported chat listed' });
  await wd.execute("document.querySelector('#conversation-list li .open').click()");
  await wd.waitFor("return document.querySelector('#messages .message.user .branch-of')?.textContent === '2/2'", { what: 'the edited question' });
  await wd.execute("document.querySelector('#messages .message.user [aria-label=\"Previous branch\"]').click()");
  await wd.waitFor("return document.querySelector('#messages .message.user .branch-of')?.textContent === '1/2'", { what: 'the first question' });

  const { value: path } = await invoke('export_conversations', { ids: [summary.imported[0]], format: 'markdown' });
  try {
    assert.match(readFileSync(path, 'utf8'), /^# Capital of Australia\n/);
  } finally {
    rmSync(path, { force: true });
  }
});
