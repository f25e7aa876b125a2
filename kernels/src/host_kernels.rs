//! The CUDA C sources run on the host, for tests: a module of [`crate::SOURCES`], exactly the
//! text NVRTC compiles, built by the system C++ compiler after `cuda/host_shim.hpp` (CUDA
//! threads as fibers taking turns at barriers and shuffles) into a shared library, loaded once,
//! and [`launch`]ed over its grid with the arguments a CUDA launch gets. The step's emulator
//! runs its plan through it, so the kernels' own indexing, loops and epilogues meet the CPU
//! oracle without a GPU; reads and writes past a buffer fault on the emulator's guard pages.
//!
//! Only x86-64 (the shim switches fibers in assembly). Tensor-core instructions are the
//! shim's emulations from each warp's fragments. A launch takes its turns in this thread's
//! [`Schedule`] ([`with_schedule`]): tests compare schedules to find races.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::ffi::{c_char, c_void, CString};
use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Mutex, OnceLock};

const SHIM: &str = include_str!("cuda/host_shim.hpp");
/// How the sources are read (preprocessing and building alike), and how they are built.
const LANGUAGE: [&str; 2] = ["-std=c++17", "-DCAPSTAN_HOST_KERNELS"];
const BUILD: [&str; 4] = ["-O2", "-fPIC", "-shared", "-fvisibility=hidden"];

type LaunchFn = unsafe extern "C" fn(
    *const c_char,
    *const u32,
    *const u32,
    u32,
    *mut *mut c_void,
    u32,
    u64,
    *mut c_char,
    usize,
) -> i32;

/// The order in which a launch's blocks, and a block's threads between barriers, take their
/// turns on the host. On a GPU they run at once; a kernel whose result depends on the order
/// has a race (a read of what another thread writes with no barrier between them), which
/// shows here as different results under different schedules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Schedule {
    InOrder,
    Reversed,
    /// A fresh random order at every round of turns, from this seed.
    Shuffled(u64),
}

impl Schedule {
    /// The shim's spelling: the order, and the seed.
    fn code(self) -> (u32, u64) {
        match self {
            Schedule::InOrder => (0, 0),
            Schedule::Reversed => (1, 0),
            Schedule::Shuffled(seed) => (2, seed),
        }
    }
}

thread_local! {
    static SCHEDULE: std::cell::Cell<Schedule> = const { std::cell::Cell::new(Schedule::InOrder) };
    /// `#define` lines put before a module's source ([`with_defines`]).
    static DEFINES: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

/// The orders of turns the kernels' tests compare: in order, reversed, and one shuffle.
pub(crate) const SCHEDULES: [Schedule; 3] = [
    Schedule::InOrder,
    Schedule::Reversed,
    Schedule::Shuffled(0x9e37_79b9),
];

/// Panics unless the output bytes of every one of [`SCHEDULES`] equal the first's: where no
/// float is summed by atomics, a kernel without races computes the same bits in any order of
/// turns.
pub(crate) fn assert_same_in_every_schedule(outputs: &[Vec<u8>; SCHEDULES.len()], what: &str) {
    for (schedule, bytes) in SCHEDULES.iter().zip(outputs).skip(1) {
        assert!(
            *bytes == outputs[0],
            "{what}: the blocks' and threads' order of turns changes the output ({schedule:?}): \
             a race"
        );
    }
}

/// The largest difference of `got` from `want`, relative to `want`'s largest magnitude; a NaN
/// (a value the kernel never wrote) counts as infinitely far.
pub(crate) fn worst_relative_diff(got: &[f32], want: &[f32]) -> f32 {
    let scale = want.iter().fold(1e-6f32, |a, x| a.max(x.abs()));
    got.iter().zip(want).fold(0f32, |worst, (g, w)| {
        let diff = (g - w).abs() / scale;
        if diff.is_nan() {
            f32::INFINITY
        } else {
            worst.max(diff)
        }
    })
}

/// Runs `f` with this thread's launches taking their turns in `schedule`'s order.
pub(crate) fn with_schedule<R>(schedule: Schedule, f: impl FnOnce() -> R) -> R {
    struct Restore(Schedule);
    impl Drop for Restore {
        fn drop(&mut self) {
            SCHEDULE.with(|s| s.set(self.0));
        }
    }
    let _restore = Restore(SCHEDULE.with(|s| s.replace(schedule)));
    f()
}

/// Runs `f` with this thread's launches of modules built with `defines` (`#define` lines) put
/// before their sources, as NVRTC's `-D` options set them: each such build a module of its own.
#[cfg(test)]
pub(crate) fn with_defines<R>(defines: &str, f: impl FnOnce() -> R) -> R {
    struct Restore(String);
    impl Drop for Restore {
        fn drop(&mut self) {
            DEFINES.with(|d| *d.borrow_mut() = std::mem::take(&mut self.0));
        }
    }
    let _restore = Restore(DEFINES.with(|d| d.replace(defines.to_string())));
    f()
}

/// Loaded modules. One lock for every launch: a module's scheduler state is global.
fn modules() -> &'static Mutex<HashMap<String, LaunchFn>> {
    static MODULES: OnceLock<Mutex<HashMap<String, LaunchFn>>> = OnceLock::new();
    MODULES.get_or_init(Default::default)
}

