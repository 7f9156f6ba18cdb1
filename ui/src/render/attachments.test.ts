import { describe, expect, it } from 'vitest';
import { splitAttachments } from './attachments';

describe('files inlined into a question', () => {
  it('come apart from its text, in order, whatever backticks they hold', () => {
    const content =
      'Summarise both.\n\nFile: report.pdf (2 pages, text extracted)\n```\nPage one.\n```' +
      '\n\nFile: notes.md\n````md\nA fence: ```js\nx\n```\n````';
    const { text, files } = splitAttachments(content);
    expect(text).toBe('Summarise both.');
    expect(files).toEqual([
      { title: 'report.pdf (2 pages, text extracted)', text: 'Page one.' },
      { title: 'notes.md', text: 'A fence: ```js\nx\n```' },
    ]);
  });

  it('leave a message that only looks like one alone', () => {
    for (const content of ['plain', 'See\n\nFile: x.txt\n```\nnot closed', 'A\n\nFile: x.txt\n```\ny\n```\nand more text']) {
      expect(splitAttachments(content)).toEqual({ text: content, files: [] });
    }
  });
});
