import { beforeEach, describe, expect, it } from 'vitest';
import type { Connection, ModelEntry, Settings } from '../api/types';
import { DEFAULT_SETTINGS } from '../api/types';
import { $, loadPage, settle } from '../testing/page';
import indexHtml from '../../index.html?raw';
import { remoteValue } from './model-pickers';
import { SettingsDialog, settingsParts, type SettingsHost } from './settings';
import { FIELDS } from './settings-fields';

const model = (path: string, over: Partial<ModelEntry> = {}): ModelEntry => ({
  path, name: path.split('/').pop()!.replace('.gguf', ''), architecture: 'qwen2', parameters: 1e9, quantization: 'Q4_K_M',
  file_bytes: 2 ** 30, runnable: true, compatible: true, ...over,
});

const MODELS = [
  model('/m/target.gguf'),
  model('/m/draft.gguf'),
  model('/m/other.gguf', { compatible: false, reason: 'another vocabulary' }),
];

const odd = { base_url: 'http://h:1/v1', model: 'org/model "q4"|x' };
const CONNECTIONS: Connection[] = [{ base_url: odd.base_url, has_key: false, models: ['plain', odd.model], kind: 'open_ai' }];

const local: Settings = {
  ...DEFAULT_SETTINGS,
  target: '/m/target.gguf',
  draft: '/m/draft.gguf',
  drafter: 'auto',
  k: 4,
  mode: 'greedy',
  temperature: 0.3,
  top_p: 0.9,
  top_k: 20,
  seed: 7,
  max_tokens: 64,
  context_tokens: 2048,
  kv_format: 'f32',
  overflow: 'rolling',
  device: 'cpu',
  remote: null,
};

function dialog(over: Partial<SettingsHost> = {}) {
  const state = { current: local, saved: [] as Settings[], asked: [] as string[] };
  const host: SettingsHost = {
    canChooseTarget: true,
    current: () => state.current,
    models: async (target) => {
      state.asked.push(target);
      return MODELS;
    },
    connections: async () => CONNECTIONS,
    save: async (next) => void state.saved.push(next),
    ...over,
  };
  const view = new SettingsDialog(settingsParts($<HTMLDialogElement>('#settings-dialog')), host);
  const field = <T extends HTMLElement = HTMLInputElement>(name: string) => $<T>(`#settings-form [name="${name}"]`);
  const save = async () => {
    $<HTMLButtonElement>('#settings-save').click();
    await settle();
  };
  return { view, state, field, save, open: () => $<HTMLDialogElement>('#settings-dialog').open };
}

/** The grid as index.html wrote it by hand, before the table. */
const HAND_WRITTEN = `
  <label>k <select name="k"></select></label>
  <label>Mode
    <select name="mode">
      <option value="reproducible">reproducible (seeded)</option>
      <option value="sample">sample</option>
      <option value="greedy">greedy</option>
    </select>
  </label>
  <label>Temperature <input name="temperature" type="number" min="0" max="5" step="0.05" /></label>
  <label>Top-p <input name="top_p" type="number" min="0.01" max="1" step="0.01" /></label>
  <label>Top-k <input name="top_k" type="number" min="0" step="1" /></label>
  <label>Seed <input name="seed" type="number" min="0" step="1" placeholder="new each reply" /></label>
  <label>Max tokens <input name="max_tokens" type="number" min="1" max="32768" step="1" /></label>
  <label>Context <input name="context_tokens" type="number" min="256" max="131072" step="256" placeholder="automatic" /></label>
  <label>Keys and values
    <select name="kv_format">
      <option value="f16">f16 (half the memory)</option>
      <option value="q8_0">q8_0 (about a quarter; CPU only)</option>
      <option value="f32">f32</option>
    </select>
  </label>
  <label>When the chat outgrows the context
    <select name="overflow">
      <option value="truncate-middle">drop middle turns</option>
      <option value="rolling">drop oldest turns</option>
      <option value="stop">stop with an error</option>
    </select>
  </label>
  <label>Device
    <select name="device">
      <option value="auto">auto</option>
      <option value="cpu">cpu</option>
      <option value="cuda">cuda</option>
      <option value="metal">metal</option>
    </select>
  </label>
  <label>Chat cache (MiB) <input name="cache_mb" type="number" min="0" step="64" placeholder="automatic" /></label>`;

const squeeze = (html: string) => html.replace(/>\s+</g, '><').replace(/\s+/g, ' ').replace(/ </g, '<').trim();

