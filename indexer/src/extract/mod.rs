//! Text out of the document files users keep: PDF (per page), DOCX and
//! EPUB (paragraphs, headings and tables in document order), with where each
//! page and section begins so that passages can be cited by page.
//!
//! Parsers of binary formats see hostile input: [`isolate`] runs them in a
//! child process under a time and memory bound, so that a panic, a runaway
//! or an allocation bomb costs one file, named, and never the run.

mod docx;
mod epub;
pub(crate) mod html;
pub(crate) mod isolate;
mod pdf;
pub mod plain;
mod zipped;

use serde::{Deserialize, Serialize};

pub use isolate::ChildExtractor;

/// A binary document format Capstan reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// Portable Document Format: text per page.
    Pdf,
    /// Office Open XML word processing (Word's `.docx`).
    Docx,
    /// EPUB 2 or 3 e-books.
    Epub,
}

impl Format {
    /// The format of a file, by extension and, failing that, by its first
    /// bytes (`%PDF-`, a zip holding `word/document.xml` or an EPUB
    /// `mimetype`); `None` for what is not one of them.
    pub fn detect(path: &std::path::Path, head: &[u8]) -> Option<Self> {
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        match ext.as_deref() {
            Some("pdf") => return Some(Self::Pdf),
            Some("docx") => return Some(Self::Docx),
            Some("epub") => return Some(Self::Epub),
            _ => {}
        }
        Self::sniff(head)
    }

    /// The format told by a file's first bytes alone.
    pub fn sniff(head: &[u8]) -> Option<Self> {
        // A PDF header may follow up to 1,024 bytes of junk (PDF 1.7, H.3).
        let window = &head[..head.len().min(1024)];
        if window.windows(5).any(|w| w == b"%PDF-") {
            return Some(Self::Pdf);
        }
        if head.starts_with(b"PK\x03\x04") {
            // EPUB's first member is an uncompressed `mimetype` file (OCF 3.3).
            if head.get(30..38) == Some(b"mimetype")
                && head[38..].starts_with(b"application/epub+zip")
            {
                return Some(Self::Epub);
            }
            if head.windows(b"word/".len()).any(|w| w == b"word/") {
                return Some(Self::Docx);
            }
        }
        None
    }

    /// The format's usual name, for messages.
    pub fn name(self) -> &'static str {
        match self {
            Self::Pdf => "PDF",
            Self::Docx => "DOCX",
            Self::Epub => "EPUB",
        }
    }
}

/// The text of a document file with its layout.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Extracted {
    /// The document's own title (PDF `Title`, DOCX `dc:title`, EPUB
    /// `dc:title`), or its first heading, where it has one.
    pub title: Option<String>,
    /// The text: pages and paragraphs separated by blank lines.
    pub text: String,
    /// Where pages and sections begin.
    pub layout: Layout,
    /// Damage the reader met and read past (a page it could not read, a file that ends
    /// early): the text is what could be read, and these say what was lost.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// Where a document's pages and sections begin, as character offsets into
/// its text, for citing a passage by page and heading.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layout {
    /// The character offset at which each page begins, in page order: page
    /// `n` (1-based, as a viewer numbers pages) begins at `page_starts[n - 1]`.
    /// Empty for documents without pages.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub page_starts: Vec<usize>,
    /// The sections, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sections: Vec<Section>,
}

/// A section of a document: its heading and where it begins.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Section {
    /// Character offset of the heading in the document text.
    pub char_start: usize,
    /// The heading's text.
    pub heading: String,
}

impl Layout {
    /// The 1-based pages of the characters `start..end` (`None` for an
    /// unpaged document).
    pub fn pages_of(&self, start: usize, end: usize) -> Option<(u32, u32)> {
        if self.page_starts.is_empty() {
            return None;
        }
        let page = |c: usize| self.page_starts.partition_point(|&s| s <= c).max(1) as u32;
        let first = page(start);
        Some((first, page(end.saturating_sub(1).max(start)).max(first)))
    }

    /// The heading of the section the character `at` is in.
    pub fn section_at(&self, at: usize) -> Option<&str> {
        let n = self.sections.partition_point(|s| s.char_start <= at);
        n.checked_sub(1).map(|i| self.sections[i].heading.as_str())
    }
}

