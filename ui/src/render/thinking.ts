// A reasoning model's thinking: a collapsed "Thought for N s" block above its answer. Which
// tokens were thinking is the engine's word (its `reasoning` events and the reply's stats,
// crates/protocol/src/reasoning.rs); this only draws them, without the `<think>` markers.

import type { Reasoning, TokenEvent } from '../api/types';

const OPEN = '<think>';
const CLOSE = '</think>';

/** The thinking's text as shown: without its markers, a marker still arriving, or whitespace
 *  at either end. */
export function shownThinking(raw: string): string {
  let text = raw.trimStart();
  if (text.startsWith(OPEN)) text = text.slice(OPEN.length);
  else if (OPEN.startsWith(text)) return '';
  const close = text.indexOf(CLOSE);
  if (close >= 0) text = text.slice(0, close);
  else {
    for (let k = CLOSE.length - 1; k > 0; k--) {
      if (text.endsWith(CLOSE.slice(0, k))) {
        text = text.slice(0, -k);
        break;
      }
    }
  }
  return text.trim();
}

/** A stored reply's thinking tokens and its answer's (whitespace before the answer dropped). */
export function splitReply(tokens: TokenEvent[], reasoning: Reasoning): { thinking: TokenEvent[]; answer: TokenEvent[] } {
  const n = reasoning.ended ? Math.min(reasoning.tokens, tokens.length) : tokens.length;
  const answer = tokens.slice(n);
  while (answer.length && answer[0].text.trim() === '') answer.shift();
  return { thinking: tokens.slice(0, n), answer };
}

/** "Thought for 3.4 s"; "Thinking…" while it goes on; "Thought for 3.4 s, cut off" for a reply
 *  that ended while thinking. */
export function thinkingSummary(reasoning: Reasoning | null, live: boolean): string {
  if (!reasoning || (!reasoning.ended && live)) return 'Thinking…';
  const secs = `${(reasoning.ms / 1000).toFixed(1)} s`;
  return reasoning.ended ? `Thought for ${secs}` : `Thought for ${secs}, cut off before an answer`;
}

/** The block: collapsed once the thinking is over, open while it streams. */
export class ThinkingBlock {
  readonly element: HTMLDetailsElement;
  private readonly summary: HTMLElement;
  private readonly text: HTMLElement;
  private raw = '';

  constructor(doc: Document = document) {
    this.element = doc.createElement('details');
    this.element.className = 'thinking';
    this.summary = doc.createElement('summary');
    this.text = doc.createElement('div');
    this.text.className = 'thinking-text';
    this.element.append(this.summary, this.text);
    this.summary.textContent = thinkingSummary(null, true);
  }

  /** A stored reply's thinking, collapsed. */
  static stored(tokens: TokenEvent[], reasoning: Reasoning, doc: Document = document): ThinkingBlock {
    const block = new ThinkingBlock(doc);
    block.push(tokens);
    block.end(reasoning, false);
    return block;
  }

  /** More thinking while it streams: shown open. */
  push(tokens: TokenEvent[]): void {
    for (const t of tokens) this.raw += t.text;
    this.text.textContent = shownThinking(this.raw);
  }

  /** The thinking is over (or the reply is): the block folds. */
  end(reasoning: Reasoning, live = true): void {
    this.summary.textContent = thinkingSummary(reasoning, live && !reasoning.ended);
    this.element.open = false;
  }

  /** Shown open while the model thinks, so the reader sees it go. */
  streaming(): void {
    this.element.open = true;
  }
}
