//! What a stream may send of a reply so far: text that can no longer turn out to be the start
//! of a stop string (or of a tool call), so that a streamed reply's text is the non-streamed
//! reply's text, byte for byte. The engine ends a reply at a stop string and cuts it there;
//! without holding back, the stream would already have sent the stop string's first pieces.

use specula_engine::StopStrings;

pub struct Holdback {
    /// Texts that end what may be streamed where they begin: the stop strings and, when tools
    /// are offered, the tool-call marker. The engine's matcher, so both cut at the same place.
    markers: StopStrings,
    /// Hold a reply that begins with `{` or a code fence: it may be a tool call written as bare
    /// (or fenced) JSON.
    hold_json: bool,
    text: String,
    sent: usize,
}

impl Holdback {
    pub fn new(markers: Vec<String>, hold_json: bool) -> Self {
        Self { markers: StopStrings::new(markers), hold_json, text: String::new(), sent: 0 }
    }

    /// Add a token's text; what may be sent now (often empty).
    pub fn push(&mut self, piece: &str) -> String {
        self.text.push_str(piece);
        let safe = self.safe_len().max(self.sent);
        let out = self.text[self.sent..safe].to_string();
        self.sent = safe;
        out
    }

    /// The rest, once the reply is done: `reply` is its final text (cut at a stop string).
    pub fn finish(&mut self, reply: &str) -> String {
        let rest = match reply.get(self.sent..) {
            Some(rest) if reply.starts_with(&self.text[..self.sent]) => rest.to_string(),
            _ => String::new(),
        };
        self.sent = reply.len().max(self.sent);
        rest
    }

    /// The length of the text that no marker can claim. Only what is not yet sent is searched:
    /// no marker begins in what was (it would have been held), so each token costs its own
    /// length and the markers', not the reply's.
    fn safe_len(&self) -> usize {
        let text = self.text.as_str();
        if self.hold_json && self.sent == 0 {
            let start = text.trim_start();
            // A reply that may be a bare call (JSON, a code block, a list of Python calls,
            // Llama 3.1's tag) is held whole.
            let call_starts = ["{", "[", "```", "<|python_tag|>"];
            if call_starts.iter().any(|s| start.starts_with(s) || s.starts_with(start)) {
                return 0;
            }
        }
        self.markers.claimed_from(text, self.sent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn streamed(markers: &[&str], pieces: &[&str], reply: &str) -> String {
        let mut h = Holdback::new(markers.iter().map(|m| m.to_string()).collect(), false);
        let mut out: String = pieces.iter().map(|p| h.push(p)).collect();
        out.push_str(&h.finish(reply));
        out
    }

    #[test]
    fn a_stop_string_split_over_tokens_is_never_sent() {
        // The engine cuts "1, 2, 3, 4" at ", 5".
        let pieces = ["1", ",", " 2", ",", " 3", ",", " 4", ",", " ", "5"];
        let mut h = Holdback::new(vec![", 5".into()], false);
        let sent: Vec<String> = pieces.iter().map(|p| h.push(p)).collect();
        assert_eq!(sent.concat(), "1, 2, 3, 4");
        assert_eq!(h.finish("1, 2, 3, 4"), "");
    }

    #[test]
    fn held_text_that_did_not_become_a_stop_is_sent_later() {
        assert_eq!(streamed(&["STOP"], &["a S", "T", "x"], "a STx"), "a STx");
        let mut h = Holdback::new(vec!["STOP".into()], false);
        assert_eq!(h.push("a S"), "a ");
        assert_eq!(h.push("Tx"), "STx");
    }

    #[test]
    fn the_stream_equals_the_reply_when_it_ends_without_a_stop() {
        assert_eq!(streamed(&["</s>", "\n\n"], &["Hello", "\n"], "Hello\n"), "Hello\n");
        assert_eq!(streamed(&[], &["é", "t", "é"], "été"), "été");
    }

    #[test]
    fn multibyte_markers_are_cut_on_character_boundaries() {
        assert_eq!(streamed(&["→→"], &["a→", "b"], "a→b"), "a→b");
        let mut h = Holdback::new(vec!["→→".into()], false);
        assert_eq!(h.push("a→"), "a");
    }

    #[test]
    fn a_reply_that_may_be_a_bare_json_tool_call_is_held_whole() {
        let mut h = Holdback::new(Vec::new(), true);
        assert_eq!(h.push(" {\"name\""), "");
        assert_eq!(h.finish(" {\"name\": 1}"), " {\"name\": 1}");
        let mut h = Holdback::new(Vec::new(), true);
        assert_eq!(h.push("Sure"), "Sure");
    }
}
