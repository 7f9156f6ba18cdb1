import { beforeEach, describe, expect, it, vi } from 'vitest';
import type { Backend } from './api/backend';
import { applyEvent, isLast } from './api/events';
import { replyLabel } from './api/label';
import { LocalConversations } from './api/local';
import type { ChatMessage, Conversation, EngineStatus, GenerationStats, ModelEntry, ReplyEvent, ReplyHandle, Role, Settings } from './api/types';
import { DEFAULT_SETTINGS } from './api/types';
import { Controller } from './controller';
import { summarize } from './render/speed';
import { $, loadPage } from './testing/page';
import indexHtml from '../index.html?raw';
import { Appearance } from './views/appearance';
import { NoticeView } from './views/notice';
import { findPage } from './views/page';

const clone = <T>(value: T): T => JSON.parse(JSON.stringify(value));
const token = (text: string) => ({ id: 1, text, source: 'accepted' as const, p: 0.9, q: 0.8 });
const stats: GenerationStats = { prompt_tokens: 5, cached_prompt_tokens: 0, generated_tokens: 2, prefill_ms: 1, decode_ms: 2, tokens_per_second: 9 };
const step = { k: 4, accepted: 1, generated: 2, tokens_per_second: 9, speedup_vs_plain: null, plain_ms_per_token: null, plain_steps: 0, acceptance_rate: 0.5 };

/** A Storage in memory, for the conversations the fake backend keeps. */
class MemoryStorage implements Storage {
  private readonly items = new Map<string, string>();
  get length() {
    return this.items.size;
  }
  clear() {
    this.items.clear();
  }
  getItem(key: string) {
    return this.items.get(key) ?? null;
  }
  key(i: number) {
    return [...this.items.keys()][i] ?? null;
  }
  removeItem(key: string) {
    this.items.delete(key);
  }
  setItem(key: string, value: string) {
    this.items.set(key, value);
  }
}

/** A backend in memory, its conversations kept by the browser transport's own store (a tree).
 *  Each reply sends the events of `script`, a timer tick apart, stored as it streams (as both
 *  transports do); `hold` stops it before the event at that index until `release` is called. */
class FakeBackend implements Backend {
  readonly transport = 'http' as const;
  readonly canChooseTarget = true;
  readonly store = new LocalConversations(new MemoryStorage());
  saved: Settings = { ...DEFAULT_SETTINGS, target: '/m/t.gguf', draft: '/m/d.gguf', drafter: 'model', k: 4, mode: 'greedy' };
  script: ReplyEvent[] = [];
  hold: number | null = null;
  release = () => {};
  replies: Settings[] = [];
  cancels = 0;
  readonly decisions: string[] = [];

  /** Each conversation with the branch it shows. */
  get chats(): Map<number, Conversation> {
    return new Map(this.store.list().map(({ id }) => [id, this.store.get(id)]));
  }
  async status(): Promise<EngineStatus> {
    return { state: 'ready', target: '/m/t.gguf', draft: '/m/d.gguf', device: 'cpu', loading: false };
  }
  async models(): Promise<ModelEntry[]> {
    return [];
  }
  applyModels = () => this.status();
  async settings() {
    return { ...this.saved };
  }
  async saveSettings(settings: Settings) {
    this.saved = settings;
  }
  async conversations(query = '') {
    return this.store.list(query);
  }
  async conversation(id: number) {
    return this.store.get(id);
  }
  async createConversation() {
    return this.store.create();
  }
  async renameConversation(id: number, title: string) {
    this.store.update(id, (c) => (c.title = title));
  }
  async setSystemPrompt(id: number, text: string) {
    this.store.update(id, (c) => (c.system_prompt = text));
  }
  async setOverflow(id: number, overflow: Settings['overflow'] | null) {
    this.store.update(id, (c) => (c.overflow = overflow));
  }
  async setThinking(id: number, thinking: boolean | null) {
    this.store.update(id, (c) => (c.thinking = thinking));
  }
  async deleteConversation(id: number) {
    this.store.remove(id);
  }
  async addMessage(conversationId: number, role: Role, content: string) {
    return this.store.addMessage(conversationId, { role, content });
  }
  async branchBefore(conversationId: number, messageId: number) {
    this.store.branchBefore(conversationId, messageId);
  }
  async showBranch(conversationId: number, messageId: number) {
    return this.store.showBranch(conversationId, messageId);
  }
  async fork(conversationId: number, messageId: number) {
    return this.store.fork(conversationId, messageId);
  }
  async deleteMessage(conversationId: number, messageId: number) {
    this.store.deleteMessage(conversationId, messageId);
  }
  async restoreMessage(conversationId: number, messageId: number) {
    this.store.restoreMessage(conversationId, messageId);
  }
  async restoreConversation(id: number) {
    this.store.restore(id);
  }
  async purgeDeleted() {
    this.store.purge();
  }
  async openLink() {}

