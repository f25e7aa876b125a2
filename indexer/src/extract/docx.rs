//! DOCX: `word/document.xml` read in document order. Paragraphs become
//! blocks, headings (by the built-in style names of `word/styles.xml` or an
//! outline level) start sections, table rows become lines with their cells
//! separated by " | ". Word records where it last broke pages
//! (`w:lastRenderedPageBreak`): when a file has those, passages get pages.

use std::collections::HashSet;

use quick_xml::events::{BytesStart, Event};
use quick_xml::Reader;

use super::zipped::Zipped;
use super::{xml_reference_text, ExtractError, Extracted, Format, TextBuilder};

const FORMAT: Format = Format::Docx;

pub(crate) fn extract(bytes: &[u8]) -> Result<Extracted, ExtractError> {
    let mut zip = Zipped::open(FORMAT, bytes)?;
    if !zip.contains("word/document.xml") {
        return Err(ExtractError::unreadable(
            FORMAT,
            "no word/document.xml (not a Word document)",
        ));
    }
    let headings = if zip.contains("word/styles.xml") {
        heading_styles(&zip.text("word/styles.xml")?)?
    } else {
        HashSet::new()
    };
    let title = if zip.contains("docProps/core.xml") {
        core_title(&zip.text("docProps/core.xml")?)
    } else {
        None
    };
    let document = zip.text("word/document.xml")?;
    body_text(&document, &headings, title)
}

fn xml_error(e: impl std::fmt::Display) -> ExtractError {
    ExtractError::unreadable(FORMAT, format!("malformed XML: {e}"))
}

fn attribute(e: &BytesStart, name: &str) -> Option<String> {
    e.attributes()
        .flatten()
        .find(|a| a.key.as_ref() == name)
        .and_then(|a| {
            a.normalized_value(quick_xml::XmlVersion::Implicit1_0)
                .ok()
                .map(|v| v.into_owned())
        })
}

/// Ids of the paragraph styles that are headings: built-in names ("heading
/// 1"…, "Title") are English in every language's files, ids are not.
fn heading_styles(xml: &str) -> Result<HashSet<String>, ExtractError> {
    let mut reader = Reader::from_str(xml);
    let mut ids = HashSet::new();
    let mut current: Option<String> = None;
    loop {
        match reader.read_event().map_err(xml_error)? {
            Event::Start(e) if e.name().as_ref() == "w:style" => {
                current = attribute(&e, "w:styleId");
            }
            Event::Empty(e) if e.name().as_ref() == "w:name" => {
                let name = attribute(&e, "w:val").unwrap_or_default().to_lowercase();
                if name == "title" || name.starts_with("heading") {
                    ids.extend(current.clone());
                }
            }
            Event::End(e) if e.name().as_ref() == "w:style" => current = None,
            Event::Eof => break,
            _ => {}
        }
    }
    Ok(ids)
}

/// `dc:title` of `docProps/core.xml`.
fn core_title(xml: &str) -> Option<String> {
    let mut reader = Reader::from_str(xml);
    let mut inside = false;
    let mut title = String::new();
    loop {
        match reader.read_event().ok()? {
            Event::Start(e) if e.name().as_ref() == "dc:title" => inside = true,
            Event::End(e) if e.name().as_ref() == "dc:title" => break,
            Event::Text(t) if inside => title.push_str(&t),
            Event::GeneralRef(r) if inside => title.push_str(&xml_reference_text(&r)),
            Event::Eof => break,
            _ => {}
        }
    }
    Some(title).filter(|t| !t.trim().is_empty())
}

fn body_text(
    xml: &str,
    headings: &HashSet<String>,
    title: Option<String>,
) -> Result<Extracted, ExtractError> {
    let mut reader = Reader::from_str(xml);
    let mut out = TextBuilder::default();
    // The paragraph being read: its text, and whether it is a heading.
    let mut para = String::new();
    let mut heading = false;
    let mut in_text = false;
    let mut table_depth = 0usize;
    let mut cells_in_row = 0usize;
    let mut first_heading: Option<String> = None;
    let end_paragraph = |out: &mut TextBuilder, para: &mut String, heading: bool, table: bool| {
        if heading && !table {
            out.heading(para);
        } else {
            out.push(para);
            if !table {
                out.end_block();
            } else {
                out.space();
            }
        }
        para.clear();
    };
    loop {
        let event = reader.read_event().map_err(xml_error)?;
        match event {
            Event::Start(ref e) | Event::Empty(ref e) => {
                let empty = matches!(event, Event::Empty(_));
                match e.name().as_ref() {
                    "w:p" if !empty => {
                        heading = false;
                        para.clear();
                    }
                    "w:pStyle" if attribute(e, "w:val").is_some_and(|v| headings.contains(&v)) => {
                        heading = true;
                    }
                    // Level 9 is "body text" in Word's outline.
                    "w:outlineLvl" if attribute(e, "w:val").is_some_and(|v| v != "9") => {
                        heading = true;
                    }
                    "w:t" if !empty => in_text = true,
                    "w:tab" | "w:noBreakHyphen" if empty => para.push(' '),
                    "w:br" | "w:cr" if empty => para.push('\n'),
                    "w:lastRenderedPageBreak" => {
                        // What came before in this paragraph is the previous page's.
                        out.push(&para);
                        para.clear();
                        out.page_break();
                    }
                    "w:tbl" if !empty => {
                        table_depth += 1;
                        out.end_block();
                    }
                    "w:tr" if !empty => cells_in_row = 0,
                    "w:tc" if !empty => {
                        if cells_in_row > 0 {
                            out.push(" |");
                        }
                        cells_in_row += 1;
                    }
                    _ => {}
                }
            }
            Event::Text(t) if in_text => para.push_str(&t),
            Event::GeneralRef(r) if in_text => para.push_str(&xml_reference_text(&r)),
            Event::End(e) => match e.name().as_ref() {
                "w:t" => in_text = false,
                "w:p" => {
                    if heading && first_heading.is_none() && !para.trim().is_empty() {
                        first_heading = Some(para.clone());
                    }
                    end_paragraph(&mut out, &mut para, heading, table_depth > 0);
                }
                "w:tr" => out.end_line(),
                "w:tbl" => {
                    table_depth = table_depth.saturating_sub(1);
                    out.end_block();
                }
                _ => {}
            },
            Event::Eof => break,
            _ => {}
        }
    }
    Ok(out.finish(title.or(first_heading)))
}
