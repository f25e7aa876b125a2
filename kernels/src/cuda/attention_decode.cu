// Decoding attention of many sequences in one launch (a continuous-batching step, or one
// sequence's step): each sequence's one new query row per head, against all the keys of its own
// KV cache (it is their last position, so every key is visible). Caches are separate buffers of
// different lengths and capacities, found through per-sequence tables of device pointers. A
// block takes one query head (or, below, a group) of one sequence and one of `splits` equal
// ranges of its keys (split over keys, so that few sequences at long contexts still fill the
// device); its warps split the range (warp w: keys w, w + warps, ..., DEC_KEYS at a time), each
// with its own online softmax in f32, merged at the end through shared memory. With one split
// the block writes the output; with more it writes its (max, sum, accumulators) to `partial`,
// and the last of the splits of its (sequence, head) to finish — counted in `counters`, which it
// sets back to 0 — combines them: no second launch.
// Keys and values are read in place, head kh at rows kh * capacity.
//
// Two kernels: `attention_decode` takes one query head a block, its lanes reading a key row an
// element each; `attention_decode_gqa` takes up to GQA_HEADS query heads of one key head a
// block (grouped-query attention: Llama 3's 4 query heads a key head), so that each key and
// value row is read once for all of them, in 16-byte pieces (a row of `dim` elements split over
// `dim / N` lanes, each reading 16 bytes, N elements: a warp reads 32 / (dim / N) rows at once).
// Both write the same partial rows and counters, per (sequence, query head, split).
#define DEC_MAXD 256

// Keys a warp takes at once.
#define DEC_KEYS 4

struct DecodeArgs {
    int heads, kv_heads, dim;
    float scale;
    int splits;
};

// One lane's share of the dot product of the (scaled) query `qv` with the key row `kr`.
template <typename L>
__device__ __forceinline__ float key_dot(const typename L::T* __restrict__ kr, const float* qv,
                                         int per_lane, int dim, int lane) {
    float dot = 0.f;
#pragma unroll
    for (int t = 0; t < DEC_MAXD / 32; t++) {
        const int d = lane + 32 * t;
        if (t < per_lane && d < dim) dot += qv[t] * L::ld(kr[d]);
    }
    return dot;
}

// Online-softmax parts — (max, sum, `dim` accumulators), `count` of them `2 + dim` floats apart,
// element i read by `ld(i)` — combined: their largest max and the sum of their sums rescaled
// to it (parts that saw no key add nothing).
template <typename Ld>
__device__ __forceinline__ void parts_stats(Ld ld, int count, int dim, float* big, float* total) {
    float m = NEG_INF;
    for (int z = 0; z < count; z++) m = fmaxf(m, ld(z * (2 + dim)));
    float t = 0.f;
    for (int z = 0; z < count; z++) {
        const float mz = ld(z * (2 + dim));
        t += mz == NEG_INF ? 0.f : ld(z * (2 + dim) + 1) * __expf(mz - m);
    }
    *big = m;
    *total = t;
}

// Accumulator d of the same parts, rescaled to `big` and summed.
template <typename Ld>
__device__ __forceinline__ float parts_value(Ld ld, int count, int dim, int d, float big) {
    float sum = 0.f;
    for (int z = 0; z < count; z++) {
        const float mz = ld(z * (2 + dim));
        if (mz != NEG_INF) sum += ld(z * (2 + dim) + 2 + d) * __expf(mz - big);
    }
    return sum;
}

