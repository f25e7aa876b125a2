// The decoding step of a Llama-family model as a few fused kernels over static buffers, so
// that one step is a fixed sequence of launches a CUDA graph can capture and replay
// (capstan_kernels::step; its CPU reference is step/reference.rs). Per layer: RMSNorm into the
// activation type; q, k and v products (f32, bias added); RoPE on q and k with the new key and
// value written into the layer's cache row; attention (attention_decode.cu); the output
// product added to the f32 residual; RMSNorm; gate and up products with SwiGLU; the down
// product added to the residual. What changes from step to step (the token, its position,
// the cache row, the keys' count) is read from a small device buffer, `StepState`, written
// before each replay.
//
// Weights: dense (f32, bf16, f16) or GGML blocks (ggml_units.cuh), read in place.
#define GEMV_WARPS 8

struct StepState {
    int token, pos, slot, len;
};

// 8 values of a row of 16-bit elements at `p` (16-byte aligned).
template <typename L>
__device__ __forceinline__ void load8(const typename L::T* p, float* y) {
    if (sizeof(typename L::T) == 2) {
        const uint4 raw = *(const uint4*)p;
        const u16* h = (const u16*)&raw;
        for (int i = 0; i < 8; i++) y[i] = L::ld((typename L::T)h[i]);
    } else {
        const float4 a = *(const float4*)p, b = *((const float4*)p + 1);
        y[0] = a.x, y[1] = a.y, y[2] = a.z, y[3] = a.w;
        y[4] = b.x, y[5] = b.y, y[6] = b.z, y[7] = b.w;
    }
}

// One lane's share of the dot product of a dense row with x; `vec`: rows and x are 16-byte
// aligned and cols a multiple of 8 (8 values a load), else one value at a time.
template <typename W, typename L>
__device__ float dense_dot(const u8* row_bytes, const typename L::T* __restrict__ x, int cols,
                           int vec, int lane) {
    const typename W::T* w = (const typename W::T*)row_bytes;
    float acc = 0.f;
    if (vec) {
        // Four 16-byte loads in flight a lane: a batch-1 product is bound by how many bytes
        // are on their way, not by arithmetic.
#pragma unroll 4
        for (int c = lane * 8; c < cols; c += 256) {
            float wv[8], xv[8];
            load8<W>(w + c, wv);
            load8<L>(x + c, xv);
            for (int i = 0; i < 8; i++) acc += wv[i] * xv[i];
        }
    } else {
        for (int c = lane; c < cols; c += 32) acc += W::ld(w[c]) * L::ld(x[c]);
    }
    return acc;
}

// One lane's share for a GGML row: units lane, lane + 32, ...
template <typename Q, typename L>
__device__ float ggml_dot(const u8* row, const typename L::T* __restrict__ x, int cols, int vec,
                          int lane) {
    float acc = 0.f;
    const int units = cols / 32;
    for (int u = lane; u < units; u += 32) {
        float wv[32];
        Q::unit(row, u, wv);
        const typename L::T* xu = x + u * 32;
        if (vec) {
            for (int i = 0; i < 32; i += 8) {
                float xv[8];
                load8<L>(xu + i, xv);
                for (int j = 0; j < 8; j++) acc += wv[i + j] * xv[j];
            }
        } else {
            for (int i = 0; i < 32; i++) acc += wv[i] * L::ld(xu[i]);
        }
    }
    return acc;
}

// One lane's share of a row's dot product with x: a dense row, or a GGML one.
template <typename W, typename L, bool DENSE>
__device__ float row_dot(const u8* row, const typename L::T* x, int cols, int vec, int lane) {
    if constexpr (DENSE) {
        return dense_dot<W, L>(row, x, cols, vec, lane);
    } else {
        return ggml_dot<W, L>(row, x, cols, vec, lane);
    }
}

// Matrix-vector products of up to three matrices of one format on one input, their rows
// stacked (q, k, v), or of two (gate, up) combined by SwiGLU. A warp per output row.
struct GemvArgs {
    long long rows0, rows1, rows2;  // rows of each matrix (0: absent)
    long long row_bytes;            // bytes of one row (every matrix has `cols` columns)
    int cols;
    int mode;  // 0: out_f32 = W x + b; 1: out_f32 += W x + b; 2: out_t = silu(W0 x) * (W1 x)
    int vec;
};

