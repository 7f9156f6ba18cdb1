// The conversation: its title and the messages of the branch it shows, each reply with the
// figures and settings it was made with. Under each message: ◀ 2/3 ▶ where a Regenerate or an
// Edit made siblings, Edit (questions) or Regenerate (replies), Fork and Delete.

import type { ChatMessage, Conversation, Trim } from '../api/types';
import { renderMarkdown } from '../render/markdown';
import { summarize, summarizeRemote } from '../render/speed';
import { splitPart, splitReply, ThinkingBlock } from '../render/thinking';
import { renderTokens } from '../render/tokens';
import { partsAtCards, toolCardElement } from '../render/tool-card';
import { inlinedFileElement, splitAttachments } from '../render/attachments';
import { iconButton, textButton } from './dom';

export interface ChatParts {
  title: HTMLElement;
  messages: HTMLElement;
}

/** What the chat asks of the rest of the app. */
export interface ChatHost {
  /** Tokens coloured by provenance; otherwise replies read as markdown. */
  colours(): boolean;
  /** A reply is streaming: no Edit or Regenerate, and a reply without an end is not "interrupted". */
  replying(): boolean;
  edit(message: ChatMessage): void;
  regenerate(messageId: number): Promise<void>;
  /** Show the branch through `messageId`, a sibling of one shown. */
  showBranch(messageId: number): Promise<void>;
  /** A new chat holding the branch up to `messageId`. */
  fork(messageId: number): Promise<void>;
  /** Delete `message` and what follows it (undoably). */
  remove(message: ChatMessage): Promise<void>;
  openLink(url: string): Promise<void>;
  onError(error: unknown): void;
}

/** The element of a reply being streamed: the view draws into `body`, progress goes in `summary`. */
export interface LiveMessage {
  element: HTMLElement;
  body: HTMLElement;
  summary: HTMLElement;
}

const EMPTY = 'Start a conversation. Tokens are coloured by where they came from; hover one for p and q.';

/** A link in a reply: it never navigates the window, it opens outside the app. */
const OUTSIDE = /^(https?:|mailto:)/i;

export class ChatView {
  /** Keep the newest text in view, unless the reader scrolled up to read something else. */
  private following = true;
  /** The messages drawn, in order: where a trim's place among the model's messages lands. */
  private shownMessages: ChatMessage[] = [];

  constructor(
    private readonly parts: ChatParts,
    private readonly host: ChatHost,
  ) {
    const messages = parts.messages;
    messages.addEventListener('scroll', () => {
      this.following = messages.scrollHeight - messages.scrollTop - messages.clientHeight < 48;
    });
    // The shell also refuses any navigation away from the app: src-tauri/lib.rs.
    messages.addEventListener('click', (e) => {
      const link = (e.target as HTMLElement).closest('a[href], area[href]') as HTMLAnchorElement | null;
      if (!link) return;
      e.preventDefault();
      if (OUTSIDE.test(link.href)) void host.openLink(link.href).catch(host.onError);
    });
  }

  /** Draw `conversation` whole (none: an empty new chat), scrolled to its end. */
  show(conversation: Conversation | null): void {
    this.parts.title.textContent = conversation?.title ?? 'Specula';
    const messages = conversation?.messages ?? [];
    this.shownMessages = messages;
    const root = this.parts.messages;
    root.replaceChildren(...messages.map((m) => this.messageElement(m).element));
    if (messages.length === 0) {
      const empty = document.createElement('p');
      empty.className = 'empty';
      empty.textContent = EMPTY;
      root.append(empty);
    }
    // The latest reply's view only: an earlier reply's trim says nothing of the next one.
    const trimmed = [...messages].reverse().find((m) => m.role === 'assistant')?.stats?.trimmed;
    if (trimmed) this.markTrim(trimmed);
    root.scrollTop = root.scrollHeight;
  }

  /** Mark where the chat left the model's view for its latest reply: before the first message
   *  it still saw after those left out (a cut inside one message: before the reply). */
  markTrim(trim: Trim): void {
    const root = this.parts.messages;
    root.querySelector(':scope > .trim-marker')?.remove();
    const shown = [...root.querySelectorAll<HTMLElement>(':scope > article.message')];
    const marker = document.createElement('div');
    marker.className = 'trim-marker';
    marker.setAttribute('role', 'note');
    marker.textContent = describeTrim(trim);
    const before = trim.messages > 0 ? shown[this.storedIndex(trim.first + trim.messages)] : shown[shown.length - 1];
    if (before) root.insertBefore(marker, before);
    else root.append(marker);
  }