// The splits' partial results `p` of one (query head, sequence) combined by one warp into its
// output row. The rows were written by other blocks of this launch: read past the L1 cache.
// The lanes share the splits: each lane's splits' maxima and sums, then the warp's; then each
// lane's `dim / 32` accumulators over every split, in split order, the split's scale shuffled
// from the lane that computed it. The last block of a long context runs this alone after the
// others: a lane walking all the splits' rows one load after another (the 2026-11-30 H200
// profile, 64 splits at 32K) left the device idle for ~40% of the launch.
template <typename L>
__device__ void merge_splits(const float* p, typename L::T* __restrict__ out, DecodeArgs a,
                             int lane) {
    const int stride = 2 + a.dim;
    float big = NEG_INF;
    for (int z = lane; z < a.splits; z += 32) big = fmaxf(big, __ldcg(p + (size_t)z * stride));
    big = warp_max(big);
    float total = 0.f;
    for (int z = lane; z < a.splits; z += 32) {
        const float mz = __ldcg(p + (size_t)z * stride);
        total += mz == NEG_INF ? 0.f : __ldcg(p + (size_t)z * stride + 1) * __expf(mz - big);
    }
    total = warp_sum(total);
    const float inv = total > 0.f ? 1.f / total : 0.f;
    float acc[DEC_MAXD / 32];
#pragma unroll
    for (int t = 0; t < DEC_MAXD / 32; t++) acc[t] = 0.f;
    for (int z0 = 0; z0 < a.splits; z0 += 32) {
        const int z = z0 + lane;
        const float mz = z < a.splits ? __ldcg(p + (size_t)z * stride) : NEG_INF;
        // A split that saw no key, or whose scale is below f32's, adds nothing (its
        // accumulators are not read).
        const float scale = mz == NEG_INF ? 0.f : __expf(mz - big);
        const int n = min(32, a.splits - z0);
#pragma unroll 4
        for (int j = 0; j < n; j++) {
            const float w = __shfl_sync(0xffffffffu, scale, j);
            if (w == 0.f) continue;
            const float* row = p + (size_t)(z0 + j) * stride + 2;
#pragma unroll
            for (int t = 0; t < DEC_MAXD / 32; t++) {
                const int d = lane + 32 * t;
                if (d < a.dim) acc[t] += __ldcg(row + d) * w;
            }
        }
    }
#pragma unroll
    for (int t = 0; t < DEC_MAXD / 32; t++) {
        const int d = lane + 32 * t;
        if (d < a.dim) out[d] = L::st(acc[t] * inv);
    }
}

// The keys a block reads: range `split` of sequence s's (rows [first, end) of `splits` equal
// ranges), key head kh's rows starting `head` elements into the sequence's buffers.
struct DecodeKeys {
    int first, end;
    size_t head;
};
__device__ __forceinline__ DecodeKeys decode_keys(const int* lens, const int* caps, int s, int kh,
                                                  int split, const DecodeArgs& a) {
    const int len = lens[s];
    const int chunk = (len + a.splits - 1) / a.splits;
    const int first = split * chunk;
    return {first, min(len, first + chunk), (size_t)kh * caps[s] * a.dim};
}

// One query head's end, by one warp: the block's `count` parts (max, sum, accumulators, `2 +
// dim` floats apart in shared memory) combined; with one split, the output row; with more, this
// split's partial row (sequence s, head h), counted, and the last split of (s, h) to finish
// merges them all and sets the counter back to 0.
template <typename L>
__device__ void finish_head(const float* parts, int count, int s, int h, int split,
                            typename L::T* __restrict__ out, float* __restrict__ partial,
                            int* __restrict__ counters, DecodeArgs a, int lane) {
    const size_t qoff = ((size_t)s * a.heads + h) * a.dim;
    const auto ld = [&](int i) { return parts[i]; };
    float big, total;
    parts_stats(ld, count, a.dim, &big, &total);
    const float inv = total > 0.f ? 1.f / total : 0.f;
    // This split's partial result: (max, sum, accumulators) at row (s, h, split).
    float* mine_out = partial + (((size_t)s * a.heads + h) * a.splits + split) * (2 + a.dim);
    if (a.splits > 1 && lane == 0) {
        mine_out[0] = big;
        mine_out[1] = total;
    }
    for (int d = lane; d < a.dim; d += 32) {
        const float sum = parts_value(ld, count, a.dim, d, big);
        if (a.splits > 1) {
            mine_out[2 + d] = sum;
        } else {
            out[qoff + d] = L::st(sum * inv);
        }
    }
    if (a.splits == 1) return;
    // This split's row is written (every lane's part visible device-wide before lane 0
    // counts it): count it; the last split of (s, h) merges them all.
    __threadfence();
    __syncwarp();
    int ticket = 0;
    if (lane == 0) ticket = atomicAdd(&counters[s * a.heads + h], 1);
    ticket = __shfl_sync(0xffffffffu, ticket, 0);
    if (ticket != a.splits - 1) return;
    __threadfence();
    merge_splits<L>(partial + ((size_t)s * a.heads + h) * a.splits * (2 + a.dim), out + qoff, a,
                    lane);
    if (lane == 0) counters[s * a.heads + h] = 0;
}

