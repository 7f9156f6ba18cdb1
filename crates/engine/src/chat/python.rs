//! What templates get from transformers beyond Jinja itself, as Python does it: string
//! methods (minijinja's pycompat), `raise_exception`, `strftime_now`, and a `tojson` that
//! writes what Python's `json.dumps` writes (`", "` and `": "` separators, keys in their
//! order, non-ASCII as is), since a prompt with compact JSON is one the model never saw.

use minijinja::value::{Kwargs, Value, ValueKind};
use minijinja::{Environment, Error, ErrorKind};
use std::cell::Cell;
use std::fmt::Write;

/// The functions and filters transformers adds to its Jinja environment.
pub(super) fn install(env: &mut Environment<'static>) {
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_function("raise_exception", |message: String| -> Result<String, Error> {
        Err(Error::new(ErrorKind::InvalidOperation, message))
    });
    env.add_function("strftime_now", strftime_now);
    env.add_filter("tojson", tojson);
}

thread_local! {
    /// The time `strftime_now` reads during a render on this thread; `None`: the clock.
    static CLOCK: Cell<Option<chrono::NaiveDateTime>> = const { Cell::new(None) };
}

/// Run `render` with `strftime_now` reading `now` (tests pin the day Llama 3 prints).
pub(super) fn with_clock<T>(now: Option<chrono::NaiveDateTime>, render: impl FnOnce() -> T) -> T {
    CLOCK.with(|clock| clock.set(now));
    let out = render();
    CLOCK.with(|clock| clock.set(None));
    out
}

fn strftime_now(format: String) -> Result<String, Error> {
    let now = CLOCK.with(Cell::get).unwrap_or_else(|| chrono::Local::now().naive_local());
    let mut out = String::new();
    // chrono refuses a format it cannot read through fmt::Error, not a panic, with write!.
    write!(out, "{}", now.format(&format))
        .map_err(|_| Error::new(ErrorKind::InvalidOperation, format!("strftime_now: bad format {format:?}")))?;
    Ok(out)
}

/// `json.dumps(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False)`,
/// the keywords as transformers' `tojson` takes them (indent also first by position).
fn tojson(value: &Value, indent: Option<Value>, kwargs: Kwargs) -> Result<String, Error> {
    let indent = match kwargs.get::<Option<Value>>("indent")?.or(indent) {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) if v.kind() == ValueKind::Number => Some(" ".repeat(usize::try_from(v).unwrap_or(0).min(64))),
        Some(v) => Some(v.as_str().unwrap_or_default().chars().take(64).collect()),
    };
    let separators: Option<Vec<String>> = kwargs.get("separators")?;
    let (item, key) = match separators.as_deref() {
        Some([item, key]) => (item.clone(), key.clone()),
        Some(_) => return Err(Error::new(ErrorKind::InvalidOperation, "tojson: separators is a pair")),
        None if indent.is_some() => (",".into(), ": ".into()),
        None => (", ".into(), ": ".into()),
    };
    let style = Style {
        indent,
        item,
        key,
        ensure_ascii: kwargs.get::<Option<bool>>("ensure_ascii")?.unwrap_or(false),
        sort_keys: kwargs.get::<Option<bool>>("sort_keys")?.unwrap_or(false),
    };
    kwargs.assert_all_used()?;
    let mut out = String::new();
    style.write(&mut out, value, 0)?;
    Ok(out)
}

struct Style {
    indent: Option<String>,
    item: String,
    key: String,
    ensure_ascii: bool,
    sort_keys: bool,
}

impl Style {
    fn write(&self, out: &mut String, value: &Value, depth: usize) -> Result<(), Error> {
        // Recursion is bounded by minijinja's own depth limit on the values it builds.
        match value.kind() {
            ValueKind::Undefined | ValueKind::None => out.push_str("null"),
            ValueKind::Bool => out.push_str(if value.is_true() { "true" } else { "false" }),
            ValueKind::Number => write_number(out, value),
            ValueKind::String => self.write_string(out, value.as_str().unwrap_or_default()),
            ValueKind::Seq | ValueKind::Iterable => {
                let items: Vec<Value> = value.try_iter()?.collect();
                self.write_container(out, '[', ']', &items, depth, |out, item| self.write(out, item, depth + 1))?;
            }
            ValueKind::Map => {
                let mut keys: Vec<Value> = value.try_iter()?.collect();
                if self.sort_keys {
                    keys.sort_by_key(|k| k.to_string());
                }
                self.write_container(out, '{', '}', &keys, depth, |out, key| {
                    self.write_string(out, &key_text(key));
                    out.push_str(&self.key);
                    self.write(out, &value.get_item(key)?, depth + 1)
                })?;
            }
            _ => self.write_string(out, &value.to_string()),
        }
        Ok(())
    }

