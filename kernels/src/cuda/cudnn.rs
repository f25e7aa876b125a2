//! cuDNN's fused attention through its backend API, loaded at run time: `libcudnn.so.9` is
//! opened with `libloading` on first use (nothing of cuDNN at build time, and a machine without
//! it runs Capstan's own kernels), the graph of [`crate::sdpa_graph`] is built from backend
//! descriptors, and an execution plan is cached per call shape ([`SdpaKey`] and device).
//!
//! cudarc's own cuDNN module is not used: candle links cudarc dynamically, so turning it on
//! would need `libcudnn.so` wherever the `cuda` feature builds (docs/plans/cudnn-sdpa.md,
//! section 1.4). The constants below are cuDNN 9's ABI values (cudarc's `cudnn-09021` bindings).
//! Statuses are read as `i32`, never as an enum a newer library could step outside of.

use std::collections::HashMap;
use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use candle_core::cuda_backend::cudarc::driver::{CudaSlice, CudaView, DevicePtr, DevicePtrMut};
use candle_core::cuda_backend::WrapErr;
use candle_core::{CudaDevice, Result};

use crate::sdpa_graph::{sdpa_graph, Op, Scalar, SdpaGraph, SdpaKey};

type Status = i32;
type Raw = *mut c_void;

// cudnnBackendDescriptorType_t
const POINTWISE_DESCRIPTOR: u32 = 0;
const ENGINECFG_DESCRIPTOR: u32 = 3;
const ENGINEHEUR_DESCRIPTOR: u32 = 4;
const EXECUTION_PLAN_DESCRIPTOR: u32 = 5;
const OPERATION_POINTWISE_DESCRIPTOR: u32 = 13;
const OPERATIONGRAPH_DESCRIPTOR: u32 = 15;
const VARIANT_PACK_DESCRIPTOR: u32 = 16;
const TENSOR_DESCRIPTOR: u32 = 17;
const MATMUL_DESCRIPTOR: u32 = 18;
const OPERATION_MATMUL_DESCRIPTOR: u32 = 19;
const REDUCTION_DESCRIPTOR: u32 = 21;
const OPERATION_REDUCTION_DESCRIPTOR: u32 = 22;

// cudnnBackendAttributeType_t
const TYPE_HANDLE: u32 = 0;
const TYPE_DATA_TYPE: u32 = 1;
const TYPE_BOOLEAN: u32 = 2;
const TYPE_INT64: u32 = 3;
const TYPE_FLOAT: u32 = 4;
const TYPE_VOID_PTR: u32 = 6;
const TYPE_HEUR_MODE: u32 = 8;
const TYPE_POINTWISE_MODE: u32 = 14;
const TYPE_BACKEND_DESCRIPTOR: u32 = 15;
const TYPE_REDUCTION_OPERATOR_TYPE: u32 = 18;

// cudnnBackendAttributeName_t
const POINTWISE_MODE: u32 = 0;
const POINTWISE_MATH_PREC: u32 = 1;
const POINTWISE_AXIS: u32 = 9;
const ENGINEHEUR_MODE: u32 = 200;
const ENGINEHEUR_OPERATION_GRAPH: u32 = 201;
const ENGINEHEUR_RESULTS: u32 = 202;
const EXECUTION_PLAN_HANDLE: u32 = 400;
const EXECUTION_PLAN_ENGINE_CONFIG: u32 = 401;
const EXECUTION_PLAN_WORKSPACE_SIZE: u32 = 402;
const OPERATION_POINTWISE_PW_DESCRIPTOR: u32 = 750;
const OPERATION_POINTWISE_XDESC: u32 = 751;
const OPERATION_POINTWISE_BDESC: u32 = 752;
const OPERATION_POINTWISE_YDESC: u32 = 753;
const OPERATION_POINTWISE_ALPHA1: u32 = 754;
const OPERATION_POINTWISE_ALPHA2: u32 = 755;
const OPERATION_POINTWISE_TDESC: u32 = 758;
const OPERATIONGRAPH_HANDLE: u32 = 800;
const OPERATIONGRAPH_OPS: u32 = 801;
const TENSOR_BYTE_ALIGNMENT: u32 = 900;
const TENSOR_DATA_TYPE: u32 = 901;
const TENSOR_DIMENSIONS: u32 = 902;
const TENSOR_STRIDES: u32 = 903;
const TENSOR_UNIQUE_ID: u32 = 906;
const TENSOR_IS_VIRTUAL: u32 = 907;
const TENSOR_IS_BY_VALUE: u32 = 908;
const VARIANT_PACK_UNIQUE_IDS: u32 = 1000;
const VARIANT_PACK_DATA_POINTERS: u32 = 1001;
const VARIANT_PACK_WORKSPACE: u32 = 1003;
const MATMUL_COMP_TYPE: u32 = 1500;
const OPERATION_MATMUL_ADESC: u32 = 1520;
const OPERATION_MATMUL_BDESC: u32 = 1521;
const OPERATION_MATMUL_CDESC: u32 = 1522;
const OPERATION_MATMUL_DESC: u32 = 1523;
const REDUCTION_OPERATOR: u32 = 1600;
const REDUCTION_COMP_TYPE: u32 = 1601;
const OPERATION_REDUCTION_XDESC: u32 = 1610;
const OPERATION_REDUCTION_YDESC: u32 = 1611;
const OPERATION_REDUCTION_DESC: u32 = 1612;

