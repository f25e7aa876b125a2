//! Python's behaviour inside templates: `namespace()`, how values print (`str`/`repr`),
//! `tojson`, and the string methods templates call.

use super::*;

/// `namespace(...)` with transformers' extra rule: no attribute may start
/// with an underscore (its guard against reaching Python internals).  The
/// rule is checked for the initial values; `{% set ns._x = ... %}` cannot be
/// intercepted and is accepted.
pub(super) fn namespace(args: Rest<Value>, kwargs: Kwargs) -> Result<Value, Error> {
    let mut initial = Vec::new();
    for arg in args.iter() {
        if arg.kind() != ValueKind::Map {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("namespace() expects a dict, got {}", arg.kind()),
            ));
        }
        for key in arg.try_iter()? {
            let value = arg.get_item(&key)?;
            initial.push((key, value));
        }
    }
    for key in kwargs.args() {
        initial.push((Value::from(key), kwargs.get::<Value>(key)?));
    }
    for (key, _) in &initial {
        if key.as_str().is_some_and(|k| k.starts_with('_')) {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                format!(
                    "Chat templates cannot store underscore-prefixed attributes on a namespace, \
                     but got {}. Please rename the attribute.",
                    py_repr(key)?
                ),
            ));
        }
    }
    let defaults = Value::from_pairs(initial);
    minijinja::functions::namespace(Some(ValueOrKwargs::from(defaults)))
}

// ---------------------------------------------------------------------------
// Printing values the way Python's str() does
// ---------------------------------------------------------------------------

/// `{{ value }}` prints `str(value)` in Jinja2: `None`, `True`,
/// `[1, 'a']`, `{'k': 'v'}`, `1e+16`.  Strings are written unescaped
/// because transformers' environment does not autoescape.
pub(super) fn python_formatter(
    out: &mut minijinja::Output,
    _state: &mut State,
    value: &Value,
) -> Result<(), Error> {
    if let Some(s) = value.as_str() {
        out.write_str(s)?;
    } else if !value.is_undefined() {
        out.write_str(&py_str(value)?)?;
    }
    Ok(())
}

/// Python's `str()` of a template value.
pub(super) fn py_str(value: &Value) -> Result<String, Error> {
    match value.as_str() {
        Some(s) => Ok(s.to_owned()),
        None if value.is_undefined() => Ok(String::new()),
        None => py_repr(value),
    }
}

/// Python's `repr()` of a template value (how items inside printed lists
/// and dicts look).  Tuple literals written in a template print as lists:
/// MiniJinja makes them lists.
pub(super) fn py_repr(value: &Value) -> Result<String, Error> {
    let mut out = String::new();
    write_repr(&mut out, value)?;
    Ok(out)
}

pub(super) fn write_repr(out: &mut String, value: &Value) -> Result<(), Error> {
    match value.kind() {
        ValueKind::Undefined => out.push_str("Undefined"),
        ValueKind::None => out.push_str("None"),
        ValueKind::Bool => out.push_str(if value.is_true() { "True" } else { "False" }),
        ValueKind::Number => out.push_str(&py_number(value)?),
        ValueKind::String => {
            write_py_str_repr(out, value.as_str().unwrap_or_default());
        }
        ValueKind::Seq | ValueKind::Iterable => {
            // `dict.items()` yields real tuples, which print as `('k', 'v')`.
            let tuple = value.is_tuple();
            out.push(if tuple { '(' } else { '[' });
            let mut len = 0;
            for item in value.try_iter()? {
                if len > 0 {
                    out.push_str(", ");
                }
                write_repr(out, &item)?;
                len += 1;
            }
            if tuple && len == 1 {
                out.push(',');
            }
            out.push(if tuple { ')' } else { ']' });
        }
        ValueKind::Map => {
            out.push('{');
            for (i, key) in value.try_iter()?.enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_repr(out, &key)?;
                out.push_str(": ");
                write_repr(out, &value.get_item(&key)?)?;
            }
            out.push('}');
        }
        _ => {
            let _ = write!(out, "{value}");
        }
    }
    Ok(())
}

/// Python's `repr(str)`: single quotes unless the text has a single quote
/// and no double quote; backslash escapes for the quote, `\\`, `\n`, `\r`,
/// `\t` and for characters Python does not consider printable.
pub(super) fn write_py_str_repr(out: &mut String, s: &str) {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if !py_is_printable(c) => {
                let cp = c as u32;
                let _ = match cp {
                    0..=0xff => write!(out, "\\x{cp:02x}"),
                    0x100..=0xffff => write!(out, "\\u{cp:04x}"),
                    _ => write!(out, "\\U{cp:08x}"),
                };
            }
            c => out.push(c),
        }
    }
    out.push(quote);
}

