// Tiled attention with an online softmax (f32 accumulation), one warp per query row, ROWS rows
// per block sharing each tile of TILE keys/values in shared memory, on CUDA cores: every
// dtype, every head width up to MAXD, decoding as well as prefill. The patterns' rules are in
// attention_rules.cuh. Rows seeing no key output 0.
#define TILE 16
#define ROWS 4
#define MAXD 256

template <typename L>
__device__ void attention(const typename L::T* __restrict__ q, const typename L::T* __restrict__ k,
                          const typename L::T* __restrict__ v, const typename L::T* __restrict__ qg,
                          const typename L::T* __restrict__ kg, const u8* __restrict__ key_mask,
                          const int* __restrict__ rules, typename L::T* __restrict__ out,
                          AttnArgs a) {
    extern __shared__ float smem[];
    float* ks = smem;                      // TILE x dim
    float* vs = ks + TILE * a.dim;         // TILE x dim
    float* kgs = vs + TILE * a.dim;        // TILE x dim (SelfExtend only)
    __shared__ long long range_lo[ROWS], range_hi[ROWS];

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int b = blockIdx.z, h = blockIdx.y;
    const int r = blockIdx.x * ROWS + warp;
    const bool active = r < a.q_len;
    const int kh = h / (a.heads / a.kv_heads);
    const int per_lane = (a.dim + 31) / 32;
    const long long i = a.q_pos0 + r;
    const int* rule = rules + 4 * h;
    const bool extend = a.pattern == 2;

    float qv[MAXD / 32], qgv[MAXD / 32], acc[MAXD / 32];
    const size_t qoff = (((size_t)b * a.heads + h) * a.q_len + (active ? r : 0)) * a.dim;
    for (int t = 0; t < per_lane; t++) {
        int d = lane + 32 * t;
        qv[t] = (active && d < a.dim) ? L::ld(q[qoff + d]) : 0.f;
        qgv[t] = (active && extend && d < a.dim) ? L::ld(qg[qoff + d]) : 0.f;
        acc[t] = 0.f;
    }

    long long lo = 0, hi = 0;
    if (active) {
        key_range(a, rule, i, &lo, &hi);
        lo = lo > a.k_pos0 ? lo : a.k_pos0;
        long long end = a.k_pos0 + a.kv_len;
        hi = hi < end ? hi : end;
        if (hi < lo) hi = lo;
    }
    if (lane == 0) {
        range_lo[warp] = active ? lo : 0x7fffffffffffffffLL;
        range_hi[warp] = active ? hi : 0;
    }
    __syncthreads();
    long long blo = 0x7fffffffffffffffLL, bhi = 0;
    for (int w = 0; w < ROWS; w++) {
        if (range_hi[w] > range_lo[w]) {
            blo = range_lo[w] < blo ? range_lo[w] : blo;
            bhi = range_hi[w] > bhi ? range_hi[w] : bhi;
        }
    }
    float m = NEG_INF, l = 0.f;
    const size_t kbase = ((size_t)b * a.kv_heads + kh) * (size_t)a.kv_stride * a.dim;
    if (bhi > blo) {
        const int first = (int)(blo - a.k_pos0), last = (int)(bhi - a.k_pos0);
        for (int t0 = first - first % TILE; t0 < last; t0 += TILE) {
            __syncthreads();
            for (int x = threadIdx.x; x < TILE * a.dim; x += blockDim.x) {
                int j = x / a.dim, d = x % a.dim;
                int kr = t0 + j;
                bool ok = kr < a.kv_len;
                size_t off = kbase + (size_t)kr * a.dim + d;
                ks[x] = ok ? L::ld(k[off]) : 0.f;
                vs[x] = ok ? L::ld(v[off]) : 0.f;
                if (extend) kgs[x] = ok ? L::ld(kg[off]) : 0.f;
            }
            __syncthreads();
            if (!active) continue;
            float s_lane = NEG_INF;  // lane j < TILE keeps the score of key t0 + j
            for (int j = 0; j < TILE; j++) {
                int kr = t0 + j;
                long long p = a.k_pos0 + kr;
                bool ok = p >= lo && p < hi && visible(a, rule, i, p) &&
                          !(a.has_mask && key_mask[(size_t)b * a.kv_len + kr] == 0);
                if (!ok) continue;  // warp-uniform: every lane has the same i, p
                bool grouped = extend && (i - p) >= (long long)a.neighbor;
                const float* kt = grouped ? kgs : ks;
                float part = 0.f;
                for (int t = 0; t < per_lane; t++) {
                    int d = lane + 32 * t;
                    if (d < a.dim) part += (grouped ? qgv[t] : qv[t]) * kt[j * a.dim + d];
                }
                float s = warp_sum(part) * a.scale;
                if (lane == j) s_lane = s;
            }
            float tile_max = warp_max(s_lane);
            if (tile_max == NEG_INF) continue;
            float m_new = fmaxf(m, tile_max);
            float corr = __expf(m - m_new);
            l *= corr;
            for (int t = 0; t < per_lane; t++) acc[t] *= corr;
            float e_lane = s_lane == NEG_INF ? 0.f : __expf(s_lane - m_new);
            l += warp_sum(e_lane);
            for (int j = 0; j < TILE; j++) {
                float e = __shfl_sync(0xffffffffu, e_lane, j);
                if (e == 0.f) continue;
                for (int t = 0; t < per_lane; t++) {
                    int d = lane + 32 * t;
                    if (d < a.dim) acc[t] += e * vs[j * a.dim + d];
                }
            }
            m = m_new;
        }
    }
    if (active) {
        float inv = l > 0.f ? 1.f / l : 0.f;
        for (int t = 0; t < per_lane; t++) {
            int d = lane + 32 * t;
            if (d < a.dim) out[qoff + d] = L::st(acc[t] * inv);
        }
    }
}

#define ATTN_ENTRY(NAME, L)                                                                   \
    extern "C" __global__ void NAME(const L::T* q, const L::T* k, const L::T* v, const L::T* qg, \
                                    const L::T* kg, const u8* key_mask, const int* rules,      \
                                    L::T* out, AttnArgs a) {                                  \
        attention<L>(q, k, v, qg, kg, key_mask, rules, out, a);                               \
    }
ATTN_ENTRY(capstan_attention_f32, F32)
ATTN_ENTRY(capstan_attention_bf16, BF16)
ATTN_ENTRY(capstan_attention_f16, F16)
