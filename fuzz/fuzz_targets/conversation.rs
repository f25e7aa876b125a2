//! Follow-up rewriting on any text: the question and the turns before it are split from the
//! input at NUL bytes. Nothing may panic (the offsets of a referring phrase once split a
//! character whose lower case is longer, issue 41).
#![no_main]

use capstan_engine::conversation::{parse_rewrite, rewrite_prompt, standalone_question, Role, Turn};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut parts: Vec<&str> = text.split('\0').collect();
    let question = parts.pop().unwrap_or_default();
    let history: Vec<Turn> = parts
        .iter()
        .enumerate()
        .map(|(i, content)| Turn {
            role: if i % 2 == 0 { Role::User } else { Role::Assistant },
            content: content.to_string(),
        })
        .collect();
    let _ = standalone_question(&history, question);
    let _ = rewrite_prompt(&history, question);
    let _ = parse_rewrite(question);
});
