// @vitest-environment jsdom
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { TokenEvent } from '../api/types';
import { renderMarkdown } from './markdown';
import { PAINT_INTERVAL_MS, ReplyStream } from './stream';
import { type Block, blocksOf, renderTokens } from './tokens';

const SOURCES: TokenEvent['source'][] = ['accepted', 'copied', 'resampled', 'bonus', 'target'];

const tok = (text: string, i = 0): TokenEvent => ({ id: i, text, source: SOURCES[i % SOURCES.length], p: 0.5, q: i % 2 ? 0.25 : undefined });

/** A small deterministic generator, so that a failing case can be replayed. */
function random(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s * 1664525 + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

/** Replies built to hit fences: backticks, indentation, every line end JavaScript knows,
 *  empty tokens (a character still partial) and tokens that straddle lines. */
function trickyReply(rand: () => number): TokenEvent[] {
  const atoms = ['```', '``', '`', ' ', '\t', '\n', '\r', '\r\n', '\u2028', 'py', 'x = 1', 'Hello', '', '\n```\n', 'a`'];
  const tokens: TokenEvent[] = [];
  const n = 1 + Math.floor(rand() * 40);
  for (let i = 0; i < n; i++) {
    let text = '';
    const parts = 1 + Math.floor(rand() * 3);
    for (let j = 0; j < parts; j++) text += atoms[Math.floor(rand() * atoms.length)];
    tokens.push(tok(text, i));
  }
  return tokens;
}

/** How the token view cut blocks before it streamed, on the whole text at once (the code as it
 *  was): the reference the streaming layout must agree with, piece for piece. */
function referenceBlocksOf(tokens: TokenEvent[]): Block[] {
  const text = tokens.map((t) => t.text).join('');
  // Character offsets where a block starts: the start of an opening fence line, and the end
  // of a closing fence line.
  const cuts: number[] = [];
  let inCode = false;
  const fence = /^[ \t]*```.*$/gm;
  for (let m = fence.exec(text); m; m = fence.exec(text)) {
    if (!inCode) cuts.push(m.index);
    else cuts.push(Math.min(text.length, m.index + m[0].length + 1));
    inCode = !inCode;
  }
  const blocks: Block[] = [];
  let offset = 0;
  let cutIndex = 0;
  let current: Block = { code: false, pieces: [] };
  const startBlock = () => {
    if (current.pieces.length) blocks.push(current);
    current = { code: !current.code, pieces: [] };
  };
  for (const token of tokens) {
    let rest = token.text;
    while (cutIndex < cuts.length && cuts[cutIndex] < offset + rest.length) {
      const head = rest.slice(0, cuts[cutIndex] - offset);
      if (head) current.pieces.push({ token, text: head });
      offset += head.length;
      rest = rest.slice(head.length);
      startBlock();
      cutIndex++;
    }
    if (cutIndex < cuts.length && cuts[cutIndex] === offset && rest) {
      startBlock();
      cutIndex++;
    }
    current.pieces.push({ token, text: rest });
    offset += rest.length;
  }
  if (current.pieces.length) blocks.push(current);
  return blocks;
}

function html(node: Node): string {
  const div = document.createElement('div');
  div.append(node);
  return div.innerHTML;
}

/** Stream `tokens` in random chunks, painting after each, and return the body. */
function streamed(tokens: TokenEvent[], rand: () => number, colours = true): HTMLElement {
  const body = document.createElement('div');
  const stream = new ReplyStream(body, { colours });
  for (let i = 0; i < tokens.length; ) {
    const n = 1 + Math.floor(rand() * 4);
    for (const t of tokens.slice(i, i + n)) stream.push(t);
    i += n;
    stream.paint();
  }
  stream.finish();
  return body;
}

afterEach(() => vi.useRealTimers());

describe('the streaming reply', () => {
  it('cuts blocks where the whole-text rule does, however the reply is split', () => {
    const rand = random(1);
    for (let round = 0; round < 500; round++) {
      const tokens = trickyReply(rand);
      expect(blocksOf(tokens), JSON.stringify(tokens.map((t) => t.text))).toEqual(referenceBlocksOf(tokens));
    }
  });

  it('draws the same DOM, token by token in any chunks, as a full render of the finished reply', () => {
    const rand = random(2);
    for (let round = 0; round < 300; round++) {
      const tokens = trickyReply(rand);
      const body = streamed(tokens, rand);
      expect(body.innerHTML, JSON.stringify(tokens.map((t) => t.text))).toBe(html(renderTokens(tokens)));
    }
  });

  it('draws a real reply with code the same way', () => {
    const reply = 'Here is the function:\n\n```python\ndef fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n```\n\nIt recurses.\n  ```\nindented fence\n  ```\nDone.';
    const tokens = reply.match(/.{1,3}/gs)!.map((text, i) => tok(text, i));
    const body = streamed(tokens, random(3));
    expect(body.innerHTML).toBe(html(renderTokens(tokens)));
    expect(body.querySelectorAll('pre.code').length).toBe(2);
  });

  it('only appends: nothing drawn is removed or redrawn while the reply streams', () => {
    const body = document.createElement('div');
    const stream = new ReplyStream(body, { colours: true });
    const removed: Node[] = [];
    let added = 0;
    // A closed code block's tokens take syntax colours once: their text becomes coloured runs
    // inside the same spans. Nothing else may change.
    const colouring = (r: MutationRecord) =>
      r.target instanceof Element &&
      r.target.matches('pre span.tok') &&
      [...r.removedNodes].every((n) => n.nodeType === Node.TEXT_NODE);
    const observer = new MutationObserver((records) => {
      for (const r of records.filter((r) => !colouring(r))) {
        removed.push(...r.removedNodes);
        added += r.addedNodes.length;
      }
    });
    observer.observe(body, { childList: true, subtree: true, characterData: true });
    const words = 'one two three\n```js\nlet x = 1;\n```\nfour five six seven eight nine ten'.split(/(?<= )|(?=\n)/);
    stream.push(tok(words[0]));
    stream.paint();
    const first = body.querySelector('span.tok');
    for (const w of words.slice(1)) {
      stream.push(tok(w));
      stream.paint();
    }
    stream.finish();
    observer
      .takeRecords()
      .filter((r) => !colouring(r))
      .forEach((r) => removed.push(...r.removedNodes));
    observer.disconnect();
    expect(removed).toEqual([]);
    expect(body.querySelector('span.tok')).toBe(first);
    // One span a piece, one element a block (and a code block's code and copy button).
    expect(added).toBeLessThanOrEqual(words.length + 2 + 3 + 4);
  });

  it('paints a few times a second, not once a token', () => {
    vi.useFakeTimers();
    const body = document.createElement('div');
    let paints = 0;
    const stream = new ReplyStream(body, { colours: true, onPaint: () => paints++ });
    for (let i = 0; i < 100; i++) {
      stream.push(tok(`w${i} `, i));
      vi.advanceTimersByTime(10); // 100 tokens a second
    }
    vi.advanceTimersByTime(PAINT_INTERVAL_MS);
    expect(paints).toBeGreaterThanOrEqual(Math.floor(1000 / PAINT_INTERVAL_MS) - 1);
    expect(paints).toBeLessThanOrEqual(Math.ceil(1000 / PAINT_INTERVAL_MS) + 1);
    expect(body.textContent).toBe(Array.from({ length: 100 }, (_, i) => `w${i} `).join(''));
  });

  it('draws a batch at once when no paint was due for a while, and then waits an interval', () => {
    vi.useFakeTimers();
    const body = document.createElement('div');
    let paints = 0;
    const stream = new ReplyStream(body, { colours: true, onPaint: () => paints++ });
    stream.push(tok('first '));
    vi.advanceTimersByTime(0);
    expect(paints).toBe(1);
    vi.advanceTimersByTime(PAINT_INTERVAL_MS + 50);
    for (const t of ['a ', 'batch ']) stream.push(tok(t)); // a batch, delivered in one task
    vi.advanceTimersByTime(0);
    expect(paints).toBe(2);
    expect(body.textContent).toBe('first a batch ');
    stream.push(tok('soon '));
    vi.advanceTimersByTime(PAINT_INTERVAL_MS - 1);
    expect(paints).toBe(2);
    vi.advanceTimersByTime(1);
    expect(paints).toBe(3);
  });

  it('keeps finished markdown blocks and redraws only the last', () => {
    const reply = '# Title\n\nFirst paragraph with *emphasis*.\n\n- one\n- two\n\n```rust\nfn main() {}\n```\n\nLast words.';
    const tokens = reply.match(/.{1,4}/gs)!.map((text, i) => tok(text, i));
    const body = document.createElement('div');
    const stream = new ReplyStream(body, { colours: false });
    let heading: Element | null = null;
    for (const t of tokens) {
      stream.push(t);
      stream.paint();
      heading ??= [...body.children].find((el) => el.tagName === 'H1') ?? null;
    }
    stream.finish();
    expect(heading).not.toBeNull();
    expect(body.contains(heading)).toBe(true);
    const full = document.createElement('div');
    full.append(renderMarkdown(reply));
    expect(body.textContent).toBe(full.textContent);
    expect(body.querySelectorAll('h1, li, pre').length).toBe(full.querySelectorAll('h1, li, pre').length);
  });

  it('redraws what came so far when colours are switched mid-reply', () => {
    const body = document.createElement('div');
    const stream = new ReplyStream(body, { colours: true });
    for (const t of ['Some ', '**bold**', ' text']) stream.push(tok(t));
    stream.paint();
    expect(body.querySelectorAll('span.tok').length).toBe(3);
    stream.setColours(false);
    expect(body.querySelector('strong')?.textContent).toBe('bold');
    stream.setColours(true);
    expect(body.innerHTML).toBe(html(renderTokens(['Some ', '**bold**', ' text'].map((t) => tok(t)))));
  });
});
