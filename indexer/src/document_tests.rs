//! Tests of `document.rs`: documents read into passages.

use super::*;

fn write(dir: &Path, name: &str, content: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, content).unwrap();
    path
}

#[test]
fn reads_beir_and_plain_lines() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "c.jsonl",
        b"{\"_id\":\"a\",\"title\":\"A\",\"text\":\"alpha\",\"metadata\":{\"lang\":\"en\"}}\n\n{\"id\":7,\"text\":\"seven\",\"metadata\":{}}\n",
    );
    let corpus = read_corpus(&path, false).unwrap();
    assert_eq!(corpus.documents.len(), 2);
    assert_eq!(corpus.documents[1].id, "7");
    assert_eq!(corpus.documents[1].title, "");
    let meta = corpus.documents[0].metadata.as_ref().unwrap();
    assert_eq!(meta["lang"], "en");
    assert_eq!(corpus.documents[1].metadata, None);
}

#[test]
fn bad_lines_name_file_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let cases: &[(&[u8], &str)] = &[
        (
            b"{\"_id\":\"a\",\"text\":\"x\"}\n{not json\n",
            ":2: malformed JSON",
        ),
        (b"{\"_id\":\"a\"}\n", ":1: missing field `text`"),
        (b"{\"text\":\"x\"}\n", ":1: missing field `_id`"),
        (
            b"{\"_id\":\"a\",\"text\":3}\n",
            ":1: field `text` must be a string",
        ),
        (
            b"{\"_id\":\"a\",\"text\":\"x\",\"metadata\":[1]}\n",
            ":1: field `metadata` must be a JSON object",
        ),
        (
            b"{\"_id\":\"a\",\"text\":\"  \"}\n",
            ":1: document `a` is empty",
        ),
        (b"{\"_id\":\"a\",\"text\":\"\xff\"}\n", ":1: invalid UTF-8"),
        (
            b"{\"_id\":\"a\",\"text\":\"x\"}\n{\"_id\":\"a\",\"text\":\"y\"}\n",
            ":2: duplicate document id `a` (first seen at",
        ),
    ];
    for (content, expected) in cases {
        let path = write(dir.path(), "bad.jsonl", content);
        let err = read_corpus(&path, false).unwrap_err().to_string();
        assert!(err.contains("bad.jsonl"), "{err}");
        assert!(err.contains(expected), "{err} should contain {expected}");
    }
}

#[test]
fn skip_bad_lists_skipped_lines() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "c.jsonl",
        b"{\"_id\":\"a\",\"text\":\"x\"}\n{oops\n{\"_id\":\"b\",\"text\":\"y\"}\n",
    );
    let corpus = read_corpus(&path, true).unwrap();
    assert_eq!(corpus.documents.len(), 2);
    assert_eq!(corpus.skipped.len(), 1);
    assert!(corpus.skipped[0].to_string().contains("c.jsonl:2"));
}

#[test]
fn folder_of_files_uses_headings_as_titles() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "notes.txt", b"plain words");
    write(dir.path(), "guide.md", b"intro\n# Guide Title\nbody");
    write(
        dir.path(),
        "page.html",
        b"<html><head><title>T</title><script>var x=1;</script></head><body><h1>Heading</h1><p>Para <b>bold</b></p></body></html>",
    );
    write(dir.path(), "ignored.bin", b"\x00\x01");
    let corpus = read_corpus(dir.path(), false).unwrap();
    let by_id: HashMap<_, _> = corpus
        .documents
        .iter()
        .map(|d| (d.id.as_str(), d))
        .collect();
    assert_eq!(by_id.len(), 3);
    assert_eq!(by_id["notes.txt"].title, "notes");
    assert_eq!(by_id["guide.md"].title, "Guide Title");
    assert_eq!(by_id["page.html"].title, "Heading");
    assert_eq!(by_id["page.html"].text, "Heading\n\nPara bold");
    let sections = &by_id["page.html"].layout.sections;
    assert_eq!(sections.len(), 1);
    assert_eq!(sections[0].heading, "Heading");
}

