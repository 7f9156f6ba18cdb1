import { beforeEach, describe, expect, it } from 'vitest';
import type { AttachedFile } from '../api/types';
import { $, loadPage } from '../testing/page';
import indexHtml from '../../index.html?raw';
import { Attachments } from './attachments';

const read = async (name: string, bytes: Uint8Array): Promise<AttachedFile> => {
  if (name.endsWith('.png')) throw { code: 'invalid_request', message: `${name}: it is not a text file (binary content)` };
  const tokens = bytes.length;
  return { name, what: 'text', size: `${bytes.length} bytes`, tokens, context: 100, block: `\n\nFile: ${name}\n\`\`\`\n${new TextDecoder().decode(bytes)}\n\`\`\`` };
};

function attachments(): Attachments {
  return new Attachments(
    { form: $<HTMLFormElement>('#composer'), chips: $('#attachments'), button: $<HTMLButtonElement>('#attach-button'), input: $<HTMLInputElement>('#attach-input') },
    { read },
  );
}

describe('files attached to the message being written', () => {
  beforeEach(() => loadPage(indexHtml));

  it('show as chips, refusals in red, and only the accepted ones are sent', async () => {
    const files = attachments();
    expect($('#attach-button').hidden).toBe(false);
    await files.add([new File(['hello'], 'a.txt'), new File([new Uint8Array([0, 1])], 'b.png')]);
    const chips = [...document.querySelectorAll('#attachments .attachment')];
    expect(chips.map((c) => c.className)).toEqual(['attachment', 'attachment refused']);
    expect(chips[0].textContent).toContain('a.txttext · 5 bytes · 5 tokens');
    expect(chips[1].textContent).toContain('not a text file');
    expect(files.blocks()).toBe('\n\nFile: a.txt\n```\nhello\n```');
    expect(files.refusal()).toBeNull();
    chips[0].querySelector('button')!.click();
    expect(files.blocks()).toBe('');
    files.clear();
    expect($('#attachments').hidden).toBe(true);
  });

  it('refuse a message whose files together do not fit the context, with the counts', async () => {
    const files = attachments();
    await files.add([new File(['x'.repeat(60)], 'a.txt'), new File(['y'.repeat(60)], 'b.txt')]);
    expect(files.refusal()).toBe('The attached files are 120 tokens together, and the context holds 100: take one off, or attach a part.');
  });
});