    fn write_container(
        &self,
        out: &mut String,
        open: char,
        close: char,
        items: &[Value],
        depth: usize,
        mut write_item: impl FnMut(&mut String, &Value) -> Result<(), Error>,
    ) -> Result<(), Error> {
        out.push(open);
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                out.push_str(&self.item);
            }
            self.newline(out, depth + 1);
            write_item(out, item)?;
        }
        if !items.is_empty() {
            self.newline(out, depth);
        }
        out.push(close);
        Ok(())
    }

    fn newline(&self, out: &mut String, depth: usize) {
        if let Some(indent) = &self.indent {
            out.push('\n');
            for _ in 0..depth {
                out.push_str(indent);
            }
        }
    }

    /// A JSON string as Python writes it: `\uXXXX` in lower case, the short escapes, and
    /// (with `ensure_ascii`) everything past ASCII as UTF-16 escapes.
    fn write_string(&self, out: &mut String, text: &str) {
        out.push('"');
        for c in text.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '\u{8}' => out.push_str("\\b"),
                '\u{c}' => out.push_str("\\f"),
                c if (c as u32) < 0x20 || (self.ensure_ascii && (c as u32) > 0x7e) => {
                    let mut units = [0u16; 2];
                    for unit in c.encode_utf16(&mut units) {
                        let _ = write!(out, "\\u{unit:04x}");
                    }
                }
                c => out.push(c),
            }
        }
        out.push('"');
    }
}

/// A map key as Python's json writes it: strings as they are, numbers and booleans as text.
fn key_text(key: &Value) -> String {
    match key.kind() {
        ValueKind::Bool => (if key.is_true() { "true" } else { "false" }).into(),
        ValueKind::None | ValueKind::Undefined => "null".into(),
        _ => key.as_str().map_or_else(|| key.to_string(), str::to_string),
    }
}

/// A number as Python's `repr` writes it: integers whole; floats with a `.0` or an exponent
/// past 1e16 or below 1e-4, `NaN` and `Infinity` as json.dumps allows them.
fn write_number(out: &mut String, value: &Value) {
    if value.is_integer() {
        let _ = write!(out, "{value}");
        return;
    }
    let x = f64::try_from(value.clone()).unwrap_or(f64::NAN);
    out.push_str(&python_float(x));
}

fn python_float(x: f64) -> String {
    if x.is_nan() {
        return "NaN".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    if x == 0.0 {
        return if x.is_sign_negative() { "-0.0" } else { "0.0" }.into();
    }
    // The shortest digits that read back as x, and their exponent, then Python's layout.
    let scientific = format!("{x:e}");
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    if (-4..16).contains(&exponent) {
        let plain = format!("{x}");
        return if plain.contains('.') { plain } else { format!("{plain}.0") };
    }
    let sign = if exponent < 0 { '-' } else { '+' };
    format!("{mantissa}e{sign}{:02}", exponent.abs())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(source: &str, context: serde_json::Value) -> String {
        let mut env = Environment::new();
        install(&mut env);
        env.render_str(source, context).unwrap()
    }

    #[test]
    fn tojson_writes_what_python_json_dumps_writes() {
        // Each expected text is json.dumps(...) in Python 3.11, keys in the order given.
        let value = serde_json::json!({"z": 1, "a": [1.5, 1e-5, 1e20, 100.0, -0.0], "é": "ü\n\"\\\u{1}/", "n": null, "t": true, "e": {}, "l": []});
        let out = render("{{ v|tojson }}", serde_json::json!({ "v": value }));
        assert_eq!(
            out,
            r#"{"z": 1, "a": [1.5, 1e-05, 1e+20, 100.0, -0.0], "é": "ü\n\"\\\u0001/", "n": null, "t": true, "e": {}, "l": []}"#
        );
        let out = render("{{ v|tojson(indent=2) }}", serde_json::json!({ "v": {"a": [1, 2], "b": {}} }));
        assert_eq!(out, "{\n  \"a\": [\n    1,\n    2\n  ],\n  \"b\": {}\n}");
        let out = render(
            "{{ v|tojson(ensure_ascii=true, sort_keys=true, separators=[',', ':']) }}",
            serde_json::json!({ "v": {"b": "€😀", "a": 1} }),
        );
        assert_eq!(out, r#"{"a":1,"b":"\u20ac\ud83d\ude00"}"#);
    }

    #[test]
    fn floats_are_laid_out_as_python_repr_lays_them_out() {
        for (x, python) in [
            (0.1, "0.1"),
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (0.0001, "0.0001"),
            (1.5e-7, "1.5e-07"),
            (-2.5, "-2.5"),
            (123456789.125, "123456789.125"),
        ] {
            assert_eq!(python_float(x), python, "{x}");
        }
    }

    #[test]
    fn strftime_now_reads_the_pinned_clock() {
        let day = chrono::NaiveDate::from_ymd_opt(2026, 12, 4).unwrap().and_hms_opt(9, 30, 0).unwrap();
        let out = with_clock(Some(day), || render("{{ strftime_now('%d %b %Y') }}", serde_json::json!({})));
        assert_eq!(out, "04 Dec 2026");
        let mut env = Environment::new();
        install(&mut env);
        assert!(env.render_str("{{ strftime_now('%Q') }}", ()).is_err(), "a bad format is an error, not a panic");
    }
}