/// Approximates Python's `str.isprintable()` for one character: control
/// characters, separators other than the space, and the common format
/// characters are escaped by `repr`.  (Unassigned code points, which Python
/// also escapes, are not known here.)
pub(super) fn py_is_printable(c: char) -> bool {
    !matches!(c,
        '\0'..='\x1f' | '\x7f'..='\u{a0}' | '\u{ad}' | '\u{600}'..='\u{605}' | '\u{61c}'
        | '\u{6dd}' | '\u{70f}' | '\u{1680}' | '\u{180e}' | '\u{2000}'..='\u{200f}'
        | '\u{2028}'..='\u{202f}' | '\u{205f}'..='\u{2064}' | '\u{2066}'..='\u{206f}'
        | '\u{3000}' | '\u{e000}'..='\u{f8ff}' | '\u{feff}' | '\u{fff9}'..='\u{fffb}'
        | '\u{f0000}'..='\u{10ffff}')
}

/// A number as Python prints it: integers in full, floats with `repr`.
pub(super) fn py_number(value: &Value) -> Result<String, Error> {
    if value.is_integer() {
        return Ok(value.to_string());
    }
    let f = f64::try_from(value.clone())?;
    Ok(py_float_repr(f))
}

/// Python's `repr(float)`: the shortest digits that round-trip, in fixed
/// notation when the exponent is in `-4..16` (always with a `.0` for whole
/// numbers), otherwise scientific with a signed two-digit exponent.
pub(super) fn py_float_repr(f: f64) -> String {
    if f.is_nan() {
        return "nan".to_owned();
    }
    if f.is_infinite() {
        return if f > 0.0 { "inf" } else { "-inf" }.to_owned();
    }
    // `{:e}` gives the shortest round-trip digits, e.g. "-1.5e-7", "1e16".
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let mut out = String::from(sign);
    if (-4..16).contains(&exp) {
        if exp < 0 {
            out.push_str("0.");
            out.extend(std::iter::repeat_n('0', (-exp - 1) as usize));
            out.push_str(&digits);
        } else {
            let int_len = exp as usize + 1;
            if digits.len() <= int_len {
                out.push_str(&digits);
                out.extend(std::iter::repeat_n('0', int_len - digits.len()));
                out.push_str(".0");
            } else {
                out.push_str(&digits[..int_len]);
                out.push('.');
                out.push_str(&digits[int_len..]);
            }
        }
    } else {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let _ = write!(
            out,
            "e{}{:02}",
            if exp < 0 { '-' } else { '+' },
            exp.unsigned_abs()
        );
    }
    out
}

// ---------------------------------------------------------------------------
// tojson: Python's json.dumps
// ---------------------------------------------------------------------------