/// Why a document file yields no text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
pub enum ExtractError {
    /// The file is not a well-formed document of its format.
    #[error("not a readable {format} file: {message}")]
    Unreadable {
        /// The format's name.
        format: String,
        /// What the parser found.
        message: String,
    },
    /// The file needs a password.
    #[error("the {format} file is encrypted with a password; Capstan cannot read it")]
    Encrypted {
        /// The format's name.
        format: String,
    },
    /// A PDF whose pages carry no text (a scan without OCR).
    #[error(
        "the PDF has {pages} page(s) but no text layer (scanned images?): run OCR on it first"
    )]
    NoTextLayer {
        /// Its page count.
        pages: usize,
    },
    /// The parser panicked or its process died.
    #[error("the {format} parser failed on this file: {message}")]
    Crashed {
        /// The format's name.
        format: String,
        /// The panic message or how the process ended.
        message: String,
    },
    /// The file, or the text it holds, is past a bound on memory.
    #[error("the {format} file is too large: {what}")]
    TooLarge {
        /// The format's name.
        format: String,
        /// Which bound, and by how much.
        what: String,
    },
    /// The parser ran past the time bound.
    #[error("reading the {format} file took longer than {seconds} s (the bound per file); it was stopped")]
    TimedOut {
        /// The format's name.
        format: String,
        /// The bound.
        seconds: u64,
    },
}

impl ExtractError {
    fn unreadable(format: Format, message: impl std::fmt::Display) -> Self {
        Self::Unreadable {
            format: format.name().into(),
            message: message.to_string(),
        }
    }
}

/// Extracts the text of `bytes`, a file of `format`, in this process.
/// A panic of the parser is caught and returned as [`ExtractError::Crashed`];
/// neither time nor memory is bounded here ([`ChildExtractor`] bounds both).
pub fn extract(format: Format, bytes: &[u8]) -> Result<Extracted, ExtractError> {
    let run = || match format {
        Format::Pdf => pdf::extract(bytes),
        Format::Docx => docx::extract(bytes),
        Format::Epub => epub::extract(bytes),
    };
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)) {
        Ok(result) => result,
        Err(panic) => Err(ExtractError::Crashed {
            format: format.name().into(),
            message: format!("panicked: {}", crate::panic_message(&*panic)),
        }),
    }
}

/// The text of an XML entity or character reference (`&amp;`, `&#233;`), as
/// the DOCX and EPUB readers meet them between text events.
fn xml_reference_text(r: &quick_xml::events::BytesRef) -> String {
    if let Ok(Some(c)) = r.resolve_char_ref() {
        return c.to_string();
    }
    quick_xml::escape::resolve_predefined_entity(r)
        .unwrap_or_default()
        .to_string()
}

/// Builds a document's text block by block, keeping character offsets for
/// its layout. Whitespace inside a block collapses to single spaces.
#[derive(Debug, Default)]
pub(crate) struct TextBuilder {
    text: String,
    chars: usize,
    layout: Layout,
    /// A space is owed before the next word of this block.
    space: bool,
    /// A line break is owed before the next word of this block.
    line: bool,
    /// A block break is owed before the next word.
    block: bool,
}

impl TextBuilder {
    /// Starts the next page: a block break, and the page's first character
    /// is whatever comes next.
    pub fn start_page(&mut self) {
        self.end_block();
        let at = self.next_offset();
        self.layout.page_starts.push(at);
    }

    /// A page break inside the flow of text (a word processor's record of
    /// where it broke pages): the next character begins a page, and the
    /// first break also says that page 1 began at the start.
    pub fn page_break(&mut self) {
        if self.layout.page_starts.is_empty() {
            self.layout.page_starts.push(0);
        }
        let at = self.next_offset();
        self.layout.page_starts.push(at);
    }

    /// The offset the next character will have: after the break or space owed.
    fn next_offset(&self) -> usize {
        let owed = if self.text.is_empty() {
            0
        } else if self.block {
            2
        } else {
            usize::from(self.space || self.line)
        };
        self.chars + owed
    }

    /// Ends the current block (paragraph, cell row, heading).
    pub fn end_block(&mut self) {
        if !self.text.is_empty() {
            self.block = true;
        }
        self.space = false;
        self.line = false;
    }

    /// Ends the current line within a block (a `<br>`, a table row): kept
    /// as a newline rather than collapsed.
    pub fn end_line(&mut self) {
        if !self.text.is_empty() && !self.block {
            self.line = true;
        }
    }

    /// Marks a word boundary (a tag, a tab, a table cell).
    pub fn space(&mut self) {
        if !self.text.is_empty() && !self.block {
            self.space = true;
        }
    }

