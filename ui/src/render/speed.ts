// The speed panel: live figures while a reply streams, and a one-line verdict afterwards that
// says why speculation did not pay when it did not.

import type { GenerationStats, StepEvent } from '../api/types';

const pct = (x: number) => `${Math.round(x * 100)}%`;
const times = (x: number) => `${x.toFixed(2)}x`;

export interface LiveFigures {
  tokensPerSecond: string;
  speedup: string;
  acceptance: string;
  k: string;
  /** What the speedup compares against, for the panel to say. */
  against: string;
}

/** Plain steps a speedup figure rests on (the engine's MIN_PLAIN_SAMPLES). */
const MIN_PLAIN_STEPS = 3;

/** The panel's figures after `step`; `drafting` is false when the reply has no drafter, whose
 *  speedup over plain decoding would be a comparison with itself. */
export function liveFigures(step: StepEvent, drafting = true, remote = false): LiveFigures {
  if (remote) return remoteFigures(step);
  return {
    tokensPerSecond: `${step.tokens_per_second.toFixed(1)} tok/s`,
    speedup: !drafting ? '–' : step.speedup_vs_plain == null ? '…' : times(step.speedup_vs_plain),
    acceptance: step.acceptance_rate == null ? '–' : pct(step.acceptance_rate),
    k: step.k === 0 ? 'plain' : String(step.k),
    against: against(step, drafting),
  };
}

/** A remote's figures: the rate measured here; speedup, acceptance and k only as the remote
 *  reports them (another Specula, each step; llama.cpp, acceptance at the end), else a dash. */
function remoteFigures(step: StepEvent): LiveFigures {
  return {
    tokensPerSecond: `${step.tokens_per_second.toFixed(1)} tok/s`,
    speedup: step.speedup_vs_plain == null ? '–' : times(step.speedup_vs_plain),
    acceptance: step.acceptance_rate == null ? '–' : pct(step.acceptance_rate),
    k: step.k === 0 ? '–' : String(step.k),
    against: step.speedup_vs_plain == null ? 'the remote reports no timing of plain decoding' : "the remote's own timing of plain decoding",
  };
}

function against(step: StepEvent, drafting: boolean): string {
  if (!drafting) return 'plain decoding: no drafter, nothing to compare';
  const n = step.plain_steps ?? 0;
  if (step.speedup_vs_plain == null || step.plain_ms_per_token == null) {
    return `timing plain steps in this reply (${n} of ${MIN_PLAIN_STEPS})`;
  }
  return `against plain decoding timed in this reply: ${n} plain steps, median ${step.plain_ms_per_token.toFixed(1)} ms a token`;
}

/** "1.40x faster than plain · 74% accepted · k auto 2-5", or why it did not pay. */
export function summarize(stats: GenerationStats, kSetting: number | 'auto' = 'auto'): string {
  const rate = `${stats.tokens_per_second.toFixed(1)} tok/s`;
  const spec = stats.speculative;
  if (!spec) return `plain decoding · ${rate}`;
  const k = spec.k_max === 0 ? 'k auto: plain throughout' : kRange(spec.k_min, spec.k_max, kSetting);
  const accepted = spec.drafted > 0 ? `${pct(spec.acceptance_rate)} accepted` : 'nothing drafted';
  const speedup = spec.speedup_vs_plain;
  if (speedup == null) return `${rate} · ${accepted} · ${k} · too short to time plain decoding`;
  if (speedup >= 1) return `${times(speedup)} faster than plain · ${accepted} · ${k}`;
  return `${times(speedup)} of plain · ${accepted} · ${k} · ${whyNotFaster(stats)}`;
}

/** A remote engine's reply: the rate measured here, and speculative figures only as far as
 *  the remote reports them ("41.0 tok/s measured here · 72% of the remote's drafts accepted"). */
export function summarizeRemote(stats: GenerationStats): string {
  const parts = [`${stats.tokens_per_second.toFixed(1)} tok/s measured here`];
  const spec = stats.speculative;
  const speedup = spec?.speedup_vs_plain;
  if (speedup != null) parts.push(`${times(speedup)} ${speedup >= 1 ? 'faster than' : 'of'} plain by the remote's timing`);
  if (spec && spec.drafted > 0) parts.push(`${pct(spec.acceptance_rate)} of the remote's drafts accepted`);
  if (!spec) parts.push('the remote reports no drafting');
  return parts.join(' · ');
}

function kRange(min: number, max: number, setting: number | 'auto'): string {
  const range = min === max ? `${max}` : `${min}-${max}`;
  return setting === 'auto' ? `k auto ${range}` : `k ${range}`;
}

/** The likeliest reason a reply was slower than plain decoding. */
export function whyNotFaster(stats: GenerationStats): string {
  const spec = stats.speculative;
  if (!spec) return 'plain decoding';
  if (spec.k_max === 0) return 'auto chose plain decoding: drafting does not pay here';
  if (spec.cost_ratio != null && spec.cost_ratio >= 0.35) return `draft too slow: c = ${spec.cost_ratio.toFixed(2)}`;
  if (spec.drafted > 0 && spec.acceptance_rate < 0.5) return `draft disagrees often: ${pct(spec.acceptance_rate)} accepted`;
  if (stats.generated_tokens < 32) return 'reply too short to repay the probe';
  return 'verifying several tokens costs too much on this device';
}

/** A small SVG line of speedup along the reply, with the 1x line for reference. */
export function sparkline(all: number[], width = 160, height = 36): string {
  // A point per pixel column at most: a long reply's line costs no more to draw than a short one's.
  const values = thin(all, width);
  if (values.length === 0) return `<svg class="spark" width="${width}" height="${height}" aria-hidden="true"></svg>`;
  const top = Math.max(2, ...values);
  const y = (v: number) => (height - 2 - (v / top) * (height - 4)).toFixed(1);
  const x = (i: number) => (values.length === 1 ? width : (i / (values.length - 1)) * width).toFixed(1);
  const points = values.map((v, i) => `${x(i)},${y(v)}`).join(' ');
  return (
    `<svg class="spark" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" role="img" aria-label="speedup along the reply">` +
    `<line class="one" x1="0" x2="${width}" y1="${y(1)}" y2="${y(1)}"/>` +
    `<polyline points="${points}"/></svg>`
  );
}

/** At most `n` of `values`, evenly spaced, keeping the first and the last. */
export function thin(values: number[], n: number): number[] {
  if (values.length <= n) return values;
  return Array.from({ length: n }, (_, i) => values[Math.round((i * (values.length - 1)) / (n - 1))]);
}
