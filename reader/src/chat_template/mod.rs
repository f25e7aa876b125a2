//! Hugging Face chat templates rendered the way `transformers` renders them.
//!
//! A model's chat template (the `chat_template` string of its
//! `tokenizer_config.json`, or the `tokenizer.chat_template` key of a GGUF
//! file) is a Jinja2 program.  The reader must hand the model the exact
//! prompt that the model saw in training, so a renderer that is "close" is
//! not good enough: one missing newline or a `true` where Python prints
//! `True` changes the tokens.  The reference is
//! `tokenizer.apply_chat_template(messages, tokenize=False,
//! add_generation_prompt=...)` of `transformers` 5.x, which compiles the
//! template in `transformers/utils/chat_template_utils.py`
//! (`_cached_compile_jinja_template`) with:
//!
//! * an `ImmutableSandboxedEnvironment` with `trim_blocks=True`,
//!   `lstrip_blocks=True` and the `loopcontrols` extension (and Jinja2's
//!   default `keep_trailing_newline=False`, no autoescaping);
//! * its own `tojson` filter (`json.dumps` with `ensure_ascii=False`, so no
//!   HTML escaping, plus `indent`, `separators` and `sort_keys`);
//! * the globals `raise_exception(msg)`, `strftime_now(fmt)`, `dict` and a
//!   `namespace` that rejects underscore-prefixed names;
//! * a `{% generation %}` block tag that only marks assistant text;
//!
//! and renders it with `messages`, `tools=None`, `documents=None`,
//! `add_generation_prompt` and the tokenizer's special tokens (`bos_token`,
//! `eos_token`).
//!
//! MiniJinja implements the same language, but follows Rust rather than
//! Python in places this module patches: how lists, dicts and floats print
//! (`[1, 'a']`, `1e+16`), `tojson`, Python's string methods (`strip`,
//! `split`, `title`, ...) and Python's idea of whitespace, the `sequence`
//! and `iterable` tests, a few whitespace details of the source (`\r\n`,
//! `{% raw %}`), and transformers' `{% generation %}` tag.  The test fixture
//! `tests/fixtures/chat-templates/cases.json` (made by
//! `tests/fixtures/chat-templates/make_cases.py` with transformers itself) pins the
//! result down byte for byte.
//!
//! Known differences that remain (none is used by mainstream templates):
//!
//! * `for x in none` renders nothing; Jinja2 raises `TypeError`.  Ordering
//!   comparisons of mixed types (`1 < 'a'`, sorting `[1, 'a']`) work here
//!   and raise in Python.
//! * Python `%` string formatting (`'%s' % x`) is an error here; the
//!   `format` filter and `str.format` work.
//! * Jinja2 filters and globals MiniJinja lacks: `center`, `truncate`,
//!   `wordcount`, `wordwrap`, `filesizeformat`, `forceescape`, `striptags`,
//!   `urlize`, `xmlattr`, `random`, `urlencode`; `lipsum`, `cycler`,
//!   `joiner`, `dict.fromkeys`.  `|int`/`|float` on a non-number string is an error
//!   instead of the default `0`.
//! * String literals: `\U0001F600` and `\N{NAME}` escapes stay literal;
//!   integer literals beyond 128 bits are a syntax error.
//! * Printing Python internals differs (`dict_items([...])`, `range(0, 3)`,
//!   `<Namespace ...>`); `namespace()` objects count as mappings; setting an
//!   underscore attribute with `{% set ns._x = ... %}` is not refused.
//! * Only `bos_token` and `eos_token` are provided; transformers also passes
//!   the tokenizer's other special tokens (`unk_token`, `pad_token`, ...).
//! * `str.title()`/`capitalize()` treat only a few characters as
//!   case-ignorable when choosing a final sigma.

mod python;
mod strftime;

use python::*;
use strftime::*;

use std::fmt::Write as _;

use minijinja::value::{from_args, Kwargs, Rest, Value, ValueKind, ValueOrKwargs};
use minijinja::{AutoEscape, Environment, Error, ErrorKind, State};

