//! Search over an HNSW graph built by hnsw_rs, with the graph's links copied
//! once into flat arrays and the raw vectors read in row order.
//!
//! hnsw_rs builds, saves and reloads the graph; searching it through hnsw_rs
//! itself costs 4–5× faiss per query at equal efSearch (every point sits
//! behind an `Arc`, its links behind a lock, and each step allocates). The
//! frozen copy keeps the same graph (same links, same entry point) in a
//! layout a search can stream through: layer-0 links in one CSR array, the
//! few upper-layer links in small maps, and a reusable visited set.

use std::cell::RefCell;
use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, HashMap, HashSet};

use std::path::Path;

use hnsw_rs::prelude::Hnsw;
use memmap2::Mmap;

use crate::distance::UnitCosine;
use crate::error::{Error, Result};
use crate::integrity::{check_in_place, FileSum};
use crate::store::PassageOrd;
use capstan_kernels::cpu::math::dot_fn;

/// The first bytes of a graph file ([`FrozenGraph::write`]), with its version.
const FILE_MAGIC: &[u8; 8] = b"CPSTFRG1";

/// Bytes before the layer-0 offsets: the magic and four u64 sizes.
const HEADER: usize = 40;

/// Little-endian values read off a byte string.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let out = self.bytes.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(out)
    }

    /// Whether `count` values of `width` bytes remain.
    fn fits(&self, count: u64, width: u64) -> bool {
        count
            .checked_mul(width)
            .is_some_and(|n| n <= (self.bytes.len() - self.at) as u64)
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
}

/// Layer 0 of a graph: node `i`'s links are `links[offsets[i]..offsets[i + 1]]`.
enum Layer0 {
    /// Built in memory ([`FrozenGraph::freeze`]), or read where the CPU is big-endian.
    Owned { offsets: Vec<u64>, links: Vec<u32> },
    /// A graph file mapped in place ([`FrozenGraph::read`]): the arrays at their byte ranges,
    /// which the file's layout keeps aligned (40 bytes of header, then 8-byte offsets).
    Mapped {
        map: Mmap,
        offsets: std::ops::Range<usize>,
        links: std::ops::Range<usize>,
    },
}

impl Layer0 {
    fn offsets(&self) -> &[u64] {
        match self {
            Layer0::Owned { offsets, .. } => offsets,
            Layer0::Mapped { map, offsets, .. } => view(&map[offsets.clone()]),
        }
    }

    fn links(&self) -> &[u32] {
        match self {
            Layer0::Owned { links, .. } => links,
            Layer0::Mapped { map, links, .. } => view(&map[links.clone()]),
        }
    }
}

/// Little-endian `T`s of `bytes`, in place; `read` maps only files whose arrays lie aligned.
fn view<T: Copy>(bytes: &[u8]) -> &[T] {
    // SAFETY: every bit pattern is a valid u32 and u64 (the only `T`s here).
    let (before, values, after) = unsafe { bytes.align_to::<T>() };
    assert!(
        before.is_empty() && after.is_empty(),
        "graph arrays are aligned"
    );
    values
}

/// The links of an HNSW graph in flat arrays (node = vector row).
pub struct FrozenGraph {
    layer0: Layer0,
    /// Links on layer `l >= 1` are `upper[l - 1][&node]` (few nodes live there).
    upper: Vec<HashMap<u32, Box<[u32]>>>,
    /// The node searches start from, on the top layer.
    entry: Option<u32>,
}

/// A node and its similarity to the query, ordered by similarity.
#[derive(Clone, Copy)]
struct Scored(f32, u32);

impl PartialEq for Scored {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Scored {}
impl PartialOrd for Scored {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Scored {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0).then(other.1.cmp(&self.1))
    }
}

/// Nodes seen by the current search: a stamp per node, so clearing is a
/// counter increment rather than a pass over every node.
#[derive(Default)]
struct Visited {
    stamps: Vec<u32>,
    epoch: u32,
}

impl Visited {
    fn reset(&mut self, n: usize) {
        if self.stamps.len() < n {
            self.stamps.resize(n, 0);
        }
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            self.stamps.iter_mut().for_each(|s| *s = 0);
            self.epoch = 1;
        }
    }

    /// Marks `node`; true when it was not seen before.
    fn insert(&mut self, node: u32) -> bool {
        let stamp = &mut self.stamps[node as usize];
        let new = *stamp != self.epoch;
        *stamp = self.epoch;
        new
    }
}

thread_local! {
    static VISITED: RefCell<Visited> = RefCell::new(Visited::default());
}