/// The source as NVRTC gets it, with dynamic shared memory (`extern __shared__ T name[];`,
/// which has no host spelling) taken from the shim.
fn host_source(src: &str) -> String {
    src.lines()
        .map(|line| {
            let Some(rest) = line.trim_start().strip_prefix("extern __shared__ ") else {
                return line.to_string();
            };
            let words: Vec<&str> = rest
                .split_whitespace()
                .filter(|w| !w.starts_with("__align__"))
                .collect();
            let Some(at) = words.iter().position(|w| w.ends_with("[];")) else {
                return line.to_string();
            };
            let (ty, name) = (words[..at].join(" "), words[at].trim_end_matches("[];"));
            format!(
                "{ty}* {name} = ({ty}*)chost::dynamic_shared_memory(); {}",
                words[at + 1..].join(" ")
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The module's shared library, built on first use into the temp directory (keyed by the
/// shim, the source and the flags; written under a temporary name, then renamed).
fn build(module: &str) -> Result<PathBuf, String> {
    build_source(module, source(module)?)
}

/// The CUDA C source of `module`, as NVRTC gets it (`crate::SOURCES`).
fn source(module: &str) -> Result<&'static str, String> {
    crate::SOURCES
        .iter()
        .find(|(m, _)| *m == module)
        .map(|(_, src)| *src)
        .ok_or_else(|| format!("no CUDA module {module}"))
}

/// [`build`] of the CUDA C source `src`, called `module`.
fn build_source(module: &str, src: &str) -> Result<PathBuf, String> {
    let src = host_source(src);
    let mut h = DefaultHasher::new();
    (SHIM, &src, LANGUAGE, BUILD).hash(&mut h);
    let dir = std::env::temp_dir()
        .join("capstan-host-kernels")
        .join(format!("{module}-{:016x}", h.finish()));
    let lib = dir.join("module.so");
    if lib.exists() {
        return Ok(lib);
    }
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    // Removed when dropped, whether the build succeeds or not.
    let work = tempfile::tempdir_in(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let tmp = work.path();
    std::fs::write(tmp.join("shim.hpp"), SHIM).map_err(|e| e.to_string())?;
    std::fs::write(tmp.join("module.cu"), &src).map_err(|e| e.to_string())?;
    let cxx = |args: &[&str]| -> Result<String, String> {
        let out = Command::new("c++")
            .current_dir(tmp)
            .args(["-x", "c++", "-include", "shim.hpp"])
            .args(LANGUAGE)
            .args(args)
            .output()
            .map_err(|e| format!("the system C++ compiler (c++): {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "{module} does not build for the host:\n{}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    // The entry points, as the preprocessor spells them out of their macros.
    let pre = cxx(&["-E", "-P", "module.cu"])?;
    let marker = "extern \"C\" __attribute__((used)) void ";
    let entries: Vec<&str> = pre
        .match_indices(marker)
        .map(|(i, _)| {
            let rest = &pre[i + marker.len()..];
            rest[..rest
                .find(|c: char| !c.is_alphanumeric() && c != '_')
                .unwrap_or(0)]
                .trim()
        })
        .collect();
    if entries.is_empty() {
        return Err(format!("{module}: no entry points found"));
    }
    let mut unit = src;
    unit.push_str("\nstatic const chost::Entry chost_entries[] = {\n");
    for e in &entries {
        unit.push_str(&format!(
            "    {{\"{e}\", &chost::Invoker<decltype(&{e})>::call<&{e}>}},\n"
        ));
    }
    unit.push_str(
        "};\nextern \"C\" __attribute__((visibility(\"default\"))) int chost_launch(\
         const char* name, const unsigned* grid, const unsigned* block, unsigned shared, \
         void** params, unsigned order, unsigned long long seed, char* err, size_t err_len) \
         {\n    return chost::launch(chost_entries, sizeof chost_entries / sizeof \
         chost_entries[0], name, grid, block, shared, params, order, seed, err, err_len);\n}\n",
    );
    std::fs::write(tmp.join("unit.cu"), unit).map_err(|e| e.to_string())?;
    let mut args: Vec<&str> = BUILD.to_vec();
    args.extend(["unit.cu", "-o", "module.so"]);
    cxx(&args)?;
    std::fs::rename(tmp.join("module.so"), &lib).map_err(|e| e.to_string())?;
    Ok(lib)
}

fn load(lib: &std::path::Path) -> Result<LaunchFn, String> {
    let path = CString::new(lib.to_string_lossy().as_bytes()).map_err(|e| e.to_string())?;
    // SAFETY: the library is ours (built above); it is never closed, so the function pointer
    // stays valid for the process.
    unsafe {
        let handle = libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
        if handle.is_null() {
            let e = std::ffi::CStr::from_ptr(libc::dlerror());
            return Err(format!("{}: {}", lib.display(), e.to_string_lossy()));
        }
        let f = libc::dlsym(handle, c"chost_launch".as_ptr());
        if f.is_null() {
            return Err(format!("{}: no chost_launch", lib.display()));
        }
        Ok(std::mem::transmute::<*mut c_void, LaunchFn>(f))
    }
}

/// A kernel's parameters as a CUDA launch passes them: each value's bytes, in order.
#[derive(Debug, Default)]
pub(crate) struct Params(Vec<Vec<u64>>);

impl Params {
    /// Appends `value` (plain old data with the C layout of the kernel's parameter).
    pub(crate) fn push<T: Copy>(&mut self, value: T) -> &mut Self {
        let n = std::mem::size_of::<T>();
        let mut buf = vec![0u64; n.div_ceil(8).max(1)];
        // SAFETY: `buf` holds at least `n` bytes; `T` is `Copy`, read as bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(
                (&value as *const T).cast::<u8>(),
                buf.as_mut_ptr().cast::<u8>(),
                n,
            )
        };
        self.0.push(buf);
        self
    }
}

/// Runs entry point `name` of `module` over `grid` blocks of `block` threads with `shared`
/// bytes of dynamic shared memory. The addresses among the parameters must be host memory the
/// kernel may read and write.
pub(crate) fn launch(
    module: &str,
    name: &str,
    grid: (u32, u32, u32),
    block: (u32, u32, u32),
    shared: u32,
    params: &mut Params,
) -> Result<(), String> {
    let defines = DEFINES.with(|d| d.borrow().clone());
    if defines.is_empty() {
        return launch_with(module, build, name, grid, block, shared, params);
    }
    let build_variant = |_: &str| -> Result<PathBuf, String> {
        let src = format!("{defines}\n{}", source(module)?);
        build_source(&format!("{module}-variant"), &src)
    };
    let key = format!("{module} with {defines}");
    launch_with(&key, build_variant, name, grid, block, shared, params)
}

/// [`launch`] of a module `build` builds (tests of the shim build theirs from their own
/// source).
fn launch_with(
    module: &str,
    build: impl Fn(&str) -> Result<PathBuf, String>,
    name: &str,
    grid: (u32, u32, u32),
    block: (u32, u32, u32),
    shared: u32,
    params: &mut Params,
) -> Result<(), String> {
    let mut loaded = modules().lock().unwrap_or_else(|e| e.into_inner());
    let f = match loaded.get(module) {
        Some(f) => *f,
        None => {
            let f = load(&build(module)?)?;
            loaded.insert(module.to_string(), f);
            f
        }
    };
    let mut ptrs: Vec<*mut c_void> = params.0.iter_mut().map(|v| v.as_mut_ptr().cast()).collect();
    let c_name = CString::new(name).map_err(|e| e.to_string())?;
    let (g, b) = ([grid.0, grid.1, grid.2], [block.0, block.1, block.2]);
    let (order, seed) = SCHEDULE.with(|s| s.get()).code();
    let mut err = vec![0 as c_char; 1024];
    // SAFETY: the entry point reads `ptrs` as its parameter list (the caller's parameters are
    // its signature, field for field, as the GPU launch passes them), and the memory the
    // parameters name is the caller's.
    let rc = unsafe {
        f(
            c_name.as_ptr(),
            g.as_ptr(),
            b.as_ptr(),
            shared,
            ptrs.as_mut_ptr(),
            order,
            seed,
            err.as_mut_ptr(),
            err.len(),
        )
    };
    if rc != 0 {
        // SAFETY: the shim writes a NUL-terminated message within `err`.
        let msg = unsafe { std::ffi::CStr::from_ptr(err.as_ptr()) };
        return Err(msg.to_string_lossy().into_owned());
    }
    Ok(())
}

#[cfg(test)]
#[path = "host_kernels_tests.rs"]
mod tests;
