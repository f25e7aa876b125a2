// mma.sync.aligned.m16n8k16 on 16-bit inputs with f32 accumulation (compute capability 8.0 and
// up), for the kernels that use tensor cores: attention_mma.cu, and the decoding step's batched
// products (decode_step.cu, STEP_MMA). Fragment layouts (PTX ISA, "Matrix Fragments for
// mma.m16n8k16"), lane = 4 * g + t: A (16 x 16, row): a0 (row g, cols 2t, 2t+1), a1 (row g+8,
// same cols), a2 (row g, cols 2t+8, 2t+9), a3 (row g+8, cols 2t+8, 2t+9); B (16 x 8, col): b0
// (rows 2t, 2t+1, col g), b1 (rows 2t+8, 2t+9, col g); C (16 x 8): c0, c1 (row g, cols 2t,
// 2t+1), c2, c3 (row g+8). The lower 16 bits of a register hold the element with the lower
// index.
template <typename L> struct Mma;

// One specialisation per 16-bit type, differing only in the PTX type name: the mma itself and
// the packing of two f32 into the A operand's halves, {lo, hi} rounded to nearest even
// (cvt's first source goes to the upper half).
#ifdef CAPSTAN_HOST_KERNELS
// On the host (host_shim.hpp): the instruction computed from the warp's fragments.
#define MMA_OPS(L, TY)                                                                          \
    template <> struct Mma<L> {                                                                \
        static void mma(float* c, const u32* a, u32 b0, u32 b1) {                              \
            chost::mma_m16n8k16<L>(c, a, b0, b1);                                              \
        }                                                                                      \
        static u32 pack(float lo, float hi) { return (u32)L::st(lo) | ((u32)L::st(hi) << 16); } \
    };
#else
#define MMA_OPS(L, TY)                                                                          \
    template <> struct Mma<L> {                                                                \
        static __device__ __forceinline__ void mma(float* c, const u32* a, u32 b0, u32 b1) {   \
            asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." TY "." TY ".f32 "            \
                         "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"               \
                         : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])                     \
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));     \
        }                                                                                      \
        static __device__ __forceinline__ u32 pack(float lo, float hi) {                       \
            u32 r;                                                                             \
            asm("cvt.rn." TY "x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));              \
            return r;                                                                          \
        }                                                                                      \
    };
#endif
MMA_OPS(BF16, "bf16")
MMA_OPS(F16, "f16")

// mma.sync.aligned.m16n8k8 on TF32 inputs with f32 accumulation (compute capability 8.0 and
// up), for the decoding step's batched products of GGML weights on f32 activations
// (decode_step.cu, STEP_GGML). Fragments (PTX ISA, "Matrix Fragments for mma.m16n8k8", .tf32),
// lane = 4 * g + t: A (16 x 8, row): a0 (row g, col t), a1 (row g+8, col t), a2 (row g, col
// t+4), a3 (row g+8, col t+4); B (8 x 8, col): b0 (row t, col g), b1 (row t+4, col g); C as
// above. `round`: an f32 to TF32 (cvt.rna: to nearest, ties away), kept in 32 bits.
struct MmaTf32 {
#ifdef CAPSTAN_HOST_KERNELS
    static void mma(float* c, const u32* a, u32 b0, u32 b1) {
        chost::mma_m16n8k8_tf32(c, a, b0, b1);
    }
    static u32 round(float f) { return chost::tf32(f); }
#else
    static __device__ __forceinline__ void mma(float* c, const u32* a, u32 b0, u32 b1) {
        asm volatile(
            "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
            "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
    static __device__ __forceinline__ u32 round(float f) {
        u32 r;
        asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(f));
        return r;
    }
#endif
};