// A decoding kernel's parameters (every kernel below and its entry points take the same).
#define DECODE_KERNEL_PARAMS                                                                  \
    const typename L::T *__restrict__ q, const unsigned long long *__restrict__ kptr,         \
        const unsigned long long *__restrict__ vptr, const int *__restrict__ lens,            \
        const int *__restrict__ caps, typename L::T *__restrict__ out,                        \
        float *__restrict__ partial, int *__restrict__ counters, DecodeArgs a

template <typename L>
__device__ void attention_decode(DECODE_KERNEL_PARAMS) {
    extern __shared__ float part[];  // per warp: m, l, then dim accumulators
    const int h = blockIdx.x, s = blockIdx.y, split = blockIdx.z;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
    const int kh = h / (a.heads / a.kv_heads);
    const int per_lane = (a.dim + 31) / 32;
    const DecodeKeys keys = decode_keys(lens, caps, s, kh, split, a);
    const int first = keys.first, n = keys.end;
    const typename L::T* k = (const typename L::T*)kptr[s] + keys.head;
    const typename L::T* v = (const typename L::T*)vptr[s] + keys.head;
    const size_t qoff = ((size_t)s * a.heads + h) * a.dim;

    // Unrolled to DEC_MAXD / 32 with a guard, so that q and the accumulators stay in registers
    // (a loop to `per_lane` indexes them at run time: local memory).
    float qv[DEC_MAXD / 32], acc[DEC_MAXD / 32];
#pragma unroll
    for (int t = 0; t < DEC_MAXD / 32; t++) {
        const int d = lane + 32 * t;
        qv[t] = t < per_lane && d < a.dim ? L::ld(q[qoff + d]) * a.scale : 0.f;
        acc[t] = 0.f;
    }
    float m = NEG_INF, l = 0.f;
    // DEC_KEYS keys at a time a warp (keys j, j + warps, ...): their loads are in flight
    // together, and the running maximum and sum move once for all of them.
    int j = first + warp;
    for (; j + (DEC_KEYS - 1) * warps < n; j += DEC_KEYS * warps) {
        float sc[DEC_KEYS];
#pragma unroll
        for (int u = 0; u < DEC_KEYS; u++)
            sc[u] = key_dot<L>(k + (size_t)(j + u * warps) * a.dim, qv, per_lane, a.dim, lane);
        float m_new = m;
#pragma unroll
        for (int u = 0; u < DEC_KEYS; u++) {
            sc[u] = warp_sum(sc[u]);
            m_new = fmaxf(m_new, sc[u]);
        }
        const float corr = __expf(m - m_new);
        float e[DEC_KEYS], sum = 0.f;
#pragma unroll
        for (int u = 0; u < DEC_KEYS; u++) {
            e[u] = __expf(sc[u] - m_new);
            sum += e[u];
        }
        l = l * corr + sum;
#pragma unroll
        for (int t = 0; t < DEC_MAXD / 32; t++) {
            const int d = lane + 32 * t;
            if (t < per_lane && d < a.dim) {
                float x = acc[t] * corr;
#pragma unroll
                for (int u = 0; u < DEC_KEYS; u++)
                    x += e[u] * L::ld(v[(size_t)(j + u * warps) * a.dim + d]);
                acc[t] = x;
            }
        }
        m = m_new;
    }
    // The rest one at a time.
    for (; j < n; j += warps) {
        const float sc = warp_sum(key_dot<L>(k + (size_t)j * a.dim, qv, per_lane, a.dim, lane));
        const float m_new = fmaxf(m, sc);
        const float corr = __expf(m - m_new);
        const float e = __expf(sc - m_new);
        l = l * corr + e;
        const typename L::T* vr = v + (size_t)j * a.dim;
#pragma unroll
        for (int t = 0; t < DEC_MAXD / 32; t++) {
            const int d = lane + 32 * t;
            if (t < per_lane && d < a.dim) acc[t] = acc[t] * corr + e * L::ld(vr[d]);
        }
        m = m_new;
    }
    float* mine = part + warp * (2 + a.dim);
    if (lane == 0) {
        mine[0] = m;
        mine[1] = l;
    }
#pragma unroll
    for (int t = 0; t < DEC_MAXD / 32; t++) {
        const int d = lane + 32 * t;
        if (t < per_lane && d < a.dim) mine[2 + d] = acc[t];
    }
    __syncthreads();
    if (warp == 0) finish_head<L>(part, warps, s, h, split, out, partial, counters, a, lane);
}

