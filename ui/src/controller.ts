// The app: it owns the backend and the app's state (the open conversation, the settings in use,
// the reply that streams) and wires the views to them. The views keep only what they show.

import type { Backend } from './api/backend';
import type { ChatMessage, Connection, Conversation, EngineStatus, ModelEntry, Overflow, Settings } from './api/types';
import { DEFAULT_SETTINGS } from './api/types';
import { summarize, summarizeRemote } from './render/speed';
import type { Appearance } from './views/appearance';
import { ChatView } from './views/chat';
import { Composer } from './views/composer';
import { EngineStatusView } from './views/engine-status';
import { Exchange } from './views/exchange';
import { LibraryDialog } from './views/library';
import { ToolsDialog } from './views/tools';
import { Attachments } from './views/attachments';
import type { NoticeView } from './views/notice';
import type { Page } from './views/page';
import { LiveReply } from './views/reply';
import { SettingsDialog } from './views/settings';
import { listenForShortcuts } from './views/shortcuts';
import { Sidebar } from './views/sidebar';
import { SpeedPanel } from './views/speed-panel';
import { SystemPromptDialog } from './views/system-prompt';
import { Toast } from './views/toast';

/** The views made before the backend answered: a failure to connect is said in the notice, and
 *  the theme is applied before anything else is drawn. */
export interface EarlyViews {
  notice: NoticeView;
  appearance: Appearance;
}

/** The busy mark of a chat not yet created (its first Send creates it). */
const NEW_CHAT = -1;

export class Controller {
  /** The engine's defaults until the backend says its own. */
  private settings: Settings = { ...DEFAULT_SETTINGS };
  /** The open conversation; none for a new chat not yet sent. */
  private conversation: Conversation | null = null;
  /** The replies streaming, by the chat each belongs to: several chats may stream at once
   *  (the engine decodes them side by side), one reply a chat. */
  private readonly streaming = new Map<number, LiveReply>();
  /** Chats with a Send or Regenerate under way (set at once, before its first await; a chat
   *  not yet created is `NEW_CHAT`): a second one in the same chat waits its turn rather than
   *  attach a reply to a reply. Other chats go on. */
  private readonly busyIn = new Set<number>();
  /** Deletes, one after another: each one's Undo toast settles the one before. */
  private deletes: Promise<void> = Promise.resolve();

  private readonly notice: NoticeView;
  private readonly appearance: Appearance;
  private readonly sidebar: Sidebar;
  private readonly engine: EngineStatusView;
  private readonly chat: ChatView;
  private readonly speed: SpeedPanel;
  private readonly composer: Composer;
  private readonly settingsDialog: SettingsDialog;
  private readonly toast: Toast;
  /** None where the transport keeps no files (the browser UI of `specula serve`). */
  private readonly exchange: Exchange | null = null;
  /** None in a transport without one (the browser UI of `specula serve`). */
  private readonly library: LibraryDialog | null = null;
  /** Files attached to the message being written, where the transport reads them. */
  private readonly attachments: Attachments | null = null;

  private readonly showError = (error: unknown) => this.notice.show(error);

