import { describe, expect, it } from 'vitest';
import type { CatalogueEntry, ConnectionCheck, Library, ModelEntry, PullEvent, PullHandle } from '../api/types';
import { Downloads, progressText } from './downloads';
import {
  addModelByPath,
  checkText,
  connectRemote,
  LibraryDialog,
  renderCatalogue,
  renderConnections,
  renderRecommended,
} from './library';
import { renderMarkdown } from '../render/markdown';
import indexHtml from '../../index.html?raw';

/** A library with no remote engines, for the tests of everything else. */
const noRemotes: Pick<Library, 'connections' | 'addConnection' | 'checkConnection' | 'removeConnection'> = {
  connections: async () => [],
  addConnection: async () => {
    throw new Error('unused');
  },
  checkConnection: async () => {
    throw new Error('unused');
  },
  removeConnection: async () => {},
};

describe('download progress', () => {
  it('shows bytes, speed and time left', () => {
    expect(progressText({ kind: 'progress', done: 12e6, total: 98.4e6, bytes_per_second: 25.3e6, eta_seconds: 3.4 })).toBe(
      '12.0 / 98.4 MB · 25.3 MB/s · 4 s left',
    );
    expect(progressText({ kind: 'progress', done: 0, total: 1e6, bytes_per_second: 0, eta_seconds: null })).toBe(
      '0.0 / 1.0 MB · 0.0 MB/s',
    );
  });
});

/** A backend whose downloads the test drives by hand. */
function fakeLibrary() {
  const entry: CatalogueEntry = {
    family: 'SmolLM2', role: 'draft', name: 'SmolLM2 135M', repo: 'org/smol', file: 'smol.gguf', file_mb: 98, memory_mb: 300,
  } as CatalogueEntry;
  const state = { emit: (_: PullEvent) => {}, cancels: 0, release: () => {} };
  const library: Library = {
    ...noRemotes,
    catalogue: async () => [entry],
    recommended: async () => null,
    addModel: async () => {
      throw new Error('unused');
    },
    diagnose: async () => ({ compatible: true, text: '' }),
    pull: (_repo, _file, onEvent) => {
      state.emit = onEvent;
      // The handle comes back only when the test says so, as a slow backend would.
      return new Promise<PullHandle>((resolve) => {
        state.release = () => resolve({ cancel: async () => void (state.cancels += 1) });
      });
    },
  };
  return { library, state };
}

const row = (list: HTMLElement) => list.querySelector<HTMLElement>('li.catalogue-entry')!;
const progress = { kind: 'progress', done: 49.2e6, total: 98.4e6, bytes_per_second: 30e6, eta_seconds: 2 } as const;

describe('the catalogue', () => {
  it('keeps a download on screen when the dialog is reopened, and cancels it from the new row', async () => {
    const { library, state } = fakeLibrary();
    // The dialog's downloads, kept while its rows are rebuilt.
    const downloads = new Downloads(library);
    const first = document.createElement('ul');
    await renderCatalogue(library, downloads, first, () => {});
    row(first).querySelector('button')!.click();
    state.release();
    await Promise.resolve();
    state.emit(progress);

    // The dialog closes and opens again: its rows are rebuilt.
    const second = document.createElement('ul');
    await renderCatalogue(library, downloads, second, () => {});
    expect(row(second).dataset.state).toBe('pulling');
    expect(row(second).querySelector('.status')!.textContent).toBe('49.2 / 98.4 MB · 30.0 MB/s · 2 s left');
    expect(row(second).querySelector('button')!.textContent).toBe('Cancel');
    state.emit({ ...progress, done: 60e6 });
    expect(row(second).querySelector('progress')!.value).toBe(60e6);

    row(second).querySelector('button')!.click();
    expect(state.cancels).toBe(1);
    state.emit({ kind: 'error', code: 'cancelled', message: 'cancelled' });
    expect(row(second).dataset.state).toBe('remote');
    expect(row(second).querySelector('button')!.textContent).toBe('Download');
  });

  it('a cancel asked before the backend answers still cancels, and never starts a second download', async () => {
    const { library, state } = fakeLibrary();
    const list = document.createElement('ul');
    await renderCatalogue(library, new Downloads(library), list, () => {});
    const button = row(list).querySelector('button')!;
    button.click();
    button.click();
    expect(state.cancels).toBe(0);
    state.release();
    await Promise.resolve();
    await Promise.resolve();
    expect(state.cancels).toBe(1);
    state.emit({ kind: 'error', code: 'cancelled', message: 'cancelled' });
    expect(row(list).dataset.state).toBe('remote');
  });

  it('shows a failed download as an error with its message', async () => {
    const { library, state } = fakeLibrary();
    const list = document.createElement('ul');
    await renderCatalogue(library, new Downloads(library), list, () => {});
    row(list).querySelector('button')!.click();
    state.emit({ kind: 'error', code: 'checksum', message: 'sha256 mismatch' });
    expect(row(list).dataset.state).toBe('error');
    expect(row(list).querySelector('.status')!.textContent).toBe('sha256 mismatch');
  });
});

