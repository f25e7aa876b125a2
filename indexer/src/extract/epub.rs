//! EPUB 2 and 3: the package document named by `META-INF/container.xml`,
//! its spine's content documents in reading order, each read as XHTML
//! (headings start sections).

use std::collections::HashMap;

use quick_xml::events::Event;
use quick_xml::Reader;

use super::html::append_html;
use super::zipped::Zipped;
use super::{xml_reference_text, ExtractError, Extracted, Format, TextBuilder};

const FORMAT: Format = Format::Epub;

pub(crate) fn extract(bytes: &[u8]) -> Result<Extracted, ExtractError> {
    let mut zip = Zipped::open(FORMAT, bytes)?;
    if !zip.contains("META-INF/container.xml") {
        return Err(ExtractError::unreadable(
            FORMAT,
            "no META-INF/container.xml (not an e-book)",
        ));
    }
    let container = zip.text("META-INF/container.xml")?;
    let opf_path = rootfile(&container)?;
    let opf = zip.text(&opf_path)?;
    let package = Package::parse(&opf)?;
    let base = match opf_path.rfind('/') {
        Some(i) => &opf_path[..=i],
        None => "",
    };
    let mut out = TextBuilder::default();
    let mut read = std::collections::HashSet::new();
    for href in &package.spine {
        let path = join(base, href);
        // Spines may list one file many times (an entry per fragment).
        if !read.insert(path.clone()) {
            continue;
        }
        // A spine entry the container lacks: skipped, like a reader would.
        if !zip.contains(&path) {
            continue;
        }
        let content = zip.text(&path)?;
        append_html(without_internal_subset(&content), &mut out);
    }
    let first_heading = out.first_heading();
    Ok(out.finish(package.title.or(first_heading)))
}

fn xml_error(e: impl std::fmt::Display) -> ExtractError {
    ExtractError::unreadable(FORMAT, format!("malformed XML: {e}"))
}

fn attribute(e: &quick_xml::events::BytesStart, name: &str) -> Option<String> {
    e.attributes()
        .flatten()
        .find(|a| a.key.local_name().as_ref() == name)
        .and_then(|a| {
            a.normalized_value(quick_xml::XmlVersion::Implicit1_0)
                .ok()
                .map(|v| v.into_owned())
        })
}

/// The package document's path in the container.
fn rootfile(container: &str) -> Result<String, ExtractError> {
    let mut reader = Reader::from_str(container);
    loop {
        match reader.read_event().map_err(xml_error)? {
            Event::Start(e) | Event::Empty(e) if e.local_name().as_ref() == "rootfile" => {
                if let Some(path) = attribute(&e, "full-path") {
                    return Ok(path);
                }
            }
            Event::Eof => {
                return Err(ExtractError::unreadable(
                    FORMAT,
                    "META-INF/container.xml names no rootfile",
                ))
            }
            _ => {}
        }
    }
}

/// What Capstan reads of a package document.
struct Package {
    title: Option<String>,
    /// The spine's content documents, as hrefs relative to the package.
    spine: Vec<String>,
}

impl Package {
    fn parse(opf: &str) -> Result<Self, ExtractError> {
        let mut reader = Reader::from_str(opf);
        let mut items: HashMap<String, (String, String)> = HashMap::new();
        let mut order = Vec::new();
        let mut title = String::new();
        let mut in_title = false;
        let mut titled = false;
        loop {
            match reader.read_event().map_err(xml_error)? {
                Event::Start(e) | Event::Empty(e) => match e.local_name().as_ref() {
                    "item" => {
                        if let (Some(id), Some(href)) = (attribute(&e, "id"), attribute(&e, "href"))
                        {
                            let media = attribute(&e, "media-type").unwrap_or_default();
                            items.insert(id, (href, media));
                        }
                    }
                    "itemref" => order.extend(attribute(&e, "idref")),
                    "title" if !titled => in_title = true,
                    _ => {}
                },
                Event::Text(t) if in_title => title.push_str(&t),
                Event::GeneralRef(r) if in_title => title.push_str(&xml_reference_text(&r)),
                Event::End(e) if in_title && e.local_name().as_ref() == "title" => {
                    in_title = false;
                    titled = true;
                }
                Event::Eof => break,
                _ => {}
            }
        }
        let spine: Vec<String> = order
            .iter()
            .filter_map(|id| items.get(id))
            .filter(|(_, media)| media.contains("html") || media.is_empty())
            .map(|(href, _)| href.clone())
            .collect();
        if spine.is_empty() {
            return Err(ExtractError::unreadable(
                FORMAT,
                "the package's spine lists no content document",
            ));
        }
        Ok(Self {
            title: Some(title).filter(|t| !t.trim().is_empty()),
            spine,
        })
    }
}

/// `href` (percent-encoded, relative, without its fragment) resolved
/// against the folder `base` of the container.
fn join(base: &str, href: &str) -> String {
    let href = href.split('#').next().unwrap_or_default();
    let mut parts: Vec<String> = base
        .split('/')
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect();
    for part in href.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(percent_decode(p)),
        }
    }
    parts.join("/")
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The XHTML without the internal subset of its document type declaration
/// (`<!DOCTYPE html [ <!ENTITY …> ]>`): an HTML tokenizer ends the declaration at its first
/// `>` and would read the rest of the subset ("]>", entity texts) as content. What follows the
/// declaration is returned; without a subset, the whole text.
fn without_internal_subset(content: &str) -> &str {
    let head = &content[..content.len().min(4096)];
    let Some(start) = head.find("<!DOCTYPE").or_else(|| head.find("<!doctype")) else {
        return content;
    };
    let rest = &content[start..];
    let (Some(open), Some(first_close)) = (rest.find('['), rest.find('>')) else {
        return content;
    };
    if open > first_close {
        return content;
    }
    // The subset ends at the first "]" followed (after blanks) by ">".
    let mut at = open;
    while let Some(close) = rest[at..].find(']').map(|i| at + i) {
        let after = rest[close + 1..].trim_start();
        if let Some(body) = after.strip_prefix('>') {
            return body;
        }
        at = close + 1;
    }
    content
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_internal_subset_is_not_read_as_content() {
        let bomb = "<?xml version=\"1.0\"?>\n<!DOCTYPE html [\n <!ENTITY lol \"lol\">\n <!ENTITY lol9 \"&lol;&lol;\">\n]>\n<html><body><p>Real text.</p></body></html>";
        let mut out = TextBuilder::default();
        append_html(without_internal_subset(bomb), &mut out);
        let text = out.finish(None).text;
        assert_eq!(text.trim(), "Real text.");
        // Without a subset, nothing is cut.
        let plain = "<!DOCTYPE html><html><body><p>x</p></body></html>";
        assert_eq!(without_internal_subset(plain), plain);
    }

    #[test]
    fn hrefs_resolve_against_the_package_folder() {
        assert_eq!(
            join("OEBPS/", "text/ch%201.xhtml#x"),
            "OEBPS/text/ch 1.xhtml"
        );
        assert_eq!(
            join("OEBPS/text/", "../images/a.xhtml"),
            "OEBPS/images/a.xhtml"
        );
        assert_eq!(join("", "./c.html"), "c.html");
        assert_eq!(percent_decode("100%"), "100%");
    }
}
