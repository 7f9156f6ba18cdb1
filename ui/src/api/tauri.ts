// The desktop transport: Tauri commands (src-tauri/commands.rs, called through the typed
// `commands` generated from them into bindings.ts) and a Channel per reply. The shell stores
// the reply in SQLite as it streams, so nothing here persists.

import { Channel } from '@tauri-apps/api/core';
import { listen } from '@tauri-apps/api/event';
import { commands } from './bindings';
import type { Backend } from './backend';
import { applyEvent, isLast } from './events';
import type {
  AttachedFile,
  BackendError,
  ChatMessage,
  Conversation,
  ConversationSummary,
  CatalogueEntry,
  Connection,
  ConnectionCheck,
  RecommendedPair,
  Diagnosis,
  EngineStatus,
  ExportFormat,
  ImportSummary,
  Library,
  ModelEntry,
  PullEvent,
  PullHandle,
  ReplyEvent,
  ReplyHandle,
  McpStatus,
  Role,
  Overflow,
  Settings,
  ToolServers,
} from './types';
import { toBackendError } from './types';

/** A command's answer, with every rejection turned into a BackendError. */
async function call<T>(answer: Promise<T>): Promise<T> {
  try {
    return await answer;
  } catch (e) {
    throw toBackendError(e);
  }
}

/** A command that answers nothing. */
async function run(answer: Promise<unknown>): Promise<void> {
  await call(answer);
}

class TauriTools implements ToolServers {
  status(): Promise<McpStatus> {
    return call(commands.mcpStatus());
  }
  importConfig(text: string): Promise<McpStatus> {
    return call(commands.importMcpServers(text));
  }
  remove(name: string): Promise<McpStatus> {
    return call(commands.removeMcpServer(name));
  }
  setEnabled(tool: string, enabled: boolean): Promise<McpStatus> {
    return call(commands.setToolEnabled(tool, enabled));
  }
}

class TauriLibrary implements Library {
  catalogue(): Promise<CatalogueEntry[]> {
    return call(commands.catalogue());
  }
  recommended(): Promise<RecommendedPair | null> {
    return call(commands.recommendedPair());
  }
  addModel(path: string): Promise<ModelEntry> {
    return call(commands.addModel(path));
  }
  async pull(repo: string, file: string, onEvent: (event: PullEvent) => void): Promise<PullHandle> {
    const channel = new Channel<PullEvent>();
    channel.onmessage = onEvent;
    const id = await call(commands.pullModel(repo, file, channel));
    return {
      cancel: async () => {
        await call(commands.cancelPull(id));
      },
    };
  }
  diagnose(target: string, draft: string): Promise<Diagnosis> {
    return call(commands.diagnose(target, draft));
  }
  connections(): Promise<Connection[]> {
    return call(commands.listConnections());
  }
  addConnection(baseUrl: string, apiKey: string | null, firstTokenSecs?: number | null): Promise<ConnectionCheck> {
    return call(commands.addConnection(baseUrl, apiKey, firstTokenSecs ?? null));
  }
  checkConnection(baseUrl: string): Promise<ConnectionCheck> {
    return call(commands.checkConnection(baseUrl));
  }
  removeConnection(baseUrl: string): Promise<void> {
    return run(commands.removeConnection(baseUrl));
  }
}

export class TauriBackend implements Backend {
  readonly transport = 'tauri' as const;
  readonly canChooseTarget = true;
  readonly library = new TauriLibrary();
  readonly tools = new TauriTools();