/** The recommended pair's box, as index.html has it. */
function recommendedBox(): HTMLElement {
  const box = document.createElement('section');
  box.innerHTML = '<p class="facts"></p><p class="reason"></p><button></button><progress hidden></progress><p class="status"></p>';
  return box;
}

const model = (role: 'target' | 'draft', file: string, file_mb: number): CatalogueEntry => ({
  family: 'Qwen2.5-Coder', role, name: file.replace('.gguf', ''), repo: `Qwen/${file}`, file, file_mb, memory_mb: file_mb * 2,
});

describe('the recommended pair', () => {
  const pair = { target: model('target', 'big.gguf', 1066), draft: model('draft', 'small.gguf', 469), reason: '2 CPU cores and 20.0 GB free' };

  it('downloads the target then the draft with one click, and uses both', async () => {
    const pulled: string[] = [];
    const used: string[][] = [];
    const library: Library = {
      ...noRemotes,
      catalogue: async () => [pair.target, pair.draft],
      recommended: async () => pair,
      addModel: async () => {
        throw new Error('unused');
      },
      diagnose: async () => ({ compatible: true, text: '' }),
      pull: async (_repo, file, onEvent) => {
        pulled.push(file);
        setTimeout(() => {
          onEvent({ kind: 'progress', done: 5e6, total: 10e6, bytes_per_second: 1e6, eta_seconds: 5 });
          onEvent({ kind: 'done', path: `/hf/${file}` });
        });
        return { cancel: async () => {} };
      },
    };
    const box = recommendedBox();
    let ready = () => {};
    const done = new Promise<void>((r) => (ready = r));
    await renderRecommended(library, new Downloads(library), box, async (target, draft) => {
      used.push([target, draft]);
      ready();
    });
    expect(box.hidden).toBe(false);
    expect(box.querySelector('.facts')!.textContent).toBe('big answers, small drafts · 1535 MB to download');
    expect(box.querySelector('button')!.textContent).toBe('Download both and start');
    box.querySelector('button')!.click();
    await done;
    expect(pulled).toEqual(['big.gguf', 'small.gguf']);
    expect(used).toEqual([['/hf/big.gguf', '/hf/small.gguf']]);
  });

  it('a failed download says why and the button can try again', async () => {
    const library: Library = {
      ...noRemotes,
      catalogue: async () => [],
      recommended: async () => pair,
      addModel: async () => {
        throw new Error('unused');
      },
      diagnose: async () => ({ compatible: true, text: '' }),
      pull: async (_repo, _file, onEvent) => {
        setTimeout(() => onEvent({ kind: 'error', code: 'http', message: 'the Hub could not be reached' }));
        return { cancel: async () => {} };
      },
    };
    const box = recommendedBox();
    await renderRecommended(library, new Downloads(library), box, async () => {
      throw new Error('must not be used');
    });
    box.querySelector('button')!.click();
    await new Promise((r) => setTimeout(r, 10));
    expect(box.dataset.state).toBe('error');
    expect(box.querySelector('.status')!.textContent).toBe('the Hub could not be reached');
    expect(box.querySelector('button')!.disabled).toBe(false);
  });

  it('a pair already downloaded is used without a download, and no pair hides the box', async () => {
    const local = { ...pair, target: { ...pair.target, path: '/m/big.gguf' }, draft: { ...pair.draft, path: '/m/small.gguf' } };
    const used: string[][] = [];
    const library: Library = {
      ...noRemotes,
      catalogue: async () => [],
      recommended: async () => local,
      addModel: async () => {
        throw new Error('unused');
      },
      diagnose: async () => ({ compatible: true, text: '' }),
      pull: async () => {
        throw new Error('no download expected');
      },
    };
    const box = recommendedBox();
    await renderRecommended(library, new Downloads(library), box, async (t, d) => void used.push([t, d]));
    expect(box.querySelector('button')!.textContent).toBe('Use this pair');
    box.querySelector('button')!.click();
    await new Promise((r) => setTimeout(r, 10));
    expect(used).toEqual([['/m/big.gguf', '/m/small.gguf']]);
    await renderRecommended({ ...library, recommended: async () => null }, new Downloads(library), box, async () => {});
    expect(box.hidden).toBe(true);
  });
});

