// For the tests: the app's own page (index.html) in jsdom, so that views find their parts as
// they do in the window. Each test imports index.html itself (`?raw`) and hands it over: this
// file is read as a module of ui/src by scripts/module-graph.py, which follows only modules.

/** Put the page's body in the document. jsdom has no modal dialogs: theirs open and close by
 *  the `open` attribute, as a browser's do. */
export function loadPage(indexHtml: string): void {
  document.body.innerHTML = new DOMParser().parseFromString(indexHtml, 'text/html').body.innerHTML;
  for (const dialog of document.querySelectorAll('dialog')) {
    dialog.showModal = () => dialog.setAttribute('open', '');
    dialog.close = () => dialog.removeAttribute('open');
  }
}

export const $ = <T extends HTMLElement = HTMLElement>(selector: string) => document.querySelector<T>(selector)!;

/** Let pending promises and zero-delay timers run. */
export const settle = () => new Promise((resolve) => setTimeout(resolve, 0));