/// Name the template is registered under; it shows up in error messages
/// as `(in chat_template:LINE)`.
const TEMPLATE_NAME: &str = "chat_template";

/// The message `apply_chat_template` raises for an empty conversation.
const EMPTY_CONVERSATION: &str =
    "Cannot apply chat template to an empty conversation. Provide at least one message.";

/// One turn of a conversation, as the template sees it (`message['role']`,
/// `message['content']`).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant`, ... — templates decide what is valid.
    pub role: String,
    /// The message text.
    pub content: String,
}

/// Why a chat template could not be compiled or rendered.
#[derive(Debug, thiserror::Error)]
pub enum ChatTemplateError {
    /// The template is not valid Jinja (reported with its line).
    #[error("chat template syntax error: {reason}")]
    Syntax {
        /// MiniJinja's description, including `(in chat_template:LINE)`.
        reason: String,
    },
    /// Rendering failed: the template called `raise_exception(msg)` (the
    /// reason then contains `msg`), or it did something Jinja2 also rejects
    /// (an undefined attribute, a bad method call, ...).
    #[error("chat template render error: {reason}")]
    Render {
        /// MiniJinja's description, including `(in chat_template:LINE)`.
        reason: String,
    },
}

/// A compiled chat template, ready to render conversations.
///
/// Compiling once and rendering many times is the point: the environment
/// with its filters and the parsed template live here.  It is `Send + Sync`,
/// so one instance can serve concurrent requests.
pub struct ChatTemplate {
    env: Environment<'static>,
    bos_token: String,
    eos_token: String,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("bos_token", &self.bos_token)
            .field("eos_token", &self.eos_token)
            .finish_non_exhaustive()
    }
}

impl ChatTemplate {
    /// Compiles `source` (tokenizer_config.json `chat_template`, or GGUF
    /// `tokenizer.chat_template`).
    ///
    /// `bos_token` and `eos_token` are the strings templates see under those
    /// names, as `apply_chat_template` passes the tokenizer's special tokens.
    /// A template that does not parse is a [`ChatTemplateError::Syntax`].
    pub fn new(source: &str, bos_token: &str, eos_token: &str) -> Result<Self, ChatTemplateError> {
        let mut env = Environment::new();
        configure_environment(&mut env);
        env.add_template_owned(TEMPLATE_NAME, prepare_source(source))
            .map_err(|err| ChatTemplateError::Syntax {
                reason: describe(&err),
            })?;
        Ok(Self {
            env,
            bos_token: bos_token.to_owned(),
            eos_token: eos_token.to_owned(),
        })
    }

    /// Renders `messages`, appending the assistant header when
    /// `add_generation_prompt` is set (if the template supports it).
    ///
    /// Like `apply_chat_template`, an empty conversation is an error rather
    /// than whatever the template would make of it.
    pub fn render(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<String, ChatTemplateError> {
        if messages.is_empty() {
            return Err(ChatTemplateError::Render {
                reason: EMPTY_CONVERSATION.to_owned(),
            });
        }
        let render_err = |err: Error| ChatTemplateError::Render {
            reason: describe(&err),
        };
        let template = self.env.get_template(TEMPLATE_NAME).map_err(render_err)?;
        // `tools` and `documents` are passed as None (not left undefined):
        // transformers always passes them, so `tools is defined` is true and
        // `tools is none` is true there too.
        let ctx = minijinja::context! {
            messages => messages.iter().map(message_value).collect::<Value>(),
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos_token.as_str(),
            eos_token => self.eos_token.as_str(),
            tools => Value::from(()),
            documents => Value::from(()),
        };
        template.render(ctx).map_err(render_err)
    }
}

/// A message as the dict transformers hands the template, with the keys in
/// the order callers write them (`tojson` and `.items()` show the order).
fn message_value(message: &ChatMessage) -> Value {
    Value::from_pairs([
        ("role", message.role.as_str()),
        ("content", message.content.as_str()),
    ])
}

/// Turns a MiniJinja error (and its causes) into one line of text.
fn describe(err: &Error) -> String {
    let mut reason = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        let _ = write!(reason, ": {cause}");
        source = cause.source();
    }
    reason
}

