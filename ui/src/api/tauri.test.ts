import { describe, expect, it, vi } from 'vitest';
import type { ReplyEvent } from './types';

// The Tauri core module, replaced by a fake shell that answers `reply` after it has already
// streamed its first events: the transport must not lose them.
const invoked: { command: string; args?: Record<string, unknown> }[] = [];
vi.mock('@tauri-apps/api/core', () => {
  class Channel<T> {
    onmessage: (m: T) => void = () => {};
  }
  return {
    Channel,
    invoke: async (command: string, args?: Record<string, unknown>) => {
      invoked.push({ command, args });
      if (command === 'reply') {
        const channel = args?.onEvent as Channel<ReplyEvent>;
        const token = (text: string) => ({ id: 1, text, source: 'accepted' as const, p: 0.9, q: 0.8 });
        const step = { k: 4, accepted: 1, generated: 2, tokens_per_second: 9, speedup_vs_plain: null, plain_ms_per_token: null, plain_steps: 0, acceptance_rate: 0.5 };
        const stats = { prompt_tokens: 1, cached_prompt_tokens: 0, generated_tokens: 2, prefill_ms: 1, decode_ms: 1, tokens_per_second: 1 };
        channel.onmessage({ kind: 'started', request_id: 7, prompt_tokens: 1, decoding: { drafter: 'model', k: 'auto' }, seed: 0 });
        channel.onmessage({ kind: 'tokens', tokens: [token('Hi'), token('!')] });
        channel.onmessage({ kind: 'step', step });
        setTimeout(() => channel.onmessage({ kind: 'done', finish_reason: 'end_of_turn', text: 'Hi!', stats }));
        return { request_id: 7, message: { id: 3, role: 'assistant', content: '' } };
      }
      if (command === 'get_conversation') throw { code: 'not_found', message: 'No conversation 9' };
      return null;
    },
  };
});

describe('Tauri transport', () => {
  it('keeps events that arrive before the command answers, and cancels by request id', async () => {
    const { TauriBackend } = await import('./tauri');
    const { DEFAULT_SETTINGS } = await import('./types');
    const backend = new TauriBackend();
    const seen: string[] = [];
    const handle = await backend.reply(1, DEFAULT_SETTINGS, (e) => seen.push(e.kind));
    const reply = await handle.done;
    expect(reply).toMatchObject({ id: 3, content: 'Hi!', finish_reason: 'stop' });
    // The engine's events, in its order and its shape; the end named as the history names it.
    expect(seen).toEqual(['started', 'tokens', 'step', 'done']);
    await handle.cancel();
    expect(invoked.at(-1)).toEqual({ command: 'cancel_reply', args: { requestId: 7 } });
  });

  it('passes the shell errors through as BackendErrors', async () => {
    const { TauriBackend } = await import('./tauri');
    await expect(new TauriBackend().conversation(9)).rejects.toEqual({ code: 'not_found', message: 'No conversation 9' });
  });
});
