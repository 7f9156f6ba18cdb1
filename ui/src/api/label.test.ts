import { describe, expect, it } from 'vitest';
import { LABEL_CASES } from './bindings';
import { replyLabel } from './label';

describe('replyLabel', () => {
  it('labels a reply as the shell does (the cases come from the Rust definition)', () => {
    expect(LABEL_CASES.length).toBeGreaterThan(3);
    for (const [settings, label] of LABEL_CASES) expect(replyLabel(settings)).toBe(label);
  });
});
