// The transport a window talks through: Tauri IPC inside the app, HTTP in a browser. Apart from
// the Backend interface (backend.ts), which both transports implement, so that neither module
// reaches back to the other.

import type { Backend } from './backend';

export async function connect(): Promise<Backend> {
  if ('__TAURI_INTERNALS__' in window) {
    const { TauriBackend } = await import('./tauri');
    return new TauriBackend();
  }
  const { HttpBackend } = await import('./http');
  return new HttpBackend(window.location.origin, window.localStorage);
}
