//! Text from outside (a model's tokens, a remote's answers and errors, names read from a
//! file or the Hub) made safe to print on a terminal: a terminal takes some characters as
//! commands (set the window title, write the clipboard, clear the screen, move the cursor),
//! and a reply must not be able to give them.

use std::borrow::Cow;
use std::fmt::Write;

/// `text` with every character a terminal would act on shown as a visible escape instead:
/// the C0 controls other than newline and tab, DEL and the C1 controls (U+0080..=U+009F,
/// which some terminals take as ESC sequences: U+009B is CSI). Borrowed, with no
/// allocation, when there is nothing to escape: the streaming path prints every token
/// through here.
///
/// The scheme: C0 and DEL as `\xNN` (ESC is `\x1b`), the byte as `printf`, `echo -e`, C,
/// Python and Rust write it, one byte in UTF-8 too; C1 as `\u{NN}` (U+009B is `\u{9b}`),
/// the code point as Rust writes it, because in UTF-8 it is two bytes (C2 9B) and `\x9b`
/// would name a byte the text does not hold. Two lowercase hex digits in both, so every
/// escape is short and greppable.
///
/// A carriage return moves the cursor to the start of the line, so that what follows
/// overwrites what was printed (a fake prompt over the real text): a `\r` is escaped (as
/// `\x0d`) unless a `\n` follows it, since `\r\n` ends a line as `\n` does. Newline and
/// tab are printed as they are.
///
/// What this is not: a reversible encoding. A backslash in the text is printed as it is
/// (escaping every backslash would mangle code and Windows paths), so a model may print
/// the characters `\x1b` itself; that is harmless. Where the exact text matters, the
/// commands' `--json` output carries it (JSON escapes control characters already).
pub fn printable(text: &str) -> Cow<'_, str> {
    let bytes = text.as_bytes();
    let Some(first) = (0..bytes.len()).find(|&i| unsafe_at(bytes, i)) else {
        return Cow::Borrowed(text);
    };
    let mut out = String::with_capacity(text.len() + 8);
    out.push_str(&text[..first]);
    let mut chars = text[first..].chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\n' | '\t' => out.push(c),
            '\r' if chars.peek() == Some(&'\n') => out.push(c),
            '\0'..='\x1f' | '\x7f' => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            '\u{80}'..='\u{9f}' => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// JSON text (`serde_json`'s) with DEL and the C1 controls written as JSON's own `\u007f`
