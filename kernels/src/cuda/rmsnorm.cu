// RMSNorm with the residual add fused: out[0] = x + r (rounded to the dtype),
// out[1] = (x + r) / sqrt(mean((x + r)^2) + eps) * w, the norm taken in f32 from the unrounded
// sum. One block of 256 threads per row.
#define RMS_THREADS 256

template <typename L>
__device__ void rms_norm_residual(const typename L::T* __restrict__ x,
                                  const typename L::T* __restrict__ r,
                                  const typename L::T* __restrict__ w,
                                  typename L::T* __restrict__ out, int rows, int dim, float eps) {
    __shared__ float partial[RMS_THREADS / 32];
    const int row = blockIdx.x;
    if (row >= rows) return;
    const long long off = (long long)row * dim;
    typename L::T* sum_out = out + off;
    typename L::T* norm_out = out + (long long)rows * dim + off;
    float ss = 0.f;
    for (int c = threadIdx.x; c < dim; c += blockDim.x) {
        float v = L::ld(x[off + c]) + L::ld(r[off + c]);
        ss += v * v;
        sum_out[c] = L::st(v);
    }
    const float total = block_sum(ss, partial);
    const float inv = 1.f / sqrtf(total / dim + eps);
    for (int c = threadIdx.x; c < dim; c += blockDim.x) {
        float v = L::ld(x[off + c]) + L::ld(r[off + c]);
        norm_out[c] = L::st(v * inv * L::ld(w[c]));
    }
}

#define RMS_ENTRY(NAME, L)                                                                    \
    extern "C" __global__ void NAME(const L::T* x, const L::T* r, const L::T* w, L::T* out,   \
                                    int rows, int dim, float eps) {                           \
        rms_norm_residual<L>(x, r, w, out, rows, dim, eps);                                   \
    }
RMS_ENTRY(capstan_rms_norm_residual_f32, F32)
RMS_ENTRY(capstan_rms_norm_residual_bf16, BF16)
RMS_ENTRY(capstan_rms_norm_residual_f16, F16)