impl FrozenGraph {
    /// Copies the links of `graph`. Node ids are the graph's data ids (the
    /// vector rows); every id must be below `rows`.
    pub fn freeze(graph: &Hnsw<'_, f32, UnitCosine>, rows: usize) -> Self {
        let points = graph.get_point_indexation();
        if points.get_nb_point() == 0 {
            // hnsw_rs's point iterator panics on a graph without an entry point.
            return Self {
                layer0: Layer0::Owned {
                    offsets: vec![0; rows + 1],
                    links: Vec::new(),
                },
                upper: Vec::new(),
                entry: None,
            };
        }
        let top = points.get_max_level_observed() as usize;
        let mut layer0: Vec<Vec<u32>> = vec![Vec::new(); rows];
        let mut upper: Vec<HashMap<u32, Box<[u32]>>> = vec![HashMap::new(); top];
        let mut entry = None;
        for point in points {
            let node = point.get_origin_id();
            if node >= rows {
                continue;
            }
            let level = point.get_point_id().0 as usize;
            if level == top && entry.is_none() {
                entry = Some(node as u32);
            }
            for (layer, neighbours) in point.get_neighborhood_id().into_iter().enumerate() {
                let ids: Vec<u32> = neighbours
                    .iter()
                    .map(|n| n.d_id)
                    .filter(|&id| id < rows)
                    .map(|id| id as u32)
                    .collect();
                if layer == 0 {
                    layer0[node] = ids;
                } else if layer <= level.min(top) {
                    // hnsw_rs keeps a (mostly empty) list for every possible
                    // layer; only the point's own layers are kept here.
                    upper[layer - 1].insert(node as u32, ids.into_boxed_slice());
                }
            }
        }
        let mut offsets = Vec::with_capacity(rows + 1);
        offsets.push(0);
        let mut links = Vec::with_capacity(layer0.iter().map(Vec::len).sum());
        for ids in layer0 {
            links.extend_from_slice(&ids);
            offsets.push(links.len() as u64);
        }
        Self {
            layer0: Layer0::Owned { offsets, links },
            upper,
            entry,
        }
    }

    /// Writes the graph to `path` (little-endian): a magic, the sizes, the
    /// layer-0 offsets and links, then each upper layer's nodes and links.
    /// Written once per generation, so that a search maps it instead of
    /// hnsw_rs's load and a freeze.
    pub fn write(&self, path: &Path) -> Result<()> {
        let (offsets, links) = (self.layer0.offsets(), self.layer0.links());
        let mut out = Vec::with_capacity(HEADER + offsets.len() * 8 + links.len() * 4);
        out.extend_from_slice(FILE_MAGIC);
        let rows = offsets.len() - 1;
        for v in [rows, links.len(), self.upper.len()] {
            out.extend_from_slice(&(v as u64).to_le_bytes());
        }
        out.extend_from_slice(&self.entry.map_or(u64::MAX, u64::from).to_le_bytes());
        for &o in offsets {
            out.extend_from_slice(&o.to_le_bytes());
        }
        for &l in links {
            out.extend_from_slice(&l.to_le_bytes());
        }
        for layer in &self.upper {
            let mut nodes: Vec<(&u32, &Box<[u32]>)> = layer.iter().collect();
            nodes.sort_by_key(|(node, _)| **node);
            out.extend_from_slice(&(nodes.len() as u64).to_le_bytes());
            for (node, links) in nodes {
                out.extend_from_slice(&node.to_le_bytes());
                out.extend_from_slice(&(links.len() as u32).to_le_bytes());
                for l in links.iter() {
                    out.extend_from_slice(&l.to_le_bytes());
                }
            }
        }
        crate::fsutil::write_durably(path, &out)
    }

