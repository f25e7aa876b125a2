//! The fifth bits of the 5-bit formats (Q5_0, Q5_1), laid out so that a kernel turns them
//! into the bytes it ors into its nibbles with three instructions per register.
//!
//! The kernels read a row's blocks two at a time, as two registers of 32 bytes: `lo` holds
//! elements 0-15 of both blocks, `hi` elements 16-31 (see `x86.rs`). So each pair of blocks
//! needs two 32-byte masks, `0x10` in the bytes of the elements whose fifth bit is set. Spreading
//! ggml's `qh` word into such a mask takes a broadcast, a shuffle and two compares per register,
//! which made a Q5_0 product twice as slow as Q4_1's at one row.
//!
//! Here a row's fifth bits are kept as *planes* of 32 bytes, one plane for four pairs of blocks:
//! byte `k` of a plane holds, in bit `2s`, the bit of byte `k` of pair `s`'s `lo` register, and
//! in bit `2s + 1` that of its `hi` register. A kernel takes `and`, `cmpeq` and `and` to make
//! a mask. A row of an odd number of blocks ends in a lone block, read as one register in
//! element order: its bits are in bit `2s` of its slot. Rows start on a plane of their own, so a
//! row of 18 blocks (SmolLM2's 576 columns) takes 96 bytes where ggml's words took 72; a row of
//! 48 blocks takes the same 192.

use super::BLOCK;

/// Pairs of blocks per plane.
pub(super) const PAIRS_PER_PLANE: usize = 4;

/// Bytes of one plane.
pub(super) const PLANE: usize = 32;

/// Bytes of planes a row of `blocks` blocks takes.
pub(super) fn row_bytes(blocks: usize) -> usize {
    blocks.div_ceil(2).div_ceil(PAIRS_PER_PLANE) * PLANE
}

/// Whether block `lb` is the lone last block of a row of `blocks` (an odd number).
fn lone(blocks: usize, lb: usize) -> bool {
    lb.is_multiple_of(2) && lb + 1 == blocks
}

/// Where element `e` of block `lb` (of a row of `blocks`) keeps its fifth bit: the byte within
/// the row's planes and the bit within that byte.
fn position(blocks: usize, lb: usize, e: usize) -> (usize, u32) {
    let pair = lb / 2;
    let slot = (pair % PAIRS_PER_PLANE) as u32;
    let base = pair / PAIRS_PER_PLANE * PLANE;
    if lone(blocks, lb) {
        return (base + e, 2 * slot);
    }
    let second = lb % 2;
    (base + second * 16 + e % 16, 2 * slot + (e / 16) as u32)
}

/// Planes of a matrix whose blocks (row after row, `blocks` a row) have the fifth-bit words
/// `words` (ggml's `qh`: bit `j` is element `j`'s).
pub(super) fn planes(words: &[u32], blocks: usize) -> Vec<u8> {
    let per_row = row_bytes(blocks);
    let rows = words.len() / blocks;
    let mut out = vec![0u8; rows * per_row];
    for (b, &word) in words.iter().enumerate() {
        let (row, lb) = (b / blocks, b % blocks);
        let planes = &mut out[row * per_row..(row + 1) * per_row];
        for e in 0..BLOCK {
            let (byte, bit) = position(blocks, lb, e);
            planes[byte] |= (((word >> e) & 1) as u8) << bit;
        }
    }
    out
}

/// Block `b`'s fifth-bit word (bit `j` element `j`'s), `b` counted over the whole matrix:
/// [`position`] for a whole block at once (a prompt chunk dequantizes every block).
pub(super) fn word(planes: &[u8], blocks: usize, b: usize) -> u32 {
    let (row, lb) = (b / blocks, b % blocks);
    let pair = lb / 2;
    let bit = 2 * (pair % PAIRS_PER_PLANE) as u32;
    let at = row * row_bytes(blocks) + pair / PAIRS_PER_PLANE * PLANE;
    let plane = &planes[at..at + PLANE];
    let get = |byte: u8, bit: u32| ((byte >> bit) & 1) as u32;
    if lone(blocks, lb) {
        return (0..BLOCK).fold(0, |w, e| w | get(plane[e], bit) << e);
    }
    let half = &plane[lb % 2 * 16..lb % 2 * 16 + 16];
    (0..16).fold(0, |w, e| {
        w | get(half[e], bit) << e | get(half[e], bit + 1) << (e + 16)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_come_back_from_their_planes() {
        for blocks in [1, 2, 3, 8, 9, 17, 18, 48] {
            let words: Vec<u32> = (0..3 * blocks as u32)
                .map(|i| i.wrapping_mul(0x9E37_79B9) ^ (i << 7))
                .collect();
            let planes = planes(&words, blocks);
            assert_eq!(planes.len(), 3 * row_bytes(blocks));
            for (b, &w) in words.iter().enumerate() {
                assert_eq!(word(&planes, blocks, b), w, "block {b} of rows of {blocks}");
            }
        }
    }
}
