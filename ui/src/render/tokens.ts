// The provenance view of a reply: one span per token, its background coloured by where it
// came from. Fenced code stays in <pre> blocks (with a copy button) so code keeps its shape,
// and its text takes syntax colours (highlight.ts) once the block is closed.

import type { Source, TokenEvent } from '../api/types';
import { colourCodeBlock } from './highlight';

export const SOURCE_LABELS: Record<Source, string> = {
  accepted: 'draft accepted',
  copied: 'copied from earlier text, kept',
  resampled: 'target resampled',
  bonus: 'target bonus',
  target: 'plain target',
};

/** What hovering a token says: its class, p, q and the chance the target had to keep it. */
export function tokenTitle(token: TokenEvent): string {
  const parts = [SOURCE_LABELS[token.source]];
  if (token.p != null) parts.push(`p ${token.p.toFixed(3)}`);
  if (token.q != null) parts.push(`q ${token.q.toFixed(3)}`);
  const accept = acceptanceProbability(token);
  if (accept !== undefined) parts.push(`accept min(1, p/q) = ${accept.toFixed(3)}`);
  return parts.join(' · ');
}

/** min(1, p/q), the probability that the sampled acceptance rule keeps a drafted token. */
export function acceptanceProbability(token: TokenEvent): number | undefined {
  if (token.p == null || token.q == null || token.q <= 0) return undefined;
  return Math.min(1, token.p / token.q);
}

export interface Piece {
  token: TokenEvent;
  text: string;
}

export interface Block {
  code: boolean;
  pieces: Piece[];
}

/** A line that opens or closes a fence: as the old full-text rule `/^[ \t]*```.*$/gm` read it. */
const FENCE = /^[ \t]*```/;
/** A line start that may still become a fence when more text comes. */
const MAYBE_FENCE = /^[ \t]*`{0,2}$/;
/** What ends a line for `^` and `$` in a multiline JavaScript pattern. */
const LINE_END = /[\n\r\u2028\u2029]/g;

/**
 * Finds where fenced code blocks begin and end while the text streams in, reading each new
 * character once. A block starts at the start of an opening fence line and ends after the
 * closing fence line's end. `frontier` is the offset before which every cut is known: it waits
 * at the start of a line that could still turn into an opening fence ("  ``"), so that nothing
 * drawn before it has to move.
 */
export class FenceScanner {
  readonly cuts: number[] = [];
  frontier = 0;
  private text = '';
  private lineStart = 0;
  private inCode = false;
  /** The line being read already opened a fence (decided before its end). */
  private opened = false;

  push(text: string): void {
    const from = this.text.length;
    this.text += text;
    LINE_END.lastIndex = from;
    for (let m = LINE_END.exec(this.text); m; m = LINE_END.exec(this.text)) this.endLine(m.index);
    this.readTail(false);
  }

  /** The text is complete: a last line that could still have become a fence did not. */
  finish(): void {
    this.readTail(true);
  }

  private endLine(end: number): void {
    const line = this.text.slice(this.lineStart, end);
    if (this.opened) this.opened = false;
    else if (FENCE.test(line)) this.cut(this.inCode ? end + 1 : this.lineStart);
    this.lineStart = end + 1;
  }

  private readTail(final: boolean): void {
    const tail = this.text.slice(this.lineStart);
    this.frontier = this.text.length;
    if (this.opened || this.inCode) return; // a closing fence cuts only after its line ends
    if (FENCE.test(tail)) {
      this.cut(this.lineStart);
      this.opened = true;
    } else if (!final && MAYBE_FENCE.test(tail)) {
      this.frontier = this.lineStart;
    }
  }

  private cut(at: number): void {
    this.cuts.push(at);
    this.inCode = !this.inCode;
  }
}

/** Where each piece of a reply goes: `newBlock` starts a text or code block before it. */
export interface PieceSink {
  piece(piece: Piece, code: boolean, newBlock: boolean): void;
  /** The reply is complete. */
  finish?(): void;
}

/**
 * Cuts tokens into text and fenced-code blocks as they stream in; a token that straddles a
 * fence line is split. Pieces are handed on once their block is certain, in order, so a view
 * only ever appends. Fed a reply in any chunks, it gives the same pieces as fed it whole.
 */
export class TokenLayout {
  private readonly fences = new FenceScanner();
  private readonly tokens: TokenEvent[] = [];
  private placed = 0;
  private offset = 0;
  private cutIndex = 0;
  private code = false;
  private blockHasPieces = false;

  constructor(private readonly sink: PieceSink) {}

