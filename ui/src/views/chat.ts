// The conversation: its title and messages, each reply with the figures and settings it was
// made with, Edit under the user's messages and Regenerate under the last reply.

import type { ChatMessage, Conversation } from '../api/types';
import { renderMarkdown } from '../render/markdown';
import { summarize, summarizeRemote } from '../render/speed';
import { renderTokens } from '../render/tokens';
import { textButton } from './dom';

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
  openLink(url: string): Promise<void>;
  onError(error: unknown): void;
}

/** The element of a reply being streamed: the view draws into `body`, progress goes in `summary`. */
export interface LiveMessage {
  body: HTMLElement;
  summary: HTMLElement;
}

const EMPTY = 'Start a conversation. Tokens are coloured by where they came from; hover one for p and q.';

/** A link in a reply: it never navigates the window, it opens outside the app. */
const OUTSIDE = /^(https?:|mailto:)/i;

export class ChatView {
  /** Keep the newest text in view, unless the reader scrolled up to read something else. */
  private following = true;

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
    const root = this.parts.messages;
    root.replaceChildren(...messages.map((m, i) => this.messageElement(m, i === messages.length - 1).element));
    if (messages.length === 0) {
      const empty = document.createElement('p');
      empty.className = 'empty';
      empty.textContent = EMPTY;
      root.append(empty);
    }
    root.scrollTop = root.scrollHeight;
  }

  /** Add the element a streaming reply is drawn into, after the last message. */
  startReply(message: ChatMessage): LiveMessage {
    const { element, body, summary } = this.messageElement(message, true);
    element.classList.add('streaming');
    this.parts.messages.querySelector(':scope > p.empty')?.remove();
    this.parts.messages.append(element);
    return { body, summary: summary as HTMLElement };
  }

  /** The reply painted more text: keep it in view, unless the reader scrolled away. */
  follow(): void {
    if (this.following) this.parts.messages.scrollTop = this.parts.messages.scrollHeight;
  }

  private messageElement(m: ChatMessage, last: boolean): { element: HTMLElement; body: HTMLElement; summary?: HTMLElement } {
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
      if (last && !this.host.replying()) footer.append(this.button('Regenerate', 'regenerate', () => this.host.regenerate(m.id)));
    } else if (m.role === 'user' && !this.host.replying()) {
      footer.append(this.button('Edit', 'edit', async () => this.host.edit(m)));
    }
    element.append(footer);
    return { element, body, summary };
  }

  private fillBody(body: HTMLElement, m: ChatMessage): void {
    if (m.role === 'assistant' && m.tokens && this.host.colours()) body.replaceChildren(renderTokens(m.tokens));
    else if (m.role === 'assistant') body.replaceChildren(renderMarkdown(m.content));
    else body.textContent = m.content;
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
    if (m.finish_reason === 'unsaved') parts.push('not saved: only in this window');
    if (!m.finish_reason && !this.host.replying()) parts.push('interrupted');
    if (m.settings_label) parts.push(m.settings_label);
    return parts.join(' · ');
  }

  private button(text: string, name: string, action: () => Promise<void>): HTMLButtonElement {
    return textButton(text, name, () => void action().catch(this.host.onError));
  }
}