// cudnnBackendHeurMode_t: A (what PyTorch and the frontend's samples use), then the fallback.
const HEUR_MODES: [i32; 2] = [3, 2];
// cudnnReduceTensorOp_t
const REDUCE_ADD: i32 = 0;
const REDUCE_MAX: i32 = 3;
/// The tensors' byte alignment, the frontend's default.
const ALIGNMENT: usize = 16;
/// Plans kept per device before the cache starts over (each prompt chunk after a cache has a
/// shape of its own).
const MAX_PLANS: usize = 256;
/// The oldest cuDNN whose fused-attention engine takes the composite graph (9.0).
const MIN_VERSION: usize = 90000;

/// The functions of the loaded library.
struct Api {
    _lib: libloading::Library,
    version: usize,
    error_string: unsafe extern "C" fn(Status) -> *const c_char,
    last_error_string: unsafe extern "C" fn(*mut c_char, usize),
    create: unsafe extern "C" fn(*mut Raw) -> Status,
    set_stream: unsafe extern "C" fn(Raw, Raw) -> Status,
    create_descriptor: unsafe extern "C" fn(u32, *mut Raw) -> Status,
    destroy_descriptor: unsafe extern "C" fn(Raw) -> Status,
    set_attribute: unsafe extern "C" fn(Raw, u32, u32, i64, *const c_void) -> Status,
    get_attribute: unsafe extern "C" fn(Raw, u32, u32, i64, *mut i64, *mut c_void) -> Status,
    finalize: unsafe extern "C" fn(Raw) -> Status,
    execute: unsafe extern "C" fn(Raw, Raw, Raw) -> Status,
}

impl Api {
    /// Opens `name` and binds the functions.
    fn open(name: &str) -> std::result::Result<Self, String> {
        // SAFETY: loading cuDNN runs its initialisers, which have no preconditions.
        let lib = unsafe { libloading::Library::new(name) }.map_err(|e| e.to_string())?;
        macro_rules! sym {
            ($name:literal) => {
                // SAFETY: the symbol has the signature of cudnn_backend.h / cudnn_graph.h.
                *unsafe { lib.get(concat!($name, "\0").as_bytes()) }
                    .map_err(|e| format!("{}: {e}", $name))?
            };
        }
        let version: unsafe extern "C" fn() -> usize = sym!("cudnnGetVersion");
        let api = Api {
            // SAFETY: no arguments, no preconditions.
            version: unsafe { version() },
            error_string: sym!("cudnnGetErrorString"),
            last_error_string: sym!("cudnnGetLastErrorString"),
            create: sym!("cudnnCreate"),
            set_stream: sym!("cudnnSetStream"),
            create_descriptor: sym!("cudnnBackendCreateDescriptor"),
            destroy_descriptor: sym!("cudnnBackendDestroyDescriptor"),
            set_attribute: sym!("cudnnBackendSetAttribute"),
            get_attribute: sym!("cudnnBackendGetAttribute"),
            finalize: sym!("cudnnBackendFinalize"),
            execute: sym!("cudnnBackendExecute"),
            _lib: lib,
        };
        if api.version < MIN_VERSION {
            return Err(format!("cuDNN {} is older than 9.0", api.version));
        }
        Ok(api)
    }

