import { beforeEach, describe, expect, it, vi } from 'vitest';
import type { ExportFormat, ImportSummary } from '../api/types';
import { $, loadPage } from '../testing/page';
import indexHtml from '../../index.html?raw';
import { Exchange, exchangeParts, importedText } from './exchange';

function exchange() {
  const calls: unknown[][] = [];
  const said: string[] = [];
  const view = new Exchange(exchangeParts(document), {
    exportChats: async (ids: number[], format: ExportFormat) => (calls.push(['export', ids, format]), '/home/u/Downloads/specula-chats.json'),
    importChats: async (text: string): Promise<ImportSummary> => (
      calls.push(['import', text]), { format: 'chatgpt', imported: [4, 5], skipped: ['Old'] }
    ),
    say: (text) => void said.push(text),
    imported: async (summary) => void calls.push(['imported', summary.imported]),
    onError: (e) => {
      throw e;
    },
  });
  return { view, calls, said };
}

describe('chats in and out', () => {
  beforeEach(() => loadPage(indexHtml));

  it('exports one chat or all in the format chosen, and says where the file went', async () => {
    const { view, calls, said } = exchange();
    expect($('#exchange-tools').hidden).toBe(false);
    view.open([7], 'Export “Primes”');
    expect($('#export-title').textContent).toBe('Export “Primes”');
    $<HTMLButtonElement>('#export-markdown').click();
    $<HTMLButtonElement>('#export-all').click();
    $<HTMLButtonElement>('#export-json').click();
    await vi.waitFor(() => expect(said).toHaveLength(2));
    expect(calls).toEqual([['export', [7], 'markdown'], ['export', [], 'json']]);
    expect(said[0]).toBe('Exported to /home/u/Downloads/specula-chats.json');
  });

  it('imports the file picked and says what came in', async () => {
    const { calls, said } = exchange();
    const input = $<HTMLInputElement>('#import-file');
    const file = new File(['[{"mapping": {}}]'], 'conversations.json', { type: 'application/json' });
    // jsdom's File has no text(); the webviews' have.
    Object.defineProperty(file, 'text', { value: async () => '[{"mapping": {}}]' });
    Object.defineProperty(input, 'files', { value: [file], configurable: true });
    input.dispatchEvent(new Event('change'));
    await vi.waitFor(() => expect(said).toHaveLength(1));
    expect(calls).toEqual([['import', '[{"mapping": {}}]'], ['imported', [4, 5]]]);
    expect(said[0]).toBe('Imported 2 chats from ChatGPT (conversations.json); 1 was already here.');
    expect(importedText('a.json', { format: 'specula', imported: [1], skipped: [] })).toBe('Imported 1 chat from Specula (a.json).');
  });
});
