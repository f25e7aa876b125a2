//! Capstan's question-answering core, used by the `capstan` binary and its HTTP server:
//!
//! - [`pipeline`]: retrieve, then read (extractive or generative), with timings and citations;
//! - [`context`]: what a generative reader reads (whole passages or their question-relevant
//!   sentences, the prompt) and where a grounded answer stands in them;
//! - [`scheduler`]: continuous batching of generation (one packed forward per step over every
//!   running sequence; sequences join and leave between steps; admission by KV budget);
//! - [`workers`]: model work off the async runtime behind bounded queues (fail-fast admission);
//! - [`eval`]: the batch evaluation protocols (QA, lost in the middle, synthetic probes) and
//!   their metrics;
//! - [`text`]: answer normalisation, exact match and F1.
#![warn(missing_docs)]

pub mod answer;
pub mod context;
pub mod conversation;
pub mod error;
pub mod eval;
pub mod metrics;
pub mod pipeline;
mod reader_kind;
pub mod scheduler;
pub mod text;
mod words;
pub mod workers;

pub use error::{guarded, Error, Result};
pub use scheduler::{Scheduler, SchedulerSettings, SchedulerStats};
