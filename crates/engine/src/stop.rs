//! Stop strings, matched as text grows: each new piece is searched together with the few bytes
//! before it that a match could begin in, never the whole reply again. The engine ends a reply
//! at the first match ([`StopStrings::find_new`]); the server's stream holds back text that may
//! still become one ([`StopStrings::claimed_from`]). One matcher for both, so they agree.

use crate::Result;

pub use specula_protocol::{MAX_STOP_BYTES, MAX_STOP_STRINGS};

#[derive(Debug, Clone, Default)]
pub struct StopStrings {
    strings: Vec<String>,
    longest: usize,
}

impl StopStrings {
    /// Markers as given; [`check`] says whether a request's stop strings are within bounds.
    pub fn new(strings: Vec<String>) -> Self {
        let longest = strings.iter().map(String::len).max().unwrap_or(0);
        Self { strings, longest }
    }

    /// Stop strings a reply may have: not empty (found everywhere, the reply would end before
    /// it began), at most [`MAX_STOP_STRINGS`] of at most [`MAX_STOP_BYTES`] each.
    pub fn check(strings: &[String]) -> Result<()> {
        Ok(specula_protocol::options::check_stop_strings(strings)?)
    }

    pub fn is_empty(&self) -> bool {
        self.strings.is_empty()
    }

    /// Where the first stop string in `text` begins, given that `text[..checked]` was searched
    /// before (as `text` grew) and held none. Only matches that end past `checked` can be new,
    /// and they begin at most `longest - 1` bytes before it.
    pub fn find_new(&self, text: &str, checked: usize) -> Option<usize> {
        if self.strings.is_empty() {
            return None;
        }
        let from = floor_char_boundary(text, checked.saturating_sub(self.longest - 1));
        let window = &text[from..];
        self.strings.iter().filter_map(|s| window.find(s.as_str())).min().map(|at| from + at)
    }

    /// Where the stop strings claim `text` from: for each, its first whole match at or after
    /// `from`, else the start of the longest tail of `text` that begins it; the earliest of
    /// those, or the end. Text before the
    /// answer can never become part of a match; `from` is where the caller knows none begins
    /// earlier (what it already released).
    pub fn claimed_from(&self, text: &str, from: usize) -> usize {
        let from = floor_char_boundary(text, from.min(text.len()));
        let window = &text[from..];
        let claim = |s: &String| window.find(s.as_str()).unwrap_or_else(|| partial_at_end(window, s));
        self.strings.iter().map(|s| from + claim(s)).min().unwrap_or(text.len())
    }
}

/// Where the longest tail of `text` that is a proper prefix of `marker` begins (`text.len()`
/// when none is). Only tails shorter than the marker are tried, and only those starting with
/// its first byte.
fn partial_at_end(text: &str, marker: &str) -> usize {
    let Some(&first) = marker.as_bytes().first() else { return text.len() };
    let bytes = text.as_bytes();
    let start = text.len().saturating_sub(marker.len() - 1);
    (start..text.len())
        .filter(|&i| bytes[i] == first && text.is_char_boundary(i))
        .find(|&i| marker.starts_with(&text[i..]))
        .unwrap_or(text.len())
}

fn floor_char_boundary(text: &str, mut at: usize) -> usize {
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stops(s: &[&str]) -> StopStrings {
        StopStrings::new(s.iter().map(|s| s.to_string()).collect())
    }

    /// The whole-text rule the incremental one replaces.
    fn first_match(strings: &[&str], text: &str) -> Option<usize> {
        strings.iter().filter_map(|s| text.find(s)).min()
    }

    #[test]
    fn growing_text_finds_what_a_whole_search_finds_at_the_same_piece() {
        let mut seed = 7u64;
        let mut next = move |n: u64| {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        let alphabet = ["a", "b", "ab", "é", "\n", "</s>", "ba", "aé"];
        for _ in 0..2000 {
            let markers: Vec<String> =
                (0..1 + next(3)).map(|_| (0..1 + next(4)).map(|_| alphabet[next(8) as usize]).collect()).collect();
            let refs: Vec<&str> = markers.iter().map(String::as_str).collect();
            let matcher = StopStrings::new(markers.clone());
            let mut text = String::new();
            for _ in 0..30 {
                let checked = text.len();
                text.push_str(alphabet[next(8) as usize]);
                let found = matcher.find_new(&text, checked);
                assert_eq!(found, first_match(&refs, &text), "{refs:?} in {text:?}");
                if found.is_some() {
                    break;
                }
            }
        }
    }

    #[test]
    fn a_stop_split_over_pieces_is_claimed_from_its_first_piece() {
        let m = stops(&[", 5", "</s>"]);
        assert_eq!(m.claimed_from("1, 2, 3, 4,", 0), "1, 2, 3, 4".len());
        assert_eq!(m.claimed_from("1, 2, 3, 4, ", 0), "1, 2, 3, 4".len());
        assert_eq!(m.claimed_from("1, 2, 3, 4, 5", 0), "1, 2, 3, 4".len());
        assert_eq!(m.claimed_from("hello </", 0), "hello ".len());
        assert_eq!(m.claimed_from("hello", 0), 5);
        // Only what lies after `from` is searched.
        assert_eq!(m.claimed_from("</s> and more", 4), "</s> and more".len());
        // A multi-byte marker's partial tail.
        assert_eq!(stops(&["éa"]).claimed_from("xyé", 0), 2);
    }

    #[test]
    fn limits_on_count_length_and_emptiness() {
        let many: Vec<String> = (0..=MAX_STOP_STRINGS).map(|i| i.to_string()).collect();
        assert!(StopStrings::check(&many).unwrap_err().to_string().contains("at most 16"));
        assert!(StopStrings::check(&many[..MAX_STOP_STRINGS]).is_ok());
        assert!(StopStrings::check(&["x".repeat(MAX_STOP_BYTES + 1)]).unwrap_err().to_string().contains("257 bytes"));
        assert!(StopStrings::check(&[String::new()]).is_err());
    }
}
