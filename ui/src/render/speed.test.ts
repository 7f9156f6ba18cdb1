import { describe, expect, it } from 'vitest';
import type { GenerationStats, SpeculativeStats } from '../api/types';
import { liveFigures, sparkline, summarize, summarizeRemote, thin, whyNotFaster } from './speed';

const spec = (over: Partial<SpeculativeStats>): SpeculativeStats => ({
  drafter: 'model',
  drafted: 100,
  accepted: 74,
  acceptance_rate: 0.74,
  target_passes: 40,
  tokens_per_pass: 2.6,
  draft_ms: 1000,
  verify_ms: 3000,
  plain_ms_per_token: 100,
  speedup_vs_plain: 1.4,
  predicted_speedup: 1.5,
  cost_ratio: 0.2,
  k_min: 2,
  k_max: 5,
  k_mean: 3.5,
  ...over,
});

const stats = (speculative?: SpeculativeStats, generated = 100): GenerationStats => ({
  prompt_tokens: 20,
  cached_prompt_tokens: 0,
  generated_tokens: generated,
  prefill_ms: 500,
  decode_ms: 7000,
  tokens_per_second: 14.3,
  speculative,
});

describe('a remote reply\'s summary', () => {
  it('gives the rate measured here and only the figures the remote reported', () => {
    expect(summarizeRemote(stats())).toBe('14.3 tok/s measured here · the remote reports no drafting');
    // llama-server: draft counts, no timing of its own.
    const llama = spec({ drafter: 'llama.cpp draft', speedup_vs_plain: null, k_min: 0, k_max: 0, drafted: 40, accepted: 30, acceptance_rate: 0.75 });
    expect(summarizeRemote(stats(llama))).toBe("14.3 tok/s measured here · 75% of the remote's drafts accepted");
    // Another Specula: its own speedup too.
    expect(summarizeRemote(stats(spec({})))).toBe("14.3 tok/s measured here · 1.40x faster than plain by the remote's timing · 74% of the remote's drafts accepted");
  });
});

describe('a remote reply\'s live figures', () => {
  it('show the rate and nothing the remote did not report', () => {
    const step = { k: 0, accepted: 0, generated: 9, tokens_per_second: 31.2, speedup_vs_plain: null, plain_ms_per_token: null, plain_steps: 0, acceptance_rate: null };
    expect(liveFigures(step, true, true)).toEqual({
      tokensPerSecond: '31.2 tok/s',
      speedup: '–',
      acceptance: '–',
      k: '–',
      against: 'the remote reports no timing of plain decoding',
    });
    expect(liveFigures({ ...step, k: 4, speedup_vs_plain: 1.3, acceptance_rate: 0.8 }, true, true).speedup).toBe('1.30x');
  });
});

describe('speed summary', () => {
  it('reads as one line when speculation paid', () => {
    expect(summarize(stats(spec({})))).toBe('1.40x faster than plain · 74% accepted · k auto 2-5');
    expect(summarize(stats(spec({ k_min: 4, k_max: 4 })), 4)).toBe('1.40x faster than plain · 74% accepted · k 4');
  });

  it('says why when it did not pay', () => {
    expect(summarize(stats(spec({ speedup_vs_plain: 0.8, cost_ratio: 0.41 })))).toBe(
      '0.80x of plain · 74% accepted · k auto 2-5 · draft too slow: c = 0.41',
    );
    expect(whyNotFaster(stats(spec({ acceptance_rate: 0.3 })))).toBe('draft disagrees often: 30% accepted');
    expect(whyNotFaster(stats(spec({ k_min: 0, k_max: 0 })))).toMatch(/auto chose plain/);
    expect(whyNotFaster(stats(spec({}), 10))).toMatch(/too short/);
  });

  it('names plain decoding', () => {
    expect(summarize(stats())).toBe('plain decoding · 14.3 tok/s');
  });

  it('formats live figures', () => {
    const step = { k: 0, accepted: 0, generated: 9, tokens_per_second: 9.87, speedup_vs_plain: null, acceptance_rate: null };
    expect(liveFigures({ ...step, plain_steps: 1 })).toEqual({
      tokensPerSecond: '9.9 tok/s',
      speedup: '…',
      acceptance: '–',
      k: 'plain',
      against: 'timing plain steps in this reply (1 of 3)',
    });
    const timed = liveFigures({ ...step, k: 4, speedup_vs_plain: 1.5, plain_ms_per_token: 61.23, plain_steps: 4, acceptance_rate: 0.8 });
    expect(timed).toMatchObject({ speedup: '1.50x', acceptance: '80%', k: '4' });
    expect(timed.against).toBe('against plain decoding timed in this reply: 4 plain steps, median 61.2 ms a token');
  });

  it('shows no speedup for a reply without a drafter', () => {
    const f = liveFigures({ k: 0, accepted: 0, generated: 9, tokens_per_second: 9.87, speedup_vs_plain: null, acceptance_rate: null }, false);
    expect(f.speedup).toBe('–');
    expect(f.against).toMatch(/no drafter/);
  });

  it('draws the speedup line with the 1x reference', () => {
    const svg = sparkline([0.5, 1, 2]);
    expect(svg).toContain('<polyline points="0.0,');
    expect(svg).toContain('class="one"');
  });
});

describe('thin', () => {
  it('keeps short lines whole and long ones to a point per column, ends included', () => {
    expect(thin([1, 2, 3], 160)).toEqual([1, 2, 3]);
    const long = Array.from({ length: 10_000 }, (_, i) => i);
    const kept = thin(long, 160);
    expect(kept).toHaveLength(160);
    expect(kept[0]).toBe(0);
    expect(kept[159]).toBe(9_999);
    const points = sparkline(long).match(/points="([^"]*)"/)![1].split(' ');
    expect(points).toHaveLength(160);
  });
});
