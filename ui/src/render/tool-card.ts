// A tool call inside a reply, as a card: the server and tool, the arguments, then the question
// (Allow once / Always for this tool / Deny) or what came of it: the result and its time, a
// failure's reason, or why it did not run. The reply's text is split at each card's place, and
// the call's own markup (`<tool_call>…</tool_call>`) is left to the card.

import type { TokenEvent, ToolCard, ToolDecision } from '../api/types';

/** The card's state, for its class and the tests: asking, running, ran, error (the tool said
 *  so), denied, failed or skipped. */
export function cardState(card: ToolCard): string {
  if (!card.outcome) return card.running ? 'running' : 'asking';
  if (card.outcome.kind === 'ran' && card.outcome.is_error) return 'error';
  return card.outcome.kind;
}

/** What became of the call, in words. */
export function outcomeLine(card: ToolCard): string {
  const o = card.outcome;
  if (!o) return card.running ? 'Running…' : 'Run this tool?';
  switch (o.kind) {
    case 'ran': {
      const cut = o.cut_from != null ? ` · cut from ${o.cut_from} characters` : '';
      return `${o.is_error ? 'The tool reported an error' : 'Result'} in ${o.ms} ms${cut}`;
    }
    case 'denied':
      return 'Denied: it did not run, and the model was told so.';
    case 'failed':
      return sentence(o.reason);
    case 'skipped':
      return `Not run: ${o.reason}`;
  }
}

/** A reason (lower case, to follow a colon) as a sentence of its own. */
function sentence(reason: string): string {
  return reason.charAt(0).toUpperCase() + reason.slice(1);
}

const DECISIONS: [ToolDecision, string][] = [
  ['once', 'Allow once'],
  ['always', 'Always for this tool'],
  ['deny', 'Deny'],
];

/** The card's element; `decide` answers its question (none: no buttons, as in history). */
export function toolCardElement(card: ToolCard, decide?: (decision: ToolDecision) => void, doc: Document = document): HTMLElement {
  const element = doc.createElement('section');
  element.className = 'tool-card';
  element.dataset.state = cardState(card);
  element.dataset.call = card.id;
  const head = doc.createElement('header');
  const name = doc.createElement('strong');
  name.textContent = card.tool;
  const server = doc.createElement('span');
  server.className = 'tool-server';
  server.textContent = ` · ${card.server}`;
  const label = doc.createElement('span');
  label.className = 'tool-label';
  label.textContent = 'Tool call ';
  head.append(label, name, server);
  const args = doc.createElement('code');
  args.className = 'tool-arguments';
  args.textContent = typeof card.arguments === 'string' ? card.arguments : JSON.stringify(card.arguments);
  const line = doc.createElement('p');
  line.className = 'tool-outcome';
  // A question drawn from the history has no buttons: its reply (if it still runs) holds them.
  line.textContent = cardState(card) === 'asking' && !decide ? 'Not answered (Stop ends the reply that asks).' : outcomeLine(card);
  element.append(head, args, line);
  if (card.outcome?.kind === 'ran') {
    const result = doc.createElement('pre');
    result.className = 'tool-result';
    result.textContent = card.outcome.text;
    element.append(result);
  }
  if (!card.outcome && !card.running && decide) {
    const buttons = doc.createElement('div');
    buttons.className = 'tool-decision';
    for (const [decision, label] of DECISIONS) {
      const button = doc.createElement('button');
      button.type = 'button';
      button.textContent = label;
      button.dataset.decision = decision;
      button.addEventListener('click', () => {
        for (const b of buttons.querySelectorAll('button')) b.disabled = true;
        decide(decision);
      });
      buttons.append(button);
    }
    element.append(buttons);
  }
  return element;
}

const CALL_OPEN = '<tool_call>';

/** Where a part of a reply's text starts to write its call, or -1: `<tool_call>` markup, or a
 *  call written as a JSON object (`{"name": …, "arguments": …}`), bare or fenced, at its end. */
export function callStart(text: string): number {
  const open = text.indexOf(CALL_OPEN);
  if (open >= 0) return open;
  const end = text.trimEnd();
  if (end.endsWith('```')) {
    const fence = end.lastIndexOf('```', end.length - 4);
    const body = fence >= 0 ? end.slice(end.indexOf('\n', fence) + 1, end.length - 3) : '';
    return fence >= 0 && isCall(body) ? fence : -1;
  }
  if (!end.endsWith('}')) return -1;
  for (let i = end.indexOf('{'); i >= 0; i = end.indexOf('{', i + 1)) {
    if (isCall(end.slice(i))) return i;
  }
  return -1;
}

function isCall(json: string): boolean {
  try {
    const value: unknown = JSON.parse(json);
    return typeof value === 'object' && value !== null && 'name' in value;
  } catch {
    return false;
  }
}

/** The tokens before the call they write (see [`callStart`]); the token the call starts in
 *  keeps the text before it. */
export function withoutCallMarkup(tokens: TokenEvent[]): TokenEvent[] {
  const open = callStart(tokens.map((t) => t.text).join(''));
  if (open < 0) return tokens;
  let from = 0;
  for (let i = 0; i < tokens.length; i++) {
    const end = from + tokens[i].text.length;
    if (open < end) {
      const kept = tokens[i].text.slice(0, open - from);
      return kept ? [...tokens.slice(0, i), { ...tokens[i], text: kept }] : tokens.slice(0, i);
    }
    from = end;
  }
  return tokens;
}

/** The reply's tokens in parts, one before each card's place and the last after them; a part
 *  that ends in a call's markup loses it (the card shows the call). */
export function partsAtCards(tokens: TokenEvent[], cards: ToolCard[]): TokenEvent[][] {
  const parts: TokenEvent[][] = [];
  let from = 0;
  for (const at of [...new Set(cards.map((c) => c.at))].sort((a, b) => a - b)) {
    parts.push(withoutCallMarkup(tokens.slice(from, at)));
    from = Math.max(from, at);
  }
  parts.push(tokens.slice(from));
  return parts;
}
