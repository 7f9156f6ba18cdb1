import { describe, expect, it } from 'vitest';
import { listenForShortcuts, type ShortcutHost } from './shortcuts';

/** A document of its own for each case: the listener stays on the document it was given. */
function setUp(streaming = true) {
  const document = window.document.implementation.createHTMLDocument();
  document.body.innerHTML = '<textarea id="prompt"></textarea><input id="search" /><dialog><input id="in-dialog" /></dialog>';
  const prompt = document.querySelector<HTMLTextAreaElement>('#prompt')!;
  const calls: unknown[] = [];
  const host: ShortcutHost = {
    newChat: () => void calls.push('new'),
    search: () => void calls.push('search'),
    stop: () => (calls.push('stop'), streaming),
    editLast: () => (calls.push('edit'), true),
    sibling: (step) => (calls.push(['sibling', step]), true),
  };
  listenForShortcuts(document, prompt, host);
  const press = (target: Element, key: string, mods: KeyboardEventInit = {}) => {
    const e = new KeyboardEvent('keydown', { key, bubbles: true, cancelable: true, ...mods });
    target.dispatchEvent(e);
    return e.defaultPrevented;
  };
  return { document, prompt, calls, press };
}

describe('the keyboard', () => {
  it('opens a new chat, finds the search, stops a reply and edits the last question', () => {
    const { document, prompt, calls, press } = setUp();
    expect(press(document.body, 'O', { ctrlKey: true, shiftKey: true })).toBe(true);
    expect(press(document.body, 'o', { metaKey: true, shiftKey: true })).toBe(true);
    expect(press(document.body, 'k', { ctrlKey: true })).toBe(true);
    expect(press(document.body, 'Escape')).toBe(true);
    expect(press(prompt, 'ArrowUp')).toBe(true);
    prompt.value = 'typing';
    expect(press(prompt, 'ArrowUp'), 'Up in a composer with text moves the caret').toBe(false);
    expect(calls).toEqual(['new', 'new', 'search', 'stop', 'edit']);
  });

  it('moves between branches with Ctrl+Left/Right, except where Ctrl+arrows move by word', () => {
    const { document, prompt, calls, press } = setUp();
    expect(press(document.body, 'ArrowLeft', { ctrlKey: true })).toBe(true);
    expect(press(prompt, 'ArrowRight', { ctrlKey: true }), 'an empty composer').toBe(true);
    prompt.value = 'some words';
    expect(press(prompt, 'ArrowLeft', { ctrlKey: true })).toBe(false);
    expect(press(document.querySelector('#search')!, 'ArrowLeft', { ctrlKey: true })).toBe(false);
    expect(calls).toEqual([['sibling', -1], ['sibling', 1]]);
  });

  it('leaves every key to an open dialog, and Esc to the page when no reply streams', () => {
    const { document, calls, press } = setUp(false);
    expect(press(document.body, 'Escape')).toBe(false);
    document.querySelector('dialog')!.setAttribute('open', '');
    expect(press(document.querySelector('#in-dialog')!, 'Escape')).toBe(false);
    expect(press(document.body, 'O', { ctrlKey: true, shiftKey: true })).toBe(false);
    expect(press(document.body, 'ArrowLeft', { ctrlKey: true })).toBe(false);
    expect(calls).toEqual(['stop']);
  });
});
