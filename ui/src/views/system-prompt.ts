// The system prompt dialog: the open conversation's instructions to the model.

import { $in, control } from './dom';

export interface SystemPromptParts {
  /** The header's button that opens the dialog. */
  button: HTMLButtonElement;
  dialog: HTMLDialogElement;
  form: HTMLFormElement;
  cancel: HTMLButtonElement;
}

export function systemPromptParts(button: HTMLButtonElement, dialog: HTMLDialogElement): SystemPromptParts {
  return {
    button,
    dialog,
    form: $in<HTMLFormElement>(dialog, '#system-form'),
    cancel: $in<HTMLButtonElement>(dialog, '#system-cancel'),
  };
}

export interface SystemPromptHost {
  /** The open conversation's system prompt ('' for none, or no conversation). */
  current(): string;
  /** Keep `text` as the open conversation's (a new one when none is open). */
  save(text: string): Promise<void>;
  /** Redraw the conversation, once the dialog has closed. */
  refresh(): Promise<void>;
  onError(error: unknown): void;
}

export class SystemPromptDialog {
  constructor(parts: SystemPromptParts, host: SystemPromptHost) {
    const { button, dialog, form, cancel } = parts;
    const text = control<HTMLTextAreaElement>(form, 'system');
    button.addEventListener('click', () => {
      text.value = host.current();
      dialog.showModal();
    });
    cancel.addEventListener('click', () => dialog.close());
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      void (async () => {
        await host.save(text.value);
        dialog.close();
        await host.refresh();
      })().catch(host.onError);
    });
  }
}
