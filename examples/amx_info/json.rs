//! A small JSON value and its printer: enough for `amx-info --json` without a dependency.

use std::fmt::{self, Write};

/// A JSON value. Objects keep their keys in insertion order.
#[derive(Clone, Debug)]
pub enum Json {
    Null,
    Bool(bool),
    /// An exact integer (printed without a fraction).
    Int(i64),
    /// A measurement; printed with up to 4 decimals, `null` when not finite.
    Num(f64),
    Str(String),
    Arr(Vec<Json>),
    Obj(Vec<(String, Json)>),
}

impl Json {
    /// An empty object, to fill with [`Json::with`].
    pub fn obj() -> Json {
        Json::Obj(Vec::new())
    }

    /// Adds `key: value` to an object (ignored on other values).
    pub fn with(mut self, key: &str, value: impl Into<Json>) -> Json {
        if let Json::Obj(fields) = &mut self {
            fields.push((key.to_owned(), value.into()));
        }
        self
    }

    /// Writes the value, indented by `depth` levels of two spaces.
    fn write(&self, out: &mut String, depth: usize) -> fmt::Result {
        match self {
            Json::Null => out.write_str("null"),
            Json::Bool(b) => write!(out, "{b}"),
            Json::Int(i) => write!(out, "{i}"),
            Json::Num(x) if !x.is_finite() => out.write_str("null"),
            Json::Num(x) => {
                // Four decimals are more than any of these measurements resolve; trailing zeros
                // (and a trailing point) are dropped, so 12.5000 prints as 12.5.
                let text = format!("{x:.4}");
                let text = text.trim_end_matches('0').trim_end_matches('.');
                out.write_str(if text == "-0" { "0" } else { text })
            }
            Json::Str(s) => write_string(out, s),
            Json::Arr(items) if items.is_empty() => out.write_str("[]"),
            Json::Arr(items) => {
                out.write_str("[\n")?;
                for (i, item) in items.iter().enumerate() {
                    indent(out, depth + 1);
                    item.write(out, depth + 1)?;
                    out.write_str(if i + 1 < items.len() { ",\n" } else { "\n" })?;
                }
                indent(out, depth);
                out.write_str("]")
            }
            Json::Obj(fields) if fields.is_empty() => out.write_str("{}"),
            Json::Obj(fields) => {
                out.write_str("{\n")?;
                for (i, (key, value)) in fields.iter().enumerate() {
                    indent(out, depth + 1);
                    write_string(out, key)?;
                    out.write_str(": ")?;
                    value.write(out, depth + 1)?;
                    out.write_str(if i + 1 < fields.len() { ",\n" } else { "\n" })?;
                }
                indent(out, depth);
                out.write_str("}")
            }
        }
    }
}

impl fmt::Display for Json {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = String::new();
        self.write(&mut out, 0)?;
        f.write_str(&out)
    }
}

fn indent(out: &mut String, depth: usize) {
    for _ in 0..depth {
        out.push_str("  ");
    }
}

/// A JSON string literal: quotes, backslashes and control characters escaped (RFC 8259).
fn write_string(out: &mut String, s: &str) -> fmt::Result {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => write!(out, "\\u{:04x}", c as u32)?,
            c => out.push(c),
        }
    }
    out.push('"');
    Ok(())
}

impl From<bool> for Json {
    fn from(b: bool) -> Json {
        Json::Bool(b)
    }
}

impl From<f64> for Json {
    fn from(x: f64) -> Json {
        Json::Num(x)
    }
}

impl From<u64> for Json {
    fn from(i: u64) -> Json {
        i64::try_from(i).map_or(Json::Num(i as f64), Json::Int)
    }
}

impl From<u32> for Json {
    fn from(i: u32) -> Json {
        Json::Int(i64::from(i))
    }
}

impl From<usize> for Json {
    fn from(i: usize) -> Json {
        Json::from(i as u64)
    }
}

impl From<&str> for Json {
    fn from(s: &str) -> Json {
        Json::Str(s.to_owned())
    }
}

impl From<String> for Json {
    fn from(s: String) -> Json {
        Json::Str(s)
    }
}

impl<T: Into<Json>> From<Option<T>> for Json {
    fn from(v: Option<T>) -> Json {
        v.map_or(Json::Null, Into::into)
    }
}

impl<T: Into<Json>> From<Vec<T>> for Json {
    fn from(v: Vec<T>) -> Json {
        Json::Arr(v.into_iter().map(Into::into).collect())
    }
}
