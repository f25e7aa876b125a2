//! PDF: text per page with pdf_oxide, chosen by measurement over lopdf and
//! pdf-extract on 1,362 real pages (docs/BENCHMARKS.md, issue 26): the
//! closest to poppler's reading order (page token F1 0.996 against
//! `pdftotext`), ligatures expanded, line-end hyphens joined, no failure on
//! any real file, and it rebuilds truncated files. Pure Rust, nothing
//! fetched at build or run time.
//!
//! On top of it: running headers and footers (the same line at the top or
//! bottom of nearby pages, page numbers included) are dropped, words
//! hyphenated at a line end are joined, and the outline (bookmarks) gives
//! the sections.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};

use pdf_oxide::object::ObjectRef;
use pdf_oxide::outline::{Destination, OutlineItem};
use pdf_oxide::PdfDocument;

use super::{ExtractError, Extracted, Format, TextBuilder};

const FORMAT: Format = Format::Pdf;

/// The deepest nesting of arrays and dictionaries read: real files nest a few levels (a page
/// tree is its own objects, not nested ones); a parser that recurses would overflow its stack
/// some ten thousand levels down.
const MAX_NESTING: usize = 512;

/// The most listings of the page tree that may repeat an earlier one before the file is
/// refused. A page tree is a tree: a real file lists each page once. Past the first page, the
/// parser looks for every repeated listing with a scan of the whole file, from every page it
/// reads (its running-header pass reads them all), so time grows with the square of the
/// listings: 10,000 took 17 s and 40,000 over 150 s before this bound.
const MAX_REPEATED_LISTINGS: usize = 1_000;

pub(crate) fn extract(bytes: &[u8]) -> Result<Extracted, ExtractError> {
    check_nesting(bytes)?;
    let doc = PdfDocument::from_bytes(bytes.to_vec()).map_err(error)?;
    // Opening tries the empty user password (files with only an owner
    // password open in every viewer); anything else needs the user's.
    if doc.is_encrypted() && !doc.authenticate(b"").unwrap_or(false) {
        return Err(encrypted());
    }
    let count = doc.page_count().map_err(error)?;
    let repeats = catch_unwind(AssertUnwindSafe(|| repeated_listings(&doc, count)))
        .ok()
        .flatten()
        .unwrap_or_default();
    if repeats.len() > MAX_REPEATED_LISTINGS {
        return Err(ExtractError::unreadable(
            FORMAT,
            format!(
                "its page tree lists {} of its {count} pages again (at most \
                 {MAX_REPEATED_LISTINGS} may be): a damaged or hostile file",
                repeats.len()
            ),
        ));
    }
    let mut pages = Vec::with_capacity(count);
    let mut failed = Vec::new();
    let mut repeated = Vec::new();
    for i in 0..count {
        if let Some(&first) = repeats.get(&i) {
            // The parser would refuse it, after a scan of the whole file.
            repeated.push((i, format!("the same page object as page {}", first + 1)));
            pages.push(String::new());
            continue;
        }
        // A page the parser cannot read (or panics on) loses that page only, and says so.
        let text = match catch_unwind(AssertUnwindSafe(|| doc.extract_text(i))) {
            Ok(Ok(text)) => text,
            Ok(Err(e)) => {
                failed.push((i, e.to_string()));
                String::new()
            }
            Err(panic) => {
                failed.push((i, format!("panicked: {}", crate::panic_message(&*panic))));
                String::new()
            }
        };
        pages.push(text);
    }
    if pages.iter().all(|p| p.trim().is_empty()) {
        // Pages that failed are damage, not a scan without text.
        return Err(match failed.first() {
            Some((page, message)) => ExtractError::unreadable(
                FORMAT,
                format!(
                    "{} of {count} page(s) could not be read (page {}: {message})",
                    failed.len(),
                    page + 1
                ),
            ),
            None => ExtractError::NoTextLayer { pages: count },
        });
    }
    let mut warnings = page_run_warnings(&failed, ("could not be read", "could not be read"));
    warnings.extend(page_run_warnings(
        &repeated,
        ("was not read again", "were not read again"),
    ));
    if !ends_with_eof_marker(bytes) {
        warnings.push(format!(
            "the file does not end with %%EOF: it may be cut short ({count} page(s) read)"
        ));
    }
    let outline = catch_unwind(AssertUnwindSafe(|| doc.get_outline()))
        .ok()
        .and_then(Result::ok)
        .flatten()
        .unwrap_or_default();
    let title = catch_unwind(AssertUnwindSafe(|| info_title(&doc)))
        .ok()
        .flatten();
    let mut extracted = assemble(&pages, &outline);
    extracted.title = title;
    extracted.warnings = warnings;
    Ok(extracted)
}

