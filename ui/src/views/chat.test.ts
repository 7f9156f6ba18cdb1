import { beforeEach, describe, expect, it } from 'vitest';
import type { ChatMessage, Conversation, GenerationStats, Settings } from '../api/types';
import { DEFAULT_SETTINGS } from '../api/types';
import { summarize, summarizeRemote } from '../render/speed';
import { $, loadPage, settle } from '../testing/page';
import indexHtml from '../../index.html?raw';
import { ChatView, type ChatHost } from './chat';

const stats: GenerationStats = {
  prompt_tokens: 20,
  cached_prompt_tokens: 0,
  generated_tokens: 100,
  prefill_ms: 500,
  decode_ms: 7000,
  tokens_per_second: 14.3,
  speculative: {
    drafter: 'model', drafted: 100, accepted: 74, acceptance_rate: 0.74, target_passes: 40, tokens_per_pass: 2.6, draft_ms: 1000,
    verify_ms: 3000, plain_ms_per_token: 100, speedup_vs_plain: 1.4, predicted_speedup: 1.5, cost_ratio: 0.2, k_min: 2, k_max: 5, k_mean: 3.5,
  },
};

const token = (text: string) => ({ id: 1, text, source: 'accepted' as const, p: 0.9, q: 0.8 });
const k4: Settings = { ...DEFAULT_SETTINGS, drafter: 'model', k: 4, mode: 'greedy' };
const remote: Settings = { ...k4, remote: { base_url: 'http://gpu:8080/v1', model: 'qwen-32b' } };

const reply = (id: number, over: Partial<ChatMessage>): ChatMessage => ({
  id, role: 'assistant', content: '**Hi**', tokens: [token('**Hi**')], stats, finish_reason: 'stop', ...over,
});

const conversation: Conversation = {
  id: 7,
  title: 'Greetings',
  system_prompt: '',
  updated_at: 1,
  messages: [
    { id: 1, role: 'user', content: 'Say hi <b>' },
    // Made with k 4 here, whatever the settings are now.
    reply(2, { settings: k4, settings_label: 'draft model · k 4 · greedy' }),
    { id: 3, role: 'user', content: 'Again' },
    // Stored before settings were kept: local, k auto.
    reply(4, { finish_reason: 'cancelled' }),
    { id: 5, role: 'user', content: 'And remotely' },
    // The second of two answers to its question (a Regenerate made the other).
    reply(6, { settings: remote, settings_label: 'remote qwen-32b @ gpu:8080 · greedy', siblings: [4, 6, 9] }),
  ],
};

function chat(over: Partial<ChatHost> = {}) {
  const calls: unknown[][] = [];
  const host: ChatHost = {
    colours: () => true,
    replying: () => false,
    edit: (m) => void calls.push(['edit', m.id]),
    regenerate: async (id) => void calls.push(['regenerate', id]),
    showBranch: async (id) => void calls.push(['branch', id]),
    fork: async (id) => void calls.push(['fork', id]),
    remove: async (m) => void calls.push(['delete', m.id]),
    openLink: async (url) => void calls.push(['link', url]),
    onError: (e) => {
      throw e;
    },
    ...over,
  };
  return { view: new ChatView({ title: $('#title'), messages: $('#messages') }, host), calls };
}

const footers = () => [...document.querySelectorAll('#messages .message footer')].map((f) => f.textContent);

