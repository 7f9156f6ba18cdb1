// Chats in and out: the Export dialog (one chat or all, as Markdown or Specula JSON) and
// Import, which reads the file the user picks and hands its text to the backend. Shown only
// where the transport keeps files (the desktop app).

import type { ExportFormat, ImportSummary } from '../api/types';
import { $in } from './dom';

export interface ExchangeParts {
  tools: HTMLElement;
  exportAll: HTMLButtonElement;
  importButton: HTMLButtonElement;
  importFile: HTMLInputElement;
  dialog: HTMLDialogElement;
}

export function exchangeParts(doc: Document): ExchangeParts {
  return {
    tools: $in(doc, '#exchange-tools'),
    exportAll: $in<HTMLButtonElement>(doc, '#export-all'),
    importButton: $in<HTMLButtonElement>(doc, '#import-button'),
    importFile: $in<HTMLInputElement>(doc, '#import-file'),
    dialog: $in<HTMLDialogElement>(doc, '#export-dialog'),
  };
}

export interface ExchangeHost {
  exportChats(ids: number[], format: ExportFormat): Promise<string>;
  importChats(text: string): Promise<ImportSummary>;
  /** Say what happened (a file written, chats imported). */
  say(text: string): void;
  /** The chats changed: redraw the list. */
  imported(summary: ImportSummary): Promise<void>;
  onError(error: unknown): void;
}

const FORMAT_NAMES: Record<string, string> = { specula: 'Specula', chatgpt: 'ChatGPT', openwebui: 'Open WebUI', llamacpp: 'llama.cpp' };

export class Exchange {
  /** The chats the open dialog exports (none: all). */
  private ids: number[] = [];

  constructor(
    private readonly parts: ExchangeParts,
    private readonly host: ExchangeHost,
  ) {
    parts.tools.hidden = false;
    parts.exportAll.addEventListener('click', () => this.open([], 'Export all chats'));
    parts.importButton.addEventListener('click', () => parts.importFile.click());
    parts.importFile.addEventListener('change', () => void this.importPicked().catch(host.onError));
    const button = (id: string) => $in<HTMLButtonElement>(parts.dialog, id);
    button('#export-cancel').addEventListener('click', () => parts.dialog.close());
    button('#export-markdown').addEventListener('click', () => void this.export('markdown').catch(host.onError));
    button('#export-json').addEventListener('click', () => void this.export('json').catch(host.onError));
  }

  /** Offer the formats for chat `id` (titled `title`), or for all. */
  open(ids: number[], heading: string): void {
    this.ids = ids;
    $in(this.parts.dialog, '#export-title').textContent = heading;
    this.parts.dialog.showModal();
  }

  private async export(format: ExportFormat): Promise<void> {
    this.parts.dialog.close();
    const path = await this.host.exportChats(this.ids, format);
    this.host.say(`Exported to ${path}`);
  }

  private async importPicked(): Promise<void> {
    const file = this.parts.importFile.files?.[0];
    this.parts.importFile.value = '';
    if (!file) return;
    const summary = await this.host.importChats(await file.text());
    await this.host.imported(summary);
    this.host.say(importedText(file.name, summary));
  }
}

/** "Imported 3 chats from ChatGPT (conversations.json); 1 was already here." */
export function importedText(file: string, s: ImportSummary): string {
  const n = s.imported.length;
  const chats = `${n} chat${n === 1 ? '' : 's'}`;
  const skipped = s.skipped.length ? `; ${s.skipped.length} ${s.skipped.length === 1 ? 'was' : 'were'} already here` : '';
  return `Imported ${chats} from ${FORMAT_NAMES[s.format] ?? s.format} (${file})${skipped}.`;
}
