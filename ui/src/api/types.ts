// The shapes that cross the service layer. They mirror the engine's serde output
// (crates/engine/src/generate.rs), so both transports hand the UI the same objects.

export type Source = 'target' | 'accepted' | 'resampled' | 'bonus';

export interface TokenEvent {
  id: number;
  /** The text this token completes; empty while a UTF-8 character is still partial. */
  text: string;
  source: Source;
  /** The target's probability of this token. */
  p?: number;
  /** The draft's probability of this token (accepted and resampled tokens). */
  q?: number;
}

export interface StepEvent {
  k: number;
  accepted: number;
  generated: number;
  tokens_per_second: number;
  /** Over plain steps timed in this reply; null until enough were timed, and in plain decoding. */
  speedup_vs_plain: number | null;
  /** What the speedup compares against: the median plain step timed in this reply, and how many. */
  plain_ms_per_token?: number | null;
  plain_steps?: number;
  acceptance_rate: number | null;
}

export interface SpeculativeStats {
  drafter: string;
  drafted: number;
  accepted: number;
  acceptance_rate: number;
  target_passes: number;
  tokens_per_pass: number;
  draft_ms: number;
  verify_ms: number;
  plain_ms_per_token: number | null;
  plain_steps?: number;
  speedup_vs_plain: number | null;
  predicted_speedup: number | null;
  cost_ratio: number | null;
  k_min: number;
  k_max: number;
  k_mean: number;
}

export interface GenerationStats {
  prompt_tokens: number;
  cached_prompt_tokens: number;
  generated_tokens: number;
  prefill_ms: number;
  decode_ms: number;
  tokens_per_second: number;
  speculative?: SpeculativeStats;
}

export type Role = 'system' | 'user' | 'assistant';

export interface ChatMessage {
  id: number;
  role: Role;
  content: string;
  /** Assistant replies: every token with its provenance. */
  tokens?: TokenEvent[];
  stats?: GenerationStats;
  /** Unset while the reply streams; `cancelled` when stopped, `error` when it failed. */
  finish_reason?: string;
  /** The settings the reply was made with, e.g. "k auto · draft model". */
  settings_label?: string;
}

export interface ConversationSummary {
  id: number;
  title: string;
  updated_at: number;
}

export interface Conversation extends ConversationSummary {
  system_prompt: string;
  messages: ChatMessage[];
}

export type Drafter = 'model' | 'lookup' | 'none';
export type Mode = 'greedy' | 'sample' | 'reproducible';

export interface Settings {
  /** Path of the target GGUF (the app) or the served model's id (a browser). */
  target: string;
  /** Path of the draft GGUF; empty for none. */
  draft: string;
  drafter: Drafter;
  k: number | 'auto';
  mode: Mode;
  temperature: number;
  top_p: number;
  top_k: number;
  /** A pinned seed; null draws a new one for each reply (shown with the reply). */
  seed: number | null;
  max_tokens: number;
  context: number;
  device: string;
}

export const DEFAULT_SETTINGS: Settings = {
  target: '',
  draft: '',
  drafter: 'model',
  k: 'auto',
  mode: 'reproducible',
  temperature: 0.8,
  top_p: 0.95,
  top_k: 40,
  seed: null,
  max_tokens: 512,
  context: 4096,
  device: 'auto',
};

/** A GGUF file the backend can offer, with whether it can draft for the current target. */
export interface ModelEntry {
  path: string;
  name: string;
  architecture: string;
  parameters: number;
  quantization: string;
  file_bytes: number;
  /** False, with a reason, for a file the engine cannot run (foreign, truncated, unsupported). */
  runnable?: boolean;
  /** Undefined for the target itself; false with a reason when it cannot draft for it. */
  compatible?: boolean;
  reason?: string;
}

/** The engine service's state (crates/engine/src/service): `failed` means no model could load. */
export type EngineState = 'empty' | 'loading' | 'ready' | 'failed';

export interface EngineStatus {
  state?: EngineState;
  target: string | null;
  draft: string | null;
  /** The drafter replies get when they name none (the browser transport). */
  drafter?: Drafter | null;
  device: string;
  /** True while models load; replies wait for them. */
  loading?: boolean;
  /** Set when the last load failed; the previous models, if any, stay usable. */
  error?: BackendError;
  /** The last reply that failed inside the engine (which went on serving). */
  last_failure?: BackendError;
}

/** Every failure the UI sees: `code` to switch on, `message` to show. */
export interface BackendError {
  code: string;
  message: string;
}

export type ReplyEvent =
  | { kind: 'started'; prompt_tokens: number }
  /** `done` of the `total` uncached prompt tokens are read. */
  | { kind: 'prefill'; done: number; total: number }
  | { kind: 'token'; token: TokenEvent }
  | { kind: 'step'; step: StepEvent }
  | { kind: 'done'; stats: GenerationStats; finish_reason: string }
  | { kind: 'error'; error: BackendError };

export interface ReplyHandle {
  cancel(): Promise<void>;
  /** The stored assistant message once the reply ends, however it ends. */
  done: Promise<ChatMessage>;
}

export function isBackendError(e: unknown): e is BackendError {
  return typeof e === 'object' && e !== null && 'code' in e && 'message' in e;
}

/** Any thrown value as a BackendError, so the UI shows one kind of message. */
export function toBackendError(e: unknown): BackendError {
  if (isBackendError(e)) return { code: String(e.code), message: String(e.message) };
  if (e instanceof Error) return { code: 'internal', message: e.message };
  return { code: 'internal', message: String(e) };
}

/** A model of the catalogue of known-good pairs (crates/engine/src/catalogue.rs). */
export interface CatalogueEntry {
  family: string;
  role: 'target' | 'draft';
  name: string;
  repo: string;
  file: string;
  file_mb: number;
  /** Weights plus the KV cache at the default context. */
  memory_mb: number;
  /** Where it is in the Hugging Face cache, when it is there. */
  path?: string;
}

/** The pair a first run offers to download (crates/engine/src/catalogue.rs `recommended`). */
export interface RecommendedPair {
  target: CatalogueEntry;
  draft: CatalogueEntry;
  /** Why it suits this machine: its cores and free memory. */
  reason: string;
}

export type PullEvent =
  | { kind: 'progress'; done: number; total: number; bytes_per_second: number; eta_seconds: number | null }
  | { kind: 'done'; path: string }
  | { kind: 'error'; code: string; message: string };

export interface PullHandle {
  cancel(): Promise<void>;
}

export interface Diagnosis {
  compatible: boolean;
  /** The doctor's report, as `specula doctor` prints it. */
  text: string;
}

/** The model library: only the desktop app downloads models. */
export interface Library {
  catalogue(): Promise<CatalogueEntry[]>;
  /** Null when no pair fits in this machine's free memory. */
  recommended(): Promise<RecommendedPair | null>;
  /** Remember a model file outside the model folders; refused unless it reads as a model. */
  addModel(path: string): Promise<ModelEntry>;
  pull(repo: string, file: string, onEvent: (event: PullEvent) => void): Promise<PullHandle>;
  diagnose(target: string, draft: string): Promise<Diagnosis>;
}