// The query heads a block of a grouped kernel takes: key head kh's heads h0 .. h0 + nh, at
// most `per_block` of them (blockIdx.x: kh's chunk of its group).
struct GroupHeads {
    int kh, h0, nh;
};
__device__ __forceinline__ GroupHeads group_heads(const DecodeArgs& a, int per_block) {
    const int group = a.heads / a.kv_heads;
    const int chunks = (group + per_block - 1) / per_block;
    const int kh = blockIdx.x / chunks;
    const int h0 = kh * group + (blockIdx.x % chunks) * per_block;
    return {kh, h0, min(per_block, (kh + 1) * group - h0)};
}

// Query heads a block of attention_decode_gqa takes (of one key head).
#define GQA_HEADS 4
// Keys a slot (the lanes sharing a row) takes at once: their loads are in flight together.
// NVRTC's -DGQA_KEYS=N (CAPSTAN_DECODE_GQA_KEYS) sets another, for the check to time.
#ifndef GQA_KEYS
#define GQA_KEYS 2
#endif

// N elements in 16 bytes: loaded as they are (one 16-byte load where `wide`, the address
// 16-byte aligned, else N loads), converted to f32 one at a time as they are used (the loads'
// registers are half those of floats for 16-bit types).
template <typename L>
struct Row16 {
    static constexpr int N = 16 / (int)sizeof(typename L::T);
    static __device__ __forceinline__ uint4 load(const typename L::T* p, bool wide) {
        if (wide) return *(const uint4*)p;
        u32 w[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            if constexpr (N == 4) {
                w[i] = __float_as_uint(p[i]);
            } else {
                w[i] = (u32)p[2 * i] | ((u32)p[2 * i + 1] << 16);
            }
        }
        return make_uint4(w[0], w[1], w[2], w[3]);
    }
    // Element e (a constant once unrolled) of `u`.
    static __device__ __forceinline__ float at(const uint4& u, int e) {
        const int i = N == 4 ? e : e / 2;
        const u32 w = i == 0 ? u.x : i == 1 ? u.y : i == 2 ? u.z : u.w;
        if constexpr (N == 4) {
            return __uint_as_float(w);
        } else {
            return L::ld((u16)(e % 2 ? w >> 16 : w & 0xffffu));
        }
    }
};