/// The listings of the page tree that name a page object an earlier listing named, by page
/// index, each with the index of that first listing: such a page is read once. Walked here in
/// the parser's order (depth first, kids in order), in time linear in the listings; `None`
/// when the tree is not one this walk reads the parser's way (a node without a type, a
/// circle, a count that disagrees), and the parser is left to find the pages itself.
fn repeated_listings(doc: &PdfDocument, count: usize) -> Option<HashMap<usize, usize>> {
    let catalog = doc.catalog().ok()?;
    let root = catalog.as_dict()?.get("Pages")?.as_reference()?;
    let mut kinds: HashMap<ObjectRef, bool> = HashMap::new();
    let mut first_listing: HashMap<ObjectRef, usize> = HashMap::new();
    let mut repeats = HashMap::new();
    let mut leaves = 0usize;
    // Kids still to visit, last first.
    let mut stack = vec![root];
    while let Some(node) = stack.pop() {
        let is_page = match kinds.get(&node) {
            Some(&true) => true,
            // A page-tree node reached again: a circle or a shared subtree, which the parser
            // walks its own way.
            Some(&false) => return None,
            None => {
                let object = doc.load_object(node).ok()?;
                let dict = object.as_dict()?;
                let kind = match dict.get("Type")?.as_name()? {
                    "Page" => true,
                    "Pages" => {
                        let kids = dict.get("Kids")?.as_array()?;
                        for kid in kids.iter().rev() {
                            stack.push(kid.as_reference()?);
                        }
                        false
                    }
                    _ => return None,
                };
                kinds.insert(node, kind);
                kind
            }
        };
        if !is_page {
            continue;
        }
        if let Some(&first) = first_listing.get(&node) {
            repeats.insert(leaves, first);
        } else {
            first_listing.insert(node, leaves);
        }
        leaves += 1;
        if leaves > count {
            return None;
        }
    }
    (leaves == count).then_some(repeats)
}

/// One warning per run of consecutive pages (`verbs`: singular, plural), naming the run and
/// the first page's reason: a page tree that lists one page 10,000 times repeats it on every
/// listing after the first, and 9,999 lines would bury the one thing worth saying.
fn page_run_warnings(failed: &[(usize, String)], verbs: (&str, &str)) -> Vec<String> {
    let mut warnings = Vec::new();
    let mut i = 0;
    while i < failed.len() {
        let (first, message) = &failed[i];
        let mut last = *first;
        while i + 1 < failed.len() && failed[i + 1].0 == last + 1 {
            i += 1;
            last = failed[i].0;
        }
        warnings.push(if last == *first {
            format!("page {} {}: {message}", first + 1, verbs.0)
        } else {
            format!(
                "pages {}-{} ({} pages) {} (page {}: {message})",
                first + 1,
                last + 1,
                last - first + 1,
                verbs.1,
                first + 1
            )
        });
        i += 1;
    }
    warnings
}

/// Whether the end-of-file marker closes the file (within its last KiB, as readers look for it).
fn ends_with_eof_marker(bytes: &[u8]) -> bool {
    let tail = &bytes[bytes.len().saturating_sub(1024)..];
    tail.windows(5).any(|w| w == b"%%EOF")
}

