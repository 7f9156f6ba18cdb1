//! Tool calls in a reply, as the models' own templates teach them to write them: Qwen2.5,
//! Qwen3 and Hermes-style templates wrap each call in `<tool_call>` tags around a JSON object
//! `{"name": ..., "arguments": {...}}`; Llama 3.x writes the object bare, with `parameters`.
//! Text that does not parse as a call stays content: nothing the model wrote is dropped.

use crate::api::{Tool, ToolChoice};
use serde_json::Value;

pub const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";

/// The functions a request offers the model, and whether its reply is read for calls.
#[derive(Debug, Default)]
pub struct Offer {
    tools: Vec<Tool>,
}

impl Offer {
    pub fn none() -> Self {
        Self::default()
    }

    /// What `tools` and `tool_choice` ask for. `none` offers nothing (the template renders no
    /// tools and the reply is plain text). `required` and a named function need the reply
    /// constrained to a call, which this server cannot enforce yet: they are refused rather
    /// than hoped for.
    pub fn of(tools: Vec<Tool>, choice: Option<ToolChoice>) -> Result<Self, String> {
        if let Some(tool) = tools.iter().find(|t| t.kind != "function" || t.name().is_none()) {
            return Err(format!(
                "a tool of type `{}` without a function name: only functions can be offered",
                tool.kind
            ));
        }
        match choice {
            None => Ok(Self { tools }),
            Some(ToolChoice::Mode(mode)) if mode == "auto" => Ok(Self { tools }),
            Some(ToolChoice::Mode(mode)) if mode == "none" => Ok(Self::none()),
            Some(ToolChoice::Mode(mode)) if mode == "required" => {
                Err("tool_choice `required` is not supported yet: the reply cannot be constrained to a tool call; \
                 use `auto`"
                    .into())
            }
            Some(ToolChoice::Mode(other)) => Err(format!("tool_choice `{other}` is not one of none, auto, required")),
            Some(ToolChoice::Named { function }) => Err(format!(
                "tool_choice naming `{}` is not supported yet: the reply cannot be constrained to a tool call; \
                 use `auto`",
                function.name
            )),
        }
    }

    /// The tools as the chat template receives them (OpenAI's entries, whole).
    pub fn rendered(&self) -> Vec<Value> {
        self.tools.iter().filter_map(|t| serde_json::to_value(t).ok()).collect()
    }

    pub fn is_active(&self) -> bool {
        !self.tools.is_empty()
    }

    pub fn names(&self) -> Vec<&str> {
        self.tools.iter().filter_map(Tool::name).collect()
    }
}

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
    if let Some(call) = call_of(unfenced(text.trim()), known) {
        return Parsed { content: String::new(), calls: vec![call] };
    }
    let mut content = String::new();
    let mut calls = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find(OPEN) {
        let body_and_rest = &rest[start + OPEN.len()..];
        let (body, after) = match body_and_rest.find(CLOSE) {
            Some(end) => (&body_and_rest[..end], &body_and_rest[end + CLOSE.len()..]),
            None => (body_and_rest, ""),
        };
        match call_of(body.trim(), known) {
            Some(call) => {
                content.push_str(&rest[..start]);
                calls.push(call);
            }
            None => content.push_str(&rest[..rest.len() - after.len()]),
        }
        rest = after;
    }
    content.push_str(rest);
    let content = if calls.is_empty() { content } else { content.trim().to_string() };
    Parsed { content, calls }
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

    fn tool(name: &str) -> Tool {
        Tool { kind: "function".into(), function: serde_json::json!({ "name": name }) }
    }

    #[test]
    fn choices_that_need_constrained_decoding_are_refused_and_none_offers_nothing() {
        let named = ToolChoice::Named { function: crate::api::NamedFunction { name: "add".into() } };
        assert!(Offer::of(vec![tool("add")], Some(named)).is_err());
        assert!(Offer::of(vec![tool("add")], Some(ToolChoice::Mode("required".into()))).is_err());
        assert!(!Offer::of(vec![tool("add")], Some(ToolChoice::Mode("none".into()))).unwrap().is_active());
        let auto = Offer::of(vec![tool("add")], None).unwrap();
        assert_eq!(auto.names(), vec!["add"]);
        assert_eq!(auto.rendered()[0]["function"]["name"], "add");
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
    fn a_call_cut_off_by_max_tokens_stays_content() {
        let text = "<tool_call>\n{\"name\": \"add\", \"argu";
        assert_eq!(parse(text, KNOWN).calls, vec![]);
        assert_eq!(parse(text, KNOWN).content, text);
    }
}
