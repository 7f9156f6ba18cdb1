import type { Settings } from './types';

/** How a reply was made, stored with it: "draft model · k auto · greedy", or with the seed when
 *  it sampled ("· sample · seed 7"). The shell writes the same (`AppSettings::label` in
 *  crates/protocol); label.test.ts checks both agree on the cases it exports. */
export function replyLabel(s: Settings): string {
  const drafters: Record<Settings['drafter'], string> = {
    none: 'plain',
    lookup: 'prompt lookup',
    model: 'draft model',
    auto: 'draft model + copies',
  };
  const drafter = drafters[s.drafter];
  const k = s.drafter === 'none' ? '' : ` · k ${s.k}`;
  const seed = s.mode !== 'greedy' && s.seed != null ? ` · seed ${s.seed}` : '';
  return `${drafter}${k} · ${s.mode}${seed}`;
}
