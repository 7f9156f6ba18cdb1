import { describe, expect, it } from 'vitest';
import type { TokenEvent } from '../api/types';
import { acceptanceProbability, blocksOf, codeOf, renderTokens, tokenTitle } from './tokens';

const tok = (text: string, source: TokenEvent['source'] = 'accepted', p?: number, q?: number): TokenEvent => ({
  id: 0,
  text,
  source,
  p,
  q,
});

describe('token renderer', () => {
  it('gives each token a span with its provenance class and p/q on hover', () => {
    const fragment = renderTokens([tok('Hello', 'accepted', 0.9, 0.6), tok(' world', 'resampled', 0.3, 0.1), tok('!', 'bonus'), tok('\n', 'target')]);
    const spans = [...fragment.querySelectorAll('span.tok')] as HTMLSpanElement[];
    expect(spans.map((s) => s.className)).toEqual(['tok src-accepted', 'tok src-resampled', 'tok src-bonus', 'tok src-target']);
    expect(spans.map((s) => s.textContent).join('')).toBe('Hello world!\n');
    expect(spans[0].title).toBe('draft accepted · p 0.900 · q 0.600 · accept min(1, p/q) = 1.000');
    expect(spans[1].title).toBe('target resampled · p 0.300 · q 0.100 · accept min(1, p/q) = 1.000');
    expect(spans[2].title).toBe('target bonus');
  });

  it('computes the acceptance probability min(1, p/q)', () => {
    expect(acceptanceProbability(tok('a', 'accepted', 0.2, 0.8))).toBeCloseTo(0.25);
    expect(acceptanceProbability(tok('a', 'accepted', 0.9, 0.3))).toBe(1);
    expect(acceptanceProbability(tok('a', 'target', 0.9))).toBeUndefined();
  });

  it('puts fenced code in a pre block, splitting a token that straddles the fence', () => {
    const tokens = [tok('Here:\n``', 'target'), tok('`py\nx = 1\n', 'accepted'), tok('```\nDone', 'bonus')];
    const blocks = blocksOf(tokens);
    expect(blocks.map((b) => [b.code, b.pieces.map((p) => p.text).join('')])).toEqual([
      [false, 'Here:\n'],
      [true, '```py\nx = 1\n```\n'],
      [false, 'Done'],
    ]);
    // The straddling token keeps its provenance on both sides of the cut.
    expect(blocks[0].pieces.at(-1)?.token.source).toBe('target');
    expect(blocks[1].pieces[0]).toMatchObject({ text: '``', token: { source: 'target' } });
    const fragment = renderTokens(tokens);
    expect(fragment.querySelectorAll('pre.code span.tok').length).toBe(3);
    expect(fragment.querySelector('pre .copy')?.textContent).toBe('Copy');
  });

  it('keeps an unclosed fence open while a reply streams', () => {
    const blocks = blocksOf([tok('```rust\n'), tok('fn main() {')]);
    expect(blocks).toHaveLength(1);
    expect(blocks[0].code).toBe(true);
  });

  it('copies the code without its fences', () => {
    expect(codeOf('```python\ndef f():\n    return 1\n```\n')).toBe('def f():\n    return 1');
    expect(codeOf('plain')).toBe('plain');
  });

  it('describes plain tokens without p and q', () => {
    expect(tokenTitle(tok('x', 'target'))).toBe('plain target');
  });
});
