import type { Settings } from './types';

/** How a reply was made, stored with it: "draft model · k auto · greedy", or with the seed when
 *  it sampled ("· sample · seed 7"). The shell writes the same (`AppSettings::label` in
 *  crates/protocol); label.test.ts checks both agree on the cases it exports. */
export function replyLabel(s: Settings): string {
  const drafters: Record<Settings['drafter'], string> = {
    none: 'plain',
    lookup: 'prompt lookup',
    model: 'draft model',
    auto: 'draft model + copies',
  };
  const seed = s.mode !== 'greedy' && s.seed != null ? ` · seed ${s.seed}` : '';
  if (s.remote) return `remote ${remoteModelName(s.remote.model)} @ ${remoteHost(s.remote.base_url)} · ${s.mode}${seed}`;
  const drafter = drafters[s.drafter];
  const k = s.drafter === 'none' ? '' : ` · k ${s.k}`;
  return `${drafter}${k} · ${s.mode}${seed}`;
}

/** The host (and port) a connection's URL names: "gpu-box:8080" (`RemoteTarget::host`). */
export function remoteHost(baseUrl: string): string {
  const rest = baseUrl.includes('://') ? baseUrl.slice(baseUrl.indexOf('://') + 3) : baseUrl;
  return rest.split('/')[0];
}

/** A remote model as people name it: a path's file without ".gguf" (llama-server lists its
 *  model by the path it loaded), any other id whole (`RemoteTarget::model_name`). */
export function remoteModelName(model: string): string {
  if (!/[/\\]/.test(model)) return model;
  const file = model.split(/[/\\]/).pop() ?? model;
  return file.endsWith('.gguf') ? file.slice(0, -'.gguf'.length) : model;
}
