// The decoding step of a Llama-family model as a few fused kernels over static buffers, for
// one sequence or a batch of them (continuous batching), so that one step is a fixed sequence
// of launches a CUDA graph can capture and replay (capstan_kernels::step; its CPU reference is
// step/reference.rs). Per layer: RMSNorm into the activation type; q, k and v products (f32,
// bias added) with RoPE on q and k, the new key and value written into each sequence's cache
// row (one launch where q, k and v share a format: a warp takes the two rows RoPE rotates
// together); attention (attention_decode.cu); the output product added to the f32 residual; RMSNorm;
// gate and up products with SwiGLU; the down product added to the residual. Products read each
// weight row once for every sequence of the batch. What changes from step to step (each
// sequence's token, position, cache row and key count; where its caches are) is read from
// device buffers written before each replay: the state, `batch` ints of each, and per layer a
// table of each sequence's cache pointers and capacities.
//
// One sequence's step folds both RMSNorms into the products that read them: the kernels that
// write the residual (the embedding, the output and down products) add up its squares per
// sequence (`ss`, a slot per norm: a block's sum, one atomic add a block), and the next products
// normalise the residual as they read it (`capstan_step_gemv_norm_*`), rounding each value to
// the activation type as the norm's own kernel would: two launches fewer a layer. A batch's
// step does the same where its products run on tensor cores (`capstan_step_gemv_mma_norm_*`;
// the residual's writers then add each sequence's squares to its own entry of the slot).
//
// Weights: dense (f32, bf16, f16) or GGML blocks (ggml_units.cuh), read in place.
#define GEMV_WARPS 8
// Sequences a batched product's warp takes at once (their accumulators in registers): the
// scheduler's usual 16 read each weight row once; a larger batch reads it once per pass. One sequence has entry points of its own
// (PASS 1: the single-sequence step's code, four loads in flight a lane), so that neither pays
// for the other and the modules stay small enough for NVRTC and the driver to compile quickly.
#define STEP_PASS 16

// The state of `batch` sequences: tokens, positions, cache rows written, then key counts.
__device__ __forceinline__ int st_token(const int* st, int batch, int s) { return st[s]; }
__device__ __forceinline__ int st_pos(const int* st, int batch, int s) { return st[batch + s]; }
__device__ __forceinline__ int st_slot(const int* st, int batch, int s) {
    return st[2 * batch + s];
}

// 8 values of a row of 16-bit elements at `p` (16-byte aligned).
template <typename L>
__device__ __forceinline__ void load8(const typename L::T* p, float* y) {
    if (sizeof(typename L::T) == 2) {
        // The halves taken by shifts: reading the vector's bytes through a u16 pointer breaks
        // the aliasing rules an optimiser may rely on (the host build at -O2 read garbage).
        const uint4 raw = *(const uint4*)p;
        const u32 words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
        for (int i = 0; i < 8; i++)
            y[i] = L::ld((typename L::T)(u16)(words[i / 2] >> (16 * (i % 2))));
    } else {
        const float4 a = *(const float4*)p, b = *((const float4*)p + 1);
        y[0] = a.x, y[1] = a.y, y[2] = a.z, y[3] = a.w;
        y[4] = b.x, y[5] = b.y, y[6] = b.z, y[7] = b.w;
    }
}

