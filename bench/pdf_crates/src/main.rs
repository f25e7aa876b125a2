//! pdfcmp: compare per-page text extraction of lopdf 0.47, pdf-extract 0.12, pdf_oxide 0.3.
//!
//! Usage:
//!   pdfcmp extract <engine> <file.pdf> <out.json>   -- in-process, one file (child mode)
//!   pdfcmp run <engine> <outdir> <timeout_s> <files...>   -- spawns one child per file
//! Engines: lopdf | lopdf_recon (LoadOptions.force_reconstruct) | pdfextract | pdfextract_pp (catch_unwind per page) | oxide | oxide_plain
//!
//! out.json = {"file", "engine", "pages": [string per page, 1-based order],
//!             "n_pages", "secs" (load+extract, no file read/JSON write),
//!             "error": null|string, "panic": null|string, "page_errors": [[page, msg]...],
//!             "encrypted": null|bool}

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Default)]
struct Res {
    pages: Vec<String>,
    error: Option<String>,
    page_errors: Vec<(u32, String)>,
    encrypted: Option<bool>,
}

// ---------------- lopdf 0.47 ----------------
fn run_lopdf(bytes: &[u8], recon: bool) -> Res {
    let mut r = Res::default();
    let loaded = if recon {
        let opts = lopdf::LoadOptions { force_reconstruct: true, ..Default::default() };
        lopdf::Document::load_mem_with_options(bytes, opts)
    } else {
        lopdf::Document::load_mem(bytes)
    };
    let doc = match loaded {
        Ok(d) => d,
        Err(e) => {
            r.error = Some(format!("load: {e} [{e:?}]"));
            return r;
        }
    };
    // is_encrypted(): /Encrypt still in trailer (i.e. NOT decrypted);
    // was_encrypted(): file was encrypted when loaded (maybe auto-decrypted with "").
    r.encrypted = Some(doc.is_encrypted() || doc.was_encrypted());
    if doc.is_encrypted() {
        r.error = Some("still encrypted after load (is_encrypted()==true)".into());
        if !naive() {
            return r;
        }
    }
    for (&n, _) in doc.get_pages().iter() {
        match doc.extract_text(&[n]) {
            Ok(t) => r.pages.push(t),
            Err(e) => {
                r.page_errors.push((n, format!("{e}")));
                r.pages.push(String::new());
            }
        }
    }
    r
}

// ---------------- pdf-extract 0.12 (lopdf 0.42 underneath) ----------------
fn run_pdfextract(bytes: &[u8], per_page_catch: bool) -> Res {
    use pdf_extract::{output_doc_page, Document, PlainTextOutput};
    let mut r = Res::default();
    let mut doc = match Document::load_mem(bytes) {
        Ok(d) => d,
        Err(e) => {
            r.error = Some(format!("load: {e} [{e:?}]"));
            return r;
        }
    };
    r.encrypted = Some(doc.is_encrypted());
    if doc.is_encrypted() && !naive() {
        // same as pdf_extract's private maybe_decrypt(): try the empty user password
        if let Err(e) = doc.decrypt("") {
            r.error = Some(format!("decrypt(\"\"): {e} [{e:?}]"));
            return r;
        }
    }
    // Own loop instead of extract_text_from_mem_by_pages(): that one stops silently
    // at the first page that errors (`while let Ok(..)`), truncating the document.
    let page_nums: Vec<u32> = doc.get_pages().keys().copied().collect();
    for n in page_nums {
        let mut s = String::new();
        let call = |s: &mut String| {
            let mut out = PlainTextOutput::new(s);
            output_doc_page(&doc, &mut out, n)
        };
        let res = if per_page_catch {
            match catch_unwind(AssertUnwindSafe(|| call(&mut s))) {
                Ok(x) => x.map_err(|e| format!("{e}")),
                Err(p) => Err(format!("PANIC {}", panic_msg(&p))),
            }
        } else {
            call(&mut s).map_err(|e| format!("{e}"))
        };
        if let Err(e) = res {
            r.page_errors.push((n, e));
            s.clear();
        }
        r.pages.push(s);
    }
    r
}

// ---------------- pdf_oxide 0.3 ----------------
fn run_oxide(bytes: &[u8], plain: bool) -> Res {
    let mut r = Res::default();
    let doc = match pdf_oxide::PdfDocument::from_bytes(bytes.to_vec()) {
        Ok(d) => d,
        Err(e) => {
            r.error = Some(format!("open: {e} [{e:?}]"));
            return r;
        }
    };
    let enc = doc.is_encrypted();
    r.encrypted = Some(enc);
    if enc && !naive() {
        // open() already tried ""; authenticate(b"") reports whether that worked.
        match doc.authenticate(b"") {
            Ok(true) => {}
            Ok(false) => {
                r.error = Some("encrypted: authenticate(b\"\") == false (needs password)".into());
                return r;
            }
            Err(e) => {
                r.error = Some(format!("authenticate: {e} [{e:?}]"));
                return r;
            }
        }
    }
    let n = match doc.page_count() {
        Ok(n) => n,
        Err(e) => {
            r.error = Some(format!("page_count: {e} [{e:?}]"));
            return r;
        }
    };
    let opts = pdf_oxide::converters::ConversionOptions::default();
    for i in 0..n {
        let res = if plain { doc.to_plain_text(i, &opts) } else { doc.extract_text(i) };
        match res {
            Ok(t) => r.pages.push(t),
            Err(e) => {
                r.page_errors.push((i as u32 + 1, format!("{e}")));
                r.pages.push(String::new());
            }
        }
    }
    r
}