  async reply(conversationId: number, settings: Settings, onEvent: (event: ReplyEvent) => void): Promise<ReplyHandle> {
    this.replies.push(settings);
    const message = this.store.addMessage(conversationId, { role: 'assistant', content: '', tokens: [], settings, settings_label: replyLabel(settings) });
    const save = () => this.store.updateMessage(conversationId, message);
    const events = [...this.script];
    let cancelled = false;
    const done = new Promise<ChatMessage>((resolve) => {
      let sent = 0;
      const tick = () => {
        if (cancelled) {
          message.finish_reason = 'cancelled';
          save();
          return resolve(clone(message));
        }
        if (sent === this.hold) {
          this.hold = null;
          this.release = () => setTimeout(tick);
          return;
        }
        const event = events[sent++];
        applyEvent(message, event);
        save();
        onEvent(event);
        if (isLast(event)) resolve(clone(message));
        else setTimeout(tick);
      };
      setTimeout(tick);
    });
    return {
      cancel: async () => void ((cancelled = true), (this.cancels += 1)),
      decide: async (callId, decision) => void this.decisions.push(`${callId} ${decision}`),
      messageId: message.id,
      done,
    };
  }
}

async function start(backend: FakeBackend) {
  const page = findPage(document);
  const controller = new Controller(backend, page, { notice: new NoticeView(page.notice), appearance: new Appearance(page.appearance, localStorage, false) });
  await controller.start();
  return controller;
}

async function ask(text: string) {
  const replies = Number(document.body.dataset.replies ?? 0);
  $<HTMLTextAreaElement>('#prompt').value = text;
  $('#prompt').dispatchEvent(new KeyboardEvent('keydown', { key: 'Enter', cancelable: true }));
  return () => vi.waitFor(() => expect(Number(document.body.dataset.replies)).toBe(replies + 1));
}

const hello: ReplyEvent[] = [
  { kind: 'started', request_id: 1, prompt_tokens: 5, decoding: { drafter: 'model', k: 4 }, seed: 0 },
  { kind: 'tokens', tokens: [token('Hel'), token('lo')] },
  { kind: 'step', step },
  { kind: 'done', finish_reason: 'end_of_turn', text: 'Hello', stats },
];