  status(): Promise<EngineStatus> {
    return call(commands.engineStatus());
  }
  startupNotices(): Promise<BackendError[]> {
    return call(commands.startupNotices());
  }
  async dismissNotices(): Promise<void> {
    await commands.dismissNotices();
  }
  onHistoryRestored(then: () => void): void {
    void listen('history-restored', () => then());
  }
  models(target?: string): Promise<ModelEntry[]> {
    return call(commands.listModels(target ?? null));
  }
  applyModels(settings: Settings): Promise<EngineStatus> {
    return call(commands.applyModels(settings));
  }
  settings(): Promise<Settings> {
    return call(commands.getSettings());
  }
  saveSettings(settings: Settings): Promise<void> {
    return run(commands.saveSettings(settings));
  }
  conversations(query?: string): Promise<ConversationSummary[]> {
    return call(commands.listConversations(query ?? ''));
  }
  conversation(id: number): Promise<Conversation> {
    return call(commands.getConversation(id));
  }
  createConversation(): Promise<Conversation> {
    return call(commands.createConversation());
  }
  renameConversation(id: number, title: string): Promise<void> {
    return run(commands.renameConversation(id, title));
  }
  setThinking(id: number, thinking: boolean | null): Promise<void> {
    return run(commands.setThinking(id, thinking));
  }
  setOverflow(id: number, overflow: Overflow | null): Promise<void> {
    return run(commands.setOverflow(id, overflow));
  }
  setSystemPrompt(id: number, text: string): Promise<void> {
    return run(commands.setSystemPrompt(id, text));
  }
  deleteConversation(id: number): Promise<void> {
    return run(commands.deleteConversation(id));
  }
  addMessage(conversationId: number, role: Role, content: string): Promise<ChatMessage> {
    return call(commands.addMessage(conversationId, role, content));
  }
  branchBefore(conversationId: number, messageId: number): Promise<void> {
    return run(commands.branchBefore(conversationId, messageId));
  }
  showBranch(conversationId: number, messageId: number): Promise<Conversation> {
    return call(commands.showBranch(conversationId, messageId));
  }
  fork(conversationId: number, messageId: number): Promise<Conversation> {
    return call(commands.forkConversation(conversationId, messageId));
  }
  deleteMessage(conversationId: number, messageId: number): Promise<void> {
    return run(commands.deleteMessage(conversationId, messageId));
  }
  restoreMessage(conversationId: number, messageId: number): Promise<void> {
    return run(commands.restoreMessage(conversationId, messageId));
  }
  restoreConversation(id: number): Promise<void> {
    return run(commands.restoreConversation(id));
  }
  purgeDeleted(): Promise<void> {
    return run(commands.purgeDeleted());
  }
  exportChats(ids: number[], format: ExportFormat): Promise<string> {
    return call(commands.exportConversations(ids, format));
  }
  importChats(text: string): Promise<ImportSummary> {
    return call(commands.importConversations(text));
  }

  openLink(url: string): Promise<void> {
    return run(commands.openLink(url));
  }
  attach(name: string, bytes: Uint8Array, settings: Settings): Promise<AttachedFile> {
    return call(commands.readAttachment(name, Array.from(bytes), settings));
  }

  async reply(conversationId: number, settings: Settings, onEvent: (e: ReplyEvent) => void): Promise<ReplyHandle> {
    let finish: (m: ChatMessage) => void = () => {};
    const done = new Promise<ChatMessage>((resolve) => (finish = resolve));
    // The engine's events as it emitted them, tokens gathered a few times a second by the shell.
    const channel = new Channel<ReplyEvent>();
    let reply: ChatMessage | undefined;
    // Events can overtake the command's answer; hold them until the reply is known.
    const early: ReplyEvent[] = [];
    const handle = (message: ChatMessage, event: ReplyEvent) => {
      applyEvent(message, event);
      onEvent(event);
      if (isLast(event)) finish(message);
    };
    channel.onmessage = (event) => {
      if (reply) handle(reply, event);
      else early.push(event);
    };
    const started = await call(commands.reply(conversationId, settings, channel));
    reply = started.message;
    for (const event of early.splice(0)) handle(reply, event);
    return {
      cancel: async () => {
        await call(commands.cancelReply(started.request_id));
      },
      messageId: started.message.id,
      decide: async (callId, decision) => {
        await call(commands.decideToolCall(started.request_id, callId, decision));
      },
      done,
    };
  }
}
