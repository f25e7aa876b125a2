// Fused RoPE for q and k (rotate-half layout), explicit positions, precomputed inverse
// frequencies (Hugging Face's f32 formula, computed on the host) and linear scaling.
// q (b, h, s, d), k (b, hk, s, d) -> out (b, h + hk, s, d). One thread per rotated pair.
template <typename L>
__device__ void rope(const typename L::T* __restrict__ q, const typename L::T* __restrict__ k,
                     const u32* __restrict__ pos, const float* __restrict__ inv_freq,
                     typename L::T* __restrict__ out, int b, int h, int hk, int s, int d,
                     int per_row, float factor) {
    const int half = d / 2;
    const long long total = (long long)b * (h + hk) * s * half;
    for (long long x = blockIdx.x * (long long)blockDim.x + threadIdx.x; x < total;
         x += (long long)gridDim.x * blockDim.x) {
        int f = (int)(x % half);
        long long rest = x / half;
        int si = (int)(rest % s);
        rest /= s;
        int head = (int)(rest % (h + hk));
        int bi = (int)(rest / (h + hk));
        const typename L::T* src = head < h
            ? q + (((long long)bi * h + head) * s + si) * d
            : k + (((long long)bi * hk + (head - h)) * s + si) * d;
        float p = (float)pos[per_row ? (long long)bi * s + si : si];
        float t = factor == 1.f ? p : p / factor;
        float a = t * inv_freq[f];
        float sn, cs;
        sincosf(a, &sn, &cs);
        float x1 = L::ld(src[f]), x2 = L::ld(src[f + half]);
        typename L::T* dst = out + (((long long)bi * (h + hk) + head) * s + si) * d;
        dst[f] = L::st(x1 * cs - x2 * sn);
        dst[f + half] = L::st(x1 * sn + x2 * cs);
    }
}

#define ROPE_ENTRY(NAME, L)                                                                   \
    extern "C" __global__ void NAME(const L::T* q, const L::T* k, const u32* pos,             \
                                    const float* inv_freq, L::T* out, int b, int h, int hk,   \
                                    int s, int d, int per_row, float factor) {                \
        rope<L>(q, k, pos, inv_freq, out, b, h, hk, s, d, per_row, factor);                   \
    }
ROPE_ENTRY(capstan_rope_f32, F32)
ROPE_ENTRY(capstan_rope_bf16, BF16)
ROPE_ENTRY(capstan_rope_f16, F16)
