// Conversations kept in the browser's storage, for the HTTP transport. The desktop app keeps
// them in SQLite instead (crates/store).
//
// Each conversation keeps every message of every branch (a tree: api/tree.ts) and the message
// it shows last; `get` hands out the branch shown, as the desktop app's store does.
//
// Each conversation is a key of its own (`specula.conversation.ID`) beside a small index, so
// saving a reply rewrites that conversation, not the whole history. Memory holds the truth for
// this page: when the browser refuses a write (its quota is full), nothing shown is lost, and
// the refusal is kept for the transport to say (`takeFailure`).

import { Tree } from './tree';
import type { BackendError, ChatMessage, Conversation, ConversationSummary } from './types';

/** A message as kept: its place in the tree, and whether it is deleted (awaiting Undo). */
type KeptMessage = ChatMessage & { deleted?: boolean };

/** A conversation as kept: every message, the leaf shown, and whether it is deleted. Kept by an
 *  earlier version, it has no `current_leaf`, and its messages are one branch in order. */
interface Kept extends Omit<Conversation, 'messages'> {
  messages: KeptMessage[];
  current_leaf?: number | null;
  deleted?: boolean;
}

/** What a caller gives for a new message: the store places it in the tree. */
export type NewMessage = Omit<ChatMessage, 'id' | 'parent_id' | 'siblings'>;

/** An earlier version's linear conversation as a tree of one branch. */
function upgrade(c: Kept): Kept {
  if (c.current_leaf !== undefined) return c;
  c.messages.forEach((m, i) => {
    m.parent_id = i === 0 ? null : c.messages[i - 1].id;
    m.siblings = [m.id];
  });
  c.current_leaf = c.messages.at(-1)?.id ?? null;
  return c;
}

const notFound = (what: string) => ({ code: 'not_found', message: what });

const INDEX_KEY = 'specula.conversations.index';
const conversationKey = (id: number) => `specula.conversation.${id}`;
/** Where every conversation was kept in one key, before; read once and split. */
const OLD_KEY = 'specula.conversations';

export class LocalConversations {
  private cache: Map<number, Kept> | null = null;
  private failure: BackendError | null = null;

  constructor(private readonly storage: Storage) {}

  private all(): Map<number, Kept> {
    if (this.cache) return this.cache;
    const cache = new Map<number, Kept>();
    const old = this.storage.getItem(OLD_KEY);
    if (old) {
      for (const c of JSON.parse(old) as Kept[]) cache.set(c.id, upgrade(c));
      this.cache = cache;
      for (const c of cache.values()) this.persist(c);
      this.storage.removeItem(OLD_KEY);
      return cache;
    }
    const index = JSON.parse(this.storage.getItem(INDEX_KEY) ?? '[]') as ConversationSummary[];
    for (const { id } of index) {
      const raw = this.storage.getItem(conversationKey(id));
      if (raw) cache.set(id, upgrade(JSON.parse(raw) as Kept));
    }
    this.cache = cache;
    // What was deleted with an Undo offered and not undone before the page closed goes now.
    this.purge();
    return cache;
  }

  /** The last write the browser refused since this was last asked, if any. */
  takeFailure(): BackendError | null {
    const failure = this.failure;
    this.failure = null;
    return failure;
  }

  /** Write one conversation and the index; a refused write is kept for `takeFailure`. */
  private persist(conversation: Kept | null, removed?: number): void {
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
    const matches = (c: Kept) =>
      !q || c.title.toLowerCase().includes(q) || c.messages.some((m) => !m.deleted && m.content.toLowerCase().includes(q));
    return [...this.all().values()]
      .filter((c) => !c.deleted && matches(c))
      .sort((a, b) => b.updated_at - a.updated_at)
      .map(({ id, title, updated_at }) => ({ id, title, updated_at }));
  }

  private kept(id: number): Kept {
    const found = this.all().get(id);
    if (!found || found.deleted) throw notFound(`No conversation ${id}`);
    return found;
  }

  /** The conversation with the branch it shows, each message with its siblings. */
  get(id: number): Conversation {
    const c = this.kept(id);
    const tree = new Tree(c.messages);
    const messages = tree.pathTo(c.current_leaf ?? null).map(({ deleted: _, ...m }) => ({ ...m, siblings: tree.siblings(m.id) }));
    const { current_leaf: _leaf, deleted: _deleted, ...rest } = c;
    return structuredClone({ ...rest, messages });
  }

  create(): Conversation {
    const all = this.all();
    const id = Math.max(0, ...all.keys()) + 1;
    const conversation: Kept = { id, title: 'New chat', system_prompt: '', messages: [], updated_at: Date.now(), current_leaf: null };
    all.set(id, conversation);
    this.persist(conversation);
    return this.get(id);
  }

