// The values of GGML-quantized matrices, 32 at a time ("units"): a row of `cols` values is
// cols / 32 units; a unit is one block of the 32-value formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0)
// or one of the 8 sub-blocks of a 256-value super-block (Q4_K, Q6_K). Layouts as ggml's
// `block_*` structs (ggml-common.h): little-endian, f16 scales.
//
// Pure functions of the row's bytes: the decode-step kernels include this file after
// common.cuh, and kernels/tests/ggml_units.rs compiles it for the host (CAPSTAN_HD and
// CAPSTAN_H2F defined there) to check every format against candle's dequantization.
#ifndef CAPSTAN_HD
#define CAPSTAN_HD __device__ __forceinline__
#endif
#ifndef CAPSTAN_H2F
#define CAPSTAN_H2F(x) F16::ld(x)
#endif

CAPSTAN_HD float ggml_half(const u8* p) { return CAPSTAN_H2F((u16)(p[0] | (p[1] << 8))); }

// Each format decodes values j0..j0+N-1 of unit u (`values<N>`): the whole unit (`unit`, N 32)
// or the eight values 8t..8t+7 a lane of the batched products' tensor-core path takes as its B
// operand (`part8`, decode_step.cu). Value j of the 32-value formats' 16 bytes of nibbles is the
// low (j < 16) or high nibble of byte j % 16: `nibble`.
CAPSTAN_HD int nibble(const u8* qs, int j) { return (qs[j & 15] >> ((j >> 4) * 4)) & 15; }

#define GGML_UNIT_ENTRIES                                                                     \
    static CAPSTAN_HD void unit(const u8* row, int u, float* y) { values<32>(row, u, 0, y); } \
    static CAPSTAN_HD void part8(const u8* row, int u, int t, float* y) {                     \
        values<8>(row, u, 8 * t, y);                                                          \
    }

// Q4_0: { f16 d; u8 qs[16]; } x[j] = (qs[j] & 15) - 8, x[j + 16] = (qs[j] >> 4) - 8, times d.
struct Q4_0 {
    enum { BLOCK = 32, BYTES = 18 };
    template <int N>
    static CAPSTAN_HD void values(const u8* row, int u, int j0, float* y) {
        const u8* b = row + (long long)u * BYTES;
        const float d = ggml_half(b);
#pragma unroll
        for (int i = 0; i < N; i++) y[i] = (float)(nibble(b + 2, j0 + i) - 8) * d;
    }
    GGML_UNIT_ENTRIES
};

// Q4_1: { f16 d; f16 m; u8 qs[16]; } x = q * d + m.
struct Q4_1 {
    enum { BLOCK = 32, BYTES = 20 };
    template <int N>
    static CAPSTAN_HD void values(const u8* row, int u, int j0, float* y) {
        const u8* b = row + (long long)u * BYTES;
        const float d = ggml_half(b), m = ggml_half(b + 2);
#pragma unroll
        for (int i = 0; i < N; i++) y[i] = (float)nibble(b + 4, j0 + i) * d + m;
    }
    GGML_UNIT_ENTRIES
};

// Q5_0: { f16 d; u8 qh[4]; u8 qs[16]; } the fifth bit of value j is bit j of qh.
struct Q5_0 {
    enum { BLOCK = 32, BYTES = 22 };
    template <int N>
    static CAPSTAN_HD void values(const u8* row, int u, int j0, float* y) {
        const u8* b = row + (long long)u * BYTES;
        const float d = ggml_half(b);
        const u32 qh = (u32)b[2] | ((u32)b[3] << 8) | ((u32)b[4] << 16) | ((u32)b[5] << 24);
#pragma unroll
        for (int i = 0; i < N; i++) {
            const int j = j0 + i;
            y[i] = (float)((nibble(b + 6, j) | (int)(((qh >> j) & 1) << 4)) - 16) * d;
        }
    }
    GGML_UNIT_ENTRIES
};

