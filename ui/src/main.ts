// The chat window. Everything it asks of the engine goes through the Backend service layer.

import './style.css';
import type { Backend } from './api/backend';
import { connect } from './api/connect';
import type { ChatMessage, Connection, Conversation, GenerationStats, ModelEntry, ReplyEvent, ReplyHandle, Settings, StepEvent } from './api/types';
import { remoteHost, remoteModelName } from './api/label';
import { DEFAULT_SETTINGS, toBackendError } from './api/types';
import { parseRemote, remoteValue, wireLibraryDialog } from './library';
import { renderMarkdown } from './render/markdown';
import { liveFigures, sparkline, summarize, summarizeRemote } from './render/speed';
import { ReplyStream } from './render/stream';
import { renderTokens } from './render/tokens';

// The page's parts are found once, here, as the module loads: before any reply is on the page.
// Later code uses these references, or looks inside one of them, never a document-wide lookup:
// replies are model output, and an element of one named like a part of the app (`id="connections"`)
// would be found instead of it (DOM clobbering; the sanitiser drops `id` and `name` as well).
const $ = <T extends HTMLElement>(selector: string) => document.querySelector(selector) as T;

const ui = {
  newChat: $<HTMLButtonElement>('#new-chat'),
  list: $<HTMLUListElement>('#conversation-list'),
  search: $<HTMLInputElement>('#search'),
  engine: $<HTMLDivElement>('#engine-status'),
  title: $<HTMLHeadingElement>('#title'),
  messages: $<HTMLElement>('#messages'),
  notice: $<HTMLDivElement>('#notice'),
  speed: $<HTMLElement>('#speed-panel'),
  speedupFigure: $<HTMLSpanElement>('#speedup-figure'),
  summary: $<HTMLDivElement>('#summary'),
  spark: $<HTMLSpanElement>('#spark'),
  composer: $<HTMLFormElement>('#composer'),
  prompt: $<HTMLTextAreaElement>('#prompt'),
  send: $<HTMLButtonElement>('#send'),
  stop: $<HTMLButtonElement>('#stop'),
  colours: $<HTMLInputElement>('#colours-toggle'),
  theme: $<HTMLButtonElement>('#theme-toggle'),
  settingsButton: $<HTMLButtonElement>('#settings-button'),
  systemButton: $<HTMLButtonElement>('#system-button'),
  libraryButton: $<HTMLButtonElement>('#library-button'),
  settingsDialog: $<HTMLDialogElement>('#settings-dialog'),
  settingsForm: $<HTMLFormElement>('#settings-form'),
  settingsError: $<HTMLParagraphElement>('#settings-error'),
  settingsCancel: $<HTMLButtonElement>('#settings-cancel'),
  settingsSave: $<HTMLButtonElement>('#settings-save'),
  apiKeyField: $<HTMLLabelElement>('#api-key-field'),
  draftNote: $<HTMLParagraphElement>('#draft-note'),
  systemDialog: $<HTMLDialogElement>('#system-dialog'),
  systemForm: $<HTMLFormElement>('#system-form'),
  systemCancel: $<HTMLButtonElement>('#system-cancel'),
  libraryDialog: $<HTMLDialogElement>('#library-dialog'),
};

interface State {
  backend: Backend;
  settings: Settings;
  conversation: Conversation | null;
  streaming: { handle: ReplyHandle | null; message: ChatMessage; view: ReplyStream } | null;
  /** The user message being edited for edit-and-resend. */
  editing: number | null;
}

let state: State;

function showNotice(error: unknown): void {
  const e = toBackendError(error);
  ui.notice.hidden = false;
  ui.notice.dataset.code = e.code;
  const text = document.createElement('span');
  text.textContent = e.message;
  const close = document.createElement('button');
  close.className = 'icon dismiss';
  close.textContent = '×';
  close.title = 'Dismiss';
  close.setAttribute('aria-label', 'Dismiss');
  close.addEventListener('click', () => {
    clearNotice();
    // A kept notice (a history moved aside) is said at every start until dismissed here.
    void state?.backend.dismissNotices?.().catch(() => {});
  });
  ui.notice.replaceChildren(text, close);
}

function clearNotice(): void {
  ui.notice.hidden = true;
  ui.notice.replaceChildren();
}

// ----- theme and colours -----

