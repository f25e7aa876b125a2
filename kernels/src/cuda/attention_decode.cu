// Decoding attention of many sequences in one launch (a continuous-batching step, or one
// sequence's step): each sequence's one new query row per head, against all the keys of its own
// KV cache (it is their last position, so every key is visible). Caches are separate buffers of
// different lengths and capacities, found through per-sequence tables of device pointers. A
// block takes one query head of one sequence and one of `splits` equal ranges of its keys (split
// over keys, so that few sequences at long contexts still fill the device); its warps split the
// range (warp w: keys w, w + warps, ..., DEC_KEYS at a time), each with its own online softmax in
// f32, merged at the end through shared memory. With one split the block writes the output; with
// more it writes its (max, sum, accumulators) to `partial`, and the last of the splits of its
// (sequence, head) to finish — counted in `counters`, which it sets back to 0 — combines them:
// no second launch.
// Keys and values are read in place, head kh at rows kh * capacity.
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
template <typename L>
__device__ void merge_splits(const float* p, typename L::T* __restrict__ out, DecodeArgs a,
                             int lane) {
    const auto ld = [p](int i) { return __ldcg(p + i); };
    float big, total;
    parts_stats(ld, a.splits, a.dim, &big, &total);
    const float inv = total > 0.f ? 1.f / total : 0.f;
    for (int d = lane; d < a.dim; d += 32) out[d] = L::st(parts_value(ld, a.splits, a.dim, d, big) * inv);
}

template <typename L>
__device__ void attention_decode(const typename L::T* __restrict__ q,
                                 const unsigned long long* __restrict__ kptr,
                                 const unsigned long long* __restrict__ vptr,
                                 const int* __restrict__ lens, const int* __restrict__ caps,
                                 typename L::T* __restrict__ out, float* __restrict__ partial,
                                 int* __restrict__ counters, DecodeArgs a) {
    extern __shared__ float part[];  // per warp: m, l, then dim accumulators
    const int h = blockIdx.x, s = blockIdx.y, split = blockIdx.z;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
    const int kh = h / (a.heads / a.kv_heads);
    const int per_lane = (a.dim + 31) / 32;
    const int len = lens[s];
    const int chunk = (len + a.splits - 1) / a.splits;
    const int first = split * chunk;
    const int n = min(len, first + chunk);
    const size_t head = (size_t)kh * caps[s] * a.dim;
    const typename L::T* k = (const typename L::T*)kptr[s] + head;
    const typename L::T* v = (const typename L::T*)vptr[s] + head;
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
    if (warp != 0) return;
    // The warps' parts of this split, combined.
    const auto ld = [&](int i) { return part[i]; };
    float big, total;
    parts_stats(ld, warps, a.dim, &big, &total);
    const float inv = total > 0.f ? 1.f / total : 0.f;
    // This split's partial result: (max, sum, accumulators) at row (s, h, split).
    float* mine_out = partial + (((size_t)s * a.heads + h) * a.splits + split) * (2 + a.dim);
    if (a.splits > 1 && lane == 0) {
        mine_out[0] = big;
        mine_out[1] = total;
    }
    for (int t = 0; t < per_lane; t++) {
        int d = lane + 32 * t;
        if (d >= a.dim) continue;
        const float sum = parts_value(ld, warps, a.dim, d, big);
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

#define DECODE_ENTRY(NAME, L)                                                                 \
    extern "C" __global__ void NAME(const L::T* q, const unsigned long long* kptr,             \
                                    const unsigned long long* vptr, const int* lens,           \
                                    const int* caps, L::T* out, float* partial, int* counters, \
                                    DecodeArgs a) {                                            \
        attention_decode<L>(q, kptr, vptr, lens, caps, out, partial, counters, a);            \
    }
DECODE_ENTRY(capstan_attention_decode_f32, F32)
DECODE_ENTRY(capstan_attention_decode_bf16, BF16)
DECODE_ENTRY(capstan_attention_decode_f16, F16)