describe('the chat view', () => {
  beforeEach(() => loadPage(indexHtml));

  it('draws each reply with the figures and settings it was made with, its branches, and what can be done with it', () => {
    const { view, calls } = chat();
    view.show(conversation);
    expect($('#title').textContent).toBe('Greetings');
    const asked = 'EditForkDelete';
    const answered = 'RegenerateForkDelete';
    expect(footers()).toEqual([
      asked,
      `${summarize(stats, 4)} · draft model · k 4 · greedy${answered}`,
      asked,
      `${summarize(stats, 'auto')} · stopped${answered}`,
      asked,
      `${summarizeRemote(stats)} · remote qwen-32b @ gpu:8080 · greedy◀2/3▶${answered}`,
    ]);
    expect(summarize(stats, 4)).not.toBe(summarize(stats, 'auto'));
    // A user's text is text, never markup.
    expect(document.querySelector('.message.user .body')!.textContent).toBe('Say hi <b>');
    document.querySelectorAll<HTMLButtonElement>('#messages .edit')[1].click();
    document.querySelectorAll<HTMLButtonElement>('#messages .regenerate')[2].click();
    document.querySelector<HTMLButtonElement>('#messages [aria-label="Next branch"]')!.click();
    document.querySelector<HTMLButtonElement>('#messages [aria-label="Previous branch"]')!.click();
    document.querySelectorAll<HTMLButtonElement>('#messages .fork')[1].click();
    document.querySelectorAll<HTMLButtonElement>('#messages .delete')[0].click();
    expect(calls).toEqual([['edit', 3], ['regenerate', 6], ['branch', 9], ['branch', 4], ['fork', 2], ['delete', 1]]);
  });

  it('colours the tokens, or reads the reply as markdown', () => {
    let colours = true;
    const { view } = chat({ colours: () => colours });
    view.show(conversation);
    expect(document.querySelectorAll('.message.assistant .tok').length).toBe(3);
    colours = false;
    view.show(conversation);
    expect(document.querySelectorAll('.message.assistant .tok').length).toBe(0);
    expect(document.querySelector('.message.assistant .body strong')!.textContent).toBe('Hi');
  });

  it('marks where the chat left the model view for its latest reply, and a reply that filled the context', () => {
    const { view } = chat();
    const trimmed = { ...stats, trimmed: { first: 2, messages: 2, tokens: 0 } };
    const messages = [
      ...conversation.messages.slice(0, 5),
      reply(6, { stats: trimmed, finish_reason: 'context_full' }),
    ];
    view.show({ ...conversation, messages });
    const marker = document.querySelector('#messages > .trim-marker')!;
    expect(marker.textContent).toBe("⋯ 2 earlier messages left out of the model's view to fit the context ⋯");
    // Before the first message the reply's prompt still held after the two left out.
    expect((marker.nextElementSibling as HTMLElement).dataset.id).toBe('5');
    expect(footers()[5]).toContain('filled the context');
    // A cut inside one long question: marked just before the reply.
    view.markTrim({ first: 0, messages: 0, tokens: 940 });
    expect(document.querySelectorAll('#messages > .trim-marker').length).toBe(1);
    const cut = document.querySelector('#messages > .trim-marker')!;
    expect(cut.textContent).toContain('940 tokens from the middle of the prompt');
    expect((cut.nextElementSibling as HTMLElement).dataset.id).toBe('6');
  });

  it('counts a reply that called tools as the messages the model saw when it marks a trim, and draws its cards', () => {
    const { view } = chat();
    const card = { id: 'call_0_add', server: 'arith', tool: 'add', arguments: { a: 1 }, at: 1, running: false, outcome: { kind: 'ran' as const, text: '2', is_error: false, cut_from: null, ms: 3 } };
    const called = reply(2, { tokens: [token('{"name": "add", "arguments": {"a": 1}}'), token('It is 2.')], tools: [card] });
    const messages: ChatMessage[] = [
      { id: 1, role: 'user', content: 'Add' },
      called,
      { id: 3, role: 'user', content: 'Again' },
      reply(4, { stats: { ...stats, trimmed: { first: 0, messages: 4, tokens: 0 } } }),
    ];
    view.show({ ...conversation, messages });
    // Left out: the question and the reply's three (its call, the result, its answer).
    const marker = document.querySelector('#messages > .trim-marker')!;
    expect((marker.nextElementSibling as HTMLElement).dataset.id).toBe('3');
    const body = document.querySelector('.message[data-id="2"] .body')!;
    expect(body.querySelector('.tool-card')?.getAttribute('data-state')).toBe('ran');
    expect(body.textContent).not.toContain('"arguments"');
    expect(body.textContent).toContain('It is 2.');
  });

  it('folds the thinking of each round of a stored reply that called tools', () => {
    const { view } = chat();
    const card = { id: 'call_0_add', server: 'arith', tool: 'add', arguments: { a: 1 }, at: 4, running: false, outcome: { kind: 'ran' as const, text: '2', is_error: false, cut_from: null, ms: 3 } };
    const tokens = ['<think>', 'Add.', '</think>', '<tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call>', '<think>', 'It said 2.', '</think>', '\n\n', 'It is 2.'].map(token);
    // The stats are the last round's: its thinking is three tokens of that round.
    const called = reply(2, { tokens, tools: [card], stats: { ...stats, reasoning: { tokens: 3, ended: true, ms: 1500 } } });
    view.show({ ...conversation, messages: [{ id: 1, role: 'user', content: 'Add' }, called] });
    const body = document.querySelector('.message[data-id="2"] .body')!;
    const blocks = [...body.querySelectorAll('details.thinking')];
    expect(blocks.map((b) => [b.querySelector('summary')?.textContent, b.querySelector('.thinking-text')?.textContent])).toEqual([
      ['Thought', 'Add.'],
      ['Thought for 1.5 s', 'It said 2.'],
    ]);
    expect(blocks[1].previousElementSibling?.classList.contains('tool-card')).toBe(true);
    expect(body.textContent).not.toContain('<think>');
    expect(body.textContent).toContain('It is 2.');
  });

  it('folds the last round of a stored tool reply that was cut off while thinking its prompt opened', () => {
    const { view } = chat();
    const card = { id: 'call_0_add', server: 'arith', tool: 'add', arguments: { a: 1 }, at: 1, running: false, outcome: { kind: 'ran' as const, text: '2', is_error: false, cut_from: null, ms: 3 } };
    const tokens = ['<tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call>', 'So it is', ' two'].map(token);
    const called = reply(2, { tokens, tools: [card], stats: { ...stats, reasoning: { tokens: 2, ended: false, ms: 800 } } });
    view.show({ ...conversation, messages: [{ id: 1, role: 'user', content: 'Add' }, called] });
    const body = document.querySelector('.message[data-id="2"] .body')!;
    const block = body.querySelector('details.thinking')!;
    expect(block.querySelector('summary')?.textContent).toBe('Thought for 0.8 s, cut off before an answer');
    expect(block.querySelector('.thinking-text')?.textContent).toBe('So it is two');
    expect(block.previousElementSibling?.classList.contains('tool-card')).toBe(true);
  });

  it('an empty chat says how to start; a reply without an end reads as interrupted', () => {
    const { view } = chat();
    view.show(null);
    expect($('#title').textContent).toBe('Specula');
    expect($('#messages').textContent).toMatch(/^Start a conversation/);
    view.show({ ...conversation, messages: [reply(2, { finish_reason: null, stats: null })] });
    expect(footers()).toEqual(['interruptedRegenerateForkDelete']);
  });

  it('while a reply streams: its element follows the messages, with no Edit or Regenerate', () => {
    let replying = false;
    const { view } = chat({ replying: () => replying });
    view.show({ ...conversation, messages: [] });
    const live = view.startReply({ id: -1, role: 'assistant', content: '', tokens: [] });
    replying = true;
    expect(document.querySelector('#messages p.empty')).toBeNull();
    expect(document.querySelector('#messages .message.assistant.streaming .body')).toBe(live.body);
    expect(live.summary.className).toBe('reply-summary');
    view.show(conversation);
    expect(document.querySelectorAll('#messages .edit, #messages .regenerate').length).toBe(0);
  });

  it('a link in a reply never navigates the window: it opens outside', async () => {
    const { view, calls } = chat({ colours: () => false });
    view.show({ ...conversation, messages: [reply(2, { content: '[site](https://example.com/a) [mail](mailto:me@example.com)' })] });
    const links = [...document.querySelectorAll<HTMLAnchorElement>('#messages a')];
    const followed = links.map((a) => a.dispatchEvent(new MouseEvent('click', { bubbles: true, cancelable: true })));
    await settle();
    expect(followed).toEqual([false, false]);
    expect(calls).toEqual([['link', 'https://example.com/a'], ['link', 'mailto:me@example.com']]);
  });
});
