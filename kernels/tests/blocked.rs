//! The blocked (threaded, vectorised) CPU attention against the reference, for every pattern,
//! prefill and decoding shapes, a cache buffer larger than its keys, and padded keys.

use capstan_kernels::cpu::{self, AttnDims, AttnExtras, AttnPositions};
use capstan_kernels::{scca_rules, Pattern, SccaKind};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn randn(rng: &mut StdRng, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.gen_range(-2.0f32..2.0)).collect()
}

fn patterns(heads: usize) -> Vec<Pattern> {
    vec![
        Pattern::Causal,
        Pattern::Cross,
        Pattern::Local { window: 7 },
        Pattern::SelfExtend {
            neighbor: 8,
            group: 3,
        },
        Pattern::Scca(scca_rules(SccaKind::Fixed, 16, heads)),
        Pattern::Scca(scca_rules(SccaKind::Flow { groups: 2 }, 8, heads)),
        Pattern::Scca(scca_rules(SccaKind::Dilated { dilation: 3 }, 0, heads)),
    ]
}

#[test]
fn blocked_attention_equals_the_reference() {
    let mut rng = StdRng::seed_from_u64(11);
    // (batch, heads, kv_heads, q_len, kv_len, kv_stride, dim): prefill with more rows than a
    // task's block, a decoding step over a cache buffer with spare rows, a short chunk.
    let shapes = [
        (2, 4, 2, 70, 70, 70, 16),
        (1, 6, 2, 1, 300, 384, 32),
        (1, 4, 4, 5, 133, 160, 64),
        (1, 9, 3, 40, 1100, 1100, 64),
    ];
    for (batch, heads, kv_heads, q_len, kv_len, kv_stride, dim) in shapes {
        let dims = AttnDims {
            batch,
            heads,
            kv_heads,
            q_len,
            kv_len,
            kv_stride,
            dim,
        };
        let nq = batch * heads * q_len * dim;
        let nk = ((batch * kv_heads - 1) * kv_stride + kv_len) * dim;
        let (q, qg) = (randn(&mut rng, nq), randn(&mut rng, nq));
        let (k, kg, v) = (
            randn(&mut rng, nk),
            randn(&mut rng, nk),
            randn(&mut rng, nk),
        );
        let mask: Vec<bool> = (0..batch * kv_len).map(|i| i % 5 != 3).collect();
        let pos = AttnPositions {
            q_pos0: (kv_len - q_len) as u64,
            k_pos0: 0,
            scale: 1.0 / (dim as f32).sqrt(),
        };
        for pattern in patterns(heads) {
            for masked in [false, true] {
                let extras = AttnExtras {
                    q_grouped: Some(&qg),
                    k_grouped: Some(&kg),
                    key_mask: masked.then_some(mask.as_slice()),
                };
                let want = cpu::attention(&q, &k, &v, dims, pos, &pattern, extras);
                let got = cpu::attention_blocked(&q, &k, &v, dims, pos, &pattern, extras);
                let worst = want
                    .iter()
                    .zip(&got)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0f32, f32::max);
                assert!(
                    worst <= 2e-5,
                    "{pattern:?} masked {masked} shape {dims:?}: differs by {worst}"
                );
                assert!(want.iter().any(|&x| x != 0.0), "{pattern:?}: all zeros");
            }
        }
    }
}
