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

/** What the token that closed the thinking carried past `</think>` (the answer's first text). */
export function spilled(thinking: TokenEvent[]): TokenEvent | null {
  const last = thinking.at(-1);
  const raw = thinking.map((t) => t.text).join('');
  const close = raw.indexOf(CLOSE);
  const rest = close >= 0 ? raw.slice(close + CLOSE.length) : '';
  return last && rest ? { ...last, text: rest } : null;
}

/** The answer's tokens without the whitespace it starts with. */
export function trimmedStart(answer: TokenEvent[]): TokenEvent[] {
  const out = [...answer];
  while (out.length && out[0].text.trim() === '') out.shift();
  if (out.length) out[0] = { ...out[0], text: out[0].text.trimStart() };
  return out;
}

/** A stored reply's thinking tokens and its answer's, as the engine splits them
 *  (crates/protocol/src/reasoning.rs `split_tokens`): text the closing token carried past
 *  `</think>` begins the answer, and the whitespace before the answer is dropped. */
export function splitReply(tokens: TokenEvent[], reasoning: Reasoning): { thinking: TokenEvent[]; answer: TokenEvent[] } {
  const n = reasoning.ended ? Math.min(reasoning.tokens, tokens.length) : tokens.length;
  const thinking = tokens.slice(0, n);
  const spill = reasoning.ended ? spilled(thinking) : null;
  return { thinking, answer: trimmedStart([...(spill ? [spill] : []), ...tokens.slice(n)]) };
}

/** One part of a reply that called tools (the text between two cards), split the way the
 *  model wrote it: thinking first when the part opens with `<think>` (each round after a tool
 *  result thinks again) or closes one its prompt opened, then the answer. Null: no thinking.
 *  The stored reply's `reasoning` counts only one round's tokens, so the markers decide here. */
export function splitPart(tokens: TokenEvent[]): { thinking: TokenEvent[]; ended: boolean; answer: TokenEvent[] } | null {
  const raw = tokens.map((t) => t.text).join('');
  const opens = raw.trimStart().startsWith(OPEN);
  const close = raw.indexOf(CLOSE);
  if (!opens && (close < 0 || raw.lastIndexOf(OPEN, close) >= 0)) return null;
  if (close < 0) return { thinking: tokens, ended: false, answer: [] };
  let n = tokens.length;
  for (let i = 0, end = 0; i < tokens.length; i++) {
    end += tokens[i].text.length;
    if (end >= close + CLOSE.length) {
      n = i + 1;
      break;
    }
  }
  const thinking = tokens.slice(0, n);
  const spill = spilled(thinking);
  return { thinking, ended: true, answer: trimmedStart([...(spill ? [spill] : []), ...tokens.slice(n)]) };
}

/** "Thought for 3.4 s"; "Thinking…" while it goes on; "Thought for 3.4 s, cut off" for a reply
 *  that ended while thinking; "Thought" when its time is not known (a round of a tool reply). */
export function thinkingSummary(reasoning: Reasoning | null, live: boolean): string {
  if (!reasoning || (!reasoning.ended && live)) return 'Thinking…';
  const secs = reasoning.ms >= 0 ? ` for ${(reasoning.ms / 1000).toFixed(1)} s` : '';
  return reasoning.ended ? `Thought${secs}` : `Thought${secs}, cut off before an answer`;
}

/** The block: collapsed once the thinking is over, open while it streams. */
export class ThinkingBlock {
  readonly element: HTMLDetailsElement;
  private readonly summary: HTMLElement;
  private readonly text: HTMLElement;
  private raw = '';
  private readonly tokens: TokenEvent[] = [];

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
    this.tokens.push(...tokens);
    this.text.textContent = shownThinking(this.raw);
  }

  /** The answer's first text, when the token that closed the thinking carried some. */
  spilled(): TokenEvent | null {
    return spilled(this.tokens);
  }

  /** The reply failed while thinking. */
  stop(): void {
    this.summary.textContent = 'Thinking stopped';
    this.element.open = false;
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