  push(tokens: TokenEvent[]): void {
    for (const token of tokens) {
      this.tokens.push(token);
      this.fences.push(token.text);
    }
    this.place();
  }

  /** The reply is complete: place what waited on a line that might have opened a fence. */
  finish(): void {
    this.fences.finish();
    this.place();
    this.sink.finish?.();
  }

  private place(): void {
    const { cuts, frontier } = this.fences;
    for (; this.placed < this.tokens.length; this.placed++) {
      const token = this.tokens[this.placed];
      if (this.offset + token.text.length > frontier) return;
      let rest = token.text;
      while (this.cutIndex < cuts.length && cuts[this.cutIndex] < this.offset + rest.length) {
        const head = rest.slice(0, cuts[this.cutIndex] - this.offset);
        if (head) this.emit({ token, text: head });
        this.offset += head.length;
        rest = rest.slice(head.length);
        this.startBlock();
      }
      this.emit({ token, text: rest });
      this.offset += rest.length;
    }
  }

  private startBlock(): void {
    this.cutIndex++;
    this.code = !this.code;
    this.blockHasPieces = false;
  }

  private emit(piece: Piece): void {
    this.sink.piece(piece, this.code, !this.blockHasPieces);
    this.blockHasPieces = true;
  }
}

/** A whole reply's blocks (fence lines included in their code block). */
export function blocksOf(tokens: TokenEvent[]): Block[] {
  const blocks: Block[] = [];
  const layout = new TokenLayout({
    piece(piece, code, newBlock) {
      if (newBlock) blocks.push({ code, pieces: [] });
      blocks[blocks.length - 1].pieces.push(piece);
    },
  });
  layout.push(tokens);
  layout.finish();
  return blocks;
}

function tokenSpan(doc: Document, piece: Piece): HTMLSpanElement {
  const span = doc.createElement('span');
  span.className = `tok src-${piece.token.source}`;
  span.textContent = piece.text;
  span.title = tokenTitle(piece.token);
  span.dataset.source = piece.token.source;
  if (piece.token.p !== undefined) span.dataset.p = String(piece.token.p);
  if (piece.token.q !== undefined) span.dataset.q = String(piece.token.q);
  return span;
}

/** The code inside a fenced block, without its fence lines: what the copy button copies. */
export function codeOf(blockText: string): string {
  return blockText
    .replace(/^[ \t]*```[^\n]*\n?/, '')
    .replace(/\n?[ \t]*```[ \t]*\n?$/, '')
    .replace(/\n$/, '');
}

/** Draws pieces into `root`, appending: a `div.tokens` per text block, a `pre.tokens.code` with
 *  a copy button per code block, a span per piece. */
export class TokenDom implements PieceSink {
  private container: Node | null = null;
  /** The code block being drawn: coloured when the next block starts or the reply ends. */
  private code: HTMLElement | null = null;

  constructor(
    private readonly root: Node,
    private readonly doc: Document = document,
  ) {}

  piece(piece: Piece, code: boolean, newBlock: boolean): void {
    if (newBlock || !this.container) {
      this.finish();
      this.container = this.block(code);
    }
    this.container.appendChild(tokenSpan(this.doc, piece));
  }

  finish(): void {
    if (this.code) colourCodeBlock(this.code, this.doc);
    this.code = null;
  }

  private block(code: boolean): Node {
    if (!code) {
      const div = this.doc.createElement('div');
      div.className = 'tokens';
      this.root.appendChild(div);
      return div;
    }
    const pre = this.doc.createElement('pre');
    pre.className = 'tokens code';
    const inner = this.doc.createElement('code');
    // The button copies the block as it is when clicked: it is drawn before the block ends.
    pre.append(inner, copyButton(this.doc, () => codeOf(inner.textContent ?? '')));
    this.root.appendChild(pre);
    this.code = inner;
    return inner;
  }
}

export function renderTokens(tokens: TokenEvent[], doc: Document = document): DocumentFragment {
  const fragment = doc.createDocumentFragment();
  const layout = new TokenLayout(new TokenDom(fragment, doc));
  layout.push(tokens);
  layout.finish();
  return fragment;
}

export function copyButton(doc: Document, text: string | (() => string)): HTMLButtonElement {
  const button = doc.createElement('button');
  button.className = 'copy';
  button.type = 'button';
  button.textContent = 'Copy';
  button.addEventListener('click', () => {
    void navigator.clipboard?.writeText(typeof text === 'string' ? text : text()).then(
      () => (button.textContent = 'Copied'),
      () => (button.textContent = 'Copy failed'),
    );
  });
  return button;
}
