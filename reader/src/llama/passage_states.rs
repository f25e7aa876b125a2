//! CAPE's passage cache: the context encoder's states of each chunk, kept by the chunk's
//! tokens. A CEPE encoder reads each chunk on its own (it never sees the question or the
//! other passages), so a passage's states are the same in every request and every order:
//! they can be reused exactly, which no decoder-only reader's keys and values allow.
//!
//! Exact by construction: every chunk is encoded at positions `0..len` without padding,
//! alone or beside chunks of its own length (never attending to them), whether the cache
//! holds it or not; requests then assemble the same states the same way. On a GPU the
//! product kernels chosen for a pass's size may round a chunk differently beside others.
//! (The reference pads a batch of chunks to the longest and shifts positions; with relative
//! RoPE and masked padding that is the same function, up to rounding.)

use std::collections::HashMap;

use candle_core::Tensor;

/// What the cache did, summed since it was made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PassageCacheStats {
    /// Chunk tokens whose states were found in the cache.
    pub hit_tokens: u64,
    /// Chunk tokens the encoder computed.
    pub encoded_tokens: u64,
    /// Chunks evicted for room.
    pub evicted: u64,
    /// Chunks held now.
    pub chunks: usize,
    /// Bytes of states held now.
    pub bytes: usize,
}

struct Entry {
    /// The chunk's tokens (a hash collision is checked, never trusted).
    tokens: Vec<u32>,
    /// `(len, hidden)` states after the encoder's final norm.
    states: Tensor,
    bytes: usize,
    last_used: u64,
}

/// Encoder states of chunks read before, under a byte budget, least recently used evicted
/// first. One cache serves one model: the states depend on its weights.
pub struct PassageCache {
    entries: HashMap<u64, Entry>,
    budget: usize,
    clock: u64,
    stats: PassageCacheStats,
}

impl PassageCache {
    /// A cache keeping at most `budget` bytes of states (0: keeps nothing, still encodes each
    /// distinct chunk of a request once).
    pub fn new(budget: usize) -> Self {
        Self {
            entries: HashMap::new(),
            budget,
            clock: 0,
            stats: PassageCacheStats::default(),
        }
    }

    /// Counters and current size.
    pub fn stats(&self) -> PassageCacheStats {
        self.stats
    }

    /// The byte budget.
    pub fn budget(&self) -> usize {
        self.budget
    }

    fn key(tokens: &[u32]) -> u64 {
        hash_tokens(tokens, 0)
    }

    /// The states of `tokens` if held (and marks them used).
    pub(super) fn get(&mut self, tokens: &[u32]) -> Option<Tensor> {
        self.clock += 1;
        let entry = self.entries.get_mut(&Self::key(tokens))?;
        if entry.tokens != tokens {
            return None;
        }
        entry.last_used = self.clock;
        self.stats.hit_tokens += tokens.len() as u64;
        Some(entry.states.clone())
    }

    /// Records that `tokens` were read again within one request: their states, found or
    /// encoded for its first reading, are reused (counted as found).
    pub(super) fn note_reused(&mut self, tokens: &[u32]) {
        self.stats.hit_tokens += tokens.len() as u64;
    }

    /// Records that `tokens` were encoded into `states`, keeping them if the budget allows
    /// (evicting the least recently used chunks first).
    pub(super) fn put(&mut self, tokens: &[u32], states: &Tensor) {
        self.stats.encoded_tokens += tokens.len() as u64;
        let bytes = states.elem_count() * states.dtype().size_in_bytes();
        if bytes > self.budget {
            return;
        }
        while self.stats.bytes + bytes > self.budget {
            let Some((&oldest, _)) = self.entries.iter().min_by_key(|(_, e)| e.last_used) else {
                break;
            };
            let gone = self.entries.remove(&oldest).expect("key just found");
            self.stats.bytes -= gone.bytes;
            self.stats.evicted += 1;
        }
        self.clock += 1;
        let entry = Entry {
            tokens: tokens.to_vec(),
            states: states.clone(),
            bytes,
            last_used: self.clock,
        };
        if let Some(old) = self.entries.insert(Self::key(tokens), entry) {
            // A colliding chunk (different tokens, same hash) is replaced.
            self.stats.bytes -= old.bytes;
        }
        self.stats.bytes += bytes;
        self.stats.chunks = self.entries.len();
    }
}

/// A hash of token ids (their little-endian bytes, xxh3 with `seed`): the key of cached
/// states, here and in the engine's prefix cache (whose blocks chain it, each seeded with the
/// hash of the blocks before it).
pub fn hash_tokens(tokens: &[u32], seed: u64) -> u64 {
    let bytes: Vec<u8> = tokens.iter().flat_map(|t| t.to_le_bytes()).collect();
    xxhash_rust::xxh3::xxh3_64_with_seed(&bytes, seed)
}
