// The chat window's entry: find the page's parts, apply the theme, connect to the engine (Tauri
// IPC in the app, HTTP in a browser) and start the controller, which wires the views.

import './style.css';
import { connect } from './api/connect';
import { Controller } from './controller';
import { Appearance } from './views/appearance';
import { NoticeView } from './views/notice';
import { findPage } from './views/page';

async function main(): Promise<void> {
  const page = findPage(document);
  const notice = new NoticeView(page.notice);
  const prefersDark = window.matchMedia?.('(prefers-color-scheme: dark)').matches ?? false;
  const appearance = new Appearance(page.appearance, localStorage, prefersDark);
  try {
    const backend = await connect();
    await new Controller(backend, page, { notice, appearance }).start();
  } catch (e) {
    notice.show(e);
  }
}

void main();
