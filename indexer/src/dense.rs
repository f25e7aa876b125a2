//! The dense index: raw L2-normalised vectors (row = passage ordinal) for
//! exact scans, re-scoring and rebuilds, plus an HNSW graph (hnsw_rs) for
//! approximate search on large indexes.

use std::collections::HashSet;
use std::io::Write;
use std::path::Path;

use hnsw_rs::prelude::{AnnT, Hnsw, HnswIo};
use memmap2::Mmap;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::frozen::FrozenGraph;
use crate::integrity::{check_in_place, FileSum, FileTable};
use crate::store::PassageOrd;
use crate::topk::TopK;

/// HNSW construction and search parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HnswParams {
    /// Links per node (hnsw_rs's `max_nb_connection`), 2..=256.
    pub m: usize,
    /// Candidate list size while building.
    pub ef_construction: usize,
}

impl Default for HnswParams {
    fn default() -> Self {
        Self {
            m: 16,
            ef_construction: 100,
        }
    }
}

impl HnswParams {
    /// hnsw_rs exits the process for `m > 256`; refuse such values first.
    pub fn validate(&self) -> Result<()> {
        if !(2..=256).contains(&self.m) {
            return Err(Error::Setting {
                name: "--hnsw-m",
                message: format!("{} must be within 2..=256", self.m),
            });
        }
        if self.ef_construction < self.m {
            return Err(Error::Setting {
                name: "--hnsw-ef-construction",
                message: format!(
                    "{} must be at least --hnsw-m ({})",
                    self.ef_construction, self.m
                ),
            });
        }
        Ok(())
    }
}

pub use crate::distance::UnitCosine;
pub use capstan_kernels::cpu::math::{dot, dot_fn};

pub use capstan_encoder::normalize;

/// The HNSW graph type Capstan stores.
pub type Graph = Hnsw<'static, f32, UnitCosine>;

/// Raw vectors of passages (row = passage ordinal).
pub const PASSAGE_VECTORS: &str = "vectors.f32";
/// Raw vectors of passage sentences (rows listed in the passage store).
pub const SENTENCE_VECTORS: &str = "sentences.f32";
const GRAPH_DIR: &str = "hnsw";
const GRAPH_BASENAME: &str = "graph";
/// The graph's links as a search reads them ([`FrozenGraph::write`]); the
/// hnsw_rs files beside it are read only to change the graph.
pub const FROZEN_GRAPH: &str = "graph.frozen";

/// Appends vectors to `dir/file` (little-endian f32 rows).
pub fn append_vectors(dir: &Path, file: &str, vectors: &[Vec<f32>]) -> Result<()> {
    let path = dir.join(file);
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(|e| Error::io(&path, e))?;
    let mut buf = Vec::with_capacity(vectors.iter().map(|v| v.len() * 4).sum());
    for v in vectors {
        for x in v {
            buf.extend_from_slice(&x.to_le_bytes());
        }
    }
    file.write_all(&buf).map_err(|e| Error::io(&path, e))?;
    file.sync_all().map_err(|e| Error::io(&path, e))
}

/// Reads every vector row of `dir/file` (a missing file holds no rows).
pub fn read_vectors(dir: &Path, file: &str, dim: usize) -> Result<Vec<f32>> {
    let path = dir.join(file);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && file == SENTENCE_VECTORS => {
            Vec::new()
        }
        Err(e) => return Err(Error::io(&path, e)),
    };
    values_of(&path, &bytes, dim)
}

/// The f32s of `bytes` (all of `path`), checked: whole rows of `dim`, every value finite.
fn values_of(path: &Path, bytes: &[u8], dim: usize) -> Result<Vec<f32>> {
    whole_rows(path, bytes.len(), dim)?;
    let values: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    finite(path, &values, dim)?;
    Ok(values)
}

/// Errors unless `len` bytes are whole rows of `dim` f32s.
fn whole_rows(path: &Path, len: usize, dim: usize) -> Result<()> {
    if !len.is_multiple_of(4 * dim) {
        return Err(Error::index(
            path,
            format!("size {len} is not a multiple of {dim} f32s"),
        ));
    }
    Ok(())
}

