// A PDF of `pages` pages of text lines, written by hand (the same report as
// crates/attach/tests/make_pdf.rs makes with lopdf), for the window's attachment test: each
// page starts "Page N of M." and carries 30 numbered report lines in Helvetica.

/** The PDF's bytes. */
export function reportPdf(pages) {
  const objects = [];
  const add = (body) => objects.push(body) && objects.length; // object numbers start at 1
  const catalog = add('');
  const pagesId = add('');
  const font = add('<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>');
  const kids = [];
  for (let page = 1; page <= pages; page++) {
    const lines = [`(Page ${page} of ${pages}.) Tj`];
    for (let line = 1; line <= 30; line++) {
      lines.push(`T* (Line ${line}: quarterly figures for region ${page}-${line} rose by ${(page * line) % 17} percent.) Tj`);
    }
    const stream = `BT /F1 10 Tf 50 800 Td 14 TL\n${lines.join('\n')}\nET`;
    const content = add(`<< /Length ${stream.length} >>\nstream\n${stream}\nendstream`);
    kids.push(add(`<< /Type /Page /Parent ${pagesId} 0 R /Contents ${content} 0 R >>`));
  }
  objects[catalog - 1] = `<< /Type /Catalog /Pages ${pagesId} 0 R >>`;
  objects[pagesId - 1] =
    `<< /Type /Pages /Kids [${kids.map((k) => `${k} 0 R`).join(' ')}] /Count ${kids.length} ` +
    `/Resources << /Font << /F1 ${font} 0 R >> >> /MediaBox [0 0 595 842] >>`;
  let out = '%PDF-1.5\n';
  const offsets = objects.map((body, i) => {
    const at = out.length;
    out += `${i + 1} 0 obj\n${body}\nendobj\n`;
    return at;
  });
  const xref = out.length;
  out += `xref\n0 ${objects.length + 1}\n0000000000 65535 f \n`;
  for (const at of offsets) out += `${String(at).padStart(10, '0')} 00000 n \n`;
  out += `trailer\n<< /Size ${objects.length + 1} /Root ${catalog} 0 R >>\nstartxref\n${xref}\n%%EOF\n`;
  return out; // ASCII only: its string length is its byte length
}
