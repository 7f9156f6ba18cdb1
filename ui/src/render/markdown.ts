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

export function renderMarkdown(text: string, doc: Document = document): DocumentFragment {
  const html = DOMPurify.sanitize(marked.parse(text, { async: false }));
  const template = doc.createElement('template');
  template.innerHTML = html;
  for (const pre of template.content.querySelectorAll('pre')) {
    pre.append(copyButton(doc, codeOf(pre.textContent ?? '')));
  }
  return template.content;
}