// A product's inputs, sequence s's `cols` values: the activations as stored, or (NORM, one
// sequence) the f32 residual normalised as it is read, x * inv * w rounded to the activation
// type.
template <typename L, bool NORM>
struct Input;
template <typename L>
struct Input<L, false> {
    static constexpr bool NORMED = false;
    const typename L::T* __restrict__ x;
    int cols;
    __device__ __forceinline__ void load8(int s, int c, float* y) const {
        ::load8<L>(x + (long long)s * cols + c, y);
    }
    __device__ __forceinline__ float load1(int s, int c) const {
        return L::ld(x[(long long)s * cols + c]);
    }
};
template <typename L>
struct Input<L, true> {
    static constexpr bool NORMED = true;
    const float* __restrict__ x;
    const typename L::T* __restrict__ w;
    float inv;
    int cols;
    __device__ __forceinline__ void load8(int, int c, float* y) const {
        const float4 a = *(const float4*)(x + c), b = *((const float4*)(x + c) + 1);
        const float r[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
        float wv[8];
        ::load8<L>(w + c, wv);
#pragma unroll
        for (int i = 0; i < 8; i++) y[i] = L::ld(L::st(r[i] * inv * wv[i]));
    }
    __device__ __forceinline__ float load1(int, int c) const {
        return L::ld(L::st(x[c] * inv * L::ld(w[c])));
    }
};

// One lane's share of the dot products of a dense row with the `n` inputs (of `in`) into
// acc[0..n); `vec`: rows and inputs are 16-byte aligned and cols a multiple of 8 (8 values a
// load), else one value at a time.
template <typename W, typename L, int PASS, typename In>
__device__ void dense_dots(const u8* row_bytes, const In& in, int cols, int n, int vec,
                           int lane, float* acc) {
    const typename W::T* w = (const typename W::T*)row_bytes;
    if (vec) {
        // Four 16-byte loads in flight a lane for one sequence: its product is bound by how
        // many bytes are on their way, not by arithmetic (a batch's inputs give as many).
#pragma unroll(PASS == 1 ? 4 : 1)
        for (int c = lane * 8; c < cols; c += 256) {
            float wv[8];
            load8<W>(w + c, wv);
#pragma unroll
            for (int s = 0; s < PASS; s++) {
                if (s < n) {
                    float xv[8];
                    in.load8(s, c, xv);
                    for (int i = 0; i < 8; i++) acc[s] += wv[i] * xv[i];
                }
            }
        }
    } else {
        for (int c = lane; c < cols; c += 32) {
            const float wv = W::ld(w[c]);
#pragma unroll
            for (int s = 0; s < PASS; s++)
                if (s < n) acc[s] += wv * in.load1(s, c);
        }
    }
}

// The same for a GGML row: units lane, lane + 32, ... decoded once for all `n` inputs.
template <typename Q, typename L, int PASS, typename In>
__device__ void ggml_dots(const u8* row, const In& in, int cols, int n, int vec, int lane,
                          float* acc) {
    const int units = cols / 32;
    for (int u = lane; u < units; u += 32) {
        float wv[32];
        Q::unit(row, u, wv);
#pragma unroll
        for (int s = 0; s < PASS; s++) {
            if (s >= n) continue;
            if (vec) {
                for (int i = 0; i < 32; i += 8) {
                    float xv[8];
                    in.load8(s, u * 32 + i, xv);
                    for (int j = 0; j < 8; j++) acc[s] += wv[i + j] * xv[j];
                }
            } else {
                for (int i = 0; i < 32; i++) acc[s] += wv[i] * in.load1(s, u * 32 + i);
            }
        }
    }
}

// One lane's share of a row's dot products with the inputs: a dense row, or a GGML one.
template <typename W, typename L, bool DENSE, int PASS, typename In>
__device__ void row_dots(const u8* row, const In& in, int cols, int n, int vec, int lane,
                         float* acc) {
#pragma unroll
    for (int s = 0; s < PASS; s++) acc[s] = 0.f;
    if constexpr (DENSE) {
        dense_dots<W, L, PASS>(row, in, cols, n, vec, lane, acc);
    } else {
        ggml_dots<W, L, PASS>(row, in, cols, n, vec, lane, acc);
    }
#pragma unroll
    for (int s = 0; s < PASS; s++)
        if (s < n) acc[s] = warp_sum(acc[s]);
}

// One sequence's dot products of two dense rows at once (SwiGLU's gate and up, RoPE's pair of
// rows) into *acc0 and *acc1, summed over the warp: each lane reads its inputs once for both
// rows (with NORM the residual, the norm's weights and their product), and has both rows'
// loads in flight. `row_dots` walks the rows one after the other, the inputs read and
// normalised twice: the 2026-11-30 H200 profile had these products at ~2.2 TB/s against the
// single-row products' ~3.0. Dense rows only: two decoded GGML units a lane took up to 128
// registers (SmolLM2's q8_0 output layer, occupancy-bound, had 56). NVRTC's -DSTEP_PAIRED=0
// (CAPSTAN_STEP_PAIRED=0) walks them one after the other, for the check to time both.
#ifndef STEP_PAIRED
#define STEP_PAIRED 1
#endif
template <typename W, typename L, typename In>
__device__ void row_pair_dots(const u8* row0, const u8* row1, const In& in, int cols, int vec,
                              int lane, float* acc0, float* acc1) {
    const typename W::T* w0 = (const typename W::T*)row0;
    const typename W::T* w1 = (const typename W::T*)row1;
    float a0 = 0.f, a1 = 0.f;
    if (vec) {
#pragma unroll 2
        for (int c = lane * 8; c < cols; c += 256) {
            float u[8], v[8], xv[8];
            load8<W>(w0 + c, u);
            load8<W>(w1 + c, v);
            in.load8(0, c, xv);
#pragma unroll
            for (int i = 0; i < 8; i++) {
                a0 += u[i] * xv[i];
                a1 += v[i] * xv[i];
            }
        }
    } else {
        for (int c = lane; c < cols; c += 32) {
            const float xv = in.load1(0, c);
            a0 += W::ld(w0[c]) * xv;
            a1 += W::ld(w1[c]) * xv;
        }
    }
    *acc0 = warp_sum(a0);
    *acc1 = warp_sum(a1);
}

// Where RoPE and the cache append put a layer's q, k and v: the RoPE frequencies, the state,
// the layer's tables of each sequence's cache rows and capacities, the heads' shape.
struct RopeArgs {
    const float* inv_freq;
    const int* st;
    const unsigned long long* kt;
    const unsigned long long* vt;
    const int* caps;
    int batch, heads, kv_heads, dim;
    float factor;
};

// Values f and f + dim/2 of head `head` (q heads, then k, then v) of sequence s: q and k
// rotated (rotate-half, as rope.cu) at the sequence's position, q into `q`, k and v (unrotated)
// into the sequence's cache row of their KV head (head kh at rows kh * capacity).
template <typename L>
__device__ __forceinline__ void rope_pair(const RopeArgs& r, typename L::T* __restrict__ q, int s,
                                          int head, int f, float x1, float x2) {
    const int half = r.dim / 2;
    const long long cap = r.caps[s], slot = st_slot(r.st, r.batch, s);
    if (head >= r.heads + r.kv_heads) {
        typename L::T* dst = (typename L::T*)r.vt[s] +
                             ((long long)(head - r.heads - r.kv_heads) * cap + slot) * r.dim;
        dst[f] = L::st(x1);
        dst[f + half] = L::st(x2);
        return;
    }
    const float p = (float)st_pos(r.st, r.batch, s);
    const float t = r.factor == 1.f ? p : p / r.factor;
    float sn, cs;
    sincosf(t * r.inv_freq[f], &sn, &cs);
    typename L::T* dst =
        head < r.heads ? q + ((long long)s * r.heads + head) * r.dim
                       : (typename L::T*)r.kt[s] + ((long long)(head - r.heads) * cap + slot) * r.dim;
    dst[f] = L::st(x1 * cs - x2 * sn);
    dst[f + half] = L::st(x1 * sn + x2 * cs);
}

// Matrix-vector products of up to three matrices of one format on each sequence's input (the
// inputs `cols` apart), their rows stacked (q, k, v), or of two (gate, up) combined by SwiGLU,
// or (q, k, v) a warp per pair of rows RoPE rotates together, written where RoPE puts them.
// A warp per output row, for every sequence; sequence s's outputs start at s * out_stride.
struct GemvArgs {
    long long rows0, rows1, rows2;  // rows of each matrix (0: absent)
    long long row_bytes;            // bytes of one row (every matrix has `cols` columns)
    long long out_stride;           // output elements from one sequence to the next
    int cols;
    // 0: out_f32 = W x + b; 1: out_f32 += W x + b; 2: out_t = silu(W0 x) * (W1 x); 3: rows
    // r and r + dim/2 of a head together, through rope_pair (q into out_t)
    int mode;
    int vec;
    int batch;
    float eps;  // the norm's, where the input is normalised as it is read
};

// The sum of squares of one sequence's new residual (mode 1, one sequence), added to *ss_out:
// each warp's row, summed over the block, one atomic add a block. Every thread of the block
// arrives, including warps past the last row (`sq` 0).
__device__ __forceinline__ void add_squares(float sq, float* ss_out) {
    __shared__ float rows[GEMV_WARPS];
    if (threadIdx.x % 32 == 0) rows[threadIdx.x / 32] = sq;
    __syncthreads();
    if (threadIdx.x == 0) {
        float total = 0.f;
        for (int w = 0; w < GEMV_WARPS; w++) total += rows[w];
        atomicAdd(ss_out, total);
    }
}

// Where output n's products read: `*w` and `*i` the matrix and row of its first product, `*b`
// its bias vector (none for SwiGLU). Rows are stacked (q, k, v) as `a.rows*` count them; mode
// 3's output n is value f of head h (n = h dim/2 + f), first row h dim + f, its second row
// `half` = dim/2 further; SwiGLU's second product is the same row of w1.
__device__ __forceinline__ void output_row(long long n, long long half, const u8* w0,
                                           const u8* w1, const u8* w2, const float* b0,
                                           const float* b1, const float* b2, const GemvArgs& a,
                                           const u8** w, const float** b, long long* i) {
    if (a.mode == 2) {
        *w = w0, *b = nullptr, *i = n;
        return;
    }
    const long long r = a.mode == 3 ? (n / half) * 2 * half + n % half : n;
    if (r < a.rows0) {
        *w = w0, *b = b0, *i = r;
    } else if (r < a.rows0 + a.rows1) {
        *w = w1, *b = b1, *i = r - a.rows0;
    } else {
        *w = w2, *b = b2, *i = r - a.rows0 - a.rows1;
    }
}

// The row of product m (0, or 1 for SwiGLU and RoPE pairs) of an output at row i of w.
__device__ __forceinline__ const u8* product_row(const GemvArgs& a, const u8* w, const u8* w1,
                                                 long long i, long long half, int m) {
    return (a.mode == 2 && m == 1 ? w1 : w) + (i + (a.mode == 3 ? m * half : 0)) * a.row_bytes;
}

// Output n of sequence s from its products (biases added): written or added to the f32
// output (returns the value written), SwiGLU into out_t, or RoPE and the cache append.
template <typename L>
__device__ __forceinline__ float write_output(const GemvArgs& a, const RopeArgs& ra,
                                              float* __restrict__ out_f32,
                                              typename L::T* __restrict__ out_t, int s,
                                              long long n, long long half, float first,
                                              float second) {
    const long long o = (long long)s * a.out_stride + n;
    if (a.mode == 3) {
        rope_pair<L>(ra, out_t, s, (int)(n / half), (int)(n % half), first, second);
    } else if (a.mode == 2) {
        out_t[o] = L::st(first / (1.f + __expf(-first)) * second);
    } else {
        const float y = a.mode == 1 ? out_f32[o] + first : first;
        out_f32[o] = y;
        return y;
    }
    return 0.f;
}

// Row r's products for every sequence; returns (lane 0, mode 1, one sequence) the square of
// the new residual value, else 0.
template <typename W, typename L, bool DENSE, int PASS, typename In>
__device__ float gemv_row(const u8* __restrict__ w0, const u8* __restrict__ w1,
                          const u8* __restrict__ w2, const float* __restrict__ b0,
                          const float* __restrict__ b1, const float* __restrict__ b2,
                          const In& in_all, float* __restrict__ out_f32,
                          typename L::T* __restrict__ out_t, const RopeArgs& ra, GemvArgs a,
                          long long r) {
    const int lane = threadIdx.x % 32;
    float sq = 0.f;
    const long long half = a.mode == 3 ? ra.dim / 2 : 0;
    const u8* w;
    const float* b;
    long long i;
    output_row(r, half, w0, w1, w2, b0, b1, b2, a, &w, &b, &i);
    const float bias = b ? b[i] : 0.f, bias2 = b && half ? b[i + half] : 0.f;
    const int products = a.mode >= 2 ? 2 : 1;
    float acc[PASS], gate[PASS];
    for (int s0 = 0; s0 < a.batch; s0 += PASS) {
        const int n = min(PASS, a.batch - s0);
        In in = in_all;
        if (s0 > 0) in.x += (long long)s0 * a.cols;
        bool paired = false;
        // One sequence's two products in one walk of the row pair: in the normalising
        // products, where a step's paired products are (its norms folded), so that the others
        // keep their registers (46 against 56 with the pair's code beside them).
        if constexpr (PASS == 1 && DENSE && STEP_PAIRED && In::NORMED) {
            if (products == 2) {
                row_pair_dots<W, L>(product_row(a, w, w1, i, half, 0),
                                    product_row(a, w, w1, i, half, 1), in, a.cols, a.vec, lane,
                                    &gate[0], &acc[0]);
                paired = true;
            }
        }
        if (!paired) {
            // One call site for both of SwiGLU's products: NVRTC inlines a copy of the dot
            // products per call site, and the modules' size is what NVRTC and the driver
            // compile.
#pragma unroll 1
            for (int m = 0; m < products; m++) {
                row_dots<W, L, DENSE, PASS>(product_row(a, w, w1, i, half, m), in, a.cols, n,
                                            a.vec, lane, acc);
                if (m == 0 && products == 2) {
#pragma unroll
                    for (int s = 0; s < PASS; s++) gate[s] = acc[s];
                }
            }
        }
        if (lane == 0) {
#pragma unroll
            for (int s = 0; s < PASS; s++) {
                if (s >= n) continue;
                const float first = (products == 2 ? gate[s] : acc[s]) + bias;
                const float y = write_output<L>(a, ra, out_f32, out_t, s0 + s, r, half, first,
                                                acc[s] + bias2);
                sq = y * y;
            }
        }
    }
    return sq;
}

// `x`: the activations (L::T), or with NORM the f32 residual of one sequence, normalised by
// `ss_in` (its sum of squares) and the norm's weights `norm_w` as it is read. `ss_out` (mode 1,
// one sequence; else null): where the squares of the new residual are added up.
template <typename W, typename L, bool DENSE, int PASS, bool NORM>
__device__ void gemv(const u8* __restrict__ w0, const u8* __restrict__ w1,
                     const u8* __restrict__ w2, const float* __restrict__ b0,
                     const float* __restrict__ b1, const float* __restrict__ b2,
                     const void* __restrict__ x, float* __restrict__ out_f32,
                     typename L::T* __restrict__ out_t, const float* __restrict__ ss_in,
                     const typename L::T* __restrict__ norm_w, float* __restrict__ ss_out,
                     const RopeArgs& ra, GemvArgs a) {
    const long long r = (long long)blockIdx.x * GEMV_WARPS + threadIdx.x / 32;
    const long long rows = a.rows0 + a.rows1 + a.rows2;
    const long long total = a.mode == 2 ? a.rows0 : a.mode == 3 ? rows / 2 : rows;
    float sq = 0.f;
    if (r < total) {
        if constexpr (NORM) {
            const float inv = 1.f / sqrtf(ss_in[0] / a.cols + a.eps);
            const Input<L, true> in = {(const float*)x, norm_w, inv, a.cols};
            sq = gemv_row<W, L, DENSE, PASS>(w0, w1, w2, b0, b1, b2, in, out_f32, out_t, ra, a,
                                             r);
        } else {
            const Input<L, false> in = {(const typename L::T*)x, a.cols};
            sq = gemv_row<W, L, DENSE, PASS>(w0, w1, w2, b0, b1, b2, in, out_f32, out_t, ra, a,
                                             r);
        }
    }
    // Uniform over the block: every thread arrives at add_squares' barrier.
    if (ss_out) add_squares(sq, ss_out);
}

// Embedding row of each sequence's token into its f32 residual: a thread per 32 values,
// blockIdx.y the sequence. With `ss` (one block a sequence, its threads a multiple of 32): the
// first of `slots` sums of squares (`batch` apart) set to the row's, the others zeroed for the
// products that add to them later in the step.
template <typename W, bool DENSE>
__device__ void embed(const u8* __restrict__ table, long long row_bytes, int cols,
                      const int* __restrict__ st, int batch, float* __restrict__ x,
                      float* __restrict__ ss, int slots) {
    __shared__ float partial[1024 / 32];
    const int u = blockIdx.x * blockDim.x + threadIdx.x, s = blockIdx.y;
    float sq = 0.f;
    if (u < cols / 32) {
        const u8* row = table + (long long)st_token(st, batch, s) * row_bytes;
        float y[32];
        if constexpr (DENSE) {
            const typename W::T* w = (const typename W::T*)row;
            for (int i = 0; i < 32; i++) y[i] = W::ld(w[u * 32 + i]);
        } else {
            W::unit(row, u, y);
        }
        float* xs = x + (long long)s * cols;
        for (int i = 0; i < 32; i++) {
            xs[u * 32 + i] = y[i];
            sq += y[i] * y[i];
        }
    }
    if (!ss) return;
    const float total = block_sum(sq, partial);
    for (int k = threadIdx.x; k < slots; k += blockDim.x)
        ss[(long long)k * batch + s] = k == 0 ? total : 0.f;
}

// RMSNorm of each sequence's f32 residual into the activation type, a block a sequence:
// x / rms(x) * w.
#define STEP_NORM_THREADS 1024
template <typename L>
__device__ void step_rmsnorm(const float* __restrict__ x, const typename L::T* __restrict__ w,
                             typename L::T* __restrict__ out, int dim, float eps) {
    __shared__ float partial[STEP_NORM_THREADS / 32];
    const long long at = (long long)blockIdx.x * dim;
    x += at;
    out += at;
    float ss = 0.f;
    for (int c = threadIdx.x; c < dim; c += blockDim.x) ss += x[c] * x[c];
    const float total = block_sum(ss, partial);
    const float inv = 1.f / sqrtf(total / dim + eps);
    for (int c = threadIdx.x; c < dim; c += blockDim.x) out[c] = L::st(x[c] * inv * L::ld(w[c]));
}

// RoPE and the cache append (rope_pair) of each sequence's f32 q, k and v in `qkv`, where their
// matrices differ in format (products of one format do it in their epilogue, mode 3). A thread
// per pair of values; blockIdx.y the sequence.
template <typename L>
__device__ void rope_append(const float* __restrict__ qkv, const float* __restrict__ inv_freq,
                            const int* __restrict__ st, int batch, typename L::T* __restrict__ q,
                            const unsigned long long* __restrict__ kt,
                            const unsigned long long* __restrict__ vt,
                            const int* __restrict__ caps, int heads, int kv_heads, int dim,
                            float factor) {
    const int half = dim / 2;
    const int i = blockIdx.x * blockDim.x + threadIdx.x, s = blockIdx.y;
    const int pairs = (heads + 2 * kv_heads) * half;
    if (i >= pairs) return;
    const int head = i / half, f = i % half;
    const float* src = qkv + ((long long)s * (heads + 2 * kv_heads) + head) * dim;
    const RopeArgs r = {inv_freq, st, kt, vt, caps, batch, heads, kv_heads, dim, factor};
    rope_pair<L>(r, q, s, head, f, src[f], src[f + half]);
}

// SwiGLU of two f32 products (gate and up in different formats), into the activation type.
template <typename L>
__device__ void swiglu(const float* __restrict__ g, const float* __restrict__ u,
                       typename L::T* __restrict__ out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = L::st(g[i] / (1.f + __expf(-g[i])) * u[i]);
}

#define GEMV_PARAMS(L)                                                                        \
    const u8 *w0, const u8 *w1, const u8 *w2, const float *b0, const float *b1,               \
        const float *b2, const void *x, float *out_f32, L::T *out_t, const float *ss_in,      \
        const L::T *norm_w, float *ss_out, RopeArgs ra, GemvArgs a
#define GEMV_ARGS w0, w1, w2, b0, b1, b2, x, out_f32, out_t, ss_in, norm_w, ss_out, ra, a
#define GEMV_ENTRY(WN, LN, W, L, DENSE)                                                       \
    extern "C" __global__ void capstan_step_gemv_##WN##_##LN(GEMV_PARAMS(L)) {                \
        gemv<W, L, DENSE, 1, false>(GEMV_ARGS);                                               \
    }                                                                                         \
    extern "C" __global__ void capstan_step_gemv_norm_##WN##_##LN(GEMV_PARAMS(L)) {           \
        gemv<W, L, DENSE, 1, true>(GEMV_ARGS);                                                \
    }                                                                                         \
    extern "C" __global__ void capstan_step_gemv_batch_##WN##_##LN(GEMV_PARAMS(L)) {          \
        gemv<W, L, DENSE, STEP_PASS, false>(GEMV_ARGS);                                       \
    }
