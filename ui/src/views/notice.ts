// The notice above the chat: what went wrong, until the user dismisses it or the next send.

import { toBackendError } from '../api/types';
import { iconButton } from './dom';

export class NoticeView {
  /** Called when the user dismisses a notice (the backend forgets the ones it keeps). */
  onDismiss: () => void = () => {};

  constructor(private readonly root: HTMLElement) {}

  show(error: unknown): void {
    const e = toBackendError(error);
    this.root.hidden = false;
    this.root.dataset.code = e.code;
    const text = document.createElement('span');
    text.textContent = e.message;
    const close = iconButton('×', 'Dismiss', () => {
      this.clear();
      this.onDismiss();
    });
    close.className = 'icon dismiss';
    this.root.replaceChildren(text, close);
  }

  clear(): void {
    this.root.hidden = true;
    this.root.replaceChildren();
  }
}
