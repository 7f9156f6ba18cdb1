// The desktop app on a full disk: its data folder on a small tmpfs, filled with a file until
// the disk refuses another byte. At launch, a history that cannot be opened now is kept as it
// is and the app runs with chats in memory, says so, and writes them into the history once
// space is back. During a reply, tokens the history cannot take stay drawn, the window says
// they are not saved, and the app stores the whole reply once it can. Mounting a tmpfs needs
// root: elsewhere the cases are skipped, saying why. Same set-up as app.test.mjs (SPECULA_APP,
// tauri-driver, xvfb-run); the models (the 1.5B target, no draft) stay outside the tmpfs.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import {
  closeSync, mkdirSync, mkdtempSync, openSync, readdirSync, readFileSync, rmdirSync, rmSync, statfsSync, symlinkSync, writeFileSync, writeSync,
} from 'node:fs';
import { homedir, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { scratch } from './scratch.mjs';
import { startDriver, WebDriver } from './webdriver.mjs';
import { appSession } from './app-session.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const REAL_MODELS = process.env.SPECULA_MODELS_DIR ?? join(homedir(), '.cache/specula/models');
const ARTIFACTS = process.env.SPECULA_ARTIFACTS ?? join(here, 'artifacts');
const TARGET = 'qwen2.5-coder-1.5b-instruct-q4_k_m.gguf';
const DRAFT = 'qwen2.5-coder-0.5b-instruct-q4_k_m.gguf';
let port = 17444 + Math.floor(Math.random() * 400);

// The models folder: the real pair (the app's defaults), outside any small disk.
const models = scratch('specula-app-disk')('models');
for (const name of [TARGET, DRAFT]) symlinkSync(join(REAL_MODELS, name), join(models, name));

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// ----- small disks -----

const mounted = [];

/** A tmpfs of `size` (mount's notation: 4m), or why there cannot be one here. */
function smallDisk(size) {
  const dir = mkdtempSync(join(tmpdir(), 'specula-disk-'));
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${size}`, 'tmpfs', dir], { stdio: 'pipe' });
  } catch (e) {
    rmdirSync(dir);
    return { failure: `cannot mount a tmpfs here (this needs root): ${e.stderr?.toString().trim() || e.message}` };
  }
  mounted.push(dir);
  return { dir };
}

/** Fill what is left of the disk at `dir` with one file, until it refuses another byte; removing
 *  the file gives the space back. */
function fill(dir) {
  const filler = join(dir, 'filler');
  const fd = openSync(filler, 'w');
  try {
    for (const size of [1 << 20, 4096, 1]) {
      const chunk = Buffer.alloc(size, 0x55);
      try {
        for (;;) writeSync(fd, chunk);
      } catch (e) {
        if (e.code !== 'ENOSPC') throw e;
      }
    }
  } finally {
    closeSync(fd);
  }
  assert.equal(statfsSync(dir).bavail, 0, 'the disk is full');
  return filler;
}

function unmount(dir) {
  for (const args of [[dir], [dir], [dir], ['-l', dir]]) {
    try {
      execFileSync('umount', args, { stdio: 'pipe' });
      rmdirSync(dir);
      return;
    } catch {
      execFileSync('sleep', ['0.5']);
    }
  }
}

// A test process that dies before `after` still leaves no mount behind.
process.on('exit', () => mounted.splice(0).forEach(unmount));

// ----- the app -----

let driver = null;
let wd = null;

/** The app on `data`, its window ready; the session helpers of app-session.mjs for it. */
async function launch(data) {
  port += 2;
  driver = await startDriver(port, { SPECULA_DATA_DIR: data, SPECULA_MODELS_DIR: models });
  wd = new WebDriver(`http://127.0.0.1:${port}`);
  await wd.start({ 'tauri:options': { application: process.env.SPECULA_APP } });
  await wd.waitFor("return document.body.dataset.ready === 'true'", { timeout: 120_000, what: 'the app to start' });
  return appSession(wd);
}

/** The processes started with `data` as their data folder (the app, its webview helpers). */
function processesOn(data) {
  const found = [];
  for (const pid of readdirSync('/proc').filter((name) => /^\d+$/.test(name))) {
    try {
      if (readFileSync(`/proc/${pid}/environ`, 'latin1').split('\0').includes(`SPECULA_DATA_DIR=${data}`)) found.push(Number(pid));
    } catch { /* gone, or not ours to read */ }
  }
  return found;
}

/** End the app and its driver, and wait until nothing of theirs holds `data`. */
async function stop(data) {
  await wd?.quit();
  driver?.stop();
  wd = null;
  driver = null;
  for (let i = 0; i < 50 && processesOn(data).length; i++) await sleep(200);
  for (const pid of processesOn(data)) process.kill(pid, 'SIGKILL'); // started by this test
}

// Whatever a failing test left: the app ended (it would hold the mount), then the mounts.
after(async () => {
  for (const dir of mounted) await stop(join(dir, 'data'));
  for (const dir of mounted.splice(0)) unmount(dir);
});

const notice = (code) =>
  `const n = document.querySelector('#notice'); return !n.hidden && n.dataset.code === '${code}' && n.textContent`;
const listed = "return [...document.querySelectorAll('#conversation-list li .open')].map((b) => b.textContent)";

/** Rows of the history file at `db`, read by SQLite itself (python3's sqlite3). */
function sqlite(db, sql) {
  const script = 'import json, sys, sqlite3\nc = sqlite3.connect(sys.argv[1])\nprint(json.dumps(c.execute(sys.argv[2]).fetchall()))\nc.close()';
  return JSON.parse(execFileSync('python3', ['-c', script, db, sql]).toString());
}

test('a full disk at launch keeps the history as it is, chats go on in memory, and both are there once space is back', async (t) => {
  const disk = smallDisk('4m');
  if (disk.failure) return t.skip(disk.failure);
  const data = join(disk.dir, 'data');
  const db = join(data, 'specula.db');
  mkdirSync(ARTIFACTS, { recursive: true });

  try {
    // A history with one conversation in it.
    let session = await launch(data);
    const { value: first, failure } = await session.invoke('create_conversation');
    assert.equal(failure, undefined, JSON.stringify(failure));
    assert.equal((await session.invoke('add_message', { conversationId: first.id, role: 'user', content: 'kept through a full disk' })).failure, undefined);
    await stop(data);
    // As a clean exit leaves it: no journals, so opening it needs new space (SQLite's -shm).
    sqlite(db, 'PRAGMA wal_checkpoint(TRUNCATE)');
    assert.deepEqual(readdirSync(data).filter((name) => name.startsWith('specula.db')), ['specula.db']);
    const before = readFileSync(db);

    const filler = fill(disk.dir);
    session = await launch(data);
    const said = await wd.waitFor(notice('history_in_memory'), { timeout: 60_000, what: 'the notice about the history' });
    assert.match(said, /cannot be opened now/);
    assert.match(said, /full|I\/O error/);
    writeFileSync(join(ARTIFACTS, 'app-disk-full-at-launch.png'), await wd.screenshot());
    // Chats go on in memory meanwhile.
    const { value: meanwhile } = await session.invoke('create_conversation');
    assert.equal((await session.invoke('add_message', { conversationId: meanwhile.id, role: 'user', content: 'made while the disk was full' })).failure, undefined);
    assert.ok(readFileSync(db).equals(before), 'the history file is untouched while the disk is full');

    rmSync(filler);
    // The app tries every 10 s: once it opens, the notice goes and the list is the history's.
    const titles = await wd.waitFor(
      `if (!document.querySelector('#notice').hidden) return false;
       const titles = ${listed.replace(/^return /, '')};
       return titles.length >= 2 && titles;`,
      { timeout: 30_000, what: 'the history back, the notice gone and both conversations listed' },
    );
    assert.ok(titles.includes('kept through a full disk'), `listed: ${titles}`);
    assert.ok(titles.includes('made while the disk was full'), `listed: ${titles}`);
    await stop(data);
    // In the file itself: the conversation from before, and the one made in memory.
    const stored = sqlite(db, 'SELECT c.title, m.role, m.content FROM conversations c JOIN messages m ON m.conversation_id = c.id ORDER BY c.id, m.id');
    assert.deepEqual(stored, [
      ['kept through a full disk', 'user', 'kept through a full disk'],
      ['made while the disk was full', 'user', 'made while the disk was full'],
    ]);
  } finally {
    await stop(data);
  }
});

test('a full disk during a reply: the reply goes on drawn, the window says it is not saved, and it is stored whole once space is back', async (t) => {
  const disk = smallDisk('4m');
  if (disk.failure) return t.skip(disk.failure);
  const data = join(disk.dir, 'data');
  mkdirSync(ARTIFACTS, { recursive: true });
  const { setSettings, ask, replyEnds, invoke } = await launch(data);
  try {
    await setSettings({ target: join(models, TARGET), draft: 'none', mode: 'greedy', max_tokens: 200 });
    await wd.waitFor("return /^target qwen2\\.5-coder-1\\.5b/.test(document.querySelector('#engine-status').textContent)", {
      timeout: 120_000,
      what: 'the target loaded',
    });
    // The text drawn of the reply: its tokens' spans (code blocks keep their fences there).
    const drawn = "const m = [...document.querySelectorAll('#messages .message.assistant')].pop(); return m ? [...m.querySelectorAll('.tok')].map((s) => s.textContent).join('') : '';";
    await ask('Write a Python module with ten small string functions, each with a docstring and an example.');
    await wd.waitFor("return document.querySelectorAll('#messages .message.assistant.streaming .tok').length >= 10", {
      timeout: 180_000,
      what: 'the first tokens drawn',
    });
    const filler = fill(disk.dir);
    const said = await wd.waitFor(notice('storage'), { timeout: 60_000, what: 'the notice that the reply is not saved' });
    const drawnAtNotice = await wd.execute(drawn);
    assert.match(said, /^Not saved: /);
    assert.equal(await wd.execute("return document.querySelectorAll('#messages .message.assistant.streaming').length"), 1, 'the reply goes on');

    await replyEnds();
    const id = await wd.execute("return Number(document.querySelector('#conversation-list li.current').dataset.id)");
    const drawnAtEnd = await wd.execute(drawn);
    assert.ok(drawnAtEnd.startsWith(drawnAtNotice), 'the reply drawn at the end goes on from what was drawn at the notice');
    assert.ok(drawnAtEnd.length > drawnAtNotice.length, `drawn: ${drawnAtNotice.length} characters at the notice, ${drawnAtEnd.length} at the end`);
    const footer = await wd.execute("return [...document.querySelectorAll('#messages .message.assistant')].pop().querySelector('.reply-summary').textContent");
    const { value: whileFull } = await invoke('get_conversation', { id });
    const storedWhileFull = whileFull.messages.at(-1);
    t.diagnostic(`drawn: ${drawnAtNotice.length} characters at the notice, ${drawnAtEnd.length} at the end; stored while full: ${storedWhileFull.content.length}`);
    // The disk stayed full: the stored copy stops where it filled, and the window keeps the rest.
    assert.ok(storedWhileFull.content.length < drawnAtEnd.length && drawnAtEnd.startsWith(storedWhileFull.content), 'the stored copy is the start of the drawn reply');
    assert.match(footer, /not saved: only in this window/);
    assert.equal(await wd.execute("return document.querySelector('#notice').dataset.code"), 'storage', 'the notice stays');
    writeFileSync(join(ARTIFACTS, 'app-disk-full-reply.png'), await wd.screenshot());

    // Space back: the app retries every 5 s and the history gets the whole reply.
    rmSync(filler);
    let stored;
    const end = Date.now() + 30_000;
    do {
      await sleep(1000);
      stored = (await invoke('get_conversation', { id })).value.messages.at(-1);
    } while ((stored.content !== drawnAtEnd || stored.finish_reason == null) && Date.now() < end);
    assert.equal(stored.role, 'assistant');
    assert.equal(stored.content, drawnAtEnd, 'the stored reply is the one drawn');
    assert.notEqual(stored.finish_reason, null, 'the reply is stored with its end');
    if (stored.tokens) assert.equal(stored.tokens.map((token) => token.text).join(''), drawnAtEnd, 'with every token');
  } finally {
    await stop(data);
  }
});
