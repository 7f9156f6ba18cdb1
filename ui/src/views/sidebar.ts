// The sidebar: New chat, the search box and the conversations that match it, each with Rename,
// Export (where the transport keeps files) and Delete (undoable, so it asks nothing).

import type { ConversationSummary } from '../api/types';
import { $in, iconButton } from './dom';

export interface SidebarParts {
  newChat: HTMLButtonElement;
  search: HTMLInputElement;
  list: HTMLUListElement;
}

export function sidebarParts(root: HTMLElement): SidebarParts {
  return {
    newChat: $in<HTMLButtonElement>(root, '#new-chat'),
    search: $in<HTMLInputElement>(root, '#search'),
    list: $in<HTMLUListElement>(root, '#conversation-list'),
  };
}

/** What the sidebar asks of the rest of the app. */
export interface SidebarHost {
  /** The conversations whose text matches `query` ('' for all), newest first. */
  conversations(query: string): Promise<ConversationSummary[]>;
  newChat(): void;
  open(id: number): Promise<void>;
  /** Rename (no title: the user cancelled) and redraw. */
  rename(id: number, title: string | undefined): Promise<void>;
  /** Delete (with an Undo offered) and redraw. */
  remove(id: number, title: string): Promise<void>;
  /** Offer to export the chat; absent where the transport cannot. */
  exportChat?(id: number, title: string): void;
  onError(error: unknown): void;
}

export class Sidebar {
  focusSearch(): void {
    this.parts.search.focus();
    this.parts.search.select();
  }

  /** The open conversation, marked in the list. */
  private current: number | null = null;

  constructor(
    private readonly parts: SidebarParts,
    private readonly host: SidebarHost,
  ) {
    parts.newChat.addEventListener('click', () => host.newChat());
    parts.search.addEventListener('input', () => void this.refresh().catch(host.onError));
  }

  /** Draw the conversations that match the search, `current` marked. */
  async refresh(current = this.current): Promise<void> {
    this.current = current;
    const items = await this.host.conversations(this.parts.search.value);
    this.parts.list.replaceChildren(...items.map((c) => this.row(c)));
  }

  private row(c: ConversationSummary): HTMLLIElement {
    const li = document.createElement('li');
    li.dataset.id = String(c.id);
    li.className = c.id === this.current ? 'current' : '';
    const open = document.createElement('button');
    open.className = 'open';
    open.textContent = c.title;
    open.addEventListener('click', () => void this.host.open(c.id));
    const rename = iconButton('✎', 'Rename', () => {
      const title = prompt('Rename conversation', c.title)?.trim();
      this.host.rename(c.id, title).catch(this.host.onError);
    });
    const remove = iconButton('×', 'Delete', () => void this.host.remove(c.id, c.title).catch(this.host.onError));
    const exportChat = this.host.exportChat;
    if (exportChat) li.append(open, rename, iconButton('⇩', 'Export', () => exportChat(c.id, c.title)), remove);
    else li.append(open, rename, remove);
    return li;
  }
}