// Q5_1: { f16 d; f16 m; u8 qh[4]; u8 qs[16]; } x = q * d + m.
struct Q5_1 {
    enum { BLOCK = 32, BYTES = 24 };
    template <int N>
    static CAPSTAN_HD void values(const u8* row, int u, int j0, float* y) {
        const u8* b = row + (long long)u * BYTES;
        const float d = ggml_half(b), m = ggml_half(b + 2);
        const u32 qh = (u32)b[4] | ((u32)b[5] << 8) | ((u32)b[6] << 16) | ((u32)b[7] << 24);
#pragma unroll
        for (int i = 0; i < N; i++) {
            const int j = j0 + i;
            y[i] = (float)(nibble(b + 8, j) | (int)(((qh >> j) & 1) << 4)) * d + m;
        }
    }
    GGML_UNIT_ENTRIES
};

// Q8_0: { f16 d; i8 qs[32]; }
struct Q8_0 {
    enum { BLOCK = 32, BYTES = 34 };
    template <int N>
    static CAPSTAN_HD void values(const u8* row, int u, int j0, float* y) {
        const u8* b = row + (long long)u * BYTES;
        const float d = ggml_half(b);
#pragma unroll
        for (int i = 0; i < N; i++) y[i] = (float)(signed char)b[2 + j0 + i] * d;
    }
    GGML_UNIT_ENTRIES
};

// Q4_K: { f16 d; f16 dmin; u8 scales[12]; u8 qs[128]; } 8 sub-blocks of 32 with 6-bit scales
// and mins; sub-block s reads the low (s even) or high nibbles of qs[32 * (s / 2)..][0..32].
struct Q4_K {
    enum { BLOCK = 256, BYTES = 144 };
    template <int N>
    static CAPSTAN_HD void values(const u8* row, int u, int j0, float* y) {
        const u8* b = row + (long long)(u / 8) * BYTES;
        const int s = u % 8;
        const u8* sc = b + 4;
        int scale, min;
        if (s < 4) {
            scale = sc[s] & 63;
            min = sc[s + 4] & 63;
        } else {
            scale = (sc[s + 4] & 15) | ((sc[s - 4] >> 6) << 4);
            min = (sc[s + 4] >> 4) | ((sc[s] >> 6) << 4);
        }
        const float d = ggml_half(b) * (float)scale, m = ggml_half(b + 2) * (float)min;
        const u8* q = b + 16 + 32 * (s / 2) + j0;
        const int shift = (s % 2) * 4;
#pragma unroll
        for (int i = 0; i < N; i++) y[i] = d * (float)((q[i] >> shift) & 15) - m;
    }
    GGML_UNIT_ENTRIES
};

// Q6_K: { u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d; } two halves of 128 values; quarter
// r of a half takes ql's low (r even) or high nibbles of ql[32 * (r % 2)..] and bits 2r, 2r+1
// of qh, scale scales[8 * half + 2 * r + j / 16], offset -32.
struct Q6_K {
    enum { BLOCK = 256, BYTES = 210 };
    template <int N>
    static CAPSTAN_HD void values(const u8* row, int u, int j0, float* y) {
        const u8* b = row + (long long)(u / 8) * BYTES;
        const int s = u % 8, half = s / 4, r = s % 4;
        const u8* ql = b + 64 * half + 32 * (r % 2);
        const u8* qh = b + 128 + 32 * half;
        const signed char* sc = (const signed char*)(b + 192) + 8 * half + 2 * r;
        const float d = ggml_half(b + 208);
        const int shift = (r / 2) * 4;
#pragma unroll
        for (int i = 0; i < N; i++) {
            const int j = j0 + i;
            const int q = (int)(((ql[j] >> shift) & 15) | (((qh[j] >> (2 * r)) & 3) << 4)) - 32;
            y[i] = d * (float)sc[j / 16] * (float)q;
        }
    }
    GGML_UNIT_ENTRIES
};
