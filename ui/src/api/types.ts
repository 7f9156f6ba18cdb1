// The shapes that cross the service layer. The contract's own types are generated from the
// Rust definitions (bindings.ts, from crates/protocol and the app's commands: never edited by
// hand); this file names them as the UI reads them and adds what only the UI has (handles,
// the browser transport's own error codes, the Library's interface).

import type {
  AppSettings,
  CatalogueEntry,
  Connection,
  ConnectionCheck,
  Diagnosis,
  DrafterKind,
  EngineStatus,
  ErrorCode,
  GenerationStats,
  ModelEntry,
  PullEvent,
  ReplyEvent as WireReplyEvent,
  StoredMessage,
} from './bindings';
import { DEFAULT_SETTINGS as GENERATED_DEFAULT_SETTINGS, ERROR_CODES } from './bindings';

export type {
  Alternative,
  CatalogueEntry,
  Connection,
  ConnectionCheck,
  RemoteKind,
  RemoteTarget,
  Conversation,
  ConversationSummary,
  Diagnosis,
  EngineState,
  EngineStatus,
  ErrorCode,
  ErrorInfo,
  ExportFormat,
  GenerationStats,
  ImportSummary,
  KvFormat,
  Mode,
  ModelEntry,
  Overflow,
  PullEvent,
  RecommendedPair,
  Role,
  Source,
  SpeculativeStats,
  StepEvent,
  TokenEvent,
  Reasoning,
  Trim,
  AttachedFile,
  McpServer,
  McpStatus,
  McpTool,
  ToolCard,
  ToolDecision,
  ToolOutcome,
} from './bindings';

/** A stored message: assistant replies carry every token with its provenance, their stats,
 *  how they ended (unset while streaming) and the settings they were made with. */
export type ChatMessage = StoredMessage;
export type Drafter = DrafterKind;
export type Settings = AppSettings;

/** The settings a window starts from before the backend says its own: the engine's defaults,
 *  generated from `AppSettings::default()` (src-tauri/bindings.rs), never written here. */
export const DEFAULT_SETTINGS: Settings = { ...GENERATED_DEFAULT_SETTINGS };

/** Codes only the browser transport gives: a server that wants a key, a stream cut short, and
 *  an HTTP failure the server did not explain. */
export type TransportErrorCode =
  | 'invalid_api_key'
  | 'disconnected'
  | 'context_length_exceeded'
  | 'storage_full'
  | `http_${number}`;

/** Every failure the UI sees: `code` to switch on, `message` to show. */
export interface BackendError {
  code: ErrorCode | TransportErrorCode;
  message: string;
}

/** A reply's events as the engine emits them (crates/protocol's `ReplyEvent`, unchanged on the
 *  way), except that a failure may carry one of the browser transport's own codes. */
export type ReplyEvent = Exclude<WireReplyEvent, { kind: 'failed' }> | { kind: 'failed'; error: BackendError };

export interface ReplyHandle {
  cancel(): Promise<void>;
  /** Answer a tool call's card (the app's MCP tools; a transport without them has none). */
  decide?(callId: string, decision: import('./bindings').ToolDecision): Promise<void>;
  /** The id of the assistant message the reply is stored as while it streams. */
  messageId: number;
  /** The stored assistant message once the reply ends, however it ends. */
  done: Promise<ChatMessage>;
}

const TRANSPORT_CODES = ['invalid_api_key', 'disconnected', 'context_length_exceeded', 'storage_full'];
const KNOWN_CODES: ReadonlySet<string> = new Set([...ERROR_CODES, ...TRANSPORT_CODES]);

/** `code` as one of the contract's codes (a transport's own code is `internal` there). */
export function asErrorCode(code: string): ErrorCode {
  return (ERROR_CODES as readonly string[]).includes(code) ? (code as ErrorCode) : 'internal';
}

/** `code` when the UI knows it, else `fallback`. */
export function knownCode(code: unknown, fallback: BackendError['code'] = 'internal'): BackendError['code'] {
  const text = String(code);
  return KNOWN_CODES.has(text) || /^http_\d+$/.test(text) ? (text as BackendError['code']) : fallback;
}

export function isBackendError(e: unknown): e is BackendError {
  return typeof e === 'object' && e !== null && 'code' in e && 'message' in e;
}

/** Any thrown value as a BackendError, so the UI shows one kind of message. */
export function toBackendError(e: unknown): BackendError {
  if (isBackendError(e)) return { code: knownCode(e.code), message: String(e.message) };
  if (e instanceof Error) return { code: 'internal', message: e.message };
  return { code: 'internal', message: String(e) };
}

export interface PullHandle {
  cancel(): Promise<void>;
}

/** The model library: only the desktop app downloads models. */
export interface Library {
  catalogue(): Promise<CatalogueEntry[]>;
  /** Null when no pair fits in this machine's free memory. */
  recommended(): Promise<import('./bindings').RecommendedPair | null>;
  /** Remember a model file outside the model folders; refused unless it reads as a model. */
  addModel(path: string): Promise<ModelEntry>;
  pull(repo: string, file: string, onEvent: (event: PullEvent) => void): Promise<PullHandle>;
  diagnose(target: string, draft: string): Promise<Diagnosis>;
  /** Remote engines (OpenAI-compatible servers) the user connected to. */
  connections(): Promise<Connection[]>;
  /** Check a remote and remember it (with its key) when it answers; the check says either way. */
  /** `firstTokenSecs`: the longest wait for a reply's first token (null: the default). */
  addConnection(baseUrl: string, apiKey: string | null, firstTokenSecs?: number | null): Promise<ConnectionCheck>;
  checkConnection(baseUrl: string): Promise<ConnectionCheck>;
  removeConnection(baseUrl: string): Promise<void>;
}

/** The figures a reply ends with (re-exported for the speed panel). */
export type { GenerationStats as ReplyStats };
export type { EngineStatus as Status };

/** The app's MCP servers (the desktop transport only): the Tools dialog's side of the shell. */
export interface ToolServers {
  status(): Promise<import('./bindings').McpStatus>;
  /** Add the servers of an `mcp.json` text (replacing those of the same names) and start them. */
  importConfig(text: string): Promise<import('./bindings').McpStatus>;
  remove(name: string): Promise<import('./bindings').McpStatus>;
  setEnabled(tool: string, enabled: boolean): Promise<import('./bindings').McpStatus>;
}
