// The reply while it streams. Its cost in the webview must grow with the new tokens only: on
// a 2-core machine every millisecond spent here is taken from decoding. Tokens are appended to
// what is drawn, never redrawn; painting is batched a few times a second; the finished reply
// is drawn whole once, by whoever shows the stored conversation.

import type { TokenEvent } from '../api/types';
import { renderMarkdown, settledMarkdown } from './markdown';
import { TokenDom, TokenLayout } from './tokens';

/** Least time between paints: text read at this pace looks continuous, and each paint costs
 *  one layout of the reply's last block. The app's engine sends its tokens at the same pace
 *  (src-tauri/engine.rs, BATCH_EVERY), and a batch that finds no paint due for a while is
 *  drawn at once rather than an interval later. */
export const PAINT_INTERVAL_MS = 333;

export interface StreamOptions {
  /** Tokens coloured by provenance; otherwise the reply reads as markdown. */
  colours: boolean;
  /** Called after each paint (scrolling, the speed panel). */
  onPaint?: () => void;
  interval?: number;
  doc?: Document;
}

interface View {
  append(tokens: TokenEvent[]): void;
  /** Everything has come: draw what waited for more text. */
  end(): void;
}

/** Provenance colours: each piece of a token appended once, in its text or code block. */
class TokenView implements View {
  private readonly layout: TokenLayout;

  constructor(body: HTMLElement, doc: Document) {
    this.layout = new TokenLayout(new TokenDom(body, doc));
  }

  append(tokens: TokenEvent[]): void {
    this.layout.push(tokens);
  }

  end(): void {
    this.layout.finish();
  }
}

/** Markdown: finished blocks are drawn once and kept; only the last block is redrawn. */
class MarkdownView implements View {
  private text = '';
  private settled = 0;
  private readonly tail: HTMLElement;

  constructor(
    private readonly body: HTMLElement,
    private readonly doc: Document,
  ) {
    this.tail = doc.createElement('div');
    this.tail.className = 'markdown-tail';
    body.append(this.tail);
  }

  append(tokens: TokenEvent[]): void {
    for (const t of tokens) this.text += t.text;
    const head = settledMarkdown(this.text.slice(this.settled));
    if (head) {
      this.body.insertBefore(renderMarkdown(head, this.doc), this.tail);
      this.settled += head.length;
    }
    this.tail.replaceChildren(renderMarkdown(this.text.slice(this.settled), this.doc));
  }

  end(): void {}
}

export class ReplyStream {
  private pending: TokenEvent[] = [];
  private readonly tokens: TokenEvent[] = [];
  private timer: ReturnType<typeof setTimeout> | null = null;
  /** When the last paint was (ms, Date.now()); the first paint is due at once. */
  private lastPaint = -Infinity;
  private view: View;
  private readonly doc: Document;
  private colours: boolean;

  constructor(
    private readonly body: HTMLElement,
    private readonly options: StreamOptions,
  ) {
    this.doc = options.doc ?? document;
    this.colours = options.colours;
    this.view = this.makeView(options.colours);
  }

  /** A token arrived: it is drawn at the next paint. */
  push(token: TokenEvent): void {
    this.pending.push(token);
    this.schedule();
  }

  /** Ask for a paint without a new token (new speed figures). */
  schedule(): void {
    if (this.timer !== null) return;
    const interval = this.options.interval ?? PAINT_INTERVAL_MS;
    // A zero delay still waits for the rest of the batch being delivered in this task.
    const wait = Math.max(0, Math.min(interval, this.lastPaint + interval - Date.now()));
    this.timer = setTimeout(() => this.paint(), wait);
  }

  /** Draw what came since the last paint. */
  paint(): void {
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    this.lastPaint = Date.now();
    const fresh = this.pending.splice(0);
    this.tokens.push(...fresh);
    if (fresh.length) this.view.append(fresh);
    this.options.onPaint?.();
  }

  /** Colours were switched mid-reply: what came so far is drawn again in the other view. */
  setColours(on: boolean): void {
    this.paint();
    this.colours = on;
    this.body.replaceChildren();
    this.view = this.makeView(on);
    this.view.append(this.tokens);
  }

  /** What came so far was not the answer (a reasoning model's thinking): it is drawn no more.
   *  Gives back every token taken. */
  takeAll(): TokenEvent[] {
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    const taken = [...this.tokens, ...this.pending.splice(0)];
    this.tokens.length = 0;
    this.body.replaceChildren();
    this.view = this.makeView(this.colours);
    return taken;
  }

  /** The reply ended: draw every token, with nothing waiting on more text. */
  finish(): void {
    this.paint();
    this.view.end();
  }

  private makeView(colours: boolean): View {
    return colours ? new TokenView(this.body, this.doc) : new MarkdownView(this.body, this.doc);
  }
}
