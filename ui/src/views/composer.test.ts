import { beforeEach, describe, expect, it } from 'vitest';
import { $, loadPage } from '../testing/page';
import indexHtml from '../../index.html?raw';
import { Composer, composerParts } from './composer';

function composer() {
  const calls: string[] = [];
  const view = new Composer(composerParts($<HTMLFormElement>('#composer')), {
    send: () => void calls.push(`send ${view.text}`),
    stop: () => void calls.push('stop'),
  });
  return { view, calls };
}

const key = (init: KeyboardEventInit) => {
  const event = new KeyboardEvent('keydown', { cancelable: true, ...init });
  $('#prompt').dispatchEvent(event);
  return event;
};

describe('the composer', () => {
  beforeEach(() => loadPage(indexHtml));

  it('sends on Enter and on Send; Shift+Enter is a new line', () => {
    const { calls } = composer();
    $<HTMLTextAreaElement>('#prompt').value = '  Say hi  ';
    expect(key({ key: 'Enter' }).defaultPrevented).toBe(true);
    expect(key({ key: 'Enter', shiftKey: true }).defaultPrevented).toBe(false);
    expect(key({ key: 'a' }).defaultPrevented).toBe(false);
    $<HTMLButtonElement>('#send').click();
    expect(calls).toEqual(['send Say hi', 'send Say hi']);
  });

  it('shows Stop instead of Send while a reply streams', () => {
    const { view, calls } = composer();
    const [send, stop] = [$('#send'), $<HTMLButtonElement>('#stop')];
    expect([send.hidden, stop.hidden]).toEqual([false, true]);
    view.setStreaming(true);
    expect([send.hidden, stop.hidden]).toEqual([true, false]);
    stop.click();
    view.setStreaming(false);
    expect([send.hidden, stop.hidden]).toEqual([false, true]);
    expect(calls).toEqual(['stop']);
  });

  it('an edit puts the question back and sends as Resend, until it is sent', () => {
    const { view } = composer();
    view.edit({ id: 4, role: 'user', content: 'Say hi' });
    expect([view.editing, view.text, $('#send').textContent]).toEqual([4, 'Say hi', 'Resend']);
    expect(document.activeElement).toBe($('#prompt'));
    view.endEdit();
    view.clear();
    expect([view.editing, view.text, $('#send').textContent]).toEqual([null, '', 'Send']);
    view.giveBack('word word');
    expect(view.text).toBe('word word');
  });
});