template <typename W, typename L, bool DENSE>
__device__ void gemv(const u8* __restrict__ w0, const u8* __restrict__ w1,
                     const u8* __restrict__ w2, const float* __restrict__ b0,
                     const float* __restrict__ b1, const float* __restrict__ b2,
                     const typename L::T* __restrict__ x, float* __restrict__ out_f32,
                     typename L::T* __restrict__ out_t, GemvArgs a) {
    const int lane = threadIdx.x % 32;
    const long long r = (long long)blockIdx.x * GEMV_WARPS + threadIdx.x / 32;
    const long long total = a.mode == 2 ? a.rows0 : a.rows0 + a.rows1 + a.rows2;
    if (r >= total) return;
    if (a.mode == 2) {
        float g = warp_sum(row_dot<W, L, DENSE>(w0 + r * a.row_bytes, x, a.cols, a.vec, lane));
        float u = warp_sum(row_dot<W, L, DENSE>(w1 + r * a.row_bytes, x, a.cols, a.vec, lane));
        if (lane == 0) out_t[r] = L::st(g / (1.f + __expf(-g)) * u);
        return;
    }
    const u8* w;
    const float* b;
    long long i;
    if (r < a.rows0) {
        w = w0, b = b0, i = r;
    } else if (r < a.rows0 + a.rows1) {
        w = w1, b = b1, i = r - a.rows0;
    } else {
        w = w2, b = b2, i = r - a.rows0 - a.rows1;
    }
    float v = warp_sum(row_dot<W, L, DENSE>(w + i * a.row_bytes, x, a.cols, a.vec, lane));
    if (lane == 0) {
        if (b) v += b[i];
        out_f32[r] = a.mode == 1 ? out_f32[r] + v : v;
    }
}

// Embedding row of `state.token` into the f32 residual: a thread per 32 values.
template <typename W, bool DENSE>
__device__ void embed(const u8* __restrict__ table, long long row_bytes, int cols,
                      const StepState* __restrict__ st, float* __restrict__ x) {
    const int u = blockIdx.x * blockDim.x + threadIdx.x;
    if (u >= cols / 32) return;
    const u8* row = table + (long long)st->token * row_bytes;
    float y[32];
    if constexpr (DENSE) {
        const typename W::T* w = (const typename W::T*)row;
        for (int i = 0; i < 32; i++) y[i] = W::ld(w[u * 32 + i]);
    } else {
        W::unit(row, u, y);
    }
    for (int i = 0; i < 32; i++) x[u * 32 + i] = y[i];
}

// RMSNorm of the f32 residual into the activation type, one block: x / rms(x) * w.
#define STEP_NORM_THREADS 1024
template <typename L>
__device__ void step_rmsnorm(const float* __restrict__ x, const typename L::T* __restrict__ w,
                             typename L::T* __restrict__ out, int dim, float eps) {
    __shared__ float partial[STEP_NORM_THREADS / 32];
    float ss = 0.f;
    for (int c = threadIdx.x; c < dim; c += blockDim.x) ss += x[c] * x[c];
    const float total = block_sum(ss, partial);
    const float inv = 1.f / sqrtf(total / dim + eps);
    for (int c = threadIdx.x; c < dim; c += blockDim.x) out[c] = L::st(x[c] * inv * L::ld(w[c]));
}