    /// Reads a graph [`FrozenGraph::write`] wrote for `rows` vectors, its layer-0 arrays
    /// mapped in place (read into memory where the CPU is big-endian) and checked against `sum`
    /// (the manifest's checksum) where given; any inconsistency (sizes, offsets, a link or entry
    /// past the last row) is an error naming the file, so a search never indexes out of bounds.
    pub fn read(path: &Path, rows: usize, sum: Option<&FileSum>) -> Result<Self> {
        let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
        // SAFETY: a published generation is never written again, and the map is read-only
        // (as `FrozenStore`'s); its bytes are checked below before any is used as an index.
        let map = unsafe { Mmap::map(&file) }.map_err(|e| Error::io(path, e))?;
        let bytes: &[u8] = &map;
        if let Some(want) = sum {
            check_in_place(path, bytes, want)?;
        }
        let damaged = |message: String| Error::Damaged {
            path: path.to_path_buf(),
            message,
        };
        let mut r = Reader { bytes, at: 0 };
        if r.take(FILE_MAGIC.len()) != Some(&FILE_MAGIC[..]) {
            return Err(damaged("not a Capstan graph file".into()));
        }
        let header: Option<[u64; 4]> = (|| Some([r.u64()?, r.u64()?, r.u64()?, r.u64()?]))();
        let [stored_rows, n_links, layers, entry] =
            header.ok_or_else(|| damaged("truncated header".into()))?;
        if stored_rows != rows as u64 {
            return Err(damaged(format!(
                "holds {stored_rows} nodes, the vectors {rows} rows"
            )));
        }
        let truncated = || damaged("truncated".into());
        if !r.fits(rows as u64 + 1, 8) || !r.fits(n_links, 4) || layers > 64 {
            return Err(truncated());
        }
        let offsets_at = r.at..r.at + 8 * (rows + 1);
        r.at = offsets_at.end;
        let n_links = n_links as usize;
        if !r.fits(n_links as u64, 4) {
            return Err(truncated());
        }
        let links_at = r.at..r.at + 4 * n_links;
        r.at = links_at.end;
        // Layer 0 stays in the map where the CPU reads its little-endian arrays as they are.
        let owned = cfg!(target_endian = "big").then(|| {
            let le = |b: &[u8], w: usize| -> Vec<u64> {
                b.chunks_exact(w)
                    .map(|c| c.iter().rev().fold(0u64, |v, &x| v << 8 | x as u64))
                    .collect()
            };
            let links = le(&bytes[links_at.clone()], 4);
            (
                le(&bytes[offsets_at.clone()], 8),
                links.into_iter().map(|l| l as u32).collect::<Vec<u32>>(),
            )
        });
        let (offsets, links): (&[u64], &[u32]) = match &owned {
            Some((offsets, links)) => (offsets, links),
            None => (
                view(&bytes[offsets_at.clone()]),
                view(&bytes[links_at.clone()]),
            ),
        };
        if offsets[0] != 0
            || offsets[rows] != n_links as u64
            || offsets.windows(2).any(|w| w[0] > w[1])
        {
            return Err(damaged("layer-0 offsets are inconsistent".into()));
        }
        let in_range = |id: u32| (id as usize) < rows;
        if !links.iter().all(|&l| in_range(l)) {
            return Err(damaged("a link points past the last node".into()));
        }
        let mut upper = Vec::with_capacity(layers as usize);
        for _ in 0..layers {
            let count = r.u64().ok_or_else(truncated)?;
            if !r.fits(count, 8) {
                return Err(truncated());
            }
            let mut layer = HashMap::with_capacity(count as usize);
            for _ in 0..count {
                let node = r.u32().ok_or_else(truncated)?;
                let len = r.u32().ok_or_else(truncated)? as u64;
                if !r.fits(len, 4) || !in_range(node) {
                    return Err(damaged("an upper layer is inconsistent".into()));
                }
                let ids: Box<[u32]> = (0..len).map(|_| r.u32().unwrap()).collect();
                if !ids.iter().all(|&l| in_range(l)) {
                    return Err(damaged("a link points past the last node".into()));
                }
                layer.insert(node, ids);
            }
            upper.push(layer);
        }
        if r.at != bytes.len() {
            return Err(damaged("trailing bytes".into()));
        }
        let entry = match entry {
            u64::MAX => None,
            e if e < rows as u64 => Some(e as u32),
            e => return Err(damaged(format!("entry point {e} past the last node"))),
        };
        let layer0 = match owned {
            Some((offsets, links)) => Layer0::Owned { offsets, links },
            None => Layer0::Mapped {
                map,
                offsets: offsets_at,
                links: links_at,
            },
        };
        Ok(Self {
            layer0,
            upper,
            entry,
        })
    }

    fn layer0(&self, node: u32) -> &[u32] {
        let (i, offsets) = (node as usize, self.layer0.offsets());
        &self.layer0.links()[offsets[i] as usize..offsets[i + 1] as usize]
    }

