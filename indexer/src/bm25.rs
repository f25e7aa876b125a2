//! The BM25 index: tantivy stores the inverted index (English analyzer:
//! lower-casing, stop words, Snowball stemming); scoring is our own BM25 over
//! tantivy's postings and field norms, because tantivy fixes k1 = 1.2 and
//! b = 0.75 and Capstan lets users choose them.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tantivy::index::SegmentId;
use tantivy::postings::Postings;
use tantivy::schema::{
    Field, IndexRecordOption, NumericOptions, Schema, TextFieldIndexing, TextOptions, STRING,
};
use tantivy::tokenizer::{
    Language, LowerCaser, RemoveLongFilter, SimpleTokenizer, Stemmer, StopWordFilter, TextAnalyzer,
};
use tantivy::{
    DocSet, Index, IndexReader, IndexWriter, ReloadPolicy, TantivyDocument, Term, TERMINATED,
};

use crate::error::{Error, Result};
use crate::readonly_dir::ReadOnlyDirectory;
use crate::store::PassageOrd;
use crate::topk::TopK;

const ANALYZER: &str = "capstan_en";

/// BM25's free parameters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Bm25Params {
    /// Term-frequency saturation.
    pub k1: f32,
    /// Length normalisation.
    pub b: f32,
}

impl Default for Bm25Params {
    fn default() -> Self {
        Self { k1: 1.2, b: 0.75 }
    }
}

impl Bm25Params {
    /// Rejects values outside BM25's meaningful range.
    pub fn validate(&self) -> Result<()> {
        if !(self.k1.is_finite() && self.k1 >= 0.0) {
            return Err(Error::Setting {
                name: "--bm25-k1",
                message: format!("{} must be a finite number >= 0", self.k1),
            });
        }
        if !(0.0..=1.0).contains(&self.b) {
            return Err(Error::Setting {
                name: "--bm25-b",
                message: format!("{} must be within [0, 1]", self.b),
            });
        }
        Ok(())
    }
}

struct Fields {
    body: Field,
    doc_id: Field,
    ord: Field,
}

fn schema() -> (Schema, Fields) {
    let mut builder = Schema::builder();
    let indexing = TextFieldIndexing::default()
        .set_tokenizer(ANALYZER)
        .set_index_option(IndexRecordOption::WithFreqs);
    let body = builder.add_text_field(
        "body",
        TextOptions::default().set_indexing_options(indexing),
    );
    let doc_id = builder.add_text_field("doc_id", STRING);
    let ord = builder.add_u64_field("ord", NumericOptions::default().set_fast());
    (builder.build(), Fields { body, doc_id, ord })
}

fn analyzer() -> TextAnalyzer {
    TextAnalyzer::builder(SimpleTokenizer::default())
        .filter(RemoveLongFilter::limit(40))
        .filter(LowerCaser)
        .filter(
            StopWordFilter::new(Language::English).expect("English stop words ship with tantivy"),
        )
        .filter(Stemmer::new(Language::English))
        .build()
}

/// The text analysis of BM25, for stores that index terms themselves (a
/// Qdrant collection's sparse vectors): the same terms and lengths as the
/// embedded index.
#[derive(Clone)]
pub struct Bm25Analyzer {
    analyzer: TextAnalyzer,
}

impl Default for Bm25Analyzer {
    fn default() -> Self {
        Self {
            analyzer: analyzer(),
        }
    }
}

impl Bm25Analyzer {
    /// What the analysis is, recorded by stores so that a query is never
    /// analysed otherwise than its documents were.
    pub const NAME: &'static str = "capstan_en/1: tantivy SimpleTokenizer, tokens over 40 bytes dropped, lower-cased, English stop words removed, Snowball English stemmer";

    /// The analysed terms of a text, in order (repeats kept).
    pub fn terms(&self, text: &str) -> Vec<String> {
        let mut analyzer = self.analyzer.clone();
        let mut stream = analyzer.token_stream(text);
        let mut terms = Vec::new();
        while stream.advance() {
            terms.push(stream.token().text.clone());
        }
        terms
    }

    /// A passage's length as the embedded index scores it: the number of
    /// terms of title and text, rounded as tantivy's one-byte field norm
    /// stores it (exact up to 40, then within a few percent).
    pub fn scored_length(terms: usize) -> u32 {
        let exact = u32::try_from(terms).unwrap_or(u32::MAX);
        tantivy::fieldnorm::FieldNormReader::id_to_fieldnorm(
            tantivy::fieldnorm::FieldNormReader::fieldnorm_to_id(exact),
        )
    }
}

