// Syntax colours inside the provenance view's code blocks: the token spans keep their
// backgrounds (where each token came from) and their text gets highlight.js's foreground
// colours, so code reads as code and its provenance stays visible, in one view.

import hljs from 'highlight.js/lib/common';

/** highlight.js's own classes: nothing else from its output becomes a class here. */
const HLJS_CLASS = /^(?:hljs-[a-z0-9_-]+|[a-z]+_+)$/i;

/** The syntax class of each character of `code` ('' for plain text), as highlight.js colours
 *  it: in `language` when it knows it, otherwise in the language it guesses. */
export function syntaxClasses(code: string, language: string, doc: Document = document): string[] {
  const known = language && hljs.getLanguage(language) ? language : undefined;
  const html = known ? hljs.highlight(code, { language: known }).value : hljs.highlightAuto(code).value;
  // highlight.js escapes the code it was given, so its output parses back to the same text.
  const template = doc.createElement('template');
  template.innerHTML = html;
  const classes: string[] = [];
  const walk = (node: Node, inherited: string): void => {
    if (node.nodeType === Node.TEXT_NODE) {
      for (let i = 0; i < (node.textContent ?? '').length; i++) classes.push(inherited);
      return;
    }
    const own = node instanceof Element ? (node.getAttribute('class') ?? '').split(/\s+/).filter((c) => HLJS_CLASS.test(c)) : [];
    const cls = own.length ? own.join(' ') : inherited;
    node.childNodes.forEach((child) => walk(child, cls));
  };
  walk(template.content, '');
  // A mismatch would colour the wrong characters: then none are coloured.
  return classes.length === code.length ? classes : code.split('').map(() => '');
}

/** Colour a drawn code block (`code`'s children are token spans, the fence lines included):
 *  each span's text is cut into runs of one syntax class, each run a child span. Drawing it
 *  again (the block grew) first flattens what an earlier pass added. */
export function colourCodeBlock(code: HTMLElement, doc: Document = document): void {
  const spans = Array.from(code.children).filter((c): c is HTMLElement => c.classList.contains('tok'));
  for (const span of spans) if (span.childElementCount) span.textContent = span.textContent;
  const text = spans.map((s) => s.textContent ?? '').join('');
  // The opening fence's own run of backticks (three or more), then its language.
  const open = text.match(/^[ \t]*(`{3,})([^\n`]*)\n/);
  if (!open) return;
  const start = open[0].length;
  const close = text.slice(start).search(new RegExp(`\\n?[ \\t]*${open[1]}\`*[ \\t]*\\n?$`));
  const end = close < 0 ? text.length : start + close;
  const classes = syntaxClasses(text.slice(start, end), open[2].trim().split(/\s+/)[0] ?? '', doc);
  let offset = 0;
  for (const span of spans) {
    const piece = span.textContent ?? '';
    const from = offset;
    offset += piece.length;
    if (offset <= start || from >= end) continue;
    const runs: { cls: string; text: string }[] = [];
    for (let i = 0; i < piece.length; i++) {
      const at = from + i;
      const cls = at >= start && at < end ? classes[at - start] : '';
      const last = runs[runs.length - 1];
      if (last && last.cls === cls) last.text += piece[i];
      else runs.push({ cls, text: piece[i] });
    }
    if (runs.every((r) => !r.cls)) continue;
    span.replaceChildren(
      ...runs.map((run) => {
        if (!run.cls) return doc.createTextNode(run.text);
        const inner = doc.createElement('span');
        inner.className = run.cls;
        inner.textContent = run.text;
        return inner;
      }),
    );
  }
}