/// Refuses a file whose arrays and dictionaries nest deeper than [`MAX_NESTING`], before a
/// parser recurses into them. Strings, comments and streams are passed over (their bytes are
/// not syntax).
fn check_nesting(bytes: &[u8]) -> Result<(), ExtractError> {
    let mut depth = 0usize;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                while i < bytes.len() && bytes[i] != b'\n' && bytes[i] != b'\r' {
                    i += 1;
                }
            }
            b'(' => {
                // A literal string: balanced parentheses, backslash escapes.
                let mut open = 0usize;
                while i < bytes.len() {
                    match bytes[i] {
                        b'\\' => i += 1,
                        b'(' => open += 1,
                        b')' => {
                            open -= 1;
                            if open == 0 {
                                break;
                            }
                        }
                        _ => {}
                    }
                    i += 1;
                }
            }
            b'<' if bytes.get(i + 1) == Some(&b'<') => {
                depth += 1;
                i += 1;
            }
            b'<' => {
                // A hex string.
                while i < bytes.len() && bytes[i] != b'>' {
                    i += 1;
                }
            }
            b'>' if bytes.get(i + 1) == Some(&b'>') => {
                depth = depth.saturating_sub(1);
                i += 1;
            }
            b'[' => depth += 1,
            b']' => depth = depth.saturating_sub(1),
            b's' if bytes[i..].starts_with(b"stream")
                && matches!(bytes.get(i + 6), Some(b'\r' | b'\n')) =>
            {
                // A stream's data: up to its `endstream`.
                let rest = &bytes[i + 6..];
                i += 6 + rest
                    .windows(9)
                    .position(|w| w == b"endstream")
                    .map_or(rest.len(), |p| p + 9);
                continue;
            }
            _ => {}
        }
        if depth > MAX_NESTING {
            return Err(ExtractError::unreadable(
                FORMAT,
                format!(
                    "arrays or dictionaries nest deeper than {MAX_NESTING} levels (at byte {i})"
                ),
            ));
        }
        i += 1;
    }
    Ok(())
}

/// The document information dictionary's `/Title`, where the producer set
/// one (pdf_oxide 0.3.78 reads it but does not expose it).
fn info_title(doc: &PdfDocument) -> Option<String> {
    let resolve = |object: &pdf_oxide::object::Object| match object.as_reference() {
        Some(reference) => doc.load_object(reference).ok(),
        None => Some(object.clone()),
    };
    let info = resolve(doc.trailer().as_dict()?.get("Info")?)?;
    let title = resolve(info.as_dict()?.get("Title")?)?;
    let text = pdf_oxide::optional_content::decode_pdf_text_string(title.as_string()?);
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    (!text.is_empty()).then_some(text)
}

fn encrypted() -> ExtractError {
    ExtractError::Encrypted {
        format: FORMAT.name().into(),
    }
}

fn error(e: pdf_oxide::Error) -> ExtractError {
    match e {
        pdf_oxide::Error::EncryptedPdf => encrypted(),
        e => ExtractError::unreadable(FORMAT, e),
    }
}

/// The document text from its pages' raw text, with page starts and the
/// outline's sections.
fn assemble(pages: &[String], outline: &[OutlineItem]) -> Extracted {
    let lines: Vec<Vec<&str>> = pages
        .iter()
        .map(|p| p.lines().map(str::trim).collect())
        .collect();
    let running = running_lines(&lines);
    let mut out = TextBuilder::default();
    let mut page_texts = Vec::with_capacity(pages.len());
    for (page, page_lines) in lines.iter().enumerate() {
        let kept: Vec<&str> = page_lines
            .iter()
            .enumerate()
            .filter(|(i, _)| !running.contains(&(page, *i)))
            .map(|(_, l)| *l)
            .collect();
        let text = page_text(&kept);
        out.start_page();
        for block in text.split("\n\n") {
            out.push(block);
            out.end_block();
        }
        page_texts.push(text);
    }
    let mut headings = Vec::new();
    flatten(outline, &mut headings);
    for (page, title) in headings {
        let Some(text) = page_texts.get(page) else {
            continue;
        };
        let Some(&page_start) = out.page_starts().get(page) else {
            continue;
        };
        // The heading's place on its page where the text has it; else the page's start.
        let title = title.split_whitespace().collect::<Vec<_>>().join(" ");
        let within = find_ignoring_case(text, &title)
            .map(|byte| text[..byte].chars().count())
            .unwrap_or(0);
        out.mark_section(page_start + within, &title);
    }
    out.finish(None)
}

