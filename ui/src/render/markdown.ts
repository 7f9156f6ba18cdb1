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
 * styles, media or image maps (an `<area href>` is a link the app's link handler would not
 * see); links only to the web or mail, and marked to open outside the app.
 *
 * Attributes are an allow-list, not a deny-list. Model output never keeps `id`, `name`, `form`,
 * `for`, `popover*`, `data-*` or `aria-*` attributes: the page finds its own parts by id and
 * class, and an element of a reply named like one of them (`<ul id="connections">`) would be
 * found instead (DOM clobbering); `for`, `form`, `popovertarget` and the aria references point
 * at the app's own elements. Classes are kept only where highlight.js wrote them (see the hook). */
const PURIFY = {
  FORBID_TAGS: [
    'form', 'input', 'button', 'textarea', 'select', 'option', 'iframe', 'frame', 'object', 'embed', 'style', 'link',
    'meta', 'base', 'svg', 'math', 'map', 'area', 'audio', 'video', 'source', 'track', 'picture', 'dialog',
  ],
  ALLOWED_ATTR: [
    'href', 'title', 'alt', 'src', 'class', 'lang', 'dir', 'align', 'colspan', 'rowspan', 'scope', 'start', 'reversed',
    'type', 'open', 'datetime', 'cite', 'width', 'height', 'abbr', 'span',
  ],
  ALLOW_DATA_ATTR: false,
  ALLOW_ARIA_ATTR: false,
  ALLOWED_URI_REGEXP: /^(?:https?:|mailto:|#)/i,
};

/** The one image source a reply may keep: a raster image carried in the text itself. Any other
 *  source (https:, a relative path, srcset) would be fetched as the reply is drawn, a beacon
 *  that can carry what the reply saw in its URL; the CSP (`img-src 'self' data:`) blocks it in
 *  the app, but the sanitiser does not lean on it. Such an image is drawn as its alt text. */
const INLINE_IMAGE = /^data:image\/(?:png|gif|jpeg|webp|avif);base64,[a-z0-9+/=\s]*$/i;

/** highlight.js's own classes (`hljs`, `hljs-keyword`, and the `function_` style sub-scopes);
 *  any other class in model output could dress a reply as a part of the app (`tok src-accepted`,
 *  `error`, `note`) or be found by the app's own `.class` lookups. */
const HLJS_CLASS = /^(?:hljs(?:-[a-z0-9_-]+)?|[a-z]+_+)$/i;

// Links open outside the window; sources and classes are checked as above. Added once, when
// the module loads, for every sanitize call.
DOMPurify.addHook('afterSanitizeAttributes', (node) => {
  if (node.tagName === 'A') {
    node.setAttribute('target', '_blank');
    node.setAttribute('rel', 'noopener noreferrer');
  }
  const src = node.getAttribute('src');
  if (src !== null && !(node.tagName === 'IMG' && INLINE_IMAGE.test(src))) node.removeAttribute('src');
  const cls = node.getAttribute('class');
  if (cls !== null) {
    const kept = cls.split(/\s+/).filter((c) => HLJS_CLASS.test(c));
    if (kept.length) node.setAttribute('class', kept.join(' '));
    else node.removeAttribute('class');
  }
});

function purify(html: string): string {
  return DOMPurify.sanitize(html, PURIFY) as string;
}

export function renderMarkdown(text: string, doc: Document = document): DocumentFragment {
  const html = purify(marked.parse(text, { async: false }));
  const template = doc.createElement('template');
  template.innerHTML = html;
  // An image whose source the sanitiser dropped (anything but an inline raster) becomes its
  // alt text: nothing is fetched, and the words are not lost.
  for (const img of template.content.querySelectorAll('img:not([src])')) {
    const alt = img.getAttribute('alt');
    if (alt) img.replaceWith(doc.createTextNode(alt));
    else img.remove();
  }
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
