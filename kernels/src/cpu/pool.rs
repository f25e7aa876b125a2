//! Where a model's step runs: on a worker of the thread pool that runs its parallel ops.
//!
//! A parallel op (a quantized product, attention) called from a thread outside rayon's pool
//! injects its job, wakes the workers and puts the caller to sleep until they finish: two
//! context switches per op, some 150 ops per decoding step of a small model. Called from a
//! worker, the op splits its work with the pool's other worker and the caller keeps working,
//! and workers spin a while before sleeping between the ops of a step.

use std::sync::OnceLock;

/// Runs `f` on a worker of Capstan's compute pool (as many threads as rayon's global pool),
/// or right here when this thread is a rayon worker already.
pub fn on_compute_pool<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    if rayon::current_thread_index().is_some() {
        return f();
    }
    static POOL: OnceLock<Option<rayon::ThreadPool>> = OnceLock::new();
    let pool = POOL.get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(rayon::current_num_threads())
            .thread_name(|i| format!("capstan-compute-{i}"))
            .build()
            .ok()
    });
    match pool {
        Some(pool) => pool.install(f),
        None => f(),
    }
}
