import type { ChatMessage, ReplyEvent } from './types';

/** Fold one event into a reply: its tokens, text, stats and how it ended. */
export function applyEvent(reply: ChatMessage, event: ReplyEvent): void {
  switch (event.kind) {
    case 'token':
      (reply.tokens ??= []).push(event.token);
      reply.content += event.token.text;
      break;
    case 'done':
      reply.stats = event.stats;
      reply.finish_reason = event.finish_reason;
      break;
    case 'error':
      reply.finish_reason = 'error';
      break;
    default:
      break;
  }
}