  /** The drawn message that holds the model's `promptIndex`-th message after the system
   *  prompt: a reply that called tools was several (each round, each call's result, the answer). */
  private storedIndex(promptIndex: number): number {
    let seen = 0;
    for (const [i, m] of this.shownMessages.entries()) {
      seen += promptLength(m);
      if (promptIndex < seen) return i;
    }
    return this.shownMessages.length + promptIndex - seen;
  }

  /** Add the element a streaming reply is drawn into, after the last message. */
  startReply(message: ChatMessage): LiveMessage {
    const { element, body, summary } = this.messageElement(message);
    element.classList.add('streaming');
    // Nothing to do with a reply that is still being written (the actions come when it is drawn
    // whole from the history).
    for (const action of element.querySelectorAll('footer > :not(.reply-summary)')) action.remove();
    this.parts.messages.querySelector(':scope > p.empty')?.remove();
    this.parts.messages.append(element);
    return { element, body, summary: summary as HTMLElement };
  }

  /** Put a streaming reply's element back after the view was drawn again from the history (its
   *  chat was left and opened again): in place of the stored copy of it, with its live parts (a
   *  tool card's buttons, the thinking block) as they were. */
  adoptReply(element: HTMLElement, messageId: number | undefined): void {
    const root = this.parts.messages;
    root.querySelector(':scope > p.empty')?.remove();
    const stored = [...root.querySelectorAll<HTMLElement>(':scope > article.message')].find((m) => m.dataset.id === String(messageId));
    if (stored) stored.replaceWith(element);
    else root.append(element);
    root.scrollTop = root.scrollHeight;
  }

  /** The reply painted more text: keep it in view, unless the reader scrolled away. */
  follow(): void {
    if (this.following) this.parts.messages.scrollTop = this.parts.messages.scrollHeight;
  }

  private messageElement(m: ChatMessage): { element: HTMLElement; body: HTMLElement; summary?: HTMLElement } {
    const element = document.createElement('article');
    element.className = `message ${m.role}`;
    element.dataset.id = String(m.id);
    const body = document.createElement('div');
    body.className = 'body';
    this.fillBody(body, m);
    element.append(body);
    const footer = document.createElement('footer');
    let summary: HTMLElement | undefined;
    if (m.role === 'assistant') {
      summary = document.createElement('span');
      summary.className = 'reply-summary';
      summary.textContent = this.replyFooter(m);
      footer.append(summary);
    }
    if (!this.host.replying()) footer.append(...this.actions(m));
    element.append(footer);
    return { element, body, summary };
  }

  /** What can be done with a message once no reply streams. */
  private actions(m: ChatMessage): HTMLElement[] {
    const actions: HTMLElement[] = [];
    if ((m.siblings?.length ?? 0) > 1) actions.push(this.branches(m));
    if (m.role === 'assistant') actions.push(this.button('Regenerate', 'regenerate', () => this.host.regenerate(m.id)));
    if (m.role === 'user') actions.push(this.button('Edit', 'edit', async () => this.host.edit(m)));
    actions.push(this.button('Fork', 'fork', () => this.host.fork(m.id)));
    actions.push(this.button('Delete', 'delete', () => this.host.remove(m)));
    return actions;
  }

  /** ◀ 2/3 ▶: which of its siblings this message is, and the way to the others. */
  private branches(m: ChatMessage): HTMLElement {
    const siblings = m.siblings ?? [];
    const at = siblings.indexOf(m.id);
    const span = document.createElement('span');
    span.className = 'branches';
    const go = (step: number) => () => {
      const to = siblings[at + step];
      if (to !== undefined) void this.host.showBranch(to).catch(this.host.onError);
    };
    const previous = iconButton('◀', 'Previous branch', go(-1));
    previous.disabled = at <= 0;
    const next = iconButton('▶', 'Next branch', go(1));
    next.disabled = at >= siblings.length - 1;
    const where = document.createElement('span');
    where.className = 'branch-of';
    where.textContent = `${at + 1}/${siblings.length}`;
    span.append(previous, where, next);
    return span;
  }

