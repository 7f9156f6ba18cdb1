// The engine's line at the foot of the sidebar: what is loaded and what replies will get.

import type { EngineStatus, Settings } from '../api/types';

/** A model path as people name it: its file without ".gguf". */
const modelName = (path: string | null) => (path ? (path.split('/').pop() ?? path).replace(/\.gguf$/, '') : 'none');

/** "target qwen2.5-coder-1.5b · draft qwen2.5-coder-0.5b + copies · k auto · cpu", or what stops it. */
export function engineStatusText(status: EngineStatus, settings: Settings, canChooseTarget: boolean): string {
  // Replies carry the user's own drafter; the status shows what they will get.
  const chosen = canChooseTarget ? settings.drafter : (status.drafter ?? settings.drafter);
  const drafters: Record<Settings['drafter'], string> = {
    none: 'none',
    lookup: 'prompt lookup',
    model: modelName(status.draft),
    auto: status.draft ? `${modelName(status.draft)} + copies` : 'copies',
  };
  const drafter = drafters[chosen];
  if (settings.remote) return `target ${status.target ?? settings.remote.model} · draft: the remote's · ${status.device}`;
  if (status.loading) return 'loading models…';
  if (!status.target) return `no model loaded${status.error ? '' : ': choose one in Settings'}`;
  const device = status.device ? ` · ${status.device}` : '';
  const context = status.context ? ` · context ${status.context.tokens.toLocaleString('en-US')} ${status.context.kv_format}` : '';
  return `target ${modelName(status.target)} · draft ${drafter} · k ${settings.k}${context}${device}`;
}

export class EngineStatusView {
  constructor(private readonly root: HTMLElement) {}

  show(status: EngineStatus, settings: Settings, canChooseTarget: boolean): void {
    this.root.dataset.state = status.state ?? (status.loading ? 'loading' : 'ready');
    this.root.textContent = engineStatusText(status, settings, canChooseTarget);
  }
}