#define GEMV_FORMAT(WN, W, DENSE)      \
    GEMV_ENTRY(WN, f32, W, F32, DENSE) \
    GEMV_ENTRY(WN, bf16, W, BF16, DENSE) \
    GEMV_ENTRY(WN, f16, W, F16, DENSE)  \
    extern "C" __global__ void capstan_step_embed_##WN(const u8* table, long long row_bytes,  \
                                                       int cols, const int* st, int batch,    \
                                                       float* x, float* ss, int slots) {      \
        embed<W, DENSE>(table, row_bytes, cols, st, batch, x, ss, slots);                     \
    }
#if defined(STEP_MMA) || defined(STEP_GGML)
// A batch's products on tensor cores (compute capability 8.0 and up; lib.rs puts mma.cuh first
// in these modules): 16 sequences a pass as mma.sync's A operand, a block taking 8 output rows
// (mode 3: 8 pairs) as its B operand, over k in chunks of 32, each lane reading 8 contiguous
// values of its row and of two sequences' inputs: k is permuted alike in both operands (a dot
// product allows it). The block's MMA_GEMV_WARPS warps split k and warp 0 sums them: a warp
// for each 8 rows left a 4,096-row product on 512 warps, too few loads in flight to read the
// weights at the memory's speed (the 2026-11-30 H200 run: 16 sequences' products 4-6x one
// sequence's time for the same bytes). Two kinds of operands (`Op`):
// - `Dense16` (`decode_step_mma`, STEP_MMA): bf16/f16 weights in the activations' type,
//   m16n8k16; lane t's eight values 8t..8t+7 are the logical k 2t, 2t+1, 2t+8, 2t+9 of two mmas.
// - `GgmlTf32` (each GGML format's module): weights decoded from their blocks (a chunk is one
//   unit, lane t decoding only its eight values: `part8`) and f32 activations, both rounded to
//   TF32, m16n8k8; lane t's values 8t + 2j and 8t + 2j + 1 are the logical k t and t + 4 of
//   mma j (j = 0..3). On CUDA cores a batch of 16 costs 16 FMAs a weight, more arithmetic time
//   than the weight's bytes take to read on an H100; here the tensor cores take it.
// Needs cols a multiple of 32 and 16-byte aligned rows (dense) and inputs (the plan checks).
// Same arguments and epilogues as `gemv`, norms folded as one sequence's are: with NORM the
// inputs are each sequence's f32 residual normalised as it is read (`MmaRow`), and a product
// adding to the residual adds each sequence's new squares to `ss_out` (one atomic add a block and
// sequence), so that a batch's norms need no launches of their own.
#define MMA_GEMV_WARPS 8