    /// `Err` with cuDNN's message (and its last detailed one) unless `status` is success.
    fn check(&self, status: Status, what: &str) -> Result<()> {
        if status == 0 {
            return Ok(());
        }
        // SAFETY: returns a static string for any code.
        let name = unsafe { CStr::from_ptr((self.error_string)(status)) }.to_string_lossy();
        let mut buf = [0 as c_char; 512];
        // SAFETY: writes at most buf.len() bytes, NUL-terminated.
        unsafe { (self.last_error_string)(buf.as_mut_ptr(), buf.len()) };
        // SAFETY: NUL-terminated by cuDNN (or all zeros).
        let last = unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy();
        candle_core::bail!("cuDNN {what}: {name} ({status}) {last}")
    }
}

/// The library, loaded once: `$CAPSTAN_CUDNN_LIB`, else `libcudnn.so.9`, else `libcudnn.so`;
/// `Err` says why none loaded.
fn api() -> std::result::Result<&'static Api, &'static str> {
    static API: OnceLock<std::result::Result<Api, String>> = OnceLock::new();
    API.get_or_init(|| {
        let mut names: Vec<String> = std::env::var("CAPSTAN_CUDNN_LIB").into_iter().collect();
        names.extend(["libcudnn.so.9".into(), "libcudnn.so".into()]);
        let mut errors = Vec::new();
        for name in &names {
            match Api::open(name) {
                Ok(api) => return Ok(api),
                Err(e) => errors.push(format!("{name}: {e}")),
            }
        }
        Err(errors.join("; "))
    })
    .as_ref()
    .map_err(String::as_str)
}

/// cuDNN's version if it loads (`91900` for 9.19.0), else why not.
pub(crate) fn version() -> std::result::Result<usize, String> {
    api().map(|a| a.version).map_err(str::to_string)
}

/// One backend descriptor, destroyed on drop.
struct Desc {
    api: &'static Api,
    raw: Raw,
}

impl Desc {
    fn new(api: &'static Api, kind: u32) -> Result<Self> {
        let mut raw = std::ptr::null_mut();
        // SAFETY: writes one descriptor pointer.
        api.check(
            unsafe { (api.create_descriptor)(kind, &mut raw) },
            "create descriptor",
        )?;
        Ok(Self { api, raw })
    }

    /// Sets attribute `name` to `values` of backend type `ty` (`T` must be its C type).
    fn set<T>(&self, name: u32, ty: u32, values: &[T]) -> Result<()> {
        // SAFETY: `values` holds `len` elements of the C type `ty` names.
        let status = unsafe {
            (self.api.set_attribute)(
                self.raw,
                name,
                ty,
                values.len() as i64,
                values.as_ptr().cast(),
            )
        };
        self.api.check(status, &format!("set attribute {name}"))
    }

    fn set_desc(&self, name: u32, d: &Desc) -> Result<()> {
        self.set(name, TYPE_BACKEND_DESCRIPTOR, &[d.raw])
    }

    fn finalize(self, what: &str) -> Result<Self> {
        // SAFETY: a descriptor this struct created.
        let status = unsafe { (self.api.finalize)(self.raw) };
        self.api.check(status, &format!("finalize {what}"))?;
        Ok(self)
    }
}

impl Drop for Desc {
    fn drop(&mut self) {
        // SAFETY: created by cudnnBackendCreateDescriptor, destroyed once.
        unsafe { (self.api.destroy_descriptor)(self.raw) };
    }
}

/// A cuDNN handle (bound to one device's context).
struct Handle(Raw);
// SAFETY: used only under the state's mutex.
unsafe impl Send for Handle {}

/// An execution plan with every descriptor it was built from (kept alive with it).
struct Plan {
    plan: Desc,
    workspace: usize,
    /// The non-virtual uids, by-value ones included, in the graph's order.
    graph: SdpaGraph,
    _keep: Vec<Desc>,
}
// SAFETY: used only under the state's mutex.
unsafe impl Send for Plan {}
unsafe impl Sync for Plan {}

/// Per device: the handle, the stream last given to it, the plans (`None`: cuDNN refused that
/// shape, which then runs on Capstan's kernels) and the workspace.
struct DeviceState {
    handle: Handle,
    stream: usize,
    plans: HashMap<SdpaKey, Option<Arc<Plan>>>,
    workspace: Option<CudaSlice<u8>>,
}

