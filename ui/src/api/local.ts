// Conversations kept in the browser's storage, for the HTTP transport. The desktop app keeps
// them in SQLite instead (crates/store).
//
// Each conversation is a key of its own (`specula.conversation.ID`) beside a small index, so
// saving a reply rewrites that conversation, not the whole history. Memory holds the truth for
// this page: when the browser refuses a write (its quota is full), nothing shown is lost, and
// the refusal is kept for the transport to say (`takeFailure`).

import type { BackendError, ChatMessage, Conversation, ConversationSummary } from './types';

const INDEX_KEY = 'specula.conversations.index';
const conversationKey = (id: number) => `specula.conversation.${id}`;
/** Where every conversation was kept in one key, before; read once and split. */
const OLD_KEY = 'specula.conversations';

export class LocalConversations {
  private cache: Map<number, Conversation> | null = null;
  private failure: BackendError | null = null;

  constructor(private readonly storage: Storage) {}

  private all(): Map<number, Conversation> {
    if (this.cache) return this.cache;
    const cache = new Map<number, Conversation>();
    const old = this.storage.getItem(OLD_KEY);
    if (old) {
      for (const c of JSON.parse(old) as Conversation[]) cache.set(c.id, c);
      this.cache = cache;
      for (const c of cache.values()) this.persist(c);
      this.storage.removeItem(OLD_KEY);
      return cache;
    }
    const index = JSON.parse(this.storage.getItem(INDEX_KEY) ?? '[]') as ConversationSummary[];
    for (const { id } of index) {
      const raw = this.storage.getItem(conversationKey(id));
      if (raw) cache.set(id, JSON.parse(raw) as Conversation);
    }
    this.cache = cache;
    return cache;
  }

  /** The last write the browser refused since this was last asked, if any. */
  takeFailure(): BackendError | null {
    const failure = this.failure;
    this.failure = null;
    return failure;
  }

  /** Write one conversation and the index; a refused write is kept for `takeFailure`. */
  private persist(conversation: Conversation | null, removed?: number): void {
    const summaries = [...this.all().values()].map(({ id, title, updated_at }) => ({ id, title, updated_at }));
    try {
      if (conversation) this.storage.setItem(conversationKey(conversation.id), JSON.stringify(conversation));
      if (removed !== undefined) this.storage.removeItem(conversationKey(removed));
      this.storage.setItem(INDEX_KEY, JSON.stringify(summaries));
    } catch (e) {
      this.failure = {
        code: 'storage_full',
        message:
          `This browser refused to save the conversation (${e instanceof Error ? e.name : String(e)}): its storage ` +
          'for this page is full. The chat stays on screen until the page closes; delete old conversations to save again.',
      };
    }
  }

  list(query?: string): ConversationSummary[] {
    const q = query?.trim().toLowerCase();
    return [...this.all().values()]
      .filter((c) => !q || c.title.toLowerCase().includes(q) || c.messages.some((m) => m.content.toLowerCase().includes(q)))
      .sort((a, b) => b.updated_at - a.updated_at)
      .map(({ id, title, updated_at }) => ({ id, title, updated_at }));
  }

  get(id: number): Conversation {
    const found = this.all().get(id);
    if (!found) throw { code: 'not_found', message: `No conversation ${id}` };
    return structuredClone(found);
  }

  create(): Conversation {
    const all = this.all();
    const id = Math.max(0, ...all.keys()) + 1;
    const conversation: Conversation = { id, title: 'New chat', system_prompt: '', messages: [], updated_at: Date.now() };
    all.set(id, conversation);
    this.persist(conversation);
    return structuredClone(conversation);
  }

  update(id: number, change: (c: Conversation) => void): Conversation {
    const conversation = this.all().get(id);
    if (!conversation) throw { code: 'not_found', message: `No conversation ${id}` };
    change(conversation);
    conversation.updated_at = Date.now();
    this.persist(conversation);
    return structuredClone(conversation);
  }

  remove(id: number): void {
    this.all().delete(id);
    this.persist(null, id);
  }

  addMessage(conversationId: number, message: Omit<ChatMessage, 'id'>): ChatMessage {
    let added: ChatMessage | undefined;
    this.update(conversationId, (c) => {
      const id = Math.max(0, ...c.messages.map((m) => m.id)) + 1;
      added = { id, ...message };
      c.messages.push(added);
      if (c.title === 'New chat' && message.role === 'user') c.title = titleFrom(message.content);
    });
    return structuredClone(added as ChatMessage);
  }

  updateMessage(conversationId: number, message: ChatMessage): void {
    this.update(conversationId, (c) => {
      const i = c.messages.findIndex((m) => m.id === message.id);
      if (i >= 0) c.messages[i] = structuredClone(message);
    });
  }

  truncate(conversationId: number, fromMessageId: number): void {
    this.update(conversationId, (c) => {
      const i = c.messages.findIndex((m) => m.id === fromMessageId);
      if (i >= 0) c.messages.splice(i);
    });
  }
}

/** A conversation's title from its first message: the first line, at most 48 characters. */
export function titleFrom(text: string): string {
  const line = text.trim().split('\n')[0] ?? '';
  return line.length > 48 ? `${line.slice(0, 47)}…` : line || 'New chat';
}