// Up to GQA_HEADS query heads of key head kh (block x: kh's chunk of its group), one sequence
// (y), one range of keys (z). A row's `dim / N` lanes (a slot) read it in 16-byte pieces and
// sum their dot products by shuffles; each slot keeps its own online softmax per head, the
// slots of a warp are combined by shuffles, the warps through shared memory (a region per
// head), and warp g finishes head g as attention_decode does.
template <typename L>
__device__ void attention_decode_gqa(DECODE_KERNEL_PARAMS) {
    constexpr int N = Row16<L>::N;
    extern __shared__ float part[];  // per head, per warp: m, l, then dim accumulators
    const GroupHeads gh = group_heads(a, GQA_HEADS);
    const int kh = gh.kh, h0 = gh.h0, nh = gh.nh;
    const int s = blockIdx.y, split = blockIdx.z;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
    const int lanes = a.dim / N;  // a row's lanes: a power of two up to 32 (the host's choice)
    const int slots = 32 / lanes;
    const int slot = lane / lanes, sub = lane % lanes;
    const DecodeKeys keys = decode_keys(lens, caps, s, kh, split, a);
    const int first = keys.first, n = keys.end;
    const typename L::T* k = (const typename L::T*)kptr[s] + keys.head + sub * N;
    const typename L::T* v = (const typename L::T*)vptr[s] + keys.head + sub * N;
    // Rows are dim * sizeof(T) bytes, a multiple of 16: every row is as aligned as the first.
    const bool wide = ((kptr[s] | vptr[s]) & 15) == 0;

    float qv[GQA_HEADS][N], acc[GQA_HEADS][N], m[GQA_HEADS], l[GQA_HEADS];
#pragma unroll
    for (int g = 0; g < GQA_HEADS; g++) {
        const size_t qoff = ((size_t)s * a.heads + h0 + g) * a.dim + sub * N;
#pragma unroll
        for (int e = 0; e < N; e++) {
            qv[g][e] = g < nh ? L::ld(q[qoff + e]) * a.scale : 0.f;
            acc[g][e] = 0.f;
        }
        m[g] = NEG_INF;
        l[g] = 0.f;
    }
    // Rows base + u * stride + warp * slots + slot for u < GQA_KEYS, the block's rows
    // GQA_KEYS * stride at a time (the loop's bound is the warp's, for the shuffles).
    const int stride = warps * slots;
    for (int base = first; base < n; base += GQA_KEYS * stride) {
        uint4 kw[GQA_KEYS], vw[GQA_KEYS];
        bool ok[GQA_KEYS];
#pragma unroll
        for (int u = 0; u < GQA_KEYS; u++) {
            const int j = base + u * stride + warp * slots + slot;
            ok[u] = j < n;
            if (ok[u]) {
                kw[u] = Row16<L>::load(k + (size_t)j * a.dim, wide);
                vw[u] = Row16<L>::load(v + (size_t)j * a.dim, wide);
            } else {
                kw[u] = vw[u] = make_uint4(0, 0, 0, 0);
            }
        }
#pragma unroll
        for (int g = 0; g < GQA_HEADS; g++) {
            if (g >= nh) break;
            float sc[GQA_KEYS];
#pragma unroll
            for (int u = 0; u < GQA_KEYS; u++) {
                float dot = 0.f;
#pragma unroll
                for (int e = 0; e < N; e++) dot += qv[g][e] * Row16<L>::at(kw[u], e);
                for (int o = lanes >> 1; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
                sc[u] = ok[u] ? dot : NEG_INF;
            }
            float m_new = m[g];
#pragma unroll
            for (int u = 0; u < GQA_KEYS; u++) m_new = fmaxf(m_new, sc[u]);
            if (m_new == NEG_INF) continue;  // this slot has seen no key yet
            const float corr = __expf(m[g] - m_new);
            float e[GQA_KEYS], sum = 0.f;
#pragma unroll
            for (int u = 0; u < GQA_KEYS; u++) {
                e[u] = __expf(sc[u] - m_new);
                sum += e[u];
            }
            l[g] = l[g] * corr + sum;
#pragma unroll
            for (int x = 0; x < N; x++) {
                float y = acc[g][x] * corr;
#pragma unroll
                for (int u = 0; u < GQA_KEYS; u++) y += e[u] * Row16<L>::at(vw[u], x);
                acc[g][x] = y;
            }
            m[g] = m_new;
        }
    }
    // The warp's slots combined: lanes `o` apart hold the same dimensions of other rows.
    for (int o = lanes; o < 32; o <<= 1) {
#pragma unroll
        for (int g = 0; g < GQA_HEADS; g++) {
            if (g >= nh) break;
            const float mo = __shfl_xor_sync(0xffffffffu, m[g], o);
            const float lo = __shfl_xor_sync(0xffffffffu, l[g], o);
            float ao[N];
#pragma unroll
            for (int x = 0; x < N; x++) ao[x] = __shfl_xor_sync(0xffffffffu, acc[g][x], o);
            const float big = fmaxf(m[g], mo);
            if (big == NEG_INF) continue;
            const float wa = m[g] == NEG_INF ? 0.f : __expf(m[g] - big);
            const float wb = mo == NEG_INF ? 0.f : __expf(mo - big);
            l[g] = l[g] * wa + lo * wb;
#pragma unroll
            for (int x = 0; x < N; x++) acc[g][x] = acc[g][x] * wa + ao[x] * wb;
            m[g] = big;
        }
    }
    if (slot == 0) {
#pragma unroll
        for (int g = 0; g < GQA_HEADS; g++) {
            if (g >= nh) break;
            float* mine = part + (g * warps + warp) * (2 + a.dim);
            if (sub == 0) {
                mine[0] = m[g];
                mine[1] = l[g];
            }
#pragma unroll
            for (int x = 0; x < N; x++) mine[2 + sub * N + x] = acc[g][x];
        }
    }
    __syncthreads();
    for (int g = warp; g < nh; g += warps) {
        finish_head<L>(part + g * warps * (2 + a.dim), warps, s, h0 + g, split, out, partial,
                       counters, a, lane);
    }
}

// The grouped kernel on tensor cores (compute capability 8.0 and up; bf16 and f16 heads 64 or
// 128 wide): up to MMA_DEC_HEADS query heads of one key head a block, each warp taking tiles of
// 16 keys of the block's range (warp w: tiles w, w + warps, ...), its own online softmax per
// head, the warps combined and finished as attention_decode_gqa's are. The 2026-11-30 H200
// profile had the CUDA-core grouped kernel issuing ~190 instructions a key row (dot products
// summed by shuffles, per head), at 0.94 TB/s; here a tile's scores are 16 mma.sync and its
// values 8, the loads in flight the tile's 8 KB a warp.
// Scores S = Q K^T (m16n8k16: heads as the 16 rows, of which MMA_DEC_HEADS are read, keys as
// the 8 columns, two tiles of 8 keys; k over the head's dimensions, permuted alike in Q and K
// as decode_step.cu's Dense16 permutes them: lane t's 8 contiguous values 8t..8t+7 of each 32
// are the logical k 2t, 2t+1, 2t+8, 2t+9 of two mmas). Values O^T = V^T P^T (dimensions as the
// rows, 16 a tile; heads as the columns; k over the 16 keys): P^T is the scores' accumulator
// fragment as it stands (each lane's keys 2t, 2t+1 of both key tiles, rounded to L); V^T's
// rows are permuted so that lane group g holds dimensions [g dim/8, (g+1) dim/8): a lane
// reads that piece of 4 keys' value rows (2t, 2t+1, 2t+8, 2t+9) and pairs their halves.
#define MMA_DEC_HEADS 8
#define MMA_DEC_MAXD 128

// The lower halves of two words, `a`'s in the lower half; the upper halves likewise.
__device__ __forceinline__ u32 lower_halves(u32 a, u32 b) { return (a & 0xffffu) | (b << 16); }
__device__ __forceinline__ u32 upper_halves(u32 a, u32 b) { return (a >> 16) | (b & 0xffff0000u); }
__device__ __forceinline__ u32 word_of(const uint4& u, int i) {
    return i == 0 ? u.x : i == 1 ? u.y : i == 2 ? u.z : u.w;
}

template <typename L>
__device__ void attention_decode_mma(DECODE_KERNEL_PARAMS) {
    extern __shared__ float part[];  // per head, per warp: m, l, then dim accumulators
    const GroupHeads gh = group_heads(a, MMA_DEC_HEADS);
    const int kh = gh.kh, h0 = gh.h0, nh = gh.nh;
    const int s = blockIdx.y, split = blockIdx.z;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
    const int g = lane >> 2, t = lane & 3;
    const int D = a.dim;         // 64 or 128 (the host's choice)
    const int kc = D / 32;       // 32-wide pieces of a row: two score mmas each
    const int per_lane = D / 8;  // a lane group's value dimensions
    const DecodeKeys keys = decode_keys(lens, caps, s, kh, split, a);
    const typename L::T* kb = (const typename L::T*)kptr[s] + keys.head;
    const typename L::T* vb = (const typename L::T*)vptr[s] + keys.head;
    const bool wide = ((kptr[s] | vptr[s]) & 15) == 0;
    const uint4 zero = make_uint4(0, 0, 0, 0);

    // Q as the A operand: head g's values 32c + 8t .. + 8 (rows g + 8 are zeros).
    uint4 qa[MMA_DEC_MAXD / 32];
#pragma unroll
    for (int c = 0; c < MMA_DEC_MAXD / 32; c++) {
        const bool ok = c < kc && g < nh;
        qa[c] = ok ? Row16<L>::load(q + ((size_t)s * a.heads + h0 + g) * D + 32 * c + 8 * t, false)
                   : zero;
    }
    // O^T: tile i's rows g, g + 8 are dimensions g D/8 + 2i and + 1; columns 2t, 2t + 1 heads.
    float acc[MMA_DEC_MAXD / 16][4];
#pragma unroll
    for (int i = 0; i < MMA_DEC_MAXD / 16; i++) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
    float m_run = NEG_INF, l_part = 0.f;  // head g's max (every lane of g) and this lane's sum

    for (int j0 = keys.first + 16 * warp; j0 < keys.end; j0 += 16 * warps) {
        // Keys: tile n's key j0 + 8n + g, this lane's 8 values of each 32. Values: keys j0 +
        // 2t, 2t + 1, 2t + 8, 2t + 9, this lane group's dimensions. Rows past the range: zeros.
        uint4 kw[2][MMA_DEC_MAXD / 32], vw[4][MMA_DEC_MAXD / 64];
#pragma unroll
        for (int n = 0; n < 2; n++) {
            const int j = j0 + 8 * n + g;
#pragma unroll
            for (int c = 0; c < MMA_DEC_MAXD / 32; c++)
                kw[n][c] = j < keys.end && c < kc
                               ? Row16<L>::load(kb + (size_t)j * D + 32 * c + 8 * t, wide)
                               : zero;
        }
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const int j = j0 + 2 * t + (r & 1) + 8 * (r >> 1);
#pragma unroll
            for (int p = 0; p < MMA_DEC_MAXD / 64; p++)
                vw[r][p] = j < keys.end && p < D / 64
                               ? Row16<L>::load(vb + (size_t)j * D + g * per_lane + 8 * p, wide)
                               : zero;
        }
        float sc[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
        for (int n = 0; n < 2; n++) {
#pragma unroll
            for (int c = 0; c < MMA_DEC_MAXD / 32; c++) {
                if (c >= kc) break;
                const u32 a0[4] = {qa[c].x, 0u, qa[c].y, 0u}, a1[4] = {qa[c].z, 0u, qa[c].w, 0u};
                Mma<L>::mma(sc[n], a0, kw[n][c].x, kw[n][c].y);
                Mma<L>::mma(sc[n], a1, kw[n][c].z, kw[n][c].w);
            }
        }
        // Head g's scores of keys j0 + 8n + 2t + e, scaled, masked past the range; the
        // tile's max over the four lanes of g (the tile's first key is in range: finite).
        float p[2][2], mx = NEG_INF;
#pragma unroll
        for (int n = 0; n < 2; n++) {
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int j = j0 + 8 * n + 2 * t + e;
                p[n][e] = j < keys.end ? sc[n][e] * a.scale : NEG_INF;
                mx = fmaxf(mx, p[n][e]);
            }
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(m_run, mx);
        const float corr = __expf(m_run - m_new);
        l_part *= corr;
#pragma unroll
        for (int n = 0; n < 2; n++) {
#pragma unroll
            for (int e = 0; e < 2; e++) {
                p[n][e] = __expf(p[n][e] - m_new);
                l_part += p[n][e];
            }
        }
        m_run = m_new;
        // The accumulators' columns are heads 2t and 2t + 1: their rescaling from lanes 8t
        // and 8t + 4 (g = 2t, 2t + 1).
        const float c_lo = __shfl_sync(0xffffffffu, corr, 8 * t);
        const float c_hi = __shfl_sync(0xffffffffu, corr, 8 * t + 4);
        const u32 b0 = Mma<L>::pack(p[0][0], p[0][1]), b1 = Mma<L>::pack(p[1][0], p[1][1]);
#pragma unroll
        for (int i = 0; i < MMA_DEC_MAXD / 16; i++) {
            if (i >= D / 16) break;
            acc[i][0] *= c_lo;
            acc[i][1] *= c_hi;
            acc[i][2] *= c_lo;
            acc[i][3] *= c_hi;
            // Word i of the lane group's piece: dimensions g D/8 + 2i (lower half) and + 1.
            const u32 w0 = word_of(vw[0][i / 4], i % 4), w1 = word_of(vw[1][i / 4], i % 4);
            const u32 w2 = word_of(vw[2][i / 4], i % 4), w3 = word_of(vw[3][i / 4], i % 4);
            const u32 av[4] = {lower_halves(w0, w1), upper_halves(w0, w1), lower_halves(w2, w3),
                               upper_halves(w2, w3)};
            Mma<L>::mma(acc[i], av, b0, b1);
        }
    }
    const float l_all = l_part + __shfl_xor_sync(0xffffffffu, l_part, 1);
    const float l_sum = l_all + __shfl_xor_sync(0xffffffffu, l_all, 2);
    // This warp's part of each head: (max, sum) from lane (g, 0), the accumulators from the
    // lanes holding them.
    if (t == 0 && g < nh) {
        float* mine = part + (g * warps + warp) * (2 + D);
        mine[0] = m_run;
        mine[1] = l_sum;
    }
#pragma unroll
    for (int i = 0; i < MMA_DEC_MAXD / 16; i++) {
        if (i >= D / 16) break;
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int h = 2 * t + (e & 1);
            const int d = g * per_lane + 2 * i + (e >> 1);
            if (h < nh) part[(h * warps + warp) * (2 + D) + 2 + d] = acc[i][e];
        }
    }
    __syncthreads();
    for (int h = warp; h < nh; h += warps) {
        finish_head<L>(part + h * warps * (2 + D), warps, s, h0 + h, split, out, partial,
                       counters, a, lane);
    }
}

