// A reply while it streams: its element in the chat, drawn from the engine's events, with the
// speed panel beside it. Painting is batched (render/stream.ts): the text, the speed figures
// and the scroll move together a few times a second, however fast tokens come.

import type { ChatMessage, GenerationStats, Reasoning, ReplyEvent, ReplyHandle, StepEvent, TokenEvent, ToolCard, Trim } from '../api/types';
import { ReplyStream } from '../render/stream';
import { toolCardElement, withoutCallMarkup } from '../render/tool-card';
import { ThinkingBlock } from '../render/thinking';
import type { ChatView } from './chat';
import type { SpeedPanel } from './speed-panel';

export interface LiveReplyOptions {
  colours: boolean;
  /** Whether the reply drafts, and whether a remote engine writes it (the panel's figures). */
  drafting: boolean;
  remote: boolean;
  /** The verdict under the panel once the reply is done. */
  verdict(stats: GenerationStats): string;
  /** A failure, or a reply the history could not keep. */
  onNotice(error: unknown): void;
}

export class LiveReply {
  /** Set once the backend has started the reply: what Stop cancels. */
  handle: ReplyHandle | null = null;
  /** The reply's whole element, kept to be put back when its chat is drawn again. */
  private readonly element: HTMLElement;
  private readonly summary: HTMLElement;
  private readonly body: HTMLElement;
  /** Where tokens are drawn: the reply's body, then, after each tool card, the part below it. */
  private stream: ReplyStream;
  private part: HTMLElement;
  /** The tool calls' cards, by call id. */
  private readonly cards = new Map<string, HTMLElement>();
  /** A reasoning model's thinking, once the engine says the reply thinks (each round after a
   *  tool result may think again: a new block above its part); tokens go there while
   *  `thinking` is true. */
  private block: ThinkingBlock | null = null;
  /** The part `block` sits above: a part without one gets its own when its round thinks. */
  private blockPart: HTMLElement | null = null;
  private thinking = false;
  /** Whether the answer has drawn any text (before it, whitespace after the thinking is not).
   *  True from the start for a reply that does not think. */
  private answerBegun = true;
  /** The latest trim, marked again when the reply's chat is drawn again. */
  private trim: Trim | null = null;
  /** The latest live figures, for the speed panel when its chat is shown again. */
  private lastStep: StepEvent | null = null;

  constructor(
    private readonly chat: Pick<ChatView, 'startReply' | 'follow' | 'markTrim' | 'adoptReply'>,
    private readonly panel: SpeedPanel,
    private readonly options: LiveReplyOptions,
  ) {
    const message: ChatMessage = { id: -1, role: 'assistant', content: '', tokens: [] };
    const live = chat.startReply(message);
    this.element = live.element;
    this.summary = live.summary;
    this.body = live.body;
    panel.begin(options.drafting, options.remote);
    this.part = live.body;
    this.stream = this.streamInto(live.body);
  }

  private streamInto(element: HTMLElement): ReplyStream {
    return new ReplyStream(element, {
      colours: this.options.colours,
      onPaint: () => {
        if (this.shown()) this.panel.paint();
        this.follow();
      },
    });
  }

  /** Its chat was drawn again from the history (left and opened again): back in its place, as
   *  it is now, still streaming, its questions still answerable. */
  reattach(): void {
    this.chat.adoptReply(this.element, this.handle?.messageId);
    if (this.trim) this.chat.markTrim(this.trim);
    // The speed panel is the shown chat's: it says this reply's figures again.
    this.panel.begin(this.options.drafting, this.options.remote);
    if (this.lastStep) this.panel.step(this.lastStep);
    this.panel.paint();
  }

  /** Whether the reply is in the window: another chat may be shown while it streams, and that
   *  chat's view is not the reply's to scroll or mark. */
  private shown(): boolean {
    return this.element.isConnected;
  }

  private follow(): void {
    if (this.shown()) this.chat.follow();
  }

