// The desktop app with tools from real MCP servers, and files attached to a message. Tools: tests/mcp/arith_server.py (written with the
// official Python SDK, `mcp` from PyPI) and a hand-written server that falls over mid-call
// (crates/mcp/tests/servers/hostile.py `exit`). The Tools dialog imports their mcp.json and
// lists their tools; the model (the Qwen2.5-Coder pair) calls one; the approval card appears;
// Allow runs it and the answer uses the result; Deny leaves the model told so; a server that
// dies mid-call gives a failed card and the reply goes on. Files: a 2 MB CSV is refused as too
// long for the context with its token count, a binary file with its reason, a 40-page PDF is
// read with its pages and tokens, and a small file is inlined, answered from, and folded under
// the question. Same set-up as app.test.mjs
// (SPECULA_APP, tauri-driver, xvfb-run); the servers' Python is SPECULA_MCP_PYTHON (the venv
// scripts/test.sh makes). Screenshots go to SPECULA_ARTIFACTS.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { scratch } from './scratch.mjs';
import { startDriver, WebDriver } from './webdriver.mjs';
import { appSession } from './app-session.mjs';
import { reportPdf } from './make-pdf.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, '../..');
const REAL_MODELS = process.env.SPECULA_MODELS_DIR ?? join(homedir(), '.cache/specula/models');
const ARTIFACTS = process.env.SPECULA_ARTIFACTS ?? join(here, 'artifacts');
const PYTHON = process.env.SPECULA_MCP_PYTHON ?? join(homedir(), '.cache/specula/mcp-venv/bin/python');
const PORT = 17444 + Math.floor(Math.random() * 500);
const TARGET = 'qwen2.5-coder-1.5b-instruct-q4_k_m.gguf';
const DRAFT = 'qwen2.5-coder-0.5b-instruct-q4_k_m.gguf';

const folder = scratch('specula-app-tools');
const models = folder('models');
for (const name of [TARGET, DRAFT]) symlinkSync(join(REAL_MODELS, name), join(models, name));
const data = folder('data');

// Pasted into the Tools dialog as a user would: Claude Desktop's shape, with a key-like env
// variable that must never come back to the window.
const MCP_JSON = JSON.stringify({
  mcpServers: {
    arith: { command: PYTHON, args: [join(root, 'tests/mcp/arith_server.py'), 'stdio'], env: { ARITH_TOKEN: 'sk-never-shown' } },
    shaky: { command: 'python3', args: [join(root, 'crates/mcp/tests/servers/hostile.py'), 'exit'] },
  },
});

const wd = new WebDriver(`http://127.0.0.1:${PORT}`);
let driver;

before(async () => {
  assert.ok(process.env.SPECULA_APP, 'set SPECULA_APP to the built app');
  mkdirSync(ARTIFACTS, { recursive: true });
  driver = await startDriver(PORT, { SPECULA_DATA_DIR: data, SPECULA_MODELS_DIR: models });
  await wd.start({ 'tauri:options': { application: process.env.SPECULA_APP } });
  await wd.waitFor("return document.body.dataset.ready === 'true'", { timeout: 120_000, what: 'the app to start' });
});

after(async () => {
  await wd.quit();
  driver?.stop();
});

const session = appSession(wd);
const { setSettings, invoke } = session;
let repliesNow = 0;
async function ask(question) {
  repliesNow = await wd.execute('return Number(document.body.dataset.replies ?? 0)');
  await session.ask(question);
}
const lastReply = "[...document.querySelectorAll('#messages .message.assistant')].pop()";
const card = (state) => `return ${lastReply}?.querySelector('.tool-card[data-state=${state}]')?.textContent ?? null`;

/** Ask, wait for the call's card, answer it with `decision` (and any later call the model makes
 *  in the same reply), and wait for the reply's end. Returns the first card's text. */
async function askAndDecide(question, decision, shot) {
  await ask(question);
  const asking = await wd.waitFor(card('asking'), { timeout: 300_000, what: 'the approval card' });
  if (shot) writeFileSync(join(ARTIFACTS, shot), await wd.screenshot());
  const ended = `return Number(document.body.dataset.replies ?? 0) > ${repliesNow}`;
  for (;;) {
    await wd.click(`.tool-card[data-state=asking] button[data-decision=${decision}]`);
    const next = await wd.waitFor(`${ended.replace('return ', 'return (')}) ? 'ended' : (${lastReply}.querySelector('.tool-card[data-state=asking] button:not([disabled])') ? 'asking' : null)`, {
      timeout: 300_000,
      what: 'the reply to end or ask again',
    });
    if (next === 'ended') return asking;
  }
}

