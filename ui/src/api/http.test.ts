import { beforeEach, describe, expect, it } from 'vitest';
import { HttpBackend, splitSse } from './http';
import { DEFAULT_SETTINGS, type ReplyEvent } from './types';

const health = { status: 'ok', pending: 0, model: 'target-model', draft: 'Draft', drafter: 'model' };

function sse(chunks: object[]): string {
  return [...chunks.map((c) => `data: ${JSON.stringify(c)}\n\n`), 'data: [DONE]\n\n'].join('');
}

/** A fetch that answers /health and streams `body` for completions, recording requests. */
function fakeFetch(body: string, status = 200) {
  const requests: { url: string; body?: unknown; headers: Headers }[] = [];
  const fetcher = (async (url: string, init?: RequestInit) => {
    requests.push({ url, body: init?.body ? JSON.parse(String(init.body)) : undefined, headers: new Headers(init?.headers) });
    if (url.endsWith('/health')) return new Response(JSON.stringify(health));
    // Cut the stream at odd places: events must survive being split across reads.
    const bytes = new TextEncoder().encode(body);
    const stream = new ReadableStream<Uint8Array>({
      start(controller) {
        for (let i = 0; i < bytes.length; i += 7) controller.enqueue(bytes.slice(i, i + 7));
        controller.close();
      },
    });
    return new Response(stream, { status, headers: { 'content-type': status === 200 ? 'text/event-stream' : 'application/json' } });
  }) as typeof fetch;
  return { fetcher, requests };
}

const token = (text: string, source: string) => ({ id: 1, text, source, p: 0.5, q: 0.4 });
const stats = { prompt_tokens: 5, cached_prompt_tokens: 0, generated_tokens: 2, prefill_ms: 1, decode_ms: 2, tokens_per_second: 9 };
/** The last chunk of a reply whose released text is `text`. */
const done = (text: string) => ({ choices: [{ delta: {}, finish_reason: 'stop' }], specula: { event: { kind: 'done', finish_reason: 'end_of_turn', text, stats } } });

