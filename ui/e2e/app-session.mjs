// What the app's end-to-end tests do in the window, over one WebDriver session: change
// settings, ask, wait for the reply, read its tokens' provenance, call a command directly.

/** The helpers for the app behind `wd`. */
export function appSession(wd) {
  let repliesBefore = 0;
  async function setSettings(values) {
    await wd.click('#settings-button');
    await wd.waitFor(
      "return document.querySelector('#settings-dialog').open && document.querySelector('#settings-form [name=draft]').options.length > 2",
      { what: 'the settings dialog' },
    );
    await wd.execute(
      `const [values] = arguments;
       for (const [name, value] of Object.entries(values)) {
         const field = document.querySelector('#settings-form [name="' + name + '"]');
         field.value = String(value);
         field.dispatchEvent(new Event('change'));
       }
       document.querySelector('#settings-save').click();`,
      values,
    );
    await wd.waitFor("return !document.querySelector('#settings-dialog').open", { timeout: 180_000, what: 'settings to apply' });
  }

  async function ask(text) {
    repliesBefore = await wd.execute('return Number(document.body.dataset.replies ?? 0)');
    await wd.execute("const [text] = arguments; document.querySelector('#prompt').value = text;", text);
    await wd.click('#send');
  }

  async function replyEnds() {
    await wd.waitFor(`return Number(document.body.dataset.replies ?? 0) > ${repliesBefore}`, { timeout: 300_000, what: 'the reply to end' });
  }

  const lastReplyText = (selector) =>
    wd.execute(`const m = [...document.querySelectorAll('#messages .message.assistant')].pop(); return m.querySelector('${selector}')?.textContent ?? '';`);
  const lastReplySources = () =>
    wd.execute("const m = [...document.querySelectorAll('#messages .message.assistant')].pop(); return [...m.querySelectorAll('.tok')].map((s) => s.dataset.source);");
  const invoke = (command, args = {}) =>
    wd.executeAsync(
      `const [command, args, done] = arguments;
       window.__TAURI_INTERNALS__.invoke(command, args).then((value) => done({ value }), (failure) => done({ failure }));`,
      command,
      args,
    );

  return { setSettings, ask, replyEnds, lastReplyText, lastReplySources, invoke };
}
