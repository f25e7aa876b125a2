//! Reading a corpus: BEIR `corpus.jsonl`, plain JSONL, or a folder of
//! `.txt` / `.md` / `.html` files and PDF, DOCX and EPUB documents (told
//! by extension or by their first bytes), read in parallel.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use rayon::prelude::*;
use sha2::{Digest, Sha256};

use crate::error::{Error, LineProblem, Result};
use crate::extract::{ChildExtractor, ExtractError, Format, Layout};
use crate::progress::{NoProgress, Progress};

/// One document of a corpus, before chunking.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Document {
    /// The document id (`_id` or `id` of a JSONL line; the relative path of a file).
    pub id: String,
    /// The title (may be empty).
    pub title: String,
    /// The body text.
    pub text: String,
    /// The `metadata` object of a JSONL line (searches can filter on its
    /// fields); `None` for files and lines without one.
    pub metadata: Option<serde_json::Map<String, serde_json::Value>>,
    /// Where its pages and sections begin (empty for plain text).
    pub layout: Layout,
    /// SHA-256 of its source (the file, or the JSONL line): `--append`
    /// skips a document indexed from the same bytes.
    pub source_sha256: Option<String>,
}

/// A corpus read from disk.
#[derive(Debug, Default)]
pub struct Corpus {
    /// The documents, in file order.
    pub documents: Vec<Document>,
    /// Lines or files that were skipped (only with `skip_bad`).
    pub skipped: Vec<Error>,
    /// Damage read past in files that were indexed (a page that could not be read, a file
    /// that ends early), each naming its file: what was indexed is what could be read.
    pub warnings: Vec<String>,
    /// SHA-256 over every source file, to tell whether an index is up to date.
    pub sha256: String,
}

/// How a corpus is read.
#[derive(Debug, Clone)]
pub struct ReadOptions {
    /// Record malformed lines or documents in [`Corpus::skipped`] and go on,
    /// instead of failing on the first.
    pub skip_bad: bool,
    /// Largest document, in bytes of its line or text file, or of the text
    /// taken from a PDF, DOCX or EPUB: a larger one is malformed input
    /// (memory and time grow with it).
    pub max_document_bytes: usize,
    /// Where PDF, DOCX and EPUB files are parsed: in a child process under
    /// a time and memory bound (what the CLI does), or, when `None`, in
    /// this process with panics caught but no bound.
    pub extractor: Option<ChildExtractor>,
    /// The most files of a folder read at once (their parser processes together within the
    /// run's memory bound); 0: one per core.
    pub parallel_files: usize,
}

impl Default for ReadOptions {
    fn default() -> Self {
        Self {
            skip_bad: false,
            max_document_bytes: Self::MAX_DOCUMENT_BYTES,
            extractor: None,
            parallel_files: 0,
        }
    }
}

impl ReadOptions {
    /// The default largest document: 16 MiB, some 30 times a long novel.
    pub const MAX_DOCUMENT_BYTES: usize = 16 << 20;
}

/// Reads the corpus at `path` with the default size limit. A malformed line
/// or document is an error naming its file and line, unless `skip_bad` is
/// set, in which case it is recorded in [`Corpus::skipped`] and reading goes on.
pub fn read_corpus(path: &Path, skip_bad: bool) -> Result<Corpus> {
    read_corpus_with(
        path,
        ReadOptions {
            skip_bad,
            ..ReadOptions::default()
        },
    )
}

/// Reads the corpus at `path` as `options` say.
pub fn read_corpus_with(path: &Path, options: ReadOptions) -> Result<Corpus> {
    read_corpus_reporting(path, options, &NoProgress)
}

