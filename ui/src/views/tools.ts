// The Tools dialog: the app's MCP servers, each with how it is reached, its tools (each with a
// switch: offered to the model or not) or why it has none, and a way to add servers from an
// mcp.json (pasted or picked) or remove one. While servers start, the list is asked again.

import type { McpServer, McpStatus, ToolServers } from '../api/types';
import { toBackendError } from '../api/types';
import { $in, textButton } from './dom';

/** How often the dialog asks again while servers start. */
const STARTING_POLL_MS = 500;

export class ToolsDialog {
  private readonly list: HTMLElement;
  private readonly status: HTMLElement;
  private readonly importStatus: HTMLElement;
  private readonly form: HTMLFormElement;
  private poll: ReturnType<typeof setTimeout> | null = null;

  constructor(
    private readonly dialog: HTMLDialogElement,
    private readonly servers: ToolServers,
  ) {
    this.list = $in(dialog, '#mcp-servers');
    this.status = $in(dialog, '#tools-status');
    this.importStatus = $in(dialog, '#mcp-import-status');
    this.form = $in<HTMLFormElement>(dialog, '#mcp-import');
    $in(dialog, '#tools-close').addEventListener('click', () => this.close());
    dialog.addEventListener('close', () => this.stopPolling());
    const file = this.form.elements.namedItem('file') as HTMLInputElement;
    file.addEventListener('change', () => void this.pick(file));
    this.form.addEventListener('submit', (e) => {
      e.preventDefault();
      void this.add();
    });
  }

  async open(): Promise<void> {
    if (!this.dialog.open) this.dialog.showModal();
    await this.refresh();
  }

  close(): void {
    this.stopPolling();
    this.dialog.close();
  }

  private async refresh(): Promise<void> {
    await this.act(() => this.servers.status());
  }

  /** Run a change and draw the status it answers; a refusal is said under the form. */
  private async act(change: () => Promise<McpStatus>): Promise<void> {
    try {
      this.draw(await change());
    } catch (e) {
      this.importStatus.textContent = toBackendError(e).message;
    }
  }

  private async pick(file: HTMLInputElement): Promise<void> {
    const picked = file.files?.[0];
    if (!picked) return;
    (this.form.elements.namedItem('config') as HTMLTextAreaElement).value = await picked.text();
    file.value = '';
  }

  private async add(): Promise<void> {
    const config = this.form.elements.namedItem('config') as HTMLTextAreaElement;
    this.importStatus.textContent = '';
    await this.act(async () => {
      const status = await this.servers.importConfig(config.value);
      config.value = '';
      this.importStatus.textContent = status.starting ? 'Added; the servers are starting.' : 'Added.';
      return status;
    });
  }

  draw(status: McpStatus): void {
    this.status.textContent = status.error
      ? `The servers could not be read: ${status.error}`
      : status.starting
        ? 'Starting the servers: each one\'s tools appear as it answers.'
        : status.servers.length === 0
          ? 'No MCP servers yet.'
          : '';
    this.list.replaceChildren(...status.servers.map((s) => this.server(s)));
    if (!status.starting && this.importStatus.textContent === 'Added; the servers are starting.') this.importStatus.textContent = 'Added.';
    this.stopPolling();
    if (status.starting && this.dialog.open) this.poll = setTimeout(() => void this.refresh(), STARTING_POLL_MS);
  }

  private server(server: McpServer): HTMLElement {
    const item = document.createElement('li');
    item.className = 'mcp-server';
    item.dataset.server = server.name;
    const head = document.createElement('div');
    const name = document.createElement('strong');
    name.textContent = server.name;
    const endpoint = document.createElement('span');
    endpoint.className = 'note';
    endpoint.textContent = ` ${server.endpoint}`;
    const remove = textButton('Remove', 'remove-server', () => void this.act(() => this.servers.remove(server.name)));
    head.append(name, endpoint, remove);
    item.append(head);
    for (const [text, kind] of [
      [server.starting ? 'Starting… its tools appear when it answers.' : null, 'note starting'],
      [server.error, 'error'],
      [server.notice, 'note'],
    ] as const) {
      if (!text) continue;
      const line = document.createElement('p');
      line.className = kind;
      line.textContent = text;
      item.append(line);
    }
    const tools = document.createElement('ul');
    tools.className = 'mcp-tools';
    for (const tool of server.tools) {
      const row = document.createElement('li');
      const label = document.createElement('label');
      const toggle = document.createElement('input');
      toggle.type = 'checkbox';
      toggle.checked = tool.enabled;
      toggle.dataset.tool = tool.name;
      toggle.addEventListener('change', () => void this.act(() => this.servers.setEnabled(tool.name, toggle.checked)));
      const what = document.createElement('span');
      what.textContent = ` ${tool.name}`;
      const description = document.createElement('span');
      description.className = 'note';
      description.textContent = tool.description ? ` — ${tool.description}` : '';
      label.append(toggle, what, description);
      row.append(label);
      tools.append(row);
    }
    item.append(tools);
    return item;
  }

  private stopPolling(): void {
    if (this.poll !== null) clearTimeout(this.poll);
    this.poll = null;
  }
}
