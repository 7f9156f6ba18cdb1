import { beforeEach, describe, expect, it, vi } from 'vitest';
import type { ConversationSummary } from '../api/types';
import { $, loadPage, settle } from '../testing/page';
import indexHtml from '../../index.html?raw';
import { Sidebar, sidebarParts, type SidebarHost } from './sidebar';

const chats: ConversationSummary[] = [
  { id: 3, title: 'Sum of a list', updated_at: 3 },
  { id: 2, title: 'Quick brown fox', updated_at: 2 },
  { id: 1, title: 'Sum types in Rust', updated_at: 1 },
];

function sidebar() {
  const calls: unknown[][] = [];
  const host: SidebarHost = {
    // The backend's search: by title here.
    conversations: async (query) => chats.filter((c) => c.title.toLowerCase().includes(query.toLowerCase())),
    newChat: () => void calls.push(['new']),
    open: async (id) => void calls.push(['open', id]),
    rename: async (id, title) => void calls.push(['rename', id, title]),
    remove: async (id, title) => void calls.push(['remove', id, title]),
    onError: (e) => {
      throw e;
    },
  };
  const view = new Sidebar(sidebarParts($('#sidebar')), host);
  const rows = () => [...document.querySelectorAll<HTMLLIElement>('#conversation-list li')];
  return { view, calls, rows };
}

describe('the sidebar', () => {
  beforeEach(() => loadPage(indexHtml));

  it('lists the conversations with the open one marked, and filters them as the search is typed', async () => {
    const { view, rows } = sidebar();
    await view.refresh(2);
    expect(rows().map((li) => li.querySelector('.open')!.textContent)).toEqual(['Sum of a list', 'Quick brown fox', 'Sum types in Rust']);
    expect(rows().map((li) => li.dataset.id)).toEqual(['3', '2', '1']);
    expect(rows().map((li) => li.className)).toEqual(['', 'current', '']);

    const search = $<HTMLInputElement>('#search');
    search.value = 'sum';
    search.dispatchEvent(new Event('input'));
    await settle();
    expect(rows().map((li) => li.dataset.id)).toEqual(['3', '1']);
    search.value = 'no such conversation';
    search.dispatchEvent(new Event('input'));
    await settle();
    expect(rows()).toEqual([]);
  });

  it('opens, renames and deletes through its host, and starts a new chat', async () => {
    const { view, calls, rows } = sidebar();
    await view.refresh(null);
    rows()[1].querySelector<HTMLButtonElement>('.open')!.click();
    $<HTMLButtonElement>('#new-chat').click();

    const ask = vi.spyOn(window, 'prompt').mockReturnValueOnce('  Fox  ').mockReturnValueOnce(null);
    const rename = () => rows()[1].querySelector<HTMLButtonElement>('[aria-label="Rename"]')!;
    rename().click();
    rename().click();
    expect(ask).toHaveBeenCalledWith('Rename conversation', 'Quick brown fox');

    // No question asked: the delete is undoable (the toast's Undo).
    rows()[0].querySelector<HTMLButtonElement>('[aria-label="Delete"]')!.click();
    await settle();
    expect(calls).toEqual([['open', 2], ['new'], ['rename', 2, 'Fox'], ['rename', 2, undefined], ['remove', 3, 'Sum of a list']]);
    expect(rows()[0].querySelector('[aria-label="Export"]'), 'no export where the host has none').toBeNull();
  });
});