describe('a model file added by path', () => {
  const library = (addModel: Library['addModel']): Library => ({
    ...noRemotes,
    catalogue: async () => [],
    recommended: async () => null,
    diagnose: async () => ({ compatible: true, text: '' }),
    pull: async () => ({ cancel: async () => {} }),
    addModel,
  });

  it('says what was added, or why it was refused', async () => {
    const status = document.createElement('p');
    const asked: string[] = [];
    const added = await addModelByPath(
      library(async (path) => {
        asked.push(path);
        return { path, name: 'SmolLM2 135M', quantization: 'Q4_1' } as ModelEntry;
      }),
      '  /data/llm/smol.gguf ',
      status,
    );
    expect(asked).toEqual(['/data/llm/smol.gguf']);
    expect(added?.name).toBe('SmolLM2 135M');
    expect(status.textContent).toBe('added SmolLM2 135M (Q4_1): it is offered in Settings and the doctor');

    const refused = await addModelByPath(
      library(async () => {
        throw { code: 'not_gguf', message: '/data/notes.gguf is not a GGUF file' };
      }),
      '/data/notes.gguf',
      status,
    );
    expect(refused).toBeNull();
    expect(status.dataset.state).toBe('error');
    expect(status.textContent).toBe('/data/notes.gguf is not a GGUF file');
  });
});

describe('remote engines', () => {
  /** A library with nothing to download and no remotes; each test adds what it drives. */
  const idle: Library = {
    ...noRemotes,
    catalogue: async () => [],
    recommended: async () => null,
    addModel: async () => {
      throw new Error('unused');
    },
    diagnose: async () => ({ compatible: true, text: '' }),
    pull: async () => ({ cancel: async () => {} }),
  };

  const ok: ConnectionCheck = { base_url: 'http://gpu:8080/v1', models: ['qwen-32b', 'qwen-0.5b'], kind: 'llama_cpp', round_trip_ms: 13.6 };

  it('a check reads as the engine, its models and the round trip, or as its error', () => {
    expect(checkText(ok)).toBe('llama.cpp · 2 models · 14 ms round trip');
    expect(checkText({ ...ok, models: ['m'], kind: 'specula' })).toBe('Specula · 1 model · 14 ms round trip');
    expect(checkText({ ...ok, error: { code: 'unauthorized', message: 'the remote refused the API key (401)' } })).toBe(
      'the remote refused the API key (401)',
    );
  });

  it('connecting says what the remote is, or why it is not kept', async () => {
    const status = document.createElement('p');
    const asked: (string | null)[][] = [];
    const library: Library = {
      ...idle,
      addConnection: async (url, key, firstTokenSecs) => {
        asked.push(firstTokenSecs ? [url, key, String(firstTokenSecs)] : [url, key]);
        return key === 'sk-good' ? ok : { ...ok, models: [], error: { code: 'unauthorized', message: 'the remote refused the API key (401): bad key' } };
      },
    };
    expect(await connectRemote(library, ' http://gpu:8080 ', ' sk-good ', status)).toBe(true);
    expect(status.textContent).toContain('connected: llama.cpp · 2 models');
    expect(await connectRemote(library, 'http://gpu:8080', 'sk-bad', status)).toBe(false);
    expect(status.dataset.state).toBe('error');
    expect(status.textContent).toBe('the remote refused the API key (401): bad key');
    expect(await connectRemote(library, 'http://gpu:8080', '', status)).toBe(false);
    // A slow remote's wait for its first token goes with the connection.
    expect(await connectRemote(library, 'http://cpu-box:8080', 'sk-good', status, 1800)).toBe(true);
    expect(asked).toEqual([
      ['http://gpu:8080', 'sk-good'],
      ['http://gpu:8080', 'sk-bad'],
      ['http://gpu:8080', null],
      ['http://cpu-box:8080', 'sk-good', '1800'],
    ]);
  });

  it('each remembered connection is checked again and can be removed', async () => {
    let connections = [
      { base_url: 'http://gpu:8080/v1', has_key: true, models: ['old'], kind: 'llama_cpp' as const },
      { base_url: 'http://down:1/v1', has_key: false, models: ['m'], kind: 'open_ai' as const },
    ];
    const library: Library = {
      ...idle,
      connections: async () => connections,
      checkConnection: async (url) =>
        url.includes('down') ? { ...ok, base_url: url, models: [], error: { code: 'unreachable', message: 'the remote refused the connection: is it running?' } } : ok,
      removeConnection: async (url) => void (connections = connections.filter((c) => c.base_url !== url)),
    };
    const list = document.createElement('ul');
    await renderConnections(library, list);
    await new Promise((r) => setTimeout(r, 0));
    const rows = [...list.querySelectorAll<HTMLElement>('li.connection')];
    expect(rows.map((r) => r.dataset.state)).toEqual(['ready', 'error']);
    expect(rows[0].querySelector('.name')!.textContent).toBe('http://gpu:8080/v1 (key kept)');
    expect(rows[0].querySelector('.facts')!.textContent).toBe('qwen-32b, qwen-0.5b');
    expect(rows[1].querySelector('.status')!.textContent).toBe('the remote refused the connection: is it running?');
    rows[1].querySelector('button')!.click();
    await new Promise((r) => setTimeout(r, 0));
    expect([...list.querySelectorAll('li.connection')].length).toBe(1);
  });
});

