// The library dialog: the catalogue of known-good target/draft pairs with a download button
// and a live progress line per model, and the compatibility doctor for any two local models.

import type { CatalogueEntry, Library, ModelEntry, PullEvent, PullHandle } from './api/types';
import { toBackendError } from './api/types';

const mb = (bytes: number) => (bytes / 1e6).toFixed(1);

/** "12.0 / 98.4 MB · 25.3 MB/s · 3 s left" */
export function progressText(e: Extract<PullEvent, { kind: 'progress' }>): string {
  const eta = e.eta_seconds == null ? '' : ` · ${Math.ceil(e.eta_seconds)} s left`;
  return `${mb(e.done)} / ${mb(e.total)} MB · ${mb(e.bytes_per_second)} MB/s${eta}`;
}

/** A download in flight. It outlives the dialog's rows, which are rebuilt each time the dialog
 *  opens: the new row takes over `show`, so reopening shows the same progress and can cancel. */
interface Download {
  handle?: PullHandle;
  /** Cancel was asked before the backend handed back its handle. */
  cancelled?: boolean;
  last?: PullEvent;
  show: (event: PullEvent) => void;
}

const downloads = new Map<string, Download>();

function startDownload(library: Library, entry: CatalogueEntry, show: (event: PullEvent) => void): void {
  const download: Download = { show };
  downloads.set(entry.file, download);
  const onEvent = (event: PullEvent) => {
    download.last = event;
    if (event.kind !== 'progress') downloads.delete(entry.file);
    download.show(event);
  };
  library.pull(entry.repo, entry.file, onEvent).then(
    (handle) => {
      download.handle = handle;
      if (download.cancelled) void handle.cancel();
    },
    (e) => {
      const { code, message } = toBackendError(e);
      onEvent({ kind: 'error', code, message });
    },
  );
}

function cancelDownload(download: Download): void {
  download.cancelled = true;
  void download.handle?.cancel();
}

export async function renderCatalogue(library: Library, list: HTMLElement, onPulled: () => void): Promise<void> {
  const entries = await library.catalogue();
  list.replaceChildren(...entries.map((entry) => catalogueRow(library, entry, onPulled)));
}

function catalogueRow(library: Library, entry: CatalogueEntry, onPulled: () => void): HTMLElement {
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
    idle(entry.path);
  }
  button.addEventListener('click', () => {
    const download = downloads.get(entry.file);
    if (download) {
      cancelDownload(download);
      return;
    }
    pulling();
    startDownload(library, entry, show);
  });
  row.append(title, facts, button, bar, status);
  return row;
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