fn open_or_create(dir: &Path, create: bool) -> Result<(Index, Fields)> {
    let (schema, fields) = schema();
    let index = if create {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        Index::create_in_dir(dir, schema).map_err(|e| Error::tantivy(dir, e))?
    } else {
        Index::open_in_dir(dir).map_err(|e| Error::tantivy(dir, e))?
    };
    index.tokenizers().register(ANALYZER, analyzer());
    Ok((index, fields))
}

/// Adds and deletes passages of the BM25 index.
pub struct Bm25Writer {
    dir: PathBuf,
    writer: IndexWriter,
    fields: Fields,
}

impl Bm25Writer {
    /// Creates an empty index in `dir`.
    pub fn create(dir: &Path) -> Result<Self> {
        let (index, fields) = open_or_create(dir, true)?;
        Self::with_index(dir, index, fields)
    }

    /// Opens an existing index for changes.
    pub fn open(dir: &Path) -> Result<Self> {
        let (index, fields) = open_or_create(dir, false)?;
        Self::with_index(dir, index, fields)
    }

    fn with_index(dir: &Path, index: Index, fields: Fields) -> Result<Self> {
        let writer = index
            .writer_with_num_threads(1, 200_000_000)
            .map_err(|e| Error::tantivy(dir, e))?;
        Ok(Self {
            dir: dir.to_path_buf(),
            writer,
            fields,
        })
    }

    /// Indexes one passage: title and text form one BM25 field.
    pub fn add(&mut self, ord: PassageOrd, doc_id: &str, title: &str, text: &str) -> Result<()> {
        let mut doc = TantivyDocument::default();
        doc.add_text(self.fields.body, title);
        doc.add_text(self.fields.body, text);
        doc.add_text(self.fields.doc_id, doc_id);
        doc.add_u64(self.fields.ord, ord);
        self.writer
            .add_document(doc)
            .map_err(|e| Error::tantivy(&self.dir, e))?;
        Ok(())
    }

    /// Deletes every passage of a document.
    pub fn delete_document(&mut self, doc_id: &str) {
        self.writer
            .delete_term(Term::from_field_text(self.fields.doc_id, doc_id));
    }

    /// Commits and merges into one segment (fastest to search), then waits
    /// for merging threads to finish.
    pub fn finish(mut self) -> Result<()> {
        let dir = self.dir.clone();
        let merged = (|| -> tantivy::Result<()> {
            self.writer.commit()?;
            let segments = self.writer.index().searchable_segment_ids()?;
            if segments.len() > 1 {
                self.writer.merge(&segments).wait()?;
            }
            self.writer.wait_merging_threads()
        })();
        merged.map_err(|e| Error::tantivy(&dir, e))
    }
}

/// Runs tantivy code over index files: its errors, and the panics its
/// decoders raise on bytes that are not what they wrote, name the folder.
fn guarded<T>(dir: &Path, run: impl FnOnce() -> tantivy::Result<T>) -> Result<T> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)) {
        Ok(result) => result.map_err(|e| Error::tantivy(dir, e)),
        Err(panic) => Err(Error::Damaged {
            path: dir.to_path_buf(),
            message: format!(
                "tantivy could not read it ({})",
                crate::panic_message(panic.as_ref())
            ),
        }),
    }
}

struct SegmentScoring {
    inverted: std::sync::Arc<tantivy::InvertedIndexReader>,
    norms: tantivy::fieldnorm::FieldNormReader,
    norm_table: Vec<f32>,
}

/// A BM25 index opened for search.
pub struct Bm25Index {
    dir: PathBuf,
    reader: IndexReader,
    analyzer: Bm25Analyzer,
    fields: Fields,
    params: Bm25Params,
    /// Per segment and term ordinal: the largest `tf / (tf + norm)` among the
    /// term's postings, so a term's score bound is `idf * (k1 + 1) * ratio`;
    /// found the first time a query has the term (one pass over its postings,
    /// about what an exhaustive query of it reads), so that an open does not
    /// read every posting of the index. The index never changes while open
    /// (manual reload), so these stay valid.
    term_bounds: std::sync::Mutex<HashMap<(SegmentId, u64), f32>>,
}

