// The settings dialog's model pickers: the target (local models, and each remote engine's
// models in a group of its own) and the draft (plain decoding, prompt lookup, or a model that
// can pair with the target), with "also copy" beside a draft model.

import { remoteHost, remoteModelName } from '../api/label';
import type { Connection, ModelEntry, RemoteTarget, Settings } from '../api/types';
import { option } from './dom';

/** "Qwen2.5-Coder-1.5B-Instruct · Q4_K_M · 1066 MiB" */
export function modelLabel(m: ModelEntry): string {
  const size = m.file_bytes ? ` · ${(m.file_bytes / 2 ** 20).toFixed(0)} MiB` : '';
  const quant = m.quantization ? ` · ${m.quantization}` : '';
  return `${m.name}${quant}${size}`;
}

/** A remote model as a value of the target picker, beside local paths: "remote:" and the JSON
 *  of its address and model (end-to-end tests pick remote targets by that prefix). */
export function remoteValue(target: RemoteTarget): string {
  return `remote:${JSON.stringify([target.base_url, target.model])}`;
}

/** A draft model as a value of the draft picker, beside "none" and "lookup". */
const MODEL_PREFIX = 'model:';

export class TargetPicker {
  /** The remote models among the options, by option value: a value is never parsed back. */
  private remotes = new Map<string, RemoteTarget>();

  constructor(readonly select: HTMLSelectElement) {}

  /** Offer `models` (where the window can choose its target) and the connections' models, and
   *  choose what `s` names: its remote, else its target, offered even when nothing lists it. */
  fill(models: ModelEntry[], connections: Connection[], s: Settings, canChooseTarget: boolean): void {
    const select = this.select;
    this.remotes = new Map();
    const runnable = canChooseTarget ? models.filter((m) => m.runnable !== false) : [];
    select.replaceChildren(...runnable.map((m) => option(m.path, modelLabel(m))));
    if (![...select.options].some((o) => o.value === s.target)) select.append(option(s.target, s.target));
    for (const c of connections) {
      const group = document.createElement('optgroup');
      group.label = `Remote: ${c.base_url}`;
      group.append(...c.models.map((model) => this.remoteOption({ base_url: c.base_url, model })));
      select.append(group);
    }
    select.value = s.remote ? remoteValue(s.remote) : s.target;
    if (select.selectedIndex < 0 && s.remote) select.append(this.remoteOption(s.remote));
    select.value = s.remote ? remoteValue(s.remote) : s.target;
    select.disabled = !canChooseTarget;
  }

  /** The chosen remote model, or null for a local target. */
  get remote(): RemoteTarget | null {
    return this.remotes.get(this.select.value) ?? null;
  }

  get value(): string {
    return this.select.value;
  }

  private remoteOption(target: RemoteTarget): HTMLOptionElement {
    const value = remoteValue(target);
    this.remotes.set(value, target);
    return option(value, `${remoteModelName(target.model)} @ ${remoteHost(target.base_url)}`);
  }
}

export interface DraftParts {
  select: HTMLSelectElement;
  copies: HTMLInputElement;
  /** Why some drafts are greyed out, or why none apply. */
  note: HTMLElement;
}

export class DraftPicker {
  constructor(readonly parts: DraftParts) {}

  /** The draft choices for `target`: only compatible models can be picked; the others say why.
   *  `chosen` is a picker value; one that cannot be picked falls back to none. */
  fill(models: ModelEntry[], target: string, chosen: string): void {
    const { select, note } = this.parts;
    select.replaceChildren(option('none', 'None (plain decoding)'), option('lookup', 'Prompt lookup (n-grams from the chat)'));
    const refused: string[] = [];
    for (const m of models.filter((m) => m.path !== target)) {
      const o = option(MODEL_PREFIX + m.path, modelLabel(m));
      if (m.runnable === false || m.compatible === false) {
        o.disabled = true;
        o.textContent += ' (cannot draft)';
        refused.push(`${m.name}: ${m.reason ?? 'incompatible'}`);
      }
      select.append(o);
    }
    select.value = chosen;
    if (select.selectedIndex < 0 || select.selectedOptions[0]?.disabled) select.value = 'none';
    note.textContent = refused.length ? `Greyed-out drafts cannot pair with this target. ${refused.join(' · ')}` : '';
  }

  /** Fill for `s`'s own choice of drafter and draft. */
  fillFor(models: ModelEntry[], s: Settings): void {
    const withModel = s.drafter === 'model' || s.drafter === 'auto';
    this.fill(models, s.target, withModel ? MODEL_PREFIX + s.draft : s.drafter);
    this.parts.copies.checked = s.drafter === 'auto';
  }

  /** A remote target drafts (or not) as it was started: the local drafting choices are greyed
   *  out. Copies ride beside a draft model; prompt lookup already is copying, and none drafts
   *  nothing. */
  applyTarget(remote: boolean): void {
    const { select, copies, note } = this.parts;
    select.disabled = remote;
    copies.disabled = remote || !this.withModel;
    if (remote) {
      note.textContent = 'A remote engine drafts (or not) as it was started: draft, k, context and device apply to local models.';
    }
  }

  /** Whether a draft model is chosen. */
  get withModel(): boolean {
    return this.parts.select.value.startsWith(MODEL_PREFIX);
  }

  /** The drafter and draft chosen; a drafter without a model keeps `base`'s draft, to switch back. */
  read(base: Settings): Pick<Settings, 'drafter' | 'draft'> {
    const value = this.parts.select.value;
    if (!this.withModel) return { drafter: value as Settings['drafter'], draft: base.draft };
    return { drafter: this.parts.copies.checked ? 'auto' : 'model', draft: value.slice(MODEL_PREFIX.length) };
  }
}