function applyTheme(theme: string): void {
  document.documentElement.dataset.theme = theme;
  ui.theme.textContent = theme === 'dark' ? 'Light' : 'Dark';
  localStorage.setItem('specula.theme', theme);
}

function applyColours(on: boolean): void {
  ui.colours.checked = on;
  document.body.classList.toggle('no-colours', !on);
  localStorage.setItem('specula.colours', on ? '1' : '0');
  if (state?.streaming) state.streaming.view.setColours(on);
  else renderMessages();
}

// ----- conversations -----

async function refreshList(): Promise<void> {
  const items = await state.backend.conversations(ui.search.value);
  ui.list.replaceChildren(
    ...items.map((c) => {
      const li = document.createElement('li');
      li.dataset.id = String(c.id);
      li.className = c.id === state.conversation?.id ? 'current' : '';
      const open = document.createElement('button');
      open.className = 'open';
      open.textContent = c.title;
      open.addEventListener('click', () => void openConversation(c.id));
      const rename = iconButton('✎', 'Rename', async () => {
        const title = prompt('Rename conversation', c.title)?.trim();
        if (title) await state.backend.renameConversation(c.id, title);
        await refreshAll();
      });
      const remove = iconButton('×', 'Delete', async () => {
        if (!confirm(`Delete “${c.title}”?`)) return;
        await state.backend.deleteConversation(c.id);
        if (state.conversation?.id === c.id) state.conversation = null;
        await refreshAll();
      });
      li.append(open, rename, remove);
      return li;
    }),
  );
}

function iconButton(text: string, label: string, action: () => Promise<void>): HTMLButtonElement {
  const b = document.createElement('button');
  b.className = 'icon';
  b.textContent = text;
  b.title = label;
  b.setAttribute('aria-label', label);
  b.addEventListener('click', () => action().catch(showNotice));
  return b;
}

async function openConversation(id: number): Promise<void> {
  state.conversation = await state.backend.conversation(id);
  state.editing = null;
  ui.speed.hidden = true;
  await refreshAll();
}

async function refreshAll(): Promise<void> {
  if (state.conversation) state.conversation = await state.backend.conversation(state.conversation.id);
  ui.title.textContent = state.conversation?.title ?? 'Specula';
  renderMessages();
  await refreshList();
}

// ----- messages -----

function renderMessages(): void {
  if (!state) return;
  const messages = state.conversation?.messages ?? [];
  ui.messages.replaceChildren(...messages.map((m, i) => messageElement(m, i === messages.length - 1)));
  if (messages.length === 0) {
    const empty = document.createElement('p');
    empty.className = 'empty';
    empty.textContent = 'Start a conversation. Tokens are coloured by where they came from; hover one for p and q.';
    ui.messages.append(empty);
  }
  ui.messages.scrollTop = ui.messages.scrollHeight;
}

function messageElement(m: ChatMessage, last: boolean): HTMLElement {
  const el = document.createElement('article');
  el.className = `message ${m.role}`;
  el.dataset.id = String(m.id);
  const body = document.createElement('div');
  body.className = 'body';
  fillBody(body, m);
  el.append(body);
  const footer = document.createElement('footer');
  if (m.role === 'assistant') {
    const line = document.createElement('span');
    line.className = 'reply-summary';
    line.textContent = replyFooter(m);
    footer.append(line);
    if (last && !state.streaming) footer.append(textButton('Regenerate', 'regenerate', () => regenerate(m.id)));
  } else if (m.role === 'user' && !state.streaming) {
    footer.append(textButton('Edit', 'edit', async () => startEdit(m)));
  }
  el.append(footer);
  return el;
}

function fillBody(body: HTMLElement, m: ChatMessage): void {
  if (m.role === 'assistant' && m.tokens && ui.colours.checked) body.replaceChildren(renderTokens(m.tokens));
  else if (m.role === 'assistant') body.replaceChildren(renderMarkdown(m.content));
  else body.textContent = m.content;
}

function replyFooter(m: ChatMessage): string {
  const parts: string[] = [];
  // Each reply's figures as its own settings say: the k it was made with, and whether a
  // remote engine wrote it (replies stored before settings were kept: local, k auto).
  if (m.stats) parts.push(m.settings?.remote ? summarizeRemote(m.stats) : summarize(m.stats, m.settings?.k ?? 'auto'));
  if (m.finish_reason === 'cancelled') parts.push('stopped');
  if (m.finish_reason === 'error') parts.push('failed');
  if (m.finish_reason === 'length') parts.push('hit the token limit');
  if (m.finish_reason === 'unsaved') parts.push('not saved: only in this window');
  if (!m.finish_reason && !state.streaming) parts.push('interrupted');
  if (m.settings_label) parts.push(m.settings_label);
  return parts.join(' · ');
}