impl Bm25Index {
    /// Opens the index in `dir` for reading only (no lock file, nothing
    /// written), scoring with `params`.
    pub fn open(dir: &Path, params: Bm25Params) -> Result<Self> {
        params.validate()?;
        let (schema, fields) = schema();
        let opened = guarded(dir, || -> tantivy::Result<(IndexReader, Index)> {
            let index = Index::open(ReadOnlyDirectory::open(dir)?)?;
            if index.schema() != schema {
                return Err(tantivy::TantivyError::SchemaError(
                    "not the schema Capstan writes".into(),
                ));
            }
            index.tokenizers().register(ANALYZER, analyzer());
            let reader = index
                .reader_builder()
                .reload_policy(ReloadPolicy::Manual)
                .try_into()?;
            Ok((reader, index))
        });
        let (reader, _index) = opened?;
        Ok(Self {
            dir: dir.to_path_buf(),
            reader,
            analyzer: Bm25Analyzer::default(),
            fields,
            params,
            term_bounds: std::sync::Mutex::new(HashMap::new()),
        })
    }

    /// The index folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The largest `tf / (tf + norm)` among the postings of term `ord` of a segment: a MaxScore
    /// bound exact per term instead of the loose `idf * (k1 + 1)`, kept for the next query.
    fn term_bound(
        &self,
        segment: SegmentId,
        scoring: &SegmentScoring,
        term: &Term,
        ord: u64,
    ) -> tantivy::Result<f32> {
        let key = (segment, ord);
        if let Some(&bound) = self.term_bounds.lock().expect("bounds lock").get(&key) {
            return Ok(bound);
        }
        let Some(info) = scoring.inverted.get_term_info(term)? else {
            return Ok(0.0);
        };
        let mut block = scoring
            .inverted
            .read_block_postings_from_terminfo(&info, IndexRecordOption::WithFreqs)
            .map_err(tantivy::TantivyError::from)?;
        let mut best = 0f32;
        while !block.docs().is_empty() {
            for (&doc, &tf) in block.docs().iter().zip(block.freqs()) {
                let tf = tf as f32;
                let norm = scoring.norm_table[scoring.norms.fieldnorm_id(doc) as usize];
                best = best.max(tf / (tf + norm));
            }
            block.advance();
        }
        self.term_bounds
            .lock()
            .expect("bounds lock")
            .insert(key, best);
        Ok(best)
    }

    /// The analysed terms of a text, as BM25 sees them.
    pub fn terms(&self, text: &str) -> Vec<String> {
        self.analyzer.terms(text)
    }

    /// Number of live passages.
    pub fn num_passages(&self) -> u64 {
        self.reader.searcher().num_docs()
    }

    /// The `k` best passages for `query`, best first, with their BM25 scores.
    /// Scores are summed over query terms (a repeated term counts again), with
    /// Lucene's idf `ln(1 + (N - df + 0.5) / (df + 0.5))` (N and df count
    /// deleted passages until `capstan index compact`, as Lucene's do).
    ///
    ///
    /// Scoring is document-at-a-time with MaxScore pruning (Turtle & Flood,
    /// 1995): once the k-th best score exceeds what the weakest terms could
    /// add (each term's bound is its best score in the index, computed at
    /// open), those terms are only probed (skip-list seeks) for documents the
    /// others found. The result equals an exhaustive pass.
    pub fn search(&self, query: &str, k: usize) -> Result<Vec<(PassageOrd, f32)>> {
        let terms: Vec<Term> = self
            .terms(query)
            .iter()
            .map(|t| Term::from_field_text(self.fields.body, t))
            .collect();
        if terms.is_empty() || k == 0 {
            return Ok(Vec::new());
        }
        guarded(&self.dir, || self.search_maxscore(&terms, k))
    }

    /// Lucene's idf with Lucene's statistics: tantivy's document frequencies
    /// still count deleted passages until a merge, so N counts them too
    /// (`max_doc`). With N = live passages, a term in most passages of an
    /// index with tombstones got a negative idf, which broke MaxScore's
    /// bounds (a live passage could be pruned).
    fn idf(&self, searcher: &tantivy::Searcher, terms: &[Term]) -> tantivy::Result<Vec<f32>> {
        let n = searcher
            .segment_readers()
            .iter()
            .map(|s| s.max_doc() as u64)
            .sum::<u64>() as f32;
        terms
            .iter()
            .map(|term| {
                let df = searcher.doc_freq(term)? as f32;
                Ok((1.0 + (n - df + 0.5) / (df + 0.5)).ln())
            })
            .collect()
    }

