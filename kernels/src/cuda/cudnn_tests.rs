//! cuDNN's fused attention checked against a real cuDNN on a machine without a GPU: the
//! descriptors and operation graphs, and device-less planning for an H100
//! (kernels/scripts/cudnn-check.sh).

use super::*;
use crate::sdpa_graph::{DataType, SdpaBatch, SdpaMask};

/// Every graph Capstan builds, at Llama-3-8B's heads, with each mask and both types.
fn keys() -> Vec<SdpaKey> {
    let mut keys = Vec::new();
    for dtype in [DataType::Bf16, DataType::Half] {
        for (mask, q_len, kv_len, window, stats) in [
            (SdpaMask::Causal, 1024, 1024, 0, false),
            (SdpaMask::CausalBottomRight, 100, 257, 0, false),
            (SdpaMask::None, 4096, 8192, 0, false),
            (SdpaMask::Causal, 1024, 1024, 512, false),
            (SdpaMask::CausalBottomRight, 100, 257, 64, false),
            // SelfExtend's two passes, with their statistics written out.
            (SdpaMask::Causal, 1024, 1024, 512, true),
            (SdpaMask::CausalShifted { shift: -512 }, 1024, 1024, 0, true),
        ] {
            keys.push(SdpaKey {
                dtype,
                batch: 2,
                heads: 32,
                kv_heads: 8,
                q_len,
                kv_len,
                kv_stride: 8192,
                dim: 128,
                mask,
                window,
                stats,
                batch_layout: SdpaBatch::Packed,
            });
        }
    }
    keys
}

/// The shapes scripts/gpu-check.sh will send to cuDNN (batch 1, bf16): the attention cases
/// (Llama-3-8B's 32/8 heads; cross-attention 32/32), the model's prefill, CAPE's full-context
/// chunks of 4,096 after a cache up to 128K, CAPE's decoder (Llama-2's 32/32 heads) and its
/// cross-attention over the encoder's states.
fn check_keys() -> Vec<SdpaKey> {
    let key = |(heads, kv_heads), (q_len, kv_len, kv_stride), mask, window, stats| SdpaKey {
        dtype: DataType::Bf16,
        batch: 1,
        heads,
        kv_heads,
        q_len,
        kv_len,
        kv_stride,
        dim: 128,
        mask,
        window,
        stats,
        batch_layout: SdpaBatch::Packed,
    };
    let mut keys = Vec::new();
    for n in [8192, 32768, 131072] {
        keys.push(key((32, 8), (n, n, n), SdpaMask::Causal, 0, false));
    }
    let n = 32768;
    keys.push(key((32, 8), (n, n, n), SdpaMask::Causal, 512, false));
    keys.push(key((32, 8), (n, n, n), SdpaMask::Causal, 512, true));
    let far = SdpaMask::CausalShifted { shift: -512 };
    keys.push(key((32, 8), (n, n, n), far, 0, true));
    keys.push(key((32, 32), (4096, n, n), SdpaMask::None, 0, false));
    for kv in [8192, 65536, 131072] {
        let chunk = SdpaMask::CausalBottomRight;
        keys.push(key((32, 32), (4096, kv, 131072 + 4096), chunk, 0, false));
    }
    keys.push(key(
        (32, 32),
        (4096, 4096, 4096),
        SdpaMask::Causal,
        0,
        false,
    ));
    for enc in [28672, 126976] {
        keys.push(key((32, 32), (4096, enc, enc), SdpaMask::None, 0, false));
    }
    // SCCA_fixed at 32K (chunks of 2,048, half the heads shifted by 1,024) as its batched
    // chunk calls.
    let rules = crate::pattern::scca_rules(crate::pattern::SccaKind::Fixed, 2048, 32);
    let whole = key((32, 8), (n, n, n), SdpaMask::None, 0, false);
    let calls = crate::scca_calls::scca_calls(&rules, &whole, 0, 0).expect("SCCA_fixed");
    keys.extend(calls.iter().map(|c| c.key));
    keys
}

/// cuDNN, or a note and `None` (a failure under `CAPSTAN_REQUIRE_CUDNN`).
fn loaded() -> Option<&'static Api> {
    match api() {
        Ok(api) => Some(api),
        Err(why) => {
            assert!(
                std::env::var_os("CAPSTAN_REQUIRE_CUDNN").is_none(),
                "CAPSTAN_REQUIRE_CUDNN is set but cuDNN did not load: {why}"
            );
            eprintln!("no cuDNN ({why}): test skipped");
            None
        }
    }
}