  constructor(
    private readonly backend: Backend,
    private readonly page: Page,
    early: EarlyViews,
  ) {
    const onError = this.showError;
    this.notice = early.notice;
    // A kept notice (a history moved aside) is said at every start until dismissed.
    this.notice.onDismiss = () => void backend.dismissNotices?.().catch(() => {});
    this.appearance = early.appearance;
    this.appearance.listen((on) => {
      for (const reply of this.streaming.values()) reply.setColours(on);
      if (!this.openReply()) this.draw();
    });
    this.toast = new Toast(page.toast, onError);
    if (backend.exportChats && backend.importChats) {
      const [exportChats, importChats] = [backend.exportChats.bind(backend), backend.importChats.bind(backend)];
      this.exchange = new Exchange(page.exchange, {
        exportChats,
        importChats,
        say: (text) => void this.toast.say(text),
        imported: async (summary) => {
          if (summary.imported[0] !== undefined) this.conversation = await backend.conversation(summary.imported[0]);
          await this.refreshAll();
        },
        onError,
      });
    }
    const exchange = this.exchange;
    this.sidebar = new Sidebar(page.sidebar, {
      conversations: (query) => backend.conversations(query),
      newChat: () => this.newChat(),
      open: (id) => this.openConversation(id),
      rename: (id, title) => this.rename(id, title),
      remove: (id, title) => this.remove(id, title),
      exportChat: exchange ? (id, title) => exchange.open([id], `Export “${title}”`) : undefined,
      onError,
    });
    this.engine = new EngineStatusView(page.engineStatus);
    this.chat = new ChatView(page.chat, {
      colours: () => this.appearance.colours,
      replying: () => this.openReply() !== undefined,
      edit: (message) => this.composer.edit(message),
      regenerate: (id) => this.regenerate(id),
      showBranch: (id) => this.showBranch(id),
      fork: (id) => this.fork(id),
      remove: (message) => this.removeMessage(message),
      openLink: (url) => backend.openLink(url),
      onError,
    });
    this.speed = new SpeedPanel(page.speed);
    this.composer = new Composer(page.composer, {
      send: () => void this.send().catch(onError),
      stop: () => void this.openReply()?.cancel().catch(onError),
    });
    this.settingsDialog = new SettingsDialog(page.settings, {
      canChooseTarget: backend.canChooseTarget,
      apiKey: backend.apiKey?.bind(backend),
      setApiKey: backend.setApiKey?.bind(backend),
      current: () => this.settings,
      models: (target) => this.loadModels(target),
      connections: () => this.loadConnections(),
      save: (next) => this.saveSettings(next),
    });
    page.settingsButton.addEventListener('click', () => void this.settingsDialog.open().catch(onError));
    listenForShortcuts(document, page.composer.prompt, {
      newChat: () => this.newChat(),
      search: () => this.sidebar.focusSearch(),
      stop: () => {
        const reply = this.openReply();
        if (reply) void reply.cancel().catch(onError);
        return reply !== undefined;
      },
      editLast: () => this.editLast(),
      sibling: (step) => this.sibling(step),
    });
    page.thinking.addEventListener('change', () => void this.setThinking(page.thinking.value).catch(onError));
    page.overflow.addEventListener('change', () => void this.setOverflow(page.overflow.value).catch(onError));
    new SystemPromptDialog(page.systemPrompt, {
      current: () => this.conversation?.system_prompt ?? '',
      save: (text) => this.setSystemPrompt(text),
      refresh: () => this.refreshAll(),
      onError,
    });
    if (backend.library) {
      const library = new LibraryDialog(page.library, backend.library, {
        models: () => this.loadModels(this.settings.target),
        currentTarget: () => this.settings.target,
        usePair: (target, draft) => this.usePair(target, draft),
        onError,
      });
      this.library = library;
      page.libraryButton.hidden = false;
      page.libraryButton.addEventListener('click', () => void library.open().catch(onError));
    }
    if (backend.attach) {
      const attach = backend.attach.bind(backend);
      this.attachments = new Attachments(page.attachments, { read: (name, bytes) => attach(name, bytes, this.settings) });
    }
    if (backend.tools) {
      const tools = new ToolsDialog(page.tools, backend.tools);
      page.toolsButton.hidden = false;
      page.toolsButton.addEventListener('click', () => void tools.open().catch(onError));
    }
  }

  /** Load the settings, open the latest conversation, say the engine's status and what went
   *  wrong at start, and offer the library on a first run. */
  async start(): Promise<void> {
    const backend = this.backend;
    // A server that wants a key answers nothing useful before the user gives it: start with the
    // defaults, say why, and let Settings take the key.
    this.settings = await backend.settings().catch((e) => {
      this.showError(e);
      return { ...DEFAULT_SETTINGS };
    });
    const recent = await backend.conversations();
    if (recent[0]) this.conversation = await backend.conversation(recent[0].id);
    await this.refreshAll();
    // A remote target's status is a check of its connection.
    const status = this.settings.remote ? backend.applyModels(this.settings) : backend.status();
    await status.then((s) => this.showStatus(s), this.showError);
    // Said after the status, which may have a notice of its own: this one matters more.
    const notices = (await backend.startupNotices?.().catch(() => [])) ?? [];
    if (notices.length) this.showError({ code: notices[0].code, message: notices.map((n) => n.message).join(' ') });
    // A history that could not be opened at start and opened since: its chats are back.
    backend.onHistoryRestored?.(() => {
      this.notice.clear();
      this.conversation = null;
      void this.refreshAll().catch(this.showError);
    });
    await this.offerFirstRun().catch(this.showError);
    this.page.body.dataset.ready = 'true';
  }

