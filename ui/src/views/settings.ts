// The settings dialog: the model pickers, then the plain fields drawn from their table
// (settings-fields.ts), and the server's API key where the transport asks for one. Save loads
// what changed and keeps it; a refusal is said in the dialog, which stays open.

import type { Backend } from '../api/backend';
import type { Connection, ModelEntry, Settings } from '../api/types';
import { toBackendError } from '../api/types';
import { $in, control } from './dom';
import { DraftPicker, TargetPicker } from './model-pickers';
import { drawFields, readFields, writeFields, type FieldControl } from './settings-fields';

export interface SettingsParts {
  dialog: HTMLDialogElement;
  form: HTMLFormElement;
  /** Where the plain fields are drawn. */
  grid: HTMLElement;
  draftNote: HTMLElement;
  apiKeyField: HTMLElement;
  error: HTMLElement;
  cancel: HTMLButtonElement;
  save: HTMLButtonElement;
}

export function settingsParts(dialog: HTMLDialogElement): SettingsParts {
  const form = $in<HTMLFormElement>(dialog, '#settings-form');
  return {
    dialog,
    form,
    grid: $in(form, '.grid'),
    draftNote: $in(form, '#draft-note'),
    apiKeyField: $in(form, '#api-key-field'),
    error: $in(form, '#settings-error'),
    cancel: $in<HTMLButtonElement>(form, '#settings-cancel'),
    save: $in<HTMLButtonElement>(form, '#settings-save'),
  };
}

/** What the dialog asks of the rest of the app. */
export interface SettingsHost extends Pick<Backend, 'canChooseTarget' | 'apiKey' | 'setApiKey'> {
  /** The settings in use: what the dialog opens on, and what it saves on top of. */
  current(): Settings;
  /** The models on offer for `target`, each saying whether it can draft for it. */
  models(target: string): Promise<ModelEntry[]>;
  /** The remembered remote engines. */
  connections(): Promise<Connection[]>;
  /** Load and keep `next`; a rejection is shown in the dialog. */
  save(next: Settings): Promise<void>;
}

export class SettingsDialog {
  private readonly fields: FieldControl[];
  private readonly target: TargetPicker;
  private readonly draft: DraftPicker;
  private readonly apiKey: HTMLInputElement;

  constructor(
    private readonly parts: SettingsParts,
    private readonly host: SettingsHost,
  ) {
    const form = parts.form;
    this.fields = drawFields(parts.grid);
    this.target = new TargetPicker(control<HTMLSelectElement>(form, 'target'));
    this.draft = new DraftPicker({
      select: control<HTMLSelectElement>(form, 'draft'),
      copies: control(form, 'copies'),
      note: parts.draftNote,
    });
    this.apiKey = control(form, 'api_key');
    this.target.select.addEventListener('change', () => this.targetChanged());
    this.draft.parts.select.addEventListener('change', () => this.applyTarget());
    parts.cancel.addEventListener('click', () => parts.dialog.close());
    // The browser refuses a value out of its field's range before this is sent.
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      void this.save();
    });
  }

  /** Fill the form from the settings in use and show it. */
  async open(): Promise<void> {
    this.parts.error.textContent = '';
    const s = this.host.current();
    const models = await this.host.models(s.target);
    const connections = await this.host.connections();
    this.target.fill(models, connections, s, this.host.canChooseTarget);
    this.draft.fillFor(models, s);
    writeFields(this.fields, s);
    this.applyTarget();
    this.parts.apiKeyField.hidden = !this.host.apiKey;
    this.apiKey.value = this.host.apiKey?.() ?? '';
    this.parts.dialog.showModal();
  }

  /** The settings in use, changed as the form says. */
  read(): Settings {
    const base = this.host.current();
    const remote = this.target.remote;
    const models = { ...base, target: remote ? base.target : this.target.value, remote, ...this.draft.read(base) };
    return readFields(this.fields, models);
  }

  private async save(): Promise<void> {
    const next = this.read();
    const { error, save, dialog } = this.parts;
    error.textContent = '';
    save.disabled = true;
    save.textContent = 'Loading…';
    try {
      this.host.setApiKey?.(this.apiKey.value.trim());
      await this.host.save(next);
      dialog.close();
    } catch (e) {
      error.textContent = toBackendError(e).message;
    } finally {
      save.disabled = false;
      save.textContent = 'Save';
    }
  }

  /** A local target offers the drafts that can pair with it; a remote one needs none. */
  private targetChanged(): void {
    if (this.target.remote) {
      this.applyTarget();
      return;
    }
    void this.host.models(this.target.value).then((models) => {
      this.draft.fill(models, this.target.value, 'none');
      this.applyTarget();
    });
  }

  /** Grey out what the chosen target ignores: local-only fields for a remote one, and how
   *  models load where this window does not load them. */
  private applyTarget(): void {
    const remote = this.target.remote !== null;
    const off = { any: false, local: remote, load: remote || !this.host.canChooseTarget };
    for (const [field, control] of this.fields) control.disabled = off[field.applies];
    this.draft.applyTarget(remote);
  }
}
