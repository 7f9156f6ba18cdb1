//! The functions a request offers the model, and the grammar that forces a call when the
//! request requires one. Reading calls out of a reply is the protocol's
//! ([`specula_engine::protocol::tool_calls`]): the app's and the CLI's tool loops read them too.

use crate::api::{Tool, ToolChoice};
use serde_json::{json, Value};
use specula_engine::constraint::Grammar;
pub use specula_engine::protocol::tool_calls::{parse, Call, MARKERS};

/// The functions a request offers the model, whether its reply is read for calls, and the
/// grammar that forces a call when the request requires one.
#[derive(Debug, Default)]
pub struct Offer {
    tools: Vec<Tool>,
    forced: Option<Grammar>,
}

impl Offer {
    pub fn none() -> Self {
        Self::default()
    }

    /// What `tools` and `tool_choice` ask for. `none` offers nothing (the template renders no
    /// tools and the reply is plain text); `auto` lets the model choose; `required` and a
    /// named function constrain the reply to a call (of any offered function, or of that one)
    /// by a JSON schema: `{"name": ..., "arguments": {...}}`, which [`parse`] reads.
    pub fn of(tools: Vec<Tool>, choice: Option<ToolChoice>) -> Result<Self, String> {
        if let Some(tool) = tools.iter().find(|t| t.kind != "function" || t.name().is_none()) {
            return Err(format!(
                "a tool of type `{}` without a function name: only functions can be offered",
                tool.kind
            ));
        }
        let forced = match &choice {
            None => None,
            Some(ToolChoice::Mode(mode)) if mode == "auto" => None,
            Some(ToolChoice::Mode(mode)) if mode == "none" => return Ok(Self::none()),
            Some(ToolChoice::Mode(mode)) if mode == "required" => match tools.is_empty() {
                true => return Err("tool_choice `required` with no tools".into()),
                false => Some(call_grammar(&tools)),
            },
            Some(ToolChoice::Mode(other)) => {
                return Err(format!("tool_choice `{other}` is not one of none, auto, required"))
            }
            Some(ToolChoice::Named { function }) => match tools.iter().find(|t| t.name() == Some(&function.name)) {
                Some(tool) => Some(call_grammar(std::slice::from_ref(tool))),
                None => return Err(format!("tool_choice names `{}`, which is not among the tools", function.name)),
            },
        };
        Ok(Self { tools, forced })
    }

    /// The grammar of a call, when the request requires one.
    pub fn forced(&self) -> Option<Grammar> {
        self.forced.clone()
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

/// A call of one of `tools`, as a JSON schema: its name and arguments of its parameters' schema.
fn call_grammar(tools: &[Tool]) -> Grammar {
    let call = |tool: &Tool| {
        let parameters = tool.function.get("parameters").cloned().unwrap_or_else(|| json!({ "type": "object" }));
        json!({
            "type": "object",
            "properties": { "name": { "const": tool.name() }, "arguments": parameters },
            "required": ["name", "arguments"],
            "additionalProperties": false
        })
    };
    let schema = match tools {
        [one] => call(one),
        many => json!({ "anyOf": many.iter().map(call).collect::<Vec<_>>() }),
    };
    Grammar::JsonSchema { schema }
}

#[cfg(test)]
mod tests {
    use super::*;
    use specula_engine::constraint::GrammarCheck;

    fn tool(name: &str) -> Tool {
        Tool { kind: "function".into(), function: serde_json::json!({ "name": name }) }
    }

    #[test]
    fn required_and_named_choices_force_a_call_and_none_offers_nothing() {
        let named = |name: &str| ToolChoice::Named { function: crate::api::NamedFunction { name: name.into() } };
        let schema = |offer: Offer| match offer.forced() {
            Some(Grammar::JsonSchema { schema }) => schema,
            other => panic!("no call schema: {other:?}"),
        };
        let one = schema(Offer::of(vec![tool("add"), tool("mul")], Some(named("mul"))).unwrap());
        assert_eq!(one["properties"]["name"]["const"], "mul");
        assert_eq!(one["required"], json!(["name", "arguments"]));
        let any = schema(Offer::of(vec![tool("add"), tool("mul")], Some(ToolChoice::Mode("required".into()))).unwrap());
        assert_eq!(any["anyOf"].as_array().unwrap().len(), 2);
        assert!(Grammar::JsonSchema { schema: any }.validate().is_ok());
        assert!(Offer::of(vec![tool("add")], Some(named("sub"))).is_err());
        assert!(Offer::of(Vec::new(), Some(ToolChoice::Mode("required".into()))).is_err());
        assert!(!Offer::of(vec![tool("add")], Some(ToolChoice::Mode("none".into()))).unwrap().is_active());
        let auto = Offer::of(vec![tool("add")], None).unwrap();
        assert_eq!(auto.forced(), None);
        assert_eq!(auto.names(), vec!["add"]);
        assert_eq!(auto.rendered()[0]["function"]["name"], "add");
    }
}