    /// The `k` most similar live nodes to the unit `query`, best first, with
    /// their dot products; `ef` is the candidate list size (at least `k`).
    /// Deleted nodes are walked through but never returned.
    pub fn search(
        &self,
        vectors: &[f32],
        dim: usize,
        query: &[f32],
        k: usize,
        ef: usize,
        deleted: &HashSet<PassageOrd>,
    ) -> Vec<(PassageOrd, f32)> {
        let Some(mut node) = self.entry else {
            return Vec::new();
        };
        let dot = dot_fn();
        let sim = |node: u32| {
            let start = node as usize * dim;
            dot(query, &vectors[start..start + dim])
        };
        let mut best = sim(node);
        // Greedy descent through the upper layers.
        for layer in self.upper.iter().rev() {
            loop {
                let mut moved = false;
                for &next in layer.get(&node).map_or(&[][..], |l| &l[..]) {
                    let s = sim(next);
                    if s > best {
                        (node, best) = (next, s);
                        moved = true;
                    }
                }
                if !moved {
                    break;
                }
            }
        }
        let ef = ef.max(k);
        let live = |node: u32| deleted.is_empty() || !deleted.contains(&(node as u64));
        let found = VISITED.with(|visited| {
            let mut visited = visited.borrow_mut();
            visited.reset(self.layer0.offsets().len() - 1);
            visited.insert(node);
            let mut candidates = BinaryHeap::with_capacity(ef * 4);
            let mut results: BinaryHeap<Reverse<Scored>> = BinaryHeap::with_capacity(ef + 1);
            candidates.push(Scored(best, node));
            if live(node) {
                results.push(Reverse(Scored(best, node)));
            }
            while let Some(Scored(s, current)) = candidates.pop() {
                if results.len() >= ef && results.peek().is_some_and(|w| s < w.0 .0) {
                    break;
                }
                for &next in self.layer0(current) {
                    if !visited.insert(next) {
                        continue;
                    }
                    let s = sim(next);
                    let full = results.len() >= ef;
                    if !full || results.peek().is_some_and(|w| s > w.0 .0) {
                        candidates.push(Scored(s, next));
                        if live(next) {
                            results.push(Reverse(Scored(s, next)));
                            if results.len() > ef {
                                results.pop();
                            }
                        }
                    }
                }
            }
            results
        });
        let mut hits: Vec<(PassageOrd, f32)> = found
            .into_iter()
            .map(|Reverse(Scored(s, n))| (n as u64, s))
            .collect();
        hits.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        hits.truncate(k);
        hits
    }

