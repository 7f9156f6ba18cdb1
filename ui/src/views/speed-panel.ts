// The speed panel under the chat: a reply's live figures (tok/s, speedup over plain decoding,
// acceptance, k, the speedup's sparkline), then the verdict it ended with.

import type { GenerationStats, StepEvent } from '../api/types';
import { liveFigures, sparkline } from '../render/speed';
import { $in } from './dom';

export interface SpeedParts {
  root: HTMLElement;
  speedupFigure: HTMLElement;
  spark: HTMLElement;
  summary: HTMLElement;
}

export function speedParts(root: HTMLElement): SpeedParts {
  return { root, speedupFigure: $in(root, '#speedup-figure'), spark: $in(root, '#spark'), summary: $in(root, '#summary') };
}

/** Each step's figures are kept, and drawn when the reply paints. */
export class SpeedPanel {
  private latest: StepEvent | null = null;
  private speedups: number[] = [];
  /** Whether the reply drafts (else a speedup over plain would compare plain with itself). */
  private drafting = false;
  private remote = false;

  constructor(private readonly parts: SpeedParts) {}

  /** A reply starts: the panel shows, cleared, for its figures. */
  begin(drafting: boolean, remote: boolean): void {
    this.latest = null;
    this.speedups = [];
    this.drafting = drafting;
    this.remote = remote;
    const { root, summary, spark } = this.parts;
    root.hidden = false;
    summary.textContent = '';
    spark.innerHTML = '';
    for (const el of root.querySelectorAll('[data-figure]')) el.textContent = '–';
  }

  /** Another conversation is shown: the figures were another reply's. */
  hide(): void {
    this.parts.root.hidden = true;
  }

  step(step: StepEvent): void {
    this.latest = step;
    if (step.speedup_vs_plain != null) this.speedups.push(step.speedup_vs_plain);
  }

  paint(): void {
    if (!this.latest) return;
    const figures = liveFigures(this.latest, this.drafting, this.remote);
    const set = (name: string, value: string) => {
      const el = this.parts.root.querySelector(`[data-figure="${name}"]`);
      if (el && el.textContent !== value) el.textContent = value;
    };
    set('tps', figures.tokensPerSecond.replace(' tok/s', ''));
    set('speedup', figures.speedup);
    set('acceptance', figures.acceptance);
    set('k', figures.k);
    this.parts.speedupFigure.title = figures.against;
    if (this.speedups.length) this.parts.spark.innerHTML = sparkline(this.speedups);
  }

  /** The reply ended: the panel shows the figures stored with it (the last step event
   *  precedes the step that ended the reply), and `verdict` below them. */
  finish(stats: GenerationStats, verdict: string): void {
    const spec = stats.speculative;
    this.latest = {
      k: this.latest?.k ?? 0,
      accepted: this.latest?.accepted ?? 0,
      generated: stats.generated_tokens,
      tokens_per_second: stats.tokens_per_second,
      speedup_vs_plain: spec?.speedup_vs_plain ?? null,
      plain_ms_per_token: spec?.plain_ms_per_token ?? null,
      plain_steps: spec?.plain_steps ?? 0,
      acceptance_rate: spec && spec.drafted > 0 ? spec.acceptance_rate : null,
    };
    this.paint();
    this.parts.summary.textContent = verdict;
  }
}
