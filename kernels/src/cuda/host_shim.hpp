// CUDA C on the host, for tests (kernels/src/host_kernels.rs): a kernel source as NVRTC
// compiles it, built by the system C++ compiler with this header first, so that the kernels'
// own code runs without a GPU against the CPU references. Every CUDA thread is a fiber with its
// own stack; a block's fibers take turns on the calling thread, switching at __syncthreads and
// at warp shuffles (a shuffle is a warp barrier: lanes post their values, then read), and blocks
// run one after another — so `__shared__` variables can be function statics.
//
// What it checks beyond the arithmetic: threads waiting at barriers that can never all be
// reached (divergent __syncthreads or shuffles: reported as a deadlock; a thread that has
// returned counts as arrived, as on a GPU), a full-mask shuffle in a warp one of whose
// lanes has returned (undefined on a GPU), dynamic shared memory read before it is written (it
// starts as NaN bytes), and — through the caller's guard pages — reads and writes past a buffer.
// Races between threads cannot happen here (they never run at once), but they show as results
// that depend on the order of turns: a launch takes a schedule — blocks and a block's threads
// in order, reversed, or shuffled afresh at every round of turns from a seed — and tests compare
// what each schedule computes (a thread reading what another writes without a barrier between
// reads it before the write in one order and after it in another). What it cannot: timing,
// tensor-core `asm` (the kernels' mma wrappers call the emulations below instead).
#pragma once
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <type_traits>
#include <utility>
#include <vector>

#define __global__ __attribute__((used))
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __noinline__ __attribute__((noinline))
#define __align__(n) alignas(n)
#define __launch_bounds__(...)

struct uint3 {
    unsigned x, y, z;
};
// 16-byte vector loads, aligned as on a GPU.
struct alignas(16) uint4 {
    unsigned x, y, z, w;
};
struct alignas(16) float4 {
    float x, y, z, w;
};
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }

namespace chost {

// One CUDA thread.
struct Fiber {
    uint3 tid;
    int warp, lane;
    void* sp;
    enum State { Runnable, AtBlock, AtWarp, Done } state;
};

inline Fiber* cur = nullptr;
inline void* sched_sp = nullptr;
inline uint3 block_idx, block_dim, grid_dim;
inline void (*entry_call)(void**) = nullptr;
inline void** entry_params = nullptr;
inline std::vector<unsigned char> dynamic_shared;
inline char error[512];
inline bool failed = false;

// The order of turns (host_kernels.rs's `Schedule`): 0 in order, 1 reversed, 2 shuffled at
// every round by a xorshift generator from `seed`.
inline unsigned schedule = 0;
inline uint64_t seed = 1;

inline uint64_t next_random() {
    seed ^= seed << 13;
    seed ^= seed >> 7;
    seed ^= seed << 17;
    return seed;
}

// 0 .. n-1 in the schedule's order.
inline void arrange(std::vector<int>& order, int n) {
    order.resize(n);
    for (int i = 0; i < n; i++) order[i] = schedule == 1 ? n - 1 - i : i;
    if (schedule == 2)
        for (int i = n - 1; i > 0; i--) std::swap(order[i], order[next_random() % (uint64_t)(i + 1)]);
}

// Per warp: the values lanes post for a shuffle (as 8 bytes), live and exited lanes, lanes at
// the warp barrier.
struct Warp {
    uint64_t slot[32];
    // A tensor-core instruction's operands, 6 words a lane.
    uint32_t frag[32][6];
    int live, exited, waiting;
};
inline std::vector<Warp> warps;
inline std::vector<Fiber> fibers;
inline int live = 0, block_waiting = 0;

// Stacks: one per thread of the largest block, a guard page below each.
constexpr size_t STACK = 16 * 1024;
constexpr int MAX_THREADS = 1024;
inline unsigned char* stacks = nullptr;

inline void fail(const char* what) {
    if (!failed) {
        snprintf(error, sizeof error, "%s (block %u,%u,%u, thread %u,%u,%u)", what, block_idx.x,
                 block_idx.y, block_idx.z, cur ? cur->tid.x : 0, cur ? cur->tid.y : 0,
                 cur ? cur->tid.z : 0);
        failed = true;
    }
}

}  // namespace chost

