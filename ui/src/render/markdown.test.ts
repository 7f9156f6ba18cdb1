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
