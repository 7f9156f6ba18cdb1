// The one door from the UI to the engine. Two transports implement it: Tauri IPC inside the
// desktop app and HTTP against `specula serve` in a plain browser.

import type {
  BackendError,
  ChatMessage,
  Conversation,
  ConversationSummary,
  EngineStatus,
  Library,
  ModelEntry,
  ReplyEvent,
  ReplyHandle,
  Role,
  Settings,
} from './types';

export interface Backend {
  readonly transport: 'tauri' | 'http';
  /** Whether settings can switch the target model (the server serves one). */
  readonly canChooseTarget: boolean;
  /** Downloads and the compatibility doctor, where the transport has them. */
  readonly library?: Library;

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
  deleteConversation(id: number): Promise<void>;
  addMessage(conversationId: number, role: Role, content: string): Promise<ChatMessage>;
  /** Delete a message and every later one (regenerate, edit-and-resend). */
  truncate(conversationId: number, fromMessageId: number): Promise<void>;

  /** The key a server asks for (the HTTP transport only), kept where the transport keeps it. */
  apiKey?(): string;
  setApiKey?(key: string): void;

  /** Open a link from a reply outside the app (the system browser, or a new tab). */
  openLink(url: string): Promise<void>;

  /** Stream the assistant's reply to the conversation as it stands; it is stored as it streams. */
  reply(conversationId: number, settings: Settings, onEvent: (event: ReplyEvent) => void): Promise<ReplyHandle>;
}