  // ----- conversations -----

  private async refreshAll(): Promise<void> {
    if (this.conversation) this.conversation = await this.backend.conversation(this.conversation.id);
    this.draw();
    await this.sidebar.refresh(this.conversation?.id ?? null);
  }

  private newChat(): void {
    this.conversation = null;
    this.composer.forgetEdit();
    this.speed.hide();
    void this.refreshAll().catch(this.showError);
    this.composer.focus();
  }

  private async openConversation(id: number): Promise<void> {
    this.conversation = await this.backend.conversation(id);
    this.composer.forgetEdit();
    this.speed.hide();
    await this.refreshAll();
  }

  private async rename(id: number, title: string | undefined): Promise<void> {
    if (title) await this.backend.renameConversation(id, title);
    await this.refreshAll();
  }

  /** Run deletes in turn: two quick ones must not both pass the toast before either shows. */
  private inTurn(remove: () => Promise<void>): Promise<void> {
    const next = this.deletes.then(remove);
    this.deletes = next.catch(() => {});
    return next;
  }

  /** Delete a chat, with an Undo that brings it back (and opens it, if it was open). Not the
   *  chat a reply streams into: its reply would have nowhere to go. */
  private remove(id: number, title: string): Promise<void> {
    if (this.streaming.has(id) || this.busyIn.has(id)) {
      this.showError({ code: 'invalid_request', message: 'Stop the reply before deleting its chat.' });
      return Promise.resolve();
    }
    return this.inTurn(() => this.removeNow(id, title));
  }

  private async removeNow(id: number, title: string): Promise<void> {
    await this.toast.settle();
    await this.backend.deleteConversation(id);
    const wasOpen = this.conversation?.id === id;
    if (wasOpen) this.conversation = null;
    await this.refreshAll();
    await this.offerUndo(`Deleted “${title}”`, async () => {
      await this.backend.restoreConversation(id);
      if (wasOpen) this.conversation = await this.backend.conversation(id);
    });
  }

  private async offerUndo(text: string, undo: () => Promise<void>): Promise<void> {
    await this.toast.offerUndo(
      text,
      async () => {
        await undo();
        await this.refreshAll();
      },
      () => this.backend.purgeDeleted(),
    );
  }

  /** Delete a message and what follows it, with an Undo. */
  private removeMessage(message: ChatMessage): Promise<void> {
    return this.inTurn(() => this.removeMessageNow(message));
  }

  private async removeMessageNow(message: ChatMessage): Promise<void> {
    const conversation = this.conversation;
    if (!conversation || this.busy()) return;
    await this.toast.settle();
    await this.backend.deleteMessage(conversation.id, message.id);
    await this.refreshAll();
    const what = message.role === 'user' ? 'question' : 'reply';
    await this.offerUndo(`Deleted a ${what} and what followed it`, () => this.backend.restoreMessage(conversation.id, message.id));
  }

  private async showBranch(messageId: number): Promise<void> {
    if (!this.conversation || this.busy()) return;
    this.conversation = await this.backend.showBranch(this.conversation.id, messageId);
    this.draw();
  }

  /** Ctrl+Left/Right: the previous or next branch at the last message that has siblings. */
  private sibling(step: -1 | 1): boolean {
    const branching = this.conversation?.messages.findLast((m) => (m.siblings?.length ?? 0) > 1);
    const siblings = branching?.siblings ?? [];
    const to = branching && siblings[siblings.indexOf(branching.id) + step];
    if (to === undefined || this.busy()) return false;
    void this.showBranch(to).catch(this.showError);
    return true;
  }

  private async fork(messageId: number): Promise<void> {
    if (!this.conversation || this.busy()) return;
    this.conversation = await this.backend.fork(this.conversation.id, messageId);
    await this.refreshAll();
    void this.toast.say(`Forked to “${this.conversation.title}”`);
  }

  /** Up in an empty composer: the last question, to change and resend. */
  private editLast(): boolean {
    const question = this.conversation?.messages.findLast((m) => m.role === 'user');
    if (!question || this.busy()) return false;
    this.composer.edit(question);
    return true;
  }

