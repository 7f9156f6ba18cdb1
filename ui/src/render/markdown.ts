// The plain-reading view: markdown, with code highlighted by highlight.js and sanitised by
// DOMPurify (model output is untrusted text).

import DOMPurify from 'dompurify';
import hljs from 'highlight.js/lib/common';
import { Marked } from 'marked';
import { codeOf, copyButton } from './tokens';

const marked = new Marked({
  gfm: true,
  breaks: false,
  renderer: {
    code({ text, lang }) {
      const language = lang && hljs.getLanguage(lang) ? lang : undefined;
      const html = language ? hljs.highlight(text, { language }).value : hljs.highlightAuto(text).value;
      return `<pre class="hljs-block"><code class="hljs">${html}</code></pre>`;
    },
  },
});

/** What model output may contain: text formatting and links, never forms, frames, scripts,
 * styles or image maps (an `<area href>` is a link the app's link handler would not see);
 * links only to the web or mail, and marked to open outside the app. */
const PURIFY = {
  FORBID_TAGS: ['form', 'input', 'button', 'textarea', 'select', 'option', 'iframe', 'frame', 'object', 'embed', 'style', 'link', 'meta', 'base', 'svg', 'math', 'map', 'area'],
  FORBID_ATTR: ['style', 'formaction', 'action', 'srcset', 'ping'],
  ALLOWED_URI_REGEXP: /^(?:https?:|mailto:|#)/i,
};

let hooked = false;

function purify(html: string): string {
  if (!hooked) {
    DOMPurify.addHook('afterSanitizeAttributes', (node) => {
      if (node.tagName === 'A') {
        node.setAttribute('target', '_blank');
        node.setAttribute('rel', 'noopener noreferrer');
      }
    });
    hooked = true;
  }
  return DOMPurify.sanitize(html, PURIFY) as string;
}

export function renderMarkdown(text: string, doc: Document = document): DocumentFragment {
  const html = purify(marked.parse(text, { async: false }));
  const template = doc.createElement('template');
  template.innerHTML = html;
  for (const pre of template.content.querySelectorAll('pre')) {
    pre.append(copyButton(doc, codeOf(pre.textContent ?? '')));
  }
  return template.content;
}

/** The head of `text` that more text can no longer change: its top-level markdown blocks but
 *  the last (which may still grow into a longer paragraph, list or code block), as source
 *  text; '' while there is one block. A streaming view draws the head once and redraws only
 *  the rest. */
export function settledMarkdown(text: string): string {
  const blocks = marked.lexer(text);
  let last = blocks.length - 1;
  while (last >= 0 && blocks[last].type === 'space') last--;
  const head = blocks
    .slice(0, Math.max(0, last))
    .map((b) => b.raw)
    .join('');
  // The lexer normalises line ends; a head that is not the text's own prefix is not settled.
  return text.startsWith(head) ? head : '';
}
