// Shared by every Capstan kernel source (prepended before NVRTC compilation).
// No CUDA headers: bf16 and f16 are handled as raw 16-bit values, so the sources compile with
// NVRTC alone.
typedef unsigned short u16;
typedef unsigned char u8;
typedef unsigned int u32;

struct F32 {
    typedef float T;
    static __device__ __forceinline__ float ld(float x) { return x; }
    static __device__ __forceinline__ float st(float x) { return x; }
};

struct BF16 {
    typedef u16 T;
    static __device__ __forceinline__ float ld(u16 x) { return __uint_as_float(((u32)x) << 16); }
    // Round to nearest even, as half::bf16::from_f32; NaN stays NaN.
    static __device__ __forceinline__ u16 st(float f) {
        u32 u = __float_as_uint(f);
        if ((u & 0x7fffffffu) > 0x7f800000u) return (u16)((u >> 16) | 0x40u);
        u += 0x7fffu + ((u >> 16) & 1u);
        return (u16)(u >> 16);
    }
};

struct F16 {
    typedef u16 T;
#ifdef CAPSTAN_HOST_KERNELS
    // On the host (host_shim.hpp): the same conversions, round to nearest even.
    static float ld(u16 x) { return chost::h2f(x); }
    static u16 st(float f) { return chost::f2h(f); }
#else
    static __device__ __forceinline__ float ld(u16 x) {
        float f;
        asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x));
        return f;
    }
    static __device__ __forceinline__ u16 st(float f) {
        u16 h;
        asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
        return h;
    }
#endif
};

__device__ __forceinline__ float warp_sum(float v) {
#ifdef CAPSTAN_HOST_KERNELS
    // The same butterfly, one exchange on the host (host_shim.hpp) rather than five.
    return chost::warp_butterfly(v, [](float a, float b) { return a + b; });
#else
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
#endif
}

// The sum of every thread's `v` over the block (blockDim.x a multiple of 32), returned to every
// thread; `partial`: shared memory for blockDim.x / 32 floats.
__device__ __forceinline__ float block_sum(float v, float* partial) {
    v = warp_sum(v);
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
    __syncthreads();
    float total = 0.f;
    for (int i = 0; i < (int)(blockDim.x / 32); i++) total += partial[i];
    return total;
}

__device__ __forceinline__ float warp_max(float v) {
#ifdef CAPSTAN_HOST_KERNELS
    return chost::warp_butterfly(v, [](float a, float b) { return fmaxf(a, b); });
#else
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
#endif
}
