import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { GenerationStats, StepEvent } from '../api/types';
import { $, loadPage } from '../testing/page';
import indexHtml from '../../index.html?raw';
import { ChatView } from './chat';
import { LiveReply } from './reply';
import { SpeedPanel, speedParts } from './speed-panel';

const token = (text: string) => ({ id: 1, text, source: 'accepted' as const, p: 0.9, q: 0.8 });
const step: StepEvent = {
  k: 4, accepted: 3, generated: 4, tokens_per_second: 12.34, speedup_vs_plain: 1.5, plain_ms_per_token: 80, plain_steps: 5, acceptance_rate: 0.75,
};
const stats: GenerationStats = { prompt_tokens: 5, cached_prompt_tokens: 0, generated_tokens: 3, prefill_ms: 1, decode_ms: 2, tokens_per_second: 9 };

function reply(drafting = true) {
  const chat = new ChatView({ title: $('#title'), messages: $('#messages') }, {
    colours: () => true, replying: () => true, edit: () => {}, regenerate: async () => {}, showBranch: async () => {}, fork: async () => {}, remove: async () => {}, openLink: async () => {}, onError: () => {},
  });
  const notices: unknown[] = [];
  const live = new LiveReply(chat, new SpeedPanel(speedParts($('#speed-panel'))), {
    colours: true,
    drafting,
    remote: false,
    verdict: (s) => `${s.generated_tokens} tokens, plain decoding`,
    onNotice: (e) => void notices.push(e),
  });
  return { live, notices };
}

const figure = (name: string) => $(`[data-figure="${name}"]`).textContent;
const summary = () => $('#messages .streaming .reply-summary').textContent;

describe('a streaming reply', () => {
  beforeEach(() => {
    loadPage(indexHtml);
    vi.useFakeTimers();
  });
  afterEach(() => vi.useRealTimers());

  it('says the prompt\'s progress, then draws tokens and the speed figures a few times a second', () => {
    const { live } = reply();
    expect($('#speed-panel').hidden).toBe(false);
    expect(['tps', 'speedup', 'acceptance', 'k'].map(figure)).toEqual(['–', '–', '–', '–']);

    live.onEvent({ kind: 'trimmed', trim: { first: 0, messages: 0, tokens: 120 } });
    expect($('#messages > .trim-marker').textContent).toContain('120 tokens from the middle of the prompt');
    live.onEvent({ kind: 'prefill', done: 50, total: 200 });
    expect(summary()).toBe('reading the prompt · 25%');
    live.onEvent({ kind: 'tokens', tokens: [token('Hel'), token('lo')] });
    live.onEvent({ kind: 'step', step });
    expect(summary()).toBe('');
    expect(document.querySelectorAll('#messages .streaming .tok').length).toBe(0);
    vi.advanceTimersByTime(1);
    expect(document.querySelectorAll('#messages .streaming .tok').length).toBe(2);
    expect(['tps', 'speedup', 'acceptance', 'k'].map(figure)).toEqual(['12.3', '1.50x', '75%', '4']);
    expect($('#spark').innerHTML).toMatch(/^<svg/);

    // The next paint waits for its turn, whatever comes meanwhile.
    live.onEvent({ kind: 'tokens', tokens: [token('!')] });
    vi.advanceTimersByTime(100);
    expect(document.querySelectorAll('#messages .streaming .tok').length).toBe(2);
    live.onEvent({ kind: 'done', finish_reason: 'end_of_turn', text: 'Hello!', stats });
    expect(document.querySelectorAll('#messages .streaming .tok').length).toBe(3);
    expect(figure('tps')).toBe('9.0');
    expect($('#summary').textContent).toBe('3 tokens, plain decoding');
  });

  it('streams a reasoning model\'s thinking into a block that folds when the answer begins', () => {
    const { live } = reply();
    live.onEvent({ kind: 'tokens', tokens: [token('<think>'), token('\nTwo')] });
    vi.advanceTimersByTime(1);
    live.onEvent({ kind: 'reasoning', reasoning: { tokens: 1, ended: false, ms: 0 } });
    live.onEvent({ kind: 'tokens', tokens: [token(' and two.'), token('</think>')] });
    const block = $('#messages .streaming details.thinking') as HTMLDetailsElement;
    expect(block.open).toBe(true);
    expect(block.querySelector('summary')?.textContent).toBe('Thinking…');
    expect(block.querySelector('.thinking-text')?.textContent).toBe('Two and two.');
    expect(document.querySelectorAll('#messages .streaming .body .tok').length).toBe(0);

    live.onEvent({ kind: 'reasoning', reasoning: { tokens: 4, ended: true, ms: 2500 } });
    live.onEvent({ kind: 'tokens', tokens: [token('\n\n'), token('Four.')] });
    live.onEvent({ kind: 'done', finish_reason: 'end_of_turn', text: '', stats: { ...stats, reasoning: { tokens: 4, ended: true, ms: 2500 } } });
    expect(block.open).toBe(false);
    expect(block.querySelector('summary')?.textContent).toBe('Thought for 2.5 s');
    expect($('#messages .streaming .body').textContent).toBe('Four.');
  });

  it('a failure and a reply the history could not keep are said; a plain reply has no speedup', () => {
    const { live, notices } = reply(false);
    live.onEvent({ kind: 'step', step });
    vi.advanceTimersByTime(1);
    expect(figure('speedup')).toBe('–');
    const full = { code: 'disk_full' as const, message: 'the disk is full' };
    live.onEvent({ kind: 'unsaved', error: full });
    live.onEvent({ kind: 'failed', error: { code: 'internal', message: 'it broke' } });
    expect(notices).toEqual([full, { code: 'internal', message: 'it broke' }]);
  });
});

