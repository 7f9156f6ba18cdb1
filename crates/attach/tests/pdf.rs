//! A 40-page PDF is read page by page into text, in order; a damaged one is refused.

mod make_pdf;

use specula_attach::{inline, read, Kind};

#[test]
fn a_40_page_pdf_is_read_into_its_text_in_page_order() {
    let bytes = make_pdf::report_pdf(40);
    let file = read("report.pdf", &bytes).unwrap();
    assert_eq!(file.kind, Kind::Pdf { pages: 40 });
    assert!(file.text.contains("Page 1 of 40.") && file.text.contains("Page 40 of 40."), "{}", &file.text[..200]);
    assert!(file.text.find("Page 2 of 40.") < file.text.find("Page 3 of 40."));
    assert!(file.text.contains("Line 30: quarterly figures for region 40-30 rose by"));
    let message = inline("Summarise the report.", &[file]);
    assert!(message.contains("File: report.pdf (40 pages, text extracted)\n```\n"), "{}", &message[..120]);
}

#[test]
fn a_cut_off_pdf_is_refused_not_a_crash() {
    let bytes = make_pdf::report_pdf(3);
    let error = read("cut.pdf", &bytes[..bytes.len() / 2]).unwrap_err();
    assert!(error.starts_with("cut.pdf: this PDF could not be read"), "{error}");
}

#[test]
fn the_inflating_stream_is_valid_zlib_of_the_size_it_says() {
    use std::io::Read;
    let stream = make_pdf::zlib_of_spaces(3);
    assert!(stream.len() < 4 << 10, "3 MiB of spaces deflate to {} bytes", stream.len());
    let mut out = Vec::new();
    flate2::read::ZlibDecoder::new(&stream[..]).read_to_end(&mut out).unwrap();
    assert_eq!(out.len(), 3 << 20);
    assert!(out.iter().all(|&b| b == b' '));
    // The checksum is checked: a wrong one is an error.
    let mut wrong = stream.clone();
    *wrong.last_mut().unwrap() ^= 1;
    assert!(flate2::read::ZlibDecoder::new(&wrong[..]).read_to_end(&mut Vec::new()).is_err());
}