/// Sets up `env` the way transformers sets up its Jinja2 environment.
fn configure_environment(env: &mut Environment<'static>) {
    // trim_blocks/lstrip_blocks as transformers; keep_trailing_newline stays
    // false as in Jinja2.  The builder only fails for custom delimiters.
    let syntax = minijinja::syntax::SyntaxConfig::builder()
        .trim_blocks(true)
        .lstrip_blocks(true)
        .keep_trailing_newline(false)
        .build()
        .expect("default delimiters are valid");
    env.set_syntax(syntax);
    // Jinja2's Environment escapes nothing unless asked to; MiniJinja would
    // HTML-escape templates whose name ends in .html, so say it explicitly.
    env.set_auto_escape_callback(|_| AutoEscape::None);
    // Jinja2's default `Undefined` is MiniJinja's lenient mode: printing and
    // iterating an undefined value is fine, an attribute of one is an error.
    env.set_undefined_behavior(minijinja::UndefinedBehavior::Lenient);
    // A runaway template (deep macro recursion) must fail, not overflow the
    // stack; Jinja2 stops at Python's recursion limit in the same way.  500
    // is MiniJinja's default, stated here because the tests rely on it
    // fitting a 2 MiB thread stack.
    env.set_recursion_limit(500);
    env.set_formatter(python_formatter);
    env.set_unknown_method_callback(python_method);
    env.add_filter("tojson", tojson);
    env.add_filter("trim", trim_filter);
    env.add_filter("string", |value: &Value| -> Result<Value, Error> {
        Ok(Value::from(py_str(value)?))
    });
    env.add_test("sequence", is_sequence);
    env.add_test("iterable", is_iterable);
    env.add_function("raise_exception", raise_exception);
    env.add_function("strftime_now", strftime_now);
    env.add_function("namespace", namespace);
}

/// Rewrites the few spots where a Hub template is valid Jinja2 (as
/// transformers configures it) but MiniJinja would read it differently.
///
/// * Line endings: Jinja2 turns `\r\n` and `\r` in the template text into
///   `\n` (and treats them as newlines for trim_blocks/lstrip_blocks);
///   normalising the source up front gives the same result.
/// * `{% generation %}...{% endgeneration %}`: transformers' own tag, which
///   renders its body unchanged (it records where assistant text is).  It
///   becomes a bare `{% with %}` block, which keeps both the whitespace
///   control of the tag and the body's own variable scope (the body of a
///   Jinja2 call block is a macro, so a `set` inside does not leak out).
/// * `{% raw %}` followed by a newline: Jinja2's trim_blocks does not apply
///   to the opening raw tag, MiniJinja's does, so the newline is doubled
///   for MiniJinja to remove one.  The raw body itself is copied untouched.
fn prepare_source(source: &str) -> String {
    let normalized = source.replace("\r\n", "\n").replace('\r', "\n");
    rewrite_block_tags(&normalized)
}

/// One `{% ... %}` tag split into its parts: `open` is `{%` plus a `-`/`+`
/// modifier and spacing, `name` the statement, `close` spacing, modifier
/// and `%}`.
struct BlockTag<'a> {
    open: &'a str,
    name: &'a str,
    close: &'a str,
}

impl<'a> BlockTag<'a> {
    /// Parses the tag at the start of `text` (which starts with `{%`);
    /// returns it and its length, or `None` if it is never closed.
    fn parse(text: &'a str) -> Option<(Self, usize)> {
        let end = text.find("%}")? + 2;
        let tag = &text[..end];
        let inner = &tag[2..end - 2];
        let body = inner.strip_prefix(['-', '+']).unwrap_or(inner).trim_start();
        let body = body.strip_suffix(['-', '+']).unwrap_or(body).trim_end();
        let at = 2 + inner.find(body).unwrap_or(0);
        Some((
            Self {
                open: &tag[..at],
                name: body,
                close: &tag[at + body.len()..],
            },
            end,
        ))
    }

