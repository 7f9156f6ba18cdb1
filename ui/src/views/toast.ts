// The toast at the foot of the window: what just happened ("Exported to …"), or a delete with
// its Undo ("Deleted “Recipes” · Undo"). A delete is undoable
// while its toast shows; when the toast goes (its time is up, it is dismissed, or another delete
// replaces it) the delete becomes final. What was never made final is at the next start.

import { iconButton, textButton } from './dom';

interface Pending {
  timer: ReturnType<typeof setTimeout>;
  expire: () => Promise<void>;
}

export const UNDO_MS = 8000;

export class Toast {
  private pending: Pending | null = null;

  constructor(
    private readonly root: HTMLElement,
    private readonly onError: (error: unknown) => void,
  ) {}

  /** Say `text` for a while. */
  async say(text: string, ms = UNDO_MS): Promise<void> {
    await this.settle();
    const said = document.createElement('span');
    said.textContent = text;
    this.root.replaceChildren(said, iconButton('×', 'Dismiss', () => void this.settle().catch(this.onError)));
    this.root.hidden = false;
    this.pending = { timer: setTimeout(() => void this.settle().catch(this.onError), ms), expire: async () => {} };
  }

  /** Say `text` with Undo. Undo runs `undo`; otherwise `expire` runs once the toast goes. */
  async offerUndo(text: string, undo: () => Promise<void>, expire: () => Promise<void>, ms = UNDO_MS): Promise<void> {
    await this.settle();
    const said = document.createElement('span');
    said.textContent = text;
    const undoButton = textButton('Undo', 'undo', () => {
      this.clear();
      void undo().catch(this.onError);
    });
    const close = iconButton('×', 'Dismiss', () => void this.settle().catch(this.onError));
    this.root.replaceChildren(said, undoButton, close);
    this.root.hidden = false;
    this.pending = { timer: setTimeout(() => void this.settle().catch(this.onError), ms), expire };
  }

  /** End the toast that shows, making its delete final. */
  async settle(): Promise<void> {
    const pending = this.pending;
    this.clear();
    if (pending) await pending.expire();
  }

  private clear(): void {
    if (this.pending) clearTimeout(this.pending.timer);
    this.pending = null;
    this.root.hidden = true;
    this.root.replaceChildren();
  }
}
