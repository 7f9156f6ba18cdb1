import { describe, expect, it } from 'vitest';
import type { TokenEvent } from '../api/types';
import { shownThinking, splitPart, splitReply, ThinkingBlock, thinkingSummary } from './thinking';

const token = (text: string): TokenEvent => ({ id: 0, text, source: 'target' });

describe('thinking', () => {
  it('shows the thinking without its markers, even while one arrives', () => {
    expect(shownThinking('<think>\nTwo and two.\n</think>\n\n')).toBe('Two and two.');
    expect(shownThinking('<thi')).toBe('');
    expect(shownThinking('<think>So it goes </thi')).toBe('So it goes');
    expect(shownThinking('opened by the prompt')).toBe('opened by the prompt');
  });

  it('splits a stored reply by its thinking tokens', () => {
    const tokens = ['<think>', 'Hm', '</think>', '\n\n', 'Yes'].map(token);
    const { thinking, answer } = splitReply(tokens, { tokens: 3, ended: true, ms: 1200 });
    expect(thinking.map((t) => t.text).join('')).toBe('<think>Hm</think>');
    expect(answer.map((t) => t.text)).toEqual(['Yes']);
    expect(splitReply(tokens, { tokens: 0, ended: false, ms: 5 }).answer).toEqual([]);
    // The closing token carried the answer's first text, as Rust's split_tokens reads it.
    const spilling = ['<think>', 'Hm', '</think>\n\nSo', ' yes'].map(token);
    expect(splitReply(spilling, { tokens: 3, ended: true, ms: 1 }).answer.map((t) => t.text)).toEqual(['So', ' yes']);
  });

  it('splits each part of a tool reply at its own markers', () => {
    const texts = (tokens: TokenEvent[]) => tokens.map((t) => t.text);
    const round = splitPart(['\n', '<think>', 'Got 2.', '</think>', '\n\n', 'It is 2.'].map(token))!;
    expect([texts(round.thinking).join(''), round.ended, texts(round.answer)]).toEqual(['\n<think>Got 2.</think>', true, ['It is 2.']]);
    // Opened by the prompt; the closing token carried the answer's first text.
    const opened = splitPart(['Hm', '</think>\n\nSo', ' yes'].map(token))!;
    expect([texts(opened.thinking), texts(opened.answer)]).toEqual([['Hm', '</think>\n\nSo'], ['So', ' yes']]);
    const cut = splitPart(['<think>', 'Still'].map(token))!;
    expect([cut.ended, cut.answer]).toEqual([false, []]);
    expect(splitPart(['It is 2.'].map(token))).toBeNull();
    expect(splitPart(['Say <think>', 'x', '</think> literally'].map(token)), 'markers inside the answer').toBeNull();
    expect(thinkingSummary({ tokens: 3, ended: true, ms: -1 }, false)).toBe('Thought');
  });

  it('folds a stored block under how long the model thought', () => {
    const block = ThinkingBlock.stored([token('<think>'), token('Hm.'), token('</think>')], { tokens: 3, ended: true, ms: 3400 });
    expect(block.element.open).toBe(false);
    expect(block.element.querySelector('summary')?.textContent).toBe('Thought for 3.4 s');
    expect(block.element.querySelector('.thinking-text')?.textContent).toBe('Hm.');
    expect(thinkingSummary({ tokens: 9, ended: false, ms: 2000 }, false)).toBe('Thought for 2.0 s, cut off before an answer');
    expect(thinkingSummary(null, true)).toBe('Thinking…');
  });
});