function textButton(text: string, name: string, action: () => Promise<void>): HTMLButtonElement {
  const b = document.createElement('button');
  b.type = 'button';
  b.className = `small ${name}`;
  b.textContent = text;
  b.addEventListener('click', () => action().catch(showNotice));
  return b;
}

function startEdit(m: ChatMessage): void {
  state.editing = m.id;
  ui.prompt.value = m.content;
  ui.prompt.focus();
  ui.send.textContent = 'Resend';
}

// ----- replies -----

async function send(): Promise<void> {
  const text = ui.prompt.value.trim();
  if (!text || state.streaming) return;
  clearNotice();
  if (!state.conversation) state.conversation = await state.backend.createConversation();
  const id = state.conversation.id;
  if (state.editing !== null) await state.backend.truncate(id, state.editing);
  state.editing = null;
  ui.send.textContent = 'Send';
  await state.backend.addMessage(id, 'user', text);
  ui.prompt.value = '';
  await refreshAll();
  await streamReply(id);
}

async function regenerate(messageId: number): Promise<void> {
  if (!state.conversation || state.streaming) return;
  clearNotice();
  await state.backend.truncate(state.conversation.id, messageId);
  await refreshAll();
  await streamReply(state.conversation.id);
}

async function streamReply(conversationId: number): Promise<void> {
  const message: ChatMessage = { id: -1, role: 'assistant', content: '', tokens: [] };
  const live = messageElement(message, true);
  live.classList.add('streaming');
  ui.messages.querySelector(':scope > p.empty')?.remove();
  ui.messages.append(live);
  const summary = live.querySelector('.reply-summary') as HTMLElement;
  const remote = state.settings.remote != null;
  const panel = new SpeedPanel(remote || state.settings.drafter !== 'none', remote);
  // Painting is batched: the text, the speed figures and the scroll move together a few
  // times a second, however fast tokens come.
  const view = new ReplyStream(live.querySelector('.body') as HTMLElement, {
    colours: ui.colours.checked,
    onPaint: () => {
      panel.paint();
      followReply();
    },
  });
  state.streaming = { handle: null, message, view };
  setStreaming(true);
  const onEvent = (event: ReplyEvent) => {
    if (event.kind === 'prefill') {
      // A long prompt takes a while to read; say how far it got until the first token.
      summary.textContent = `reading the prompt · ${Math.floor((100 * event.done) / Math.max(1, event.total))}%`;
    } else if (event.kind === 'tokens') {
      if (summary.textContent) summary.textContent = '';
      for (const token of event.tokens) view.push(token);
    } else if (event.kind === 'step') {
      panel.step(event.step);
      view.schedule();
    } else if (event.kind === 'done') {
      view.finish();
      panel.finish(event.stats);
      ui.summary.textContent = state.settings.remote ? summarizeRemote(event.stats) : summarize(event.stats, state.settings.k);
    } else if (event.kind === 'failed') {
      view.finish();
      showNotice(event.error);
    } else if (event.kind === 'unsaved') {
      // The history could not keep it (a full disk): the reply goes on, drawn here only.
      showNotice(event.error);
    }
  };
  let stored: ChatMessage | undefined;
  try {
    // The transport folds each event into the reply it hands back; the view draws from events.
    const handle = await state.backend.reply(conversationId, state.settings, onEvent);
    state.streaming.handle = handle;
    stored = await handle.done;
  } catch (e) {
    showNotice(e);
  } finally {
    state.streaming = null;
    setStreaming(false);
    if (stored?.finish_reason === 'error' && !stored.content) await giveBackPrompt(conversationId);
    // The finished reply is drawn whole, once, from the stored conversation.
    await refreshAll();
    if (stored) keepDrawnReply(stored);
    document.body.dataset.replies = String(Number(document.body.dataset.replies ?? 0) + 1);
  }
}

/** The window never trades a longer reply it drew for a shorter stored one: when the history
 *  could not keep all of it (a full disk), the drawn reply stays, marked as not saved. */
