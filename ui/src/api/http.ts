// The browser transport: replies stream from `specula serve` over its OpenAI-compatible API
// (SSE, with Specula's `specula` extension carrying provenance, steps and stats), and the
// conversations live in the browser's own storage.

import type { Backend } from './backend';
import { applyEvent, isLast } from './events';
import { LocalConversations } from './local';
import { replyLabel } from './label';
import {
  asErrorCode,
  type BackendError,
  type ChatMessage,
  type Conversation,
  type ConversationSummary,
  DEFAULT_SETTINGS,
  knownCode,
  type EngineStatus,
  type KvFormat,
  type ModelEntry,
  type ReplyEvent,
  type ReplyHandle,
  type Role,
  type Overflow,
  type Settings,
  type TokenEvent,
  toBackendError,
} from './types';
import { shownThinking, splitReply } from '../render/thinking';

const SETTINGS_KEY = 'specula.settings';
const API_KEY = 'specula.apiKey';
/** The most often a streaming reply rewrites the stored history. */
const SAVE_INTERVAL_MS = 1000;

interface Health {
  state?: EngineStatus['state'];
  model: string;
  draft: string | null;
  drafter: EngineStatus['drafter'];
  device?: string | null;
  context?: number | null;
  trained_context?: number | null;
  kv_format?: KvFormat | null;
  error?: BackendError | null;
  last_failure?: BackendError | null;
}

export class HttpBackend implements Backend {
  readonly transport = 'http' as const;
  readonly canChooseTarget = false;
  private readonly store: LocalConversations;

  /** `storage` keeps the history and settings; `keyStorage` the API key, for this browser
   *  session only (sessionStorage): a key left in localStorage outlives the session and is
   *  readable by any script the page ever runs. */
  constructor(
    private readonly base: string,
    private readonly storage: Storage,
    private readonly fetcher: typeof fetch = (...args) => fetch(...args),
    private readonly keyStorage: Storage = globalThis.sessionStorage ?? storage,
  ) {
    this.store = new LocalConversations(storage);
    // Where earlier versions kept the key: it moves to the session's storage.
    const old = storage === keyStorage ? null : storage.getItem(API_KEY);
    if (old !== null) {
      storage.removeItem(API_KEY);
      if (!keyStorage.getItem(API_KEY)) keyStorage.setItem(API_KEY, old);
    }
  }

  /** The server's API key, as the user entered it (kept for this browser session only). */
  apiKey(): string {
    return this.keyStorage.getItem(API_KEY) ?? '';
  }

  setApiKey(key: string): void {
    if (key) this.keyStorage.setItem(API_KEY, key);
    else this.keyStorage.removeItem(API_KEY);
  }

  private headers(extra: Record<string, string> = {}): Record<string, string> {
    const key = this.apiKey();
    return key ? { ...extra, authorization: `Bearer ${key}` } : extra;
  }

  private async health(): Promise<Health> {
    const response = await this.fetcher(`${this.base}/health`, { headers: this.headers() });
    // 503 still carries the health, with the reason the engine is not serving.
    if (response.ok || response.status === 503) {
      const health = (await response.json().catch(() => null)) as Health | null;
      if (health?.model !== undefined) return health;
      // A server with a key tells a caller without it no more than its status.
      if (health && 'status' in health) throw { code: 'invalid_api_key', message: 'This server needs its API key: enter it in Settings.' };
    }
    throw await errorOf(response);
  }

  async status(): Promise<EngineStatus> {
    const h = await this.health();
    return {
      state: h.state ?? 'ready',
      loading: h.state === 'loading',
      target: h.state === 'failed' ? null : h.model,
      draft: h.draft,
      drafter: h.drafter,
      device: h.device ?? 'server',
      ...(h.context && h.trained_context && h.kv_format
        ? { context: { tokens: h.context, trained: h.trained_context, kv_format: h.kv_format } }
        : {}),
      ...(h.error ? { error: { ...h.error, code: asErrorCode(h.error.code) } } : {}),
      ...(h.last_failure ? { last_failure: { ...h.last_failure, code: asErrorCode(h.last_failure.code) } } : {}),
    };
  }

  async models(): Promise<ModelEntry[]> {
    const h = await this.health();
    const entry = (name: string): ModelEntry => ({
      path: name,
      name,
      architecture: '',
      parameters: 0,
      quantization: '',
      file_bytes: 0,
      runnable: true,
    });
    const list = [entry(h.model)];
    if (h.draft) list.push({ ...entry(h.draft), compatible: true });
    return list;
  }

