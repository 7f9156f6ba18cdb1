//! Reading other apps' JSON exports without holding them whole: conversations are parsed into
//! typed structs one at a time and handed on as each ends, so a 100 MB export peaks near its
//! own size, never at the several times a `serde_json::Value` of it would take. And the
//! errors say where: a type error names its conversation, a cut file says it ends early.

use std::cell::Cell;
use std::fmt;
use std::io::{BufRead, BufReader, Read};
use std::marker::PhantomData;

use serde::de::{self, DeserializeOwned, Deserializer as _, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::error::Category;

use super::ImportError;

/// The reader, buffered (serde_json reads byte by byte) and past a UTF-8 byte order mark,
/// which Windows editors add and serde_json would refuse.
pub(crate) fn buffered<R: Read>(reader: R) -> Result<BufReader<R>, ImportError> {
    let mut reader = BufReader::with_capacity(1 << 16, reader);
    let start = reader.fill_buf().map_err(|e| ImportError(format!("the file cannot be read: {e}")))?;
    if start.starts_with(b"\xEF\xBB\xBF") {
        reader.consume(3);
    }
    Ok(reader)
}

/// The first byte that is not white space, left unread; none for a file of nothing else.
pub(crate) fn peek<R: Read>(reader: &mut BufReader<R>) -> Result<Option<u8>, ImportError> {
    loop {
        let buffer = reader.fill_buf().map_err(|e| ImportError(format!("the file cannot be read: {e}")))?;
        if buffer.is_empty() {
            return Ok(None);
        }
        if let Some(&byte) = buffer.iter().find(|b| !b.is_ascii_whitespace()) {
            return Ok(Some(byte));
        }
        let all = buffer.len();
        reader.consume(all);
    }
}

/// Reads a JSON array of conversations (or a lone conversation object), handing each to
/// `take` with its number from 1 as soon as it is parsed. The first error stops the read:
/// `take`'s own, or serde's with the conversation it was in.
pub(crate) fn read_list<T, F>(reader: impl Read, take: F) -> Result<(), ImportError>
where
    T: DeserializeOwned,
    F: FnMut(usize, T) -> Result<(), ImportError>,
{
    let mut deserializer = serde_json::Deserializer::from_reader(buffered(reader)?);
    let reading = Cell::new(0);
    let mut refused = None;
    let list = List { take, reading: &reading, refused: &mut refused, entry: PhantomData };
    let result = deserializer.deserialize_any(list).and_then(|()| deserializer.end());
    if let Some(refusal) = refused {
        return Err(refusal);
    }
    let at = match reading.get() {
        0 => None,
        n => Some(format!("conversation {n}")),
    };
    result.map_err(|e| json_error(&e, at.as_deref()))
}

/// Reads a stream of JSON values (JSON Lines, or one value alone), handing each to `take`
/// with its number from 1 as soon as it is parsed.
pub(crate) fn read_stream<T, F>(reader: impl Read, mut take: F) -> Result<(), ImportError>
where
    T: DeserializeOwned,
    F: FnMut(usize, T) -> Result<(), ImportError>,
{
    let values = serde_json::Deserializer::from_reader(buffered(reader)?).into_iter::<T>();
    for (i, value) in values.enumerate() {
        let value = value.map_err(|e| json_error(&e, Some(&format!("entry {}", i + 1))))?;
        take(i + 1, value)?;
    }
    Ok(())
}

/// serde's error, said for a person: what went wrong first, then serde's own words, which
/// carry the line and column.
pub(crate) fn json_error(error: &serde_json::Error, at: Option<&str>) -> ImportError {
    let within = at.map(|at| format!(" (in {at})")).unwrap_or_default();
    ImportError(match (error.classify(), at) {
        (Category::Eof, _) => format!("the file ends early{within}: {error}"),
        (Category::Syntax, _) => format!("the file is not JSON{within}: {error}"),
        (Category::Io, _) => format!("the file cannot be read{within}: {error}"),
        (Category::Data, Some(at)) => format!("{at}: a field has the wrong type or is missing: {error}"),
        (Category::Data, None) => format!("the file is not a list of conversations: {error}"),
    })
}

/// The visitor behind [`read_list`]. `reading` tells the caller which entry an error came
/// from; `refused` carries `take`'s own error out past serde, which only passes its own type.
struct List<'a, T, F> {
    take: F,
    reading: &'a Cell<usize>,
    refused: &'a mut Option<ImportError>,
    entry: PhantomData<T>,
}

impl<T, F> List<'_, T, F>
where
    F: FnMut(usize, T) -> Result<(), ImportError>,
{
    fn hand_on<E: de::Error>(&mut self, n: usize, entry: T) -> Result<(), E> {
        (self.take)(n, entry).map_err(|refusal| {
            *self.refused = Some(refusal);
            E::custom("refused")
        })
    }
}