    /// Whether the closing side carries no `-`/`+` modifier, i.e.
    /// trim_blocks applies after it.
    fn plain_close(&self) -> bool {
        !self.close.trim_start().starts_with(['-', '+'])
    }
}

/// Applies the `generation` and `raw` rewrites of [`prepare_source`].
fn rewrite_block_tags(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(start) = rest.find("{%") {
        out.push_str(&rest[..start]);
        let Some((tag, len)) = BlockTag::parse(&rest[start..]) else {
            rest = &rest[start..];
            break;
        };
        let after = &rest[start + len..];
        match tag.name {
            "generation" | "endgeneration" => {
                let keyword = if tag.name == "generation" {
                    "with"
                } else {
                    "endwith"
                };
                out.push_str(tag.open);
                out.push_str(keyword);
                out.push_str(tag.close);
                rest = after;
            }
            "raw" => {
                out.push_str(&rest[start..start + len]);
                if tag.plain_close() && after.starts_with('\n') {
                    out.push('\n');
                }
                // Copy the raw body and its end tag verbatim.
                // Without an end tag the rest is copied as is, for the
                // parser to reject.
                let body_len = raw_body_len(after).unwrap_or(after.len());
                out.push_str(&after[..body_len]);
                rest = &after[body_len..];
            }
            _ => {
                out.push_str(&rest[start..start + len]);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The length of a raw block's body up to and including its
/// `{% endraw %}` tag, if it has one.
fn raw_body_len(body: &str) -> Option<usize> {
    let mut offset = 0;
    while let Some(pos) = body[offset..].find("{%") {
        let at = offset + pos;
        match BlockTag::parse(&body[at..]) {
            Some((tag, len)) if tag.name == "endraw" => return Some(at + len),
            _ => offset = at + 2,
        }
    }
    None
}

/// Jinja2's `sequence` test: anything with a length and indexing, which
/// includes strings, dicts and (quirkily) undefined values; MiniJinja's
/// accepts lists only.  Templates use it to tell text content from lists
/// of content parts.
fn is_sequence(value: &Value) -> bool {
    matches!(
        value.kind(),
        ValueKind::Undefined
            | ValueKind::String
            | ValueKind::Bytes
            | ValueKind::Seq
            | ValueKind::Map
    )
}

/// Jinja2's `iterable` test: `None` is not iterable there (MiniJinja says
/// it is), undefined values are.  `tools is iterable` must be false when
/// transformers passes `tools=None`.
fn is_iterable(value: &Value) -> bool {
    match value.kind() {
        ValueKind::None | ValueKind::Bool | ValueKind::Number => false,
        ValueKind::Undefined
        | ValueKind::String
        | ValueKind::Bytes
        | ValueKind::Seq
        | ValueKind::Map
        | ValueKind::Iterable => true,
        _ => value.try_iter().is_ok(),
    }
}

/// `raise_exception(message)`: the template's way of rejecting a
/// conversation (bad role order, unsupported system message, ...).  The
/// message is kept verbatim so callers can show it.
fn raise_exception(message: &Value) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, py_str(message)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(role: &str, content: &str) -> ChatMessage {
        ChatMessage {
            role: role.to_owned(),
            content: content.to_owned(),
        }
    }

    #[test]
    fn float_repr_matches_python() {
        let cases = [
            (1.0, "1.0"),
            (0.1, "0.1"),
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (1.5e-5, "1.5e-05"),
            (0.0001, "0.0001"),
            (-2.5, "-2.5"),
            (0.1 + 0.2, "0.30000000000000004"),
            (123456789.125, "123456789.125"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (-0.0, "-0.0"),
        ];
        for (f, want) in cases {
            assert_eq!(py_float_repr(f), want, "{f}");
        }
    }

    #[test]
    fn split_matches_python() {
        assert_eq!(
            py_split("  a b  c  ", None, None, false).unwrap(),
            ["a", "b", "c"]
        );
        assert_eq!(
            py_split("  a b  c  ", None, Some(1), false).unwrap(),
            ["a", "b  c  "]
        );
        assert_eq!(
            py_split("  a b  c  ", None, Some(1), true).unwrap(),
            ["  a b", "c"]
        );
        assert_eq!(
            py_split("a,b,c", Some(","), Some(1), true).unwrap(),
            ["a,b", "c"]
        );
        assert!(py_split("abc", Some(""), None, false).is_err());
        assert_eq!(py_split("", None, None, false).unwrap(), Vec::<&str>::new());
    }

    #[test]
    fn title_and_capitalize_match_python() {
        assert_eq!(
            py_title("they're 2abc ǆx ßa ŉa ᾳb"),
            "They'Re 2Abc ǅx Ssa ʼNa ᾼb"
        );
        assert_eq!(py_title("ΣΑΣ ΣΑΣ"), "Σας Σας");
        assert_eq!(py_capitalize("hELLO wORLD"), "Hello world");
        assert_eq!(py_capitalize(""), "");
    }

    #[test]
    fn generation_tags_become_scoped_blocks() {
        assert_eq!(
            rewrite_block_tags("a{%- generation %}b{% endgeneration -%}c{% if x %}"),
            "a{%- with %}b{% endwith -%}c{% if x %}"
        );
        assert_eq!(rewrite_block_tags("x{% unclosed"), "x{% unclosed");
    }

    #[test]
    fn raw_blocks_keep_their_first_newline_and_body() {
        assert_eq!(
            rewrite_block_tags("{% raw %}\n{% generation %}{% endraw %}\n{% generation %}"),
            "{% raw %}\n\n{% generation %}{% endraw %}\n{% with %}"
        );
        assert_eq!(rewrite_block_tags("{% raw -%}\nx"), "{% raw -%}\nx");
        assert_eq!(rewrite_block_tags("{% raw %}{% x"), "{% raw %}{% x");
    }

    /// CPython 3.11 `datetime(...).strftime(fmt)` on glibc, printed by
    /// `tests/make_chat_template_fixture.py --strftime-table` (TZ=UTC):
    /// ((year, month, day, hour, minute, second, microsecond, weekday,
    /// yday, iso_year, iso_week, epoch), [(format, expected)]).
    #[allow(clippy::type_complexity)]
    const STRFTIME_CASES: &[(
        (i64, u8, u8, u8, u8, u8, u32, u8, u16, i64, u8, i64),
        &[(&str, &str)],
    )] = &[
        (
            (2024, 7, 5, 9, 3, 7, 123456, 5, 187, 2024, 27, 1720170187),
            &[
                ("%d %b %Y", "05 Jul 2024"),
                ("%-d %B %Y", "5 July 2024"),
                ("%B %d, %Y", "July 05, 2024"),
                ("%Y-%m-%d", "2024-07-05"),
                ("%A, %e %h", "Friday,  5 Jul"),
                ("%a %A %b %B", "Fri Friday Jul July"),
                ("%c", "Fri Jul  5 09:03:07 2024"),
                ("%x %X", "07/05/24 09:03:07"),
                (
                    "%D %F %T %R %r",
                    "07/05/24 2024-07-05 09:03:07 09:03 09:03:07 AM",
                ),
                (
                    "%C %y %G %g %V %U %W %j %u %w",
                    "20 24 2024 24 27 26 27 187 5 5",
                ),
                ("%H %I %k %l %M %S %p %P", "09 09  9  9 03 07 AM am"),
                ("%f|%z|%Z|%%|%%z|%n%t|%s", "123456|||%|%z|\n\t|1720170187"),
                (
                    "%_d %-m %0e %10Y %-10d %_5H %^a %^B %#b %#p %05B",
                    " 5 7 05 0000002024          5     9 FRI JULY JUL am 0July",
                ),
                ("%Q %-Q %+ %:z %Ey %Od %", "%Q %-Q %+ %:z 24 05 %"),
                (
                    "%-10a|%10a|%_10B|%3d|%-3e|%^10p|%010s",
                    "       Fri|       Fri|      July|005|  5|        AM|1720170187",
                ),
                ("no directives", "no directives"),
                ("Today: %d %b %Y.", "Today: 05 Jul 2024."),
                ("%é café %éx", "%é café %éx"),
                ("trailing %-", "trailing %-"),
            ],
        ),
        (
            (2021, 1, 1, 0, 0, 0, 0, 5, 1, 2020, 53, 1609459200),
            &[
                ("%d %b %Y", "01 Jan 2021"),
                ("%-d %B %Y", "1 January 2021"),
                ("%B %d, %Y", "January 01, 2021"),
                ("%Y-%m-%d", "2021-01-01"),
                ("%A, %e %h", "Friday,  1 Jan"),
                ("%a %A %b %B", "Fri Friday Jan January"),
                ("%c", "Fri Jan  1 00:00:00 2021"),
                ("%x %X", "01/01/21 00:00:00"),
                (
                    "%D %F %T %R %r",
                    "01/01/21 2021-01-01 00:00:00 00:00 12:00:00 AM",
                ),
                (
                    "%C %y %G %g %V %U %W %j %u %w",
                    "20 21 2020 20 53 00 00 001 5 5",
                ),
                ("%H %I %k %l %M %S %p %P", "00 12  0 12 00 00 AM am"),
                ("%f|%z|%Z|%%|%%z|%n%t|%s", "000000|||%|%z|\n\t|1609459200"),
                (
                    "%_d %-m %0e %10Y %-10d %_5H %^a %^B %#b %#p %05B",
                    " 1 1 01 0000002021          1     0 FRI JANUARY JAN am January",
                ),
                ("%Q %-Q %+ %:z %Ey %Od %", "%Q %-Q %+ %:z 21 01 %"),
                (
                    "%-10a|%10a|%_10B|%3d|%-3e|%^10p|%010s",
                    "       Fri|       Fri|   January|001|  1|        AM|1609459200",
                ),
                ("no directives", "no directives"),
                ("Today: %d %b %Y.", "Today: 01 Jan 2021."),
                ("%é café %éx", "%é café %éx"),
                ("trailing %-", "trailing %-"),
            ],
        ),
        (
            (
                2024, 12, 30, 12, 59, 59, 999999, 1, 365, 2025, 1, 1735563599,
            ),
            &[
                ("%d %b %Y", "30 Dec 2024"),
                ("%-d %B %Y", "30 December 2024"),
                ("%B %d, %Y", "December 30, 2024"),
                ("%Y-%m-%d", "2024-12-30"),
                ("%A, %e %h", "Monday, 30 Dec"),
                ("%a %A %b %B", "Mon Monday Dec December"),
                ("%c", "Mon Dec 30 12:59:59 2024"),
                ("%x %X", "12/30/24 12:59:59"),
                (
                    "%D %F %T %R %r",
                    "12/30/24 2024-12-30 12:59:59 12:59 12:59:59 PM",
                ),
                (
                    "%C %y %G %g %V %U %W %j %u %w",
                    "20 24 2025 25 01 52 53 365 1 1",
                ),
                ("%H %I %k %l %M %S %p %P", "12 12 12 12 59 59 PM pm"),
                ("%f|%z|%Z|%%|%%z|%n%t|%s", "999999|||%|%z|\n\t|1735563599"),
                (
                    "%_d %-m %0e %10Y %-10d %_5H %^a %^B %#b %#p %05B",
                    "30 12 30 0000002024         30    12 MON DECEMBER DEC pm December",
                ),
                ("%Q %-Q %+ %:z %Ey %Od %", "%Q %-Q %+ %:z 24 30 %"),
                (
                    "%-10a|%10a|%_10B|%3d|%-3e|%^10p|%010s",
                    "       Mon|       Mon|  December|030| 30|        PM|1735563599",
                ),
                ("no directives", "no directives"),
                ("Today: %d %b %Y.", "Today: 30 Dec 2024."),
                ("%é café %éx", "%é café %éx"),
                ("trailing %-", "trailing %-"),
            ],
        ),
        (
            (2023, 1, 1, 23, 5, 0, 500, 0, 1, 2022, 52, 1672614300),
            &[
                ("%d %b %Y", "01 Jan 2023"),
                ("%-d %B %Y", "1 January 2023"),
                ("%B %d, %Y", "January 01, 2023"),
                ("%Y-%m-%d", "2023-01-01"),
                ("%A, %e %h", "Sunday,  1 Jan"),
                ("%a %A %b %B", "Sun Sunday Jan January"),
                ("%c", "Sun Jan  1 23:05:00 2023"),
                ("%x %X", "01/01/23 23:05:00"),
                (
                    "%D %F %T %R %r",
                    "01/01/23 2023-01-01 23:05:00 23:05 11:05:00 PM",
                ),
                (
                    "%C %y %G %g %V %U %W %j %u %w",
                    "20 23 2022 22 52 01 00 001 7 0",
                ),
                ("%H %I %k %l %M %S %p %P", "23 11 23 11 05 00 PM pm"),
                ("%f|%z|%Z|%%|%%z|%n%t|%s", "000500|||%|%z|\n\t|1672614300"),
                (
                    "%_d %-m %0e %10Y %-10d %_5H %^a %^B %#b %#p %05B",
                    " 1 1 01 0000002023          1    23 SUN JANUARY JAN pm January",
                ),
                ("%Q %-Q %+ %:z %Ey %Od %", "%Q %-Q %+ %:z 23 01 %"),
                (
                    "%-10a|%10a|%_10B|%3d|%-3e|%^10p|%010s",
                    "       Sun|       Sun|   January|001|  1|        PM|1672614300",
                ),
                ("no directives", "no directives"),
                ("Today: %d %b %Y.", "Today: 01 Jan 2023."),
                ("%é café %éx", "%é café %éx"),
                ("trailing %-", "trailing %-"),
            ],
        ),
    ];

    #[test]
    fn strftime_matches_cpython_glibc() {
        for &(time, cases) in STRFTIME_CASES {
            let (year, month, day, hour, minute, second, microsecond) =
                (time.0, time.1, time.2, time.3, time.4, time.5, time.6);
            let clock = Clock {
                year,
                month,
                day,
                hour,
                minute,
                second,
                microsecond,
                weekday: time.7,
                day_of_year: time.8,
                iso_year: time.9,
                iso_week: time.10,
                epoch_seconds: time.11,
            };
            for (format, want) in cases {
                assert_eq!(
                    py_strftime(format, &clock).unwrap(),
                    *want,
                    "format {format:?} at {time:?}"
                );
            }
        }
    }

    #[test]
    fn strftime_now_renders_today() {
        let t = ChatTemplate::new("{{ strftime_now('%Y-%m-%d|%Q') }}", "", "").unwrap();
        let out = t.render(&[msg("user", "x")], false).unwrap();
        let today = jiff::ZonedDateTime::now().date().to_string();
        // An unknown directive is copied, as glibc does, not an error.
        assert_eq!(out, format!("{today}|%Q"));
        let nul = ChatTemplate::new("{{ strftime_now('a\\x00') }}", "", "").unwrap();
        assert!(nul.render(&[msg("user", "x")], false).is_err());
    }

    #[test]
    fn runaway_templates_fail_without_crashing() {
        // Test threads have 2 MiB stacks, like the async runtime's workers.
        let deep_macro = "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}";
        let t = ChatTemplate::new(deep_macro, "", "").unwrap();
        assert!(t.render(&[msg("user", "x")], false).is_err());
        let deep_parens = format!("{{{{ {}1{} }}}}", "(".repeat(5000), ")".repeat(5000));
        assert!(ChatTemplate::new(&deep_parens, "", "").is_err());
        let deep_ifs = format!(
            "{}x{}",
            "{% if true %}".repeat(3000),
            "{% endif %}".repeat(3000)
        );
        assert!(ChatTemplate::new(&deep_ifs, "", "").is_err());
    }

    #[test]
    fn empty_conversation_is_an_error() {
        let t = ChatTemplate::new("{{ messages|length }}", "", "").unwrap();
        let err = t.render(&[], true).unwrap_err();
        assert!(err.to_string().contains("empty conversation"), "{err}");
    }

    #[test]
    fn chat_template_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<ChatTemplate>();
    }
}
