import { describe, expect, it } from 'vitest';
import type { EngineStatus } from '../api/types';
import { DEFAULT_SETTINGS } from '../api/types';
import { engineStatusText } from './engine-status';

const ready: EngineStatus = { state: 'ready', target: '/m/qwen-1.5b.gguf', draft: '/m/qwen-0.5b.gguf', device: 'cpu', loading: false };
const settings = { ...DEFAULT_SETTINGS, drafter: 'auto' as const, k: 'auto' as const };

describe('the engine status line', () => {
  it('says what replies will get, or what stops them', () => {
    expect(engineStatusText(ready, settings, true)).toBe('target qwen-1.5b · draft qwen-0.5b + copies · k auto · cpu');
    expect(engineStatusText(ready, { ...settings, drafter: 'lookup', k: 3 }, true)).toBe('target qwen-1.5b · draft prompt lookup · k 3 · cpu');
    // A browser's replies get the server's drafter.
    expect(engineStatusText({ ...ready, drafter: 'none' }, settings, false)).toBe('target qwen-1.5b · draft none · k auto · cpu');
    const context = { tokens: 32768, trained: 32768, kv_format: 'f16' as const };
    expect(engineStatusText({ ...ready, context }, settings, true)).toBe(
      'target qwen-1.5b · draft qwen-0.5b + copies · k auto · context 32,768 f16 · cpu',
    );
    expect(engineStatusText({ ...ready, loading: true }, settings, true)).toBe('loading models…');
    expect(engineStatusText({ ...ready, target: null }, settings, true)).toBe('no model loaded: choose one in Settings');
    const remote = { ...settings, remote: { base_url: 'http://gpu:8080/v1', model: 'qwen-32b' } };
    expect(engineStatusText({ ...ready, target: null, device: 'remote, 12 ms round trip' }, remote, true)).toBe(
      "target qwen-32b · draft: the remote's · remote, 12 ms round trip",
    );
  });
});
