//! PDFs for the attachment tests, made with lopdf (the reader's own library): a report of
//! `pages` pages of text lines, each page starting "Page N of M." and carrying numbered report
//! lines; and a one-page file whose content stream inflates to gigabytes.

use lopdf::content::{Content, Operation};
use lopdf::{dictionary, Document, Object, Stream};

pub fn report_pdf(pages: usize) -> Vec<u8> {
    let contents = (1..=pages)
        .map(|page| {
            let mut operations = vec![Operation::new("BT", vec![]), Operation::new("Tf", vec!["F1".into(), 10.into()])];
            operations.push(Operation::new("Td", vec![50.into(), 800.into()]));
            operations.push(Operation::new("TL", vec![14.into()]));
            operations.push(Operation::new("Tj", vec![Object::string_literal(format!("Page {page} of {pages}."))]));
            for line in 1..=30 {
                let text = format!(
                    "Line {line}: quarterly figures for region {page}-{line} rose by {} percent.",
                    (page * line) % 17
                );
                operations.push(Operation::new("T*", vec![]));
                operations.push(Operation::new("Tj", vec![Object::string_literal(text)]));
            }
            operations.push(Operation::new("ET", vec![]));
            Stream::new(dictionary! {}, Content { operations }.encode().unwrap())
        })
        .collect();
    pdf(contents)
}

/// One page whose content stream is `mib` MiB of spaces, deflated: a few KiB on disk that a
/// reader inflating it whole must find `mib` MiB for.
#[allow(dead_code)]
pub fn inflating_pdf(mib: usize) -> Vec<u8> {
    pdf(vec![Stream::new(dictionary! { "Filter" => "FlateDecode" }, zlib_of_spaces(mib))])
}

/// A zlib stream of `mib` MiB of spaces, made in a blink: after a sync flush each further MiB
/// deflates to the same bytes, so they are repeated rather than compressed again.
pub fn zlib_of_spaces(mib: usize) -> Vec<u8> {
    use flate2::{Compress, Compression, FlushCompress};
    let chunk = vec![b' '; 1 << 20];
    let mut deflate = Compress::new(Compression::best(), false);
    let mut block = |input: &[u8], flush| {
        let mut out = Vec::with_capacity(1 << 16);
        let before = deflate.total_in();
        deflate.compress_vec(input, &mut out, flush).unwrap();
        assert_eq!(deflate.total_in() - before, input.len() as u64, "the block took all its input");
        out
    };
    let first = block(&chunk, FlushCompress::Sync);
    let next = block(&chunk, FlushCompress::Sync);
    assert_eq!(block(&chunk, FlushCompress::Sync), next, "a MiB of spaces deflates the same each time");
    let end = block(&[], FlushCompress::Finish);
    // The zlib header (deflate, 32 KiB window, best), then the blocks, then Adler-32 of it all.
    let mut out = vec![0x78, 0xDA];
    out.extend(&first);
    for _ in 1..mib {
        out.extend(&next);
    }
    out.extend(&end);
    let n = (mib as u128) << 20;
    let (a, b) = ((1 + 32 * n) % 65521, (n + 32 * n * (n + 1) / 2) % 65521);
    out.extend(((b << 16 | a) as u32).to_be_bytes());
    out
}

/// A PDF with a page per content stream, in Helvetica.
fn pdf(contents: Vec<Stream>) -> Vec<u8> {
    let mut doc = Document::with_version("1.5");
    let pages_id = doc.new_object_id();
    let font_id = doc.add_object(dictionary! { "Type" => "Font", "Subtype" => "Type1", "BaseFont" => "Helvetica" });
    let resources_id = doc.add_object(dictionary! { "Font" => dictionary! { "F1" => font_id } });
    let mut kids = Vec::new();
    for content in contents {
        let content_id = doc.add_object(content);
        kids.push(
            doc.add_object(dictionary! { "Type" => "Page", "Parent" => pages_id, "Contents" => content_id }).into(),
        );
    }
    let count = kids.len() as i64;
    doc.objects.insert(
        pages_id,
        Object::Dictionary(dictionary! {
            "Type" => "Pages", "Kids" => kids, "Count" => count, "Resources" => resources_id,
            "MediaBox" => vec![0.into(), 0.into(), 595.into(), 842.into()],
        }),
    );
    let catalog_id = doc.add_object(dictionary! { "Type" => "Catalog", "Pages" => pages_id });
    doc.trailer.set("Root", catalog_id);
    let mut bytes = Vec::new();
    doc.save_to(&mut bytes).unwrap();
    bytes
}