/// Errors naming the first row of `values` that holds a NaN or an infinity.
fn finite(path: &Path, values: &[f32], dim: usize) -> Result<()> {
    match values.iter().position(|x| !x.is_finite()) {
        None => Ok(()),
        Some(i) => Err(Error::Damaged {
            path: path.to_path_buf(),
            message: format!("row {} holds a non-finite value ({})", i / dim, values[i]),
        }),
    }
}

/// Builds a new graph over `vectors` (rows of `dim`), ids = row numbers.
pub fn build_graph(vectors: &[f32], dim: usize, params: HnswParams) -> Result<Graph> {
    params.validate()?;
    let n = vectors.len() / dim;
    let graph = Hnsw::new(params.m, n.max(1), 16, params.ef_construction, UnitCosine);
    insert_rows(&graph, vectors, dim, 0);
    Ok(graph)
}

/// Inserts the rows of `vectors` into `graph` with ids from `first_id`.
pub fn insert_rows(graph: &Graph, vectors: &[f32], dim: usize, first_id: usize) {
    let rows: Vec<(&[f32], usize)> = vectors
        .chunks_exact(dim)
        .enumerate()
        .map(|(i, v)| (v, first_id + i))
        .collect();
    graph.parallel_insert_slice(&rows);
}

/// Writes the graph into `dir/hnsw/` (hnsw_rs's files, to change it later)
/// and `dir/graph.frozen` (its links, for searches).
pub fn save_graph(graph: &Graph, dir: &Path) -> Result<()> {
    FrozenGraph::freeze(graph, graph.get_nb_point()).write(&dir.join(FROZEN_GRAPH))?;
    let gdir = dir.join(GRAPH_DIR);
    std::fs::create_dir_all(&gdir).map_err(|e| Error::io(&gdir, e))?;
    let name = graph
        .file_dump(&gdir, GRAPH_BASENAME)
        .map_err(|e| Error::Hnsw {
            path: gdir.clone(),
            message: e.to_string(),
        })?;
    if name != GRAPH_BASENAME {
        return Err(Error::Hnsw {
            path: gdir,
            message: format!("graph written as {name}, expected {GRAPH_BASENAME} (stale files?)"),
        });
    }
    Ok(())
}

/// The hnsw_rs loader of `dir/hnsw/`, once its files are known to be there.
fn graph_loader(dir: &Path) -> Result<HnswIo> {
    let gdir = dir.join(GRAPH_DIR);
    if !gdir.join(format!("{GRAPH_BASENAME}.hnsw.graph")).is_file() {
        return Err(Error::Hnsw {
            path: gdir,
            message: "graph files are missing".into(),
        });
    }
    Ok(HnswIo::new(&gdir, GRAPH_BASENAME))
}

/// Reads the graph of `dir/hnsw/` through `io`; hnsw_rs ties the graph's
/// lifetime to its loader.
fn read_graph<'io>(io: &'io HnswIo, dir: &Path) -> Result<Hnsw<'io, f32, UnitCosine>> {
    let gdir = dir.join(GRAPH_DIR);
    // hnsw_rs unwraps what it reads: damaged files panic inside it.
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        io.load_hnsw_with_dist(UnitCosine)
    })) {
        Ok(graph) => graph.map_err(|e| Error::Hnsw {
            path: gdir,
            message: e.to_string(),
        }),
        Err(panic) => Err(Error::Damaged {
            path: gdir,
            message: format!(
                "hnsw_rs could not read the graph ({})",
                crate::panic_message(panic.as_ref())
            ),
        }),
    }
}

/// Loads the graph of `dir/hnsw/` to change it. The loader is leaked on
/// purpose: the graph borrows it, and the process that changes an index
/// ends once the new graph is saved.
pub fn load_graph(dir: &Path) -> Result<Graph> {
    let io: &'static HnswIo = Box::leak(Box::new(graph_loader(dir)?));
    let mut graph = read_graph(io, dir)?;
    graph.set_searching_mode(true);
    Ok(graph)
}

