// The library dialog: the catalogue of known-good target/draft pairs with a download button
// and a live progress line per model, remote engines (connections), and the compatibility doctor
// for any two local models.

import type {
  CatalogueEntry,
  Connection,
  ConnectionCheck,
  Library,
  ModelEntry,
  PullEvent,
  RecommendedPair,
  RemoteKind,
} from '../api/types';
import { toBackendError } from '../api/types';
import { remoteModelName } from '../api/label';
import { $in } from './dom';
import { Downloads, progressText } from './downloads';

/** The first run's offer: the pair recommended for this machine and one button that downloads
 *  both (the target, then the draft, with progress) and hands their paths to `use`. */
export async function renderRecommended(
  library: Library,
  downloads: Downloads,
  box: HTMLElement,
  use: (target: string, draft: string) => Promise<void>,
): Promise<void> {
  const pair = await library.recommended();
  box.hidden = !pair;
  if (!pair) return;
  const facts = $in(box, '.facts');
  const status = $in(box, '.status');
  const bar = $in<HTMLProgressElement>(box, 'progress');
  const button = $in<HTMLButtonElement>(box, 'button');
  const local = Boolean(pair.target.path && pair.draft.path);
  facts.textContent = pairText(pair, local);
  $in(box, '.reason').textContent = pair.reason;
  button.textContent = local ? 'Use this pair' : 'Download both and start';
  button.disabled = false;
  bar.hidden = true;
  status.textContent = '';
  box.dataset.state = local ? 'local' : 'remote';
  button.onclick = () => {
    button.disabled = true;
    box.dataset.state = 'pulling';
    bar.hidden = false;
    void downloadPair(downloads, pair, bar, status)
      .then(async ([target, draft]) => {
        status.textContent = 'loading the models…';
        await use(target, draft);
        box.dataset.state = 'ready';
        status.textContent = 'ready: ask it something';
        bar.hidden = true;
      })
      .catch((e: unknown) => {
        box.dataset.state = 'error';
        status.textContent = toBackendError(e).message;
        button.disabled = false;
        bar.hidden = true;
      });
  };
}

/** "Qwen2.5-Coder-1.5B-Instruct answers, Qwen2.5-Coder-0.5B-Instruct drafts · 1535 MB to download" */
export function pairText(pair: RecommendedPair, local: boolean): string {
  const size = pair.target.file_mb + pair.draft.file_mb;
  return `${pair.target.name} answers, ${pair.draft.name} drafts · ${local ? 'already downloaded' : `${size} MB to download`}`;
}

async function downloadPair(
  downloads: Downloads,
  pair: RecommendedPair,
  bar: HTMLProgressElement,
  status: HTMLElement,
): Promise<[string, string]> {
  const paths: string[] = [];
  for (const [i, entry] of [pair.target, pair.draft].entries()) {
    status.textContent = `${i + 1} of 2: ${entry.name}, starting…`;
    bar.removeAttribute('value');
    paths.push(
      await downloads.toEnd(entry, (event) => {
        if (event.kind !== 'progress') return;
        bar.max = event.total;
        bar.value = event.done;
        status.textContent = `${i + 1} of 2: ${entry.name}, ${progressText(event)}`;
      }),
    );
  }
  return [paths[0], paths[1]];
}

export async function renderCatalogue(
  library: Library,
  downloads: Downloads,
  list: HTMLElement,
  onPulled: () => void,
): Promise<void> {
  const entries = await library.catalogue();
  list.replaceChildren(...entries.map((entry) => catalogueRow(downloads, entry, onPulled)));
}

function catalogueRow(downloads: Downloads, entry: CatalogueEntry, onPulled: () => void): HTMLElement {
  const row = document.createElement('li');
  row.className = 'catalogue-entry';
  row.dataset.file = entry.file;
  const title = document.createElement('span');
  title.className = 'name';
  title.textContent = `${entry.name} (${entry.role})`;
  const facts = document.createElement('span');
  facts.className = 'facts';
  facts.textContent = `${entry.family} · ${entry.file_mb} MB · about ${(entry.memory_mb / 1024).toFixed(1)} GB to run`;
  const status = document.createElement('span');
  status.className = 'status';
  const bar = document.createElement('progress');
  const button = document.createElement('button');
  button.type = 'button';
  const idle = (path?: string) => {
    button.textContent = path ? 'In library' : 'Download';
    button.disabled = Boolean(path);
    row.dataset.state = path ? 'local' : 'remote';
    bar.hidden = true;
  };
  const pulling = () => {
    row.dataset.state = 'pulling';
    status.textContent = 'starting…';
    button.textContent = 'Cancel';
    bar.hidden = false;
    bar.removeAttribute('value');
  };
  const show = (event: PullEvent) => {
    if (event.kind === 'progress') {
      bar.max = event.total;
      bar.value = event.done;
      status.textContent = progressText(event);
    } else if (event.kind === 'done') {
      status.textContent = 'downloaded and verified (sha256)';
      idle(event.path);
      onPulled();
    } else {
      status.textContent = event.code === 'cancelled' ? 'cancelled; nothing was kept' : event.message;
      idle();
      row.dataset.state = event.code === 'cancelled' ? 'remote' : 'error';
    }
  };
  const running = downloads.get(entry.file);
  if (running) {
    running.show = show;
    pulling();
    if (running.last) show(running.last);
  } else {
    idle(entry.path ?? undefined);
  }
  button.addEventListener('click', () => {
    const download = downloads.get(entry.file);
    if (download) {
      downloads.cancel(download);
      return;
    }
    pulling();
    downloads.start(entry, show);
  });
  row.append(title, facts, button, bar, status);
  return row;
}