    /// What scoring a segment needs: its postings, its field norms and
    /// `k1 * (1 - b + b * len / avg_len)` for each of tantivy's 256 norm codes.
    fn segment_scoring(&self, segment: &tantivy::SegmentReader) -> tantivy::Result<SegmentScoring> {
        let Bm25Params { k1, b } = self.params;
        let inverted = segment.inverted_index(self.fields.body)?;
        let norms = segment
            .fieldnorms_readers()
            .get_field(self.fields.body)?
            .ok_or_else(|| tantivy::TantivyError::InternalError("field norms missing".into()))?;
        let avg_len = inverted.total_num_tokens() as f32 / segment.max_doc().max(1) as f32;
        let norm_table = (0..=255u8)
            .map(|id| {
                let len = tantivy::fieldnorm::FieldNormReader::id_to_fieldnorm(id) as f32;
                k1 * (1.0 - b + b * len / avg_len.max(f32::EPSILON))
            })
            .collect();
        Ok(SegmentScoring {
            inverted,
            norms,
            norm_table,
        })
    }

    fn search_maxscore(&self, terms: &[Term], k: usize) -> tantivy::Result<Vec<(PassageOrd, f32)>> {
        struct Cursor {
            postings: tantivy::postings::SegmentPostings,
            /// `idf * (k1 + 1)`.
            weight: f32,
            /// The most this term adds to any document's score.
            bound: f32,
        }
        let searcher = self.reader.searcher();
        let idf = self.idf(&searcher, terms)?;
        let k1 = self.params.k1;
        let mut top = TopK::new(k);
        for segment in searcher.segment_readers() {
            let scoring = self.segment_scoring(segment)?;
            let SegmentScoring {
                inverted,
                norms,
                norm_table,
            } = &scoring;
            let mut cursors = Vec::with_capacity(terms.len());
            for (term, idf) in terms.iter().zip(&idf) {
                if let Some(postings) = inverted
                    .read_postings(term, IndexRecordOption::WithFreqs)
                    .map_err(tantivy::TantivyError::from)?
                {
                    let weight = idf * (k1 + 1.0);
                    // tf / (tf + norm) < 1: without the term's ratio, weight bounds it.
                    let ratio = match inverted
                        .terms()
                        .term_ord(term.serialized_value_bytes())
                        .map_err(tantivy::TantivyError::from)?
                    {
                        Some(ord) => self.term_bound(segment.segment_id(), &scoring, term, ord)?,
                        None => 1.0,
                    };
                    // Rounding: scores are computed in another order than the bound.
                    let bound = (weight * ratio * (1.0 + 1e-5)).min(weight);
                    cursors.push(Cursor {
                        postings,
                        weight,
                        bound,
                    });
                }
            }
            cursors.sort_by(|a, b| a.bound.total_cmp(&b.bound));
            let bound_upto: Vec<f32> = cursors
                .iter()
                .scan(0f32, |acc, c| {
                    *acc += c.bound;
                    Some(*acc)
                })
                .collect();
            let alive = segment.alive_bitset();
            let ords = segment.fast_fields().u64("ord")?;
            let score_of = |c: &Cursor, doc: u32| {
                let tf = c.postings.term_freq() as f32;
                c.weight * tf / (tf + norm_table[norms.fieldnorm_id(doc) as usize])
            };
            // cursors[essential..] must be iterated; the rest only probed.
            let mut essential = 0;
            loop {
                let limit = top.threshold();
                while essential < cursors.len() && bound_upto[essential] <= limit {
                    essential += 1;
                }
                let Some(doc) = cursors[essential..]
                    .iter()
                    .map(|c| c.postings.doc())
                    .min()
                    .filter(|&d| d != TERMINATED)
                else {
                    break;
                };
                let mut score = 0f32;
                for c in &mut cursors[essential..] {
                    if c.postings.doc() == doc {
                        score += score_of(c, doc);
                        c.postings.advance();
                    }
                }
                let mut possible = true;
                for i in (0..essential).rev() {
                    if score + bound_upto[i] <= limit {
                        possible = false;
                        break;
                    }
                    let c = &mut cursors[i];
                    if c.postings.doc() < doc {
                        c.postings.seek(doc);
                    }
                    if c.postings.doc() == doc {
                        score += score_of(c, doc);
                    }
                }
                if !possible || alive.is_some_and(|a| a.is_deleted(doc)) {
                    continue;
                }
                top.offer(score, || ords.first(doc));
            }
        }
        Ok(top.into_sorted())
    }

