// Files attached to the message being written: picked (Attach…) or dropped on the composer,
// each read by the shell (its text, its tokens by the target's tokenizer) and shown as a chip:
// name, what it is, its size and tokens, and × to take it off. A file the shell refuses (binary,
// unreadable, too long for the context) stays as a red chip with the reason and its counts,
// and is not sent. Sending appends the files' blocks to the message.

import type { AttachedFile } from '../api/types';
import { toBackendError } from '../api/types';

export interface AttachmentParts {
  form: HTMLFormElement;
  chips: HTMLElement;
  button: HTMLButtonElement;
  input: HTMLInputElement;
}

export interface AttachmentHost {
  /** Read a file for the message (the shell's `read_attachment`). */
  read(name: string, bytes: Uint8Array): Promise<AttachedFile>;
}

type Chip = { file: AttachedFile } | { name: string; refused: string };

export class Attachments {
  private chips: Chip[] = [];

  constructor(
    private readonly parts: AttachmentParts,
    private readonly host: AttachmentHost,
  ) {
    parts.button.hidden = false;
    parts.button.addEventListener('click', () => parts.input.click());
    parts.input.addEventListener('change', () => {
      void this.add([...(parts.input.files ?? [])]).finally(() => (parts.input.value = ''));
    });
    parts.form.addEventListener('dragover', (e) => {
      if (!e.dataTransfer?.types.includes('Files')) return;
      e.preventDefault();
      parts.form.classList.add('dropping');
    });
    parts.form.addEventListener('dragleave', () => parts.form.classList.remove('dropping'));
    parts.form.addEventListener('drop', (e) => {
      parts.form.classList.remove('dropping');
      if (!e.dataTransfer?.files.length) return;
      e.preventDefault();
      void this.add([...e.dataTransfer.files]);
    });
  }

  /** Read each file and show its chip (a refusal too), in the order given. */
  async add(files: File[]): Promise<void> {
    for (const file of files) {
      try {
        this.chips.push({ file: await this.host.read(file.name, await bytesOf(file)) });
      } catch (e) {
        this.chips.push({ name: file.name, refused: toBackendError(e).message });
      }
      this.draw();
    }
  }

  /** What the files add to the message: their blocks, in order (refused ones are not sent). */
  blocks(): string {
    return this.accepted().map((f) => f.block).join('');
  }

  /** Why the message cannot go as it is: the files together do not fit the context. */
  refusal(): string | null {
    const files = this.accepted();
    const context = files.find((f) => f.context != null)?.context;
    const tokens = files.reduce((sum, f) => sum + (f.tokens ?? 0), 0);
    if (context == null || tokens < context) return null;
    return `The attached files are ${tokens.toLocaleString('en-US')} tokens together, and the context holds ${context.toLocaleString('en-US')}: take one off, or attach a part.`;
  }

  clear(): void {
    this.chips = [];
    this.draw();
  }

  private accepted(): AttachedFile[] {
    return this.chips.flatMap((c) => ('file' in c ? [c.file] : []));
  }

  private draw(): void {
    this.parts.chips.hidden = this.chips.length === 0;
    this.parts.chips.replaceChildren(...this.chips.map((chip, i) => this.chip(chip, i)));
  }

  private chip(chip: Chip, index: number): HTMLElement {
    const element = document.createElement('span');
    element.className = 'attachment';
    const name = document.createElement('b');
    const note = document.createElement('span');
    note.className = 'note';
    if ('file' in chip) {
      const f = chip.file;
      name.textContent = f.name;
      const tokens = f.tokens != null ? ` · ${f.tokens.toLocaleString('en-US')} tokens` : '';
      note.textContent = `${f.what} · ${f.size}${tokens}`;
      element.dataset.tokens = String(f.tokens ?? '');
    } else {
      element.classList.add('refused');
      element.title = chip.refused;
      name.textContent = chip.name;
      note.textContent = chip.refused;
    }
    const remove = document.createElement('button');
    remove.type = 'button';
    remove.textContent = '×';
    remove.setAttribute('aria-label', `Take off ${name.textContent}`);
    remove.addEventListener('click', () => {
      this.chips.splice(index, 1);
      this.draw();
    });
    element.append(name, note, remove);
    return element;
  }
}

/** A file's bytes (FileReader: every webview has it). */
function bytesOf(file: File): Promise<Uint8Array> {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(new Uint8Array(reader.result as ArrayBuffer));
    reader.onerror = () => reject(reader.error ?? new Error(`${file.name} could not be read`));
    reader.readAsArrayBuffer(file);
  });
}