/// transformers' `tojson(x, ensure_ascii=False, indent=None,
/// separators=None, sort_keys=False)`, i.e. `json.dumps` with those
/// arguments.  It replaces Jinja2's (and MiniJinja's) built-in, which
/// HTML-escapes `<`, `>`, `&` and `'`: tool schemas must reach the model as
/// written.  Arguments may be positional or keywords, as in Python.
pub(super) fn tojson(value: &Value, args: Rest<ValueOrKwargs>) -> Result<Value, Error> {
    type Args = (
        Option<Value>,
        Option<Value>,
        Option<Value>,
        Option<Value>,
        Kwargs,
    );
    let args = args.into_values();
    let (ensure_ascii, indent, separators, sort_keys, kwargs): Args = from_args(&args)?;
    let pick = |positional: Option<Value>, name: &str| -> Result<Option<Value>, Error> {
        match positional {
            Some(v) => Ok(Some(v)),
            None => kwargs.get::<Option<Value>>(name),
        }
    };
    let ensure_ascii = pick(ensure_ascii, "ensure_ascii")?.is_some_and(|v| v.is_true());
    let sort_keys = pick(sort_keys, "sort_keys")?.is_some_and(|v| v.is_true());
    let indent = match pick(indent, "indent")? {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) => Some(match v.kind() {
            ValueKind::String => v.as_str().unwrap_or_default().to_owned(),
            ValueKind::Bool => " ".repeat(usize::from(v.is_true())),
            ValueKind::Number if v.is_integer() => {
                let n = i64::try_from(v)?;
                " ".repeat(usize::try_from(n).unwrap_or(0))
            }
            _ => {
                return Err(Error::new(
                    ErrorKind::InvalidOperation,
                    format!(
                        "tojson: indent must be an integer or a string, not {}",
                        v.kind()
                    ),
                ))
            }
        }),
    };
    let (item_sep, key_sep) = match pick(separators, "separators")? {
        Some(v) if !v.is_none() => {
            let parts: Vec<Value> = v.try_iter()?.collect();
            match parts.as_slice() {
                [a, b] if a.as_str().is_some() && b.as_str().is_some() => (
                    a.as_str().unwrap_or_default().to_owned(),
                    b.as_str().unwrap_or_default().to_owned(),
                ),
                _ => {
                    return Err(Error::new(
                        ErrorKind::InvalidOperation,
                        "tojson: separators must be a pair of strings",
                    ))
                }
            }
        }
        // json.dumps drops the space after ',' when indenting, so lines do
        // not end in a space.
        _ if indent.is_some() => (",".to_owned(), ": ".to_owned()),
        _ => (", ".to_owned(), ": ".to_owned()),
    };
    kwargs.assert_all_used()?;
    let encoder = JsonEncoder {
        ensure_ascii,
        indent,
        item_sep,
        key_sep,
        sort_keys,
    };
    let mut out = String::new();
    encoder.encode(&mut out, value, 0)?;
    Ok(Value::from(out))
}

/// The settings of one `json.dumps` call.
pub(super) struct JsonEncoder {
    ensure_ascii: bool,
    indent: Option<String>,
    item_sep: String,
    key_sep: String,
    sort_keys: bool,
}

impl JsonEncoder {
    fn encode(&self, out: &mut String, value: &Value, level: usize) -> Result<(), Error> {
        match value.kind() {
            ValueKind::None => out.push_str("null"),
            ValueKind::Bool => out.push_str(if value.is_true() { "true" } else { "false" }),
            ValueKind::Number => out.push_str(&json_number(value)?),
            ValueKind::String => self.encode_str(out, value.as_str().unwrap_or_default()),
            ValueKind::Seq | ValueKind::Iterable => {
                let items: Vec<Value> = value.try_iter()?.collect();
                self.encode_container(out, '[', ']', level, items.len(), |enc, out, i| {
                    enc.encode(out, &items[i], level + 1)
                })?;
            }
            ValueKind::Map => {
                let mut entries = Vec::new();
                for key in value.try_iter()? {
                    let item = value.get_item(&key)?;
                    entries.push((self.json_key(&key)?, item));
                }
                if self.sort_keys {
                    entries.sort_by(|a, b| a.0.cmp(&b.0));
                }
                self.encode_container(out, '{', '}', level, entries.len(), |enc, out, i| {
                    let (key, item) = &entries[i];
                    enc.encode_str(out, key);
                    out.push_str(&enc.key_sep);
                    enc.encode(out, item, level + 1)
                })?;
            }
            kind => {
                return Err(Error::new(
                    ErrorKind::InvalidOperation,
                    format!("Object of type {kind} is not JSON serializable"),
                ))
            }
        }
        Ok(())
    }

    /// Writes `[...]`/`{...}` with json.dumps' layout: empty containers stay
    /// `[]`/`{}`, and with an indent every item goes on its own line.
    fn encode_container(
        &self,
        out: &mut String,
        open: char,
        close: char,
        level: usize,
        len: usize,
        mut item: impl FnMut(&Self, &mut String, usize) -> Result<(), Error>,
    ) -> Result<(), Error> {
        out.push(open);
        if len == 0 {
            out.push(close);
            return Ok(());
        }
        let newline = |out: &mut String, depth: usize| {
            if let Some(indent) = &self.indent {
                out.push('\n');
                for _ in 0..depth {
                    out.push_str(indent);
                }
            }
        };
        newline(out, level + 1);
        for i in 0..len {
            if i > 0 {
                out.push_str(&self.item_sep);
                newline(out, level + 1);
            }
            item(self, out, i)?;
        }
        newline(out, level);
        out.push(close);
        Ok(())
    }

