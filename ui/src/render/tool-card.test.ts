import { describe, expect, it } from 'vitest';
import type { TokenEvent, ToolCard } from '../api/types';
import { callStart, cardState, partsAtCards, toolCardElement, withoutCallMarkup } from './tool-card';

const token = (text: string): TokenEvent => ({ id: 1, text, source: 'target' });
const asking: ToolCard = { id: 'call_0_add', server: 'arith', tool: 'add', arguments: { a: 1, b: 2 }, at: 3, running: false };

describe('a tool call card', () => {
  it('asks with three answers, and gives the one clicked once', () => {
    const answers: string[] = [];
    const element = toolCardElement(asking, (d) => answers.push(d));
    expect(element.dataset.state).toBe('asking');
    expect(element.textContent).toContain('add · arith');
    expect(element.querySelector('.tool-arguments')?.textContent).toBe('{"a":1,"b":2}');
    const buttons = [...element.querySelectorAll<HTMLButtonElement>('.tool-decision button')];
    expect(buttons.map((b) => b.textContent)).toEqual(['Allow once', 'Always for this tool', 'Deny']);
    buttons[2].click();
    buttons[0].click(); // disabled after the first answer
    expect(answers).toEqual(['deny']);
  });

  it('says each outcome in words, and shows a result as text, never as markup', () => {
    const ran = toolCardElement({ ...asking, outcome: { kind: 'ran', text: '<img src=x onerror=alert(1)>', is_error: false, cut_from: 40000, ms: 12 } });
    expect(ran.dataset.state).toBe('ran');
    expect(ran.querySelector('img')).toBeNull();
    expect(ran.querySelector('.tool-result')?.textContent).toBe('<img src=x onerror=alert(1)>');
    expect(ran.textContent).toContain('Result in 12 ms · cut from 40000 characters');
    expect(ran.querySelector('.tool-decision')).toBeNull();
    const states = [
      { kind: 'denied' as const },
      { kind: 'failed' as const, reason: 'the server exited (status 3): boom' },
      { kind: 'skipped' as const, reason: 'the reply was stopped' },
      { kind: 'ran' as const, text: 'no such file', is_error: true, cut_from: null, ms: 1 },
    ].map((outcome) => cardState({ ...asking, outcome }));
    expect(states).toEqual(['denied', 'failed', 'skipped', 'error']);
    expect(cardState({ ...asking, running: true })).toBe('running');
    // From the history, a question has no buttons and says so.
    expect(toolCardElement(asking).querySelector('.tool-outcome')?.textContent).toBe('Not answered (Stop ends the reply that asks).');
  });

  it("splits a reply's tokens at each card's place, leaving the call's markup to the card", () => {
    const tokens = ['Let me add.', '\n<tool', '_call>{"name": "add"}', '</tool_call>', 'It is ', '3.'].map(token);
    const parts = partsAtCards(tokens, [{ ...asking, at: 4 }]);
    expect(parts.map((p) => p.map((t) => t.text).join(''))).toEqual(['Let me add.\n', 'It is 3.']);
    expect(withoutCallMarkup([token('plain text')]).map((t) => t.text)).toEqual(['plain text']);
    // The JSON the Qwen coder writes instead, fenced or bare; a JSON answer that is no call stays.
    const fenced = 'Sure.\n```json\n{\n  "name": "add",\n  "arguments": {"a": 1}\n}\n```\n';
    expect(callStart(fenced)).toBe(6);
    expect(callStart('Calling {"name": "add", "arguments": {}}')).toBe(8);
    expect(callStart('```json\n{"a": 1}\n```')).toBe(-1);
    expect(callStart('Use {braces} freely.')).toBe(-1);
    // Two calls read from one part: one split, both cards after it.
    expect(partsAtCards(tokens, [{ ...asking, at: 4 }, { ...asking, id: 'call_1_add', at: 4 }]).length).toBe(2);
  });
});
