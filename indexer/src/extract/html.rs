//! The text of (X)HTML into a [`TextBuilder`]: blocks for block elements,
//! sections for `<h1>`-`<h6>`, nothing between inline elements (`OS X</span>™`
//! reads "OS X™", as a browser shows it). An HTML file ([`page`]) and an
//! e-book's content documents ([`append_html`]) are read alike. Read with
//! html5ever's tokenizer, linear in the input: its tree builder's scope checks
//! walk the stack of open elements, quadratic in the nesting depth (100,000
//! nested `<div>`s took 41 s), and text extraction needs no tree, only which
//! elements it is inside.

use std::cell::{Cell, RefCell};

use html5ever::tendril::StrTendril;
use html5ever::tokenizer::states::RawKind;
use html5ever::tokenizer::{
    BufferQueue, TagKind, Token, TokenSink, TokenSinkResult, Tokenizer, TokenizerOpts,
};

use super::{Extracted, TextBuilder};

/// Appends the visible text of `content` to `out` as blocks and sections.
pub(crate) fn append_html(content: &str, out: &mut TextBuilder) {
    let sink = read(content, BlockSink::new(std::mem::take(out), false));
    let mut text = sink.out.into_inner();
    // The next content document starts a block of its own.
    text.end_block();
    *out = text;
}

/// The text of an HTML page as blocks and sections, only its `<main>`
/// element's where it has one (a site's menus and footers lie outside it).
/// Its title is its first `<h1>`-`<h3>`, else its `<title>`.
pub(crate) fn page(content: &str) -> Extracted {
    let sink = read(
        content,
        BlockSink::new(TextBuilder::default(), has_main(content)),
    );
    let title = [sink.first_heading.take(), Some(sink.title.take())]
        .into_iter()
        .flatten()
        .find(|t| !t.trim().is_empty());
    sink.out.into_inner().finish(title)
}

/// Runs the tokenizer over `content` into `sink`.
fn read<S: TokenSink>(content: &str, sink: S) -> S {
    let input = BufferQueue::default();
    input.push_back(StrTendril::from_slice(content));
    let tokenizer = Tokenizer::new(sink, TokenizerOpts::default());
    let _ = tokenizer.feed(&input);
    tokenizer.end();
    tokenizer.sink
}

/// Whether `content` has a `<main>` element: a tokenizer pass, made only where the bytes
/// `<main` stand somewhere (in any case), as they must for a `<main>` start tag.
fn has_main(content: &str) -> bool {
    if !content
        .as_bytes()
        .windows(5)
        .any(|w| w.eq_ignore_ascii_case(b"<main"))
    {
        return false;
    }
    struct MainSink(Cell<bool>);
    impl TokenSink for MainSink {
        type Handle = ();
        fn process_token(&self, token: Token, _line: u64) -> TokenSinkResult<()> {
            if let Token::TagToken(tag) = token {
                if tag.kind == TagKind::StartTag && &*tag.name == "main" {
                    self.0.set(true);
                }
                if let Some(raw) = raw_text_after(&tag) {
                    return raw;
                }
            }
            TokenSinkResult::Continue
        }
    }
    read(content, MainSink(Cell::new(false))).0.get()
}

struct BlockSink {
    out: RefCell<TextBuilder>,
    /// The text of the heading being read.
    heading: RefCell<Option<String>>,
    /// The first `<h1>`-`<h3>`'s text, once read.
    first_heading: RefCell<Option<String>>,
    /// `<title>`'s text.
    title: RefCell<String>,
    in_title: Cell<bool>,
    /// Open elements whose text is not shown (head, script, style…).
    hidden: Cell<usize>,
    /// Cells seen in the current table row.
    cells: Cell<usize>,
    /// Text outside `<main>` is left out.
    main_only: bool,
    /// Open `<main>` elements.
    main_depth: Cell<usize>,
    /// The navigation element being passed over ([`is_navigation`]) and how many elements
    /// of its name are open inside it, itself included.
    navigation: RefCell<Option<(String, usize)>>,
}

impl BlockSink {
    fn new(out: TextBuilder, main_only: bool) -> Self {
        Self {
            out: RefCell::new(out),
            heading: RefCell::new(None),
            first_heading: RefCell::new(None),
            title: RefCell::new(String::new()),
            in_title: Cell::new(false),
            hidden: Cell::new(0),
            cells: Cell::new(0),
            main_only,
            main_depth: Cell::new(0),
            navigation: RefCell::new(None),
        }
    }

    /// Whether text here is shown and kept.
    fn shown(&self) -> bool {
        self.hidden.get() == 0
            && (!self.main_only || self.main_depth.get() > 0)
            && self.navigation.borrow().is_none()
    }