// Device-less planning (cuDNN 9.8 and later): a device described by its properties.
const DEVICEPROP_DESCRIPTOR: u32 = 38;
const DEVICEPROP_JSON_REPRESENTATION: u32 = 2702;
const ENGINEHEUR_DEVICEPROP: u32 = 204;
const EXECUTION_PLAN_DEVICEPROP: u32 = 407;
const TYPE_CHAR: u32 = 24;
/// An H100 SXM (compute capability 9.0, 132 multiprocessors) as cuDNN's device-property
/// descriptor reads it; the fields are the ones cuDNN 9.26 asks for, one by one, when
/// finalizing the descriptor.
const H100: &str = concat!(
    r#"{"cudaDeviceId": 0, "deviceVer": 900, "driverVer": 13000, "#,
    r#""maxGridSize": [2147483647, 65535, 65535], "maxBlockSize": [1024, 1024, 64], "#,
    r#""regsPerBlock": 65536, "multiProcessorCount": 132, "smCountOrigin": 0, "#,
    r#""warpSize": 32, "maxSharedMemoryPerBlock": 49152, "#,
    r#""maxSharedMemoryPerBlockOptin": 232448, "oversizedSharedMemoryPerBlock": 232448, "#,
    r#""reservedSharedMemoryPerBlock": 1024, "maxRegistersPerSM": 65536, "maxCtasPerSM": 32, "#,
    r#""maxThreadsPerBlock": 1024, "maxThreadsPerSM": 2048, "pciDeviceId": 9008, "#,
    r#""isTccDriver": 0, "supportCoopLaunch": 1, "smClockRateKHz": 1980000, "#,
    r#""memClockRateKHz": 2619000, "l2CacheSize": 52428800, "#,
    r#""deviceName": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85017755648}"#
);

/// cuDNN's fused-attention engines take every graph for an H100 (and every shape the GPU
/// check will send), without the H100: with
/// the device described by its properties, heuristics mode A (what PyTorch uses) proposes
/// engines for each graph, and an execution plan of one of them compiles (NVRTC) for
/// sm_90. Here the plan stops where the compiled kernel is loaded into the driver, which
/// on this machine is scripts/setup-cuda.sh's stub (CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER,
/// "cuLibraryLoadData returned error (34)"); an engine refusing the graph fails earlier,
/// with a NOT_SUPPORTED status. Run under `source <(scripts/setup-cuda.sh --env)` (NVRTC
/// and the stub on the loader's path) with `CAPSTAN_CUDNN_LIB` set.
#[test]
fn the_fused_engine_compiles_every_graph_for_an_h100() {
    let Some(api) = loaded() else { return };
    if api.version < 90800 {
        eprintln!("cuDNN {} plans only on a device: test skipped", api.version);
        return;
    }
    let device = Desc::new(api, DEVICEPROP_DESCRIPTOR).unwrap();
    device
        .set(DEVICEPROP_JSON_REPRESENTATION, TYPE_CHAR, H100.as_bytes())
        .unwrap();
    let device = device.finalize("device properties").unwrap();
    for key in keys().into_iter().chain(check_keys()) {
        let g = operation_graph(api, &key, None).unwrap_or_else(|e| panic!("{key:?}: {e}"));
        let heur = Desc::new(api, ENGINEHEUR_DESCRIPTOR).unwrap();
        heur.set_desc(ENGINEHEUR_OPERATION_GRAPH, &g.og).unwrap();
        heur.set(ENGINEHEUR_MODE, TYPE_HEUR_MODE, &[HEUR_MODES[0]])
            .unwrap();
        heur.set_desc(ENGINEHEUR_DEVICEPROP, &device).unwrap();
        let heur = heur.finalize("heuristics").unwrap();
        let configs = engine_configs(api, &heur).unwrap();
        assert!(
            !configs.is_empty(),
            "{key:?}: heuristics A proposes no engine"
        );
        let outcomes: Vec<String> = configs
            .iter()
            .map(|cfg| {
                let plan = Desc::new(api, EXECUTION_PLAN_DESCRIPTOR).unwrap();
                plan.set_desc(EXECUTION_PLAN_ENGINE_CONFIG, cfg).unwrap();
                plan.set_desc(EXECUTION_PLAN_DEVICEPROP, &device).unwrap();
                match plan.finalize("execution plan") {
                    Ok(_) => "compiled and loaded".to_string(),
                    Err(e) => e.to_string().lines().next().unwrap_or_default().to_string(),
                }
            })
            .collect();
        eprintln!("{key:?}: {outcomes:?}");
        assert!(
            outcomes
                .iter()
                .any(|o| o == "compiled and loaded" || o.contains("EXECUTION_FAILED_CUDA_DRIVER")),
            "{key:?}: no engine compiled the graph: {outcomes:?}"
        );
    }
}

/// Every descriptor of every graph, and the operation graph itself, finalize on the cuDNN
/// this machine has (no GPU needed: a PyTorch wheel's `nvidia/cudnn/lib` will do, through
/// `CAPSTAN_CUDNN_LIB`): cuDNN checks each attribute's type, each operation's operands and
/// the graph's wiring there. Only the engine's acceptance and the run need the GPU.
#[test]
fn the_graphs_finalize_on_this_machines_cudnn() {
    let Some(api) = loaded() else { return };
    eprintln!("cuDNN {}", api.version);
    for key in keys() {
        let g = operation_graph(api, &key, None).unwrap_or_else(|e| panic!("{key:?}: {e}"));
        assert!(g.keep.len() > g.graph.tensors.len());
    }
}