/** Flip a tool's switch in the open Tools dialog to `on`, and wait for the shell to agree. */
async function setTool(name, on) {
  const box = `#mcp-servers [data-tool=${name}]`;
  await wd.waitFor(`return document.querySelector('${box}')`, { what: `the ${name} switch` });
  if ((await wd.execute(`return document.querySelector('${box}').checked`)) !== on) await wd.click(box);
  await wd.waitFor(`return document.querySelector('${box}')?.checked === ${on}`, { what: `${name} switched` });
}

test('the Tools dialog imports an mcp.json, lists each server with its tools, and keeps the file private', async () => {
  await wd.click('#tools-button');
  await wd.execute("const [text] = arguments; document.querySelector('#mcp-import [name=config]').value = text;", MCP_JSON);
  await wd.click('#mcp-import button[type=submit]');
  const listed = await wd.waitFor(
    "const s = document.querySelector('#mcp-servers [data-server=arith]'); return s && s.querySelectorAll('[data-tool]').length === 2 && document.querySelector('#mcp-servers').textContent",
    { timeout: 120_000, what: 'the servers listed with their tools' },
  );
  assert.match(listed, /add/);
  assert.match(listed, /multiply/);
  assert.match(listed, /Add two numbers/);
  assert.doesNotMatch(listed, /sk-never-shown/, 'an env value never reaches the window');
  assert.match(listed, /ARITH_TOKEN/, 'its name does');
  writeFileSync(join(ARTIFACTS, 'app-tools-dialog.png'), await wd.screenshot());
  assert.equal(statSync(join(data, 'mcp.json')).mode & 0o777, 0o600);
  // A tool switched off is not offered: only `add` is, until the hostile server's turn.
  await setTool('multiply', false);
  await setTool('echo', false);
  const { value: status } = await invoke('mcp_status');
  assert.equal(status.servers.find((s) => s.name === 'arith').tools.find((t) => t.name === 'multiply').enabled, false);
  await wd.click('#tools-close');
});

test('the model calls a tool: the card asks, Allow once runs it, and the answer uses the result', async () => {
  await setSettings({ mode: 'greedy', max_tokens: 96, k: '4' });
  // The prompt of the CLI's test (crates/cli/tests/tools.rs): the 1.5B coder answers it in a sentence.
  const asking = await askAndDecide('Add 1234 and 5678 with the add tool, then tell me the result in a sentence.', 'once', 'app-tool-approval.png');
  assert.match(asking, /add/);
  assert.match(asking, /1234/);
  const ran = await wd.waitFor(card('ran'), { what: 'the card with its result' });
  assert.match(ran, /6912/);
  assert.match(ran, /Result in \d+ ms/);
  writeFileSync(join(ARTIFACTS, 'app-tool-result.png'), await wd.screenshot());
  // Kept with the reply, with the result, where the next turn and an export read it.
  const id = await wd.execute("return Number(document.querySelector('#conversation-list li.current').dataset.id)");
  const { value: conversation } = await invoke('get_conversation', { id });
  const reply = conversation.messages.at(-1);
  const [stored] = reply.tools;
  // The answer is the text after the last call, and it uses the result.
  const last = Math.max(...reply.tools.map((c) => c.at));
  const answer = reply.tokens.slice(last).map((t) => t.text).join('');
  assert.match(answer, /6,?912/, `the answer uses the result: ${answer}`);
  assert.equal(stored.tool, 'add');
  assert.deepEqual(stored.arguments, { a: 1234, b: 5678 });
  assert.equal(stored.outcome.kind, 'ran');
  assert.equal(stored.outcome.text, '6912');
});

test('Deny runs nothing and the model is told so', async () => {
  await wd.click('#new-chat');
  await askAndDecide('Add 4321 and 8765 with the add tool, then tell me the result in a sentence.', 'deny');
  const denied = await wd.waitFor(card('denied'), { what: 'the denied card' });
  assert.match(denied, /Denied: it did not run/);
  const id = await wd.execute("return Number(document.querySelector('#conversation-list li.current').dataset.id)");
  const { value: conversation } = await invoke('get_conversation', { id });
  const reply = conversation.messages.at(-1);
  assert.deepEqual(reply.tools.map((c) => c.outcome.kind), ['denied'], 'asked once, not run');
  assert.ok(reply.finish_reason, 'the reply ended');
});