function keepDrawnReply(drawn: ChatMessage): void {
  const messages = state.conversation?.messages;
  const i = messages?.findIndex((m) => m.id === drawn.id) ?? -1;
  if (!messages || i < 0 || messages[i].content.length >= drawn.content.length) return;
  messages[i] = { ...drawn, finish_reason: 'unsaved' };
  renderMessages();
}

/** Keep the newest text in view, unless the reader scrolled up to read something else. */
let following = true;

function followReply(): void {
  if (following) ui.messages.scrollTop = ui.messages.scrollHeight;
}

/** The speed panel's live figures: each step's figures are kept, and drawn when the reply
 *  paints. */
class SpeedPanel {
  private latest: StepEvent | null = null;
  private readonly speedups: number[] = [];

  step(step: StepEvent): void {
    this.latest = step;
    if (step.speedup_vs_plain != null) this.speedups.push(step.speedup_vs_plain);
  }

  constructor(
    private readonly drafting: boolean,
    private readonly remote = false,
  ) {}

  paint(): void {
    if (!this.latest) return;
    const figures = liveFigures(this.latest, this.drafting, this.remote);
    const set = (name: string, value: string) => {
      const el = ui.speed.querySelector(`[data-figure="${name}"]`);
      if (el && el.textContent !== value) el.textContent = value;
    };
    set('tps', figures.tokensPerSecond.replace(' tok/s', ''));
    set('speedup', figures.speedup);
    set('acceptance', figures.acceptance);
    set('k', figures.k);
    ui.speedupFigure.title = figures.against;
    if (this.speedups.length) ui.spark.innerHTML = sparkline(this.speedups);
  }

  /** The reply ended: the panel shows the figures stored with it (the last step event
   *  precedes the step that ended the reply). */
  finish(stats: GenerationStats): void {
    const spec = stats.speculative;
    this.latest = {
      k: this.latest?.k ?? 0,
      accepted: this.latest?.accepted ?? 0,
      generated: stats.generated_tokens,
      tokens_per_second: stats.tokens_per_second,
      speedup_vs_plain: spec?.speedup_vs_plain ?? null,
      plain_ms_per_token: spec?.plain_ms_per_token ?? null,
      plain_steps: spec?.plain_steps ?? 0,
      acceptance_rate: spec && spec.drafted > 0 ? spec.acceptance_rate : null,
    };
    this.paint();
  }
}

/** A reply that failed before its first token (a prompt over the context, say) leaves no trace:
 * the question goes back to the composer, to shorten or resend, and the chat stays usable. */
async function giveBackPrompt(conversationId: number): Promise<void> {
  const conversation = await state.backend.conversation(conversationId);
  const question = conversation.messages.findLast((m) => m.role === 'user');
  if (!question) return;
  await state.backend.truncate(conversationId, question.id);
  ui.prompt.value = question.content;
}

function setStreaming(on: boolean): void {
  ui.send.hidden = on;
  ui.stop.hidden = !on;
  if (on) {
    ui.speed.hidden = false;
    ui.summary.textContent = '';
    ui.spark.innerHTML = '';
    for (const el of ui.speed.querySelectorAll('[data-figure]')) el.textContent = '–';
  }
}

// ----- settings -----

