// Small DOM helpers the views share.

/** The element `selector` names inside `root`; a part the page lacks is a mistake of the page. */
export function $in<T extends HTMLElement = HTMLElement>(root: ParentNode, selector: string): T {
  const el = root.querySelector<T>(selector);
  if (!el) throw new Error(`missing ${selector}`);
  return el;
}

/** The control named `name` in `form` (`<input name=…>`, `<select name=…>`). */
export function control<T extends HTMLElement = HTMLInputElement>(form: HTMLFormElement, name: string): T {
  const el = form.elements.namedItem(name);
  if (!(el instanceof HTMLElement)) throw new Error(`missing control ${name}`);
  return el as T;
}

/** A one-character button ("×", "✎") that says what it does to screen readers and on hover. */
export function iconButton(text: string, label: string, onClick: () => void): HTMLButtonElement {
  const b = document.createElement('button');
  b.className = 'icon';
  b.textContent = text;
  b.title = label;
  b.setAttribute('aria-label', label);
  b.addEventListener('click', onClick);
  return b;
}

/** A small worded button under a message ("Edit", "Regenerate"), classed by what it does. */
export function textButton(text: string, name: string, onClick: () => void): HTMLButtonElement {
  const b = document.createElement('button');
  b.type = 'button';
  b.className = `small ${name}`;
  b.textContent = text;
  b.addEventListener('click', onClick);
  return b;
}

export function option(value: string, text: string): HTMLOptionElement {
  const o = document.createElement('option');
  o.value = value;
  o.textContent = text;
  return o;
}
