// Files inlined into a user message (crates/attach `inline`: "\n\nFile: NAME[ (N pages, text
// extracted)]" then the text in a fence longer than any backtick run in it), drawn as folded
// blocks under the question instead of pages of text in its bubble.

export interface InlinedFile {
  /** "report.pdf (40 pages, text extracted)" */
  title: string;
  text: string;
}

const FIRST = /\n\nFile: [^\n]+\n`{3,}/;
const HEAD = /^\n\nFile: ([^\n]+)\n(`{3,})[^\n`]*\n/;

/** The message's own text, and the files inlined after it, in order. A message whose end is
 *  not a run of such blocks is all text. */
export function splitAttachments(content: string): { text: string; files: InlinedFile[] } {
  const whole = { text: content, files: [] };
  const first = content.search(FIRST);
  if (first < 0) return whole;
  const files: InlinedFile[] = [];
  let at = first;
  while (at < content.length) {
    const head = HEAD.exec(content.slice(at));
    if (!head) return whole;
    const start = at + head[0].length;
    // The fence is longer than any run of backticks in the file: its first line-start is the end.
    const close = content.indexOf(`\n${head[2]}`, start - 1);
    if (close < 0) return whole;
    files.push({ title: head[1], text: content.slice(start, close) });
    at = close + 1 + head[2].length;
  }
  return { text: content.slice(0, first), files };
}

/** A file under its question: its name, its text folded. */
export function inlinedFileElement(file: InlinedFile, doc: Document = document): HTMLElement {
  const details = doc.createElement('details');
  details.className = 'attached-file';
  const summary = doc.createElement('summary');
  summary.textContent = `File: ${file.title}`;
  const pre = doc.createElement('pre');
  pre.textContent = file.text;
  details.append(summary, pre);
  return details;
}
