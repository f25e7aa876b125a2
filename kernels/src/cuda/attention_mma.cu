// Tensor-core attention for prefill and cross-attention: bf16 or f16 in, f32 accumulation, the
// schedule of FlashAttention-2 (Dao 2023): a block of 4 warps takes 64 query rows of one head
// (16 a warp, held in registers as mma fragments), walks the keys in tiles of 64 staged in
// shared memory, computes S = Q K^T with mma.sync.m16n8k16, keeps a running max and sum per
// row (online softmax), and accumulates O += P V with the probabilities P reused from the S
// accumulators as the next mma's A fragments. Every pattern of attention.cu is supported through
// the same `key_range` and `visible` rules (this source is compiled after attention_rules.cuh,
// see kernels/src/lib.rs): masked scores are set to -inf element by element, tiles no
// row of a warp can see are skipped, and tiles every row sees whole (causal or cross-attention
// without a padding mask, inside the diagonal) skip the per-element test. SelfExtend computes
// both products (plain and grouped rotations) and takes, per element, the one its distance asks
// for. Rows that see no key output 0, as the CPU reference does. The mma itself and its
// fragment layouts: mma.cuh, compiled before this file (kernels/src/lib.rs).
#define MMA_BQ 64
#define MMA_BK 64
#define MMA_WARPS 4
#define MMA_PAD 8  // u16 of padding per shared row: rows 4 banks apart, no conflicts

__device__ __forceinline__ u32 pack_u16(u16 lo, u16 hi) { return (u32)lo | ((u32)hi << 16); }

// Four 8 x 8 matrices of 16-bit values from shared memory, transposed: lanes 8j..8j+7 give the
// addresses of matrix j's rows (16-byte aligned), and lane 4g + t receives, of each matrix, its
// rows 2t and 2t + 1 at column g: the B fragment of an mma whose k runs along the rows.
__device__ __forceinline__ void ldmatrix_x4_trans(u32* r, const u16* row) {
#ifdef CAPSTAN_HOST_KERNELS
    chost::ldmatrix_x4_trans(r, row);
#else
    u32 addr;
    asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(addr) : "l"(row));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
#endif
}

// Whether the query at position i sees the key at position p (row kr of the cache): not
// inlined, so that the 32 tests of a tile that is not seen whole stay one call each rather
// than 32 copies of every pattern's rules.
__device__ __noinline__ bool sees(const AttnArgs& a, const int* rule, const u8* key_mask, int b,
                                  long long i, long long p, int kr, long long lo,
                                  long long hi) {
    return kr < a.kv_len && p >= lo && p < hi && visible(a, rule, i, p) &&
           !(a.has_mask && key_mask[(size_t)b * a.kv_len + kr] == 0);
}

// Q's A fragments of one warp's 16 rows (rows past q_len read as 0).
template <int D>
__device__ __forceinline__ void load_q(const u16* __restrict__ q, size_t row_base, int r_lo,
                                       int q_len, int g, int t, u32 (*frag)[4]) {
    const int r_hi = r_lo + 8;
    #pragma unroll
    for (int kc = 0; kc < D / 16; kc++) {
        const int d = kc * 16 + 2 * t;
        u16 x[8];
        #pragma unroll
        for (int j = 0; j < 8; j++) x[j] = 0;
        if (r_lo < q_len) {
            const u16* p = q + (row_base + r_lo) * D + d;
            x[0] = p[0]; x[1] = p[1]; x[4] = p[8]; x[5] = p[9];
        }
        if (r_hi < q_len) {
            const u16* p = q + (row_base + r_hi) * D + d;
            x[2] = p[0]; x[3] = p[1]; x[6] = p[8]; x[7] = p[9];
        }
        frag[kc][0] = pack_u16(x[0], x[1]);
        frag[kc][1] = pack_u16(x[2], x[3]);
        frag[kc][2] = pack_u16(x[4], x[5]);
        frag[kc][3] = pack_u16(x[6], x[7]);
    }
}