/// Loads the graph of `dir/hnsw/` and keeps only its links (the loaded
/// hnsw_rs graph and its copies of the vectors are dropped).
fn freeze_graph(dir: &Path, rows: usize) -> Result<FrozenGraph> {
    let io = graph_loader(dir)?;
    let graph = read_graph(&io, dir)?;
    let points = graph.get_nb_point();
    if points != rows {
        return Err(Error::Damaged {
            path: dir.join(GRAPH_DIR),
            message: format!("the graph holds {points} points, the vectors {rows} rows"),
        });
    }
    Ok(FrozenGraph::freeze(&graph, rows))
}

/// How a dense search is carried out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DenseStrategy {
    /// HNSW for large indexes, an exact scan below [`DenseIndex::EXACT_BELOW`] vectors.
    Auto,
    /// Always scan every vector.
    Exact,
    /// Always use the HNSW graph.
    Hnsw,
}

/// Vectors (the passages', the sentences'), row after row: the file mapped in place where the CPU reads its
/// little-endian floats as they are (a searched index costs the pages it reads, shared with
/// the page cache, not a private copy of the file), else read into memory.
pub(crate) enum VectorRows {
    Mapped(Mmap),
    Read(Vec<f32>),
}

impl VectorRows {
    pub(crate) fn as_f32(&self) -> &[f32] {
        match self {
            VectorRows::Mapped(map) => {
                // SAFETY: every bit pattern is an f32. `map_vectors` maps only files of whole
                // f32s; a map starts on a page, so nothing lies before the first.
                let (before, rows, after) = unsafe { map.align_to::<f32>() };
                debug_assert!(before.is_empty() && after.is_empty());
                rows
            }
            VectorRows::Read(rows) => rows,
        }
    }
}

/// The vectors of `path`, mapped where the CPU is little-endian: its size checked against
/// rows of `dim`, its bytes against `sum` (the manifest's) in place, its values finite.
pub(crate) fn map_vectors(path: &Path, dim: usize, sum: Option<&FileSum>) -> Result<VectorRows> {
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let len = file.metadata().map_err(|e| Error::io(path, e))?.len() as usize;
    whole_rows(path, len, dim)?;
    if cfg!(target_endian = "big") || len == 0 {
        let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
        if let Some(want) = sum {
            check_in_place(path, &bytes, want)?;
        }
        return Ok(VectorRows::Read(values_of(path, &bytes, dim)?));
    }
    // SAFETY: a published generation is never written again (writers make a new one), and the
    // map is read-only: a file changed under us gives other floats, never unsafety beyond what
    // any reader of a map accepts (as `FrozenStore`).
    let map = unsafe { Mmap::map(&file) }.map_err(|e| Error::io(path, e))?;
    if let Some(want) = sum {
        check_in_place(path, &map, want)?;
    }
    let rows = VectorRows::Mapped(map);
    finite(path, rows.as_f32(), dim)?;
    Ok(rows)
}

/// Raw vectors and graph of an opened index.
pub struct DenseIndex {
    vectors: VectorRows,
    dim: usize,
    graph: FrozenGraph,
}

impl DenseIndex {
    /// Below this many vectors `Auto` scans exactly. Measured on MiniLM vectors at the hybrid
    /// depths (100-300 candidates; `capstan-bench crossover`, docs/BENCHMARKS.md): the scan
    /// ([`exact_top_k`], on every thread) takes 1.0 ms at 20K and 2.0 ms at 40K, where HNSW at
    /// its default breadth takes 0.3-1.0 ms and finds 0.97-0.99 of the scan's candidates
    /// (real questions on 18,713 real passages: 0.004 less dense recall@10, at any breadth).
    /// At 80K the scan's 123 MB of vectors cost 6.2 ms against HNSW's 0.4-1.2 ms.
    pub const EXACT_BELOW: usize = 40_000;

    /// Opens the vectors and graph in `dir`: the vectors mapped, the frozen graph file where the
    /// generation has one, else (generations written before it) hnsw_rs's. The mapped files
    /// are checked in place against their checksums in `sums` (the manifest's), where given.
    pub fn open(dir: &Path, dim: usize, sums: Option<&FileTable>) -> Result<Self> {
        let sum = |name: &str| sums.and_then(|t| t.get(name));
        let vectors = map_vectors(&dir.join(PASSAGE_VECTORS), dim, sum(PASSAGE_VECTORS))?;
        let rows = vectors.as_f32().len() / dim;
        let frozen = dir.join(FROZEN_GRAPH);
        let graph = if frozen.is_file() {
            FrozenGraph::read(&frozen, rows, sum(FROZEN_GRAPH))?
        } else {
            freeze_graph(dir, rows)?
        };
        Ok(Self {
            vectors,
            dim,
            graph,
        })
    }