// Blocks of 4 warps (DECODE_WARPS of step/decode_grid.rs); the grouped kernel's 4 to a
// multiprocessor (BOUNDS): at most 128 registers a thread.
#define DECODE_ENTRY(NAME, KERNEL, L, BOUNDS)                                                 \
    extern "C" __global__ void BOUNDS NAME(const L::T* q, const unsigned long long* kptr,      \
                                           const unsigned long long* vptr, const int* lens,    \
                                           const int* caps, L::T* out, float* partial,         \
                                           int* counters, DecodeArgs a) {                      \
        KERNEL<L>(q, kptr, vptr, lens, caps, out, partial, counters, a);                      \
    }
DECODE_ENTRY(capstan_attention_decode_f32, attention_decode, F32, )
DECODE_ENTRY(capstan_attention_decode_bf16, attention_decode, BF16, )
DECODE_ENTRY(capstan_attention_decode_f16, attention_decode, F16, )
DECODE_ENTRY(capstan_attention_decode_gqa_f32, attention_decode_gqa, F32, __launch_bounds__(128, 4))
DECODE_ENTRY(capstan_attention_decode_gqa_bf16, attention_decode_gqa, BF16, __launch_bounds__(128, 4))
DECODE_ENTRY(capstan_attention_decode_gqa_f16, attention_decode_gqa, F16, __launch_bounds__(128, 4))
// The tensor-core kernel, 3 blocks to a multiprocessor (a tile's loads and the accumulators in
// registers); an empty entry point below compute capability 8.0, which the host never chooses.
#if defined(CAPSTAN_HOST_KERNELS) || __CUDA_ARCH__ >= 800
#define DECODE_MMA_KERNEL attention_decode_mma
#else
template <typename L>
__device__ void attention_decode_none(DECODE_KERNEL_PARAMS) {}
#define DECODE_MMA_KERNEL attention_decode_none
#endif
DECODE_ENTRY(capstan_attention_decode_mma_bf16, DECODE_MMA_KERNEL, BF16, __launch_bounds__(128, 3))
DECODE_ENTRY(capstan_attention_decode_mma_f16, DECODE_MMA_KERNEL, F16, __launch_bounds__(128, 3))
