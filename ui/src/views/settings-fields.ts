// The plain fields of the settings dialog, as one table: each is a `Settings` key edited by the
// form control of the same name. The dialog draws the controls from it and reads and writes
// them all alike. The model pickers (target, draft and copies) need the model list and the
// drafts' compatibility, and are the dialog's own (model-pickers.ts).

import type { KvFormat, Mode, Overflow, Settings } from '../api/types';
import { option } from './dom';

export type FieldKey =
  | 'k'
  | 'mode'
  | 'temperature'
  | 'top_p'
  | 'top_k'
  | 'seed'
  | 'max_tokens'
  | 'context_tokens'
  | 'kv_format'
  | 'overflow'
  | 'device'
  | 'cache_mb';

/** A `select`, or an `<input type=…>` of this kind. */
export type ControlKind = 'select' | 'number' | 'range' | 'text';

/** Which targets a field applies to: any; local models only (a remote engine drafts, or not,
 *  as it was started); or how local models are loaded, which only a window that loads models
 *  (the app) can change: a browser's server was started with its own. */
export type Applies = 'any' | 'local' | 'load';

interface FieldOf<K extends FieldKey> {
  /** The `Settings` key, and the control's name. */
  key: K;
  /** The text beside the control. */
  label: string;
  /** What an empty control means (its placeholder). */
  help?: string;
  kind: ControlKind;
  /** A select's choices: value and text. */
  options?: readonly (readonly [string, string])[];
  /** A number's bounds and step: the browser refuses to submit a value outside them. */
  range?: { min: number; max?: number; step: number };
  applies: Applies;
  /** The control's text as the setting. (The other way is the same for every field: the
   *  value as `String` writes it, none as an empty control.) */
  read(text: string): Settings[K];
}

export type Field = { [K in FieldKey]: FieldOf<K> }[FieldKey];

/** A number input's text as `Number` reads it: an empty box (no field is `required`) is 0. */
const number = (text: string) => Number(text);

/** A number input whose empty box means "none" (automatic, or a fresh seed each reply). */
const numberOrNone = (text: string) => (text.trim() === '' ? null : Number(text));

const K_CHOICES: readonly (readonly [string, string])[] = [
  ['auto', 'auto (measured)'],
  ...Array.from({ length: 16 }, (_, i): [string, string] => [String(i + 1), String(i + 1)]),
];

/** In the order the form shows them (and the order `Settings` lists them). */
export const FIELDS: readonly Field[] = [
  {
    key: 'k',
    label: 'k',
    kind: 'select',
    options: K_CHOICES,
    applies: 'local',
    read: (text) => (text === 'auto' ? 'auto' : Number(text)),
  },
  {
    key: 'mode',
    label: 'Mode',
    kind: 'select',
    options: [
      ['reproducible', 'reproducible (seeded)'],
      ['sample', 'sample'],
      ['greedy', 'greedy'],
    ],
    applies: 'any',
    read: (text) => text as Mode,
  },
  {
    key: 'temperature',
    label: 'Temperature',
    kind: 'number',
    range: { min: 0, max: 5, step: 0.05 },
    applies: 'any',
    read: number,
  },
  {
    key: 'top_p',
    label: 'Top-p',
    kind: 'number',
    range: { min: 0.01, max: 1, step: 0.01 },
    applies: 'any',
    read: number,
  },
  {
    key: 'top_k',
    label: 'Top-k',
    kind: 'number',
    range: { min: 0, step: 1 },
    applies: 'any',
    read: number,
  },
  {
    key: 'seed',
    label: 'Seed',
    help: 'new each reply',
    kind: 'number',
    range: { min: 0, step: 1 },
    applies: 'any',
    // No seed: a fresh one each reply, so Regenerate gives another.
    read: numberOrNone,
  },
  {
    key: 'max_tokens',
    label: 'Max tokens',
    kind: 'number',
    range: { min: 1, max: 32768, step: 1 },
    applies: 'any',
    read: number,
  },
  {
    key: 'context_tokens',
    label: 'Context',
    help: 'automatic',
    kind: 'number',
    range: { min: 256, max: 131072, step: 256 },
    applies: 'load',
    // Empty: the model's trained context, capped by the memory free beside it.
    read: numberOrNone,
  },
  {
    key: 'kv_format',
    label: 'Keys and values',
    kind: 'select',
    options: [
      ['f16', 'f16 (half the memory)'],
      ['q8_0', 'q8_0 (about a quarter; CPU only)'],
      ['f32', 'f32'],
    ],
    applies: 'load',
    read: (text) => text as KvFormat,
  },
  {
    key: 'overflow',
    label: 'When the chat outgrows the context',
    kind: 'select',
    options: [
      ['truncate-middle', 'drop middle turns'],
      ['rolling', 'drop oldest turns'],
      ['stop', 'stop with an error'],
    ],
    applies: 'any',
    read: (text) => text as Overflow,
  },
  {
    key: 'device',
    label: 'Device',
    kind: 'select',
    options: ['auto', 'cpu', 'cuda', 'metal'].map((d) => [d, d] as const),
    applies: 'load',
    read: (text) => text,
  },
  {
    key: 'cache_mb',
    label: 'Chat cache (MiB)',
    help: 'automatic',
    kind: 'number',
    range: { min: 0, step: 64 },
    applies: 'load',
    // Empty: a quarter of the free memory, at most 8 GiB; 0 keeps only the open chat's.
    read: numberOrNone,
  },
];

/** A field and the control drawn for it. */
export type FieldControl = readonly [Field, HTMLInputElement | HTMLSelectElement];

/** Draw each field into `grid` (its `<label>` with the control inside, as the form shows it),
 *  and hand back the controls: the dialog keeps them, and never looks them up again. */
export function drawFields(grid: HTMLElement): FieldControl[] {
  return FIELDS.map((field) => {
    const control = field.kind === 'select' ? selectOf(field) : inputOf(field);
    const label = document.createElement('label');
    label.append(`${field.label} `, control);
    grid.append(label);
    return [field, control] as const;
  });
}

function selectOf(field: Field): HTMLSelectElement {
  const select = document.createElement('select');
  select.name = field.key;
  select.append(...(field.options ?? []).map(([value, text]) => option(value, text)));
  return select;
}

function inputOf(field: Field): HTMLInputElement {
  const input = document.createElement('input');
  input.name = field.key;
  input.type = field.kind;
  if (field.range) {
    input.min = String(field.range.min);
    if (field.range.max !== undefined) input.max = String(field.range.max);
    input.step = String(field.range.step);
  }
  if (field.help) input.placeholder = field.help;
  return input;
}

/** `base` with every field as its control says. */
export function readFields(controls: readonly FieldControl[], base: Settings): Settings {
  const next = { ...base };
  for (const [field, control] of controls) readField(next, field, control.value);
  return next;
}

/** Every field's control set to what `settings` says. */
export function writeFields(controls: readonly FieldControl[], settings: Settings): void {
  for (const [field, control] of controls) control.value = String(settings[field.key] ?? '');
}

function readField<K extends FieldKey>(into: Settings, field: FieldOf<K>, text: string): void {
  into[field.key] = field.read(text);
}