  /** Draw the open conversation, and its own settings in the header. */
  private draw(): void {
    this.chat.show(this.conversation);
    const reply = this.openReply();
    reply?.reattach();
    this.composer.setStreaming(reply !== undefined);
    const thinking = this.conversation?.thinking;
    this.page.thinking.value = thinking == null ? '' : thinking ? 'on' : 'off';
    this.page.overflow.value = this.conversation?.overflow ?? '';
  }

  /** The header's choice: on, off, or '' for the model's default. */
  private async setThinking(choice: string): Promise<void> {
    const created = !this.conversation;
    if (!this.conversation) this.conversation = await this.backend.createConversation();
    const thinking = choice === '' ? null : choice === 'on';
    await this.backend.setThinking(this.conversation.id, thinking);
    this.conversation.thinking = thinking;
    if (created) await this.refreshAll();
  }

  /** The header's choice of what this chat does when it outgrows the context, or '' for the
   *  setting's. */
  private async setOverflow(choice: string): Promise<void> {
    const created = !this.conversation;
    if (!this.conversation) this.conversation = await this.backend.createConversation();
    const overflow = choice === '' ? null : (choice as Overflow);
    await this.backend.setOverflow(this.conversation.id, overflow);
    this.conversation.overflow = overflow;
    if (created) await this.refreshAll();
  }

  private async setSystemPrompt(text: string): Promise<void> {
    if (!this.conversation) this.conversation = await this.backend.createConversation();
    await this.backend.setSystemPrompt(this.conversation.id, text);
  }

  // ----- replies -----

  private async send(): Promise<void> {
    const files = this.attachments?.blocks() ?? '';
    const text = `${this.composer.text}${files}`;
    if (!text.trim() || this.busy()) return;
    const refusal = this.attachments?.refusal();
    if (refusal) return this.showError({ code: 'context_overflow', message: refusal });
    let busy = this.conversation?.id ?? NEW_CHAT;
    this.busyIn.add(busy);
    try {
      this.notice.clear();
      if (!this.conversation) this.conversation = await this.backend.createConversation();
      const id = this.conversation.id;
      this.busyIn.delete(busy);
      this.busyIn.add((busy = id));
      const editing = this.composer.editing;
      // An edited question becomes a sibling of the original, which stays one arrow away.
      if (editing !== null) await this.backend.branchBefore(id, editing);
      this.composer.endEdit();
      const question = await this.backend.addMessage(id, 'user', text);
      this.composer.clear();
      this.attachments?.clear();
      await this.refreshAll();
      // A reply that failed before its first token (a prompt over the context, say) leaves no
      // trace: the question and the empty reply are deleted, and the question goes back to the
      // composer, to shorten or resend.
      await this.streamReply(id, async (failed) => {
        // Given back only to its own chat's composer: elsewhere the question stays in its chat,
        // beside the failed reply that says why.
        if (!failed || this.conversation?.id !== id) return;
        await this.backend.deleteMessage(id, question.id);
        this.composer.giveBack(question.content);
      });
    } finally {
      this.busyIn.delete(busy);
    }
  }

  private async regenerate(messageId: number): Promise<void> {
    if (!this.conversation || this.busy()) return;
    const id = this.conversation.id;
    this.busyIn.add(id);
    try {
      this.notice.clear();
      // The new reply becomes a sibling of the old one, which stays one arrow away.
      await this.backend.branchBefore(id, messageId);
      await this.refreshAll();
      // A new reply that failed before its first token goes, and the old one shows again; one
      // that was never begun (the engine refused it) leaves the old one shown too.
      await this.streamReply(id, async (failed) => {
        if (failed) await this.backend.deleteMessage(id, failed.id);
        else await this.backend.showBranch(id, messageId);
      });
    } finally {
      this.busyIn.delete(id);
    }
  }

  /** Whether the open chat has a reply under way (other chats may). */
  private busy(): boolean {
    const id = this.conversation?.id ?? NEW_CHAT;
    return this.busyIn.has(id) || this.streaming.has(id);
  }

  /** The reply streaming into the open chat, if one is. */
  private openReply(): LiveReply | undefined {
    return this.conversation ? this.streaming.get(this.conversation.id) : undefined;
  }