/// The outline's entries that point at a page, depth first (reading order).
fn flatten(items: &[OutlineItem], out: &mut Vec<(usize, String)>) {
    for item in items {
        if let Some(Destination::PageIndex(page)) = item.dest {
            if !item.title.trim().is_empty() {
                out.push((page, item.title.clone()));
            }
        }
        flatten(&item.children, out);
    }
}

fn find_ignoring_case(haystack: &str, needle: &str) -> Option<usize> {
    if needle.is_empty() {
        return None;
    }
    let lower = haystack.to_lowercase();
    // Lowercasing can change byte lengths; only trust positions where it did not.
    if lower.len() != haystack.len() {
        return haystack.find(needle);
    }
    lower.find(&needle.to_lowercase())
}

/// How many lines at the top and at the bottom of a page can be running
/// headers or footers.
const EDGE_LINES: usize = 2;
/// Pages on either side searched for the same header line.
const NEAR_PAGES: usize = 4;

/// `(page, line)` of the running headers and footers: a line among the
/// first or last [`EDGE_LINES`] non-empty lines of its page whose shape
/// (digits as `#`, spaces collapsed) is also an edge line of a page at most
/// [`NEAR_PAGES`] away. Chapter headers ("Chapter 2: Reading data 7") repeat
/// over their chapter's pages, page numbers over all of them; body text does
/// not repeat at the same edge of nearby pages.
fn running_lines(pages: &[Vec<&str>]) -> std::collections::HashSet<(usize, usize)> {
    let shape = |line: &str| -> String {
        let digits: String = line
            .chars()
            .map(|c| if c.is_ascii_digit() { '#' } else { c })
            .collect();
        let collapsed = digits.split_whitespace().collect::<Vec<_>>().join(" ");
        // Roman page numbers of front matter.
        if collapsed
            .chars()
            .all(|c| matches!(c, 'i' | 'v' | 'x' | 'l' | 'c'))
        {
            return "#".into();
        }
        collapsed
    };
    // Per page: (top shapes, bottom shapes) with their line numbers.
    type Shaped = Vec<(usize, String)>;
    let edges: Vec<(Shaped, Shaped)> = pages
        .iter()
        .map(|lines| {
            let filled: Vec<usize> = (0..lines.len()).filter(|&i| !lines[i].is_empty()).collect();
            let shaped = |i: &usize| (*i, shape(lines[*i]));
            let top = filled.iter().take(EDGE_LINES).map(shaped).collect();
            let bottom = filled.iter().rev().take(EDGE_LINES).map(shaped).collect();
            (top, bottom)
        })
        .collect();
    let mut running = std::collections::HashSet::new();
    if pages.len() < 3 {
        return running;
    }
    for (page, (top, bottom)) in edges.iter().enumerate() {
        let lo = page.saturating_sub(NEAR_PAGES);
        let hi = (page + NEAR_PAGES).min(pages.len() - 1);
        for (edge, which) in [(top, 0), (bottom, 1)] {
            let mut seen: HashMap<&str, usize> = HashMap::new();
            for other in (lo..=hi).filter(|&p| p != page) {
                let theirs = if which == 0 {
                    &edges[other].0
                } else {
                    &edges[other].1
                };
                for (_, s) in theirs {
                    *seen.entry(s.as_str()).or_default() += 1;
                }
            }
            for (line, s) in edge {
                if seen.contains_key(s.as_str()) {
                    running.insert((page, *line));
                }
            }
        }
    }
    running
}

