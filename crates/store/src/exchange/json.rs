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

use super::{ImportError, MAX_MESSAGES_PER_CONVERSATION, MAX_MESSAGE_BYTES};

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
        // Past a bound ("more than …"): no field is wrong, the conversation is too big.
        (Category::Data, Some(at)) if error.to_string().contains("more than") => format!("{at}: {error}"),
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
                    // Refused as it is read: a million nodes must not be held first.
                    if entries.len() == MAX_ENTRIES {
                        return Err(de::Error::custom(format!(
                            "more than {MAX_ENTRIES} messages in one conversation (at most {MAX_MESSAGES_PER_CONVERSATION} are kept)"
                        )));
                    }
                    entries.push(entry);
                }
                Ok(Entries(entries))
            }
        }
        deserializer.deserialize_map(EntriesVisitor(PhantomData))
    }
}

/// How many entries a conversation's object of messages may have: the messages a conversation
/// may hold, and as many again for the nodes an import leaves out (hidden, tool, empty).
const MAX_ENTRIES: usize = 2 * MAX_MESSAGES_PER_CONVERSATION;

/// Text or nothing, for a value that may hold either: a ChatGPT message's `parts` mix text
/// with objects (an image, a sound) and the odd `null`, none of which is text of the chat.
/// Read without buffering the value (an untagged enum would copy it first) and bounded.
pub(crate) fn lenient_text<'de, D: de::Deserializer<'de>>(deserializer: D) -> Result<Option<String>, D::Error> {
    deserializer.deserialize_any(TextVisitor { lenient: true })
}

/// A text field, or null; longer than a message may be is refused as it is read, before a
/// copy of it is made.
pub(crate) fn bounded_text<'de, D: de::Deserializer<'de>>(deserializer: D) -> Result<Option<String>, D::Error> {
    deserializer.deserialize_option(TextVisitor { lenient: false })
}

struct TextVisitor {
    /// Whether a value that is not text reads as none (rather than an error).
    lenient: bool,
}

impl TextVisitor {
    fn not_text<E: de::Error>(&self, what: de::Unexpected) -> Result<Option<String>, E> {
        match self.lenient {
            true => Ok(None),
            false => Err(E::invalid_type(what, self)),
        }
    }
}

/// The text, unless it is longer than a message may be.
fn bounded<E: de::Error>(text: &str) -> Result<(), E> {
    match text.len() > MAX_MESSAGE_BYTES {
        true => Err(E::custom(format!(
            "a text of {} MiB, more than the {} MiB a message may be",
            text.len() >> 20,
            MAX_MESSAGE_BYTES >> 20
        ))),
        false => Ok(()),
    }
}

impl<'de> Visitor<'de> for TextVisitor {
    type Value = Option<String>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("text")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        bounded(v)?;
        Ok(Some(v.to_owned()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        bounded(&v)?;
        Ok(Some(v))
    }
    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
        self.not_text(de::Unexpected::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        self.not_text(de::Unexpected::Signed(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        self.not_text(de::Unexpected::Unsigned(v))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        self.not_text(de::Unexpected::Float(v))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<de::IgnoredAny>()?.is_some() {}
        self.not_text(de::Unexpected::Seq)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while map.next_entry::<de::IgnoredAny, de::IgnoredAny>()?.is_some() {}
        self.not_text(de::Unexpected::Map)
    }
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

    #[derive(Debug, Deserialize)]
    struct Texts {
        #[serde(deserialize_with = "lenient_text")]
        lenient: Option<String>,
        #[serde(default, deserialize_with = "bounded_text")]
        strict: Option<String>,
    }

    #[test]
    fn texts_are_bounded_as_they_are_read_and_non_text_is_none_where_lenient() {
        let read = |json: &str| serde_json::from_reader::<_, Texts>(json.as_bytes());
        let t = read(r#"{"lenient": {"image": [1, 2]}, "strict": "hi"}"#).unwrap();
        assert_eq!((t.lenient, t.strict.as_deref()), (None, Some("hi")));
        assert_eq!(read(r#"{"lenient": "a", "strict": null}"#).unwrap().strict, None);
        assert!(read(r#"{"lenient": "a", "strict": 5}"#).unwrap_err().to_string().contains("expected text"));
        let long = "y".repeat(MAX_MESSAGE_BYTES + 1);
        let refused = read(&format!(r#"{{"lenient": "{long}"}}"#)).unwrap_err().to_string();
        assert!(refused.contains("more than the 8 MiB a message may be"), "{refused}");
    }

    #[test]
    fn entries_keep_order_and_repeats() {
        let entries: Entries<u32> = serde_json::from_str("{\"b\":1,\"a\":2,\"b\":3}").unwrap();
        assert_eq!(entries.0, [("b".into(), 1), ("a".into(), 2), ("b".into(), 3)]);
    }
}
