//! Renders every case of `fixtures/chat-templates/cases.json` (made by
//! `make_chat_template_fixture.py` with transformers' Jinja2 setup) and
//! requires the same bytes, or the same kind of error.

use capstan_reader::{ChatMessage, ChatTemplate, ChatTemplateError};
use serde::Deserialize;

mod common;

#[derive(Deserialize)]
struct Fixture {
    generator: String,
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    name: String,
    template: String,
    bos_token: String,
    eos_token: String,
    messages: Vec<ChatMessage>,
    add_generation_prompt: bool,
    expected: Option<String>,
    error: Option<ExpectedError>,
}

#[derive(Deserialize)]
struct ExpectedError {
    /// "syntax" (compiling fails) or "render".
    stage: String,
    /// Text the error must contain (the raise_exception message).
    contains: Option<String>,
}

/// Where two renderings first differ, with some context, for the report.
fn first_difference(want: &str, got: &str) -> String {
    let common: usize = want
        .chars()
        .zip(got.chars())
        .take_while(|(a, b)| a == b)
        .map(|(a, _)| a.len_utf8())
        .sum();
    let window = |s: &str| -> String {
        let before: String = s[..common]
            .chars()
            .rev()
            .take(30)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        let after: String = s[common..].chars().take(40).collect();
        format!("{before}\u{2503}{after}")
    };
    format!(
        "first difference at byte {common} (marked \u{2503}):\n  want: {:?}\n  got:  {:?}",
        window(want),
        window(got)
    )
}

/// Checks one case; `Err` describes the mismatch.
fn check(case: &Case) -> Result<(), String> {
    let compiled = ChatTemplate::new(&case.template, &case.bos_token, &case.eos_token);
    let outcome = compiled.and_then(|t| t.render(&case.messages, case.add_generation_prompt));
    match (&case.expected, &case.error, outcome) {
        (Some(want), _, Ok(got)) if *want == got => Ok(()),
        (Some(want), _, Ok(got)) => Err(first_difference(want, &got)),
        (Some(_), _, Err(err)) => Err(format!("expected a rendering, got error: {err}")),
        (None, Some(want), Err(err)) => {
            let stage_ok = matches!(
                (want.stage.as_str(), &err),
                ("syntax", ChatTemplateError::Syntax { .. })
                    | ("render", ChatTemplateError::Render { .. })
            );
            if !stage_ok {
                return Err(format!("expected a {} error, got: {err}", want.stage));
            }
            match &want.contains {
                Some(text) if !err.to_string().contains(text.as_str()) => {
                    Err(format!("error {err:?} does not contain {text:?}"))
                }
                _ => Ok(()),
            }
        }
        (None, Some(want), Ok(got)) => {
            Err(format!("expected a {} error, rendered {got:?}", want.stage))
        }
        (None, None, _) => Err("case has neither expected nor error".to_owned()),
    }
}

#[test]
fn fixture_cases_render_like_transformers() {
    let path = common::fixture("chat-templates/cases.json");
    let text = std::fs::read_to_string(path).expect("fixture exists");
    let fixture: Fixture = serde_json::from_str(&text).expect("fixture parses");
    assert!(
        fixture.cases.len() >= 30,
        "fixture has {} cases",
        fixture.cases.len()
    );

    let failures: Vec<String> = fixture
        .cases
        .iter()
        .filter_map(|case| check(case).err().map(|why| format!("{}: {why}", case.name)))
        .collect();
    let renderings = fixture
        .cases
        .iter()
        .filter(|c| c.expected.is_some())
        .count();
    println!(
        "{} cases ({renderings} renderings) from {}; {} failed",
        fixture.cases.len(),
        fixture.generator,
        failures.len()
    );
    assert!(failures.is_empty(), "\n{}", failures.join("\n\n"));
}