    /// Follows `tag` into and out of a navigation element; whether it was one's own tag.
    fn pass_over_navigation(&self, tag: &html5ever::tokenizer::Tag) -> bool {
        let start = tag.kind == TagKind::StartTag;
        let mut navigation = self.navigation.borrow_mut();
        match navigation.as_mut() {
            Some((name, depth)) if *name == *tag.name => {
                if start && !tag.self_closing {
                    *depth += 1;
                } else if !start {
                    *depth -= 1;
                    if *depth == 0 {
                        *navigation = None;
                    }
                }
                true
            }
            Some(_) => false,
            None if start && !tag.self_closing && is_navigation(tag) => {
                *navigation = Some((tag.name.to_string(), 1));
                true
            }
            None => false,
        }
    }
}

/// Whether an element is a page's navigation rather than its content, as readers of the web
/// page tell it (Readability, trafilatura): `<nav>`, a navigation or menu role, or a class or
/// id naming navigation, a menu, breadcrumbs or a banner (`docnav`, `navheader`, `navbar`).
/// A book's pages repeat "Prev", "Up", "Home", "Next" and the book's title on each page; as
/// text they are found for every question and answer none. A sidebar is kept: a book's
/// sidebars ("NOTE", "CULTURE") are content. Only an element whose end tag HTML requires is
/// passed over (a `<div>`, a `<ul>`, not an `<li>` or a `<p>`, which may go unclosed), so
/// the text after it is never lost to a missing end tag.
fn is_navigation(tag: &html5ever::tokenizer::Tag) -> bool {
    const CLOSED: &[&str] = &[
        "nav", "div", "ul", "ol", "table", "section", "header", "footer", "aside", "span", "form",
    ];
    if !CLOSED.contains(&&*tag.name) {
        return false;
    }
    if &*tag.name == "nav" {
        return true;
    }
    tag.attrs.iter().any(|a| match &*a.name.local {
        "role" => matches!(&*a.value, "navigation" | "menu" | "menubar"),
        "class" | "id" => a.value.split_whitespace().any(|token| {
            let token = token.to_ascii_lowercase();
            token.starts_with("nav")
                || token.ends_with("nav")
                || token.starts_with("menu")
                || token.contains("breadcrumb")
                || token == "banner"
        }),
        _ => false,
    })
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
            Token::CharacterTokens(text) if self.in_title.get() => {
                self.title.borrow_mut().push_str(&text);
            }
            Token::CharacterTokens(text) if self.shown() => {
                match self.heading.borrow_mut().as_mut() {
                    Some(heading) => heading.push_str(&text),
                    None => self.out.borrow_mut().push(&text),
                }
            }
            Token::TagToken(tag) if self.pass_over_navigation(&tag) => {
                if let Some(raw) = raw_text_after(&tag) {
                    return raw;
                }
            }
            Token::TagToken(tag) => {
                let start = tag.kind == TagKind::StartTag;
                let name: &str = &tag.name;
                match name {
                    "title" => self.in_title.set(start && !tag.self_closing),
                    "main" if start && !tag.self_closing => {
                        self.main_depth.set(self.main_depth.get() + 1);
                        self.out.borrow_mut().end_block();
                    }
                    "main" if !start => {
                        self.main_depth.set(self.main_depth.get().saturating_sub(1));
                        self.out.borrow_mut().end_block();
                    }
                    "head" | "script" | "style" | "noscript" | "template" => {
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
                            if self.shown() {
                                self.out.borrow_mut().heading(&text);
                                if matches!(name, "h1" | "h2" | "h3") {
                                    let mut first = self.first_heading.borrow_mut();
                                    first.get_or_insert(text);
                                }
                            }
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
    fn navigation_is_passed_over() {
        let page = page(
            "<body><div id=\"banner\"><a>Download the ebook</a></div>\
             <ul class=\"docnav top\"><li>Prev</li><li><ul><li>Home</li></ul></li></ul>\
             <h2>A.4. Knoppix</h2><div class=\"para\">Knoppix <nav>Menu</nav>is a live CD.</div>\
             <div class=\"sidebar\">NOTE Kept.</div><li class=\"menu-item\">Unclosed item\
             <p>After it.</p><div role=\"navigation\"><div>Up</div></div><p>End.</p></body>",
        );
        assert_eq!(
            page.text,
            "A.4. Knoppix\n\nKnoppix is a live CD.\n\nNOTE Kept.\n\nUnclosed item\n\nAfter it.\n\nEnd."
        );
    }

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