  /** Stream a reply to the conversation as it stands. `ended` is told, before the window is
   *  redrawn, the stored reply if it failed before its first token, none if it was never
   *  begun; it is not called for a reply with text. */
  private async streamReply(conversationId: number, ended: (failed: ChatMessage | undefined) => Promise<void>): Promise<void> {
    const remote = this.settings.remote != null;
    const reply = new LiveReply(this.chat, this.speed, {
      colours: this.appearance.colours,
      drafting: remote || this.settings.drafter !== 'none',
      remote,
      verdict: (stats) => (this.settings.remote ? summarizeRemote(stats) : summarize(stats, this.settings.k)),
      onNotice: this.showError,
    });
    this.streaming.set(conversationId, reply);
    if (this.conversation?.id === conversationId) this.composer.setStreaming(true);
    let stored: ChatMessage | undefined;
    try {
      // The transport folds each event into the reply it hands back; the view draws from events.
      reply.handle = await this.backend.reply(conversationId, this.settings, (event) => reply.onEvent(event));
      // Drawn again while the reply was starting: its place is known only now.
      if (this.conversation?.id === conversationId) reply.reattach();
      stored = await reply.handle.done;
    } catch (e) {
      this.showError(e);
    } finally {
      this.streaming.delete(conversationId);
      if (this.conversation?.id === conversationId) this.composer.setStreaming(false);
      const failedEmpty = stored?.finish_reason === 'error' && !stored.content;
      if (!stored || failedEmpty) await ended(stored).catch(this.showError);
      // The finished reply is drawn whole, once, from the stored conversation.
      await this.refreshAll();
      if (stored) this.keepDrawnReply(stored);
      const body = this.page.body;
      body.dataset.replies = String(Number(body.dataset.replies ?? 0) + 1);
    }
  }

  /** The window never trades a longer reply it drew for a shorter stored one: when the history
   *  could not keep all of it (a full disk), the drawn reply stays, marked as not saved. */
  private keepDrawnReply(drawn: ChatMessage): void {
    const messages = this.conversation?.messages;
    const i = messages?.findIndex((m) => m.id === drawn.id) ?? -1;
    if (!messages || i < 0 || messages[i].content.length >= drawn.content.length) return;
    messages[i] = { ...drawn, finish_reason: 'unsaved' };
    this.draw();
  }

  // ----- models and settings -----

  private async saveSettings(next: Settings): Promise<void> {
    const status = await this.backend.applyModels(next);
    await this.backend.saveSettings(next);
    // The HTTP transport learns the served model's name once the key lets it ask.
    this.settings = this.backend.apiKey ? await this.backend.settings() : next;
    this.showStatus(status);
  }

  /** Load a pair the library downloaded, with copies beside the draft. */
  private async usePair(target: string, draft: string): Promise<void> {
    const next: Settings = { ...this.settings, target, draft, drafter: 'auto' };
    const status = await this.backend.applyModels(next);
    await this.backend.saveSettings(next);
    this.settings = next;
    this.showStatus(status);
    this.page.library.close();
    this.composer.focus();
  }

  private showStatus(status: EngineStatus): void {
    this.engine.show(status, this.settings, this.backend.canChooseTarget);
    if (status.error) this.showError(status.error);
    // Models load in the background at start: look again until they are in.
    if (status.loading) setTimeout(() => void this.backend.status().then((s) => this.showStatus(s), this.showError), 1000);
  }

  private async loadModels(target: string): Promise<ModelEntry[]> {
    return this.backend.models(target).catch((e) => {
      this.showError(e);
      return [] as ModelEntry[];
    });
  }

  /** The remembered remote engines; none where the transport has no library (the browser). */
  private async loadConnections(): Promise<Connection[]> {
    return (
      (await this.backend.library?.connections().catch((e) => {
        this.showError(e);
        return [] as Connection[];
      })) ?? []
    );
  }

  /** A first run (no model anywhere the app looks) opens the library on the recommended pair,
   *  so nobody needs a terminal to get started. */
  private async offerFirstRun(): Promise<void> {
    if (!this.library) return;
    const models = await this.loadModels(this.settings.target);
    if (models.length === 0) await this.library.open();
  }
}
