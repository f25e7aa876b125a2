//! End-to-end: `capstan index FOLDER` on real PDF, DOCX and EPUB files
//! (scripts/fetch-documents.sh): bad files fail the run with their name and
//! publish nothing, or are skipped; searches cite file and page; `--append`
//! re-reads only changed files; `index delete` by file; the parser runs in a
//! bounded child process.

mod common;

use std::path::Path;
use std::process::Command;

use common::{documents, encoder_dir, fails, ok, run, s};

fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// Sentences (12 words from the middle) of pages of `file`, by pdftotext,
/// with their 1-based page.
fn sentences(file: &Path, pages: &[usize]) -> Vec<(usize, String)> {
    pages
        .iter()
        .filter_map(|&page| {
            let out = Command::new("pdftotext")
                .args(["-f", &page.to_string(), "-l", &page.to_string()])
                .arg(file)
                .arg("-")
                .output()
                .expect("pdftotext runs");
            let w = words(&String::from_utf8_lossy(&out.stdout));
            (w.len() >= 60).then(|| (page, w[w.len() / 2..][..12].join(" ")))
        })
        .collect()
}

fn index_args<'a>(folder: &'a Path, index: &'a Path, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "index",
        s(folder),
        "--out",
        s(index),
        "--encoder",
        s(Box::leak(Box::new(encoder_dir()))),
        "--no-sentence-vectors",
        "-q",
    ];
    args.extend_from_slice(extra);
    args
}