// Saves the callee-saved registers and the stack pointer at *save, then resumes the context
// whose stack pointer is `to` (x86-64 System V).
extern "C" void chost_switch(void** save, void* to);
asm(R"(
.text
.hidden chost_switch
.globl chost_switch
.type chost_switch,@function
chost_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
)");

namespace chost {

inline void yield() { chost_switch(&cur->sp, sched_sp); }

// A thread's life: the kernel with the launch's parameters, then back to the scheduler for good.
[[noreturn]] inline void trampoline() {
    Fiber* f = cur;
    entry_call(entry_params);
    f->state = Fiber::Done;
    live--;
    warps[f->warp].live--;
    warps[f->warp].exited++;
    chost_switch(&f->sp, sched_sp);
    __builtin_unreachable();
}

inline void block_barrier() {
    cur->state = Fiber::AtBlock;
    block_waiting++;
    yield();
}

inline void warp_barrier() {
    cur->state = Fiber::AtWarp;
    warps[cur->warp].waiting++;
    yield();
}

template <typename T>
inline T exchange(T v, int src) {
    static_assert(sizeof(T) <= 8, "a shuffled value is at most 8 bytes");
    Warp& w = warps[cur->warp];
    uint64_t bits = 0;
    memcpy(&bits, &v, sizeof(T));
    w.slot[cur->lane] = bits;
    warp_barrier();
    const uint64_t got = w.slot[src & 31];
    warp_barrier();
    T out;
    memcpy(&out, &got, sizeof(T));
    return out;
}

// A warp's butterfly reduction (`v = op(v, shuffle_xor(v, o))` for o = 16, 8, 4, 2, 1) in
// one exchange instead of five, each lane's result computed in the GPU's order.
template <typename T, typename Op>
inline T warp_butterfly(T v, Op op) {
    Warp& w = warps[cur->warp];
    memcpy(&w.slot[cur->lane], &v, sizeof(T));
    warp_barrier();
    T vals[32];
    for (int l = 0; l < 32; l++) memcpy(&vals[l], &w.slot[l], sizeof(T));
    warp_barrier();
    for (int o = 16; o > 0; o >>= 1) {
        T next[32];
        for (int l = 0; l < 32; l++) next[l] = op(vals[l], vals[l ^ o]);
        memcpy(vals, next, sizeof vals);
    }
    return vals[cur->lane];
}

// The start of an emulated mma.sync: this lane posts its A (4 words) and B (2 words)
// fragments, and once every lane has, the warp's are readable in `frag`.
inline Warp& post_fragments(const uint32_t* a, uint32_t b0, uint32_t b1) {
    Warp& w = warps[cur->warp];
    uint32_t* mine = w.frag[cur->lane];
    for (int i = 0; i < 4; i++) mine[i] = a[i];
    mine[4] = b0;
    mine[5] = b1;
    warp_barrier();
    return w;
}

// The end of an emulated mma.sync with 16 x 8 outputs once every lane has posted its fragments:
// this lane's C elements (c0, c1: row g, cols 2t, 2t+1; c2, c3: row g+8) += sum over k of
// A(row, k) B(k, col), in f32, k in order; then the warp's fragments are free again.
template <int K, typename FA, typename FB>
inline void mma_finish(float* c, FA A, FB B) {
    const int g = cur->lane >> 2, t = cur->lane & 3;
    float d[4];
    for (int e = 0; e < 4; e++) {
        const int r = g + 8 * (e >> 1), n = 2 * t + (e & 1);
        float acc = 0.f;
        for (int k = 0; k < K; k++) acc += A(r, k) * B(k, n);
        d[e] = c[e] + acc;
    }
    warp_barrier();
    for (int e = 0; e < 4; e++) c[e] = d[e];
}

// mma.sync.aligned.m16n8k16.row.col.f32 on 16-bit inputs read by `L::ld`: c += A B, each
// lane's fragments as the PTX ISA lays them out ("Matrix Fragments for mma.m16n8k16"), lane =
// 4 g + t: A (16 x 16) a0 (row g, cols 2t, 2t+1), a1 (row g+8), a2 (row g, cols 2t+8, 2t+9),
// a3 (row g+8, cols 2t+8, 2t+9); B (16 x 8) b0 (rows 2t, 2t+1, col g), b1 (rows 2t+8, 2t+9);
// C (16 x 8) c0, c1 (row g, cols 2t, 2t+1), c2, c3 (row g+8). A register's lower half holds
// the element of lower index. Products summed in f32, k in order.
template <typename L>
inline void mma_m16n8k16(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
    Warp& w = post_fragments(a, b0, b1);
    auto elem = [&](int lane, int reg, int k) {
        return L::ld((unsigned short)(w.frag[lane][reg] >> (16 * (k % 2))));
    };
    auto A = [&](int r, int k) {
        return elem(4 * (r % 8) + (k % 8) / 2, (r >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0), k);
    };
    auto B = [&](int k, int n) { return elem(4 * n + (k % 8) / 2, 4 + (k >= 8 ? 1 : 0), k); };
    mma_finish<16>(c, A, B);
}

// cvt.rna.tf32.f32: f32 rounded to TF32's 10 fraction bits, to nearest with ties away from
// zero, kept in an f32's bits (the low 13 zero); NaN and infinities unchanged.
inline uint32_t tf32(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7f800000u) == 0x7f800000u) return u;
    return (u + 0x1000u) & 0xffffe000u;
}

// mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32: c += A B on TF32 inputs ("Matrix
// Fragments for mma.m16n8k8", .tf32), lane = 4 g + t: A (16 x 8) a0 (row g, col t), a1 (row
// g+8, col t), a2 (row g, col t+4), a3 (row g+8, col t+4); B (8 x 8) b0 (row t, col g), b1 (row
// t+4, col g); C as m16n8k16's. The hardware reads an operand's upper 19 bits: the low 13 are
// dropped here too. Products summed in f32, k in order.
inline void mma_m16n8k8_tf32(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
    Warp& w = post_fragments(a, b0, b1);
    auto elem = [&](int lane, int reg) {
        const uint32_t u = w.frag[lane][reg] & 0xffffe000u;
        float f;
        memcpy(&f, &u, 4);
        return f;
    };
    auto A = [&](int r, int k) { return elem(4 * (r % 8) + k % 4, (r >= 8 ? 1 : 0) + (k >= 4 ? 2 : 0)); };
    auto B = [&](int k, int n) { return elem(4 * n + k % 4, 4 + (k >= 4 ? 1 : 0)); };
    mma_finish<8>(c, A, B);
}

// ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16: lanes 8j..8j+7 give the addresses of the rows
// of matrix j (16-byte aligned, in shared memory); lane 4g + t receives in r[j] matrix j's
// elements (row 2t, col g) and (row 2t+1, col g), the first in the lower half.
inline void ldmatrix_x4_trans(uint32_t* r, const unsigned short* row) {
    const unsigned char* base = dynamic_shared.data();
    const unsigned char* p = (const unsigned char*)row;
    if (((uintptr_t)row & 15) != 0) fail("ldmatrix: a row address not 16-byte aligned");
    if (p < base || p + 16 > base + dynamic_shared.size())
        fail("ldmatrix: a row outside dynamic shared memory");
    Warp& w = warps[cur->warp];
    w.slot[cur->lane] = (uint64_t)(uintptr_t)row;
    warp_barrier();
    const int g = cur->lane >> 2, t = cur->lane & 3;
    for (int j = 0; j < 4; j++) {
        const unsigned short* r0 = (const unsigned short*)(uintptr_t)w.slot[8 * j + 2 * t];
        const unsigned short* r1 = (const unsigned short*)(uintptr_t)w.slot[8 * j + 2 * t + 1];
        r[j] = failed ? 0u : (uint32_t)r0[g] | ((uint32_t)r1[g] << 16);
    }
    warp_barrier();
}

