//! The text of (X)HTML content documents into a [`TextBuilder`]: blocks
//! for block elements, sections for `<h1>`-`<h6>`. Read with html5ever's
//! tokenizer (linear in the input; see `document::html_text` for why not
//! its tree builder), which also takes the XHTML of e-books in its stride.

use std::cell::{Cell, RefCell};

use html5ever::tendril::StrTendril;
use html5ever::tokenizer::states::RawKind;
use html5ever::tokenizer::{
    BufferQueue, TagKind, Token, TokenSink, TokenSinkResult, Tokenizer, TokenizerOpts,
};

use super::TextBuilder;

/// Appends the visible text of `content` to `out` as blocks and sections.
pub(crate) fn append_html(content: &str, out: &mut TextBuilder) {
    let sink = BlockSink {
        out: RefCell::new(std::mem::take(out)),
        heading: RefCell::new(None),
        hidden: Cell::new(0),
        cells: Cell::new(0),
    };
    let input = BufferQueue::default();
    input.push_back(StrTendril::from_slice(content));
    let tokenizer = Tokenizer::new(sink, TokenizerOpts::default());
    let _ = tokenizer.feed(&input);
    tokenizer.end();
    let mut text = tokenizer.sink.out.into_inner();
    text.end_block();
    *out = text;
}

struct BlockSink {
    out: RefCell<TextBuilder>,
    /// The text of the heading being read.
    heading: RefCell<Option<String>>,
    /// Open elements whose text is not shown (head, script, style…).
    hidden: Cell<usize>,
    /// Cells seen in the current table row.
    cells: Cell<usize>,
}

/// What the tokenizer must be told after a start tag whose element holds raw
/// text (script, style, title…): the tree builder's job in a full parse,
/// which text extraction does without.
pub(crate) fn raw_text_after(tag: &html5ever::tokenizer::Tag) -> Option<TokenSinkResult<()>> {
    if tag.kind != TagKind::StartTag || tag.self_closing {
        return None;
    }
    let raw = match &*tag.name {
        "script" => RawKind::ScriptData,
        "style" | "noscript" | "xmp" | "iframe" | "noembed" | "noframes" => RawKind::Rawtext,
        "title" | "textarea" => RawKind::Rcdata,
        "plaintext" => return Some(TokenSinkResult::Plaintext),
        _ => return None,
    };
    Some(TokenSinkResult::RawData(raw))
}

fn is_block(name: &str) -> bool {
    matches!(
        name,
        "p" | "div"
            | "section"
            | "article"
            | "aside"
            | "header"
            | "footer"
            | "nav"
            | "blockquote"
            | "pre"
            | "ul"
            | "ol"
            | "li"
            | "dl"
            | "dt"
            | "dd"
            | "table"
            | "figure"
            | "figcaption"
            | "hr"
            | "body"
            | "main"
    )
}

impl TokenSink for BlockSink {
    type Handle = ();

    fn process_token(&self, token: Token, _line: u64) -> TokenSinkResult<()> {
        match token {
            Token::CharacterTokens(text) if self.hidden.get() == 0 => {
                match self.heading.borrow_mut().as_mut() {
                    Some(heading) => heading.push_str(&text),
                    None => self.out.borrow_mut().push(&text),
                }
            }
            Token::TagToken(tag) => {
                let start = tag.kind == TagKind::StartTag;
                let name: &str = &tag.name;
                match name {
                    "head" | "script" | "style" | "noscript" | "template" | "title" => {
                        if start && !tag.self_closing {
                            self.hidden.set(self.hidden.get() + 1);
                        } else if !start {
                            self.hidden.set(self.hidden.get().saturating_sub(1));
                        }
                    }
                    "h1" | "h2" | "h3" | "h4" | "h5" | "h6" => {
                        let mut heading = self.heading.borrow_mut();
                        if start {
                            self.out.borrow_mut().end_block();
                            *heading = Some(String::new());
                        } else if let Some(text) = heading.take() {
                            self.out.borrow_mut().heading(&text);
                        }
                    }
                    "br" | "tr" => {
                        self.cells.set(0);
                        match self.heading.borrow_mut().as_mut() {
                            Some(heading) => heading.push(' '),
                            None => self.out.borrow_mut().end_line(),
                        }
                    }
                    "td" | "th" if start => {
                        if self.cells.get() > 0 {
                            self.out.borrow_mut().push(" | ");
                        }
                        self.cells.set(self.cells.get() + 1);
                    }
                    _ if is_block(name) => self.out.borrow_mut().end_block(),
                    _ => {}
                }
                if let Some(raw) = raw_text_after(&tag) {
                    return raw;
                }
            }
            _ => {}
        }
        TokenSinkResult::Continue
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_headings_and_hidden_text() {
        let mut out = TextBuilder::default();
        append_html(
            "<?xml version=\"1.0\"?><html><head><title>T</title><style>p{}</style></head>\
             <body><h1>Chapter  One</h1><p>Fish &amp; <i>chips</i></p><p>Line<br/>two</p>\
             <table><tr><td>a</td><td>b</td></tr></table></body></html>",
            &mut out,
        );
        append_html("<body><h2>Two</h2><p>More.</p></body>", &mut out);
        let out = out.finish(None);
        assert_eq!(
            out.text,
            "Chapter One\n\nFish & chips\n\nLine\ntwo\n\na | b\n\nTwo\n\nMore."
        );
        let headings: Vec<_> = out
            .layout
            .sections
            .iter()
            .map(|s| s.heading.as_str())
            .collect();
        assert_eq!(headings, ["Chapter One", "Two"]);
        let at = out.layout.sections[1].char_start;
        assert!(out.text[at..].starts_with("Two"));
    }
}