async function openSettings(): Promise<void> {
  ui.settingsError.textContent = '';
  const form = ui.settingsForm;
  const s = state.settings;
  const models = await loadModels(s.target);
  const target = form.elements.namedItem('target') as HTMLSelectElement;
  const runnable = state.backend.canChooseTarget ? models.filter((m) => m.runnable !== false) : [];
  target.replaceChildren(...runnable.map((m) => option(m.path, label(m))));
  if (![...target.options].some((o) => o.value === s.target)) target.append(option(s.target, s.target));
  for (const c of await loadConnections()) {
    const group = document.createElement('optgroup');
    group.label = `Remote: ${c.base_url}`;
    group.append(...c.models.map((m) => option(remoteValue({ base_url: c.base_url, model: m }), `${remoteModelName(m)} @ ${remoteHost(c.base_url)}`)));
    target.append(group);
  }
  target.value = s.remote ? remoteValue(s.remote) : s.target;
  if (target.selectedIndex < 0 && s.remote) target.append(option(remoteValue(s.remote), `${remoteModelName(s.remote.model)} @ ${remoteHost(s.remote.base_url)}`));
  target.value = s.remote ? remoteValue(s.remote) : s.target;
  target.disabled = !state.backend.canChooseTarget;
  const withModel = s.drafter === 'model' || s.drafter === 'auto';
  fillDrafts(models, s.target, withModel ? `model:${s.draft}` : s.drafter);
  const copies = form.elements.namedItem('copies') as HTMLInputElement;
  copies.checked = s.drafter === 'auto';
  const draftSelect = form.elements.namedItem('draft') as HTMLSelectElement;
  // A remote drafts (or not) as it was started: the local drafting settings are greyed out.
  const localOnly = ['draft', 'copies', 'k', 'context', 'device'];
  const applyTarget = () => {
    const remote = parseRemote(target.value) !== null;
    for (const name of localOnly) (form.elements.namedItem(name) as HTMLInputElement).disabled = remote || (!state.backend.canChooseTarget && (name === 'context' || name === 'device'));
    // Copies ride beside a draft model; prompt lookup already is copying, and none drafts nothing.
    if (!remote) copies.disabled = !draftSelect.value.startsWith('model:');
    if (remote) ui.draftNote.textContent = 'A remote engine drafts (or not) as it was started: draft, k, context and device apply to local models.';
  };
  target.onchange = () => {
    if (parseRemote(target.value)) applyTarget();
    else void loadModels(target.value).then((list) => { fillDrafts(list, target.value, 'none'); applyTarget(); });
  };
  draftSelect.onchange = applyTarget;
  const k = form.elements.namedItem('k') as HTMLSelectElement;
  k.replaceChildren(option('auto', 'auto (measured)'), ...Array.from({ length: 16 }, (_, i) => option(String(i + 1), String(i + 1))));
  k.value = String(s.k);
  for (const name of ['mode', 'temperature', 'top_p', 'top_k', 'seed', 'max_tokens', 'context', 'device'] as const) {
    (form.elements.namedItem(name) as HTMLInputElement).value = String(s[name] ?? '');
  }
  applyTarget();
  ui.apiKeyField.hidden = !state.backend.apiKey;
  (form.elements.namedItem('api_key') as HTMLInputElement).value = state.backend.apiKey?.() ?? '';
  ui.settingsDialog.showModal();
}

/** The remembered remote engines; none where the transport has no library (the browser). */
async function loadConnections(): Promise<Connection[]> {
  return (await state.backend.library?.connections().catch((e) => {
    showNotice(e);
    return [] as Connection[];
  })) ?? [];
}

async function loadModels(target: string): Promise<ModelEntry[]> {
  return state.backend.models(target).catch((e) => {
    showNotice(e);
    return [] as ModelEntry[];
  });
}

/** The draft choices for `target`: only compatible models can be picked; the others say why. */
function fillDrafts(models: ModelEntry[], target: string, chosen: string): void {
  const draft = ui.settingsForm.elements.namedItem('draft') as HTMLSelectElement;
  draft.replaceChildren(option('none', 'None (plain decoding)'), option('lookup', 'Prompt lookup (n-grams from the chat)'));
  const refused: string[] = [];
  for (const m of models.filter((m) => m.path !== target)) {
    const o = option(`model:${m.path}`, label(m));
    if (m.runnable === false || m.compatible === false) {
      o.disabled = true;
      o.textContent += ' (cannot draft)';
      refused.push(`${m.name}: ${m.reason ?? 'incompatible'}`);
    }
    draft.append(o);
  }
  draft.value = chosen;
  if (draft.selectedIndex < 0 || draft.selectedOptions[0]?.disabled) draft.value = 'none';
  ui.draftNote.textContent = refused.length
    ? `Greyed-out drafts cannot pair with this target. ${refused.join(' · ')}`
    : '';
}

function option(value: string, text: string): HTMLOptionElement {
  const o = document.createElement('option');
  o.value = value;
  o.textContent = text;
  return o;
}

function label(m: ModelEntry): string {
  const size = m.file_bytes ? ` · ${(m.file_bytes / 2 ** 20).toFixed(0)} MiB` : '';
  const quant = m.quantization ? ` · ${m.quantization}` : '';
  return `${m.name}${quant}${size}`;
}