// Releases whichever barrier every live thread it waits for has reached; false if none.
inline bool release() {
    bool any = false;
    if (block_waiting > 0 && block_waiting == live) {
        for (Fiber& f : fibers)
            if (f.state == Fiber::AtBlock) f.state = Fiber::Runnable;
        block_waiting = 0;
        any = true;
    }
    for (size_t i = 0; i < warps.size(); i++) {
        Warp& w = warps[i];
        if (w.waiting == 0 || w.waiting != w.live) continue;
        if (w.exited > 0) {
            fail("a full-mask warp shuffle after a lane of the warp returned");
            return false;
        }
        const size_t end = std::min(fibers.size(), 32 * (i + 1));
        for (size_t t = 32 * i; t < end; t++)
            if (fibers[t].state == Fiber::AtWarp) fibers[t].state = Fiber::Runnable;
        w.waiting = 0;
        any = true;
    }
    return any;
}

inline void run_block(int threads) {
    fibers.assign(threads, Fiber{});
    warps.assign((threads + 31) / 32, Warp{});
    live = threads;
    block_waiting = 0;
    for (int i = 0; i < threads; i++) {
        Fiber& f = fibers[i];
        f.tid = {i % block_dim.x, (i / block_dim.x) % block_dim.y, i / (block_dim.x * block_dim.y)};
        f.warp = i / 32;
        f.lane = i % 32;
        f.state = Fiber::Runnable;
        warps[f.warp].live++;
        // The first switch "returns" into the trampoline, with the stack as a call leaves it.
        void** sp = (void**)(stacks + (size_t)(i + 1) * STACK);
        *--sp = nullptr;
        *--sp = (void*)&trampoline;
        for (int r = 0; r < 6; r++) *--sp = nullptr;
        f.sp = sp;
    }
    std::vector<int> turns;
    while (live > 0 && !failed) {
        bool ran = false;
        arrange(turns, threads);
        for (int i : turns) {
            Fiber& f = fibers[i];
            if (f.state != Fiber::Runnable) continue;
            cur = &f;
            chost_switch(&sched_sp, f.sp);
            ran = true;
            if (failed) break;
        }
        if (failed || live == 0) break;
        if (!release() && !ran && !failed)
            fail("deadlock: threads wait at a barrier others never reach");
    }
    cur = nullptr;
}

struct Entry {
    const char* name;
    void (*call)(void**);
};

template <typename F>
struct Invoker;
template <typename... A>
struct Invoker<void (*)(A...)> {
    template <void (*F)(A...), size_t... I>
    static void with(void** p, std::index_sequence<I...>) {
        F(*static_cast<std::remove_cv_t<std::remove_reference_t<A>>*>(p[I])...);
    }
    template <void (*F)(A...)>
    static void call(void** p) {
        with<F>(p, std::index_sequence_for<A...>{});
    }
};

inline const char* launching = "";

