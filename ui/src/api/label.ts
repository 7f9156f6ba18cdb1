import type { Settings } from './types';

/** A short note of how a reply was made, stored with it, e.g. "draft model · k auto · greedy". */
export function replyLabel(s: Settings): string {
  const drafter = s.drafter === 'none' ? 'plain' : s.drafter === 'lookup' ? 'prompt lookup' : 'draft model';
  const k = s.drafter === 'none' ? '' : ` · k ${s.k}`;
  return `${drafter}${k} · ${s.mode}`;
}