/// PDFCMP_NAIVE=1: skip our encryption checks, to see what the extraction calls do by themselves.
fn naive() -> bool {
    std::env::var_os("PDFCMP_NAIVE").is_some()
}

fn panic_msg(p: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "<non-string panic payload>".into()
    }
}

fn extract_one(engine: &str, file: &str, out: &str) {
    let bytes = std::fs::read(file).expect("read input");
    // quiet default hook; we record the message ourselves
    std::panic::set_hook(Box::new(|_| {}));
    let t0 = Instant::now();
    let res = catch_unwind(AssertUnwindSafe(|| match engine {
        "lopdf" => run_lopdf(&bytes, false),
        "lopdf_recon" => run_lopdf(&bytes, true),
        "pdfextract" => run_pdfextract(&bytes, false),
        "pdfextract_pp" => run_pdfextract(&bytes, true),
        "oxide" => run_oxide(&bytes, false),
        "oxide_plain" => run_oxide(&bytes, true),
        _ => panic!("unknown engine {engine}"),
    }));
    let secs = t0.elapsed().as_secs_f64();
    let (r, panic) = match res {
        Ok(r) => (r, None),
        Err(p) => (Res::default(), Some(panic_msg(&p))),
    };
    let j = serde_json::json!({
        "file": file, "engine": engine, "n_pages": r.pages.len(), "secs": secs,
        "error": r.error, "panic": panic, "page_errors": r.page_errors,
        "encrypted": r.encrypted, "pages": r.pages,
    });
    std::fs::write(out, serde_json::to_string(&j).unwrap()).expect("write json");
}

fn run_many(engine: &str, outdir: &str, timeout: u64, files: &[String]) {
    let me = std::env::current_exe().unwrap();
    let dir = format!("{outdir}/{engine}");
    std::fs::create_dir_all(&dir).unwrap();
    for f in files {
        let stem = std::path::Path::new(f).file_stem().unwrap().to_string_lossy().to_string();
        let out = format!("{dir}/{stem}.json");
        let _ = std::fs::remove_file(&out);
        let t0 = Instant::now();
        let mut child = Command::new(&me)
            .args(["extract", engine, f, &out])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let status = loop {
            if let Some(st) = child.try_wait().unwrap() {
                break Some(st);
            }
            if t0.elapsed() > Duration::from_secs(timeout) {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let wall = t0.elapsed().as_secs_f64();
        let mut stderr = String::new();
        if let Some(mut e) = child.stderr.take() {
            use std::io::Read;
            let _ = e.read_to_string(&mut stderr);
        }
        let stderr: String = stderr.chars().take(400).collect();
        let summary = match status {
            None => {
                let j = serde_json::json!({"file": f, "engine": engine, "hang": true,
                    "timeout_s": timeout, "pages": [], "n_pages": 0});
                std::fs::write(&out, j.to_string()).unwrap();
                format!("HANG (> {timeout}s, killed)")
            }
            Some(st) if !st.success() || !std::path::Path::new(&out).exists() => {
                let j = serde_json::json!({"file": f, "engine": engine, "crash": format!("{st}"),
                    "stderr": stderr, "pages": [], "n_pages": 0});
                std::fs::write(&out, j.to_string()).unwrap();
                format!("CRASH ({st}) {stderr}")
            }
            Some(_) => {
                let v: serde_json::Value =
                    serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
                format!(
                    "pages={} secs={:.3} err={} panic={} page_errs={} enc={}",
                    v["n_pages"], v["secs"].as_f64().unwrap_or(0.0), v["error"], v["panic"],
                    v["page_errors"].as_array().map(|a| a.len()).unwrap_or(0), v["encrypted"]
                )
            }
        };
        println!("{engine}\t{stem}\twall={wall:.2}s\t{summary}");
    }
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    match a.get(1).map(|s| s.as_str()) {
        Some("extract") => extract_one(&a[2], &a[3], &a[4]),
        Some("run") => run_many(&a[2], &a[3], a[4].parse().unwrap(), &a[5..]),
        _ => {
            eprintln!("usage: pdfcmp extract ENGINE FILE OUT.json | pdfcmp run ENGINE OUTDIR TIMEOUT FILES...");
            std::process::exit(2);
        }
    }
}