describe('the settings dialog', () => {
  beforeEach(() => loadPage(indexHtml));

  it('draws the plain fields from the table as index.html had them', () => {
    dialog();
    const grid = $('#settings-form .grid');
    const kOptions = '<option value="auto">auto (measured)</option>' + Array.from({ length: 16 }, (_, i) => `<option value="${i + 1}">${i + 1}</option>`).join('');
    const before = document.createElement('div');
    before.innerHTML = HAND_WRITTEN;
    // The k choices were drawn into the empty select each time the dialog opened.
    before.querySelector('[name=k]')!.innerHTML = kOptions;
    expect(squeeze(grid.innerHTML)).toBe(squeeze(before.innerHTML));
  });

  it('fills the form from the settings and reads the same settings back', async () => {
    const { view, state, open } = dialog();
    const cases: Settings[] = [
      local,
      { ...local, drafter: 'model' },
      { ...local, drafter: 'lookup', k: 'auto', mode: 'sample', seed: null },
      { ...local, drafter: 'none', mode: 'reproducible', temperature: 0, top_k: 0 },
      { ...local, cache_mb: 512 },
      { ...local, cache_mb: 0 },
      // A remote model, odd characters and all: the local target and draft are kept for later.
      { ...local, remote: odd },
      // A remote no connection lists any more is still offered, as chosen.
      { ...local, remote: { base_url: 'http://gone:1/v1', model: 'm' } },
    ];
    for (const settings of cases) {
      state.current = settings;
      await view.open();
      expect(open()).toBe(true);
      expect(view.read()).toEqual(settings);
    }
  });

  it('refuses a value out of its field\'s range, as the browser does, and reads empty boxes as before', async () => {
    const { view, state, field, save, open } = dialog();
    await view.open();
    for (const f of FIELDS.filter((f) => f.range)) {
      const { min, max, step } = f.range!;
      for (const wrong of [min - step, max === undefined ? null : max + step]) {
        if (wrong === null) continue;
        const before = field(f.key).value;
        field(f.key).value = String(wrong);
        await save();
        expect(state.saved, `${f.key} = ${wrong}`).toEqual([]);
        expect(open()).toBe(true);
        field(f.key).value = before;
      }
    }
    field('context_tokens').value = '300';
    await save();
    expect(state.saved).toEqual([]);

    field('context_tokens').value = '8192';
    field('temperature').value = '';
    field('seed').value = '';
    field('overflow').value = 'truncate-middle';
    await save();
    expect(state.saved).toEqual([{ ...local, context_tokens: 8192, overflow: 'truncate-middle', temperature: 0, seed: null }]);
    expect(open()).toBe(false);
  });

  it('a remote target greys out the local drafting fields; a browser cannot change the target or how it loads', async () => {
    const { view, state, field } = dialog();
    const disabled = () => ['draft', 'copies', 'k', 'mode', 'temperature', 'context_tokens', 'device'].filter((n) => field(n).disabled);
    state.current = { ...local, remote: odd };
    await view.open();
    expect(disabled()).toEqual(['draft', 'copies', 'k', 'context_tokens', 'device']);
    expect($('#draft-note').textContent).toMatch(/^A remote engine drafts/);

    // Back to a local target: its compatible drafts are offered, the others say why not.
    const target = field<HTMLSelectElement>('target');
    target.value = '/m/target.gguf';
    target.dispatchEvent(new Event('change'));
    await settle();
    expect(state.asked.at(-1)).toBe('/m/target.gguf');
    expect(disabled()).toEqual(['copies']);
    const drafts = [...field<HTMLSelectElement>('draft').options].map((o) => [o.value, o.disabled]);
    expect(drafts).toEqual([['none', false], ['lookup', false], ['model:/m/draft.gguf', false], ['model:/m/other.gguf', true]]);
    expect($('#draft-note').textContent).toBe('Greyed-out drafts cannot pair with this target. other: another vocabulary');
    expect([...target.options].find((o) => o.value === remoteValue(odd))!.textContent).toBe('org/model "q4"|x @ h:1');

    loadPage(indexHtml);
    const browser = dialog({ canChooseTarget: false, apiKey: () => 'sk-1' });
    await browser.view.open();
    expect(browser.field('target').disabled).toBe(true);
    expect(['k', 'context_tokens', 'device'].filter((n) => browser.field(n).disabled)).toEqual(['context_tokens', 'device']);
    expect($('#api-key-field').hidden).toBe(false);
    expect(browser.field('api_key').value).toBe('sk-1');
  });

  it('a refused save says why and stays open; the key goes first', async () => {
    const order: string[] = [];
    const { view, save, open } = dialog({
      apiKey: () => '',
      setApiKey: (key) => void order.push(`key ${key}`),
      save: async () => {
        order.push('save');
        throw { code: 'model_too_large', message: 'the model needs 9 GB' };
      },
    });
    await view.open();
    $<HTMLInputElement>('#settings-form [name=api_key]').value = ' sk-2 ';
    await save();
    expect(order).toEqual(['key sk-2', 'save']);
    expect($('#settings-error').textContent).toBe('the model needs 9 GB');
    expect(open()).toBe(true);
    expect($('#settings-save').textContent).toBe('Save');
  });
});
