// The provenance view of a reply: one span per token, coloured by where it came from.
// Fenced code stays in <pre> blocks (with a copy button) so code keeps its shape; syntax
// colours are left to the plain-reading view, because provenance colours use the same pixels.

import type { Source, TokenEvent } from '../api/types';

export const SOURCE_LABELS: Record<Source, string> = {
  accepted: 'draft accepted',
  resampled: 'target resampled',
  bonus: 'target bonus',
  target: 'plain target',
};

/** What hovering a token says: its class, p, q and the chance the target had to keep it. */
export function tokenTitle(token: TokenEvent): string {
  const parts = [SOURCE_LABELS[token.source]];
  if (token.p !== undefined) parts.push(`p ${token.p.toFixed(3)}`);
  if (token.q !== undefined) parts.push(`q ${token.q.toFixed(3)}`);
  const accept = acceptanceProbability(token);
  if (accept !== undefined) parts.push(`accept min(1, p/q) = ${accept.toFixed(3)}`);
  return parts.join(' · ');
}

/** min(1, p/q), the probability that the sampled acceptance rule keeps a drafted token. */
export function acceptanceProbability(token: TokenEvent): number | undefined {
  if (token.p === undefined || token.q === undefined || token.q <= 0) return undefined;
  return Math.min(1, token.p / token.q);
}

interface Piece {
  token: TokenEvent;
  text: string;
}

interface Block {
  code: boolean;
  pieces: Piece[];
}

/** Cut the tokens into text and fenced-code blocks; a token that straddles a fence line is split. */
export function blocksOf(tokens: TokenEvent[]): Block[] {
  const text = tokens.map((t) => t.text).join('');
  // Character offsets where a block starts: the start of an opening fence line, and the end
  // of a closing fence line.
  const cuts: number[] = [];
  let inCode = false;
  const fence = /^[ \t]*```.*$/gm;
  for (let m = fence.exec(text); m; m = fence.exec(text)) {
    if (!inCode) cuts.push(m.index);
    else cuts.push(Math.min(text.length, m.index + m[0].length + 1));
    inCode = !inCode;
  }
  const blocks: Block[] = [];
  let offset = 0;
  let cutIndex = 0;
  let current: Block = { code: false, pieces: [] };
  const startBlock = () => {
    if (current.pieces.length) blocks.push(current);
    current = { code: !current.code, pieces: [] };
  };
  for (const token of tokens) {
    let rest = token.text;
    while (cutIndex < cuts.length && cuts[cutIndex] < offset + rest.length) {
      const head = rest.slice(0, cuts[cutIndex] - offset);
      if (head) current.pieces.push({ token, text: head });
      offset += head.length;
      rest = rest.slice(head.length);
      startBlock();
      cutIndex++;
    }
    if (cutIndex < cuts.length && cuts[cutIndex] === offset && rest) {
      startBlock();
      cutIndex++;
    }
    current.pieces.push({ token, text: rest });
    offset += rest.length;
  }
  if (current.pieces.length) blocks.push(current);
  return blocks;
}

function tokenSpan(doc: Document, piece: Piece): HTMLSpanElement {
  const span = doc.createElement('span');
  span.className = `tok src-${piece.token.source}`;
  span.textContent = piece.text;
  span.title = tokenTitle(piece.token);
  span.dataset.source = piece.token.source;
  if (piece.token.p !== undefined) span.dataset.p = String(piece.token.p);
  if (piece.token.q !== undefined) span.dataset.q = String(piece.token.q);
  return span;
}

/** The code inside a fenced block, without its fence lines: what the copy button copies. */
export function codeOf(blockText: string): string {
  return blockText
    .replace(/^[ \t]*```[^\n]*\n?/, '')
    .replace(/\n?[ \t]*```[ \t]*\n?$/, '')
    .replace(/\n$/, '');
}

export function renderTokens(tokens: TokenEvent[], doc: Document = document): DocumentFragment {
  const fragment = doc.createDocumentFragment();
  for (const block of blocksOf(tokens)) {
    if (!block.code) {
      const div = doc.createElement('div');
      div.className = 'tokens';
      for (const piece of block.pieces) div.append(tokenSpan(doc, piece));
      fragment.append(div);
      continue;
    }
    const pre = doc.createElement('pre');
    pre.className = 'tokens code';
    const code = doc.createElement('code');
    for (const piece of block.pieces) code.append(tokenSpan(doc, piece));
    pre.append(code, copyButton(doc, codeOf(block.pieces.map((p) => p.text).join(''))));
    fragment.append(pre);
  }
  return fragment;
}

export function copyButton(doc: Document, text: string): HTMLButtonElement {
  const button = doc.createElement('button');
  button.className = 'copy';
  button.type = 'button';
  button.textContent = 'Copy';
  button.addEventListener('click', () => {
    void navigator.clipboard?.writeText(text).then(
      () => (button.textContent = 'Copied'),
      () => (button.textContent = 'Copy failed'),
    );
  });
  return button;
}
