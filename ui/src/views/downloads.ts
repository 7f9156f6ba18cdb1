// The library's downloads in flight. They outlive the dialog's rows, which are rebuilt each
// time the dialog opens: the new row takes over `show`, so reopening shows the same progress
// and can cancel.

import type { CatalogueEntry, Library, PullEvent, PullHandle } from '../api/types';
import { asErrorCode, toBackendError } from '../api/types';

const mb = (bytes: number) => (bytes / 1e6).toFixed(1);

/** "12.0 / 98.4 MB · 25.3 MB/s · 3 s left" */
export function progressText(e: Extract<PullEvent, { kind: 'progress' }>): string {
  const eta = e.eta_seconds == null ? '' : ` · ${Math.ceil(e.eta_seconds)} s left`;
  return `${mb(e.done)} / ${mb(e.total)} MB · ${mb(e.bytes_per_second)} MB/s${eta}`;
}

export interface Download {
  handle?: PullHandle;
  /** Cancel was asked before the backend handed back its handle. */
  cancelled?: boolean;
  last?: PullEvent;
  show: (event: PullEvent) => void;
}

export class Downloads {
  /** By catalogue file, until each ends. */
  private readonly running = new Map<string, Download>();

  constructor(private readonly library: Library) {}

  /** The download of `file` in flight, if any. */
  get(file: string): Download | undefined {
    return this.running.get(file);
  }

  start(entry: CatalogueEntry, show: (event: PullEvent) => void): void {
    const download: Download = { show };
    this.running.set(entry.file, download);
    const onEvent = (event: PullEvent) => {
      download.last = event;
      if (event.kind !== 'progress') this.running.delete(entry.file);
      download.show(event);
    };
    this.library.pull(entry.repo, entry.file, onEvent).then(
      (handle) => {
        download.handle = handle;
        if (download.cancelled) void handle.cancel();
      },
      (e) => {
        const { code, message } = toBackendError(e);
        onEvent({ kind: 'error', code: asErrorCode(code), message });
      },
    );
  }

  cancel(download: Download): void {
    download.cancelled = true;
    void download.handle?.cancel();
  }

  /** Download `entry` to the end, through the same download the catalogue's row shows: resolves
   *  with its path (at once when it is already in the library), rejects with the backend's error. */
  toEnd(entry: CatalogueEntry, onProgress: (event: PullEvent) => void): Promise<string> {
    if (entry.path) return Promise.resolve(entry.path);
    return new Promise((resolve, reject) => {
      this.start(entry, (event) => {
        if (event.kind === 'progress') onProgress(event);
        else if (event.kind === 'done') resolve(event.path);
        else reject(event);
      });
    });
  }
}