  private fillBody(body: HTMLElement, m: ChatMessage): void {
    const reasoning = m.role === 'assistant' ? m.stats?.reasoning : null;
    if (m.role === 'assistant' && m.tools?.length && m.tokens) {
      // A reply that called tools: its text in parts, each call's card between them.
      const places = [...new Set(m.tools.map((c) => c.at))].sort((a, b) => a - b);
      body.replaceChildren();
      const parts = partsAtCards(m.tokens, m.tools);
      parts.forEach((part, i) => {
        // Each round may think again: its thinking folded above its text. Only the last
        // round's time is known (the reply's stats are its last round's).
        const last = i === parts.length - 1;
        // A last round cut off while thinking that its prompt opened has no marker at all.
        const cut = last && reasoning && !reasoning.ended ? { thinking: part, ended: false, answer: [] } : null;
        const split = splitPart(part) ?? cut;
        if (split) {
          const ms = last && reasoning ? reasoning.ms : -1;
          const round = { tokens: split.thinking.length, ended: split.ended, ms };
          body.append(ThinkingBlock.stored(split.thinking, round).element);
          part = split.answer;
        }
        body.append(this.host.colours() ? renderTokens(part) : renderMarkdown(part.map((t) => t.text).join('')));
        for (const card of m.tools?.filter((c) => c.at === places[i]) ?? []) body.append(toolCardElement(card));
      });
    } else if (reasoning && m.tokens?.length) {
      // A reasoning model's reply: its thinking folded above the answer.
      const { thinking, answer } = splitReply(m.tokens, reasoning);
      const text = answer.map((t) => t.text).join('');
      const drawn = this.host.colours() ? renderTokens(answer) : renderMarkdown(text);
      body.replaceChildren(ThinkingBlock.stored(thinking, reasoning).element, drawn);
    }
    // An imported reply has its text but no tokens: it reads as markdown.
    else if (m.role === 'assistant' && m.tokens?.length && this.host.colours()) body.replaceChildren(renderTokens(m.tokens));
    else if (m.role === 'assistant') body.replaceChildren(renderMarkdown(m.content));
    else {
      // A question with files: its text, then each file folded under it.
      const { text, files } = splitAttachments(m.content);
      body.textContent = text;
      for (const file of files) body.append(inlinedFileElement(file));
    }
  }

  /** "41.2 tok/s · … · stopped · draft model · k 4 · greedy" */
  private replyFooter(m: ChatMessage): string {
    const parts: string[] = [];
    // Each reply's figures as its own settings say: the k it was made with, and whether a
    // remote engine wrote it (replies stored before settings were kept: local, k auto).
    if (m.stats) parts.push(m.settings?.remote ? summarizeRemote(m.stats) : summarize(m.stats, m.settings?.k ?? 'auto'));
    if (m.finish_reason === 'cancelled') parts.push('stopped');
    if (m.finish_reason === 'error') parts.push('failed');
    if (m.finish_reason === 'length') parts.push('hit the token limit');
    if (m.finish_reason === 'context_full') parts.push('filled the context');
    if (m.finish_reason === 'unsaved') parts.push('not saved: only in this window');
    if (!m.finish_reason && !this.host.replying()) parts.push('interrupted');
    if (m.settings_label) parts.push(m.settings_label);
    return parts.join(' · ');
  }

  private button(text: string, name: string, action: () => Promise<void>): HTMLButtonElement {
    return textButton(text, name, () => void action().catch(this.host.onError));
  }
}

/** How many of the model's messages a stored one is: one, or for a reply that called tools, a
 *  message per round of calls, one per result, and the answer (src-tauri commands.rs
 *  `tool_turns`). */
function promptLength(m: ChatMessage): number {
  if (m.role !== 'assistant' || !m.tools?.length) return 1;
  return new Set(m.tools.map((c) => c.at)).size + m.tools.length + 1;
}

/** "3 earlier messages are out of the model's view to fit its context" (the engine's words,
 *  crates/engine/src/fitted.rs `describe_trim`). */
export function describeTrim(trim: Trim): string {
  const parts: string[] = [];
  if (trim.messages > 0) parts.push(`${trim.messages} earlier message${trim.messages === 1 ? '' : 's'}`);
  if (trim.tokens > 0) parts.push(`${trim.tokens} tokens from the middle of the prompt`);
  return `⋯ ${parts.join(' and ')} left out of the model's view to fit the context ⋯`;
}