#[test]
fn a_folder_of_documents_is_indexed_and_cited_by_page() {
    let docs = documents();
    let tmp = tempfile::tempdir().unwrap();
    let folder = tmp.path().join("manuals");
    let index = tmp.path().join("index");
    std::fs::create_dir(&folder).unwrap();
    std::fs::copy(docs.join("pdf/R-data.pdf"), folder.join("R-data.pdf")).unwrap();
    std::fs::copy(
        docs.join("pdf/neatoguide.pdf"),
        folder.join("neatoguide.pdf"),
    )
    .unwrap();
    std::fs::copy(
        docs.join("books/live-manual.docx"),
        folder.join("live.docx"),
    )
    .unwrap();
    std::fs::copy(docs.join("damaged/random.pdf"), folder.join("broken.pdf")).unwrap();

    // A bad file fails the run, named, and nothing is published.
    let err = fails(&index_args(&folder, &index, &[]));
    assert!(
        err.contains("broken.pdf") && err.contains("not a readable PDF"),
        "{err}"
    );
    assert!(!index.join("CURRENT").exists());

    let out = run(&index_args(&folder, &index, &["--skip-bad"]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("skipped") && stderr.contains("broken.pdf"),
        "{stderr}"
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("3 documents"));

    // Sentences of known pages come back on their file and page.
    let pdf = folder.join("R-data.pdf");
    let samples = sentences(&pdf, &[5, 9, 14, 20, 27, 33]);
    assert!(samples.len() >= 5);
    let mut right = 0;
    for (page, sentence) in &samples {
        let hits: Vec<serde_json::Value> =
            serde_json::from_str(&ok(&["search", s(&index), sentence, "-k", "5", "--json"]))
                .unwrap();
        if hits.iter().any(|h| {
            h["doc_id"] == "R-data.pdf"
                && h["page_start"].as_u64().unwrap() as usize <= *page
                && *page <= h["page_end"].as_u64().unwrap() as usize
        }) {
            right += 1;
        }
    }
    assert!(
        right * 10 >= samples.len() * 9,
        "{right} of {}",
        samples.len()
    );
    // People see the page; the DOCX (no pages) its section.
    let shown = ok(&["search", s(&index), &samples[0].1, "-k", "1"]);
    assert!(
        shown.contains("R-data.pdf#") && shown.contains(" p. "),
        "{shown}"
    );
    let hits: Vec<serde_json::Value> = serde_json::from_str(&ok(&[
        "search",
        s(&index),
        "lb config bootstrap",
        "-k",
        "3",
        "--json",
        "--mode",
        "bm25",
    ]))
    .unwrap();
    assert_eq!(hits[0]["doc_id"], "live.docx");
    assert!(
        hits[0].get("page_start").is_none() && hits[0]["section"].is_string(),
        "{}",
        hits[0]
    );

    // --append reads changed files only.
    let again = ok(&index_args(&folder, &index, &["--skip-bad", "--append"]));
    assert!(
        again.contains("up to date") || again.contains("nothing to do"),
        "{again}"
    );
    std::fs::copy(docs.join("pdf/dot.1.pdf"), folder.join("neatoguide.pdf")).unwrap();
    let changed = ok(&index_args(&folder, &index, &["--skip-bad", "--append"]));
    assert!(
        changed.contains("1 document(s) (1 replaced, 2 unchanged)"),
        "{changed}"
    );

    // Deleting a file's document by its path.
    ok(&["index", "delete", s(&index), "--ids", "R-data.pdf"]);
    let hits: Vec<serde_json::Value> = serde_json::from_str(&ok(&[
        "search",
        s(&index),
        &samples[0].1,
        "-k",
        "5",
        "--json",
    ]))
    .unwrap();
    assert!(hits.iter().all(|h| h["doc_id"] != "R-data.pdf"));
}

#[test]
fn the_parser_runs_in_a_bounded_child_process() {
    let docs = documents();
    let tmp = tempfile::tempdir().unwrap();
    let folder = tmp.path().join("docs");
    let index = tmp.path().join("index");
    std::fs::create_dir(&folder).unwrap();
    std::fs::copy(docs.join("pdf/neatoguide.pdf"), folder.join("guide.pdf")).unwrap();
    std::fs::write(folder.join("notes.txt"), "Plain notes about graph layout.").unwrap();
    // 16 MiB of address space cannot hold the parser process: the file is
    // named with what happened, and the run goes on without it.
    let out = run(&index_args(
        &folder,
        &index,
        &["--skip-bad", "--parse-memory-mb", "16"],
    ));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("guide.pdf") && stderr.contains("parser"),
        "{stderr}"
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("1 documents"));
    // The run's memory bound holds its parsers, or the run does not start.
    let out = run(&index_args(&folder, &index, &["--memory-mb", "1000"]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("--memory-mb 1000 cannot hold the parse of one file: 4193 MiB"),
        "{stderr}"
    );
    let out = run(&index_args(
        &folder,
        &index,
        &["--memory-mb", "200", "--parse-memory-mb", "64"],
    ));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // `capstan corpus extract` shows what is indexed, page by page.
    let pages = ok(&["corpus", "extract", s(&folder.join("guide.pdf"))]);
    assert!(
        pages.contains("--- page 11 ---") && !pages.contains("--- page 12 ---"),
        "{pages}"
    );
}

/// Damage is named, never read silently: a PDF cut short is indexed with a warning naming
/// it; one nested past any real file's depth is refused with why, by `index` and by `corpus
/// extract` alone (whose parse also runs in a bounded child: the process that asked lives).
#[test]
fn damaged_and_hostile_pdfs_are_named_with_what_is_wrong() {
    let docs = documents();
    let tmp = tempfile::tempdir().unwrap();
    let folder = tmp.path().join("docs");
    let index = tmp.path().join("index");
    std::fs::create_dir(&folder).unwrap();
    let whole = std::fs::read(docs.join("pdf/neatoguide.pdf")).unwrap();
    std::fs::write(folder.join("cut.pdf"), &whole[..whole.len() * 2 / 3]).unwrap();
    let mut nested = b"%PDF-1.4\n1 0 obj\n<< /Type /Catalog /Junk ".to_vec();
    nested.extend(std::iter::repeat_n(b'[', 20_000));
    nested.extend(std::iter::repeat_n(b']', 20_000));
    nested.extend_from_slice(b" >>\nendobj\ntrailer << /Root 1 0 R >>\n%%EOF\n");
    std::fs::write(folder.join("nested.pdf"), &nested).unwrap();

    let out = run(&index_args(&folder, &index, &["--skip-bad"]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("warning: ")
            && stderr.contains("cut.pdf: the file does not end with %%EOF"),
        "{stderr}"
    );
    assert!(
        stderr.contains("nested.pdf") && stderr.contains("nest deeper than 512"),
        "{stderr}"
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("1 documents"));
    // --strict fails on damage read past, and publishes nothing.
    let strict_index = tmp.path().join("strict");
    let out = run(&index_args(
        &folder,
        &strict_index,
        &["--skip-bad", "--strict"],
    ));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("cut.pdf") && stderr.contains("damaged (--strict)"),
        "{stderr}"
    );
    assert!(!strict_index.join("CURRENT").exists());

    let err = fails(&["corpus", "extract", s(&folder.join("nested.pdf"))]);
    assert!(
        err.contains("nested.pdf") && err.contains("nest deeper"),
        "{err}"
    );
    let cut = run(&["corpus", "extract", s(&folder.join("cut.pdf"))]);
    assert!(cut.status.success());
    assert!(
        String::from_utf8_lossy(&cut.stderr).contains("may be cut short"),
        "{}",
        String::from_utf8_lossy(&cut.stderr)
    );
    // A bound on the text is a bound on what this process reads of the child.
    let err = fails(&[
        "corpus",
        "extract",
        "--max-document-bytes",
        "1000",
        s(&docs.join("pdf/neatoguide.pdf")),
    ]);
    assert!(err.contains("too large") && err.contains("1000"), "{err}");
}

/// A bounded fuzz run in CI: real PDF, DOCX and EPUB files cut short, with bytes flipped, or
/// nested deep, each read by `capstan corpus extract --json`. Whatever the parser meets, the
/// process that asked answers (`{"Ok": …}` or a named `{"Err": …}`) and exits 0: no panic,
/// no abort, no hang past the bound.
#[test]
fn mutated_documents_never_take_down_the_process_that_reads_them() {
    let docs = documents();
    let tmp = tempfile::tempdir().unwrap();
    // xorshift64: the same mutations on every run.
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut cases = Vec::new();
    for source in [
        "pdf/neatoguide.pdf",
        "books/live-manual.docx",
        "books/live-manual.epub",
    ] {
        let whole = std::fs::read(docs.join(source)).unwrap();
        let ext = source.rsplit('.').next().unwrap();
        let mut variants: Vec<Vec<u8>> = [1, 5, 9]
            .iter()
            .map(|tenths| whole[..whole.len() * tenths / 10].to_vec())
            .collect();
        for _ in 0..6 {
            let mut flipped = whole.clone();
            for _ in 0..32 {
                let at = (next() % flipped.len() as u64) as usize;
                flipped[at] ^= (next() % 255 + 1) as u8;
            }
            variants.push(flipped);
        }
        let mut nested = whole[..whole.len() / 2].to_vec();
        nested.extend(std::iter::repeat_n(b'[', 50_000));
        nested.extend_from_slice(&whole[whole.len() / 2..]);
        variants.push(nested);
        for (i, bytes) in variants.into_iter().enumerate() {
            let path = tmp.path().join(format!("{}-{i}.{ext}", ext));
            std::fs::write(&path, bytes).unwrap();
            cases.push(path);
        }
    }
    let (mut ok, mut refused) = (0, 0);
    for path in &cases {
        let out = run(&[
            "corpus",
            "extract",
            "--json",
            "--parse-timeout",
            "30",
            "--parse-memory-mb",
            "1024",
            s(path),
        ]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "{}: {:?}\n{stderr}",
            path.display(),
            out.status
        );
        let answer: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{}: not JSON ({e}): {stderr}", path.display()));
        match (answer.get("Ok"), answer.get("Err")) {
            (Some(_), None) => ok += 1,
            (None, Some(err)) => {
                assert!(err.is_object(), "{}: {answer}", path.display());
                refused += 1;
            }
            _ => panic!("{}: {answer}", path.display()),
        }
    }
    eprintln!(
        "{} mutated files: {ok} read, {refused} refused with a named error",
        cases.len()
    );
    assert_eq!(ok + refused, cases.len());
}