describe('HTTP transport', () => {
  beforeEach(() => {
    localStorage.clear();
    sessionStorage.clear();
  });

  it('rewrites the stored history a few times a reply, not at every step', async () => {
    const step = { k: 3, accepted: 2, generated: 1, tokens_per_second: 8, speedup_vs_plain: null, acceptance_rate: 0.5 };
    const chunks = Array.from({ length: 300 }, (_, i) => [
      { choices: [{ delta: { content: 'x' }, finish_reason: null }], specula: { event: { kind: 'tokens', tokens: [token('x', 'accepted')] } } },
      { choices: [{ delta: {}, finish_reason: null }], specula: { event: { kind: 'step', step: { ...step, generated: i + 1 } } } },
    ]).flat();
    const body = sse([...chunks, done('x'.repeat(300))]);
    let writes = 0;
    const counting = new Proxy(localStorage, {
      get(target, name) {
        if (name === 'setItem') return (k: string, v: string) => (k.startsWith('specula.conversation.') && writes++, target.setItem(k, v));
        const value = Reflect.get(target, name);
        return typeof value === 'function' ? value.bind(target) : value;
      },
    });
    const backend = new HttpBackend('http://x', counting, fakeFetch(body).fetcher);
    const conversation = await backend.createConversation();
    await backend.addMessage(conversation.id, 'user', 'Go');
    const before = writes;
    const reply = await (await backend.reply(conversation.id, { ...DEFAULT_SETTINGS, target: 'target-model' }, () => {})).done;
    expect(reply.content).toBe('x'.repeat(300));
    expect(writes - before).toBeLessThanOrEqual(3);
    expect((await backend.conversation(conversation.id)).messages.at(-1)?.content).toBe('x'.repeat(300));
  });

  it('sends a chat\'s thinking choice, and an earlier reply\'s thinking apart from its answer', async () => {
    const reasoning = { tokens: 3, ended: true, ms: 900 };
    const thought = [token('<think>', 'target'), token('Hm.', 'target'), token('</think>', 'target'), token('\n\n', 'target'), token('Yes', 'target')];
    const body = sse([
      { choices: [{ delta: {}, finish_reason: null }], specula: { event: { kind: 'tokens', tokens: thought } } },
      { choices: [{ delta: {}, finish_reason: 'stop' }], specula: { event: { kind: 'done', finish_reason: 'end_of_turn', text: '', stats: { ...stats, reasoning } } } },
    ]);
    const { fetcher, requests } = fakeFetch(body);
    const backend = new HttpBackend('http://x', localStorage, fetcher);
    const conversation = await backend.createConversation();
    await backend.setThinking(conversation.id, false);
    await backend.addMessage(conversation.id, 'user', 'Sure?');
    await (await backend.reply(conversation.id, { ...DEFAULT_SETTINGS, target: 'target-model' }, () => {})).done;
    await backend.addMessage(conversation.id, 'user', 'Why?');
    await (await backend.reply(conversation.id, { ...DEFAULT_SETTINGS, target: 'target-model' }, () => {})).done;
    const sent = requests.filter((r) => r.url.endsWith('/v1/chat/completions')).map((r) => r.body as Record<string, unknown>);
    expect(sent[0].chat_template_kwargs).toEqual({ enable_thinking: false });
    expect((sent[1].messages as unknown[])[1]).toEqual({ role: 'assistant', content: 'Yes', reasoning_content: 'Hm.' });
    expect((await backend.conversation(conversation.id)).thinking).toBe(false);
  });

  it('streams a reply into events and stores it with its tokens and stats', async () => {
    const body = sse([
      { choices: [{ delta: { role: 'assistant', content: 'Hi' }, finish_reason: null }], specula: { event: { kind: 'tokens', tokens: [token('Hi', 'accepted')] } } },
      { choices: [{ delta: { content: '' }, finish_reason: null }], specula: { event: { kind: 'step', step: { k: 3, accepted: 1, generated: 1, tokens_per_second: 8, speedup_vs_plain: 1.2, acceptance_rate: 0.5 } } } },
      { choices: [{ delta: { content: '!' }, finish_reason: null }], specula: { event: { kind: 'tokens', tokens: [token('!', 'bonus')] } } },
      { choices: [{ delta: { content: '' }, finish_reason: null }], specula: { event: { kind: 'tool_call', name: 'from a newer server' } } },
      done('Hi!'),
    ]);
    const { fetcher, requests } = fakeFetch(body);
    const backend = new HttpBackend('http://x', localStorage, fetcher);
    const conversation = await backend.createConversation();
    await backend.setSystemPrompt(conversation.id, 'Be brief.');
    await backend.addMessage(conversation.id, 'user', 'Say hi');
    const events: ReplyEvent[] = [];
    const settings = { ...DEFAULT_SETTINGS, target: 'target-model', k: 4 as const, mode: 'greedy' as const };
    const handle = await backend.reply(conversation.id, settings, (e) => events.push(e));
    const reply = await handle.done;

    // The server's engine's events, unchanged; a kind this UI does not know passes harmlessly.
    expect(events.map((e) => e.kind)).toEqual(['tokens', 'step', 'tokens', 'tool_call', 'done']);
    expect(reply).toMatchObject({ role: 'assistant', content: 'Hi!', finish_reason: 'stop', stats });
    const sent = requests.find((r) => r.url.endsWith('/v1/chat/completions'))?.body as Record<string, unknown>;
    expect(sent).toMatchObject({
      model: 'target-model',
      stream: true,
      temperature: 0,
      messages: [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: 'Say hi' },
      ],
      speculative: { k: 4, mode: 'greedy', drafter: 'auto' },
    });
    const stored = await backend.conversation(conversation.id);
    expect(stored.title).toBe('Say hi');
    expect(stored.messages.at(-1)?.tokens?.map((t) => t.source)).toEqual(['accepted', 'bonus']);
  });

  it('turns an OpenAI error response into a BackendError event', async () => {
    const { fetcher } = fakeFetch(JSON.stringify({ error: { code: 'context_length_exceeded', message: 'too long' } }), 400);
    const backend = new HttpBackend('http://x', localStorage, fetcher);
    const c = await backend.createConversation();
    await backend.addMessage(c.id, 'user', 'x');
    const events: ReplyEvent[] = [];
    const reply = await (await backend.reply(c.id, DEFAULT_SETTINGS, (e) => events.push(e))).done;
    expect(events).toEqual([{ kind: 'failed', error: { code: 'context_length_exceeded', message: 'too long' } }]);
    expect(reply.finish_reason).toBe('error');
  });

  it('refuses the draft model when the server has none', async () => {
    const backend = new HttpBackend('http://x', localStorage, (async () =>
      new Response(JSON.stringify({ ...health, draft: null, drafter: 'none' }))) as typeof fetch);
    await expect(backend.applyModels({ ...DEFAULT_SETTINGS, drafter: 'model' })).rejects.toMatchObject({ code: 'invalid_setting' });
    // The default drafter, auto, stands: the engine decides what it drafts with (copies alone here).
    expect((await backend.settings()).drafter).toBe('auto');
  });

  it('keeps, renames, searches, branches, forks and deletes conversations, undoably', async () => {
    const backend = new HttpBackend('http://x', localStorage, fakeFetch('').fetcher);
    const a = await backend.createConversation();
    const b = await backend.createConversation();
    await backend.addMessage(a.id, 'user', 'about rust lifetimes');
    const second = await backend.addMessage(a.id, 'assistant', 'sure');
    await backend.addMessage(a.id, 'user', 'more');
    await backend.renameConversation(b.id, 'Recipes');
    expect((await backend.conversations('rust')).map((c) => c.id)).toEqual([a.id]);
    expect((await backend.conversations('recipes')).map((c) => c.id)).toEqual([b.id]);
    const texts = async () => (await backend.conversation(a.id)).messages.map((m) => m.content);
    // Regenerate: the new reply is a sibling of the old one, which stays.
    await backend.branchBefore(a.id, second.id);
    expect(await texts()).toEqual(['about rust lifetimes']);
    const again = await backend.addMessage(a.id, 'assistant', 'sure, again');
    const shown = await backend.conversation(a.id);
    expect(shown.messages[1].siblings).toEqual([second.id, again.id]);
    expect((await backend.showBranch(a.id, second.id)).messages.map((m) => m.content)).toEqual(['about rust lifetimes', 'sure', 'more']);
    // A fork copies the branch up to a message; the original keeps all of it.
    const fork = await backend.fork(a.id, second.id);
    expect([fork.title, fork.messages.map((m) => m.content)]).toEqual(['about rust lifetimes (fork)', ['about rust lifetimes', 'sure']]);
    // Deletes are undoable until purged.
    await backend.deleteMessage(a.id, second.id);
    expect(await texts()).toEqual(['about rust lifetimes', 'sure, again']);
    await backend.restoreMessage(a.id, second.id);
    expect(await texts()).toEqual(['about rust lifetimes', 'sure', 'more']);
    await backend.deleteConversation(b.id);
    expect((await backend.conversations()).map((c) => c.id)).not.toContain(b.id);
    await backend.restoreConversation(b.id);
    expect((await backend.conversations()).map((c) => c.id)).toContain(b.id);
    await backend.deleteConversation(b.id);
    await backend.purgeDeleted();
    await expect(backend.restoreConversation(b.id)).rejects.toMatchObject({ code: 'not_found' });
    await expect(backend.conversation(b.id)).rejects.toMatchObject({ code: 'not_found' });
  });
});