/// Reads the corpus at `path` as `options` say, reporting each file of a
/// folder read to `progress`.
pub fn read_corpus_reporting(
    path: &Path,
    options: ReadOptions,
    progress: &dyn Progress,
) -> Result<Corpus> {
    let mut reader = CorpusReader {
        skip_bad: options.skip_bad,
        max_document_bytes: options.max_document_bytes,
        corpus: Corpus::default(),
        seen: HashMap::new(),
        hasher: Sha256::new(),
    };
    let meta = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
    if meta.is_dir() {
        let mut files = Vec::new();
        collect_files(path, &mut files)?;
        files.sort_by(|a, b| a.0.cmp(&b.0));
        progress.stage("read", files.len() as u64);
        // Parsed in parallel (PDFs take a while), accepted in file order.
        let load_all = || {
            files
                .par_iter()
                .map(|(file, kind)| {
                    let loaded = load_file(path, file, *kind, &options);
                    progress.advance(1);
                    loaded
                })
                .collect::<Vec<_>>()
        };
        let loaded = match options.parallel_files {
            0 => load_all(),
            n => rayon::ThreadPoolBuilder::new()
                .num_threads(n)
                .build()
                .map_err(|e| Error::io(path, std::io::Error::other(e)))?
                .install(load_all),
        };
        progress.finish();
        for file in loaded {
            reader.accept_file(file?)?;
        }
    } else if matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("jsonl" | "json" | "ndjson")
    ) {
        reader.read_jsonl(path)?;
    } else if let Some(kind) = DocumentKind::of(path)? {
        // One document file: its id is its name.
        let folder = path.parent().unwrap_or(Path::new(""));
        reader.accept_file(load_file(folder, path, kind, &options)?)?;
    } else {
        return Err(Error::NotACorpus(path.to_path_buf()));
    }
    let mut corpus = reader.corpus;
    if corpus.documents.is_empty() {
        return Err(Error::EmptyCorpus(path.to_path_buf()));
    }
    corpus.sha256 = format!("{:x}", reader.hasher.finalize());
    Ok(corpus)
}

struct CorpusReader {
    skip_bad: bool,
    max_document_bytes: usize,
    corpus: Corpus,
    /// Document id -> where it was first seen.
    seen: HashMap<String, String>,
    hasher: Sha256,
}

impl CorpusReader {
    fn read_jsonl(&mut self, path: &Path) -> Result<()> {
        let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
        self.hasher.update(&bytes);
        for (i, raw) in bytes.split(|&b| b == b'\n').enumerate() {
            let line = i + 1;
            let parsed = self
                .check_size(raw.len())
                .and_then(|()| std::str::from_utf8(raw).map_err(|_| LineProblem::InvalidUtf8))
                .and_then(|s| {
                    let s = s.trim();
                    if s.is_empty() {
                        Ok(None)
                    } else {
                        parse_json_document(s).map(|mut doc| {
                            doc.source_sha256 = Some(format!("{:x}", Sha256::digest(raw)));
                            Some(doc)
                        })
                    }
                });
            let location = format!("{}:{line}", path.display());
            let result = parsed.and_then(|doc| match doc {
                Some(doc) => self.check_new(doc, &location).map(Some),
                None => Ok(None),
            });
            match result {
                Ok(Some(doc)) => self.corpus.documents.push(doc),
                Ok(None) => {}
                Err(problem) => self.bad(Error::BadLine {
                    path: path.to_path_buf(),
                    line,
                    problem,
                })?,
            }
        }
        Ok(())
    }

    fn accept_file(&mut self, file: LoadedFile) -> Result<()> {
        self.hasher.update(file.path.to_string_lossy().as_bytes());
        self.hasher.update(&file.digest);
        let location = file.path.display().to_string();
        let result = file.document.and_then(|doc| self.check_new(doc, &location));
        if result.is_ok() {
            self.corpus
                .warnings
                .extend(file.warnings.iter().map(|w| format!("{location}: {w}")));
        }
        match result {
            Ok(doc) => self.corpus.documents.push(doc),
            Err(problem) => self.bad(Error::BadDocument {
                path: file.path,
                problem,
            })?,
        }
        Ok(())
    }

    fn check_size(&self, bytes: usize) -> std::result::Result<(), LineProblem> {
        check_size(bytes, self.max_document_bytes)
    }

    fn check_new(
        &mut self,
        doc: Document,
        location: &str,
    ) -> std::result::Result<Document, LineProblem> {
        if doc.text.trim().is_empty() {
            return Err(LineProblem::Empty(doc.id));
        }
        if let Some(first) = self.seen.get(&doc.id) {
            return Err(LineProblem::DuplicateId {
                id: doc.id,
                first: first.clone(),
            });
        }
        self.seen.insert(doc.id.clone(), location.to_string());
        Ok(doc)
    }