fn states() -> &'static Mutex<HashMap<usize, DeviceState>> {
    static STATES: OnceLock<Mutex<HashMap<usize, DeviceState>>> = OnceLock::new();
    STATES.get_or_init(Default::default)
}

/// The descriptor of one tensor.
fn tensor(api: &'static Api, t: &crate::sdpa_graph::TensorDesc) -> Result<Desc> {
    let d = Desc::new(api, TENSOR_DESCRIPTOR)?;
    d.set(TENSOR_DATA_TYPE, TYPE_DATA_TYPE, &[t.dtype.code()])?;
    d.set(TENSOR_DIMENSIONS, TYPE_INT64, &t.dims)?;
    d.set(TENSOR_STRIDES, TYPE_INT64, &t.strides)?;
    d.set(TENSOR_UNIQUE_ID, TYPE_INT64, &[t.uid])?;
    d.set(TENSOR_BYTE_ALIGNMENT, TYPE_INT64, &[ALIGNMENT as i64])?;
    d.set(TENSOR_IS_VIRTUAL, TYPE_BOOLEAN, &[t.is_virtual])?;
    if t.by_value {
        d.set(TENSOR_IS_BY_VALUE, TYPE_BOOLEAN, &[true])?;
    }
    d.finalize("tensor")
}

/// The descriptors of one operation (its inner descriptor kept in `keep`).
fn operation(
    api: &'static Api,
    op: &Op,
    tensors: &HashMap<i64, Desc>,
    keep: &mut Vec<Desc>,
) -> Result<Desc> {
    let t = |uid: &i64| {
        tensors
            .get(uid)
            .ok_or_else(|| candle_core::Error::Msg(format!("cuDNN graph: no tensor {uid}")))
    };
    let float = crate::sdpa_graph::DataType::Float.code();
    match op {
        Op::Matmul { a, b, c } => {
            let mm = Desc::new(api, MATMUL_DESCRIPTOR)?;
            mm.set(MATMUL_COMP_TYPE, TYPE_DATA_TYPE, &[float])?;
            let mm = mm.finalize("matmul")?;
            let op = Desc::new(api, OPERATION_MATMUL_DESCRIPTOR)?;
            op.set_desc(OPERATION_MATMUL_ADESC, t(a)?)?;
            op.set_desc(OPERATION_MATMUL_BDESC, t(b)?)?;
            op.set_desc(OPERATION_MATMUL_CDESC, t(c)?)?;
            op.set_desc(OPERATION_MATMUL_DESC, &mm)?;
            keep.push(mm);
            op.finalize("matmul operation")
        }
        Op::Pointwise {
            mode,
            precision,
            x,
            b,
            t: cond,
            y,
            axis,
        } => {
            let pw = Desc::new(api, POINTWISE_DESCRIPTOR)?;
            pw.set(POINTWISE_MODE, TYPE_POINTWISE_MODE, &[mode.code()])?;
            pw.set(POINTWISE_MATH_PREC, TYPE_DATA_TYPE, &[precision.code()])?;
            if let Some(axis) = axis {
                pw.set(POINTWISE_AXIS, TYPE_INT64, &[*axis])?;
            }
            let pw = pw.finalize("pointwise")?;
            let op = Desc::new(api, OPERATION_POINTWISE_DESCRIPTOR)?;
            op.set_desc(OPERATION_POINTWISE_PW_DESCRIPTOR, &pw)?;
            op.set_desc(OPERATION_POINTWISE_XDESC, t(x)?)?;
            if let Some(b) = b {
                op.set_desc(OPERATION_POINTWISE_BDESC, t(b)?)?;
            }
            if let Some(c) = cond {
                op.set_desc(OPERATION_POINTWISE_TDESC, t(c)?)?;
            }
            op.set_desc(OPERATION_POINTWISE_YDESC, t(y)?)?;
            op.set(OPERATION_POINTWISE_ALPHA1, TYPE_FLOAT, &[1f32])?;
            op.set(OPERATION_POINTWISE_ALPHA2, TYPE_FLOAT, &[1f32])?;
            keep.push(pw);
            op.finalize("pointwise operation")
        }
        Op::Reduction { max, x, y } => {
            let red = Desc::new(api, REDUCTION_DESCRIPTOR)?;
            let kind = if *max { REDUCE_MAX } else { REDUCE_ADD };
            red.set(REDUCTION_OPERATOR, TYPE_REDUCTION_OPERATOR_TYPE, &[kind])?;
            red.set(REDUCTION_COMP_TYPE, TYPE_DATA_TYPE, &[float])?;
            let red = red.finalize("reduction")?;
            let op = Desc::new(api, OPERATION_REDUCTION_DESCRIPTOR)?;
            op.set_desc(OPERATION_REDUCTION_XDESC, t(x)?)?;
            op.set_desc(OPERATION_REDUCTION_YDESC, t(y)?)?;
            op.set_desc(OPERATION_REDUCTION_DESC, &red)?;
            keep.push(red);
            op.finalize("reduction operation")
        }
    }
}