describe('SSE framing', () => {
  it('splits complete events and keeps the rest', () => {
    expect(splitSse('data: a\n\ndata: b\r\n\r\ndata: par')).toEqual({ events: ['a', 'b'], rest: 'data: par' });
    expect(splitSse(': keep-alive\n\n')).toEqual({ events: [], rest: '' });
  });

  it('reads a 503 health as a status with the reason, not as a failure to connect', async () => {
    const failed = { status: 'unavailable', state: 'failed', pending: 0, model: 'm', draft: null, drafter: 'none', error: { code: 'io', message: 'm.gguf: no such file' } };
    const fetcher = (async () => new Response(JSON.stringify(failed), { status: 503 })) as unknown as typeof fetch;
    const status = await new HttpBackend('http://x', localStorage, fetcher).status();
    expect(status).toMatchObject({ state: 'failed', target: null, error: { code: 'io' } });
    const broken = (async () => new Response('gateway down', { status: 503, statusText: 'Service Unavailable' })) as unknown as typeof fetch;
    await expect(new HttpBackend('http://x', localStorage, broken).status()).rejects.toMatchObject({ code: 'http_503' });
  });

  it('sends the API key, once set, with every request', async () => {
    const body = sse([done('')]);
    const { fetcher, requests } = fakeFetch(body);
    const backend = new HttpBackend('http://x', localStorage, fetcher);
    await backend.status();
    expect(requests[0].headers.get('authorization')).toBeNull();
    backend.setApiKey('s3cret');
    const conversation = await backend.createConversation();
    await backend.addMessage(conversation.id, 'user', 'hi');
    await (await backend.reply(conversation.id, { ...DEFAULT_SETTINGS, target: 'target-model' }, () => {})).done;
    expect(requests.slice(1).map((r) => r.headers.get('authorization'))).toEqual(['Bearer s3cret']);
    await backend.status();
    expect(requests.at(-1)?.headers.get('authorization')).toBe('Bearer s3cret');
  });
});