    fn bad(&mut self, err: Error) -> Result<()> {
        if self.skip_bad {
            self.corpus.skipped.push(err);
            Ok(())
        } else {
            Err(err)
        }
    }
}

/// Parses one JSONL line: BEIR (`_id`) or plain (`id`), `title` optional,
/// `text` required.
fn parse_json_document(line: &str) -> std::result::Result<Document, LineProblem> {
    let value: serde_json::Value =
        serde_json::from_str(line).map_err(|e| LineProblem::Json(e.to_string()))?;
    let obj = value
        .as_object()
        .ok_or_else(|| LineProblem::Json("a line must be a JSON object".into()))?;
    let (id_field, id_value) = match (obj.get("_id"), obj.get("id")) {
        (Some(v), _) => ("_id", v),
        (None, Some(v)) => ("id", v),
        (None, None) => return Err(LineProblem::MissingField("_id")),
    };
    let id = match id_value {
        serde_json::Value::String(s) if !s.trim().is_empty() => s.clone(),
        serde_json::Value::Number(n) => n.to_string(),
        _ => {
            return Err(LineProblem::WrongType {
                field: id_field,
                expected: "non-empty string or number",
            })
        }
    };
    let title = match obj.get("title") {
        None | Some(serde_json::Value::Null) => String::new(),
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(_) => {
            return Err(LineProblem::WrongType {
                field: "title",
                expected: "string",
            })
        }
    };
    let text = match obj.get("text") {
        None => return Err(LineProblem::MissingField("text")),
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(_) => {
            return Err(LineProblem::WrongType {
                field: "text",
                expected: "string",
            })
        }
    };
    let metadata = match obj.get("metadata") {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::Object(m)) if m.is_empty() => None,
        Some(serde_json::Value::Object(m)) => Some(m.clone()),
        Some(_) => {
            return Err(LineProblem::WrongType {
                field: "metadata",
                expected: "JSON object",
            })
        }
    };
    Ok(Document {
        id,
        title,
        layout: crate::extract::plain::sections(&text),
        text,
        metadata,
        source_sha256: None,
    })
}

fn check_size(bytes: usize, limit: usize) -> std::result::Result<(), LineProblem> {
    if bytes > limit {
        return Err(LineProblem::TooLarge { bytes, limit });
    }
    Ok(())
}

/// A file of a folder corpus, read and parsed.
struct LoadedFile {
    path: PathBuf,
    /// What the corpus digest takes of it: its bytes for text files (as
    /// before binary formats were read), its SHA-256 for the others.
    digest: Vec<u8>,
    document: std::result::Result<Document, LineProblem>,
    /// Damage the extraction read past.
    warnings: Vec<String>,
}

/// Reads and parses one file of the folder `root`. Only a file that cannot
/// be read at all is an error; a malformed one is a [`LineProblem`].
fn load_file(
    root: &Path,
    file: &Path,
    kind: DocumentKind,
    options: &ReadOptions,
) -> Result<LoadedFile> {
    if let (DocumentKind::Binary(format), Some(child)) = (kind, &options.extractor) {
        // The child reads the file; this process only hashes it, a block at a time.
        let sha = sha256_of_file(file)?;
        let extracted = child.extract(file, format);
        return Ok(binary_file(root, file, sha, extracted, options));
    }
    let bytes = std::fs::read(file).map_err(|e| Error::io(file, e))?;
    let sha = format!("{:x}", Sha256::digest(&bytes));
    if let DocumentKind::Binary(format) = kind {
        let extracted = crate::extract::extract(format, &bytes);
        return Ok(binary_file(root, file, sha, extracted, options));
    }
    let (id, stem) = file_id_and_stem(root, file);
    let document = |title: String, text: String, layout: Layout| Document {
        id: id.clone(),
        title,
        text,
        metadata: None,
        layout,
        source_sha256: Some(sha.clone()),
    };
    let document = check_size(bytes.len(), options.max_document_bytes)
        .and_then(|()| std::str::from_utf8(&bytes).map_err(|_| LineProblem::InvalidUtf8))
        .map(|content| match kind {
            DocumentKind::Html => {
                let page = crate::extract::html::page(content);
                document(page.title.unwrap_or(stem), page.text, page.layout)
            }
            _ => {
                let (title, text) = extract_file_text(kind, &stem, content);
                let layout = crate::extract::plain::sections(&text);
                document(title, text, layout)
            }
        });
    Ok(LoadedFile {
        path: file.to_path_buf(),
        digest: bytes,
        document,
        warnings: Vec::new(),
    })
}

