// The keyboard: Ctrl/Cmd+Shift+O a new chat, Ctrl/Cmd+K the search, Esc stops the reply, Up in
// an empty composer edits the last question, Ctrl+Left/Right moves between the branches of the
// last message that has them.

export interface ShortcutHost {
  newChat(): void;
  search(): void;
  /** Stop the reply that streams; false when none does. */
  stop(): boolean;
  /** Edit the last question; false when there is none. */
  editLast(): boolean;
  /** Show the previous (-1) or next (1) branch; false when there is none that way. */
  sibling(step: -1 | 1): boolean;
}

export function listenForShortcuts(doc: Document, prompt: HTMLTextAreaElement, host: ShortcutHost): void {
  doc.addEventListener('keydown', (e) => {
    if (handle(e, prompt, host)) e.preventDefault();
  });
}

/** Whether `e` was a shortcut, and done. */
function handle(e: KeyboardEvent, prompt: HTMLTextAreaElement, host: ShortcutHost): boolean {
  // An open dialog has the keyboard (Esc closes it): nothing behind it changes meanwhile. Nor
  // does a key that composes a character (an input method's).
  if (e.isComposing || prompt.ownerDocument.querySelector('dialog[open]')) return false;
  const command = e.ctrlKey || e.metaKey;
  const key = e.key.toLowerCase();
  if (command && e.shiftKey && key === 'o') return host.newChat(), true;
  if (command && !e.shiftKey && key === 'k') return host.search(), true;
  if (e.key === 'Escape') return host.stop();
  const inEmptyPrompt = e.target === prompt && prompt.value === '';
  if (e.key === 'ArrowUp' && inEmptyPrompt && !command) return host.editLast();
  // Ctrl+Left/Right moves by word in a text field with text: the branches only elsewhere.
  const typing = e.target instanceof HTMLInputElement || (e.target instanceof HTMLTextAreaElement && !inEmptyPrompt);
  if (e.ctrlKey && !typing && (e.key === 'ArrowLeft' || e.key === 'ArrowRight')) return host.sibling(e.key === 'ArrowLeft' ? -1 : 1);
  return false;
}