    /// Number of stored vectors (deleted ones included).
    pub fn len(&self) -> usize {
        self.vectors.as_f32().len() / self.dim
    }

    /// Whether no vector is stored.
    pub fn is_empty(&self) -> bool {
        self.vectors.as_f32().is_empty()
    }

    /// The stored vector of `ord`.
    pub fn vector(&self, ord: PassageOrd) -> Option<&[f32]> {
        let start = ord as usize * self.dim;
        self.vectors.as_f32().get(start..start + self.dim)
    }

    /// The `k` nearest live passages to a unit `query`, best first, with
    /// cosine similarity. `ef` is the HNSW search breadth (at least `k`).
    pub fn search(
        &self,
        query: &[f32],
        k: usize,
        ef: usize,
        strategy: DenseStrategy,
        deleted: &HashSet<PassageOrd>,
    ) -> Vec<(PassageOrd, f32)> {
        let exact = match strategy {
            DenseStrategy::Exact => true,
            DenseStrategy::Hnsw => false,
            DenseStrategy::Auto => self.len() < Self::EXACT_BELOW,
        };
        if k == 0 || self.is_empty() {
            return Vec::new();
        }
        if exact {
            return self.exact(query, k, deleted);
        }
        self.graph
            .search(self.vectors.as_f32(), self.dim, query, k, ef, deleted)
    }

    /// Exact top-k by scanning every live vector ([`exact_top_k`]).
    pub fn exact(
        &self,
        query: &[f32],
        k: usize,
        deleted: &HashSet<PassageOrd>,
    ) -> Vec<(PassageOrd, f32)> {
        exact_top_k(self.vectors.as_f32(), self.dim, query, k, deleted)
    }
}

/// Rows a thread scans at a time: below two pieces a scan runs on the calling thread.
const SCAN_PIECE: usize = 8192;