describe('a streaming reply whose chat is left', () => {
  beforeEach(() => loadPage(indexHtml));

  it('marks no trim in the chat shown instead, and marks its own when put back', () => {
    const { live } = reply();
    const element = $('#messages .streaming');
    const messages = $('#messages');
    messages.replaceChildren(); // another chat drawn
    live.onEvent({ kind: 'trimmed', trim: { first: 0, messages: 2, tokens: 900 } });
    expect(messages.querySelector('.trim-marker')).toBeNull();
    live.reattach();
    expect(element.isConnected).toBe(true);
    expect(messages.querySelector('.trim-marker')).not.toBeNull();
  });
});

describe('a streaming reply that calls a tool', () => {
  beforeEach(() => {
    loadPage(indexHtml);
    vi.useFakeTimers();
  });
  afterEach(() => vi.useRealTimers());

  it('ends the text at the call, asks on a card whose answer reaches the backend, and draws what follows below it', async () => {
    const { live } = reply();
    const decided: string[] = [];
    live.handle = { cancel: async () => {}, decide: async (id, d) => void decided.push(`${id}:${d}`), messageId: 7, done: new Promise(() => {}) };
    live.onEvent({ kind: 'tokens', tokens: [token('Adding.'), token('<tool_call>{"name": "add"}</tool_call>')] });
    const card = { id: 'call_0_add', server: 'arith', tool: 'add', arguments: { a: 1 }, at: 2, running: false };
    live.onEvent({ kind: 'tool', card });
    const body = $('#messages .streaming .body');
    expect(body.textContent).toContain('Adding.');
    expect(body.textContent).not.toContain('<tool_call>');
    body.querySelector<HTMLButtonElement>('.tool-card button[data-decision=once]')!.click();
    await Promise.resolve();
    expect(decided).toEqual(['call_0_add:once']);
    live.onEvent({ kind: 'tool', card: { ...card, running: true } });
    live.onEvent({ kind: 'tool', card: { ...card, outcome: { kind: 'ran', text: '3', is_error: false, cut_from: null, ms: 5 } } });
    expect(body.querySelectorAll('.tool-card').length).toBe(1);
    expect(body.querySelector('.tool-card')?.getAttribute('data-state')).toBe('ran');
    live.onEvent({ kind: 'tokens', tokens: [token('It is 3.')] });
    vi.advanceTimersByTime(400);
    expect(body.querySelector('.tool-card + .reply-part')?.textContent).toBe('It is 3.');
  });

  it('folds the thinking of each round: a round after a tool result gets its own block', () => {
    const { live } = reply();
    live.onEvent({ kind: 'reasoning', reasoning: { tokens: 0, ended: false, ms: 0 } });
    live.onEvent({ kind: 'tokens', tokens: [token('<think>'), token('Add them.'), token('</think>')] });
    live.onEvent({ kind: 'reasoning', reasoning: { tokens: 3, ended: true, ms: 900 } });
    live.onEvent({ kind: 'tokens', tokens: [token('\n'), token('<tool_call>{"name": "add"}</tool_call>')] });
    const card = { id: 'call_0_add', server: 'arith', tool: 'add', arguments: { a: 1 }, at: 5, running: false };
    live.onEvent({ kind: 'tool', card: { ...card, outcome: { kind: 'ran', text: '3', is_error: false, cut_from: null, ms: 5 } } });
    // The next round thinks again.
    live.onEvent({ kind: 'reasoning', reasoning: { tokens: 0, ended: false, ms: 0 } });
    live.onEvent({ kind: 'tokens', tokens: [token('<think>'), token('It said 3.'), token('</think>')] });
    const blocks = () => [...document.querySelectorAll<HTMLDetailsElement>('#messages .streaming details.thinking')];
    expect(blocks().map((b) => b.open)).toEqual([false, true]);
    live.onEvent({ kind: 'reasoning', reasoning: { tokens: 3, ended: true, ms: 400 } });
    live.onEvent({ kind: 'tokens', tokens: [token('\n\n'), token('It is 3.')] });
    live.onEvent({ kind: 'done', finish_reason: 'end_of_turn', text: '', stats: { ...stats, reasoning: { tokens: 3, ended: true, ms: 400 } } });
    expect(blocks().map((b) => [b.open, b.querySelector('summary')?.textContent, b.querySelector('.thinking-text')?.textContent])).toEqual([
      [false, 'Thought for 0.9 s', 'Add them.'],
      [false, 'Thought for 0.4 s', 'It said 3.'],
    ]);
    const body = $('#messages .streaming .body');
    expect(blocks()[1].previousElementSibling?.classList.contains('tool-card')).toBe(true);
    expect(body.querySelector('.reply-part')?.textContent).toBe('It is 3.');
    expect(body.textContent).not.toContain('<think>');
  });

  it('folds a later round whose thinking opens and closes in one event, and ends a round cut off while thinking at its card', () => {
    const { live } = reply();
    live.onEvent({ kind: 'reasoning', reasoning: { tokens: 0, ended: false, ms: 0 } });
    live.onEvent({ kind: 'tokens', tokens: [token('<think>'), token('Call it. <tool_call>{"name": "add"}</tool_call>')] });
    const card = { id: 'call_0_add', server: 'arith', tool: 'add', arguments: { a: 1 }, at: 2, running: false };
    live.onEvent({ kind: 'tool', card });
    live.onEvent({ kind: 'tokens', tokens: [token('<think>Short.</think>'), token('\n\nDone.')] });
    live.onEvent({ kind: 'reasoning', reasoning: { tokens: 1, ended: true, ms: 100 } });
    vi.advanceTimersByTime(400);
    const blocks = [...document.querySelectorAll<HTMLDetailsElement>('#messages .streaming details.thinking')];
    expect(blocks.map((b) => b.querySelector('summary')?.textContent)).toEqual(['Thinking stopped', 'Thought for 0.1 s']);
    expect(blocks[1].querySelector('.thinking-text')?.textContent).toBe('Short.');
    expect($('#messages .streaming .reply-part').textContent).toBe('Done.');
  });
});