    /// Appends text; runs of whitespace become single spaces.
    pub fn push(&mut self, s: &str) {
        for (i, word) in s.split(char::is_whitespace).enumerate() {
            if i > 0 {
                self.space();
            }
            if word.is_empty() {
                continue;
            }
            self.flush_pending();
            self.push_raw(word);
        }
    }

    /// Appends a heading as a block of its own and starts a section there.
    pub fn heading(&mut self, heading: &str) {
        let heading = heading.split_whitespace().collect::<Vec<_>>().join(" ");
        if heading.is_empty() {
            return;
        }
        self.end_block();
        let at = self.next_offset();
        self.layout.sections.push(Section {
            char_start: at,
            heading: heading.clone(),
        });
        self.push(&heading);
        self.end_block();
    }

    fn flush_pending(&mut self) {
        if self.block {
            self.push_raw("\n\n");
        } else if self.line {
            self.push_raw("\n");
        } else if self.space {
            self.push_raw(" ");
        }
        self.block = false;
        self.line = false;
        self.space = false;
    }

    fn push_raw(&mut self, s: &str) {
        self.text.push_str(s);
        self.chars += s.chars().count();
    }

    /// Where each page begins so far.
    pub fn page_starts(&self) -> &[usize] {
        &self.layout.page_starts
    }

    /// Starts a section at the character offset `at` of the text (sections
    /// may be marked out of order; they are sorted at the end).
    pub fn mark_section(&mut self, at: usize, heading: &str) {
        self.layout.sections.push(Section {
            char_start: at,
            heading: heading.to_string(),
        });
    }

    /// The first section's heading.
    pub fn first_heading(&self) -> Option<String> {
        self.layout.sections.first().map(|s| s.heading.clone())
    }

    /// The text and layout; page starts past the end (trailing empty
    /// pages) are clamped to it.
    pub fn finish(mut self, title: Option<String>) -> Extracted {
        for start in &mut self.layout.page_starts {
            *start = (*start).min(self.chars);
        }
        self.layout.sections.sort_by_key(|s| s.char_start);
        let title = title
            .map(|t| t.split_whitespace().collect::<Vec<_>>().join(" "))
            .filter(|t| !t.is_empty());
        Extracted {
            title,
            text: self.text,
            layout: self.layout,
            warnings: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builder_keeps_offsets_of_pages_and_sections() {
        let mut b = TextBuilder::default();
        b.start_page();
        b.heading("  Introduction ");
        b.push("first   words\tand more");
        b.end_block();
        b.start_page();
        b.push("second page");
        b.end_line();
        b.push("next line");
        b.start_page();
        let out = b.finish(Some(" A  title ".into()));
        assert_eq!(
            out.text,
            "Introduction\n\nfirst words and more\n\nsecond page\nnext line"
        );
        assert_eq!(out.title.as_deref(), Some("A title"));
        let chars: Vec<char> = out.text.chars().collect();
        let at = |i: usize| chars[i..].iter().take(6).collect::<String>();
        assert_eq!(out.layout.page_starts.len(), 3);
        assert_eq!(out.layout.page_starts[0], 0);
        assert_eq!(at(out.layout.page_starts[1]), "second");
        assert_eq!(out.layout.page_starts[2], chars.len());
        assert_eq!(at(out.layout.sections[0].char_start), "Introd");
        let second = out.layout.page_starts[1];
        assert_eq!(out.layout.pages_of(0, 5), Some((1, 1)));
        assert_eq!(out.layout.pages_of(3, second + 2), Some((1, 2)));
        assert_eq!(out.layout.pages_of(second, second + 6), Some((2, 2)));
        assert_eq!(out.layout.section_at(40), Some("Introduction"));
        assert_eq!(Layout::default().pages_of(0, 3), None);
    }

    #[test]
    fn formats_are_told_by_extension_or_first_bytes() {
        let p = std::path::Path::new;
        assert_eq!(Format::detect(p("a.PDF"), b""), Some(Format::Pdf));
        assert_eq!(
            Format::detect(p("a.bin"), b"junk\n%PDF-1.4"),
            Some(Format::Pdf)
        );
        assert_eq!(Format::detect(p("a.bin"), b"plain text"), None);
        let mut epub = b"PK\x03\x04".to_vec();
        epub.extend_from_slice(&[0; 26]);
        epub.extend_from_slice(b"mimetypeapplication/epub+zip");
        assert_eq!(Format::sniff(&epub), Some(Format::Epub));
    }
}