// S (16 x 64) = Q K^T for one warp: 8 column blocks of 8 keys, 4 accumulators each.
template <typename L, int D>
__device__ __forceinline__ void scores(const u32 (*qf)[4], const u16* ks, int g, int t,
                                       float (*s)[4]) {
    const int srow = D + MMA_PAD;
    #pragma unroll
    for (int nb = 0; nb < MMA_BK / 8; nb++) {
        s[nb][0] = s[nb][1] = s[nb][2] = s[nb][3] = 0.f;
    }
    #pragma unroll
    for (int kc = 0; kc < D / 16; kc++) {
        #pragma unroll
        for (int nb = 0; nb < MMA_BK / 8; nb++) {
            const u16* kr = ks + (nb * 8 + g) * srow + kc * 16 + 2 * t;
            const u32 b0 = *(const u32*)kr;
            const u32 b1 = *(const u32*)(kr + 8);
            Mma<L>::mma(s[nb], qf[kc], b0, b1);
        }
    }
}

template <typename L, int D, bool EXTEND>
__device__ void attention_mma(const u16* __restrict__ q, const u16* __restrict__ k,
                              const u16* __restrict__ v, const u16* __restrict__ qg,
                              const u16* __restrict__ kg, const u8* __restrict__ key_mask,
                              const int* __restrict__ rules, u16* __restrict__ out, AttnArgs a) {
    extern __shared__ __align__(16) unsigned char mma_smem[];
    const int srow = D + MMA_PAD;
    u16* ks = (u16*)mma_smem;      // MMA_BK x srow
    u16* vs = ks + MMA_BK * srow;  // MMA_BK x srow
    u16* kgs = vs + MMA_BK * srow; // MMA_BK x srow, SelfExtend only
    __shared__ long long row_lo[MMA_BQ], row_hi[MMA_BQ];

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const int b = blockIdx.z, h = blockIdx.y;
    const int row0 = blockIdx.x * MMA_BQ + warp * 16;
    const int r_lo = row0 + g, r_hi = r_lo + 8;
    const int kh = h / (a.heads / a.kv_heads);
    const int* rule = rules + 4 * h;
    const size_t row_base = ((size_t)b * a.heads + h) * a.q_len;
    const size_t kbase = ((size_t)b * a.kv_heads + kh) * (size_t)a.kv_stride * D;
    const long long i_lo = a.q_pos0 + r_lo, i_hi = a.q_pos0 + r_hi;
    const long long end = a.k_pos0 + a.kv_len;

    // Each row's key positions [lo, hi), empty for rows past q_len.
    long long lo2[2], hi2[2];
    #pragma unroll
    for (int half = 0; half < 2; half++) {
        const int r = half ? r_hi : r_lo;
        const long long i = half ? i_hi : i_lo;
        long long lo = 0x7fffffffffffffffLL, hi = 0;
        if (r < a.q_len) {
            key_range(a, rule, i, &lo, &hi);
            lo = lo > a.k_pos0 ? lo : a.k_pos0;
            hi = hi < end ? hi : end;
            if (hi < lo) hi = lo;
        }
        lo2[half] = lo;
        hi2[half] = hi;
        if (t == 0) {
            row_lo[warp * 16 + g + 8 * half] = hi > lo ? lo : 0x7fffffffffffffffLL;
            row_hi[warp * 16 + g + 8 * half] = hi > lo ? hi : 0;
        }
    }
    __syncthreads();
    long long blo = 0x7fffffffffffffffLL, bhi = 0, wlo = 0x7fffffffffffffffLL, whi = 0;
    for (int r = 0; r < MMA_BQ; r++) {
        if (row_hi[r] > row_lo[r]) {
            blo = row_lo[r] < blo ? row_lo[r] : blo;
            bhi = row_hi[r] > bhi ? row_hi[r] : bhi;
            if (r / 16 == warp) {
                wlo = row_lo[r] < wlo ? row_lo[r] : wlo;
                whi = row_hi[r] > whi ? row_hi[r] : whi;
            }
        }
    }

    u32 qf[D / 16][4];
    u32 qgf[EXTEND ? D / 16 : 1][4];
    load_q<D>(q, row_base, r_lo, a.q_len, g, t, qf);
    if constexpr (EXTEND) load_q<D>(qg, row_base, r_lo, a.q_len, g, t, qgf);

    float o[D / 8][4];
    #pragma unroll
    for (int nd = 0; nd < D / 8; nd++) o[nd][0] = o[nd][1] = o[nd][2] = o[nd][3] = 0.f;
    float m[2] = {NEG_INF, NEG_INF}, l[2] = {0.f, 0.f};
    const float scale = a.scale * 1.4426950408889634f;  // exp(x) = exp2(x log2 e)
    // Tiles may be copied 16 bytes at a time when every base is 16-byte aligned (rows are
    // D * 2 bytes, a multiple of 16).
    const bool wide = ((((size_t)k) | ((size_t)v) | (EXTEND ? (size_t)kg : 0)) & 15) == 0;

    if (bhi > blo) {
        const int first = (int)(blo - a.k_pos0), last = (int)(bhi - a.k_pos0);
        for (int t0 = first - first % MMA_BK; t0 < last; t0 += MMA_BK) {
            __syncthreads();
            if (wide) {
                for (int x = threadIdx.x; x < MMA_BK * D / 8; x += blockDim.x) {
                    const int j = x / (D / 8), d = (x % (D / 8)) * 8;
                    const int kr = t0 + j;
                    uint4 zero = make_uint4(0, 0, 0, 0);
                    const size_t off = kbase + (size_t)kr * D + d;
                    const bool ok = kr < a.kv_len;
                    *(uint4*)(ks + j * srow + d) = ok ? *(const uint4*)(k + off) : zero;
                    *(uint4*)(vs + j * srow + d) = ok ? *(const uint4*)(v + off) : zero;
                    if constexpr (EXTEND) {
                        *(uint4*)(kgs + j * srow + d) = ok ? *(const uint4*)(kg + off) : zero;
                    }
                }
            } else {
                for (int x = threadIdx.x; x < MMA_BK * D; x += blockDim.x) {
                    const int j = x / D, d = x % D;
                    const int kr = t0 + j;
                    const size_t off = kbase + (size_t)kr * D + d;
                    const bool ok = kr < a.kv_len;
                    ks[j * srow + d] = ok ? k[off] : (u16)0;
                    vs[j * srow + d] = ok ? v[off] : (u16)0;
                    if constexpr (EXTEND) kgs[j * srow + d] = ok ? kg[off] : (u16)0;
                }
            }
            __syncthreads();
            const long long p0 = a.k_pos0 + t0;
            // Warp-uniform: this warp's rows see no key of the tile.
            if (whi <= wlo || p0 + MMA_BK <= wlo || p0 >= whi) continue;

            float s[MMA_BK / 8][4];
            scores<L, D>(qf, ks, g, t, s);
            float sg[EXTEND ? MMA_BK / 8 : 1][4];
            if constexpr (EXTEND) scores<L, D>(qgf, kgs, g, t, sg);

            // Whole tiles every row of the warp sees: causal inside the diagonal, or
            // cross-attention, no padding mask, no key past the cache, every row real.
            const bool whole = !EXTEND && !a.has_mask && (a.pattern == 0 || a.pattern == 4) &&
                               t0 + MMA_BK <= a.kv_len && row0 + 16 <= a.q_len &&
                               (a.pattern == 4 || p0 + MMA_BK - 1 <= a.q_pos0 + row0);
            #pragma unroll
            for (int nb = 0; nb < MMA_BK / 8; nb++) {
                #pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int half = e >> 1;
                    const int kr = t0 + nb * 8 + 2 * t + (e & 1);
                    const long long p = a.k_pos0 + kr;
                    const long long i = half ? i_hi : i_lo;
                    float x = s[nb][e];
                    if constexpr (EXTEND) {
                        if (i - p >= (long long)a.neighbor) x = sg[nb][e];
                    }
                    const bool ok =
                        whole || sees(a, rule, key_mask, b, i, p, kr, lo2[half], hi2[half]);
                    s[nb][e] = ok ? x * scale : NEG_INF;
                }
            }
            // Online softmax: the rows' maxima over the tile (a row's 64 scores lie in the
            // 4 lanes of its quad), the running sums kept per lane and added up at the end.
            float corr[2];
            #pragma unroll
            for (int half = 0; half < 2; half++) {
                float mx = NEG_INF;
                #pragma unroll
                for (int nb = 0; nb < MMA_BK / 8; nb++) {
                    mx = fmaxf(mx, fmaxf(s[nb][2 * half], s[nb][2 * half + 1]));
                }
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                const float m_new = fmaxf(m[half], mx);
                corr[half] = m_new == NEG_INF ? 1.f : exp2f(m[half] - m_new);
                float sum = 0.f;
                #pragma unroll
                for (int nb = 0; nb < MMA_BK / 8; nb++) {
                    #pragma unroll
                    for (int c = 0; c < 2; c++) {
                        const float x = s[nb][2 * half + c];
                        const float e = x == NEG_INF ? 0.f : exp2f(x - m_new);
                        s[nb][2 * half + c] = e;
                        sum += e;
                    }
                }
                l[half] = l[half] * corr[half] + sum;
                m[half] = m_new;
            }
            #pragma unroll
            for (int nd = 0; nd < D / 8; nd++) {
                o[nd][0] *= corr[0];
                o[nd][1] *= corr[0];
                o[nd][2] *= corr[1];
                o[nd][3] *= corr[1];
            }
            // O += P V: P's C fragments of key blocks 2kk and 2kk + 1 are the A fragment of
            // keys 16kk..16kk+15.
            #pragma unroll
            for (int kk = 0; kk < MMA_BK / 16; kk++) {
                u32 pa[4];
                pa[0] = Mma<L>::pack(s[2 * kk][0], s[2 * kk][1]);
                pa[1] = Mma<L>::pack(s[2 * kk][2], s[2 * kk][3]);
                pa[2] = Mma<L>::pack(s[2 * kk + 1][0], s[2 * kk + 1][1]);
                pa[3] = Mma<L>::pack(s[2 * kk + 1][2], s[2 * kk + 1][3]);
                // V's B fragments, two column blocks at a time, transposed as they load:
                // lane l names row 16kk + 8 ((l / 8) % 2) + l % 8 of column block nd + l / 16.
                const u16* vrow = vs + (kk * 16 + ((lane >> 3) & 1) * 8 + (lane & 7)) * srow +
                                  (lane >> 4) * 8;
                #pragma unroll
                for (int nd = 0; nd < D / 8; nd += 2) {
                    u32 b[4];
                    ldmatrix_x4_trans(b, vrow + nd * 8);
                    Mma<L>::mma(o[nd], pa, b[0], b[1]);
                    Mma<L>::mma(o[nd + 1], pa, b[2], b[3]);
                }
            }
        }
    }
    float inv[2];
    #pragma unroll
    for (int half = 0; half < 2; half++) {
        float sum = l[half];
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        sum += __shfl_xor_sync(0xffffffffu, sum, 2);
        inv[half] = sum > 0.f ? 1.f / sum : 0.f;
    }
    #pragma unroll
    for (int nd = 0; nd < D / 8; nd++) {
        const int d = nd * 8 + 2 * t;
        if (r_lo < a.q_len) {
            u16* p = out + (row_base + r_lo) * D + d;
            p[0] = L::st(o[nd][0] * inv[0]);
            p[1] = L::st(o[nd][1] * inv[0]);
        }
        if (r_hi < a.q_len) {
            u16* p = out + (row_base + r_hi) * D + d;
            p[0] = L::st(o[nd][2] * inv[1]);
            p[1] = L::st(o[nd][3] * inv[1]);
        }
    }
}

#define MMA_ENTRY(NAME, L, D, EXTEND)                                                          \
    extern "C" __global__ void __launch_bounds__(32 * MMA_WARPS)                              \
        NAME(const u16* q, const u16* k, const u16* v, const u16* qg, const u16* kg,          \
             const u8* key_mask, const int* rules, u16* out, AttnArgs a) {                    \
        attention_mma<L, D, EXTEND>(q, k, v, qg, kg, key_mask, rules, out, a);               \
    }
MMA_ENTRY(capstan_attention_mma_bf16_d64, BF16, 64, false)
MMA_ENTRY(capstan_attention_mma_bf16_d128, BF16, 128, false)
MMA_ENTRY(capstan_attention_mma_f16_d64, F16, 64, false)
MMA_ENTRY(capstan_attention_mma_f16_d128, F16, 128, false)
MMA_ENTRY(capstan_attention_mma_bf16_d64_extend, BF16, 64, true)
MMA_ENTRY(capstan_attention_mma_bf16_d128_extend, BF16, 128, true)
MMA_ENTRY(capstan_attention_mma_f16_d64_extend, F16, 64, true)
MMA_ENTRY(capstan_attention_mma_f16_d128_extend, F16, 128, true)
