// Two attention passes over disjoint keys merged by their softmax statistics (log-sum-exp of
// each row's scaled, visible scores): out = (o1 e^(l1 - m) + o2 e^(l2 - m)) / (e^(l1 - m) +
// e^(l2 - m)), m = max(l1, l2), in f32. A pass whose row saw no key (statistics not finite: cuDNN
// leaves -inf or NaN there) adds nothing. SelfExtend's near and far keys, from cuDNN.
__device__ __forceinline__ bool finite(float x) { return x - x == 0.f; }

template <typename L>
__device__ void attention_merge(const typename L::T* __restrict__ o1, const float* __restrict__ l1,
                                const typename L::T* __restrict__ o2, const float* __restrict__ l2,
                                typename L::T* __restrict__ out, int rows, int dim) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)rows * dim) return;
    size_t r = idx / dim;
    float a = l1[r], b = l2[r];
    float x1 = L::ld(o1[idx]), x2 = L::ld(o2[idx]);
    float y;
    if (!finite(b)) {
        y = finite(a) ? x1 : 0.f;
    } else if (!finite(a)) {
        y = x2;
    } else {
        float m = fmaxf(a, b);
        float w1 = __expf(a - m), w2 = __expf(b - m);
        y = (x1 * w1 + x2 * w2) / (w1 + w2);
    }
    out[idx] = L::st(y);
}

#define MERGE_ENTRY(NAME, L)                                                                  \
    extern "C" __global__ void NAME(const L::T* o1, const float* l1, const L::T* o2,           \
                                    const float* l2, L::T* out, int rows, int dim) {          \
        attention_merge<L>(o1, l1, o2, l2, out, rows, dim);                                   \
    }
MERGE_ENTRY(capstan_attention_merge_f32, F32)
MERGE_ENTRY(capstan_attention_merge_bf16, BF16)
MERGE_ENTRY(capstan_attention_merge_f16, F16)
