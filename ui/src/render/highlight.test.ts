import { describe, expect, it } from 'vitest';
import type { TokenEvent } from '../api/types';
import { syntaxClasses } from './highlight';
import { renderTokens } from './tokens';
import { ReplyStream } from './stream';

const tok = (text: string, source: TokenEvent['source'] = 'accepted'): TokenEvent => ({ id: 0, text, source });

/** A Rust block cut into tokens that do not follow the syntax: `fn` split, a string across two. */
const REPLY = [
  tok('Here:\n'),
  tok('```rust\n', 'target'),
  tok('f', 'accepted'),
  tok('n main() { let s = "he', 'resampled'),
  tok('llo"; }\n', 'bonus'),
  tok('```', 'target'),
  tok('\nDone.', 'accepted'),
];

describe('syntax colours with provenance colours', () => {
  it('colours code text inside the token spans, which keep their sources, text and count', () => {
    const fragment = renderTokens(REPLY);
    const spans = [...fragment.querySelectorAll('pre span.tok')] as HTMLSpanElement[];
    // The closing fence line's end belongs to the block: the last token is split there.
    expect(spans.map((s) => s.dataset.source)).toEqual(['target', 'accepted', 'resampled', 'bonus', 'target', 'accepted']);
    expect(spans.map((s) => s.textContent).join('')).toBe('```rust\nfn main() { let s = "hello"; }\n```\n');
    // `fn` is a keyword across two tokens: each token's part of it is coloured as one.
    expect(spans[1].querySelector('.hljs-keyword')?.textContent).toBe('f');
    expect(spans[2].querySelector('.hljs-keyword')?.textContent).toBe('n');
    // The string runs from one token into the next.
    expect(spans[2].querySelector('.hljs-string')?.textContent).toBe('"he');
    expect(spans[3].querySelector('.hljs-string')?.textContent).toBe('llo"');
    // Fence lines and the text outside the block are not coloured.
    expect(spans[0].childElementCount).toBe(0);
    expect(fragment.querySelectorAll('div.tokens [class^="hljs"]').length).toBe(0);
  });

  it('colours a streamed block once it closes, and the same as a stored one', () => {
    const live = document.createElement('div');
    const reply = new ReplyStream(live, { colours: true, interval: 0 });
    for (const t of REPLY) {
      reply.push(t);
      reply.paint();
    }
    reply.finish();
    const stored = document.createElement('div');
    stored.append(renderTokens(REPLY));
    expect(live.querySelector('pre')?.innerHTML).toBe(stored.querySelector('pre')?.innerHTML);
  });

  it('gives every character a class, plain text none, whatever the language', () => {
    const code = 'let x = 1; // one';
    const classes = syntaxClasses(code, 'javascript');
    expect(classes.length).toBe(code.length);
    expect(classes[0]).toBe('hljs-keyword');
    expect(classes[4]).toBe('');
    expect(classes[code.length - 1]).toBe('hljs-comment');
    // An unknown language is guessed, never an error; what highlight.js escapes (`<`, `&`)
    // still lines up character for character.
    const guessed = syntaxClasses('<b class="x">&amp;</b>', 'no-such-language');
    expect(guessed.length).toBe(22);
    expect(guessed.some((c) => c !== '')).toBe(true);
  });

  it('reads a longer fence and its language', () => {
    const fragment = renderTokens([tok('````rust\nfn f() {}\n````\n')]);
    expect(fragment.querySelector('pre .hljs-keyword')?.textContent).toBe('fn');
  });
});