  async applyModels(settings: Settings): Promise<EngineStatus> {
    // The server loaded its models at start; only the per-request overrides change.
    const status = await this.status();
    if (settings.drafter === 'model' && !status.draft) {
      throw { code: 'invalid_setting', message: 'This server has no draft model loaded; start it with --draft.' };
    }
    return { ...status, drafter: settings.drafter };
  }

  async settings(): Promise<Settings> {
    const saved = this.storage.getItem(SETTINGS_KEY);
    const settings = { ...DEFAULT_SETTINGS, ...(saved ? (JSON.parse(saved) as Partial<Settings>) : {}) };
    const h = await this.health();
    settings.target = h.model;
    settings.draft = h.draft ?? '';
    if (!h.draft && settings.drafter === 'model') settings.drafter = 'none';
    return settings;
  }

  async saveSettings(settings: Settings): Promise<void> {
    this.storage.setItem(SETTINGS_KEY, JSON.stringify(settings));
  }

  async conversations(query?: string): Promise<ConversationSummary[]> {
    return this.store.list(query);
  }
  async conversation(id: number): Promise<Conversation> {
    return this.store.get(id);
  }
  async createConversation(): Promise<Conversation> {
    return this.store.create();
  }
  async renameConversation(id: number, title: string): Promise<void> {
    this.store.update(id, (c) => (c.title = title));
  }
  async setSystemPrompt(id: number, text: string): Promise<void> {
    this.store.update(id, (c) => (c.system_prompt = text));
  }
  async setOverflow(id: number, overflow: Overflow | null): Promise<void> {
    this.store.update(id, (c) => (c.overflow = overflow));
  }

  async setThinking(id: number, thinking: boolean | null): Promise<void> {
    this.store.update(id, (c) => (c.thinking = thinking));
  }
  async deleteConversation(id: number): Promise<void> {
    this.store.remove(id);
  }
  async addMessage(conversationId: number, role: Role, content: string): Promise<ChatMessage> {
    return this.store.addMessage(conversationId, { role, content });
  }
  async branchBefore(conversationId: number, messageId: number): Promise<void> {
    this.store.branchBefore(conversationId, messageId);
  }
  async showBranch(conversationId: number, messageId: number): Promise<Conversation> {
    return this.store.showBranch(conversationId, messageId);
  }
  async fork(conversationId: number, messageId: number): Promise<Conversation> {
    return this.store.fork(conversationId, messageId);
  }
  async deleteMessage(conversationId: number, messageId: number): Promise<void> {
    this.store.deleteMessage(conversationId, messageId);
  }
  async restoreMessage(conversationId: number, messageId: number): Promise<void> {
    this.store.restoreMessage(conversationId, messageId);
  }
  async restoreConversation(id: number): Promise<void> {
    this.store.restore(id);
  }
  async purgeDeleted(): Promise<void> {
    this.store.purge();
  }

  async openLink(url: string): Promise<void> {
    window.open(url, '_blank', 'noopener,noreferrer');
  }