    /// Bytes held by the links.
    pub fn memory_bytes(&self) -> usize {
        self.layer0.offsets().len() * 8
            + self.layer0.links().len() * 4
            + self
                .upper
                .iter()
                .flat_map(|l| l.values())
                .map(|v| v.len() * 4 + 16)
                .sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dense::tests::random_unit;
    use crate::dense::{build_graph, dot, HnswParams};

    fn exact(vectors: &[f32], dim: usize, q: &[f32], k: usize, deleted: &HashSet<u64>) -> Vec<u64> {
        let mut all: Vec<(u64, f32)> = vectors
            .chunks_exact(dim)
            .enumerate()
            .map(|(i, v)| (i as u64, dot(q, v)))
            .filter(|(i, _)| !deleted.contains(i))
            .collect();
        all.sort_by(|a, b| b.1.total_cmp(&a.1));
        all.into_iter().take(k).map(|h| h.0).collect()
    }

    #[test]
    fn frozen_search_keeps_the_graph_and_beats_its_recall() {
        let (n, dim, k, ef) = (3000, 24, 10, 32);
        let vectors = random_unit(n, dim, 7);
        let graph = build_graph(&vectors, dim, HnswParams::default()).unwrap();
        let frozen = FrozenGraph::freeze(&graph, n);
        // The same links as hnsw_rs holds, node by node.
        for point in graph.get_point_indexation() {
            let node = point.get_origin_id() as u32;
            let mut ours = frozen.layer0(node).to_vec();
            let mut theirs: Vec<u32> = point.get_neighborhood_id()[0]
                .iter()
                .map(|n| n.d_id as u32)
                .collect();
            ours.sort_unstable();
            theirs.sort_unstable();
            assert_eq!(ours, theirs, "layer-0 links of node {node}");
        }
        // Layer l holds exactly the points whose level is l or more (hnsw_rs
        // files each point under its own level only).
        let points = graph.get_point_indexation();
        assert!(!frozen.upper.is_empty(), "3,000 points reach layer 1");
        for (i, layer) in frozen.upper.iter().enumerate() {
            let expected: usize = (i + 1..=frozen.upper.len())
                .map(|l| points.get_layer_nb_point(l))
                .sum();
            assert_eq!(layer.len(), expected, "layer {}", i + 1);
        }
        let none = HashSet::new();
        let (mut ours, mut theirs) = (0, 0);
        let queries = random_unit(100, dim, 8);
        for q in queries.chunks(dim) {
            let truth = exact(&vectors, dim, q, k, &none);
            let hits = frozen.search(&vectors, dim, q, k, ef, &none);
            assert_eq!(hits.len(), k);
            assert!(hits.windows(2).all(|w| w[0].1 >= w[1].1), "best first");
            for (id, score) in &hits {
                let row = &vectors[*id as usize * dim..][..dim];
                assert!((score - dot(q, row)).abs() < 1e-6);
            }
            ours += hits.iter().filter(|h| truth.contains(&h.0)).count();
            theirs += graph
                .search(q, k, ef)
                .iter()
                .filter(|h| truth.contains(&(h.d_id as u64)))
                .count();
        }
        let (ours, theirs) = (ours as f64 / 1000.0, theirs as f64 / 1000.0);
        assert!(ours > 0.9, "recall@10 {ours}");
        assert!(ours + 0.01 >= theirs, "frozen {ours} vs hnsw_rs {theirs}");
    }

    #[test]
    fn deleted_nodes_are_walked_through_but_never_returned() {
        let (n, dim, k) = (2000, 16, 10);
        let vectors = random_unit(n, dim, 3);
        let graph = build_graph(&vectors, dim, HnswParams::default()).unwrap();
        let frozen = FrozenGraph::freeze(&graph, n);
        // Half of the nodes deleted, the nearest ones among them.
        let deleted: HashSet<u64> = (0..n as u64).filter(|i| i % 2 == 0).collect();
        let mut found = 0;
        let queries = random_unit(50, dim, 4);
        for q in queries.chunks(dim) {
            let truth = exact(&vectors, dim, q, k, &deleted);
            let hits = frozen.search(&vectors, dim, q, k, 64, &deleted);
            assert_eq!(hits.len(), k);
            assert!(hits.iter().all(|h| !deleted.contains(&h.0)));
            found += hits.iter().filter(|h| truth.contains(&h.0)).count();
        }
        let recall = found as f64 / 500.0;
        assert!(recall > 0.9, "recall@10 with half deleted {recall}");
        // Everything deleted: nothing comes back.
        let all: HashSet<u64> = (0..n as u64).collect();
        assert!(frozen
            .search(&vectors, dim, &queries[..dim], k, 64, &all)
            .is_empty());
    }

    #[test]
    fn a_written_graph_reads_back_the_same_and_damage_is_named() {
        let (n, dim) = (1500, 16);
        let vectors = random_unit(n, dim, 11);
        let graph = build_graph(&vectors, dim, HnswParams::default()).unwrap();
        let frozen = FrozenGraph::freeze(&graph, n);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("graph.frozen");
        frozen.write(&path).unwrap();
        let read = FrozenGraph::read(&path, n, None).unwrap();
        assert!(matches!(read.layer0, Layer0::Mapped { .. }));
        assert_eq!(read.layer0.offsets(), frozen.layer0.offsets());
        assert_eq!(read.layer0.links(), frozen.layer0.links());
        assert_eq!(read.upper, frozen.upper);
        assert_eq!(read.entry, frozen.entry);
        let none = HashSet::new();
        for q in random_unit(20, dim, 12).chunks(dim) {
            assert_eq!(
                read.search(&vectors, dim, q, 10, 32, &none),
                frozen.search(&vectors, dim, q, 10, 32, &none)
            );
        }
        // Another row count, a truncation, a link past the end: named errors.
        let error = |rows: usize, sum: Option<&FileSum>| {
            FrozenGraph::read(&path, rows, sum)
                .err()
                .expect("an error")
                .to_string()
        };
        let err = error(n + 1, None);
        assert!(
            err.contains("graph.frozen") && err.contains("rows"),
            "{err}"
        );
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
        assert!(FrozenGraph::read(&path, n, None).is_err());
        let mut bad = bytes.clone();
        let first_link = 8 + 32 + (n + 1) * 8;
        bad[first_link..first_link + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        std::fs::write(&path, &bad).unwrap();
        let err = error(n, None);
        assert!(err.contains("past the last node"), "{err}");
        // A link changed to another node: consistent, but not the file the manifest summed.
        std::fs::write(&path, &bytes).unwrap();
        let sum = crate::integrity::checksum(&path).unwrap();
        assert!(FrozenGraph::read(&path, n, Some(&sum)).is_ok());
        let mut other = bytes.clone();
        other[first_link] ^= 1;
        std::fs::write(&path, &other).unwrap();
        let err = error(n, Some(&sum));
        assert!(
            err.contains("graph.frozen") && err.contains("checksum"),
            "{err}"
        );
    }

    #[test]
    fn an_empty_graph_finds_nothing() {
        let graph = build_graph(&[], 8, HnswParams::default()).unwrap();
        let frozen = FrozenGraph::freeze(&graph, 0);
        assert!(frozen
            .search(&[], 8, &[0.0; 8], 5, 16, &HashSet::new())
            .is_empty());
    }
}
