// The one door from the UI to the engine. Two transports implement it: Tauri IPC inside the
// desktop app and HTTP against `specula serve` in a plain browser.

import type {
  AttachedFile,
  BackendError,
  ChatMessage,
  Conversation,
  ConversationSummary,
  EngineStatus,
  ExportFormat,
  ImportSummary,
  Library,
  ModelEntry,
  ReplyEvent,
  ReplyHandle,
  Role,
  Overflow,
  Settings,
  ToolServers,
} from './types';

export interface Backend {
  readonly transport: 'tauri' | 'http';
  /** Whether settings can switch the target model (the server serves one). */
  readonly canChooseTarget: boolean;
  /** Downloads and the compatibility doctor, where the transport has them. */
  readonly library?: Library;
  /** MCP servers whose tools replies may call, where the transport has them. */
  readonly tools?: ToolServers;
  /** Read a file attached to a message: its text's block and its tokens by `settings`' target. */
  attach?(name: string, bytes: Uint8Array, settings: Settings): Promise<AttachedFile>;

  status(): Promise<EngineStatus>;
  /** What went wrong at start-up and was worked around (a history moved aside), to show once. */
  startupNotices?(): Promise<BackendError[]>;
  /** The user has seen the notices: the kept ones are not said again. */
  dismissNotices?(): Promise<void>;
  /** Call `then` when a history that could not be opened at start has opened since. */
  onHistoryRestored?(then: () => void): void;
  /** GGUF files on offer, with whether each can draft for `target` (default: the saved one). */
  models(target?: string): Promise<ModelEntry[]>;
  /** Apply model settings: load the target if it changed, then the draft. */
  applyModels(settings: Settings): Promise<EngineStatus>;
  settings(): Promise<Settings>;
  saveSettings(settings: Settings): Promise<void>;

  conversations(query?: string): Promise<ConversationSummary[]>;
  conversation(id: number): Promise<Conversation>;
  createConversation(): Promise<Conversation>;
  renameConversation(id: number, title: string): Promise<void>;
  setSystemPrompt(id: number, text: string): Promise<void>;
  /** Whether the conversation's replies think first (Qwen3's `enable_thinking`); null: the
   *  model's template decides. */
  setThinking(id: number, thinking: boolean | null): Promise<void>;
  /** What the conversation's replies do when it outgrows the context; null: the setting's. */
  setOverflow(id: number, overflow: Overflow | null): Promise<void>;
  deleteConversation(id: number): Promise<void>;
  addMessage(conversationId: number, role: Role, content: string): Promise<ChatMessage>;
  /** Show the conversation up to just before `messageId`: the next message added becomes its
   *  sibling (Regenerate, Edit). Nothing is deleted. */
  branchBefore(conversationId: number, messageId: number): Promise<void>;
  /** Show the branch through `messageId` (the newest one under it); the conversation as shown. */
  showBranch(conversationId: number, messageId: number): Promise<Conversation>;
  /** A new conversation holding the branch up to `messageId`. */
  fork(conversationId: number, messageId: number): Promise<Conversation>;
  /** Delete a message and what follows it, undoably until `purgeDeleted`. */
  deleteMessage(conversationId: number, messageId: number): Promise<void>;
  restoreMessage(conversationId: number, messageId: number): Promise<void>;
  /** Undo `deleteConversation`. */
  restoreConversation(id: number): Promise<void>;
  /** Delete for good what was deleted (the Undo was dismissed). */
  purgeDeleted(): Promise<void>;
  /** Write chats (none: all) to a file; says where. Where the transport keeps files. */
  exportChats?(ids: number[], format: ExportFormat): Promise<string>;
  /** Import a chat export (Specula, ChatGPT, Open WebUI, llama.cpp), all or nothing. */
  importChats?(text: string): Promise<ImportSummary>;

  /** The key a server asks for (the HTTP transport only), kept where the transport keeps it. */
  apiKey?(): string;
  setApiKey?(key: string): void;

  /** Open a link from a reply outside the app (the system browser, or a new tab). */
  openLink(url: string): Promise<void>;

  /** Stream the assistant's reply to the conversation as it stands; it is stored as it streams. */
  reply(conversationId: number, settings: Settings, onEvent: (event: ReplyEvent) => void): Promise<ReplyHandle>;
}
