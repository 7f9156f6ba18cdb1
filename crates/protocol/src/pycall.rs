//! Function calls written as Python, as Gemma 3 is taught to write them (a ```tool_code```
//! block holding `get_weather(city="Paris")`) and Llama 3.2 sometimes does
//! (`[get_weather(city="Paris"), add(a=1)]`): keyword arguments whose values are Python
//! literals, read into the JSON object OpenAI's `arguments` is.

use serde_json::{Map, Number, Value};

/// The calls in `code`: one per line, or one list of them; `None` unless all of it is calls.
pub fn calls(code: &str) -> Option<Vec<(String, Value)>> {
    let mut reader = Reader { text: code.trim(), at: 0 };
    let listed = reader.eat('[');
    let mut calls = Vec::new();
    loop {
        reader.skip_space();
        if reader.done() || (listed && reader.peek() == Some(']')) {
            break;
        }
        calls.push(reader.call()?);
        reader.skip_space();
        // Calls are separated by commas in a list, by newlines or semicolons outside one.
        let _ = reader.eat(',') || reader.eat(';');
    }
    if listed && !reader.eat(']') {
        return None;
    }
    reader.skip_space();
    (reader.done() && !calls.is_empty()).then_some(calls)
}

struct Reader<'a> {
    text: &'a str,
    at: usize,
}

/// How deep literals may nest: a reply is not a place for deeper structures.
const MAX_DEPTH: usize = 32;

impl Reader<'_> {
    fn peek(&self) -> Option<char> {
        self.text[self.at..].chars().next()
    }

    fn done(&self) -> bool {
        self.at >= self.text.len()
    }

    fn eat(&mut self, c: char) -> bool {
        self.skip_space();
        let found = self.peek() == Some(c);
        if found {
            self.at += c.len_utf8();
        }
        found
    }

    fn skip_space(&mut self) {
        while let Some(c) = self.peek().filter(|c| c.is_whitespace()) {
            self.at += c.len_utf8();
        }
    }

    fn name(&mut self) -> Option<String> {
        self.skip_space();
        let rest = &self.text[self.at..];
        let len = rest.find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.')).unwrap_or(rest.len());
        let first = rest.chars().next()?;
        if len == 0 || first.is_ascii_digit() {
            return None;
        }
        self.at += len;
        Some(rest[..len].to_string())
    }

    fn call(&mut self) -> Option<(String, Value)> {
        let name = self.name()?;
        if !self.eat('(') {
            return None;
        }
        let mut arguments = Map::new();
        while !self.eat(')') {
            let key = self.name()?;
            if !self.eat('=') {
                return None;
            }
            arguments.insert(key, self.literal(0)?);
            if !self.eat(',') && self.peek() != Some(')') {
                self.skip_space();
                if self.peek() != Some(')') {
                    return None;
                }
            }
        }
        Some((name, Value::Object(arguments)))
    }

    fn literal(&mut self, depth: usize) -> Option<Value> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.skip_space();
        match self.peek()? {
            '"' | '\'' => self.string().map(Value::String),
            '[' | '(' => self.sequence(depth),
            '{' => self.dict(depth),
            _ => self.word(),
        }
    }

    fn sequence(&mut self, depth: usize) -> Option<Value> {
        let close = if self.eat('[') {
            ']'
        } else if self.eat('(') {
            ')'
        } else {
            return None;
        };
        let mut items = Vec::new();
        while !self.eat(close) {
            items.push(self.literal(depth + 1)?);
            if !self.eat(',') && !self.eat(close) {
                return None;
            } else if self.text[..self.at].ends_with(close) {
                break;
            }
        }
        Some(Value::Array(items))
    }

    fn dict(&mut self, depth: usize) -> Option<Value> {
        self.eat('{');
        let mut map = Map::new();
        while !self.eat('}') {
            let key = match self.literal(depth + 1)? {
                Value::String(s) => s,
                other => other.to_string(),
            };
            if !self.eat(':') {
                return None;
            }
            map.insert(key, self.literal(depth + 1)?);
            if !self.eat(',') && !self.eat('}') {
                return None;
            } else if self.text[..self.at].ends_with('}') {
                break;
            }
        }
        Some(Value::Object(map))
    }

    /// A quoted string with Python's common escapes.
    fn string(&mut self) -> Option<String> {
        let quote = self.peek()?;
        self.at += 1;
        let mut out = String::new();
        let mut chars = self.text[self.at..].char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                c if c == quote => {
                    self.at += i + 1;
                    return Some(out);
                }
                '\\' => match chars.next()?.1 {
                    'n' => out.push('\n'),
                    't' => out.push('\t'),
                    'r' => out.push('\r'),
                    other => out.push(other),
                },
                c => out.push(c),
            }
        }
        None
    }

    /// A number, `True`, `False` or `None`.
    fn word(&mut self) -> Option<Value> {
        let rest = &self.text[self.at..];
        let len =
            rest.find(|c: char| !(c.is_alphanumeric() || matches!(c, '.' | '-' | '+' | '_'))).unwrap_or(rest.len());
        let word = &rest[..len];
        let value = match word {
            "True" | "true" => Value::Bool(true),
            "False" | "false" => Value::Bool(false),
            "None" | "null" => Value::Null,
            _ => match word.parse::<i64>() {
                Ok(n) => Value::from(n),
                Err(_) => Value::Number(Number::from_f64(word.parse().ok()?)?),
            },
        };
        self.at += len;
        Some(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn gemma_and_llama_style_python_calls_read_as_json_arguments() {
        let one = calls("get_weather(city=\"Paris\", unit='celsius')").unwrap();
        assert_eq!(one, vec![("get_weather".into(), json!({"city": "Paris", "unit": "celsius"}))]);
        let listed =
            calls("[add(a=1, b=-2.5), search(q=\"a \\\"b\\\"\", tags=['x', 'y'], opts={'deep': True, 'n': None})]");
        assert_eq!(
            listed.unwrap(),
            vec![
                ("add".into(), json!({"a": 1, "b": -2.5})),
                ("search".into(), json!({"q": "a \"b\"", "tags": ["x", "y"], "opts": {"deep": true, "n": null}})),
            ]
        );
        assert_eq!(calls("ping()\nadd(a=1)").unwrap().len(), 2);
    }

    #[test]
    fn what_is_not_only_calls_is_not_calls() {
        for text in ["print('hi') and more", "x = add(a=1)", "add(1, 2)", "add(a=1", "", "[add(a=1)", "add(a=[1, 2)"] {
            assert_eq!(calls(text), None, "{text}");
        }
    }
}