// RoPE (rotate-half, as rope.cu) on the f32 q and k of `qkv` at `state.pos`; q into `q`, k and
// v into the cache row `state.slot` of every KV head (head kh at rows kh * cap). A thread per
// rotated pair of q or k, and per value pair of v.
template <typename L>
__device__ void rope_append(const float* __restrict__ qkv, const float* __restrict__ inv_freq,
                            const StepState* __restrict__ st, typename L::T* __restrict__ q,
                            typename L::T* __restrict__ kc, typename L::T* __restrict__ vc,
                            int heads, int kv_heads, int dim, int cap, float factor) {
    const int half = dim / 2;
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int pairs = (heads + 2 * kv_heads) * half;
    if (i >= pairs) return;
    const int head = i / half, f = i % half;
    const float* src = qkv + (long long)head * dim;
    float x1 = src[f], x2 = src[f + half];
    if (head >= heads + kv_heads) {
        typename L::T* dst = vc + ((long long)(head - heads - kv_heads) * cap + st->slot) * dim;
        dst[f] = L::st(x1);
        dst[f + half] = L::st(x2);
        return;
    }
    const float p = (float)st->pos;
    const float t = factor == 1.f ? p : p / factor;
    float sn, cs;
    sincosf(t * inv_freq[f], &sn, &cs);
    typename L::T* dst = head < heads ? q + (long long)head * dim
                                      : kc + ((long long)(head - heads) * cap + st->slot) * dim;
    dst[f] = L::st(x1 * cs - x2 * sn);
    dst[f + half] = L::st(x1 * sn + x2 * cs);
}

// SwiGLU of two f32 products (gate and up in different formats), into the activation type.
template <typename L>
__device__ void swiglu(const float* __restrict__ g, const float* __restrict__ u,
                       typename L::T* __restrict__ out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = L::st(g[i] / (1.f + __expf(-g[i])) * u[i]);
}

#define GEMV_ENTRY(WN, LN, W, L, DENSE)                                                       \
    extern "C" __global__ void capstan_step_gemv_##WN##_##LN(                                 \
        const u8* w0, const u8* w1, const u8* w2, const float* b0, const float* b1,           \
        const float* b2, const L::T* x, float* out_f32, L::T* out_t, GemvArgs a) {            \
        gemv<W, L, DENSE>(w0, w1, w2, b0, b1, b2, x, out_f32, out_t, a);                      \
    }
#define GEMV_FORMAT(WN, W, DENSE)      \
    GEMV_ENTRY(WN, f32, W, F32, DENSE) \
    GEMV_ENTRY(WN, bf16, W, BF16, DENSE) \
    GEMV_ENTRY(WN, f16, W, F16, DENSE)  \
    extern "C" __global__ void capstan_step_embed_##WN(const u8* table, long long row_bytes,  \
                                                       int cols, const StepState* st,         \
                                                       float* x) {                            \
        embed<W, DENSE>(table, row_bytes, cols, st, x);                                       \
    }
#ifdef STEP_GGML
// A module of one GGML format's products and embedding (lib.rs, `decode_step_<format>`, puts
// `#define STEP_GGML(F) F(name, type, false)` first): a model compiles only the formats it
// holds, not all seven (NVRTC and the driver's JIT take seconds over all of them).
STEP_GGML(GEMV_FORMAT)
#else
GEMV_FORMAT(f32, F32, true)
GEMV_FORMAT(bf16, BF16, true)
GEMV_FORMAT(f16, F16, true)

#define STEP_ENTRY(LN, L)                                                                     \
    extern "C" __global__ void capstan_step_rmsnorm_##LN(const float* x, const L::T* w,       \
                                                         L::T* out, int dim, float eps) {     \
        step_rmsnorm<L>(x, w, out, dim, eps);                                                 \
    }                                                                                         \
    extern "C" __global__ void capstan_step_rope_append_##LN(                                 \
        const float* qkv, const float* inv_freq, const StepState* st, L::T* q, L::T* kc,      \
        L::T* vc, int heads, int kv_heads, int dim, int cap, float factor) {                  \
        rope_append<L>(qkv, inv_freq, st, q, kc, vc, heads, kv_heads, dim, cap, factor);      \
    }                                                                                         \
    extern "C" __global__ void capstan_step_swiglu_##LN(const float* g, const float* u,       \
                                                        L::T* out, int n) {                   \
        swiglu<L>(g, u, out, n);                                                              \
    }
STEP_ENTRY(f32, F32)
STEP_ENTRY(bf16, BF16)
STEP_ENTRY(f16, F16)
#endif