impl<'de, T, F> Visitor<'de> for List<'_, T, F>
where
    T: Deserialize<'de>,
    F: FnMut(usize, T) -> Result<(), ImportError>,
{
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of conversations")
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<(), A::Error> {
        for n in 1.. {
            self.reading.set(n);
            let Some(entry) = seq.next_element::<T>()? else { break };
            self.hand_on(n, entry)?;
        }
        self.reading.set(0);
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(mut self, map: A) -> Result<(), A::Error> {
        self.reading.set(1);
        let entry = T::deserialize(de::value::MapAccessDeserializer::new(map))?;
        self.hand_on(1, entry)?;
        self.reading.set(0);
        Ok(())
    }
}

/// A JSON object read as its entries in file order, repeated keys kept (a map would keep
/// the last silently): the tree builder then refuses an id used twice.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Entries<T>(pub Vec<(String, T)>);

impl<T> Default for Entries<T> {
    fn default() -> Self {
        Self(Vec::new())
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Entries<T> {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct EntriesVisitor<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for EntriesVisitor<T> {
            type Value = Entries<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object of messages by id")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Entries<T>, A::Error> {
                let mut entries = Vec::new();
                while let Some(entry) = map.next_entry()? {
                    entries.push(entry);
                }
                Ok(Entries(entries))
            }
        }
        deserializer.deserialize_map(EntriesVisitor(PhantomData))
    }
}

/// Text or nothing, for a value that may hold either: a ChatGPT message's `parts` mix text
/// with objects (an image, a sound) and the odd `null`, none of which is text of the chat.
pub(crate) fn lenient_text<'de, D: de::Deserializer<'de>>(deserializer: D) -> Result<Option<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Text {
        Text(String),
        Other(de::IgnoredAny),
    }
    Ok(match Text::deserialize(deserializer)? {
        Text::Text(text) => Some(text),
        Text::Other(_) => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize, PartialEq)]
    struct Item {
        n: u32,
    }

    fn list(text: &str) -> Result<Vec<u32>, ImportError> {
        let mut seen = Vec::new();
        read_list(text.as_bytes(), |_, item: Item| {
            seen.push(item.n);
            Ok(())
        })?;
        Ok(seen)
    }

    #[test]
    fn a_list_an_object_and_a_byte_order_mark_read() {
        assert_eq!(list("[{\"n\":1},{\"n\":2}]").unwrap(), [1, 2]);
        assert_eq!(list(" {\"n\":7} ").unwrap(), [7]);
        assert_eq!(list("\u{feff}[{\"n\":3}]").unwrap(), [3]);
    }

    #[test]
    fn errors_say_what_and_where() {
        let cut = list("[{\"n\":1},{\"n\":").unwrap_err().0;
        assert!(cut.starts_with("the file ends early (in conversation 2)") && cut.contains("line 1"), "{cut}");
        let wrong = list("[{\"n\":1},{\"n\":\"x\"}]").unwrap_err().0;
        assert!(wrong.starts_with("conversation 2: a field has the wrong type") && wrong.contains("column"), "{wrong}");
        let garbage = list("<html>").unwrap_err().0;
        assert!(garbage.starts_with("the file is not JSON"), "{garbage}");
        let number = list("3").unwrap_err().0;
        assert!(number.starts_with("the file is not a list of conversations"), "{number}");
        let trailing = list("[] x").unwrap_err().0;
        assert!(trailing.starts_with("the file is not JSON"), "{trailing}");
    }

    #[test]
    fn a_refusal_of_the_taker_stops_the_read_as_it_is() {
        let error = read_list("[{\"n\":1},{\"n\":2},{\"n\":3}]".as_bytes(), |n, _: Item| {
            if n == 2 {
                Err(ImportError("no two".into()))
            } else {
                Ok(())
            }
        });
        assert_eq!(error, Err(ImportError("no two".into())));
    }

    #[test]
    fn a_stream_reads_value_after_value() {
        let mut seen = Vec::new();
        read_stream("{\"n\":1}\n\n{\"n\":2}\n".as_bytes(), |_, item: Item| {
            seen.push(item.n);
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, [1, 2]);
        let error = read_stream("{\"n\":1}\n{\"n\":".as_bytes(), |_, _: Item| Ok(())).unwrap_err().0;
        assert!(error.starts_with("the file ends early (in entry 2)"), "{error}");
    }

    #[test]
    fn entries_keep_order_and_repeats() {
        let entries: Entries<u32> = serde_json::from_str("{\"b\":1,\"a\":2,\"b\":3}").unwrap();
        assert_eq!(entries.0, [("b".into(), 1), ("a".into(), 2), ("b".into(), 3)]);
    }
}