describe('the controller', () => {
  beforeEach(() => {
    loadPage(indexHtml);
    localStorage.clear();
    delete document.body.dataset.replies;
  });

  it('sends the prompt, streams the reply from its events, and shows it as stored', async () => {
    const backend = new FakeBackend();
    backend.script = hello;
    backend.hold = 3;
    await start(backend);
    expect(document.body.dataset.ready).toBe('true');
    expect($('#engine-status').textContent).toBe('target t · draft d · k 4 · cpu');

    const ended = await ask('  Say hello ');
    // While it streams: Stop, and the reply's tokens as they come.
    await vi.waitFor(() => expect(document.querySelectorAll('#messages .streaming .tok').length).toBe(2));
    expect([$('#send').hidden, $('#stop').hidden]).toEqual([true, false]);
    expect($<HTMLTextAreaElement>('#prompt').value).toBe('');
    backend.release();
    await ended();

    const [chat] = backend.chats.values();
    expect(chat.messages.map((m) => [m.role, m.content, m.finish_reason])).toEqual([
      ['user', 'Say hello', undefined],
      ['assistant', 'Hello', 'stop'],
    ]);
    expect(backend.replies).toEqual([backend.saved]);
    expect(document.querySelector('#messages .streaming')).toBeNull();
    expect($('#messages .message.assistant .body').textContent).toBe('Hello');
    expect($('#messages .message.assistant .reply-summary').textContent).toBe(`${summarize(stats, 4)} · draft model · k 4 · greedy`);
    expect($('#summary').textContent).toBe(summarize(stats, 4));
    expect([$('#send').hidden, $('#stop').hidden, $('#speed-panel').hidden]).toEqual([false, true, false]);
    expect([...document.querySelectorAll<HTMLElement>('#conversation-list li.current')].map((li) => li.dataset.id)).toEqual([String(chat.id)]);
  });

  it('a reply left streaming in its chat is there again when the chat is reopened, its question still answerable', async () => {
    const backend = new FakeBackend();
    const card = { id: 'call_0_add', server: 'arith', tool: 'add', arguments: { a: 1234, b: 5678 }, at: 1, running: false };
    backend.script = [hello[0], { kind: 'tokens', tokens: [token('Adding.')] }, { kind: 'tool', card }, ...hello.slice(1)];
    backend.hold = 3;
    const [chat, other] = [backend.store.create(), backend.store.create()];
    await start(backend);
    $(`#conversation-list li[data-id="${chat.id}"] .open`).click();
    await vi.waitFor(() => expect($('#conversation-list li.current').dataset.id).toBe(String(chat.id)));
    const ended = await ask('Add 1234 and 5678');
    const buttons = () => document.querySelectorAll<HTMLButtonElement>('#messages .streaming .tool-decision button');
    await vi.waitFor(() => expect(buttons().length).toBe(3));

    $(`#conversation-list li[data-id="${other.id}"] .open`).click();
    await vi.waitFor(() => expect(document.querySelector('#messages .streaming')).toBeNull());
    $(`#conversation-list li[data-id="${chat.id}"] .open`).click();
    // The live reply in place of its stored copy, not beside it, with its card's buttons.
    await vi.waitFor(() => expect(buttons().length).toBe(3));
    expect(document.querySelectorAll('#messages article.message.assistant').length).toBe(1);
    buttons()[0].click();
    expect(backend.decisions).toEqual(['call_0_add once']);
    backend.release();
    await ended();
    expect($('#messages .message.assistant .body').textContent).toContain('Hello');
  });

  it('each chat keeps its own choice of what happens when it outgrows the context', async () => {
    const backend = new FakeBackend();
    const [long, short] = [backend.store.create(), backend.store.create()];
    await start(backend);
    const select = $<HTMLSelectElement>('#overflow-select');
    $(`#conversation-list li[data-id="${long.id}"] .open`).click();
    await vi.waitFor(() => expect($('#conversation-list li.current').dataset.id).toBe(String(long.id)));
    select.value = 'rolling';
    select.dispatchEvent(new Event('change'));
    await vi.waitFor(() => expect(backend.store.get(long.id).overflow).toBe('rolling'));
    $(`#conversation-list li[data-id="${short.id}"] .open`).click();
    await vi.waitFor(() => expect(select.value).toBe(''));
    $(`#conversation-list li[data-id="${long.id}"] .open`).click();
    await vi.waitFor(() => expect(select.value).toBe('rolling'));
    expect(backend.store.get(short.id).overflow ?? null).toBeNull();
  });

  it('Stop cancels the reply, which is kept as stopped; Edit resends in its place', async () => {
    const backend = new FakeBackend();
    backend.script = hello;
    backend.hold = 2;
    await start(backend);
    const ended = await ask('Say hello');
    await vi.waitFor(() => expect($('#stop').hidden).toBe(false));
    $('#stop').click();
    await vi.waitFor(() => expect(backend.cancels).toBe(1));
    backend.release();
    await ended();
    expect($('#messages .message.assistant .reply-summary').textContent).toMatch(/^stopped/);

    document.querySelector<HTMLButtonElement>('#messages .message.user .edit')!.click();
    expect([$<HTMLTextAreaElement>('#prompt').value, $('#send').textContent]).toEqual(['Say hello', 'Resend']);
    const resent = await ask('Say hello again');
    await resent();
    const [chat] = backend.chats.values();
    expect(chat.messages.map((m) => [m.role, m.content])).toEqual([
      ['user', 'Say hello again'],
      ['assistant', 'Hello'],
    ]);
    expect($('#send').textContent).toBe('Send');
    // The first question and its stopped reply are one arrow away.
    const question = chat.messages[0];
    expect(question.siblings).toHaveLength(2);
    const back = await backend.showBranch(chat.id, question.siblings![0]);
    expect(back.messages.map((m) => [m.content, m.finish_reason])).toEqual([
      ['Say hello', undefined],
      ['Hello', 'cancelled'],
    ]);
  });

  it('Regenerate keeps the first answer: ◀ ▶ and Ctrl+Left/Right switch; a delete offers Undo', async () => {
    const backend = new FakeBackend();
    backend.script = hello;
    await start(backend);
    await (await ask('Say hello'))();
    const replies = Number(document.body.dataset.replies);
    document.querySelector<HTMLButtonElement>('#messages .regenerate')!.click();
    await vi.waitFor(() => expect(Number(document.body.dataset.replies)).toBe(replies + 1));
    expect($('#messages .message.assistant .branch-of').textContent).toBe('2/2');

    $<HTMLButtonElement>('#messages [aria-label="Previous branch"]').click();
    await vi.waitFor(() => expect($('#messages .message.assistant .branch-of').textContent).toBe('1/2'));
    document.dispatchEvent(new KeyboardEvent('keydown', { key: 'ArrowRight', ctrlKey: true, cancelable: true }));
    await vi.waitFor(() => expect($('#messages .message.assistant .branch-of').textContent).toBe('2/2'));

    // Delete the newer answer: the older shows, and Undo brings the newer back.
    $<HTMLButtonElement>('#messages .message.assistant .delete').click();
    await vi.waitFor(() => expect($('#toast').hidden).toBe(false));
    expect($('#toast span').textContent).toBe('Deleted a reply and what followed it');
    expect(document.querySelector('#messages .branch-of')).toBeNull();
    $<HTMLButtonElement>('#toast .undo').click();
    await vi.waitFor(() => expect($('#messages .message.assistant .branch-of').textContent).toBe('2/2'));
    expect($('#toast').hidden).toBe(true);

    // Up in the empty composer edits the last question.
    $('#prompt').dispatchEvent(new KeyboardEvent('keydown', { key: 'ArrowUp', bubbles: true, cancelable: true }));
    expect([$<HTMLTextAreaElement>('#prompt').value, $('#send').textContent]).toEqual(['Say hello', 'Resend']);
  });

  it('a Regenerate that fails before its first token leaves the first answer, and the question, as they were', async () => {
    const backend = new FakeBackend();
    backend.script = hello;
    await start(backend);
    await (await ask('Say hello'))();
    backend.script = [{ kind: 'failed', error: { code: 'context_overflow', message: 'the prompt is longer than the context' } }];
    const replies = Number(document.body.dataset.replies);
    document.querySelector<HTMLButtonElement>('#messages .regenerate')!.click();
    await vi.waitFor(() => expect(Number(document.body.dataset.replies)).toBe(replies + 1));
    const [chat] = backend.chats.values();
    expect(chat.messages.map((m) => [m.role, m.content])).toEqual([
      ['user', 'Say hello'],
      ['assistant', 'Hello'],
    ]);
    expect(chat.messages[1].siblings).toHaveLength(1);
    expect($<HTMLTextAreaElement>('#prompt').value, 'nothing given back: the question was not new').toBe('');
    expect($('#notice').dataset.code).toBe('context_overflow');
  });

  it('two quick deletes each keep their own Undo', async () => {
    const backend = new FakeBackend();
    backend.script = hello;
    await start(backend);
    await (await ask('First'))();
    $('#new-chat').click();
    await (await ask('Second'))();
    const [a, b] = [...document.querySelectorAll<HTMLButtonElement>('#conversation-list [aria-label="Delete"]')];
    a.click();
    b.click();
    await vi.waitFor(() => expect($('#toast span').textContent).toBe('Deleted “First”'));
    $<HTMLButtonElement>('#toast .undo').click();
    await vi.waitFor(() => expect(backend.store.list().map((c) => c.title)).toEqual(['First']));
  });

  it('a deleted chat comes back on Undo, and is gone for good once the toast goes', async () => {
    const backend = new FakeBackend();
    backend.script = hello;
    await start(backend);
    await (await ask('Keep me'))();
    const [chat] = backend.chats.values();
    document.querySelector<HTMLButtonElement>('#conversation-list [aria-label="Delete"]')!.click();
    await vi.waitFor(() => expect($('#toast span').textContent).toBe('Deleted “Keep me”'));
    expect(document.querySelectorAll('#conversation-list li')).toHaveLength(0);
    $<HTMLButtonElement>('#toast .undo').click();
    await vi.waitFor(() => expect(document.querySelectorAll('#conversation-list li')).toHaveLength(1));
    expect($('#title').textContent).toBe('Keep me');

    document.querySelector<HTMLButtonElement>('#conversation-list [aria-label="Delete"]')!.click();
    await vi.waitFor(() => expect($('#toast').hidden).toBe(false));
    $<HTMLButtonElement>('#toast [aria-label="Dismiss"]').click();
    await vi.waitFor(() => expect($('#toast').hidden).toBe(true));
    await expect(backend.restoreConversation(chat.id)).rejects.toMatchObject({ code: 'not_found' });
  });

  it('a reply that fails before its first token gives the question back and says why', async () => {
    const backend = new FakeBackend();
    backend.script = [{ kind: 'failed', error: { code: 'context_overflow', message: 'the prompt is longer than the context' } }];
    await start(backend);
    const ended = await ask('word word word');
    await ended();
    expect($<HTMLTextAreaElement>('#prompt').value).toBe('word word word');
    expect($('#notice').hidden).toBe(false);
    expect($('#notice').dataset.code).toBe('context_overflow');
    expect($('#notice span').textContent).toBe('the prompt is longer than the context');
    const [chat] = backend.chats.values();
    expect(chat.messages).toEqual([]);
    expect(document.querySelectorAll('#messages .message').length).toBe(0);
  });
});