function readSettings(): Settings {
  const form = ui.settingsForm;
  const value = (name: string) => (form.elements.namedItem(name) as HTMLInputElement).value;
  const draft = value('draft');
  const k = value('k');
  const copies = (form.elements.namedItem('copies') as HTMLInputElement).checked;
  const model: Settings['drafter'] = copies ? 'auto' : 'model';
  const remote = parseRemote(value('target'));
  return {
    ...state.settings,
    target: remote ? state.settings.target : value('target'),
    remote,
    drafter: draft.startsWith('model:') ? model : (draft as Settings['drafter']),
    draft: draft.startsWith('model:') ? draft.slice('model:'.length) : state.settings.draft,
    k: k === 'auto' ? 'auto' : Number(k),
    mode: value('mode') as Settings['mode'],
    temperature: Number(value('temperature')),
    top_p: Number(value('top_p')),
    top_k: Number(value('top_k')),
    seed: value('seed').trim() === '' ? null : Number(value('seed')),
    max_tokens: Number(value('max_tokens')),
    context: Number(value('context')),
    device: value('device'),
  };
}

async function saveSettings(): Promise<void> {
  const next = readSettings();
  ui.settingsError.textContent = '';
  const save = ui.settingsSave;
  save.disabled = true;
  save.textContent = 'Loading…';
  try {
    state.backend.setApiKey?.((ui.settingsForm.elements.namedItem('api_key') as HTMLInputElement).value.trim());
    const status = await state.backend.applyModels(next);
    await state.backend.saveSettings(next);
    // The HTTP transport learns the served model's name once the key lets it ask.
    state.settings = state.backend.apiKey ? await state.backend.settings() : next;
    showStatus(status);
    ui.settingsDialog.close();
  } catch (e) {
    ui.settingsError.textContent = toBackendError(e).message;
  } finally {
    save.disabled = false;
    save.textContent = 'Save';
  }
}

function showStatus(status: Awaited<ReturnType<Backend['status']>>): void {
  const name = (path: string | null) => (path ? (path.split('/').pop() ?? path).replace(/\.gguf$/, '') : 'none');
  // Replies carry the user's own drafter; the status shows what they will get.
  const chosen = state.backend.canChooseTarget ? state.settings.drafter : (status.drafter ?? state.settings.drafter);
  const drafters: Record<Settings['drafter'], string> = {
    none: 'none',
    lookup: 'prompt lookup',
    model: name(status.draft),
    auto: status.draft ? `${name(status.draft)} + copies` : 'copies',
  };
  const drafter = drafters[chosen];
  ui.engine.dataset.state = status.state ?? (status.loading ? 'loading' : 'ready');
  if (state.settings.remote) ui.engine.textContent = `target ${status.target ?? state.settings.remote.model} · draft: the remote's · ${status.device}`;
  else if (status.loading) ui.engine.textContent = 'loading models…';
  else if (!status.target) ui.engine.textContent = `no model loaded${status.error ? '' : ': choose one in Settings'}`;
  else ui.engine.textContent = `target ${name(status.target)} · draft ${drafter} · k ${state.settings.k}${status.device ? ` · ${status.device}` : ''}`;
  if (status.error) showNotice(status.error);
  // Models load in the background at start: look again until they are in.
  if (status.loading) setTimeout(() => void state.backend.status().then(showStatus, showNotice), 1000);
}

// ----- start -----