    /// json.dumps turns non-string keys into strings: numbers as printed,
    /// booleans as `true`/`false`, None as `null`.
    fn json_key(&self, key: &Value) -> Result<String, Error> {
        Ok(match key.kind() {
            ValueKind::String => key.as_str().unwrap_or_default().to_owned(),
            ValueKind::Number => json_number(key)?,
            ValueKind::Bool => if key.is_true() { "true" } else { "false" }.to_owned(),
            ValueKind::None => "null".to_owned(),
            kind => {
                return Err(Error::new(
                    ErrorKind::InvalidOperation,
                    format!("keys must be str, int, float, bool or None, not {kind}"),
                ))
            }
        })
    }

    /// A JSON string literal with json.dumps' escapes: `\"`, `\\`, `\n`,
    /// `\r`, `\t`, `\b`, `\f`, `\u00XX` for other control characters, and
    /// with `ensure_ascii` every non-ASCII character as `\uXXXX` (surrogate
    /// pairs above the BMP).
    fn encode_str(&self, out: &mut String, s: &str) {
        out.push('"');
        for c in s.chars() {
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

/// A number as json.dumps writes it: Python's float repr, except for the
/// non-finite values, which it writes as JavaScript names.
pub(super) fn json_number(value: &Value) -> Result<String, Error> {
    if value.is_integer() {
        return Ok(value.to_string());
    }
    let f = f64::try_from(value.clone())?;
    Ok(if f.is_nan() {
        "NaN".to_owned()
    } else if f.is_infinite() {
        if f > 0.0 { "Infinity" } else { "-Infinity" }.to_owned()
    } else {
        py_float_repr(f)
    })
}

// ---------------------------------------------------------------------------
// Python string methods
// ---------------------------------------------------------------------------

/// Python's `str.isspace()` set, which `strip()` and `split()` use.  It is
/// not Rust's `char::is_whitespace`: it includes the ASCII separators
/// U+001C..U+001F.
pub(super) fn is_py_space(c: char) -> bool {
    matches!(c,
        '\t'..='\r' | '\x1c'..='\x1f' | ' ' | '\u{85}' | '\u{a0}' | '\u{1680}'
        | '\u{2000}'..='\u{200a}' | '\u{2028}' | '\u{2029}' | '\u{202f}' | '\u{205f}'
        | '\u{3000}')
}

/// Methods called on template values (`message['content'].strip()`).
///
/// The ones whose MiniJinja/pycompat version differs from Python in a way
/// a prompt could show are implemented here; the rest (`startswith`,
/// `replace`, `get`, `items`, ...) come from `minijinja_contrib::pycompat`.
pub(super) fn python_method(
    state: &mut State,
    value: &Value,
    method: &str,
    args: &[Value],
) -> Result<Value, Error> {
    if let Some(s) = value.as_str() {
        match method {
            "strip" | "lstrip" | "rstrip" => {
                let (chars,): (Option<&str>,) = from_args(args)?;
                return Ok(Value::from(py_strip(s, chars, method)));
            }
            "split" | "rsplit" => {
                let (sep, maxsplit, kwargs): (Option<Value>, Option<i64>, Kwargs) =
                    from_args(args)?;
                let sep = match sep {
                    Some(sep) => Some(sep),
                    None => kwargs.get::<Option<Value>>("sep")?,
                };
                let maxsplit = match maxsplit {
                    Some(n) => Some(n),
                    None => kwargs.get::<Option<i64>>("maxsplit")?,
                };
                kwargs.assert_all_used()?;
                let sep = match &sep {
                    Some(v) if !v.is_none() => Some(v.as_str().ok_or_else(|| {
                        Error::new(
                            ErrorKind::InvalidOperation,
                            format!("must be str or None, not {}", v.kind()),
                        )
                    })?),
                    _ => None,
                };
                let maxsplit = maxsplit
                    .filter(|n| *n >= 0)
                    .map(|n| usize::try_from(n).unwrap_or(usize::MAX));
                let parts = py_split(s, sep, maxsplit, method == "rsplit")?;
                return Ok(Value::from_iter(parts.into_iter().map(Value::from)));
            }
            "title" => {
                let () = from_args(args)?;
                return Ok(Value::from(py_title(s)));
            }
            "capitalize" => {
                let () = from_args(args)?;
                return Ok(Value::from(py_capitalize(s)));
            }
            "removeprefix" => {
                let (prefix,): (&str,) = from_args(args)?;
                return Ok(Value::from(s.strip_prefix(prefix).unwrap_or(s)));
            }
            "removesuffix" => {
                let (suffix,): (&str,) = from_args(args)?;
                return Ok(Value::from(s.strip_suffix(suffix).unwrap_or(s)));
            }
            _ => {}
        }
    }
    minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args)
}

/// `str.strip/lstrip/rstrip(chars=None)`: `None` strips Python whitespace,
/// a string strips any of its characters (`''` strips nothing).
pub(super) fn py_strip<'a>(s: &'a str, chars: Option<&str>, method: &str) -> &'a str {
    let strip = |c: char| match chars {
        Some(set) => set.contains(c),
        None => is_py_space(c),
    };
    match method {
        "lstrip" => s.trim_start_matches(strip),
        "rstrip" => s.trim_end_matches(strip),
        _ => s.trim_matches(strip),
    }
}