  /** Change conversation `id` and save it; `touch` (the default) marks it changed now, which
   *  lists it first. Moving between its branches, deleting and undoing do not. */
  update(id: number, change: (c: Kept) => void, touch = true): void {
    const conversation = this.kept(id);
    change(conversation);
    if (touch) conversation.updated_at = Date.now();
    this.persist(conversation);
  }

  /** Delete a conversation, undoably until `purge`. */
  remove(id: number): void {
    this.update(id, (c) => (c.deleted = true), false);
  }

  restore(id: number): void {
    const c = this.all().get(id);
    if (!c) throw notFound(`No conversation ${id}`);
    c.deleted = false;
    this.persist(c);
  }

  /** Delete for good what was deleted. */
  purge(): void {
    for (const c of [...this.all().values()]) {
      if (c.deleted) {
        this.all().delete(c.id);
        this.persist(null, c.id);
        continue;
      }
      const tree = new Tree(c.messages);
      const doomed = c.messages.filter((m) => m.deleted).map((m) => m.id);
      if (doomed.length === 0) continue;
      c.messages = c.messages.filter((m) => !doomed.some((d) => tree.isUnder(m.id, d)));
      this.persist(c);
    }
  }

  /** Add a message after the last one shown. */
  addMessage(conversationId: number, message: NewMessage): ChatMessage {
    let added: ChatMessage | undefined;
    this.update(conversationId, (c) => {
      const id = Math.max(0, ...c.messages.map((m) => m.id)) + 1;
      const parent = new Tree(c.messages).pathTo(c.current_leaf ?? null).at(-1)?.id ?? null;
      added = { id, ...message, parent_id: parent, siblings: [] };
      c.messages.push(added);
      c.current_leaf = id;
      if (c.title === 'New chat' && message.role === 'user') c.title = titleFrom(message.content);
    });
    return structuredClone(added as ChatMessage);
  }

  updateMessage(conversationId: number, message: ChatMessage): void {
    this.update(conversationId, (c) => {
      const i = c.messages.findIndex((m) => m.id === message.id);
      if (i >= 0) c.messages[i] = { ...structuredClone(message), deleted: c.messages[i].deleted };
    });
  }

  /** The conversation's tree, checked to hold `messageId`. */
  private treeHolding(c: Kept, messageId: number): Tree<KeptMessage> {
    const tree = new Tree(c.messages);
    if (!tree.get(messageId)) throw notFound(`No message ${messageId} in conversation ${c.id}`);
    return tree;
  }

  /** Show the conversation up to just before `messageId` (Regenerate, Edit). */
  branchBefore(conversationId: number, messageId: number): void {
    this.update(conversationId, (c) => (c.current_leaf = this.treeHolding(c, messageId).get(messageId)?.parent_id ?? null), false);
  }

  /** Show the branch through `messageId`, down to the newest message under it. */
  showBranch(conversationId: number, messageId: number): Conversation {
    this.update(
      conversationId,
      (c) => {
        const leaf = this.treeHolding(c, messageId).newestUnder(messageId);
        if (leaf === null) throw notFound(`Message ${messageId} is deleted`);
        c.current_leaf = leaf;
      },
      false,
    );
    return this.get(conversationId);
  }

  deleteMessage(conversationId: number, messageId: number): void {
    this.update(conversationId, (c) => {
      const before = this.treeHolding(c, messageId);
      const message = before.get(messageId) as KeptMessage;
      message.deleted = true;
      if (c.current_leaf != null && before.isUnder(c.current_leaf, messageId)) {
        c.current_leaf = new Tree(c.messages).newestUnder(message.parent_id ?? null);
      }
    }, false);
  }

  restoreMessage(conversationId: number, messageId: number): void {
    this.update(conversationId, (c) => {
      const tree = this.treeHolding(c, messageId);
      (tree.get(messageId) as KeptMessage).deleted = false;
      c.current_leaf = new Tree(c.messages).newestUnder(messageId);
    }, false);
  }

  /** A new conversation holding the branch up to `messageId`. */
  fork(conversationId: number, messageId: number): Conversation {
    const source = this.kept(conversationId);
    const path = this.treeHolding(source, messageId).pathTo(messageId);
    if (path.at(-1)?.id !== messageId) throw notFound(`Message ${messageId} is deleted`);
    const copy = this.create();
    this.update(copy.id, (c) => {
      c.title = `${source.title} (fork)`;
      c.system_prompt = source.system_prompt;
      c.messages = path.map((m, i) => ({ ...structuredClone(m), id: i + 1, parent_id: i === 0 ? null : i }));
      c.current_leaf = path.length;
    });
    return this.get(copy.id);
  }
}

/** A conversation's title from its first message: the first line, at most 48 characters. */
export function titleFrom(text: string): string {
  const line = text.trim().split('\n')[0] ?? '';
  return line.length > 48 ? `${line.slice(0, 47)}…` : line || 'New chat';
}