// One sequence's row of the A operand, from this lane's first column (8t): the activations as
// stored, or (NORM) the f32 residual times its inverse RMS and the norm's weights, rounded to
// the activation type as the norm's own launch writes it. Zeros past the batch (`live`).
template <typename L, bool NORM>
struct MmaRow;
template <typename L>
struct MmaRow<L, false> {
    const typename L::T* x;
    bool live;
    __device__ __forceinline__ MmaRow(const void* x_all, const float*, const typename L::T*,
                                      const GemvArgs& a, int s, int t)
        : x((const typename L::T*)x_all + (long long)s * a.cols + 8 * t), live(s < a.batch) {}
    // 8 values from column k (as floats).
    __device__ __forceinline__ void f8(int k, float* f) const {
        if (live) {
            load8<L>(x + k, f);
        } else {
#pragma unroll
            for (int i = 0; i < 8; i++) f[i] = 0.f;
        }
    }
    // The same 8 values as stored (16-bit types: two a word, the first in the lower half).
    __device__ __forceinline__ uint4 half8(int k) const {
        return live ? *(const uint4*)(x + k) : make_uint4(0, 0, 0, 0);
    }
};
template <typename L>
struct MmaRow<L, true> {
    const float* x;
    const typename L::T* w;
    float inv;
    bool live;
    __device__ __forceinline__ MmaRow(const void* x_all, const float* ss,
                                      const typename L::T* norm_w, const GemvArgs& a, int s,
                                      int t)
        : x((const float*)x_all + (long long)s * a.cols + 8 * t),
          w(norm_w + 8 * t),
          inv(s < a.batch ? 1.f / sqrtf(ss[s] / a.cols + a.eps) : 0.f),
          live(s < a.batch) {}
    // The 8 normalised values from column k, before their rounding to the activation type.
    __device__ __forceinline__ void normed8(int k, float* f) const {
        if (!live) {
#pragma unroll
            for (int i = 0; i < 8; i++) f[i] = 0.f;
            return;
        }
        float wv[8];
        load8<F32>(x + k, f);
        load8<L>(w + k, wv);
#pragma unroll
        for (int i = 0; i < 8; i++) f[i] *= inv * wv[i];
    }
    __device__ __forceinline__ void f8(int k, float* f) const {
        normed8(k, f);
#pragma unroll
        for (int i = 0; i < 8; i++) f[i] = L::ld(L::st(f[i]));
    }
    __device__ __forceinline__ uint4 half8(int k) const {
        float f[8];
        normed8(k, f);
        u32 h[4];
#pragma unroll
        for (int j = 0; j < 4; j++)
            h[j] = (u32)(u16)L::st(f[2 * j]) | ((u32)(u16)L::st(f[2 * j + 1]) << 16);
        return make_uint4(h[0], h[1], h[2], h[3]);
    }
};

