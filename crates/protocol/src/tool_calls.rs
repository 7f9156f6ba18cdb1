//! Tool calls in a reply, as the models' own templates teach them to write them: Qwen2.5,
//! Qwen3 and Hermes-style templates wrap each call in `<tool_call>` tags around a JSON object
//! `{"name": ..., "arguments": {...}}`; Llama 3.x writes the object bare, with `parameters`
//! (3.1 after `<|python_tag|>`, several separated by `;`); Gemma 3 writes Python in a
//! ```` ```tool_code ```` block, and Llama 3.2 sometimes a list of Python calls.
//! Text that does not parse as a call stays content: nothing the model wrote is dropped.
//!
//! Here, not in the server, because the server's API, the app's and the CLI's MCP tool loops
//! read calls alike.

use serde_json::Value;

const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";
/// Where a call may begin inside a reply: the stream holds text back from there.
pub const MARKERS: &[&str] = &[OPEN, CODE_OPEN];

#[derive(Debug, PartialEq)]
pub struct Call {
    pub name: String,
    /// The arguments as a JSON text (OpenAI's shape).
    pub arguments: String,
}

#[derive(Debug, PartialEq)]
pub struct Parsed {
    pub content: String,
    pub calls: Vec<Call>,
}

/// The calls in `text` of the functions named in `known`, and the content around them.
pub fn parse(text: &str, known: &[&str]) -> Parsed {
    let bare = text.trim();
    let bare = bare.strip_prefix("<|python_tag|>").unwrap_or(bare).trim();
    if let Some(calls) = bare_calls(unfenced(bare), known) {
        return Parsed { content: String::new(), calls };
    }
    if text.contains(CODE_OPEN) {
        return tagged(text, CODE_OPEN, CODE_CLOSE, &|body| python_calls(body, known));
    }
    tagged(text, OPEN, CLOSE, &|body| call_of(body, known).map(|call| vec![call]))
}

/// Gemma 3's block of calls.
const CODE_OPEN: &str = "```tool_code";
const CODE_CLOSE: &str = "```";

/// The calls in blocks between `open` and `close` tags, and the text around them; a block
/// that does not read as calls stays content.
fn tagged(text: &str, open: &str, close: &str, read: &dyn Fn(&str) -> Option<Vec<Call>>) -> Parsed {
    let mut content = String::new();
    let mut calls = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find(open) {
        let body_and_rest = &rest[start + open.len()..];
        let (body, after) = match body_and_rest.find(close) {
            Some(end) => (&body_and_rest[..end], &body_and_rest[end + close.len()..]),
            None => (body_and_rest, ""),
        };
        match read(body.trim()) {
            Some(found) => {
                content.push_str(&rest[..start]);
                calls.extend(found);
            }
            None => content.push_str(&rest[..rest.len() - after.len()]),
        }
        rest = after;
    }
    content.push_str(rest);
    let content = if calls.is_empty() { content } else { content.trim().to_string() };
    Parsed { content, calls }
}

/// A whole reply that is calls: one JSON call, several separated by `;` (Llama 3.1), or
/// Python calls (Llama 3.2's list).
fn bare_calls(text: &str, known: &[&str]) -> Option<Vec<Call>> {
    if let Some(call) = call_of(text, known) {
        return Some(vec![call]);
    }
    if text.starts_with('{') && text.contains(';') {
        return text.split(';').map(|one| call_of(one.trim(), known)).collect();
    }
    python_calls(text, known)
}

/// Python calls, all of known functions, or none.
fn python_calls(code: &str, known: &[&str]) -> Option<Vec<Call>> {
    let calls = crate::pycall::calls(code)?;
    calls
        .into_iter()
        .map(|(name, arguments)| {
            known.contains(&name.as_str()).then(|| Call { name, arguments: arguments.to_string() })
        })
        .collect()
}

/// A reply that is one Markdown code block, without its fence: small models often wrap the
/// call they were taught to write bare.
pub fn unfenced(text: &str) -> &str {
    let Some(body) = text.strip_prefix("```").and_then(|t| t.strip_suffix("```")) else { return text };
    let body = body.strip_prefix("json").unwrap_or(body);
    body.trim()
}

/// A JSON object naming a known function, with its arguments (an object, or a JSON text).
fn call_of(json: &str, known: &[&str]) -> Option<Call> {
    let value: Value = serde_json::from_str(json).ok()?;
    let name = value.get("name")?.as_str()?;
    if !known.contains(&name) {
        return None;
    }
    let arguments = match value.get("arguments").or_else(|| value.get("parameters")) {
        Some(Value::String(text)) => text.clone(),
        Some(args) => args.to_string(),
        None => "{}".into(),
    };
    Some(Call { name: name.to_string(), arguments })
}

/// One round of a reply that called tools: its text up to its calls (their own markup left
/// out), and those calls; the last round is the answer, with none.
#[derive(Debug, PartialEq)]
pub struct Round<'a> {
    pub text: String,
    pub calls: Vec<&'a crate::ToolCard>,
}