describe('what the browser keeps', () => {
  beforeEach(() => {
    localStorage.clear();
    sessionStorage.clear();
  });

  it('keeps the API key for the session only, and moves an old one out of localStorage', () => {
    localStorage.setItem('specula.apiKey', 'old-key');
    const backend = new HttpBackend('http://x', localStorage, fakeFetch('').fetcher, sessionStorage);
    expect(localStorage.getItem('specula.apiKey')).toBeNull();
    expect(backend.apiKey()).toBe('old-key');
    backend.setApiKey('new-key');
    expect(sessionStorage.getItem('specula.apiKey')).toBe('new-key');
    expect(Object.keys(localStorage).filter((k) => k.includes('apiKey'))).toEqual([]);
  });

  it('keeps each conversation under a key of its own, and splits an old single-key history', async () => {
    const old = [
      { id: 1, title: 'First', system_prompt: '', messages: [{ id: 1, role: 'user', content: 'one' }], updated_at: 1 },
      { id: 2, title: 'Second', system_prompt: '', messages: [], updated_at: 2 },
    ];
    localStorage.setItem('specula.conversations', JSON.stringify(old));
    const backend = new HttpBackend('http://x', localStorage, fakeFetch('').fetcher);
    expect((await backend.conversations()).map((c) => c.title)).toEqual(['Second', 'First']);
    expect(localStorage.getItem('specula.conversations')).toBeNull();
    expect(JSON.parse(localStorage.getItem('specula.conversation.1')!).messages[0].content).toBe('one');
    // A new page reads them back.
    const again = new HttpBackend('http://x', localStorage, fakeFetch('').fetcher);
    expect((await again.conversation(1)).messages[0].content).toBe('one');
  });

  it('a reply the browser refuses to store stays on screen, and the refusal is told', async () => {
    const body = sse([
      { choices: [{ delta: { content: 'kept' }, finish_reason: null }], specula: { event: { kind: 'tokens', tokens: [token('kept', 'accepted')] } } },
      done('kept'),
    ]);
    let full = false;
    const quota = new Proxy(localStorage, {
      get(target, name) {
        if (name === 'setItem')
          return (k: string, v: string) => {
            if (full) throw new DOMException('The quota has been exceeded.', 'QuotaExceededError');
            target.setItem(k, v);
          };
        const value = Reflect.get(target, name);
        return typeof value === 'function' ? value.bind(target) : value;
      },
    });
    const backend = new HttpBackend('http://x', quota, fakeFetch(body).fetcher);
    const conversation = await backend.createConversation();
    await backend.addMessage(conversation.id, 'user', 'Go');
    full = true;
    const handle = await backend.reply(conversation.id, { ...DEFAULT_SETTINGS, target: 'target-model' }, () => {});
    await expect(handle.done).rejects.toMatchObject({ code: 'storage_full' });
    expect((await backend.conversation(conversation.id)).messages.at(-1)?.content).toBe('kept');
  });
});