  onEvent(event: ReplyEvent): void {
    if (event.kind === 'prefill') {
      // A long prompt takes a while to read; say how far it got until the first token.
      this.summary.textContent = `reading the prompt · ${Math.floor((100 * event.done) / Math.max(1, event.total))}%`;
    } else if (event.kind === 'trimmed') {
      this.trim = event.trim;
      if (this.shown()) this.chat.markTrim(event.trim);
    } else if (event.kind === 'reasoning') {
      this.think(event.reasoning);
    } else if (event.kind === 'tokens') {
      if (this.summary.textContent) this.summary.textContent = '';
      if (this.thinking) this.block?.push(event.tokens);
      else for (const token of event.tokens) this.answer(token);
    } else if (event.kind === 'step') {
      this.lastStep = event.step;
      // Another chat may be shown: the panel is its reply's.
      if (this.shown()) this.panel.step(event.step);
      this.stream.schedule();
    } else if (event.kind === 'done') {
      if (this.thinking && event.stats.reasoning) this.block?.end(event.stats.reasoning, false);
      this.stream.finish();
      if (this.shown()) this.panel.finish(event.stats, this.options.verdict(event.stats));
    } else if (event.kind === 'failed') {
      if (this.thinking) this.block?.stop();
      this.stream.finish();
      this.options.onNotice(event.error);
    } else if (event.kind === 'tool') {
      this.toolCard(event.card);
    } else if (event.kind === 'unsaved') {
      // The history could not keep it (a full disk): the reply goes on, drawn here only.
      this.options.onNotice(event.error);
    }
  }

  /** A tool call's card, new or changed. A new one ends the text above it (its call's markup
   *  left to the card); what the model says after the result is drawn below it. */
  private toolCard(card: ToolCard): void {
    const handle = this.handle;
    const decide = handle?.decide
      ? (decision: Parameters<NonNullable<ReplyHandle['decide']>>[1]) =>
          void handle.decide?.(card.id, decision).catch(this.options.onNotice)
      : undefined;
    const element = toolCardElement(card, decide, this.body.ownerDocument);
    const shown = this.cards.get(card.id);
    this.cards.set(card.id, element);
    if (shown) {
      shown.replaceWith(element);
    } else {
      if (this.thinking) {
        // The round's call was read from its unclosed thinking: that thinking ends here.
        this.block?.stop();
        this.thinking = false;
      }
      for (const token of withoutCallMarkup(this.stream.takeAll())) this.stream.push(token);
      this.stream.finish();
      const part = this.body.ownerDocument.createElement('div');
      part.className = 'reply-part';
      this.body.append(element, part);
      this.part = part;
      this.answerBegun = true;
      this.stream = this.streamInto(part);
    }
    this.follow();
  }

  /** The thinking opened (what came so far in this part was thinking) or closed (what comes
   *  next is the answer). */
  private think(reasoning: Reasoning): void {
    if (this.blockPart !== this.part) {
      this.block = new ThinkingBlock(this.body.ownerDocument);
      this.blockPart = this.part;
      this.block.streaming();
      this.part.before(this.block.element);
      this.block.push(this.stream.takeAll());
      this.thinking = true;
    }
    const block = this.block;
    if (reasoning.ended && this.thinking && block) {
      block.end(reasoning);
      this.thinking = false;
      this.answerBegun = false;
      const spill = block.spilled();
      if (spill) this.answer(spill);
    }
  }

  /** A token of the answer; after thinking, the whitespace it begins with is not drawn (as
   *  the stored reply is drawn, render/thinking.ts `splitReply`). */
  private answer(token: TokenEvent): void {
    if (!this.answerBegun) {
      const text = token.text.trimStart();
      if (!text) return;
      this.answerBegun = true;
      token = { ...token, text };
    }
    this.stream.push(token);
  }

  /** Colours were switched mid-reply: what came so far is drawn again. */
  setColours(on: boolean): void {
    this.stream.setColours(on);
  }

  /** Stop: the backend ends the reply, which then ends as any other. */
  async cancel(): Promise<void> {
    await this.handle?.cancel();
  }
}
