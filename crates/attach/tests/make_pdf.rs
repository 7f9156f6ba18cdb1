//! A PDF of `pages` pages of text lines, made with lopdf (the reader's own library), for the
//! attachment tests: each page starts "Page N of M." and carries numbered report lines.

use lopdf::content::{Content, Operation};
use lopdf::{dictionary, Document, Object, Stream};

pub fn report_pdf(pages: usize) -> Vec<u8> {
    let mut doc = Document::with_version("1.5");
    let pages_id = doc.new_object_id();
    let font_id = doc.add_object(dictionary! { "Type" => "Font", "Subtype" => "Type1", "BaseFont" => "Helvetica" });
    let resources_id = doc.add_object(dictionary! { "Font" => dictionary! { "F1" => font_id } });
    let mut kids = Vec::new();
    for page in 1..=pages {
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
        let content = Content { operations };
        let content_id = doc.add_object(Stream::new(dictionary! {}, content.encode().unwrap()));
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