/// The `k` rows of `vectors` (of `dim`) with the largest dot product with `query`, deleted ones
/// left out, best first (ties: the smaller ordinal): pieces of [`SCAN_PIECE`] rows on every
/// thread, their top `k` merged.
pub fn exact_top_k(
    vectors: &[f32],
    dim: usize,
    query: &[f32],
    k: usize,
    deleted: &HashSet<PassageOrd>,
) -> Vec<(PassageOrd, f32)> {
    use rayon::prelude::*;
    let dot = dot_fn();
    let scan = |first: usize, rows: &[f32]| {
        let mut top = TopK::new(k);
        for (i, v) in rows.chunks_exact(dim).enumerate() {
            let ord = (first + i) as u64;
            if !deleted.contains(&ord) {
                top.offer(dot(query, v), || Some(ord));
            }
        }
        top.into_sorted()
    };
    if vectors.len() < 2 * SCAN_PIECE * dim {
        return scan(0, vectors);
    }
    let mut hits: Vec<(PassageOrd, f32)> = vectors
        .par_chunks(SCAN_PIECE * dim)
        .enumerate()
        .flat_map_iter(|(p, rows)| scan(p * SCAN_PIECE, rows))
        .collect();
    hits.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    hits.truncate(k);
    hits
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// `n` seeded random unit vectors of `dim` (rows).
    pub(crate) fn random_unit(n: usize, dim: usize, seed: u64) -> Vec<f32> {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut v: Vec<f32> = (0..n * dim).map(|_| rng.gen_range(-1.0..1.0)).collect();
        v.chunks_exact_mut(dim).for_each(normalize);
        v
    }

    /// A dense index of `vectors` (rows of `dim`) in a new folder: the vectors and the graph.
    fn write_dense(vectors: &[f32], dim: usize) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let rows: Vec<Vec<f32>> = vectors.chunks(dim).map(|c| c.to_vec()).collect();
        append_vectors(dir.path(), PASSAGE_VECTORS, &rows).unwrap();
        let graph = build_graph(vectors, dim, HnswParams::default()).unwrap();
        save_graph(&graph, dir.path()).unwrap();
        dir
    }

    #[test]
    fn hnsw_finds_what_the_exact_scan_finds_and_survives_reload() {
        let (n, dim) = (2000, 32);
        let vectors = random_unit(n, dim, 1);
        let dir = write_dense(&vectors, dim);
        let index = DenseIndex::open(dir.path(), dim, None).unwrap();
        assert_eq!(index.len(), n);
        let queries = random_unit(50, dim, 2);
        let none = HashSet::new();
        let mut found = 0;
        for q in queries.chunks(dim) {
            let exact = index.search(q, 10, 64, DenseStrategy::Exact, &none);
            let approx = index.search(q, 10, 64, DenseStrategy::Hnsw, &none);
            found += approx
                .iter()
                .filter(|h| exact.iter().any(|e| e.0 == h.0))
                .count();
        }
        let recall = found as f64 / 500.0;
        assert!(recall > 0.9, "recall@10 {recall}");
        // Deleted points never come back.
        let q = &queries[..dim];
        let top = index.search(q, 5, 64, DenseStrategy::Hnsw, &none);
        let deleted: HashSet<u64> = top.iter().map(|h| h.0).collect();
        for strategy in [DenseStrategy::Hnsw, DenseStrategy::Exact] {
            let hits = index.search(q, 5, 64, strategy, &deleted);
            assert_eq!(hits.len(), 5);
            assert!(hits.iter().all(|h| !deleted.contains(&h.0)));
        }
    }

    #[test]
    fn a_threaded_scan_finds_what_one_pass_finds() {
        let (n, dim) = (3 * SCAN_PIECE + 17, 8);
        let mut vectors = random_unit(n, dim, 4);
        // Ties across pieces: the same row at both ends keeps the smaller ordinal first.
        let first = vectors[..dim].to_vec();
        vectors[(n - 1) * dim..].copy_from_slice(&first);
        let deleted: HashSet<PassageOrd> = [3, SCAN_PIECE as u64 + 1].into();
        for q in [first.clone(), random_unit(1, dim, 5)] {
            let mut one = TopK::new(25);
            for (i, v) in vectors.chunks_exact(dim).enumerate() {
                if !deleted.contains(&(i as u64)) {
                    one.offer(dot(&q, v), || Some(i as u64));
                }
            }
            assert_eq!(
                exact_top_k(&vectors, dim, &q, 25, &deleted),
                one.into_sorted()
            );
        }
    }

    #[test]
    fn mapped_vectors_are_checked_against_the_manifest_in_place() {
        let (n, dim) = (300, 8);
        let vectors = random_unit(n, dim, 3);
        let dir = write_dense(&vectors, dim);
        let path = dir.path().join(PASSAGE_VECTORS);
        let sums: FileTable = [(
            PASSAGE_VECTORS.to_string(),
            crate::integrity::checksum(&path).unwrap(),
        )]
        .into();
        let index = DenseIndex::open(dir.path(), dim, Some(&sums)).unwrap();
        assert_eq!(index.vector(7).unwrap(), &vectors[7 * dim..8 * dim]);
        drop(index);
        // A changed byte: the checksum names the file.
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[4 * dim * 5] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        match DenseIndex::open(dir.path(), dim, Some(&sums)) {
            Err(Error::Damaged { path: p, message }) => {
                assert_eq!(p, path);
                assert!(message.contains("checksum"), "{message}");
            }
            other => panic!("{:?}", other.err()),
        }
        // Without a checksum to compare, a non-finite value is still caught, by row.
        bytes[4 * dim * 9..4 * dim * 9 + 4].copy_from_slice(&f32::NAN.to_le_bytes());
        std::fs::write(&path, &bytes).unwrap();
        match DenseIndex::open(dir.path(), dim, None) {
            Err(Error::Damaged { message, .. }) => assert!(message.contains("row 9"), "{message}"),
            other => panic!("{:?}", other.err()),
        }
    }

    #[test]
    fn hnsw_params_are_validated() {
        assert!(HnswParams {
            m: 300,
            ef_construction: 400
        }
        .validate()
        .is_err());
        assert!(HnswParams {
            m: 16,
            ef_construction: 8
        }
        .validate()
        .is_err());
    }
}