// A fault inside a kernel (a guard page past a buffer, or below a thread's stack) names the
// kernel, block and thread before the process dies.
inline void on_fault(int sig, siginfo_t* info, void*) {
    char msg[400];
    const int n = snprintf(msg, sizeof msg,
                           "host kernels: %s, block (%u,%u,%u), thread (%u,%u,%u) touched %p, "
                           "outside every buffer\n",
                           launching, block_idx.x, block_idx.y, block_idx.z, cur ? cur->tid.x : 0,
                           cur ? cur->tid.y : 0, cur ? cur->tid.z : 0, info->si_addr);
    if (write(2, msg, n > 0 ? (size_t)n : 0) < 0) {
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

// Runs entry point `name` of `entries` over the grid, blocks and threads taking turns in the
// order `order` (with `order_seed`) says; 0, or 1 with the reason in `err`.
inline int launch(const Entry* entries, size_t n, const char* name, const unsigned* grid,
                  const unsigned* block, unsigned shared, void** params, unsigned order,
                  uint64_t order_seed, char* err, size_t err_len) {
    failed = false;
    schedule = order;
    seed = order_seed | 1;
    error[0] = 0;
    const Entry* e = nullptr;
    for (size_t i = 0; i < n; i++)
        if (!strcmp(entries[i].name, name)) e = &entries[i];
    const long threads = (long)block[0] * block[1] * block[2];
    if (!e) {
        snprintf(err, err_len, "no entry point %s", name);
        return 1;
    }
    if (threads < 1 || threads > MAX_THREADS) {
        snprintf(err, err_len, "%s: %ld threads a block", name, threads);
        return 1;
    }
    if (!stacks) {
        const long page = sysconf(_SC_PAGESIZE);
        void* m = mmap(nullptr, STACK * MAX_THREADS, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED) {
            snprintf(err, err_len, "no memory for the threads' stacks");
            return 1;
        }
        stacks = (unsigned char*)m;
        for (int i = 0; i < MAX_THREADS; i++) mprotect(stacks + (size_t)i * STACK, page, PROT_NONE);
    }
    struct sigaction fault = {}, old_segv, old_bus;
    fault.sa_sigaction = on_fault;
    fault.sa_flags = SA_SIGINFO;
    sigaction(SIGSEGV, &fault, &old_segv);
    sigaction(SIGBUS, &fault, &old_bus);
    launching = name;
    entry_call = e->call;
    entry_params = params;
    block_dim = {block[0], block[1], block[2]};
    grid_dim = {grid[0], grid[1], grid[2]};
    const long blocks = (long)grid[0] * grid[1] * grid[2];
    std::vector<int> order_of_blocks;
    arrange(order_of_blocks, (int)blocks);
    for (int i : order_of_blocks) {
        if (failed) break;
        block_idx = {i % grid[0], (i / grid[0]) % grid[1], i / (grid[0] * grid[1])};
        // Shared memory is not initialised on a GPU: NaN bytes here.
        dynamic_shared.assign(shared, 0xff);
        run_block((int)threads);
    }
    sigaction(SIGSEGV, &old_segv, nullptr);
    sigaction(SIGBUS, &old_bus, nullptr);
    if (failed) {
        snprintf(err, err_len, "%s: %s", name, error);
        return 1;
    }
    return 0;
}

inline void* dynamic_shared_memory() { return dynamic_shared.data(); }

inline float h2f(unsigned short h) {
    _Float16 x;
    memcpy(&x, &h, 2);
    return (float)x;
}

inline unsigned short f2h(float f) {
    const _Float16 x = (_Float16)f;
    unsigned short h;
    memcpy(&h, &x, 2);
    return h;
}

}  // namespace chost

#define threadIdx (chost::cur->tid)
#define blockIdx (chost::block_idx)
#define blockDim (chost::block_dim)
#define gridDim (chost::grid_dim)

inline void __syncthreads() { chost::block_barrier(); }
inline void __syncwarp(unsigned = 0xffffffffu) {
    chost::warp_barrier();
}
template <typename T>
inline T __shfl_xor_sync(unsigned, T v, int mask) {
    return chost::exchange(v, chost::cur->lane ^ mask);
}
template <typename T>
inline T __shfl_sync(unsigned, T v, int src) {
    return chost::exchange(v, src);
}

template <typename To, typename From>
inline To chost_bits(From f) {
    static_assert(sizeof(To) == sizeof(From), "a bit cast keeps the size");
    To t;
    memcpy(&t, &f, sizeof t);
    return t;
}
inline float __int_as_float(int i) { return chost_bits<float>(i); }
inline float __uint_as_float(unsigned u) { return chost_bits<float>(u); }
inline unsigned __float_as_uint(float f) { return chost_bits<unsigned>(f); }
inline int __float_as_int(float f) { return chost_bits<int>(f); }
inline float __expf(float x) { return expf(x); }
// Threads never run at once: a read-modify-write is atomic as it stands.
template <typename T>
inline T atomicAdd(T* p, T v) {
    const T old = *p;
    *p = old + v;
    return old;
}
inline void __threadfence() {}
template <typename T>
inline T __ldcg(const T* p) {
    return *p;
}

template <typename A, typename B>
inline std::common_type_t<A, B> min(A a, B b) {
    return a < b ? a : b;
}
template <typename A, typename B>
inline std::common_type_t<A, B> max(A a, B b) {
    return a < b ? b : a;
}