function wire(): void {
  ui.newChat.addEventListener('click', () => {
    state.conversation = null;
    state.editing = null;
    ui.speed.hidden = true;
    void refreshAll().catch(showNotice);
    ui.prompt.focus();
  });
  ui.search.addEventListener('input', () => void refreshList().catch(showNotice));
  ui.messages.addEventListener('scroll', () => {
    const m = ui.messages;
    following = m.scrollHeight - m.scrollTop - m.clientHeight < 48;
  });
  // A link in a reply never navigates the window: it opens outside the app. (The shell also
  // refuses any navigation away from the app: src-tauri/lib.rs.)
  ui.messages.addEventListener('click', (e) => {
    const link = (e.target as HTMLElement).closest('a[href], area[href]') as HTMLAnchorElement | null;
    if (!link) return;
    e.preventDefault();
    if (/^(https?:|mailto:)/i.test(link.href)) void state.backend.openLink(link.href).catch(showNotice);
  });
  ui.composer.addEventListener('submit', (e) => {
    e.preventDefault();
    void send().catch(showNotice);
  });
  ui.prompt.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey) {
      e.preventDefault();
      void send().catch(showNotice);
    }
  });
  ui.stop.addEventListener('click', () => void state.streaming?.handle?.cancel().catch(showNotice));
  ui.colours.addEventListener('change', () => applyColours(ui.colours.checked));
  ui.theme.addEventListener('click', () => applyTheme(document.documentElement.dataset.theme === 'dark' ? 'light' : 'dark'));
  ui.settingsButton.addEventListener('click', () => void openSettings().catch(showNotice));
  ui.settingsCancel.addEventListener('click', () => ui.settingsDialog.close());
  wireLibrary();
  ui.settingsForm.addEventListener('submit', (e) => {
    e.preventDefault();
    void saveSettings();
  });
  ui.systemButton.addEventListener('click', () => {
    (ui.systemForm.elements.namedItem('system') as HTMLTextAreaElement).value = state.conversation?.system_prompt ?? '';
    ui.systemDialog.showModal();
  });
  ui.systemCancel.addEventListener('click', () => ui.systemDialog.close());
  ui.systemForm.addEventListener('submit', (e) => {
    e.preventDefault();
    void (async () => {
      const text = (ui.systemForm.elements.namedItem('system') as HTMLTextAreaElement).value;
      if (!state.conversation) state.conversation = await state.backend.createConversation();
      await state.backend.setSystemPrompt(state.conversation.id, text);
      ui.systemDialog.close();
      await refreshAll();
    })().catch(showNotice);
  });
}

/** Opens the library dialog; null in a transport without one (the browser UI of `specula serve`). */
let openLibrary: (() => Promise<void>) | null = null;

function wireLibrary(): void {
  const library = state.backend.library;
  if (!library) return;
  const dialog = ui.libraryDialog;
  openLibrary = wireLibraryDialog(dialog, library, {
    models: () => loadModels(state.settings.target),
    currentTarget: () => state.settings.target,
    usePair: async (targetPath, draftPath) => {
      const next: Settings = { ...state.settings, target: targetPath, draft: draftPath, drafter: 'auto' };
      const status = await state.backend.applyModels(next);
      await state.backend.saveSettings(next);
      state.settings = next;
      showStatus(status);
      dialog.close();
      ui.prompt.focus();
    },
    onError: showNotice,
  });
  ui.libraryButton.hidden = false;
  ui.libraryButton.addEventListener('click', () => void openLibrary?.().catch(showNotice));
}

/** A first run (no model anywhere the app looks) opens the library on the recommended pair, so
 *  nobody needs a terminal to get started. */
async function offerFirstRun(): Promise<void> {
  if (!openLibrary) return;
  const models = await loadModels(state.settings.target);
  if (models.length === 0) await openLibrary();
}

async function start(): Promise<void> {
  const preferred = window.matchMedia?.('(prefers-color-scheme: dark)').matches ? 'dark' : 'light';
  applyTheme(localStorage.getItem('specula.theme') ?? preferred);
  ui.colours.checked = localStorage.getItem('specula.colours') !== '0';
  document.body.classList.toggle('no-colours', !ui.colours.checked);
  const backend = await connect();
  // A server that wants a key answers nothing useful before the user gives it: start with the
  // defaults, say why, and let Settings take the key.
  const settings = await backend.settings().catch((e) => {
    showNotice(e);
    return { ...DEFAULT_SETTINGS };
  });
  state = { backend, settings, conversation: null, streaming: null, editing: null };
  wire();
  const recent = await backend.conversations();
  if (recent[0]) state.conversation = await backend.conversation(recent[0].id);
  await refreshAll();
  // A remote target's status is a check of its connection.
  await (settings.remote ? backend.applyModels(settings) : backend.status()).then(showStatus, showNotice);
  // Said after the status, which may have a notice of its own: this one matters more.
  const notices = (await backend.startupNotices?.().catch(() => [])) ?? [];
  if (notices.length) showNotice({ code: notices[0].code, message: notices.map((n) => n.message).join(' ') });
  // A history that could not be opened at start and opened since: its chats are back.
  backend.onHistoryRestored?.(() => {
    clearNotice();
    state.conversation = null;
    void refreshAll().catch(showNotice);
  });
  await offerFirstRun().catch(showNotice);
  document.body.dataset.ready = 'true';
}

start().catch(showNotice);
