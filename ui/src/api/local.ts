// Conversations kept in the browser's storage, for the HTTP transport. The desktop app keeps
// them in SQLite instead (crates/store).

import type { ChatMessage, Conversation, ConversationSummary } from './types';

const KEY = 'specula.conversations';

export class LocalConversations {
  constructor(private readonly storage: Storage) {}

  private load(): Conversation[] {
    const raw = this.storage.getItem(KEY);
    return raw ? (JSON.parse(raw) as Conversation[]) : [];
  }

  private save(all: Conversation[]): void {
    this.storage.setItem(KEY, JSON.stringify(all));
  }

  list(query?: string): ConversationSummary[] {
    const q = query?.trim().toLowerCase();
    return this.load()
      .filter((c) => !q || c.title.toLowerCase().includes(q) || c.messages.some((m) => m.content.toLowerCase().includes(q)))
      .sort((a, b) => b.updated_at - a.updated_at)
      .map(({ id, title, updated_at }) => ({ id, title, updated_at }));
  }

  get(id: number): Conversation {
    const found = this.load().find((c) => c.id === id);
    if (!found) throw { code: 'not_found', message: `No conversation ${id}` };
    return found;
  }

  create(): Conversation {
    const all = this.load();
    const id = Math.max(0, ...all.map((c) => c.id)) + 1;
    const conversation: Conversation = { id, title: 'New chat', system_prompt: '', messages: [], updated_at: Date.now() };
    this.save([...all, conversation]);
    return conversation;
  }

  update(id: number, change: (c: Conversation) => void): Conversation {
    const all = this.load();
    const conversation = all.find((c) => c.id === id);
    if (!conversation) throw { code: 'not_found', message: `No conversation ${id}` };
    change(conversation);
    conversation.updated_at = Date.now();
    this.save(all);
    return conversation;
  }

  remove(id: number): void {
    this.save(this.load().filter((c) => c.id !== id));
  }

  addMessage(conversationId: number, message: Omit<ChatMessage, 'id'>): ChatMessage {
    let added: ChatMessage | undefined;
    this.update(conversationId, (c) => {
      const id = Math.max(0, ...c.messages.map((m) => m.id)) + 1;
      added = { id, ...message };
      c.messages.push(added);
      if (c.title === 'New chat' && message.role === 'user') c.title = titleFrom(message.content);
    });
    return added as ChatMessage;
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