describe('the library dialog beside a hostile reply', () => {
  /** The app's own page (index.html), with a reply in the chat that names its parts. The reply
   *  comes first in the document, where a document-wide `#connections` would find it. */
  function page(reply: string) {
    document.body.innerHTML = new DOMParser().parseFromString(indexHtml, 'text/html').body.innerHTML;
    const messages = document.querySelector<HTMLElement>('#messages')!;
    const rendered = document.createElement('div');
    rendered.append(renderMarkdown(reply));
    // As if the sanitiser had let them through: the parts are found inside the dialog, so even
    // an element named exactly like one of them is never used.
    const raw = document.createElement('div');
    raw.innerHTML = reply;
    messages.append(rendered, raw);
    const dialog = document.querySelector<HTMLDialogElement>('#library-dialog')!;
    dialog.showModal = () => void dialog.setAttribute('open', '');
    return { dialog, raw };
  }

  const reply =
    '<ul id="connections"><li name="x">reply</li></ul><ul id="catalogue"></ul><section id="recommended"><p class="facts"></p></section>' +
    '<form id="add-connection"><input name="url"><input name="key"></form><p id="add-connection-status"></p><select id="doctor-target"></select>';

  const connection = { base_url: 'http://gpu:8080/v1', has_key: false, models: ['qwen'], kind: 'llama_cpp' as const };
  const check: ConnectionCheck = { base_url: 'http://gpu:8080/v1', models: ['qwen'], kind: 'llama_cpp', round_trip_ms: 3 };

  it('fills its own connection list, catalogue and doctor, never the reply\'s elements', async () => {
    const { dialog, raw } = page(reply);
    const asked: string[] = [];
    const library: Library = {
      ...fakeLibrary().library,
      connections: async () => connections,
      checkConnection: async () => check,
      addConnection: async (url) => {
        asked.push(url);
        return { ...check, base_url: url };
      },
    };
    const models = [{ path: '/m/a.gguf', name: 'A', quantization: 'Q4_0' }] as ModelEntry[];
    let connections = [connection];
    const view = new LibraryDialog(dialog, library, {
      models: async () => models,
      currentTarget: () => '/m/a.gguf',
      usePair: async () => {},
      onError: (e) => {
        throw e;
      },
    });
    const before = raw.innerHTML;
    await view.open();
    expect(dialog.open).toBe(true);
    const own = dialog.querySelector('#connections')!;
    expect([...own.querySelectorAll('li.connection')].map((li) => (li as HTMLElement).dataset.url)).toEqual(['http://gpu:8080/v1']);
    expect(dialog.querySelectorAll('#catalogue li.catalogue-entry').length).toBe(1);
    expect(dialog.querySelector<HTMLSelectElement>('#doctor-target')!.value).toBe('/m/a.gguf');
    expect(raw.innerHTML).toBe(before);

    // The connect form sends what was typed in the dialog, and redraws the dialog's own list.
    connections = [connection, { ...connection, base_url: 'http://two:1/v1' }];
    raw.querySelector<HTMLInputElement>('[name=url]')!.value = 'http://reply.example';
    dialog.querySelector<HTMLInputElement>('#add-connection [name=url]')!.value = 'http://two:1';
    dialog.querySelector<HTMLFormElement>('#add-connection')!.dispatchEvent(new Event('submit', { cancelable: true }));
    await new Promise((r) => setTimeout(r, 0));
    await new Promise((r) => setTimeout(r, 0));
    expect(asked).toEqual(['http://two:1']);
    expect(dialog.querySelector('#add-connection-status')!.textContent).toContain('connected');
    expect(own.querySelectorAll('li.connection').length).toBe(2);
    expect(raw.querySelector('#connections')!.textContent).toBe('reply');
    expect(raw.querySelector('#add-connection-status')!.textContent).toBe('');
  });
});