test('a server that dies mid-call gives a failed card with its last words, and the reply goes on', async () => {
  await wd.click('#tools-button');
  await setTool('add', false);
  await setTool('echo', true);
  await wd.click('#tools-close');
  await wd.click('#new-chat');
  await askAndDecide('Use the echo tool to echo the text "hello".', 'once');
  const failed = await wd.waitFor(card('failed'), { what: 'the failed card' });
  assert.match(failed, /boom: the server fell over/);
  writeFileSync(join(ARTIFACTS, 'app-tool-failed.png'), await wd.screenshot());
  // The model reads the reason and answers: the reply goes on to its own end.
  const id = await wd.execute("return Number(document.querySelector('#conversation-list li.current').dataset.id)");
  const { value: conversation } = await invoke('get_conversation', { id });
  const reply = conversation.messages.at(-1);
  assert.equal(reply.finish_reason, 'stop');
  assert.equal(reply.tools.length, 1, 'a failed tool is not offered again in the reply');
  assert.ok(reply.tokens.slice(reply.tools[0].at).some((t) => t.text.trim()), 'an answer after the card');
  // The window still works: the dialog answers, and the server is listed again.
  const { value: status } = await invoke('mcp_status');
  assert.ok(status.servers.some((s) => s.name === 'shaky'));
});

