//! Where a model's step runs: on a worker of the thread pool that runs its parallel ops, with
//! the pool's other workers kept awake until the step ends.
//!
//! A parallel op (a quantized product, attention) called from a thread outside rayon's pool
//! injects its job, wakes the workers and puts the caller to sleep until they finish: two
//! context switches per op, some 150 ops per decoding step of a small model. Called from a
//! worker, the op splits its work with the pool's other workers and the caller keeps working.
//! Between two ops of a step (a norm, a rotation: tens of microseconds on one thread) rayon's
//! idle workers yield a few rounds and fall asleep, and the next op waits for them to wake, so
//! the step's other workers spin instead (as llama.cpp's thread pool does during a graph),
//! running the step's parallel work as soon as it is pushed.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

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
        Some(pool) if spin_enabled() => pool.install(|| with_workers_awake(f)),
        Some(pool) => pool.install(f),
        None => f(),
    }
}

fn spin_enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("CAPSTAN_POOL_SPIN").map_or(true, |v| v != "0"))
}

/// A spinning worker gives up after finding no work for this long: the step has stalled on
/// something else (or the spinner was picked up inside the step's own work, where spinning
/// until the step ends would wait on itself).
const IDLE_LIMIT: Duration = Duration::from_millis(2);

thread_local! {
    /// This thread is in a spinner's frame.
    static SPINNING: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` on this worker while the pool's other workers spin, running whatever work the
/// pool has, until `f` returns (or panics). They stop with the step: spinning on between steps
/// measured slower on two cores, where the caller's own work between steps (sampling, the
/// scheduler) then shares its core with a spinner.
fn with_workers_awake<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    let others = rayon::current_num_threads().saturating_sub(1);
    if others == 0 {
        return f();
    }
    let caller = rayon::current_thread_index();
    let done = AtomicBool::new(false);
    struct Done<'a>(&'a AtomicBool);
    impl Drop for Done<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Release);
        }
    }
    rayon::in_place_scope(|scope| {
        for _ in 0..others {
            scope.spawn(|_| spin_until(&done, caller));
        }
        let _done = Done(&done);
        f()
    })
}

/// Runs the pool's pending work until `done`, or until none came for [`IDLE_LIMIT`].
fn spin_until(done: &AtomicBool, caller: Option<usize>) {
    // The step's own thread, or a thread spinning already (this spinner popped while one of
    // its jobs waits): spinning here would hold up the work below it on the stack.
    if rayon::current_thread_index() == caller || SPINNING.with(Cell::get) {
        return;
    }
    SPINNING.with(|s| s.set(true));
    let mut idle_since: Option<Instant> = None;
    let mut idle_rounds = 0u32;
    while !done.load(Ordering::Acquire) {
        match rayon::yield_now() {
            Some(rayon::Yield::Executed) => (idle_since, idle_rounds) = (None, 0),
            _ => {
                idle_rounds += 1;
                // The clock every 16 rounds: reading it costs more than a round.
                if idle_rounds.is_multiple_of(16)
                    && idle_since.get_or_insert_with(Instant::now).elapsed() > IDLE_LIMIT
                {
                    break;
                }
                for _ in 0..16 {
                    std::hint::spin_loop();
                }
            }
        }
    }
    SPINNING.with(|s| s.set(false));
}