/// A reply's tokens and its cards as the rounds the model wrote: split at each card's `at`
/// (cards of one place share a round). The prompt of the reply's next turn and its Markdown
/// export both read the reply this way.
pub fn rounds<'a>(tokens: &[crate::TokenEvent], cards: &'a [crate::ToolCard]) -> Vec<Round<'a>> {
    let text = |from: usize, to: usize| -> String {
        let from = from.min(tokens.len());
        tokens[from..to.clamp(from, tokens.len())].iter().map(|t| t.text.as_str()).collect()
    };
    let mut rounds = Vec::new();
    let mut from = 0;
    let mut cards = cards.iter().peekable();
    while let Some(card) = cards.next() {
        // Never before the last round's end (an archive may say anything).
        let at = (card.at as usize).max(from);
        let mut calls = vec![card];
        while let Some(next) = cards.next_if(|c| c.at == card.at) {
            calls.push(next);
        }
        let names: Vec<&str> = calls.iter().map(|c| c.tool.as_str()).collect();
        rounds.push(Round { text: parse(&text(from, at), &names).content, calls });
        from = at;
    }
    rounds.push(Round { text: text(from, tokens.len()), calls: Vec::new() });
    rounds
}

#[cfg(test)]
mod tests {
    use super::*;

    const KNOWN: &[&str] = &["get_weather", "add"];

    #[test]
    fn tagged_calls_are_parsed_and_removed_from_the_content() {
        let text = "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1}}\n</tool_call>";
        let parsed = parse(text, KNOWN);
        assert_eq!(parsed.content, "Let me check.");
        assert_eq!(parsed.calls.len(), 2);
        assert_eq!(parsed.calls[0].name, "get_weather");
        assert_eq!(serde_json::from_str::<Value>(&parsed.calls[0].arguments).unwrap()["city"], "Paris");
    }

    #[test]
    fn a_bare_llama_style_call_is_a_call() {
        let parsed = parse(" {\"name\": \"add\", \"parameters\": {\"a\": 1, \"b\": 2}}", KNOWN);
        assert_eq!(parsed.calls, vec![Call { name: "add".into(), arguments: "{\"a\":1,\"b\":2}".into() }]);
        assert_eq!(parsed.content, "");
    }

    #[test]
    fn a_call_in_a_json_code_block_is_a_call() {
        let parsed = parse("```json\n{\"name\": \"add\", \"arguments\": {\"a\": 1}}\n```", KNOWN);
        assert_eq!(parsed.calls, vec![Call { name: "add".into(), arguments: "{\"a\":1}".into() }]);
        let code = "```python\nprint(1)\n```";
        assert_eq!(parse(code, KNOWN).content, code);
    }

    #[test]
    fn what_is_not_a_call_of_a_known_function_stays_content() {
        for text in [
            "plain text",
            "<tool_call>{not json}</tool_call>",
            "<tool_call>{\"name\": \"rm_rf\", \"arguments\": {}}</tool_call>",
            "{\"name\": \"unknown\"}",
        ] {
            assert_eq!(parse(text, KNOWN), Parsed { content: text.into(), calls: vec![] }, "{text}");
        }
    }

    #[test]
    fn gemma_tool_code_blocks_and_llama_python_tags_are_calls() {
        let gemma = "I'll look it up.\n```tool_code\nget_weather(city=\"Paris\")\n```";
        let parsed = parse(gemma, KNOWN);
        assert_eq!(parsed.content, "I'll look it up.");
        assert_eq!(parsed.calls, vec![Call { name: "get_weather".into(), arguments: "{\"city\":\"Paris\"}".into() }]);
        let llama31 = "<|python_tag|>{\"name\": \"add\", \"parameters\": {\"a\": 1}}; {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Rome\"}}";
        assert_eq!(parse(llama31, KNOWN).calls.len(), 2);
        let llama32 = "[get_weather(city='Rome'), add(a=1, b=2)]";
        let parsed = parse(llama32, KNOWN);
        assert_eq!(parsed.calls[1], Call { name: "add".into(), arguments: "{\"a\":1,\"b\":2}".into() });
        let unknown = "```tool_code\nrm(path='/')\n```";
        assert_eq!(parse(unknown, KNOWN), Parsed { content: unknown.into(), calls: vec![] });
    }

    #[test]
    fn a_call_cut_off_by_max_tokens_stays_content() {
        let text = "<tool_call>\n{\"name\": \"add\", \"argu";
        assert_eq!(parse(text, KNOWN).calls, vec![]);
        assert_eq!(parse(text, KNOWN).content, text);
    }
}

#[cfg(test)]
mod rounds_tests {
    use super::*;

    #[test]
    fn rounds_never_panic_on_places_out_of_order_or_past_the_end() {
        let token = |text: &str| crate::TokenEvent {
            id: 0,
            text: text.into(),
            source: crate::Source::Target,
            p: None,
            q: None,
            alternatives: Vec::new(),
        };
        let card = |id: &str, at| crate::ToolCard {
            id: id.into(),
            server: "s".into(),
            tool: "t".into(),
            arguments: serde_json::Value::Null,
            at,
            running: false,
            outcome: None,
        };
        let tokens = [token("a"), token("b"), token("c")];
        let cards = [card("1", 9), card("2", 1)];
        let rounds = rounds(&tokens, &cards);
        let texts: Vec<&str> = rounds.iter().map(|r| r.text.as_str()).collect();
        assert_eq!(texts, ["abc", "", ""]);
        assert_eq!(rounds.iter().map(|r| r.calls.len()).collect::<Vec<_>>(), [1, 1, 0]);
    }
}