    /// The reference the pruned search is tested against: every posting of
    /// every term, term at a time.
    #[cfg(test)]
    fn search_exhaustive(
        &self,
        terms: &[Term],
        k: usize,
    ) -> tantivy::Result<Vec<(PassageOrd, f32)>> {
        let searcher = self.reader.searcher();
        let idf = self.idf(&searcher, terms)?;
        let k1 = self.params.k1;
        let mut top = TopK::new(k);
        for segment in searcher.segment_readers() {
            let SegmentScoring {
                inverted,
                norms,
                norm_table,
            } = self.segment_scoring(segment)?;
            let mut scores = vec![0f32; segment.max_doc() as usize];
            let mut touched = Vec::new();
            for (term, idf) in terms.iter().zip(&idf) {
                let Some(mut postings) = inverted
                    .read_postings(term, IndexRecordOption::WithFreqs)
                    .map_err(tantivy::TantivyError::from)?
                else {
                    continue;
                };
                let weight = idf * (k1 + 1.0);
                let mut doc = postings.doc();
                while doc != TERMINATED {
                    let tf = postings.term_freq() as f32;
                    let slot = &mut scores[doc as usize];
                    if *slot == 0.0 {
                        touched.push(doc);
                    }
                    *slot += weight * tf / (tf + norm_table[norms.fieldnorm_id(doc) as usize]);
                    doc = postings.advance();
                }
            }
            let alive = segment.alive_bitset();
            let ords = segment.fast_fields().u64("ord")?;
            for doc in touched {
                if alive.is_some_and(|a| a.is_deleted(doc)) {
                    continue;
                }
                top.offer(scores[doc as usize], || ords.first(doc));
            }
        }
        Ok(top.into_sorted())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build(dir: &Path, docs: &[(&str, &str)]) {
        let mut w = Bm25Writer::create(dir).unwrap();
        for (i, (title, text)) in docs.iter().enumerate() {
            w.add(i as u64, &format!("doc{i}"), title, text).unwrap();
        }
        w.finish().unwrap();
    }

    #[test]
    fn stemming_and_stop_words_apply_to_queries() {
        let dir = tempfile::tempdir().unwrap();
        build(
            dir.path(),
            &[
                ("Rivers", "The rivers were flowing quickly"),
                ("Mountains", "A mountain is tall"),
            ],
        );
        let index = Bm25Index::open(dir.path(), Bm25Params::default()).unwrap();
        assert_eq!(index.terms("The Flowing rivers"), vec!["flow", "river"]);
        let hits = index.search("which river flows", 10).unwrap();
        assert_eq!(hits.len(), 1);
        assert_eq!(hits[0].0, 0);
        assert!(index.search("the of and", 10).unwrap().is_empty());
    }

    #[test]
    fn scores_follow_the_bm25_formula() {
        let dir = tempfile::tempdir().unwrap();
        // Lengths below 40 tokens are stored exactly by tantivy's norm codes.
        build(
            dir.path(),
            &[("", "cat cat dog"), ("", "dog bird"), ("", "bird fish")],
        );
        let params = Bm25Params { k1: 1.5, b: 0.5 };
        let index = Bm25Index::open(dir.path(), params).unwrap();
        let hits = index.search("cat", 3).unwrap();
        let (n, df, tf, len, avg) = (3.0f32, 1.0f32, 2.0f32, 3.0f32, 7.0f32 / 3.0);
        let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
        let expected = idf * (params.k1 + 1.0) * tf
            / (tf + params.k1 * (1.0 - params.b + params.b * len / avg));
        assert_eq!(hits.len(), 1);
        assert!(
            (hits[0].1 - expected).abs() < 1e-5,
            "{} vs {expected}",
            hits[0].1
        );
    }

    #[test]
    fn deleted_documents_are_not_returned() {
        let dir = tempfile::tempdir().unwrap();
        build(dir.path(), &[("", "apple pie"), ("", "apple tart")]);
        let mut w = Bm25Writer::open(dir.path()).unwrap();
        w.delete_document("doc0");
        w.finish().unwrap();
        let index = Bm25Index::open(dir.path(), Bm25Params::default()).unwrap();
        let hits = index.search("apple", 10).unwrap();
        assert_eq!(hits.iter().map(|h| h.0).collect::<Vec<_>>(), vec![1]);
    }

    #[test]
    fn pruned_and_exhaustive_scoring_agree() {
        let dir = tempfile::tempdir().unwrap();
        let words = [
            "river", "mill", "bridge", "stone", "guild", "harbour", "tower", "market", "field",
            "forest",
        ];
        let docs: Vec<(String, String)> = (0..300)
            .map(|i| {
                let text: Vec<&str> = (0..(5 + i % 37))
                    .map(|j| words[(i * 7 + j * j + j * i) % words.len()])
                    .collect();
                (format!("Doc {i}"), text.join(" "))
            })
            .collect();
        let refs: Vec<(&str, &str)> = docs.iter().map(|(t, x)| (t.as_str(), x.as_str())).collect();
        build(dir.path(), &refs);
        for params in [Bm25Params::default(), Bm25Params { k1: 0.9, b: 0.4 }] {
            let index = Bm25Index::open(dir.path(), params).unwrap();
            for query in [
                "river mill",
                "stone guild harbour tower",
                "market market forest",
                "bridge",
                "doc 7 river",
            ] {
                let terms: Vec<Term> = index
                    .terms(query)
                    .iter()
                    .map(|t| Term::from_field_text(index.fields.body, t))
                    .collect();
                let pruned = index.search_maxscore(&terms, 20).unwrap();
                let exhaustive = index.search_exhaustive(&terms, 20).unwrap();
                assert_eq!(pruned.len(), exhaustive.len(), "{query}");
                for (w, e) in pruned.iter().zip(&exhaustive) {
                    assert!((w.1 - e.1).abs() < 1e-4, "{query}: {w:?} vs {e:?}");
                }
                let ws: std::collections::HashSet<u64> = pruned
                    .iter()
                    .filter(|h| h.1 > pruned[19].1 + 1e-4)
                    .map(|h| h.0)
                    .collect();
                let es: std::collections::HashSet<u64> = exhaustive.iter().map(|h| h.0).collect();
                assert!(ws.is_subset(&es), "{query}");
            }
        }
    }

    #[test]
    fn pruning_with_exact_term_bounds_equals_the_exhaustive_pass_on_random_text() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        let vocab: Vec<String> = (0..300).map(|i| format!("w{i}x")).collect();
        // Zipf-like: low word numbers are common, high ones rare.
        let word = |rng: &mut rand::rngs::StdRng| {
            let r: f64 = rng.gen_range(0.0f64..1.0);
            vocab[((r * r * r) * vocab.len() as f64) as usize].clone()
        };
        let docs: Vec<(String, String)> = (0..1500)
            .map(|i| {
                let len = rng.gen_range(3..120);
                let text: Vec<String> = (0..len).map(|_| word(&mut rng)).collect();
                (format!("t{i}"), text.join(" "))
            })
            .collect();
        let dir = tempfile::tempdir().unwrap();
        let refs: Vec<(&str, &str)> = docs.iter().map(|(t, x)| (t.as_str(), x.as_str())).collect();
        build(dir.path(), &refs);
        // Second round: a third of the documents deleted (tombstones in the
        // segment, which neither pass may return).
        for round in 0..2 {
            if round == 1 {
                let mut w = Bm25Writer::open(dir.path()).unwrap();
                for i in (0..docs.len()).step_by(3) {
                    w.delete_document(&format!("doc{i}"));
                }
                w.writer.commit().unwrap();
            }
            pruned_equals_exhaustive(dir.path(), &mut rng, &word);
        }
    }

