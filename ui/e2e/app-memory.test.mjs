// The desktop app when the chosen model does not fit in free memory: it says so, with sizes,
// and stays usable. SPECULA_MEMORY_LIMIT stands in for a small machine. Same set-up as
// app.test.mjs (SPECULA_APP, tauri-driver, xvfb-run).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { scratch } from './scratch.mjs';
import { startDriver, WebDriver } from './webdriver.mjs';

const PORT = 15444 + Math.floor(Math.random() * 500);
const wd = new WebDriver(`http://127.0.0.1:${PORT}`);
let driver;

before(async () => {
  assert.ok(process.env.SPECULA_APP, 'set SPECULA_APP to the built app');
  driver = await startDriver(PORT, { SPECULA_DATA_DIR: scratch('specula-app-memory')('data'), SPECULA_MEMORY_LIMIT: String(64 << 20) });
  await wd.start({ 'tauri:options': { application: process.env.SPECULA_APP } });
  await wd.waitFor("return document.body.dataset.ready === 'true'", { timeout: 120_000, what: 'the app to start' });
});

after(async () => {
  await wd.quit();
  driver?.stop();
});

test('a model larger than free memory is refused with its size, and the app stays usable', async () => {
  const notice = await wd.waitFor(
    "const n = document.querySelector('#notice'); return !n.hidden && n.dataset.code === 'model_too_large' && n.textContent",
    { what: 'the memory notice' },
  );
  assert.match(notice, /needs about \d+ MiB of memory but only 64 MiB is free/);
  // Nothing was lost and the window still works: a conversation can be made and named.
  await wd.click('#new-chat');
  await wd.execute("document.querySelector('#prompt').value = 'kept';");
  const { status } = await wd.executeAsync(
    "const [done] = arguments; window.__TAURI_INTERNALS__.invoke('engine_status', {}).then((status) => done({ status }), (failure) => done({ failure }));",
  );
  assert.equal(status.target, null);
  assert.equal(status.error.code, 'model_too_large');
  assert.equal(await wd.execute("return document.querySelector('#prompt').value"), 'kept');
});