/// `str.split`/`str.rsplit(sep=None, maxsplit=-1)`.
///
/// Without a separator Python splits on runs of whitespace and drops empty
/// pieces, and the unsplit remainder keeps its inner/trailing whitespace;
/// an empty separator is an error.
pub(super) fn py_split<'a>(
    s: &'a str,
    sep: Option<&str>,
    maxsplit: Option<usize>,
    from_right: bool,
) -> Result<Vec<&'a str>, Error> {
    match sep {
        Some("") => Err(Error::new(ErrorKind::InvalidOperation, "empty separator")),
        Some(sep) => Ok(match (maxsplit, from_right) {
            (None, _) => s.split(sep).collect(),
            (Some(n), false) => s.splitn(n.saturating_add(1), sep).collect(),
            (Some(n), true) => {
                let mut parts: Vec<&str> = s.rsplitn(n.saturating_add(1), sep).collect();
                parts.reverse();
                parts
            }
        }),
        None if !from_right => {
            let mut parts = Vec::new();
            let mut rest = s.trim_start_matches(is_py_space);
            while !rest.is_empty() {
                if maxsplit == Some(parts.len()) {
                    parts.push(rest);
                    break;
                }
                match rest.find(is_py_space) {
                    Some(i) => {
                        parts.push(&rest[..i]);
                        rest = rest[i..].trim_start_matches(is_py_space);
                    }
                    None => {
                        parts.push(rest);
                        break;
                    }
                }
            }
            Ok(parts)
        }
        None => {
            let mut parts = Vec::new();
            let mut rest = s.trim_end_matches(is_py_space);
            while !rest.is_empty() {
                if maxsplit == Some(parts.len()) {
                    parts.push(rest);
                    break;
                }
                match rest.rfind(is_py_space) {
                    Some(i) => {
                        let space_len = rest[i..].chars().next().map_or(1, char::len_utf8);
                        parts.push(&rest[i + space_len..]);
                        rest = rest[..i].trim_end_matches(is_py_space);
                    }
                    None => {
                        parts.push(rest);
                        break;
                    }
                }
            }
            parts.reverse();
            Ok(parts)
        }
    }
}

/// Python's "cased" property: lowercase, uppercase or titlecase letters.
pub(super) fn is_cased(c: char) -> bool {
    c.is_lowercase() || c.is_uppercase() || is_titlecase_letter(c)
}

/// The Unicode titlecase letters (category Lt), which Rust has no
/// predicate for.
pub(super) fn is_titlecase_letter(c: char) -> bool {
    matches!(c,
        '\u{1c5}' | '\u{1c8}' | '\u{1cb}' | '\u{1f2}' | '\u{1f88}'..='\u{1f8f}'
        | '\u{1f98}'..='\u{1f9f}' | '\u{1fa8}'..='\u{1faf}' | '\u{1fbc}' | '\u{1fcc}' | '\u{1ffc}')
}

