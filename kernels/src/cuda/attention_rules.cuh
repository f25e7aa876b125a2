// The attention patterns' rules, shared by the CUDA-core kernel (attention.cu) and the
// tensor-core one (attention_mma.cu), each compiled with this header before it; the CPU
// reference holds the same rules (kernels/src/pattern.rs). Patterns: 0 causal, 1 Zebra local
// (window), 2 SelfExtend (neighbor, group), 3 SCCA family (per-head rules: chunk, shift,
// dilation, offset), 4 non-causal cross-attention; a key padding mask (batch, kv_len) may be
// added to any.
#define NEG_INF __int_as_float(0xff800000)

struct AttnArgs {
    int batch, heads, kv_heads, q_len, kv_len;
    int kv_stride;           // rows from one kv head to the next (a KV cache's capacity)
    int dim;
    long long q_pos0, k_pos0;
    float scale;
    int pattern;
    int window;              // Zebra local
    int neighbor, group;     // SelfExtend (group only informs the caller's rotation)
    int has_mask;
};

__device__ __forceinline__ long long eff_shift(const int* rule, long long i) {
    long long w = rule[0];
    if (w == 0) return 0;
    long long c = i / w;
    return ((c + 1) * w <= (long long)rule[1]) ? 0 : (long long)rule[1];
}

__device__ __forceinline__ void key_range(const AttnArgs& a, const int* rule, long long i,
                                          long long* lo, long long* hi) {
    *lo = 0;
    *hi = i + 1;
    if (a.pattern == 4) {
        *hi = 0x7fffffffffffffffLL;
    } else if (a.pattern == 1) {
        long long w = a.window > 0 ? a.window : 1;
        long long blk = i / w;
        *lo = (blk > 0 ? blk - 1 : 0) * w;  // blockwise: this block and the one before
    } else if (a.pattern == 3 && rule[0] > 0) {
        long long w = rule[0];
        long long s = eff_shift(rule, i);
        long long c = i / w;
        long long l = c * w - s;
        *lo = l > 0 ? l : 0;
        long long h = (c + 1) * w - s;
        *hi = h < i + 1 ? h : i + 1;
    }
}

__device__ __forceinline__ bool visible(const AttnArgs& a, const int* rule, long long i,
                                        long long p) {
    if (a.pattern == 4) return true;
    if (p > i) return false;
    if (a.pattern == 1) return i - p < (long long)(a.window > 0 ? a.window : 1);
    if (a.pattern == 3) {
        if (rule[0] > 0) {
            long long w = rule[0];
            if ((p + eff_shift(rule, i)) / w != i / w) return false;
        }
        if (rule[2] > 1) return (p % rule[2]) == rule[3] || p == i;
    }
    return true;
}