/// The finalized operation graph of `key` with every descriptor it was built from.
struct Graph {
    graph: SdpaGraph,
    og: Desc,
    keep: Vec<Desc>,
}

/// Builds the backend descriptors of `key`'s graph and finalizes its operation graph: on
/// `handle`'s device, or with none (host-side validation only, as the test below runs it on a
/// machine without a GPU).
fn operation_graph(api: &'static Api, key: &SdpaKey, handle: Option<&Handle>) -> Result<Graph> {
    let graph = sdpa_graph(key);
    let mut keep = Vec::new();
    let mut tensors = HashMap::new();
    for t in &graph.tensors {
        tensors.insert(t.uid, tensor(api, t)?);
    }
    let ops = graph
        .ops
        .iter()
        .map(|op| operation(api, op, &tensors, &mut keep))
        .collect::<Result<Vec<_>>>()?;
    let og = Desc::new(api, OPERATIONGRAPH_DESCRIPTOR)?;
    if let Some(handle) = handle {
        og.set(OPERATIONGRAPH_HANDLE, TYPE_HANDLE, &[handle.0])?;
    }
    let raw_ops: Vec<Raw> = ops.iter().map(|o| o.raw).collect();
    og.set(OPERATIONGRAPH_OPS, TYPE_BACKEND_DESCRIPTOR, &raw_ops)?;
    let og = og.finalize("operation graph")?;
    keep.extend(tensors.into_values());
    keep.extend(ops);
    Ok(Graph { graph, og, keep })
}

/// The engine configurations a finalized heuristics descriptor proposes, best first (those
/// it could not fill, because an engine cannot run here, left out).
fn engine_configs(api: &'static Api, heur: &Desc) -> Result<Vec<Desc>> {
    let mut count = 0i64;
    // SAFETY: with no room given, only the count is written.
    let status = unsafe {
        (api.get_attribute)(
            heur.raw,
            ENGINEHEUR_RESULTS,
            TYPE_BACKEND_DESCRIPTOR,
            0,
            &mut count,
            std::ptr::null_mut(),
        )
    };
    api.check(status, "heuristics result count")?;
    let mut configs = (0..count.max(0))
        .map(|_| Desc::new(api, ENGINECFG_DESCRIPTOR))
        .collect::<Result<Vec<_>>>()?;
    let mut raws: Vec<Raw> = configs.iter().map(|c| c.raw).collect();
    let mut got = 0i64;
    // SAFETY: `raws` holds `count` created engine-config descriptors to fill.
    let status = unsafe {
        (api.get_attribute)(
            heur.raw,
            ENGINEHEUR_RESULTS,
            TYPE_BACKEND_DESCRIPTOR,
            count,
            &mut got,
            raws.as_mut_ptr().cast(),
        )
    };
    api.check(status, "heuristics results")?;
    configs.truncate(got.max(0) as usize);
    Ok(configs)
}