/// Appends Python's `c.title()`.  For almost every character that is its
/// uppercase form with any extra characters lowercased (`ß` -> `Ss`); the
/// table lists the characters where Python's titlecase mapping differs
/// from that rule (checked against CPython 3.11 for all code points).
pub(super) fn push_titlecase(out: &mut String, c: char) {
    let special: Option<&str> = match c {
        '\u{149}' => Some("\u{2bc}N"),
        '\u{1c4}'..='\u{1c6}' => Some("\u{1c5}"),
        '\u{1c7}'..='\u{1c9}' => Some("\u{1c8}"),
        '\u{1ca}'..='\u{1cc}' => Some("\u{1cb}"),
        '\u{1f1}'..='\u{1f3}' => Some("\u{1f2}"),
        '\u{1fb2}' => Some("\u{1fba}\u{345}"),
        '\u{1fb3}' | '\u{1fbc}' => Some("\u{1fbc}"),
        '\u{1fb4}' => Some("\u{386}\u{345}"),
        '\u{1fb7}' => Some("\u{391}\u{342}\u{345}"),
        '\u{1fc2}' => Some("\u{1fca}\u{345}"),
        '\u{1fc3}' | '\u{1fcc}' => Some("\u{1fcc}"),
        '\u{1fc4}' => Some("\u{389}\u{345}"),
        '\u{1fc7}' => Some("\u{397}\u{342}\u{345}"),
        '\u{1ff2}' => Some("\u{1ffa}\u{345}"),
        '\u{1ff3}' | '\u{1ffc}' => Some("\u{1ffc}"),
        '\u{1ff4}' => Some("\u{38f}\u{345}"),
        '\u{1ff7}' => Some("\u{3a9}\u{342}\u{345}"),
        _ => None,
    };
    if let Some(special) = special {
        out.push_str(special);
        return;
    }
    match c {
        // Georgian Mkhedruli has an uppercase (Mtavruli) but no titlecase.
        '\u{10d0}'..='\u{10fa}' | '\u{10fd}'..='\u{10ff}' => out.push(c),
        // Greek letters with ypogegrammeni title-case to the
        // prosgegrammeni form (U+1F80 -> U+1F88, ...).
        '\u{1f80}'..='\u{1faf}' => out.push(char::from_u32(c as u32 | 0x8).unwrap_or(c)),
        _ => {
            let mut upper = c.to_uppercase();
            if let Some(first) = upper.next() {
                out.push(first);
            }
            for rest in upper {
                out.extend(rest.to_lowercase());
            }
        }
    }
}

/// Appends the lowercase of `chars[i]`, with the final-sigma rule Python
/// applies: a capital sigma after a cased letter and not before one
/// becomes `ς`.  (Python skips "case-ignorable" characters when looking;
/// only apostrophes, periods and combining accents are skipped here.)
pub(super) fn push_lowercase(out: &mut String, chars: &[char], i: usize) {
    let c = chars[i];
    if c != '\u{3a3}' {
        out.extend(c.to_lowercase());
        return;
    }
    let ignorable = |c: char| {
        matches!(
            c,
            '\'' | '.' | ':' | '^' | '`' | '\u{b7}' | '\u{2019}' | '\u{ad}'
        ) || ('\u{300}'..='\u{36f}').contains(&c)
    };
    let before = chars[..i].iter().rev().find(|c| !ignorable(**c));
    let after = chars[i + 1..].iter().find(|c| !ignorable(**c));
    let is_final = before.is_some_and(|c| is_cased(*c)) && !after.is_some_and(|c| is_cased(*c));
    out.push(if is_final { 'ς' } else { 'σ' });
}

/// Python's `str.title()`: a cased character right after an uncased one
/// is title-cased, every other one lowercased (`they're` -> `They'Re`,
/// which differs from Jinja's `|title` filter).
pub(super) fn py_title(s: &str) -> String {
    let chars: Vec<char> = s.chars().collect();
    let mut out = String::with_capacity(s.len());
    let mut previous_is_cased = false;
    for (i, &c) in chars.iter().enumerate() {
        if previous_is_cased {
            push_lowercase(&mut out, &chars, i);
        } else {
            push_titlecase(&mut out, c);
        }
        previous_is_cased = is_cased(c);
    }
    out
}

/// Python's `str.capitalize()`: the first character title-cased, the rest
/// lowercased.
pub(super) fn py_capitalize(s: &str) -> String {
    let chars: Vec<char> = s.chars().collect();
    let mut out = String::with_capacity(s.len());
    for (i, &c) in chars.iter().enumerate() {
        if i == 0 {
            push_titlecase(&mut out, c);
        } else {
            push_lowercase(&mut out, &chars, i);
        }
    }
    out
}

/// Jinja2's `trim(value, chars=None)` filter is Python's `str.strip`, so it
/// strips Python whitespace (MiniJinja's strips Rust whitespace).
pub(super) fn trim_filter(value: &Value, chars: Option<&str>) -> Result<Value, Error> {
    let s = py_str(value)?;
    Ok(Value::from(py_strip(&s, chars, "strip")))
}
