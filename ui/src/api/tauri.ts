// The desktop transport: Tauri commands (src-tauri/commands.rs) and a Channel per reply.
// The shell stores the reply in SQLite as it streams, so nothing here persists.

import { Channel, invoke } from '@tauri-apps/api/core';
import type { Backend } from './backend';
import { applyEvent } from './events';
import type {
  BackendError,
  ChatMessage,
  Conversation,
  ConversationSummary,
  CatalogueEntry,
  RecommendedPair,
  Diagnosis,
  EngineStatus,
  Library,
  ModelEntry,
  PullEvent,
  PullHandle,
  ReplyEvent,
  ReplyHandle,
  Role,
  Settings,
  StepEvent,
  TokenEvent,
} from './types';
import { toBackendError } from './types';

/** invoke, with every rejection turned into a BackendError. */
async function call<T>(command: string, args?: Record<string, unknown>): Promise<T> {
  try {
    return await invoke<T>(command, args);
  } catch (e) {
    throw toBackendError(e);
  }
}

class TauriLibrary implements Library {
  catalogue(): Promise<CatalogueEntry[]> {
    return call('catalogue');
  }
  recommended(): Promise<RecommendedPair | null> {
    return call('recommended_pair');
  }
  addModel(path: string): Promise<ModelEntry> {
    return call('add_model', { path });
  }
  async pull(repo: string, file: string, onEvent: (event: PullEvent) => void): Promise<PullHandle> {
    const channel = new Channel<PullEvent>();
    channel.onmessage = onEvent;
    const id = await call<number>('pull_model', { repo, file, onEvent: channel });
    return {
      cancel: async () => {
        await call('cancel_pull', { id });
      },
    };
  }
  diagnose(target: string, draft: string): Promise<Diagnosis> {
    return call('diagnose', { target, draft });
  }
}

/** What the shell sends over a reply's Channel: the reply's events, except that tokens and the
 *  latest step's figures come batched a few times a second (src-tauri/engine.rs). */
export type WireEvent = ReplyEvent | { kind: 'batch'; tokens: TokenEvent[]; step: StepEvent | null };

/** A message from the shell as the reply events it carries. */
export function unbatch(wire: WireEvent): ReplyEvent[] {
  if (wire.kind !== 'batch') return [wire];
  const events: ReplyEvent[] = wire.tokens.map((token) => ({ kind: 'token', token }));
  if (wire.step) events.push({ kind: 'step', step: wire.step });
  return events;
}

export class TauriBackend implements Backend {
  readonly transport = 'tauri' as const;
  readonly canChooseTarget = true;
  readonly library = new TauriLibrary();

  status(): Promise<EngineStatus> {
    return call('engine_status');
  }
  startupNotices(): Promise<BackendError[]> {
    return call('startup_notices');
  }
  models(target?: string): Promise<ModelEntry[]> {
    return call('list_models', { target: target ?? null });
  }
  applyModels(settings: Settings): Promise<EngineStatus> {
    return call('apply_models', { settings });
  }
  settings(): Promise<Settings> {
    return call('get_settings');
  }
  saveSettings(settings: Settings): Promise<void> {
    return call('save_settings', { settings });
  }
  conversations(query?: string): Promise<ConversationSummary[]> {
    return call('list_conversations', { query: query ?? '' });
  }
  conversation(id: number): Promise<Conversation> {
    return call('get_conversation', { id });
  }
  createConversation(): Promise<Conversation> {
    return call('create_conversation');
  }
  renameConversation(id: number, title: string): Promise<void> {
    return call('rename_conversation', { id, title });
  }
  setSystemPrompt(id: number, text: string): Promise<void> {
    return call('set_system_prompt', { id, text });
  }
  deleteConversation(id: number): Promise<void> {
    return call('delete_conversation', { id });
  }
  addMessage(conversationId: number, role: Role, content: string): Promise<ChatMessage> {
    return call('add_message', { conversationId, role, content });
  }
  truncate(conversationId: number, fromMessageId: number): Promise<void> {
    return call('truncate_messages', { conversationId, fromMessageId });
  }

  openLink(url: string): Promise<void> {
    return call('open_link', { url });
  }

  async reply(conversationId: number, settings: Settings, onEvent: (e: ReplyEvent) => void): Promise<ReplyHandle> {
    let finish: (m: ChatMessage) => void = () => {};
    const done = new Promise<ChatMessage>((resolve) => (finish = resolve));
    const channel = new Channel<WireEvent>();
    let reply: ChatMessage | undefined;
    // Events can overtake the command's answer; hold them until the reply is known.
    const early: ReplyEvent[] = [];
    const handle = (message: ChatMessage, event: ReplyEvent) => {
      applyEvent(message, event);
      onEvent(event);
      if (event.kind === 'done' || event.kind === 'error') finish(message);
    };
    channel.onmessage = (wire) => {
      for (const event of unbatch(wire)) {
        if (reply) handle(reply, event);
        else early.push(event);
      }
    };
    const started = await call<{ request_id: number; message: ChatMessage }>('reply', {
      conversationId,
      settings,
      onEvent: channel,
    });
    reply = started.message;
    for (const event of early.splice(0)) handle(reply, event);
    return {
      cancel: async () => {
        await call('cancel_reply', { requestId: started.request_id });
      },
      done,
    };
  }
}