/// and `\u009b` escapes: `serde_json` escapes the C0 controls but writes these raw, and a
/// terminal may act on a raw U+009B (CSI) as on ESC `[`. Outside strings JSON holds only
/// ASCII, so this changes no value: the output parses to exactly what it did. Borrowed
/// when there is nothing to escape.
pub fn printable_json(json: &str) -> Cow<'_, str> {
    let bytes = json.as_bytes();
    let c1_or_del = |i: usize| match bytes[i] {
        0x7f => true,
        0xc2 => matches!(bytes.get(i + 1), Some(0x80..=0x9f)),
        _ => false,
    };
    let Some(first) = (0..bytes.len()).find(|&i| c1_or_del(i)) else {
        return Cow::Borrowed(json);
    };
    let mut out = String::with_capacity(json.len() + 8);
    out.push_str(&json[..first]);
    for c in json[first..].chars() {
        match c {
            '\x7f' | '\u{80}'..='\u{9f}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Whether the character starting at byte `i` of valid UTF-8 is one `printable` escapes.
fn unsafe_at(bytes: &[u8], i: usize) -> bool {
    match bytes[i] {
        b'\n' | b'\t' => false,
        b'\r' => bytes.get(i + 1) != Some(&b'\n'),
        0..=0x1f | 0x7f => true,
        // U+0080..=U+009F is C2 80..=C2 9F in UTF-8; a C2 byte only ever starts a character.
        0xc2 => matches!(bytes.get(i + 1), Some(0x80..=0x9f)),
        _ => false,
    }
}

/// A stream of texts (a reply's tokens) made printable one at a time. The one thing a text
/// alone cannot tell is whether its trailing `\r` ends a line (`\r\n` split across two
/// tokens) or returns over it: that `\r` is held back and decided by the next text. A `\r`
/// still held when the stream ends is dropped: the reply's last line is ended with a
/// newline by whoever printed it, so printed it would only have returned to that line's
/// start before the newline, which shows nothing.
#[derive(Default)]
pub struct PrintableStream {
    held_cr: bool,
}

impl PrintableStream {
    /// What to print for `text`, in two parts: the verdict on a `\r` held from the text
    /// before (empty, `"\r"` or `"\\x0d"`), then `text` made printable.
    pub fn next<'a>(&mut self, text: &'a str) -> (&'static str, Cow<'a, str>) {
        let held = match std::mem::take(&mut self.held_cr) {
            false => "",
            true if text.starts_with('\n') => "\r",
            true => "\\x0d",
        };
        let text = match text.strip_suffix('\r') {
            Some(rest) => {
                self.held_cr = true;
                rest
            }
            None => text,
        };
        (held, printable(text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owned(text: &str) -> String {
        match printable(text) {
            Cow::Owned(s) => s,
            Cow::Borrowed(_) => panic!("{text:?} was left as it is"),
        }
    }

    #[test]
    fn ordinary_text_is_borrowed_as_it_is() {
        for text in ["", "Hello, world", "line\nnext\tcolumn\r\n", "naïve 日本語 ✓ \u{a0}\u{ff}", "C:\\x1b\\path"]
        {
            assert!(matches!(printable(text), Cow::Borrowed(t) if t == text), "{text:?}");
        }
    }

    #[test]
    fn an_osc_52_clipboard_write_is_shown_not_done() {
        assert_eq!(owned("a\x1b]52;c;ZWNobyBoaQ==\x07b"), "a\\x1b]52;c;ZWNobyBoaQ==\\x07b");
    }

    #[test]
    fn an_osc_0_window_title_is_shown_not_set() {
        assert_eq!(owned("\x1b]0;pwned\x07"), "\\x1b]0;pwned\\x07");
        // OSC ended by ST (ESC \) rather than BEL.
        assert_eq!(owned("\x1b]0;pwned\x1b\\"), "\\x1b]0;pwned\\x1b\\");
    }

    #[test]
    fn a_clear_screen_is_shown_in_its_7_bit_and_c1_forms() {
        assert_eq!(owned("\x1b[2J\x1b[H$ "), "\\x1b[2J\\x1b[H$ ");
        assert_eq!(owned("\u{9b}2J"), "\\u{9b}2J");
        assert_eq!(owned("\u{80}\u{9d}\u{9f}"), "\\u{80}\\u{9d}\\u{9f}");
    }

    #[test]
    fn a_bare_carriage_return_is_shown_and_a_line_ending_one_kept() {
        assert_eq!(owned("rm -rf ~\r# harmless"), "rm -rf ~\\x0d# harmless");
        assert_eq!(owned("end\r"), "end\\x0d");
        assert_eq!(owned("\r\r\n"), "\\x0d\r\n");
        assert_eq!(printable("one\r\ntwo\r\n"), "one\r\ntwo\r\n");
    }

    #[test]
    fn every_other_c0_control_and_del_is_escaped() {
        assert_eq!(owned("\0\x01\x08\x0b\x0c\x1f\x7f"), "\\x00\\x01\\x08\\x0b\\x0c\\x1f\\x7f");
        // Text before the first escape is copied as it is, multi-byte characters included.
        assert_eq!(owned("é→\x1b"), "é→\\x1b");
    }

    #[test]
    fn json_keeps_its_value_and_loses_its_raw_del_and_c1_controls() {
        let value = serde_json::json!(["a\x1b[2J\u{9b}2J\x7f\u{80}é", 1]);
        let json = serde_json::to_string(&value).unwrap();
        let safe = printable_json(&json);
        assert_eq!(safe, r#"["a\u001b[2J\u009b2J\u007f\u0080é",1]"#);
        assert_eq!(serde_json::from_str::<serde_json::Value>(&safe).unwrap(), value);
        let plain = r#"{"text":"ok é"}"#;
        assert!(matches!(printable_json(plain), Cow::Borrowed(t) if t == plain));
    }

    #[test]
    fn a_streams_split_crlf_is_a_line_end_and_any_other_held_cr_is_shown() {
        let mut stream = PrintableStream::default();
        assert_eq!(stream.next("one\r"), ("", Cow::Borrowed("one")));
        assert_eq!(stream.next("\ntwo"), ("\r", Cow::Borrowed("\ntwo")));
        assert_eq!(stream.next("\r"), ("", Cow::Borrowed("")));
        assert_eq!(stream.next("fake prompt"), ("\\x0d", Cow::Borrowed("fake prompt")));
        assert_eq!(stream.next("\x1b[2J\r\r"), ("", Cow::Owned("\\x1b[2J\\x0d".into())));
        assert_eq!(stream.next("x"), ("\\x0d", Cow::Borrowed("x")));
    }
}