#ifdef STEP_MMA
template <typename L>
struct Dense16 {
    enum { UNROLL = 4 };
    template <typename Row>
    static __device__ __forceinline__ void chunk(float (*c)[4], int products,
                                                 const u8* const* rb, bool has_b, const Row& lo,
                                                 const Row& hi, int k, int t) {
        const uint4 zero = make_uint4(0, 0, 0, 0);
        const uint4 xa = lo.half8(k), xb = hi.half8(k);
        const u32 A0[4] = {xa.x, xb.x, xa.y, xb.y}, A1[4] = {xa.z, xb.z, xa.w, xb.w};
#pragma unroll
        for (int m = 0; m < 2; m++) {
            if (m < products) {
                const uint4 wv = has_b ? *(const uint4*)(rb[m] + 2 * (k + 8 * t)) : zero;
                Mma<L>::mma(c[m], A0, wv.x, wv.y);
                Mma<L>::mma(c[m], A1, wv.z, wv.w);
            }
        }
    }
};
#endif

#ifdef STEP_GGML
template <typename Q>
struct GgmlTf32 {
    enum { UNROLL = 2 };
    // A lane's 8 activations of one sequence from column k, TF32.
    template <typename Row>
    static __device__ __forceinline__ void inputs(const Row& row, int k, u32* v) {
        float f[8];
        row.f8(k, f);
#pragma unroll
        for (int i = 0; i < 8; i++) v[i] = MmaTf32::round(f[i]);
    }
    template <typename Row>
    static __device__ __forceinline__ void chunk(float (*c)[4], int products,
                                                 const u8* const* rb, bool has_b, const Row& lo,
                                                 const Row& hi, int k, int t) {
        u32 xa[8], xb[8];
        inputs(lo, k, xa);
        inputs(hi, k, xb);
#pragma unroll
        for (int m = 0; m < 2; m++) {
            if (m < products) {
                float w[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
                if (has_b) Q::part8(rb[m], k / 32, t, w);
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    const u32 A[4] = {xa[2 * j], xb[2 * j], xa[2 * j + 1], xb[2 * j + 1]};
                    MmaTf32::mma(c[m], A, MmaTf32::round(w[2 * j]), MmaTf32::round(w[2 * j + 1]));
                }
            }
        }
    }
};
#endif