  async reply(conversationId: number, settings: Settings, onEvent: (e: ReplyEvent) => void): Promise<ReplyHandle> {
    const conversation = this.store.get(conversationId);
    const messages = [
      ...(conversation.system_prompt ? [{ role: 'system', content: conversation.system_prompt }] : []),
      ...conversation.messages.map(apiMessage),
    ];
    const reply = this.store.addMessage(conversationId, {
      role: 'assistant',
      content: '',
      tokens: [],
      settings_label: replyLabel(settings),
      settings,
    });
    // Saving rewrites the whole history in the browser's storage: during the reply it happens
    // at most once a second (a reload loses at most that), and once when the reply ends.
    let saveTimer: ReturnType<typeof setTimeout> | null = null;
    const save = () => {
      if (saveTimer !== null) clearTimeout(saveTimer);
      saveTimer = null;
      this.store.updateMessage(conversationId, reply);
    };
    const saveSoon = () => (saveTimer ??= setTimeout(save, SAVE_INTERVAL_MS));
    const abort = new AbortController();
    const body = {
      model: settings.target,
      messages,
      stream: true,
      temperature: settings.mode === 'greedy' ? 0 : settings.temperature,
      top_p: settings.top_p,
      top_k: settings.top_k,
      seed: settings.seed,
      max_tokens: settings.max_tokens,
      context_overflow: conversation.overflow ?? settings.overflow,
      ...(conversation.thinking != null ? { chat_template_kwargs: { enable_thinking: conversation.thinking } } : {}),
      speculative: { k: settings.k, mode: settings.mode, drafter: settings.drafter },
    };
    const emit = (event: ReplyEvent) => {
      applyEvent(reply, event);
      if (isLast(event)) save();
      else saveSoon();
      onEvent(event);
    };
    const done = (async () => {
      try {
        const response = await this.fetcher(`${this.base}/v1/chat/completions`, {
          method: 'POST',
          headers: this.headers({ 'content-type': 'application/json' }),
          body: JSON.stringify(body),
          signal: abort.signal,
        });
        if (!response.ok || !response.body) throw await errorOf(response);
        for await (const data of sseData(response.body)) {
          for (const event of chunkEvents(JSON.parse(data))) emit(event);
        }
        if (!reply.finish_reason) emit({ kind: 'failed', error: { code: 'disconnected', message: 'The server closed the stream early.' } });
      } catch (e) {
        if (abort.signal.aborted) {
          reply.finish_reason = 'cancelled';
          save();
        } else {
          emit({ kind: 'failed', error: toBackendError(e) });
        }
      }
      // A write the browser refused (its quota) lost nothing shown: memory keeps the reply,
      // and the refusal is told now that the reply has ended.
      const refused = this.store.takeFailure();
      if (refused) throw refused;
      return reply;
    })();
    return { cancel: async () => abort.abort(), messageId: reply.id, done };
  }
}

/** A stored message as the API takes it: a reply that thought sends its thinking apart, as
 *  the server returned it, for the template to show the model again or not (the app does the
 *  same: src-tauri/commands.rs `chat_messages`). */
export function apiMessage(m: ChatMessage): { role: string; content: string; reasoning_content?: string } {
  const reasoning = m.role === 'assistant' ? m.stats?.reasoning : null;
  if (!reasoning || !m.tokens?.length) return { role: m.role, content: m.content };
  const { thinking, answer } = splitReply(m.tokens, reasoning);
  const text = (tokens: TokenEvent[]) => tokens.map((t) => t.text).join('');
  return { role: m.role, content: text(answer), reasoning_content: shownThinking(text(thinking)) };
}

/** The reply event one streamed chunk carries: the server's engine's own, unchanged
 *  (`specula.event`), or the failure the chunk reports. */
export function chunkEvents(chunk: Record<string, unknown>): ReplyEvent[] {
  if (chunk.error) return [{ kind: 'failed', error: toBackendError(chunk.error) }];
  const event = (chunk.specula as { event?: ReplyEvent } | undefined)?.event;
  return event ? [event] : [];
}

/** The `data:` payloads of a server-sent event stream, up to `[DONE]`. */
export async function* sseData(body: ReadableStream<Uint8Array>): AsyncGenerator<string> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true });
    const { events, rest } = splitSse(buffer);
    buffer = rest;
    for (const data of events) {
      if (data === '[DONE]') return;
      yield data;
    }
  }
}

/** Complete events in `buffer` (joined `data:` lines) and the incomplete rest. */
export function splitSse(buffer: string): { events: string[]; rest: string } {
  const blocks = buffer.replace(/\r\n/g, '\n').split('\n\n');
  const rest = blocks.pop() ?? '';
  const events = blocks
    .map((block) =>
      block
        .split('\n')
        .filter((line) => line.startsWith('data:'))
        .map((line) => line.slice(5).replace(/^ /, ''))
        .join('\n'),
    )
    .filter((data) => data.length > 0);
  return { events, rest };
}

/** An HTTP error response as a BackendError, reading OpenAI's error shape when present. */
async function errorOf(response: Response): Promise<BackendError> {
  try {
    const body = (await response.json()) as { error?: { code?: string; message?: string } };
    if (response.status === 401) {
      return { code: 'invalid_api_key', message: 'This server needs its API key: enter it in Settings.' };
    }
    if (body.error?.message) return { code: knownCode(body.error.code, `http_${response.status}`), message: body.error.message };
  } catch {
    // not JSON: fall through to the status line
  }
  return { code: `http_${response.status}`, message: `The server answered ${response.status} ${response.statusText}` };
}