#[test]
fn deeply_nested_html_is_read_in_linear_time() {
    // Text at each of 100,000 levels, hidden text inside a script at the bottom: the
    // tree builder took 41 s here (and an ancestor walk per text node never finished).
    let depth = 100_000;
    let started = std::time::Instant::now();
    let mut html = String::from("<html><body>");
    for i in 0..depth {
        html.push_str(&format!("<div>w{i} "));
    }
    html.push_str("<script>hidden()</script>");
    html.push_str(&"</div>".repeat(depth));
    html.push_str("<p>after</p></body></html>");
    let text = crate::extract::html::page(&html).text;
    assert!(text.starts_with("w0\n\nw1\n\nw2"), "{}", &text[..40]);
    assert!(
        text.ends_with("w99999\n\nafter"),
        "{}",
        &text[text.len() - 40..]
    );
    assert!(!text.contains("hidden"));
    // A bound, not a benchmark: linear work here is well under a second.
    assert!(started.elapsed().as_secs() < 20, "{:?}", started.elapsed());
}

#[test]
fn an_html_page_prefers_main_decodes_entities_and_hides_scripts() {
    let page = crate::extract::html::page(
        "<!doctype html><html><head><title>Page &amp; more</title><style>p{}</style></head>\
         <body><nav>Menu</nav><main><p>Fish &amp; chips</p><script>if (a<b) x()</script>\
         <textarea><b>kept</b></textarea></main><footer>Foot</footer></body></html>",
    );
    assert_eq!(page.title.as_deref(), Some("Page & more"));
    assert_eq!(page.text, "Fish & chips\n\n<b>kept</b>");
    let page = crate::extract::html::page("<p>No <i>main</i> here</p><noscript>x</noscript>");
    assert_eq!(page.title, None);
    assert_eq!(page.text, "No main here");
}

/// Inline elements join the text they hold to what is beside them, as a browser shows it
/// ("OS X™", not "OS X ™"); blocks and headings keep their breaks, and a heading starts a
/// section passages are cited by.
#[test]
fn an_html_page_keeps_inline_text_together_and_its_headings_as_sections() {
    let page = crate::extract::html::page(
        "<html><head><title>2.2. Master Plan</title></head><body>\
         <div class=\"navheader\">Prev <a href=\"x\">Next</a></div>\
         <h2 class=\"title\">2.2.&nbsp;Master Plan</h2>\
         <p>It runs on <span class=\"trademark\">OS&nbsp;X</span>&trade;. The <em>lab</em>s \
         agree.</p><h4>NOTE</h4><p>Fictional.</p></body></html>",
    );
    assert_eq!(page.title.as_deref(), Some("2.2. Master Plan"));
    assert_eq!(
        page.text, "2.2. Master Plan\n\nIt runs on OS X™. The labs agree.\n\nNOTE\n\nFictional.",
        "the navigation header is passed over"
    );
    let headings: Vec<_> = page
        .layout
        .sections
        .iter()
        .map(|s| s.heading.as_str())
        .collect();
    assert_eq!(headings, ["2.2. Master Plan", "NOTE"]);
    // The title is the first <h1>-<h3>; an <h4> alone leaves the <title>.
    let page = crate::extract::html::page("<title>T</title><h4>Aside</h4><p>x</p>");
    assert_eq!(page.title.as_deref(), Some("T"));
}

#[test]
fn a_document_over_the_size_limit_is_named_or_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let big = format!(r#"{{"id":"big","text":"{}"}}"#, "word ".repeat(400));
    let path = write(
        dir.path(),
        "c.jsonl",
        format!("{{\"id\":\"a\",\"text\":\"small\"}}\n{big}\n").as_bytes(),
    );
    let options = ReadOptions {
        skip_bad: false,
        max_document_bytes: 1000,
        ..ReadOptions::default()
    };
    let err = read_corpus_with(&path, options.clone())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("c.jsonl:2") && err.contains("limit of 1000"),
        "{err}"
    );
    let corpus = read_corpus_with(
        &path,
        ReadOptions {
            skip_bad: true,
            ..options
        },
    )
    .unwrap();
    assert_eq!(corpus.documents.len(), 1);
    assert_eq!(corpus.skipped.len(), 1);
}

#[test]
fn one_document_file_is_a_corpus() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "guide.md", b"# Guide\nbody");
    let corpus = read_corpus(&path, false).unwrap();
    assert_eq!(corpus.documents.len(), 1);
    assert_eq!(corpus.documents[0].id, "guide.md");
    assert_eq!(corpus.documents[0].title, "Guide");
    let other = write(dir.path(), "data.bin", b"\x00\x01");
    assert!(matches!(
        read_corpus(&other, false),
        Err(Error::NotACorpus(_))
    ));
}

#[test]
fn empty_corpus_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "c.jsonl", b"\n\n");
    assert!(matches!(
        read_corpus(&path, false),
        Err(Error::EmptyCorpus(_))
    ));
}
