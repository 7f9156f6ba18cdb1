import { beforeEach, describe, expect, it } from 'vitest';
import type { McpStatus, ToolServers } from '../api/types';
import { $, loadPage, settle } from '../testing/page';
import indexHtml from '../../index.html?raw';
import { ToolsDialog } from './tools';

const running: McpStatus = {
  starting: false,
  error: null,
  servers: [
    {
      name: 'arith',
      endpoint: 'python ["arith_server.py", "stdio"] (env ["TOKEN"])',
      tools: [
        { name: 'add', description: 'Add two numbers.', enabled: true },
        { name: 'multiply', description: 'Multiply two numbers.', enabled: false },
      ],
      starting: false,
      error: null,
      notice: null,
    },
    { name: 'gone', endpoint: 'nope []', tools: [], starting: false, error: 'the command `nope` was not found', notice: null },
    { name: 'slow', endpoint: 'npx ["slow-server"]', tools: [], starting: true, error: null, notice: null },
  ],
};

function servers(calls: string[]): ToolServers {
  return {
    status: async () => running,
    importConfig: async (text) => {
      calls.push(`import ${text}`);
      if (!text.includes('mcpServers')) throw { code: 'invalid_setting', message: 'not an mcp.json file' };
      return { ...running, starting: true };
    },
    remove: async (name) => {
      calls.push(`remove ${name}`);
      return { ...running, servers: running.servers.filter((s) => s.name !== name) };
    },
    setEnabled: async (tool, enabled) => {
      calls.push(`${tool} ${enabled}`);
      return running;
    },
  };
}

describe('the Tools dialog', () => {
  beforeEach(() => loadPage(indexHtml));

  it('lists each server with its tools and switches, or why it has none', async () => {
    const calls: string[] = [];
    await new ToolsDialog($<HTMLDialogElement>('#tools-dialog'), servers(calls)).open();
    const toggles = [...document.querySelectorAll<HTMLInputElement>('#mcp-servers [data-tool]')];
    expect(toggles.map((t) => [t.dataset.tool, t.checked])).toEqual([['add', true], ['multiply', false]]);
    expect($('#mcp-servers [data-server=gone] .error').textContent).toBe('the command `nope` was not found');
    // A server that has not answered says so, beside the others' tools.
    expect($('#mcp-servers [data-server=slow] .note.starting').textContent).toBe('Starting… its tools appear when it answers.');
    toggles[1].click();
    await settle();
    expect(calls).toEqual(['multiply true']);
    $<HTMLButtonElement>('#mcp-servers [data-server=gone] .remove-server').click();
    await settle();
    expect(document.querySelector('#mcp-servers [data-server=gone]')).toBeNull();
  });

  it('adds the servers of a pasted mcp.json, and says a refusal under the form', async () => {
    const calls: string[] = [];
    const dialog = new ToolsDialog($<HTMLDialogElement>('#tools-dialog'), servers(calls));
    await dialog.open();
    const config = $<HTMLTextAreaElement>('#mcp-import [name=config]');
    config.value = '{"nope": 1}';
    $<HTMLFormElement>('#mcp-import').requestSubmit();
    await settle();
    expect($('#mcp-import-status').textContent).toBe('not an mcp.json file');
    expect(config.value).toBe('{"nope": 1}'); // kept to be fixed
    config.value = '{"mcpServers": {}}';
    $<HTMLFormElement>('#mcp-import').requestSubmit();
    await settle();
    expect($('#tools-status').textContent).toBe("Starting the servers: each one's tools appear as it answers.");
    expect(config.value).toBe('');
    dialog.close();
  });
});