/// Builds and finalizes the plan of `key`: the operation graph, the engine configurations
/// heuristics mode A proposes (then the fallback's), the first whose plan finalizes.
fn build_plan(api: &'static Api, handle: &Handle, key: &SdpaKey) -> Result<Plan> {
    let Graph {
        graph,
        og,
        mut keep,
    } = operation_graph(api, key, Some(handle))?;
    let mut refusals = Vec::new();
    for mode in HEUR_MODES {
        let heur = Desc::new(api, ENGINEHEUR_DESCRIPTOR)?;
        heur.set_desc(ENGINEHEUR_OPERATION_GRAPH, &og)?;
        heur.set(ENGINEHEUR_MODE, TYPE_HEUR_MODE, &[mode])?;
        let heur = match heur.finalize("heuristics") {
            Ok(h) => h,
            Err(e) => {
                refusals.push(e.to_string());
                continue;
            }
        };
        let configs = engine_configs(api, &heur)?;
        for cfg in configs {
            let plan = Desc::new(api, EXECUTION_PLAN_DESCRIPTOR)?;
            plan.set(EXECUTION_PLAN_HANDLE, TYPE_HANDLE, &[handle.0])?;
            plan.set_desc(EXECUTION_PLAN_ENGINE_CONFIG, &cfg)?;
            match plan.finalize("execution plan") {
                Ok(plan) => {
                    let mut workspace = 0i64;
                    let mut n = 0i64;
                    // SAFETY: one i64 written.
                    api.check(
                        unsafe {
                            (api.get_attribute)(
                                plan.raw,
                                EXECUTION_PLAN_WORKSPACE_SIZE,
                                TYPE_INT64,
                                1,
                                &mut n,
                                (&mut workspace as *mut i64).cast(),
                            )
                        },
                        "workspace size",
                    )?;
                    keep.extend([og, heur, cfg]);
                    return Ok(Plan {
                        plan,
                        workspace: workspace.max(0) as usize,
                        graph,
                        _keep: keep,
                    });
                }
                Err(e) => refusals.push(e.to_string()),
            }
        }
    }
    candle_core::bail!(
        "cuDNN has no engine for {key:?}: {}",
        if refusals.is_empty() {
            "no engine configuration proposed".to_string()
        } else {
            refusals.join("; ")
        }
    )
}

/// Why cuDNN refused shapes this process asked for (what `capstan-bench` reports).
pub(crate) fn refusals() -> Vec<String> {
    REFUSALS.lock().map(|r| r.clone()).unwrap_or_default()
}

static REFUSALS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Calls that ran on cuDNN in this process (tests assert the path was taken).
pub(crate) static CALLS: AtomicU64 = AtomicU64::new(0);
/// Plans built (or refused) in this process, and the nanoseconds spent building them: a
/// benchmark's first pass at a new shape pays it, later requests of the shape do not.
pub(crate) static PLANS: AtomicU64 = AtomicU64::new(0);
pub(crate) static PLAN_NANOS: AtomicU64 = AtomicU64::new(0);

/// This device's state (its handle made on first use and bound to candle's stream), under the
/// lock, with the device's context current on this thread.
fn device_state<'a>(
    api: &'static Api,
    dev: &CudaDevice,
    states: &'a mut HashMap<usize, DeviceState>,
) -> Result<&'a mut DeviceState> {
    let stream = dev.cuda_stream();
    stream.context().bind_to_thread().w()?;
    let state = match states.entry(stream.context().ordinal()) {
        std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
        std::collections::hash_map::Entry::Vacant(e) => {
            let mut raw = std::ptr::null_mut();
            // SAFETY: writes one handle; the device's context is current.
            api.check(unsafe { (api.create)(&mut raw) }, "create handle")?;
            e.insert(DeviceState {
                handle: Handle(raw),
                stream: 0,
                plans: HashMap::new(),
                workspace: None,
            })
        }
    };
    let cu_stream = stream.cu_stream() as usize;
    if state.stream != cu_stream {
        // SAFETY: a live handle and candle's live stream.
        let status = unsafe { (api.set_stream)(state.handle.0, cu_stream as Raw) };
        api.check(status, "set stream")?;
        state.stream = cu_stream;
    }
    Ok(state)
}

/// The plan of `key` on this state's device, built on first ask (`None`: cuDNN refused it;
/// the refusal is kept, and not asked again).
fn plan_of(api: &'static Api, state: &mut DeviceState, key: &SdpaKey) -> Option<Arc<Plan>> {
    if !state.plans.contains_key(key) {
        if state.plans.len() >= MAX_PLANS {
            state.plans.clear();
        }
        let started = std::time::Instant::now();
        let built = build_plan(api, &state.handle, key);
        PLANS.fetch_add(1, Ordering::Relaxed);
        PLAN_NANOS.fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        let plan = match built {
            Ok(p) => Some(Arc::new(p)),
            Err(e) => {
                if let Ok(mut r) = REFUSALS.lock() {
                    r.push(e.to_string());
                }
                None
            }
        };
        state.plans.insert(*key, plan);
    }
    state.plans[key].clone()
}