/** The "model file of your own" form: the backend checks the file and remembers it. */
export async function addModelByPath(library: Library, path: string, status: HTMLElement): Promise<ModelEntry | null> {
  status.dataset.state = 'checking';
  status.textContent = 'checking…';
  try {
    const model = await library.addModel(path.trim());
    status.dataset.state = 'added';
    status.textContent = `added ${model.name} (${model.quantization}): it is offered in Settings and the doctor`;
    return model;
  } catch (e) {
    status.dataset.state = 'error';
    status.textContent = toBackendError(e).message;
    return null;
  }
}

/** Fill the doctor's two model pickers with what can run. */
export function fillDoctor(models: ModelEntry[], target: HTMLSelectElement, draft: HTMLSelectElement, current: string): void {
  const options = () =>
    models.filter((m) => m.runnable !== false).map((m) => new Option(`${m.name} (${m.quantization})`, m.path));
  target.replaceChildren(...options());
  draft.replaceChildren(...options());
  target.value = current;
}

export async function runDoctor(library: Library, target: string, draft: string, out: HTMLElement): Promise<void> {
  out.textContent = 'checking…';
  try {
    const diagnosis = await library.diagnose(target, draft);
    out.dataset.compatible = String(diagnosis.compatible);
    out.textContent = diagnosis.text;
  } catch (e) {
    out.dataset.compatible = 'false';
    out.textContent = toBackendError(e).message;
  }
}

// ----- remote engines -----

const ENGINES: Record<RemoteKind, string> = { specula: 'Specula', llama_cpp: 'llama.cpp', open_ai: 'OpenAI-compatible' };

/** "llama.cpp · 2 models · 14 ms round trip", or why the check failed. */
export function checkText(check: ConnectionCheck): string {
  if (check.error) return check.error.message;
  const models = `${check.models.length} model${check.models.length === 1 ? '' : 's'}`;
  return `${ENGINES[check.kind]} · ${models} · ${check.round_trip_ms.toFixed(0)} ms round trip`;
}

/** The connect form: the backend checks the remote and remembers it when it answers. */
export async function connectRemote(
  library: Library,
  url: string,
  key: string,
  status: HTMLElement,
  firstTokenSecs: number | null = null,
): Promise<boolean> {
  status.dataset.state = 'checking';
  status.textContent = 'connecting…';
  try {
    const check = await library.addConnection(url.trim(), key.trim() || null, firstTokenSecs);
    status.dataset.state = check.error ? 'error' : 'added';
    status.textContent = check.error ? check.error.message : `connected: ${checkText(check)}; its models are offered in Settings`;
    return !check.error;
  } catch (e) {
    status.dataset.state = 'error';
    status.textContent = toBackendError(e).message;
    return false;
  }
}

/** The remembered connections, each checked again as the dialog opens (health and round trip). */
export async function renderConnections(library: Library, list: HTMLElement): Promise<void> {
  const connections = await library.connections();
  list.replaceChildren(...connections.map((c) => connectionRow(library, c, list)));
}

function connectionRow(library: Library, connection: Connection, list: HTMLElement): HTMLElement {
  const row = document.createElement('li');
  row.className = 'connection';
  row.dataset.url = connection.base_url;
  row.dataset.state = 'checking';
  const title = document.createElement('span');
  title.className = 'name';
  title.textContent = connection.base_url + (connection.has_key ? ' (key kept)' : '');
  const facts = document.createElement('span');
  facts.className = 'facts';
  facts.textContent = connection.models.map(remoteModelName).join(', ');
  const status = document.createElement('span');
  status.className = 'status';
  status.textContent = 'checking…';
  const remove = document.createElement('button');
  remove.type = 'button';
  remove.textContent = 'Remove';
  remove.addEventListener('click', () => {
    void library.removeConnection(connection.base_url).then(() => renderConnections(library, list));
  });
  library.checkConnection(connection.base_url).then(
    (check) => {
      row.dataset.state = check.error ? 'error' : 'ready';
      status.textContent = checkText(check);
      if (!check.error) facts.textContent = check.models.map(remoteModelName).join(', ');
    },
    (e) => {
      row.dataset.state = 'error';
      status.textContent = toBackendError(e).message;
    },
  );
  row.append(title, facts, remove, status);
  return row;
}