/// A page's kept lines as paragraphs: blank lines separate paragraphs, a
/// word hyphenated at a line end ("infor-" / "mation") is joined as
/// poppler joins it.
fn page_text(lines: &[&str]) -> String {
    let mut paragraphs: Vec<String> = Vec::new();
    let mut current = String::new();
    for line in lines {
        if line.is_empty() {
            if !current.is_empty() {
                paragraphs.push(std::mem::take(&mut current));
            }
            continue;
        }
        let line = line.split_whitespace().collect::<Vec<_>>().join(" ");
        let hyphenated = current.ends_with('-')
            && current[..current.len() - 1]
                .chars()
                .last()
                .is_some_and(char::is_lowercase)
            && line.chars().next().is_some_and(char::is_lowercase);
        if hyphenated {
            current.pop();
        } else if !current.is_empty() {
            current.push(' ');
        }
        current.push_str(&line);
    }
    if !current.is_empty() {
        paragraphs.push(current);
    }
    paragraphs.join("\n\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nesting_past_the_bound_is_refused_and_strings_and_streams_do_not_count() {
        let deep = |n: usize| {
            let mut f = b"%PDF-1.4\n1 0 obj\n".to_vec();
            f.extend(std::iter::repeat_n(b'[', n));
            f.extend(std::iter::repeat_n(b']', n));
            f.extend_from_slice(b"\nendobj\n%%EOF\n");
            f
        };
        assert!(check_nesting(&deep(MAX_NESTING)).is_ok());
        let err = check_nesting(&deep(20_000)).unwrap_err().to_string();
        assert!(err.contains("nest deeper than 512"), "{err}");
        let mut dicts = Vec::new();
        for _ in 0..600 {
            dicts.extend_from_slice(b"<</A ");
        }
        assert!(check_nesting(&dicts).is_err());
        // Brackets inside strings, hex strings, comments and streams are not syntax.
        let mut quiet =
            b"1 0 obj (a [[[[ (b [[ ) \\) [[[ ) <5b5b> % [[[[\n<</Length 9>>\nstream\n".to_vec();
        quiet.extend(std::iter::repeat_n(b'[', 5_000));
        quiet.extend_from_slice(b"\nendstream\nendobj\n");
        assert!(check_nesting(&quiet).is_ok());
        // ... and the scan goes on after them.
        quiet.extend(deep(20_000));
        assert!(check_nesting(&quiet).is_err());
    }

    /// A one-page PDF whose page tree lists its page `listed` times.
    fn page_listed(listed: usize) -> Vec<u8> {
        let content = b"BT /F1 12 Tf 72 720 Td (Hello listed page) Tj ET";
        let kids = vec!["3 0 R"; listed].join(" ");
        let objects: Vec<Vec<u8>> = vec![
            b"<< /Type /Catalog /Pages 2 0 R >>".to_vec(),
            format!("<< /Type /Pages /Kids [{kids}] /Count {listed} >>").into_bytes(),
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R \
               /Resources << /Font << /F1 5 0 R >> >> >>"
                .to_vec(),
            [
                format!("<< /Length {} >>\nstream\n", content.len()).as_bytes(),
                content,
                b"\nendstream",
            ]
            .concat(),
            b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>".to_vec(),
        ];
        let mut out = b"%PDF-1.4\n".to_vec();
        let mut offsets = Vec::new();
        for (i, object) in objects.iter().enumerate() {
            offsets.push(out.len());
            out.extend(format!("{} 0 obj\n", i + 1).bytes());
            out.extend(object);
            out.extend(b"\nendobj\n");
        }
        let xref = out.len();
        out.extend(format!("xref\n0 {}\n0000000000 65535 f \n", objects.len() + 1).bytes());
        for o in offsets {
            out.extend(format!("{o:010} 00000 n \n").bytes());
        }
        out.extend(
            format!(
                "trailer\n<< /Size {} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n",
                objects.len() + 1
            )
            .bytes(),
        );
        out
    }

    #[test]
    fn a_page_listed_many_times_is_read_once_and_the_rest_named_in_one_warning() {
        let once = extract(&page_listed(1)).unwrap();
        assert!(once.text.contains("Hello listed page"), "{}", once.text);
        assert!(once.warnings.is_empty(), "{:?}", once.warnings);
        let many = extract(&page_listed(300)).unwrap();
        assert_eq!(
            many.text.matches("Hello listed page").count(),
            1,
            "{}",
            many.text
        );
        assert_eq!(many.warnings.len(), 1, "{:?}", many.warnings);
        assert!(
            many.warnings[0]
                == "pages 2-300 (299 pages) were not read again (page 2: the same page object as page 1)",
            "{:?}",
            many.warnings
        );
    }

    #[test]
    fn a_page_tree_listing_one_page_thousands_of_times_is_refused_at_once() {
        // Before, every listing past the first cost the parser a scan of the whole file:
        // 10,000 listings took 17 s, 40,000 over 150 s.
        let start = std::time::Instant::now();
        let Err(e) = extract(&page_listed(40_000)) else {
            panic!("40,000 listings of one page were read")
        };
        assert!(
            e.to_string().contains(
                "its page tree lists 39999 of its 40000 pages again (at most 1000 may be)"
            ),
            "{e}"
        );
        assert!(start.elapsed().as_secs() < 10, "{:?}", start.elapsed());
        assert!(extract(&page_listed(1_001)).is_ok());
    }

    const READ: (&str, &str) = ("could not be read", "could not be read");

    #[test]
    fn failed_pages_are_warned_about_by_runs() {
        let failed = |pages: &[usize]| -> Vec<(usize, String)> {
            pages.iter().map(|&p| (p, format!("error {p}"))).collect()
        };
        assert_eq!(
            page_run_warnings(&failed(&[0, 2, 3, 4, 9]), READ),
            [
                "page 1 could not be read: error 0",
                "pages 3-5 (3 pages) could not be read (page 3: error 2)",
                "page 10 could not be read: error 9",
            ]
        );
        assert!(page_run_warnings(&[], READ).is_empty());
    }

    #[test]
    fn the_end_of_file_marker_is_looked_for_in_the_last_kib() {
        assert!(ends_with_eof_marker(b"%PDF-1.4 ... %%EOF\n"));
        let mut cut = b"%PDF-1.4 %%EOF".to_vec();
        cut.extend(std::iter::repeat_n(b' ', 2048));
        assert!(!ends_with_eof_marker(&cut));
    }

    #[test]
    fn running_headers_and_page_numbers_are_dropped() {
        let topics = ["apples", "pears", "plums", "figs", "dates", "limes"];
        let pages: Vec<String> = (1..=6)
            .map(|n| {
                let chapter = if n <= 3 { "Chapter 1: Start" } else { "Chapter 2: Next" };
                let topic = topics[n - 1];
                format!("{chapter} {n}\n\nBody of this page talks about {topic}.\nMore infor-\nmation on {topic} here.\n\n{n}")
            })
            .collect();
        let out = assemble(&pages, &[]);
        assert!(!out.text.contains("Chapter"), "{}", out.text);
        assert!(
            out.text.contains("information on apples here"),
            "{}",
            out.text
        );
        assert_eq!(out.layout.page_starts.len(), 6);
        let chars: Vec<char> = out.text.chars().collect();
        let page3: String = chars[out.layout.page_starts[2]..].iter().take(40).collect();
        assert!(
            page3.starts_with("Body of this page talks about plums"),
            "{page3}"
        );
        // A line repeated only within one page's body is kept.
        let two = vec!["Intro\nSame line\nSame line\nend".to_string(); 1];
        assert!(assemble(&two, &[]).text.contains("Same line Same line"));
    }

    #[test]
    fn outline_entries_become_sections_at_their_heading() {
        let pages = vec![
            "Preface text here.".to_string(),
            "Some words before.\n\n2 Reading Data\n\nThe body.".to_string(),
        ];
        let outline = vec![OutlineItem {
            title: "Reading  data".into(),
            dest: Some(Destination::PageIndex(1)),
            children: vec![],
        }];
        let out = assemble(&pages, &outline);
        let s = &out.layout.sections[0];
        let at: String = out.text.chars().skip(s.char_start).take(12).collect();
        assert_eq!(at, "Reading Data");
        assert_eq!(s.heading, "Reading data");
        assert_eq!(out.layout.section_at(0), None);
    }
}
