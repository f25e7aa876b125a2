//! Automatic prefix caching: the KV of prompts read before, kept in blocks of
//! [`BLOCK_TOKENS`] keyed by a hash of the block's tokens and of every token
//! before it (as vLLM keys its blocks), so that a request whose prompt starts
//! like an earlier one (the same question again, a conversation's next turn,
//! the same instruction and passages) reads only what is new.
//!
//! Blocks are copied into a sequence's own cache at admission, never shared
//! while it runs: evicting a block can never touch a running sequence. They
//! count against the scheduler's `kv_tokens` budget with the running
//! sequences' reservations, and the least recently used go first when a
//! sequence waits for room. Exact: the cached keys and values are those the
//! prompt's tokens produced, and what is left to read runs the kernels a
//! fresh read runs (the scheduler's tests compare with generation afresh,
//! greedy; `bench/prefix_cache.py` repeats real questions with SmolLM2).

use std::collections::HashMap;
use std::sync::Arc;

use capstan_reader::{Cache, KvBlock, Llama, STABLE_CHUNK_ROWS};

/// Tokens per cached block.
pub const BLOCK_TOKENS: usize = 64;

struct Entry {
    /// The block's tokens (a hash collision is checked, never trusted).
    tokens: Vec<u32>,
    /// The hash of everything before the block.
    parent: u64,
    kv: Arc<KvBlock>,
    last_used: u64,
    /// Its place in the prompt (0: the first block).
    depth: usize,
}

/// The scheduler thread's prefix cache.
pub(super) struct PrefixCache {
    entries: HashMap<u64, Entry>,
    clock: u64,
    /// Blocks evicted so far.
    pub evicted: u64,
}

/// The chained hashes of the full blocks of `tokens`.
fn chain(tokens: &[u32]) -> Vec<(u64, u64)> {
    let mut parent = 0u64;
    tokens
        .chunks_exact(BLOCK_TOKENS)
        .map(|block| {
            let hash = capstan_reader::hash_tokens(block, parent);
            let link = (parent, hash);
            parent = hash;
            link
        })
        .collect()
}

impl PrefixCache {
    pub fn new() -> Self {
        Self {
            entries: HashMap::new(),
            clock: 0,
            evicted: 0,
        }
    }

    /// Tokens held, in all blocks.
    pub fn tokens(&self) -> usize {
        self.entries.len() * BLOCK_TOKENS
    }

    /// The cached blocks that begin `prompt`, first to last, leaving at least
    /// [`STABLE_CHUNK_ROWS`] prompt tokens to read: the rest of the prompt then
    /// runs the kernels a fresh read of it runs, and its logits (the first
    /// prediction) are the same.
    pub fn lookup(&mut self, prompt: &[u32]) -> Vec<Arc<KvBlock>> {
        self.clock += 1;
        let usable = prompt.len().saturating_sub(STABLE_CHUNK_ROWS);
        let mut found = Vec::new();
        for (i, (parent, hash)) in chain(&prompt[..usable]).into_iter().enumerate() {
            let block = &prompt[i * BLOCK_TOKENS..(i + 1) * BLOCK_TOKENS];
            match self.entries.get_mut(&hash) {
                Some(e) if e.parent == parent && e.tokens == block => {
                    e.last_used = self.clock;
                    found.push(e.kv.clone());
                }
                _ => break,
            }
        }
        found
    }

    /// Loads the longest cached prefix of `prompt` ([`PrefixCache::lookup`]) into the empty
    /// `cache`; returns the positions it now holds (0 when nothing was cached).
    pub fn load_into(
        &mut self,
        model: &Llama,
        prompt: &[u32],
        cache: &mut Cache,
    ) -> capstan_reader::Result<usize> {
        let blocks = self.lookup(prompt);
        if blocks.is_empty() {
            return Ok(0);
        }
        let blocks: Vec<&KvBlock> = blocks.iter().map(|b| b.as_ref()).collect();
        cache.load_prefix(model, &blocks)?;
        Ok(cache.seq_len())
    }

    /// Keeps the full blocks of `prompt`, whose keys and values `cache` now
    /// holds (from position 0), that are not cached yet. Returns the tokens added.
    pub fn insert(&mut self, model: &Llama, prompt: &[u32], cache: &Cache) -> usize {
        self.clock += 1;
        let mut added = 0;
        for (i, (parent, hash)) in chain(prompt).into_iter().enumerate() {
            if let Some(e) = self.entries.get_mut(&hash) {
                e.last_used = self.clock;
                continue;
            }
            let start = i * BLOCK_TOKENS;
            // A model or cache whose prefixes cannot be reused (windowed attention, an
            // encoder context) gives no blocks.
            let Ok(Some(kv)) = cache.copy_block(model, start, start + BLOCK_TOKENS) else {
                break;
            };
            self.entries.insert(
                hash,
                Entry {
                    tokens: prompt[start..start + BLOCK_TOKENS].to_vec(),
                    parent,
                    kv: Arc::new(kv),
                    last_used: self.clock,
                    depth: i,
                },
            );
            added += BLOCK_TOKENS;
        }
        added
    }

    /// Puts back a block read from disk ([`super::prefix_store`]): its tokens, the hash of
    /// everything before it, and its place in the prompt.
    pub fn restore(&mut self, tokens: Vec<u32>, parent: u64, depth: usize, kv: Arc<KvBlock>) {
        let hash = capstan_reader::hash_tokens(&tokens, parent);
        self.entries.insert(
            hash,
            Entry {
                tokens,
                parent,
                kv,
                last_used: self.clock,
                depth,
            },
        );
    }

    /// Up to `n` blocks, the most recently used first: `(tokens, parent, depth, kv)`.
    pub fn recent(&self, n: usize) -> Vec<(&[u32], u64, usize, &KvBlock)> {
        let mut all: Vec<&Entry> = self.entries.values().collect();
        all.sort_by_key(|e| (std::cmp::Reverse(e.last_used), e.depth));
        all.into_iter()
            .take(n)
            .map(|e| (e.tokens.as_slice(), e.parent, e.depth, e.kv.as_ref()))
            .collect()
    }

    /// Drops the least recently used block, the deepest first among those
    /// used together (a block is reached through every block before it);
    /// `false` when none is left.
    pub fn evict_one(&mut self) -> bool {
        let Some((&hash, _)) = self
            .entries
            .iter()
            .min_by_key(|(_, e)| (e.last_used, std::cmp::Reverse(e.depth)))
        else {
            return false;
        };
        self.entries.remove(&hash);
        self.evicted += 1;
        true
    }
}