// Warp 0's end of a batch's tensor-core product: the outputs of its 8 rows for 16 sequences
// from s0, written through the mode's epilogue, and each sequence's new squares added to
// `ss_out`.
template <typename L>
__device__ __forceinline__ void mma_epilogue(
    const float (*c)[4], long long n0, int s0, int g, int t, long long total, long long half,
    const u8* w0, const u8* w1, const u8* w2, const float* b0, const float* b1, const float* b2,
    float* out_f32, typename L::T* out_t, float* ss_out, const RopeArgs& ra, const GemvArgs& a) {
    const int slo = s0 + g, shi = s0 + g + 8;
    // C: lane (g, t) holds outputs n0 + 2t and n0 + 2t + 1 of sequences g and g + 8.
    float sq[2] = {0.f, 0.f};
#pragma unroll
    for (int e = 0; e < 4; e++) {
        const int s = s0 + g + 8 * (e >> 1);
        const long long n = n0 + 2 * t + (e & 1);
        if (s >= a.batch || n >= total) continue;
        const u8* w;
        const float* b;
        long long i;
        output_row(n, half, w0, w1, w2, b0, b1, b2, a, &w, &b, &i);
        const float bias = b ? b[i] : 0.f, bias2 = b && half ? b[i + half] : 0.f;
        const float y = write_output<L>(a, ra, out_f32, out_t, s, n, half, c[0][e] + bias,
                                        c[1][e] + bias2);
        sq[e >> 1] += y * y;
    }
    // Each sequence's new squares over the warp's 8 outputs (the four lanes of a row g),
    // one atomic add each. `ss_out` is uniform: every lane shuffles.
    if (ss_out) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            sq[h] += __shfl_xor_sync(0xffffffffu, sq[h], 1);
            sq[h] += __shfl_xor_sync(0xffffffffu, sq[h], 2);
        }
        if (t == 0 && slo < a.batch) atomicAdd(ss_out + slo, sq[0]);
        if (t == 0 && shi < a.batch) atomicAdd(ss_out + shi, sq[1]);
    }
}

