//! Capstan's dense encoder: a BERT checkpoint of the Contriever family (e.g.
//! sentence-transformers/all-MiniLM-L6-v2) in candle, with the pooling and normalisation its
//! sentence-transformers files ask for; its int8 form on the CPU; and the sentence spans the
//! index embeds and the extractive reader ranks.
//!
//! Three rooms use it: indexing (passages and sentences), retrieval (questions) and the
//! extractive reader (questions against sentence vectors). It holds no index: the reader
//! depends on it, not on the index stack.
//!
//! ```no_run
//! use capstan_encoder::{dot, Encoder};
//! # fn main() -> capstan_encoder::Result<()> {
//! let encoder = Encoder::load("models/all-MiniLM-L6-v2".as_ref())?;
//! let v = encoder.embed(&["Who founded the city?", "The city was founded in 1120."])?;
//! println!("similarity {}", dot(&v[0], &v[1]));
//! # Ok(()) }
//! ```
#![warn(missing_docs)]

mod bert;
mod encoder;
mod error;
mod int8_cache;
mod padded_bert;
mod sentence;

pub use capstan_kernels::cpu::math::dot;
pub use encoder::{Encoder, EncoderInfo, EncoderOptions, EncoderPrecision, Pooling};
pub use error::{Error, Result};
pub use int8_cache::{capstan_home, file_identity};
pub use sentence::{sentence_embedding_text, sentence_spans};

/// L2-normalises in place (zero vectors stay zero).
pub fn normalize(v: &mut [f32]) {
    let norm = dot(v, v).sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
}
