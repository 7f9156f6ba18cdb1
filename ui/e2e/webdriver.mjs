// A small W3C WebDriver client over fetch: enough to drive the Tauri app through tauri-driver
// (which hands the session to WebKitWebDriver) without a browser-automation framework.

import { execSync, spawn } from 'node:child_process';

/** Start tauri-driver on `port` (WebKitWebDriver on `port + 1000`) with `env` added, wait until
 *  it answers, and return a handle whose `stop()` ends it with everything it started. */
export async function startDriver(port, env) {
  // A process group of its own, so that stop() also ends WebKitWebDriver and the app: killed
  // alone, tauri-driver leaves them running, and an orphan that holds this test's output open
  // keeps whoever reads it (CI) waiting for ever.
  const driver = spawn(process.env.TAURI_DRIVER ?? 'tauri-driver', ['--port', String(port), '--native-port', String(port + 1000)], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, ...env },
    detached: true,
  });
  driver.stdout.pipe(process.stdout);
  driver.stderr.pipe(process.stderr);
  for (let i = 0; i < 100; i++) {
    try {
      await fetch(`http://127.0.0.1:${port}/status`);
      break;
    } catch {
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  return {
    stop() {
      try {
        process.kill(-driver.pid, 'SIGKILL');
      } catch { /* already gone */ }
      driver.stdout.destroy();
      driver.stderr.destroy();
    },
  };
}

export class WebDriver {
  constructor(base) {
    this.base = base;
    this.session = null;
  }

  async request(method, path, body) {
    const url = this.session && !path.startsWith('/session') ? `${this.base}/session/${this.session}${path}` : `${this.base}${path}`;
    const response = await fetch(url, {
      method,
      headers: { 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const json = await response.json();
    if (!response.ok || json.value?.error) {
      throw new Error(`${method} ${path}: ${JSON.stringify(json.value ?? response.status)}`);
    }
    return json.value;
  }

  async start(capabilities) {
    const value = await this.request('POST', '/session', { capabilities: { alwaysMatch: capabilities } });
    this.session = value.sessionId;
  }

  async quit() {
    if (!this.session) return;
    const id = this.session;
    this.session = null;
    await this.request('DELETE', `/session/${id}`).catch(() => {});
  }

  /** Run `body` (the text of a function body) in the page; `arguments` are `args`. */
  execute(body, ...args) {
    return this.request('POST', '/execute/sync', { script: body, args });
  }

  /** Run async code: `body` gets `done` as its last argument. */
  executeAsync(body, ...args) {
    return this.request('POST', '/execute/async', { script: body, args });
  }

  async find(css) {
    const value = await this.request('POST', '/element', { using: 'css selector', value: css });
    return Object.values(value)[0];
  }

  async click(css) {
    await this.request('POST', `/element/${await this.find(css)}/click`, {});
  }

  async type(css, text) {
    const id = await this.find(css);
    await this.request('POST', `/element/${id}/clear`, {});
    await this.request('POST', `/element/${id}/value`, { text });
  }

  /** The screen as the X server shows it (the tests run under Xvfb): what a user sees. The
   *  WebDriver screenshot asks WebKit for a snapshot, which never answers while the app draws
   *  without GPU compositing (src-tauri/lib.rs). */
  async screenshot() {
    return execSync(`xwd -root -display '${process.env.DISPLAY}' | xwdtopnm 2>/dev/null | pnmtopng`, { maxBuffer: 64 << 20 });
  }

  /** Poll `body` (a function body returning a value) until it is truthy. */
  async waitFor(body, { timeout = 60_000, what = body } = {}) {
    const end = Date.now() + timeout;
    for (;;) {
      const value = await this.execute(body).catch(() => undefined);
      if (value) return value;
      if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
      await new Promise((r) => setTimeout(r, 200));
    }
  }
}
