//! The compute pool's step runner: nested parallel work, concurrent callers and panics all
//! finish (the spinning workers never wait on work below them on their own stack).

use std::sync::mpsc;
use std::time::Duration;

use capstan_kernels::cpu::on_compute_pool;
use rayon::prelude::*;

/// A step shaped like a model's: parallel ops with serial work between them, nested joins.
fn step(seed: u64) -> u64 {
    let mut acc = seed;
    for op in 0..20u64 {
        acc = acc.wrapping_mul(6364136223846793005).wrapping_add(op);
        let sum: u64 = (0..2_000u64)
            .into_par_iter()
            .map(|i| {
                let (a, b) = rayon::join(|| i.wrapping_mul(acc), || i ^ op);
                a.wrapping_add(b)
            })
            .reduce(|| 0, u64::wrapping_add);
        acc ^= sum;
    }
    acc
}

/// Runs `f` on another thread and fails the test if it has not finished in a minute.
fn within_a_minute(f: impl FnOnce() + Send + 'static) {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        f();
        let _ = tx.send(());
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("steps on the compute pool finish (a hang means spinners waited on themselves)");
}

#[test]
fn steps_from_many_threads_finish_with_the_same_results() {
    within_a_minute(|| {
        let expected: Vec<u64> = (0..8).map(step).collect();
        let callers: Vec<_> = (0..4)
            .map(|_| {
                std::thread::spawn(|| {
                    (0..50)
                        .map(|i| on_compute_pool(|| step(i % 8)))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for caller in callers {
            let got = caller.join().expect("caller thread");
            for (i, g) in got.iter().enumerate() {
                assert_eq!(*g, expected[i % 8]);
            }
        }
    });
}

#[test]
fn a_step_that_panics_leaves_the_pool_working() {
    within_a_minute(|| {
        let caught = std::panic::catch_unwind(|| {
            on_compute_pool(|| {
                step(1);
                panic!("a step fails");
            })
        });
        assert!(caught.is_err());
        assert_eq!(on_compute_pool(|| step(3)), step(3));
    });
}
