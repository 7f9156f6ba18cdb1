// The page's parts, found once as the window starts: before any reply is on the page. Later
// code uses these references, or looks inside one of them, never a document-wide lookup:
// replies are model output, and an element of one named like a part of the app
// (`id="connections"`) would be found instead of it (DOM clobbering; the sanitiser drops `id`
// and `name` as well).

import type { AttachmentParts } from './attachments';
import type { AppearanceParts } from './appearance';
import type { ChatParts } from './chat';
import { composerParts, type ComposerParts } from './composer';
import { $in } from './dom';
import { exchangeParts, type ExchangeParts } from './exchange';
import { settingsParts, type SettingsParts } from './settings';
import { sidebarParts, type SidebarParts } from './sidebar';
import { speedParts, type SpeedParts } from './speed-panel';
import { systemPromptParts, type SystemPromptParts } from './system-prompt';

export interface Page {
  body: HTMLElement;
  appearance: AppearanceParts;
  notice: HTMLElement;
  sidebar: SidebarParts;
  engineStatus: HTMLElement;
  chat: ChatParts;
  speed: SpeedParts;
  composer: ComposerParts;
  attachments: AttachmentParts;
  settings: SettingsParts;
  settingsButton: HTMLButtonElement;
  systemPrompt: SystemPromptParts;
  thinking: HTMLSelectElement;
  overflow: HTMLSelectElement;
  library: HTMLDialogElement;
  libraryButton: HTMLButtonElement;
  tools: HTMLDialogElement;
  toolsButton: HTMLButtonElement;
  toast: HTMLElement;
  exchange: ExchangeParts;
}

export function findPage(doc: Document): Page {
  const $ = <T extends HTMLElement = HTMLElement>(selector: string) => $in<T>(doc, selector);
  return {
    body: doc.body,
    appearance: {
      html: doc.documentElement,
      body: doc.body,
      theme: $<HTMLButtonElement>('#theme-toggle'),
      colours: $<HTMLInputElement>('#colours-toggle'),
    },
    notice: $('#notice'),
    sidebar: sidebarParts($('#sidebar')),
    engineStatus: $('#engine-status'),
    chat: { title: $('#title'), messages: $('#messages') },
    speed: speedParts($('#speed-panel')),
    composer: composerParts($<HTMLFormElement>('#composer')),
    attachments: {
      form: $<HTMLFormElement>('#composer'),
      chips: $('#attachments'),
      button: $<HTMLButtonElement>('#attach-button'),
      input: $<HTMLInputElement>('#attach-input'),
    },
    settings: settingsParts($<HTMLDialogElement>('#settings-dialog')),
    settingsButton: $<HTMLButtonElement>('#settings-button'),
    systemPrompt: systemPromptParts($<HTMLButtonElement>('#system-button'), $<HTMLDialogElement>('#system-dialog')),
    thinking: $<HTMLSelectElement>('#thinking-select'),
    overflow: $<HTMLSelectElement>('#overflow-select'),
    library: $<HTMLDialogElement>('#library-dialog'),
    libraryButton: $<HTMLButtonElement>('#library-button'),
    tools: $<HTMLDialogElement>('#tools-dialog'),
    toolsButton: $<HTMLButtonElement>('#tools-button'),
    toast: $('#toast'),
    exchange: exchangeParts(doc),
  };
}
