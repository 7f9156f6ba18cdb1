import { FINISH_REASON_NAMES } from './bindings';
import type { ChatMessage, ReplyEvent } from './types';

/** Fold one event into a reply: its tokens, text, stats and how it ended. Kinds this UI does
 *  not know (a newer engine's) are skipped. */
export function applyEvent(reply: ChatMessage, event: ReplyEvent): void {
  switch (event.kind) {
    case 'tokens':
      (reply.tokens ??= []).push(...event.tokens);
      reply.content += event.tokens.map((t) => t.text).join('');
      break;
    case 'done':
      // The content stays the tokens' text, as the history keeps it (`event.text` is the reply
      // as the API releases it: a stop string cut off).
      reply.stats = event.stats;
      reply.finish_reason = FINISH_REASON_NAMES[event.finish_reason];
      break;
    case 'failed':
      reply.finish_reason = 'error';
      break;
    case 'tool': {
      // The whole card each time: the latest replaces the one of its id.
      const cards = (reply.tools ??= []);
      const at = cards.findIndex((c) => c.id === event.card.id);
      if (at >= 0) cards[at] = event.card;
      else cards.push(event.card);
      break;
    }
    default:
      break;
  }
}

/** Whether an event ends its reply. */
export function isLast(event: ReplyEvent): boolean {
  return event.kind === 'done' || event.kind === 'failed';
}
