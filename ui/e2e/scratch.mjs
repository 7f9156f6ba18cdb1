// The folders a test file writes to (app data, model folders, downloads: 1.5 GB for the first
// run), under one temporary root that goes when the process exits, passed or failed: left
// behind, a few runs filled the disk and the next download failed.
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export function scratch(prefix) {
  const root = mkdtempSync(join(tmpdir(), `${prefix}-`));
  process.on('exit', () => rmSync(root, { recursive: true, force: true }));
  return (name) => {
    const dir = join(root, name);
    mkdirSync(dir);
    return dir;
  };
}