template <typename L, typename Op, bool NORM>
__device__ void gemv_mma(const u8* __restrict__ w0, const u8* __restrict__ w1,
                         const u8* __restrict__ w2, const float* __restrict__ b0,
                         const float* __restrict__ b1, const float* __restrict__ b2,
                         const void* __restrict__ x, float* __restrict__ out_f32,
                         typename L::T* __restrict__ out_t, const float* __restrict__ ss_in,
                         const typename L::T* __restrict__ norm_w, float* __restrict__ ss_out,
                         const RopeArgs& ra, GemvArgs a) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
    const long long rows = a.rows0 + a.rows1 + a.rows2;
    const long long total = a.mode == 2 ? a.rows0 : a.mode == 3 ? rows / 2 : rows;
    const long long n0 = (long long)blockIdx.x * 8;
    // Block-uniform: no warp of the block waits at a barrier for one that left.
    if (n0 >= total) return;
    const long long half = a.mode == 3 ? ra.dim / 2 : 0;
    // The rows this lane loads as B: output n0 + g's first and (modes 2, 3) second row.
    const long long nb = n0 + g;
    const bool has_b = nb < total;
    const u8* rb[2] = {nullptr, nullptr};
    if (has_b) {
        const u8* w;
        const float* b;
        long long i;
        output_row(nb, half, w0, w1, w2, b0, b1, b2, a, &w, &b, &i);
        rb[0] = product_row(a, w, w1, i, half, 0);
        rb[1] = product_row(a, w, w1, i, half, 1);
    }
    const int products = a.mode >= 2 ? 2 : 1;
    // The other warps' partial products, summed by warp 0 in warp order (the same bits in
    // every order of turns).
    __shared__ float partial[MMA_GEMV_WARPS - 1][2][4][32];
    for (int s0 = 0; s0 < a.batch; s0 += 16) {
        float c[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
        const int slo = s0 + g, shi = s0 + g + 8;
        const MmaRow<L, NORM> lo(x, ss_in, norm_w, a, slo, t), hi(x, ss_in, norm_w, a, shi, t);
        // The block's warps take every MMA_GEMV_WARPS-th chunk of 32 columns: together they
        // read 256 contiguous bytes of each row (16-bit weights) a step.
#pragma unroll(Op::UNROLL)
        for (int k = 32 * warp; k < a.cols; k += 32 * MMA_GEMV_WARPS)
            Op::chunk(c, products, rb, has_b, lo, hi, k, t);
        if (warp > 0) {
#pragma unroll
            for (int m = 0; m < 2; m++)
#pragma unroll
                for (int e = 0; e < 4; e++) partial[warp - 1][m][e][lane] = c[m][e];
        }
        __syncthreads();
        if (warp == 0) {
            for (int w = 0; w < MMA_GEMV_WARPS - 1; w++)
#pragma unroll
                for (int m = 0; m < 2; m++)
#pragma unroll
                    for (int e = 0; e < 4; e++) c[m][e] += partial[w][m][e][lane];
            mma_epilogue<L>(c, n0, s0, g, t, total, half, w0, w1, w2, b0, b1, b2, out_f32, out_t,
                            ss_out, ra, a);
        }
        // `partial` is written again for the next 16 sequences.
        __syncthreads();
    }
}
#endif