/// The id of the file `file` of the folder `root` (its path below it) and its stem.
fn file_id_and_stem(root: &Path, file: &Path) -> (String, String) {
    let id = file
        .strip_prefix(root)
        .unwrap_or(file)
        .to_string_lossy()
        .into_owned();
    let stem = file
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    (id, stem)
}

/// A PDF, DOCX or EPUB file of `root` from its extraction.
fn binary_file(
    root: &Path,
    file: &Path,
    sha: String,
    extracted: std::result::Result<crate::extract::Extracted, ExtractError>,
    options: &ReadOptions,
) -> LoadedFile {
    let (id, stem) = file_id_and_stem(root, file);
    let mut warnings = Vec::new();
    let document = extracted.map_err(LineProblem::Extract).and_then(|e| {
        check_size(e.text.len(), options.max_document_bytes)?;
        warnings = e.warnings;
        Ok(Document {
            id,
            title: e.title.unwrap_or(stem),
            text: e.text,
            metadata: None,
            layout: e.layout,
            source_sha256: Some(sha.clone()),
        })
    });
    LoadedFile {
        path: file.to_path_buf(),
        digest: sha.into_bytes(),
        document,
        warnings,
    }
}

/// SHA-256 of a file, read a block at a time.
fn sha256_of_file(path: &Path) -> Result<String> {
    use std::io::Read as _;
    let mut f = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = f.read(&mut buf).map_err(|e| Error::io(path, e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(format!("{:x}", hasher.finalize()))
}

/// Every document file under `dir`, with its kind: text kinds by
/// extension; PDF, DOCX and EPUB by extension or, for other names, by their
/// first bytes. Hidden files and folders (`.git`) are passed over.
fn collect_files(dir: &Path, out: &mut Vec<(PathBuf, DocumentKind)>) -> Result<()> {
    let entries = std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let path = entry.path();
        if entry.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        let kind = entry.file_type().map_err(|e| Error::io(&path, e))?;
        if kind.is_dir() {
            collect_files(&path, out)?;
        } else if kind.is_file() {
            if let Some(kind) = DocumentKind::of(&path)? {
                out.push((path, kind));
            }
        }
    }
    Ok(())
}

#[derive(Debug, Clone, Copy)]
enum DocumentKind {
    Text,
    Markdown,
    Html,
    Binary(Format),
}

impl DocumentKind {
    fn of(path: &Path) -> Result<Option<Self>> {
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        Ok(match ext.as_deref() {
            Some("txt") => Some(Self::Text),
            Some("md" | "markdown") => Some(Self::Markdown),
            Some("html" | "htm" | "xhtml") => Some(Self::Html),
            _ => {
                use std::io::Read as _;
                let mut head = Vec::with_capacity(1024);
                let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
                file.take(1024)
                    .read_to_end(&mut head)
                    .map_err(|e| Error::io(path, e))?;
                Format::detect(path, &head).map(Self::Binary)
            }
        })
    }
}

/// Title and text of a plain or Markdown file: title = first heading, else
/// the file's name without extension (`stem`). (An HTML file is read by
/// [`crate::extract::html::page`].)
fn extract_file_text(kind: DocumentKind, stem: &str, content: &str) -> (String, String) {
    let stem = stem.to_string();
    match kind {
        DocumentKind::Markdown => {
            let title = content
                .lines()
                .find_map(|l| {
                    l.strip_prefix('#')
                        .map(|h| h.trim_start_matches('#').trim())
                })
                .filter(|t| !t.is_empty())
                .map(str::to_string);
            (title.unwrap_or(stem), content.to_string())
        }
        _ => (stem, content.to_string()),
    }
}

#[cfg(test)]
#[path = "document_tests.rs"]
mod tests;