test('attached files: a 2 MB CSV is refused with its tokens, a binary file with the reason, a 40-page PDF is read, and a small file is answered from', async () => {
  await invoke('set_tool_enabled', { name: 'echo', enabled: false });
  await wd.click('#new-chat');
  // As a pick or a drop hands them over: File objects on the composer's file input.
  await wd.execute(`
    const rows = ['id,city,temperature'];
    for (let i = 0, length = 0; length < 2 * 1024 * 1024; i++) {
      rows.push(i + ',City number ' + i + ',' + (i % 40));
      length += rows.at(-1).length + 1;
    }
    const dt = new DataTransfer();
    dt.items.add(new File([rows.join('\\n')], 'big.csv', { type: 'text/csv' }));
    dt.items.add(new File([new Uint8Array([0x89, 0x50, 0x4e, 0x47, 0, 0, 0, 13, 0, 1, 2])], 'picture.png'));
    dt.items.add(new File(['# Notes\\n\\nThe launch code is AZURE-7-PELICAN.\\n'], 'notes.md'));
    dt.items.add(new File([arguments[0]], 'report.pdf', { type: 'application/pdf' }));
    const input = document.querySelector('#attach-input');
    input.files = dt.files;
    input.dispatchEvent(new Event('change'));`, reportPdf(40));
  const chips = await wd.waitFor(
    "const c = document.querySelectorAll('#attachments .attachment'); return c.length === 4 && [...c].map((e) => e.className + ': ' + e.textContent)",
    { timeout: 180_000, what: 'four chips' },
  );
  assert.match(chips[0], /refused: big\.csv.*big\.csv is [\d,]{9,} tokens \(csv, 2\.0 MB\), and the context holds 32,768/);
  assert.match(chips[1], /refused: picture\.png.*not a text file \(binary content\)/);
  assert.match(chips[2], /^attachment: notes\.md.*markdown · \d+ bytes · \d+ tokens/);
  // A 40-page PDF's text fits: accepted, with its pages and tokens (about 25,000, whose
  // prefill takes this machine half an hour, so it is taken off again before asking).
  const pdf = /^attachment: report\.pdfPDF, 40 pages · 92 KB · ([\d,]+) tokens/.exec(chips[3]);
  assert.ok(pdf && Number(pdf[1].replaceAll(',', '')) > 20_000, chips[3]);
  writeFileSync(join(ARTIFACTS, 'app-attachments.png'), await wd.screenshot());
  await wd.click('#attachments .attachment:nth-child(4) button');
  await wd.waitFor("return document.querySelectorAll('#attachments .attachment').length === 3", { what: 'the PDF taken off' });
  await ask('What is the launch code in the attached file? Answer with the code only.');
  await wd.waitFor(`return Number(document.body.dataset.replies ?? 0) > ${repliesNow}`, { timeout: 300_000, what: 'the reply' });
  const id = await wd.execute("return Number(document.querySelector('#conversation-list li.current').dataset.id)");
  const { value: conversation } = await invoke('get_conversation', { id });
  const [question, answer] = conversation.messages.slice(-2);
  assert.match(question.content, /\n\nFile: notes\.md\n```markdown\n# Notes/, 'the file is stored with the question');
  assert.doesNotMatch(question.content, /big\.csv|picture\.png|report\.pdf/, 'refused and removed files are not sent');
  assert.match(answer.content, /AZURE-7-PELICAN/);
  // Under the question, the file folds; the chips are gone.
  const folded = await wd.execute("return [...document.querySelectorAll('#messages .message.user .attached-file summary')].map((s) => s.textContent)");
  assert.deepEqual(folded, ['File: notes.md']);
  assert.equal(await wd.execute("return document.querySelector('#attachments').hidden"), true);
  writeFileSync(join(ARTIFACTS, 'app-attachment-answer.png'), await wd.screenshot());
});

test('hostile servers: never answers, hangs, answers 100 MB, writes garbage, lists 10,000 tools: each bounded, said, and the app stays usable', async () => {
  // Cline's `timeout` (seconds) bounds a server's calls: the hang and the garbage end in 3 s.
  const hostile = (mode, timeout) => ({ command: 'python3', args: [join(root, 'crates/mcp/tests/servers/hostile.py'), mode], ...(timeout ? { timeout } : {}) });
  const config = JSON.stringify({
    mcpServers: { hang: hostile('hang', 3), huge: hostile('huge'), garbage: hostile('garbage', 3), silent: hostile('silent', 3), many: hostile('many') },
  });
  const { value: status } = await invoke('import_mcp_servers', { text: config });
  assert.ok(status.servers.some((s) => s.name === 'garbage'));
  // Servers answer in any order, and a name clash goes to the later one (`echo` or `hang__echo`):
  // each server's own list says what its tool is called.
  const listed = await waitForServers(['hang', 'huge', 'garbage']);
  const { value: named } = await invoke('mcp_status');
  const toolOf = (server) => named.servers.find((s) => s.name === server).tools[0].name;
  // A server that never answers is listed with why; one that lists 10,000 tools is cut to 64.
  const { value: servers } = await invoke('mcp_status');
  const silent = servers.servers.find((s) => s.name === 'silent');
  assert.match(silent.error, /no answer to the MCP handshake within 3 s/);
  const many = servers.servers.find((s) => s.name === 'many');
  assert.equal(many.tools.length, 64);
  assert.match(many.notice, /lists 10000 tools; the first 64/);
  await wd.click('#tools-button');
  await wd.waitFor("return document.querySelector('#mcp-servers [data-server=silent] .error')", { what: 'the silent server listed with why' });
  writeFileSync(join(ARTIFACTS, 'app-tools-hostile-dialog.png'), await wd.screenshot());
  await wd.click('#tools-close');
  const cases = [
    [toolOf('hang'), /no answer to the call within 3 s/i],
    [toolOf('huge'), /a message over 16 MiB/i],
    [toolOf('garbage'), /not JSON-RPC: `\{this is not json-rpc`/],
  ];
  for (const [tool, reason] of cases) {
    // Only this tool is offered, so the model calls it.
    for (const name of listed) await invoke('set_tool_enabled', { name, enabled: name === tool });
    await wd.click('#new-chat');
    const started = Date.now();
    await askAndDecide(`Use the ${tool} tool to echo the text "hello".`, 'once');
    const failed = await wd.waitFor(card('failed'), { what: `the failed card of ${tool}` });
    assert.match(failed, reason, tool);
    assert.ok(Date.now() - started < 240_000, `${tool} took ${Date.now() - started} ms`);
    // The window answers at once: the dialog's command, and a new chat.
    const { value: after } = await invoke('mcp_status');
    assert.ok(after.servers.length >= 7);
  }
  writeFileSync(join(ARTIFACTS, 'app-tool-hostile.png'), await wd.screenshot());
});

/** Every offered tool name, once `servers` have all listed theirs (they start in the background). */
async function waitForServers(servers) {
  for (let i = 0; i < 600; i++) {
    const { value: status } = await invoke('mcp_status');
    const ready = servers.every((name) => status.servers.some((s) => s.name === name && s.tools.length > 0));
    if (!status.starting && ready) return status.servers.flatMap((s) => s.tools.map((t) => t.name));
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`the servers ${servers} did not list their tools`);
}