#ifdef STEP_MMA
#define GEMV_MMA_ENTRY(LN, L)                                                                 \
    extern "C" __global__ void capstan_step_gemv_mma_##LN##_##LN(GEMV_PARAMS(L)) {            \
        gemv_mma<L, Dense16<L>, false>(GEMV_ARGS);                                            \
    }                                                                                         \
    extern "C" __global__ void capstan_step_gemv_mma_norm_##LN##_##LN(GEMV_PARAMS(L)) {       \
        gemv_mma<L, Dense16<L>, true>(GEMV_ARGS);                                             \
    }
GEMV_MMA_ENTRY(bf16, BF16)
GEMV_MMA_ENTRY(f16, F16)
#elif defined(STEP_GGML)
// A module of one GGML format's products and embedding (lib.rs, `decode_step_<format>`, puts
// `#define STEP_GGML(F) F(name, type, false)` first): a model compiles only the formats it
// holds, not all seven (NVRTC and the driver's JIT take seconds over all of them).
STEP_GGML(GEMV_FORMAT)
// Its batched products on tensor cores, f32 activations: for compute capability 8.0 and up
// (older devices get an empty entry point the plan never chooses: Layout::tensor_cores).
#if defined(CAPSTAN_HOST_KERNELS) || __CUDA_ARCH__ >= 800
#define GEMV_MMA_GGML_BODY(W, NORM) gemv_mma<F32, GgmlTf32<W>, NORM>(GEMV_ARGS);
#else
#define GEMV_MMA_GGML_BODY(W, NORM)
#endif
#define GEMV_MMA_GGML(WN, W, DENSE)                                                           \
    extern "C" __global__ void capstan_step_gemv_mma_##WN##_f32(GEMV_PARAMS(F32)) {           \
        GEMV_MMA_GGML_BODY(W, false)                                                          \
    }                                                                                         \
    extern "C" __global__ void capstan_step_gemv_mma_norm_##WN##_f32(GEMV_PARAMS(F32)) {      \
        GEMV_MMA_GGML_BODY(W, true)                                                           \
    }
STEP_GGML(GEMV_MMA_GGML)
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
        const float* qkv, const float* inv_freq, const int* st, int batch, L::T* q,           \
        const unsigned long long* kt, const unsigned long long* vt, const int* caps,          \
        int heads, int kv_heads, int dim, float factor) {                                     \
        rope_append<L>(qkv, inv_freq, st, batch, q, kt, vt, caps, heads, kv_heads, dim,       \
                       factor);                                                               \
    }                                                                                         \
    extern "C" __global__ void capstan_step_swiglu_##LN(const float* g, const float* u,       \
                                                        L::T* out, int n) {                   \
        swiglu<L>(g, u, out, n);                                                              \
    }
STEP_ENTRY(f32, F32)
STEP_ENTRY(bf16, BF16)
STEP_ENTRY(f16, F16)
#endif
