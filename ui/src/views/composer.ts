// The prompt box under the chat: Enter (or Send) sends, Shift+Enter breaks the line, Stop ends
// the reply that streams. Edit puts an earlier question back here, and Send becomes Resend.

import type { ChatMessage } from '../api/types';
import { $in } from './dom';

export interface ComposerParts {
  form: HTMLFormElement;
  prompt: HTMLTextAreaElement;
  send: HTMLButtonElement;
  stop: HTMLButtonElement;
}

export function composerParts(form: HTMLFormElement): ComposerParts {
  return {
    form,
    prompt: $in<HTMLTextAreaElement>(form, '#prompt'),
    send: $in<HTMLButtonElement>(form, '#send'),
    stop: $in<HTMLButtonElement>(form, '#stop'),
  };
}

export interface ComposerHost {
  send(): void;
  stop(): void;
}

export class Composer {
  /** The user message being edited: sending replaces it and everything after it. */
  private editingId: number | null = null;

  constructor(
    private readonly parts: ComposerParts,
    host: ComposerHost,
  ) {
    parts.form.addEventListener('submit', (e) => {
      e.preventDefault();
      host.send();
    });
    parts.prompt.addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && !e.shiftKey) {
        e.preventDefault();
        host.send();
      }
    });
    parts.stop.addEventListener('click', () => host.stop());
  }

  /** What is to be sent, trimmed ('' for nothing). */
  get text(): string {
    return this.parts.prompt.value.trim();
  }

  get editing(): number | null {
    return this.editingId;
  }

  /** Put `message` back in the box, to change and resend. */
  edit(message: ChatMessage): void {
    this.editingId = message.id;
    this.parts.prompt.value = message.content;
    this.parts.prompt.focus();
    this.parts.send.textContent = 'Resend';
  }

  /** The edit is being sent: the button says Send again. */
  endEdit(): void {
    this.editingId = null;
    this.parts.send.textContent = 'Send';
  }

  /** Another conversation is shown: the message being edited was not of it. Only the id is
   *  dropped: the button keeps its word until the next send, as it always has. */
  forgetEdit(): void {
    this.editingId = null;
  }

  /** The question was sent: the box empties. */
  clear(): void {
    this.parts.prompt.value = '';
  }

  /** A question that got no reply comes back, to shorten or resend. */
  giveBack(text: string): void {
    this.parts.prompt.value = text;
  }

  focus(): void {
    this.parts.prompt.focus();
  }

  /** While a reply streams, Stop stands where Send was. */
  setStreaming(on: boolean): void {
    this.parts.send.hidden = on;
    this.parts.stop.hidden = !on;
  }
}
