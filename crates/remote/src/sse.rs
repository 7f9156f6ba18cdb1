//! Server-sent events read with bounds: a line longer than the limit, a body past its total,
//! or bytes that are not UTF-8 end the stream with an error instead of growing memory.

use std::io::{BufRead, BufReader, Read};

/// What ended reading a stream early.
#[derive(Debug)]
pub enum SseError {
    LineTooLong(usize),
    BodyTooLarge(u64),
    NotUtf8,
    Io(std::io::Error),
}

/// One field line of an event stream that matters here.
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    /// A `data:` line's payload.
    Data(String),
    /// A blank line, a comment, or a field other than `data` (`event:`, `id:`, `retry:`).
    Other,
}

pub struct SseReader<R> {
    reader: BufReader<R>,
    max_line: usize,
    max_body: u64,
    read: u64,
    buf: Vec<u8>,
}

impl<R: Read> SseReader<R> {
    pub fn new(reader: R, max_line: usize, max_body: u64) -> Self {
        Self { reader: BufReader::with_capacity(16 * 1024, reader), max_line, max_body, read: 0, buf: Vec::new() }
    }

    /// The next line; `None` at the end of the body.
    pub fn next_line(&mut self) -> Result<Option<Line>, SseError> {
        self.buf.clear();
        // One byte past the limit tells a line of exactly `max_line` from a longer one.
        let limit = self.max_line as u64 + 1;
        let n = (&mut self.reader).take(limit).read_until(b'\n', &mut self.buf).map_err(SseError::Io)?;
        if n == 0 {
            return Ok(None);
        }
        self.read += n as u64;
        if self.read > self.max_body {
            return Err(SseError::BodyTooLarge(self.max_body));
        }
        let line = self.buf.strip_suffix(b"\n").unwrap_or(&self.buf);
        if line.len() > self.max_line {
            return Err(SseError::LineTooLong(self.max_line));
        }
        let line = std::str::from_utf8(line).map_err(|_| SseError::NotUtf8)?;
        let line = line.strip_suffix('\r').unwrap_or(line);
        Ok(Some(match line.strip_prefix("data:") {
            Some(data) => Line::Data(data.strip_prefix(' ').unwrap_or(data).to_string()),
            None => Line::Other,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(body: &str, max_line: usize) -> Vec<Result<Line, String>> {
        let mut sse = SseReader::new(body.as_bytes(), max_line, 1 << 20);
        let mut out = Vec::new();
        loop {
            match sse.next_line() {
                Ok(Some(line)) => out.push(Ok(line)),
                Ok(None) => return out,
                Err(e) => {
                    out.push(Err(format!("{e:?}")));
                    return out;
                }
            }
        }
    }

    #[test]
    fn data_lines_are_read_and_other_fields_passed_over() {
        let got = lines(": keep-alive\nevent: x\ndata: {\"a\":1}\r\n\ndata:[DONE]\n", 64);
        assert_eq!(
            got.into_iter().map(Result::unwrap).collect::<Vec<_>>(),
            [Line::Other, Line::Other, Line::Data("{\"a\":1}".into()), Line::Other, Line::Data("[DONE]".into())]
        );
    }

    #[test]
    fn a_line_past_the_limit_ends_the_stream() {
        let long = format!("data: {}\n", "x".repeat(100));
        let got = lines(&long, 32);
        assert!(matches!(got.last(), Some(Err(e)) if e.starts_with("LineTooLong")), "{got:?}");
        // Exactly at the limit is a line.
        let exact = format!("{}\n", "y".repeat(32));
        assert_eq!(lines(&exact, 32).len(), 1);
    }

    #[test]
    fn the_body_total_is_bounded_and_bytes_must_be_utf8() {
        let mut sse = SseReader::new("data: 1\ndata: 2\ndata: 3\n".as_bytes(), 64, 10);
        assert!(sse.next_line().is_ok());
        assert!(matches!(sse.next_line(), Err(SseError::BodyTooLarge(10))));
        let mut bad = SseReader::new(&b"data: \xff\xfe\n"[..], 64, 1 << 20);
        assert!(matches!(bad.next_line(), Err(SseError::NotUtf8)));
    }
}