/// Whether cuDNN loads and has a plan for `key` on `dev` (built now if new): a caller running
/// several passes asks before running any.
pub(crate) fn ready(dev: &CudaDevice, key: &SdpaKey) -> Result<bool> {
    let Ok(api) = api() else {
        return Ok(false);
    };
    let mut states = states().lock().expect("cuDNN state");
    let state = device_state(api, dev, &mut states)?;
    Ok(plan_of(api, state, key).is_some())
}

/// Runs attention of `key` on cuDNN into `out` (and the softmax statistics into `stats`, f32
/// per query row, when the key asks for them): `Ok(false)` where cuDNN is not available or
/// has no engine for the shape (the caller then runs its own kernel), `Err` only when an
/// accepted plan fails to execute. `q`, `k`, `v` and `out` start at their first element; `k`,
/// `v` with `key.kv_stride` rows between heads.
#[allow(clippy::too_many_arguments)]
pub(crate) fn attention<T: candle_core::cuda_backend::cudarc::driver::DeviceRepr>(
    dev: &CudaDevice,
    key: SdpaKey,
    scale: f32,
    q: &CudaView<'_, T>,
    k: &CudaView<'_, T>,
    v: &CudaView<'_, T>,
    out: &mut impl DevicePtrMut<T>,
    stats: Option<&mut CudaSlice<f32>>,
) -> Result<bool> {
    let Ok(api) = api() else {
        return Ok(false);
    };
    if key.stats != stats.is_some() {
        candle_core::bail!(
            "cuDNN attention: statistics asked for and not given a buffer, or the reverse"
        )
    }
    let mut states = states().lock().expect("cuDNN state");
    let state = device_state(api, dev, &mut states)?;
    let Some(plan) = plan_of(api, state, &key) else {
        return Ok(false);
    };
    if state.workspace.as_ref().map_or(0, |w| w.len()) < plan.workspace {
        state.workspace = Some(dev.alloc_zeros::<u8>(plan.workspace.max(1))?);
    }
    let stream = dev.cuda_stream();
    let (qp, _qg) = q.device_ptr(&stream);
    let (kp, _kg) = k.device_ptr(&stream);
    let (vp, _vg) = v.device_ptr(&stream);
    let (op, _og) = out.device_ptr_mut(&stream);
    let stats = stats.map(|s| s.device_ptr_mut(&stream));
    let ws = state.workspace.as_ref().map(|w| w.device_ptr(&stream));
    let scalars = plan.graph.scalars(&key, scale);
    let mut uids = Vec::new();
    let mut ptrs: Vec<Raw> = Vec::new();
    for t in plan.graph.tensors.iter().filter(|t| !t.is_virtual) {
        use crate::sdpa_graph::uid;
        let ptr = match t.uid {
            uid::Q => qp as Raw,
            uid::KT => kp as Raw,
            uid::V => vp as Raw,
            uid::O => op as Raw,
            uid::STATS => match &stats {
                Some((p, _)) => *p as Raw,
                None => candle_core::bail!("cuDNN graph: statistics without a buffer"),
            },
            other => match scalars.iter().find(|(u, _)| *u == other) {
                // By-value scalars: host pointers to the values, alive until execute returns.
                Some((_, Scalar::F32(x))) => x as *const f32 as Raw,
                Some((_, Scalar::I32(x))) => x as *const i32 as Raw,
                None => candle_core::bail!("cuDNN graph: no data for tensor {other}"),
            },
        };
        uids.push(t.uid);
        ptrs.push(ptr);
    }
    let pack = Desc::new(api, VARIANT_PACK_DESCRIPTOR)?;
    pack.set(VARIANT_PACK_UNIQUE_IDS, TYPE_INT64, &uids)?;
    pack.set(VARIANT_PACK_DATA_POINTERS, TYPE_VOID_PTR, &ptrs)?;
    let ws_ptr: Raw = ws.as_ref().map_or(std::ptr::null_mut(), |(p, _)| *p as Raw);
    pack.set(VARIANT_PACK_WORKSPACE, TYPE_VOID_PTR, &[ws_ptr])?;
    let pack = pack.finalize("variant pack")?;
    // SAFETY: plan and pack finalized on this handle; every pointer lives past the call (the
    // guards above, the scalars, the workspace in the locked state).
    let status = unsafe { (api.execute)(state.handle.0, plan.plan.raw, pack.raw) };
    api.check(status, "execute")?;
    CALLS.fetch_add(1, Ordering::Relaxed);
    Ok(true)
}

#[cfg(test)]
#[path = "cudnn_tests.rs"]
mod tests;