// ----- the dialog -----

/** What the Library dialog asks of the rest of the app. */
export interface LibraryHost {
  /** The models the doctor offers (those of the current target's folder, say). */
  models(): Promise<ModelEntry[]>;
  /** The doctor's first choice of target. */
  currentTarget(): string;
  /** Load a downloaded recommended pair (and close the dialog). */
  usePair(target: string, draft: string): Promise<void>;
  onError(error: unknown): void;
}

/** The Library dialog. Its state: the downloads in flight, which outlive the rows that show
 *  them.
 *
 *  Every part is found here, once, inside `dialog`, and kept: never by a document-wide lookup
 *  when the dialog opens or a form is sent, after replies are on the page. A reply is model
 *  output; were an element of it ever named like a part of the dialog (`<ul id="connections">`,
 *  DOM clobbering), a document-wide `#connections` would find it first and the dialog would
 *  draw into the reply (the sanitiser drops `id`/`name` too: render/markdown.ts). */
export class LibraryDialog {
  private readonly downloads: Downloads;
  private readonly recommended: HTMLElement;
  private readonly catalogue: HTMLElement;
  private readonly connections: HTMLElement;
  private readonly doctorTarget: HTMLSelectElement;
  private readonly doctorDraft: HTMLSelectElement;

  constructor(
    private readonly dialog: HTMLDialogElement,
    private readonly library: Library,
    private readonly host: LibraryHost,
  ) {
    this.downloads = new Downloads(library);
    const part = <T extends HTMLElement = HTMLElement>(selector: string) => $in<T>(dialog, selector);
    this.recommended = part('#recommended');
    this.catalogue = part('#catalogue');
    this.connections = part('#connections');
    this.doctorTarget = part<HTMLSelectElement>('#doctor-target');
    this.doctorDraft = part<HTMLSelectElement>('#doctor-draft');
    const addModel = part<HTMLFormElement>('#add-model');
    const modelPath = $in<HTMLInputElement>(addModel, '[name=path]');
    const addModelStatus = part('#add-model-status');
    const addConnection = part<HTMLFormElement>('#add-connection');
    const connectionUrl = $in<HTMLInputElement>(addConnection, '[name=url]');
    const connectionKey = $in<HTMLInputElement>(addConnection, '[name=key]');
    const firstToken = $in<HTMLInputElement>(addConnection, '[name=first-token]');
    const addConnectionStatus = part('#add-connection-status');
    const doctorRun = part<HTMLButtonElement>('#doctor-run');
    const doctorReport = part('#doctor-report');
    const close = part<HTMLButtonElement>('#library-close');

    addModel.addEventListener('submit', (e) => {
      e.preventDefault();
      void addModelByPath(library, modelPath.value, addModelStatus).then((model) => {
        if (model) void this.refreshDoctor().catch(host.onError);
      });
    });
    addConnection.addEventListener('submit', (e) => {
      e.preventDefault();
      const wait = firstToken.valueAsNumber >= 1 ? Math.round(firstToken.valueAsNumber) : null;
      void connectRemote(library, connectionUrl.value, connectionKey.value, addConnectionStatus, wait).then((added) => {
        if (!added) return;
        connectionKey.value = '';
        void renderConnections(library, this.connections).catch(host.onError);
      });
    });
    doctorRun.addEventListener('click', () => {
      void runDoctor(library, this.doctorTarget.value, this.doctorDraft.value, doctorReport);
    });
    close.addEventListener('click', () => dialog.close());
  }

  /** Draw every section afresh and show the dialog. */
  async open(): Promise<void> {
    const { library, host } = this;
    await Promise.all([
      renderRecommended(library, this.downloads, this.recommended, host.usePair),
      renderCatalogue(library, this.downloads, this.catalogue, () => void this.refreshDoctor().catch(host.onError)),
      renderConnections(library, this.connections),
      this.refreshDoctor(),
    ]);
    if (!this.dialog.open) this.dialog.showModal();
  }

  private async refreshDoctor(): Promise<void> {
    fillDoctor(await this.host.models(), this.doctorTarget, this.doctorDraft, this.host.currentTarget());
  }
}