    fn pruned_equals_exhaustive(
        dir: &Path,
        rng: &mut rand::rngs::StdRng,
        word: &dyn Fn(&mut rand::rngs::StdRng) -> String,
    ) {
        use rand::Rng;
        for params in [Bm25Params::default(), Bm25Params { k1: 2.0, b: 1.0 }] {
            let index = Bm25Index::open(dir, params).unwrap();
            for _ in 0..60 {
                let n = rng.gen_range(1..25);
                let query: Vec<String> = (0..n).map(|_| word(rng)).collect();
                let terms: Vec<Term> = index
                    .terms(&query.join(" "))
                    .iter()
                    .map(|t| Term::from_field_text(index.fields.body, t))
                    .collect();
                let k = rng.gen_range(1..30);
                let pruned = index.search_maxscore(&terms, k).unwrap();
                let exhaustive = index.search_exhaustive(&terms, k).unwrap();
                assert_eq!(pruned.len(), exhaustive.len());
                for (p, e) in pruned.iter().zip(&exhaustive) {
                    assert!((p.1 - e.1).abs() < 1e-4, "{query:?}: {p:?} vs {e:?}");
                }
            }
        }
    }

    #[test]
    fn invalid_params_are_rejected() {
        assert!(Bm25Params { k1: -1.0, b: 0.5 }.validate().is_err());
        assert!(Bm25Params { k1: 1.0, b: 1.5 }.validate().is_err());
    }
}
