/* GPU writer (mlakv_cuda_write) against the CPU writer (mlakv_write), byte for byte.
 *
 *  1. codecs: the device E4M3 encoder used by the kernels (the sm_89+ hardware conversion)
 *     against the software one on all 2^32 fp32 inputs; the fast path's E2M1 code against
 *     the checked encoder on every fp32 in [0, 7); the fp8 Markstein quotient against IEEE
 *     division on every (x, s) the fp8_ds_mla recipes can produce from bf16 / fp16 inputs
 *     (s >= 2^-93, the fast path's condition) and amax / 448 on every amax; e2m1x8_fast
 *     (nibble and sign packing) against the CPU on random vectors of both dtypes; the device
 *     E4M3 / E2M1 encoders against the CPU codecs on every sign/exponent/top-7-mantissa
 *     pattern with 6 low-bit tails plus random patterns; the E4M3 decoder on all 256 bytes.
 *  2. writes: every format x dtype x block size (1, 16, 64, 61) x token count (1, 7, 64,
 *     4096, 5001; 270,001 and 1,000,000 with block size 64 only): inputs of every magnitude
 *     (1e-4 .. 1e4 and beyond, subnormal-scale groups, zero tokens and groups, -0, Inf/NaN
 *     elements, raw random bit patterns), padded row strides, padded cache blocks, slot
 *     mappings with padding (-1 and other negatives),
 *     distinct slots, out-of-range slots (capacity, 2^32 + a valid slot, INT64_MAX); the cache
 *     is pre-filled with a guard pattern on both sides and compared whole; the device counter
 *     must grow by exactly the number of out-of-range slots. The NVFP4 formats again with the
 *     accurate encoder, the static ones with a latent scale s_l (fresh random values; bf16 and
 *     fp16 inputs), and both, through each kernel (mlakv_cuda_write_with) on both sides of its
 *     default token range.
 *  3. a CUDA graph: capture one write, replay it twice with new data in the same buffers.
 *  4. argument validation: each failure returns its status and changes no byte; inputs or the
 *     counter overlapping the cache are rejected (MLAKV_ERR_ALIASING).
 *  5. tiny tokens (FORMATS.md's guards) at the threshold values and a sweep of magnitudes, and
 *     the bf16 RoPE raw copy (signalling NaNs kept), byte-identical to the CPU writer.
 *
 * Environment: MLAKV_SEED replays; MLAKV_CUDA_WRITE_MAX_N caps the token count and
 * MLAKV_CUDA_WRITE_QUICK=1 skips the exhaustive codec sweeps (for compute-sanitizer runs).
 * Exit 77 without a usable GPU. */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "cuda_host.h"
#include "mlakv.h"
#include "mlakv_experimental.h"
extern "C" {
#include "testutil.h"
}
#include "cuda/write/codec.cuh"

namespace codec = mlakv::cuda::write; /* the writer's device codecs */

static tu_rng g_rng;
/* the writer kernel the cases run (mlakv_cuda_write_with); AUTO = mlakv_cuda_write's choice */
static mlakv_cuda_write_kernel g_kernel = MLAKV_CUDA_WRITE_KERNEL_AUTO;
static const char *kernel_note(void) {
    return g_kernel == MLAKV_CUDA_WRITE_KERNEL_PER_WARP      ? " [one token per warp, forced]"
           : g_kernel == MLAKV_CUDA_WRITE_KERNEL_GRID_STRIDE ? " [grid-stride, forced]"
                                                             : "";
}
static uint16_t make_val(mlakv_dtype dtype, int e);
static uint16_t make_val_for_fast(mlakv_dtype dtype, int e) { return make_val(dtype, e); }

/* ------------------------------------------------------------------------------------------ */
/* 1. codecs                                                                                   */
/* ------------------------------------------------------------------------------------------ */

__global__ void k_e4m3_hw_vs_soft(unsigned long long *mismatches, unsigned int *first) {
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long bad = 0;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
         i < (1ull << 32); i += stride) {
        const float x = __uint_as_float((unsigned int)i);
        const uint32_t hw = codec::e4m3_encode(x), sw = codec::e4m3_encode_soft(x);
        if (hw != sw) {
            if (bad == 0) atomicCAS(first, 0xFFFFFFFFu, (unsigned int)i);
            bad++;
        }
    }
    if (bad) atomicAdd(mismatches, bad);
}

__global__ void k_codecs(const uint32_t *in, int n, uint8_t *e4m3, uint8_t *e4m3_soft,
                         uint8_t *e2m1, uint8_t *e2m1_fin) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float x = __uint_as_float(in[i]);
    e4m3[i] = (uint8_t)codec::e4m3_encode(x);
    e4m3_soft[i] = (uint8_t)codec::e4m3_encode_soft(x);
    e2m1[i] = (uint8_t)codec::e2m1_encode(x);
    e2m1_fin[i] = (uint8_t)codec::e2m1_encode_finite(x);
}

/* The fast E2M1 magnitude code (min of three rounded candidates) against the checked device
 * encoder on every fp32 in [0, 7) (the fast path's range). */
__global__ void k_e2m1_lt7(unsigned long long *mismatches, unsigned int *first) {
    const unsigned int stride = gridDim.x * blockDim.x;
    unsigned long long bad = 0;
    for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < 0x40E00000u; i += stride) {
        const float a = __uint_as_float(i);
        if (((codec::e2m1_code_lt7(a) + 6u) & 0xFFu) != (codec::e2m1_encode(a) & 7u)) {
            if (bad == 0) atomicCAS(first, 0xFFFFFFFFu, i);
            bad++;
        }
    }
    if (bad) atomicAdd(mismatches, bad);
}

/* e2m1x8_fast (nibble and sign packing included) on 16-byte input vectors. */
template <typename D> __global__ void k_e2m1x8(const uint4 *w, const float *inv, int n, uint32_t *out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = codec::e2m1x8_fast<D>(w[i], inv[i]);
}

/* The fp8_ds_mla quotients: for every amax of the dtype (block), every |x| <= amax of both
 * signs (threads), both recipes: div448(amax) against __fdiv_rn; where s >= 2^-93 (the fast
 * path's condition) div_markstein(x, s) against __fdiv_rn(x, s): the quotient bit for bit
 * where |x / s| >= 2^-10, the E4M3 byte everywhere. cnt: [0] amax / 448 mismatches,
 * [1] quotient mismatches, [2] E4M3 mismatches, [3] pairs checked. */
__device__ float dev_val(int f16, unsigned int h) {
    return f16 ? __half2float(__ushort_as_half((unsigned short)h)) : __uint_as_float(h << 16);
}

__global__ void k_markstein(int f16, unsigned long long *cnt) {
    const unsigned int h = blockIdx.x;
    const float amax = dev_val(f16, h);
    if (!(amax < INFINITY)) return; /* Inf / NaN amax: the checked path */
    if (threadIdx.x == 0 && __float_as_uint(codec::div448(amax)) != __float_as_uint(__fdiv_rn(amax, 448.0f)))
        atomicAdd(&cnt[0], 1ull);
    unsigned long long bq = 0, be = 0, n = 0;
    for (int pow2 = 0; pow2 < 2; pow2++) {
        const float s = codec::fp8_scale_recipe(__fdiv_rn(amax, 448.0f), pow2);
        if (!(s >= 0x1p-93f)) continue;
        const float r = __frcp_rn(s);
        for (unsigned int xh = threadIdx.x; xh <= 2 * h + 1; xh += blockDim.x) {
            const float x = dev_val(f16, (xh >> 1) | ((xh & 1) << 15));
            const float q = codec::div_markstein(x, s, r), ref = __fdiv_rn(x, s);
            if (__float_as_uint(q) != __float_as_uint(ref) && fabsf(ref) >= 0x1p-10f) bq++;
            if (codec::e4m3_encode(q) != codec::e4m3_encode(ref)) be++;
            n++;
        }
    }
    if (bq) atomicAdd(&cnt[1], bq);
    if (be) atomicAdd(&cnt[2], be);
    atomicAdd(&cnt[3], n);
}

/* Per E4M3 byte b: [b] e4m3_decode, [256 + b] e4m3_decode_fast (hardware conversion),
 * [512 + b] rcp_e4m3(e4m3_decode_fast(b)) (approximate reciprocal), [768 + b] __frcp_rn of the
 * decoded value (the CPU's 1.0f / d) */
__global__ void k_e4m3_scale(float *out) {
    const unsigned int b = threadIdx.x;
    out[b] = codec::e4m3_decode(b);
    out[256 + b] = codec::e4m3_decode_fast(b);
    out[512 + b] = codec::rcp_e4m3(codec::e4m3_decode_fast(b));
    out[768 + b] = __frcp_rn(codec::e4m3_decode(b));
}

/* fp32 values that differ in bits (any NaN equals any NaN) */
static int count_f32_diff(const float *got, const float *want, int n) {
    int bad = 0;
    for (int i = 0; i < n; i++)
        if (isnan(want[i]) ? !isnan(got[i]) : tu_f32_bits(want[i]) != tu_f32_bits(got[i])) bad++;
    return bad;
}

/* Runs an exhaustive sweep kernel (grid-stride over its inputs, <<<4096, 256>>>) that counts
 * mismatches and records one failing input in *first (0xFFFFFFFF: none); returns the count. */
static unsigned long long run_sweep(void (*kernel)(unsigned long long *, unsigned int *),
                                    unsigned int *first) {
    unsigned long long *d_bad, bad;
    unsigned int *d_first;
    CUDA_OK(cudaMalloc(&d_bad, 8));
    CUDA_OK(cudaMalloc(&d_first, 4));
    CUDA_OK(cudaMemset(d_bad, 0, 8));
    CUDA_OK(cudaMemset(d_first, 0xFF, 4));
    kernel<<<4096, 256>>>(d_bad, d_first);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaMemcpy(&bad, d_bad, 8, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(first, d_first, 4, cudaMemcpyDeviceToHost));
    cudaFree(d_bad);
    cudaFree(d_first);
    return bad;
}

static void test_codecs(int quick) {
    if (!quick) {
        unsigned int first;
        const unsigned long long bad = run_sweep(k_e4m3_hw_vs_soft, &first);
        CHECKF(bad == 0, "device E4M3 encoder differs from the software one on %llu of 2^32 "
                         "inputs (first 0x%08x)", bad, first);
        printf("codec: E4M3 kernel encoder vs software encoder, all 2^32 fp32: %llu mismatches\n", bad);
    }
    if (!quick) {
        unsigned int first;
        const unsigned long long bad = run_sweep(k_e2m1_lt7, &first);
        CHECKF(bad == 0, "fast E2M1 code differs from the checked encoder on %llu fp32 in [0, 7) "
                         "(first 0x%08x)", bad, first);
        printf("codec: fast E2M1 code vs checked encoder, every fp32 in [0, 7): %llu mismatches\n", bad);
        unsigned long long *d_bad;
        CUDA_OK(cudaMalloc(&d_bad, 4 * 8));
        for (int f16 = 0; f16 < 2; f16++) {
            unsigned long long cnt[4];
            CUDA_OK(cudaMemset(d_bad, 0, 4 * 8));
            k_markstein<<<f16 ? 0x7C00 : 0x7F80, 256>>>(f16, d_bad);
            CUDA_OK(cudaGetLastError());
            CUDA_OK(cudaMemcpy(cnt, d_bad, sizeof cnt, cudaMemcpyDeviceToHost));
            CHECKF(cnt[0] == 0 && cnt[1] == 0 && cnt[2] == 0 && cnt[3] > 1000000000ull,
                   "fp8 Markstein quotient (%s): amax/448 %llu, quotient %llu, E4M3 %llu "
                   "mismatches in %llu pairs", f16 ? "f16" : "bf16", cnt[0], cnt[1], cnt[2], cnt[3]);
            printf("codec: fp8 Markstein quotient (%s), every finite amax and |x| <= amax, s >= "
                   "2^-93, both recipes: %llu pairs, amax/448 %llu, quotient %llu, E4M3 %llu mismatches\n",
                   f16 ? "f16" : "bf16", cnt[3], cnt[0], cnt[1], cnt[2]);
        }
        cudaFree(d_bad);
    }
    /* e2m1x8_fast on random vectors of both dtypes, scaled so every |x * inv| < 7, against the
     * CPU codec; half of the cases with inv a power of two (exact ties on the grid) */
    for (int f16 = 0; f16 < 2; f16++) {
        const int nv = 1 << 18;
        uint4 *h_w = (uint4 *)malloc((size_t)nv * 16);
        float *h_inv = (float *)malloc((size_t)nv * 4);
        uint32_t *h_o = (uint32_t *)malloc((size_t)nv * 4);
        const mlakv_dtype dt = f16 ? MLAKV_F16 : MLAKV_BF16;
        for (int i = 0; i < nv; i++) {
            uint16_t v[8];
            float amax = 0.0f;
            const int e = (int)tu_range(&g_rng, -12, 12);
            for (int k = 0; k < 8; k++) {
                v[k] = tu_range(&g_rng, 0, 16) == 0 ? (uint16_t)((tu_next(&g_rng) & 1) << 15)
                                                    : make_val_for_fast(dt, e - (int)tu_range(&g_rng, 0, 6));
                const float x = f16 ? mlakv_f16_to_f32(v[k]) : mlakv_bf16_to_f32(v[k]);
                if (fabsf(x) > amax) amax = fabsf(x);
            }
            float inv;
            if (amax == 0.0f) inv = 1.0f;
            else if (i & 1) inv = ldexpf(1.0f, -(int)floorf(log2f(amax)) + (int)tu_range(&g_rng, -6, 2));
            else inv = 6.9f / amax * (float)tu_range(&g_rng, 1, 1001) / 1000.0f;
            h_w[i] = make_uint4(v[0] | ((uint32_t)v[1] << 16), v[2] | ((uint32_t)v[3] << 16),
                                v[4] | ((uint32_t)v[5] << 16), v[6] | ((uint32_t)v[7] << 16));
            h_inv[i] = inv;
        }
        uint4 *d_w;
        float *d_inv;
        uint32_t *d_o;
        CUDA_OK(cudaMalloc(&d_w, (size_t)nv * 16));
        CUDA_OK(cudaMalloc(&d_inv, (size_t)nv * 4));
        CUDA_OK(cudaMalloc(&d_o, (size_t)nv * 4));
        CUDA_OK(cudaMemcpy(d_w, h_w, (size_t)nv * 16, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(d_inv, h_inv, (size_t)nv * 4, cudaMemcpyHostToDevice));
        if (f16) k_e2m1x8<codec::F16In><<<nv / 256, 256>>>(d_w, d_inv, nv, d_o);
        else k_e2m1x8<codec::Bf16In><<<nv / 256, 256>>>(d_w, d_inv, nv, d_o);
        CUDA_OK(cudaGetLastError());
        CUDA_OK(cudaMemcpy(h_o, d_o, (size_t)nv * 4, cudaMemcpyDeviceToHost));
        long bad = 0, checked = 0;
        for (int i = 0; i < nv; i++) {
            const uint32_t w[4] = {h_w[i].x, h_w[i].y, h_w[i].z, h_w[i].w};
            uint32_t want = 0;
            int in_range = 1;
            for (int k = 0; k < 8; k++) {
                const uint16_t hb = (uint16_t)(w[k / 2] >> (16 * (k & 1)));
                const float q = (f16 ? mlakv_f16_to_f32(hb) : mlakv_bf16_to_f32(hb)) * h_inv[i];
                if (!(fabsf(q) < 7.0f)) in_range = 0;
                want |= (uint32_t)mlakv_e2m1_encode(q) << (4 * k);
            }
            if (!in_range) continue;
            checked++;
            if (h_o[i] != want && bad++ < 5)
                fprintf(stderr, "e2m1x8_fast(%s) case %d: 0x%08x, CPU 0x%08x\n", f16 ? "f16" : "bf16", i, h_o[i], want);
        }
        CHECKF(bad == 0 && checked > nv / 2, "e2m1x8_fast (%s) differs from the CPU on %ld of %ld vectors",
               f16 ? "f16" : "bf16", bad, checked);
        printf("codec: e2m1x8_fast (%s) vs CPU on %ld vectors: %ld mismatches\n", f16 ? "f16" : "bf16", checked, bad);
        cudaFree(d_w);
        cudaFree(d_inv);
        cudaFree(d_o);
        free(h_w);
        free(h_inv);
        free(h_o);
    }
    /* structured + random patterns against the CPU codecs */
    const int tails[6] = {0x0000, 0x0001, 0x7FFF, 0x8000, 0x8001, 0xFFFF};
    const int n_struct = 65536 * 6, n_rand = 1 << 20, n = n_struct + n_rand;
    uint32_t *h_in = (uint32_t *)malloc((size_t)n * 4);
    for (int hi = 0; hi < 65536; hi++)
        for (int t = 0; t < 6; t++) h_in[hi * 6 + t] = ((uint32_t)hi << 16) | (uint32_t)tails[t];
    for (int i = n_struct; i < n; i++) h_in[i] = (uint32_t)tu_next(&g_rng);
    uint32_t *d_in;
    uint8_t *d_out;
    CUDA_OK(cudaMalloc(&d_in, (size_t)n * 4));
    CUDA_OK(cudaMalloc(&d_out, (size_t)n * 4));
    CUDA_OK(cudaMemcpy(d_in, h_in, (size_t)n * 4, cudaMemcpyHostToDevice));
    k_codecs<<<(n + 255) / 256, 256>>>(d_in, n, d_out, d_out + n, d_out + 2 * (size_t)n, d_out + 3 * (size_t)n);
    CUDA_OK(cudaGetLastError());
    uint8_t *h_out = (uint8_t *)malloc((size_t)n * 4);
    CUDA_OK(cudaMemcpy(h_out, d_out, (size_t)n * 4, cudaMemcpyDeviceToHost));
    long bad_e4 = 0, bad_e4s = 0, bad_e2 = 0, bad_e2f = 0;
    for (int i = 0; i < n; i++) {
        float x = tu_bits_f32(h_in[i]);
        uint8_t w4 = mlakv_e4m3_encode(x), w2 = mlakv_e2m1_encode(x);
        if (h_out[i] != w4 && bad_e4++ < 5)
            fprintf(stderr, "e4m3(0x%08x) = 0x%02x, CPU 0x%02x\n", h_in[i], h_out[i], w4);
        if (h_out[n + i] != w4 && bad_e4s++ < 5)
            fprintf(stderr, "e4m3_soft(0x%08x) = 0x%02x, CPU 0x%02x\n", h_in[i], h_out[n + i], w4);
        if (h_out[2 * (size_t)n + i] != w2 && bad_e2++ < 5)
            fprintf(stderr, "e2m1(0x%08x) = 0x%x, CPU 0x%x\n", h_in[i], h_out[2 * (size_t)n + i], w2);
        if (isfinite(x) && h_out[3 * (size_t)n + i] != w2 && bad_e2f++ < 5)
            fprintf(stderr, "e2m1_finite(0x%08x) = 0x%x, CPU 0x%x\n", h_in[i], h_out[3 * (size_t)n + i], w2);
    }
    CHECKF(bad_e4 == 0, "device E4M3 differs from CPU on %ld of %d patterns", bad_e4, n);
    CHECKF(bad_e4s == 0, "software device E4M3 differs from CPU on %ld of %d patterns", bad_e4s, n);
    CHECKF(bad_e2 == 0, "device E2M1 differs from CPU on %ld of %d patterns", bad_e2, n);
    CHECKF(bad_e2f == 0, "device E2M1 (finite) differs from CPU on %ld of %d patterns", bad_e2f, n);
    printf("codec: E4M3 / E4M3 soft / E2M1 / E2M1 finite vs CPU on %d patterns: %ld %ld %ld %ld mismatches\n",
           n, bad_e4, bad_e4s, bad_e2, bad_e2f);
    float *d_sc, h_sc[1024], cpu_dec[256];
    CUDA_OK(cudaMalloc(&d_sc, sizeof h_sc));
    k_e4m3_scale<<<1, 256>>>(d_sc);
    CUDA_OK(cudaMemcpy(h_sc, d_sc, sizeof h_sc, cudaMemcpyDeviceToHost));
    for (int b = 0; b < 256; b++) cpu_dec[b] = mlakv_e4m3_decode((uint8_t)b);
    const int bad_dec = count_f32_diff(h_sc, cpu_dec, 256), bad_fast = count_f32_diff(h_sc + 256, cpu_dec, 256),
              bad_rcp = count_f32_diff(h_sc + 512, h_sc + 768, 256);
    CHECKF(bad_dec == 0, "device E4M3 decode differs from CPU on %d bytes", bad_dec);
    CHECKF(bad_fast == 0, "device E4M3 decode (hardware conversion) differs from CPU on %d bytes", bad_fast);
    CHECKF(bad_rcp == 0, "rcp_e4m3 of a decoded E4M3 scale differs from __frcp_rn on %d bytes", bad_rcp);
    cudaFree(d_sc);
    cudaFree(d_in);
    cudaFree(d_out);
    free(h_in);
    free(h_out);
}

/* ------------------------------------------------------------------------------------------ */
/* 2. inputs                                                                                   */
/* ------------------------------------------------------------------------------------------ */

/* A 16-bit value of `dtype` with magnitude about 2^e (random mantissa and sign). */
static uint16_t make_val(mlakv_dtype dtype, int e) {
    uint64_t r = tu_next(&g_rng);
    uint16_t sign = (uint16_t)((r & 1) << 15);
    if (dtype == MLAKV_BF16) {
        int be = e + 127;
        if (be >= 255) be = 254;
        if (be <= 0) return (uint16_t)(sign | ((r >> 1) & 0x7F)); /* subnormal or zero */
        return (uint16_t)(sign | (be << 7) | ((r >> 1) & 0x7F));
    }
    int he = e + 15;
    if (he >= 31) he = 30;
    if (he <= 0) {
        int shift = 1 - he; /* f16 subnormal: mantissa scaled down */
        return (uint16_t)(sign | (shift > 10 ? 0 : (((r >> 1) & 0x3FF) >> shift)));
    }
    return (uint16_t)(sign | (he << 10) | ((r >> 1) & 0x3FF));
}

static uint16_t special(mlakv_dtype dtype) {
    uint64_t r = tu_next(&g_rng);
    uint16_t sign = (uint16_t)((r & 1) << 15);
    int k = (int)((r >> 1) % 4);
    if (dtype == MLAKV_BF16) {
        if (k == 0) return (uint16_t)(sign | 0x7F80);                     /* Inf */
        if (k == 1) return (uint16_t)(sign | 0x7FC0 | ((r >> 8) & 0x3F)); /* quiet NaN */
        if (k == 2) return (uint16_t)(sign | 0x7F80 | (1 + ((r >> 8) & 0x3E))); /* signaling */
        return sign;                                                        /* -0 / +0 */
    }
    if (k == 0) return (uint16_t)(sign | 0x7C00);
    if (k == 1) return (uint16_t)(sign | 0x7E00 | ((r >> 8) & 0x1FF));
    if (k == 2) return (uint16_t)(sign | 0x7C00 | (1 + ((r >> 8) & 0x1FE)));
    return sign;
}

/* One token's 576 values (latent then rope), by a randomly drawn class. */
static void make_token(mlakv_dtype dtype, uint16_t *lat, uint16_t *rope) {
    int cls = (int)tu_range(&g_rng, 0, 100);
    int emax = dtype == MLAKV_BF16 ? 127 : 15;
    if (cls < 55) { /* 1e-4 .. 1e4 per token, groups spread below it */
        int e = (int)tu_range(&g_rng, -14, 14);
        for (int g = 0; g < 32; g++) {
            int ge = e - (int)tu_range(&g_rng, 0, 7);
            for (int i = 0; i < 16; i++) lat[16 * g + i] = make_val(dtype, ge - (int)tu_range(&g_rng, 0, 5));
        }
    } else if (cls < 65) { /* subnormal-scale groups: E4M3-subnormal group scales */
        int e = (int)tu_range(&g_rng, -22, -10);
        for (int i = 0; i < 512; i++) lat[i] = make_val(dtype, e - (int)tu_range(&g_rng, 0, 4));
    } else if (cls < 70) { /* zero token (with some -0) */
        for (int i = 0; i < 512; i++) lat[i] = (uint16_t)((tu_next(&g_rng) & 1) << 15);
    } else if (cls < 75) { /* zero groups among normal ones */
        int e = (int)tu_range(&g_rng, -8, 8);
        for (int g = 0; g < 32; g++) {
            int zero = (int)tu_range(&g_rng, 0, 2);
            for (int i = 0; i < 16; i++)
                lat[16 * g + i] = zero ? (uint16_t)((tu_next(&g_rng) & 1) << 15) : make_val(dtype, e - (int)tu_range(&g_rng, 0, 4));
        }
    } else if (cls < 83) { /* Inf / NaN / zeros sprinkled into normal values */
        int e = (int)tu_range(&g_rng, -10, 10);
        for (int i = 0; i < 512; i++) lat[i] = make_val(dtype, e - (int)tu_range(&g_rng, 0, 4));
        int k = (int)tu_range(&g_rng, 1, 6);
        for (int j = 0; j < k; j++) lat[tu_range(&g_rng, 0, 512)] = special(dtype);
    } else if (cls < 88) { /* the top of the range: saturation */
        for (int i = 0; i < 512; i++) lat[i] = make_val(dtype, emax - (int)tu_range(&g_rng, 0, 3));
    } else if (cls < 93) { /* the bottom of the range (bf16/f16 subnormals) */
        int base = dtype == MLAKV_BF16 ? -133 : -24;
        for (int i = 0; i < 512; i++) lat[i] = make_val(dtype, base + (int)tu_range(&g_rng, 0, 12));
    } else { /* raw random bit patterns */
        for (int i = 0; i < 512; i++) lat[i] = (uint16_t)tu_next(&g_rng);
    }
    int rc = (int)tu_range(&g_rng, 0, 20);
    int re = (int)tu_range(&g_rng, -14, 14);
    for (int j = 0; j < 64; j++) {
        if (rc == 0) rope[j] = (uint16_t)tu_next(&g_rng);
        else if (rc == 1) rope[j] = (uint16_t)((tu_next(&g_rng) & 1) << 15);
        else rope[j] = make_val(dtype, re - (int)tu_range(&g_rng, 0, 6));
    }
    if (rc == 2) rope[tu_range(&g_rng, 0, 64)] = special(dtype);
}

/* ------------------------------------------------------------------------------------------ */
/* CPU reference, in parallel chunks (distinct slots: disjoint records)                         */
/* ------------------------------------------------------------------------------------------ */

typedef struct {
    const mlakv_cache *cache;
    int64_t begin, end;
    const uint16_t *kv_c, *k_pe;
    int64_t kv_stride, pe_stride;
    mlakv_dtype dtype;
    const int64_t *slots;
    const mlakv_write_options *options;
    mlakv_status st;
} cpu_job;

static void *cpu_worker(void *arg) {
    cpu_job *j = (cpu_job *)arg;
    j->st = mlakv_write(j->cache, j->end - j->begin, j->kv_c + j->begin * j->kv_stride, j->kv_stride,
                        j->k_pe + j->begin * j->pe_stride, j->pe_stride, j->dtype, j->slots + j->begin,
                        j->options);
    return NULL;
}

static mlakv_status cpu_write_parallel(const mlakv_cache *cache, int64_t n, const uint16_t *kv_c,
                                       int64_t kv_stride, const uint16_t *k_pe, int64_t pe_stride,
                                       mlakv_dtype dtype, const int64_t *slots,
                                       const mlakv_write_options *options) {
    enum { T = 16 };
    int threads = n >= 4096 ? T : 1;
    pthread_t tid[T];
    cpu_job jobs[T];
    for (int t = 0; t < threads; t++) {
        cpu_job j = {cache, n * t / threads, n * (t + 1) / threads, kv_c, k_pe, kv_stride,
                     pe_stride, dtype, slots, options, MLAKV_OK};
        jobs[t] = j;
        if (threads > 1) pthread_create(&tid[t], NULL, cpu_worker, &jobs[t]);
        else cpu_worker(&jobs[t]);
    }
    mlakv_status st = MLAKV_OK;
    for (int t = 0; t < threads; t++) {
        if (threads > 1) pthread_join(tid[t], NULL);
        if (jobs[t].st != MLAKV_OK) st = jobs[t].st;
    }
    return st;
}

/* ------------------------------------------------------------------------------------------ */
/* 2. one write case                                                                           */
/* ------------------------------------------------------------------------------------------ */

typedef struct {
    uint16_t *kv, *pe;
    int64_t kv_stride, pe_stride;
    int64_t *slots_gpu, *slots_cpu; /* cpu: out-of-range replaced by -1 */
    long long rejected;
} inputs;

static void make_inputs(inputs *in, int64_t n, mlakv_dtype dtype, int64_t capacity) {
    in->kv_stride = 512 + 8 * tu_range(&g_rng, 0, 3);
    in->pe_stride = 64 + 8 * tu_range(&g_rng, 0, 3);
    in->kv = (uint16_t *)malloc((size_t)n * in->kv_stride * 2);
    in->pe = (uint16_t *)malloc((size_t)n * in->pe_stride * 2);
    /* beyond 65536 tokens, rows are drawn from the first 65536 (fresh random tokens of every
     * class) so that the million-token cases stay quick to generate */
    const int64_t fresh = 65536;
    for (int64_t i = 0; i < n; i++) {
        if (i < fresh) {
            make_token(dtype, in->kv + i * in->kv_stride, in->pe + i * in->pe_stride);
        } else {
            int64_t src = tu_range(&g_rng, 0, fresh);
            memcpy(in->kv + i * in->kv_stride, in->kv + src * in->kv_stride, 512 * 2);
            memcpy(in->pe + i * in->pe_stride, in->pe + src * in->pe_stride, 64 * 2);
        }
        /* stride padding gets garbage that must not be read into records */
        for (int64_t j = 512; j < in->kv_stride; j++) in->kv[i * in->kv_stride + j] = 0x7FC1;
        for (int64_t j = 64; j < in->pe_stride; j++) in->pe[i * in->pe_stride + j] = 0x7FC1;
    }
    /* distinct slots: a random choice of n of the capacity slots (partial Fisher-Yates) */
    int64_t *perm = (int64_t *)malloc((size_t)capacity * 8);
    for (int64_t s = 0; s < capacity; s++) perm[s] = s;
    for (int64_t i = 0; i < n && i < capacity; i++) {
        int64_t j = tu_range(&g_rng, i, capacity), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    in->slots_gpu = (int64_t *)malloc((size_t)n * 8);
    in->slots_cpu = (int64_t *)malloc((size_t)n * 8);
    in->rejected = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t s = perm[i % capacity];
        int r = (int)tu_range(&g_rng, 0, 100);
        int64_t g = s;
        if (r < 6) g = -1;
        else if (r == 6) g = (tu_next(&g_rng) & 1) ? INT64_MIN : -2 - (int64_t)tu_range(&g_rng, 0, 1000);
        else if (r == 7) g = capacity + tu_range(&g_rng, 0, 3);
        else if (r == 8) g = ((int64_t)1 << 32) + s; /* must not alias slot s after narrowing */
        else if (r == 9) g = INT64_MAX - tu_range(&g_rng, 0, 2);
        in->slots_gpu[i] = g;
        in->slots_cpu[i] = g >= capacity ? -1 : g;
        if (g >= capacity) in->rejected++;
    }
    free(perm);
}

static void free_inputs(inputs *in) {
    free(in->kv);
    free(in->pe);
    free(in->slots_gpu);
    free(in->slots_cpu);
}

static void fill_guard(uint8_t *p, size_t bytes, uint8_t salt) {
    for (size_t i = 0; i < bytes; i++) p[i] = (uint8_t)(0xA5 ^ (i * 31) ^ salt);
}

/* Compare whole caches; print the first differences with their slot and record offset. */
static long compare_cache(const uint8_t *got, const uint8_t *want, size_t bytes,
                          const mlakv_cache *c, const char *what) {
    long bad = 0;
    size_t rec = mlakv_record_bytes(c->format);
    for (size_t i = 0; i < bytes; i++) {
        if (got[i] == want[i]) continue;
        if (bad < 5) {
            int64_t blk = (int64_t)(i / (size_t)c->block_stride_bytes);
            int64_t in_blk = (int64_t)(i % (size_t)c->block_stride_bytes);
            fprintf(stderr, "  %s: byte %zu (block %lld, slot %lld, record byte %lld): GPU 0x%02x, CPU 0x%02x\n",
                    what, i, (long long)blk, (long long)(blk * c->block_size + in_blk / (int64_t)rec),
                    (long long)(in_blk % (int64_t)rec), got[i], want[i]);
        }
        bad++;
    }
    return bad;
}

static const char *dtype_name(mlakv_dtype d) { return d == MLAKV_BF16 ? "bf16" : "f16"; }

static void run_case(mlakv_format fmt, mlakv_dtype dtype, int64_t block_size, int64_t n,
                     const mlakv_write_options *opt, float latent_scale = 1.0f) {
    const size_t rec = mlakv_record_bytes(fmt);
    int64_t want_cap = n + n / 4 + tu_range(&g_rng, 1, 40);
    int64_t num_blocks = (want_cap + block_size - 1) / block_size;
    int64_t stride = tu_range(&g_rng, 0, 2) ? 0 : block_size * (int64_t)rec + 16 * tu_range(&g_rng, 1, 4);
    size_t bytes;
    CHECK_OK(mlakv_cache_bytes(fmt, num_blocks, block_size, stride, &bytes));
    uint8_t *h_cpu = (uint8_t *)malloc(bytes), *h_gpu = (uint8_t *)malloc(bytes);
    uint8_t salt = (uint8_t)tu_next(&g_rng);
    fill_guard(h_cpu, bytes, salt);
    mlakv_cache cpu_cache, gpu_cache;
    CHECK_OK(mlakv_cache_init(&cpu_cache, h_cpu, fmt, num_blocks, block_size, stride));
    CHECK_OK(mlakv_cache_set_latent_scale(&cpu_cache, latent_scale));
    int64_t capacity = mlakv_cache_capacity(&cpu_cache);

    inputs in;
    make_inputs(&in, n, dtype, capacity);
    CHECK_OK(cpu_write_parallel(&cpu_cache, n, in.kv, in.kv_stride, in.pe, in.pe_stride, dtype,
                                in.slots_cpu, opt));

    uint8_t *d_cache;
    uint16_t *d_kv, *d_pe;
    int64_t *d_slots;
    unsigned long long *d_rej;
    CUDA_OK(cudaMalloc(&d_cache, bytes));
    CUDA_OK(cudaMalloc(&d_kv, (size_t)n * in.kv_stride * 2));
    CUDA_OK(cudaMalloc(&d_pe, (size_t)n * in.pe_stride * 2));
    CUDA_OK(cudaMalloc(&d_slots, (size_t)n * 8));
    CUDA_OK(cudaMalloc(&d_rej, 8));
    fill_guard(h_gpu, bytes, salt);
    CUDA_OK(cudaMemcpy(d_cache, h_gpu, bytes, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(d_kv, in.kv, (size_t)n * in.kv_stride * 2, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(d_pe, in.pe, (size_t)n * in.pe_stride * 2, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(d_slots, in.slots_gpu, (size_t)n * 8, cudaMemcpyHostToDevice));
    unsigned long long rej0 = tu_next(&g_rng) % 1000; /* the counter is added to, not set */
    CUDA_OK(cudaMemcpy(d_rej, &rej0, 8, cudaMemcpyHostToDevice));
    CHECK_OK(mlakv_cache_init(&gpu_cache, d_cache, fmt, num_blocks, block_size, stride));
    CHECK_OK(mlakv_cache_set_latent_scale(&gpu_cache, latent_scale));
    CHECK_OK(mlakv_cuda_write_with(&gpu_cache, n, d_kv, in.kv_stride, d_pe, in.pe_stride, dtype,
                                   d_slots, opt, g_kernel, d_rej, NULL));
    CUDA_OK(cudaDeviceSynchronize());
    unsigned long long rej;
    CUDA_OK(cudaMemcpy(h_gpu, d_cache, bytes, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(&rej, d_rej, 8, cudaMemcpyDeviceToHost));

    char what[240], ls[40] = "";
    const bool forced = g_kernel != MLAKV_CUDA_WRITE_KERNEL_AUTO;
    if (latent_scale != 1.0f) snprintf(ls, sizeof ls, " s_l=%g", (double)latent_scale);
    snprintf(what, sizeof what, "%s %s%s%s%s bs=%lld n=%lld stride=%lld%s", mlakv_format_get(fmt)->name,
             dtype_name(dtype), opt && opt->fp8_scale_recipe == MLAKV_FP8_SCALE_POW2 ? " pow2" : "",
             opt && opt->nvfp4_encoder == MLAKV_NVFP4_ENCODER_ACCURATE ? " accurate" : "", ls,
             (long long)block_size, (long long)n, (long long)stride, kernel_note());
    long bad = compare_cache(h_gpu, h_cpu, bytes, &gpu_cache, what);
    CHECKF(bad == 0, "%s: %ld cache bytes differ from the CPU writer", what, bad);
    CHECKF(rej == rej0 + (unsigned long long)in.rejected, "%s: rejected counter %llu, want %llu + %lld",
           what, rej, rej0, in.rejected);
    if (n >= 4096 || bad || forced)
        printf("write %-48s: %s (%lld rejected)\n", what, bad ? "MISMATCH" : "identical", in.rejected);

    cudaFree(d_cache);
    cudaFree(d_kv);
    cudaFree(d_pe);
    cudaFree(d_slots);
    cudaFree(d_rej);
    free(h_cpu);
    free(h_gpu);
    free_inputs(&in);
}

/* ------------------------------------------------------------------------------------------ */
/* 3. CUDA graph                                                                               */
/* ------------------------------------------------------------------------------------------ */

static void test_graph(mlakv_format fmt, mlakv_dtype dtype, int64_t n) {
    const int64_t block_size = 64, num_blocks = 8;
    size_t bytes;
    CHECK_OK(mlakv_cache_bytes(fmt, num_blocks, block_size, 0, &bytes));
    uint8_t *h_cpu = (uint8_t *)malloc(bytes), *h_gpu = (uint8_t *)malloc(bytes);
    uint8_t *d_cache;
    uint16_t *d_kv, *d_pe;
    int64_t *d_slots;
    unsigned long long *d_rej;
    CUDA_OK(cudaMalloc(&d_cache, bytes));
    CUDA_OK(cudaMalloc(&d_kv, (size_t)n * 528 * 2));
    CUDA_OK(cudaMalloc(&d_pe, (size_t)n * 72 * 2));
    CUDA_OK(cudaMalloc(&d_slots, (size_t)n * 8));
    CUDA_OK(cudaMalloc(&d_rej, 8));
    CUDA_OK(cudaMemset(d_rej, 0, 8));
    mlakv_cache gc, cc;
    CHECK_OK(mlakv_cache_init(&gc, d_cache, fmt, num_blocks, block_size, 0));
    CHECK_OK(mlakv_cache_init(&cc, h_cpu, fmt, num_blocks, block_size, 0));
    cudaStream_t s;
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    mlakv_status st = mlakv_cuda_write(&gc, n, d_kv, 528, d_pe, 72, dtype, d_slots, NULL, d_rej, s);
    CUDA_OK(cudaStreamEndCapture(s, &graph));
    CHECK_OK(st);
    CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    unsigned long long rej_total = 0;
    for (int round = 0; round < 2; round++) {
        inputs in;
        /* fixed strides of the capture: regenerate with the same layout */
        make_inputs(&in, n, dtype, gc.num_blocks * gc.block_size);
        uint16_t *kv = (uint16_t *)malloc((size_t)n * 528 * 2), *pe = (uint16_t *)malloc((size_t)n * 72 * 2);
        for (int64_t i = 0; i < n; i++) {
            memcpy(kv + i * 528, in.kv + i * in.kv_stride, 512 * 2);
            memcpy(pe + i * 72, in.pe + i * in.pe_stride, 64 * 2);
        }
        uint8_t salt = (uint8_t)tu_next(&g_rng);
        fill_guard(h_cpu, bytes, salt);
        fill_guard(h_gpu, bytes, salt);
        CUDA_OK(cudaMemcpy(d_cache, h_gpu, bytes, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(d_kv, kv, (size_t)n * 528 * 2, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(d_pe, pe, (size_t)n * 72 * 2, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(d_slots, in.slots_gpu, (size_t)n * 8, cudaMemcpyHostToDevice));
        CUDA_OK(cudaGraphLaunch(exec, s));
        CUDA_OK(cudaStreamSynchronize(s));
        CUDA_OK(cudaMemcpy(h_gpu, d_cache, bytes, cudaMemcpyDeviceToHost));
        CHECK_OK(mlakv_write(&cc, n, kv, 528, pe, 72, dtype, in.slots_cpu, NULL));
        char what[96];
        snprintf(what, sizeof what, "graph replay %d %s %s n=%lld", round, mlakv_format_get(fmt)->name,
                 dtype_name(dtype), (long long)n);
        long bad = compare_cache(h_gpu, h_cpu, bytes, &gc, what);
        CHECKF(bad == 0, "%s: %ld bytes differ", what, bad);
        rej_total += (unsigned long long)in.rejected;
        unsigned long long rej;
        CUDA_OK(cudaMemcpy(&rej, d_rej, 8, cudaMemcpyDeviceToHost));
        CHECKF(rej == rej_total, "%s: rejected %llu, want %llu", what, rej, rej_total);
        printf("%s: %s\n", what, bad ? "MISMATCH" : "identical");
        free(kv);
        free(pe);
        free_inputs(&in);
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(s);
    cudaFree(d_cache);
    cudaFree(d_kv);
    cudaFree(d_pe);
    cudaFree(d_slots);
    cudaFree(d_rej);
    free(h_cpu);
    free(h_gpu);
}

/* ------------------------------------------------------------------------------------------ */
/* 5. tiny tokens and raw bf16 RoPE                                                             */
/* ------------------------------------------------------------------------------------------ */

/* n tokens (rows of 512 / 64 values of dtype) through the GPU writer and the CPU writer into
 * slots 0..n-1; every byte compared. With gpu_out, the GPU cache is returned (n records). */
static void gpu_vs_cpu(mlakv_format fmt, mlakv_dtype dtype, int64_t n, const uint16_t *kv,
                       const uint16_t *pe, const char *what, uint8_t **gpu_out) {
    const size_t rec = mlakv_record_bytes(fmt);
    const int64_t bs = 16, nb = (n + bs - 1) / bs;
    size_t bytes;
    CHECK_OK(mlakv_cache_bytes(fmt, nb, bs, 0, &bytes));
    uint8_t *h_cpu = (uint8_t *)malloc(bytes), *h_gpu = (uint8_t *)malloc(bytes);
    fill_guard(h_cpu, bytes, 3);
    int64_t *slots = (int64_t *)malloc((size_t)n * 8);
    for (int64_t i = 0; i < n; i++) slots[i] = i;
    mlakv_cache cc, gc;
    CHECK_OK(mlakv_cache_init(&cc, h_cpu, fmt, nb, bs, 0));
    CHECK_OK(mlakv_write(&cc, n, kv, 512, pe, 64, dtype, slots, NULL));
    uint8_t *d_cache;
    uint16_t *d_kv, *d_pe;
    int64_t *d_slots;
    CUDA_OK(cudaMalloc(&d_cache, bytes));
    CUDA_OK(cudaMalloc(&d_kv, (size_t)n * 512 * 2));
    CUDA_OK(cudaMalloc(&d_pe, (size_t)n * 64 * 2));
    CUDA_OK(cudaMalloc(&d_slots, (size_t)n * 8));
    fill_guard(h_gpu, bytes, 3);
    CUDA_OK(cudaMemcpy(d_cache, h_gpu, bytes, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(d_kv, kv, (size_t)n * 512 * 2, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(d_pe, pe, (size_t)n * 64 * 2, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(d_slots, slots, (size_t)n * 8, cudaMemcpyHostToDevice));
    CHECK_OK(mlakv_cache_init(&gc, d_cache, fmt, nb, bs, 0));
    CHECK_OK(mlakv_cuda_write_with(&gc, n, d_kv, 512, d_pe, 64, dtype, d_slots, NULL, g_kernel,
                                   NULL, NULL));
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(h_gpu, d_cache, bytes, cudaMemcpyDeviceToHost));
    long bad = compare_cache(h_gpu, h_cpu, bytes, &gc, what);
    CHECKF(bad == 0, "%s %s: %ld bytes differ from the CPU writer", what, mlakv_format_get(fmt)->name, bad);
    printf("%s %s %s: %s\n", what, mlakv_format_get(fmt)->name, dtype_name(dtype), bad ? "MISMATCH" : "identical");
    (void)rec;
    cudaFree(d_cache);
    cudaFree(d_kv);
    cudaFree(d_pe);
    cudaFree(d_slots);
    free(slots);
    free(h_cpu);
    if (gpu_out) *gpu_out = h_gpu;
    else free(h_gpu);
}

static float bf16_val(uint16_t b) { return mlakv_bf16_to_f32(b); }
/* first positive bf16 v with pred(v) (the guards' thresholds, as tests/test_writer.c) */
static uint16_t first_bf16(int (*pred)(float)) {
    for (uint32_t b = 1; b < 0x7F80; b++)
        if (pred(bf16_val((uint16_t)b))) return (uint16_t)b;
    return 0;
}
static int st_kept(float amax) { return amax * tu_bits_f32(0x39C30C31u) >= 0x1p-116f; }
static int rope_kept(float amax) {
    const float scale = amax * tu_bits_f32(0x3B124925u);
    return scale != 0.0f && !isinf(1.0f / scale);
}

/* a bf16 token: latent max lat_max (element 5), groups spread far below it, rope max rope_max */
static void tiny_token(uint16_t lat_max, uint16_t rope_max, uint16_t *lat, uint16_t *rope) {
    const float a = bf16_val(lat_max), ra = bf16_val(rope_max);
    for (int g = 0; g < 32; g++) {
        const int k = g == 0 ? 0 : (int)tu_range(&g_rng, 0, 17);
        for (int i = 0; i < 16; i++) {
            const float v = (g & 3) == 3 ? 0.0f : ldexpf(a * (float)tu_uniform(&g_rng), -k);
            lat[16 * g + i] = mlakv_f32_to_bf16(tu_range(&g_rng, 0, 2) ? -v : v);
        }
    }
    lat[5] = lat_max;
    for (int j = 0; j < 64; j++)
        rope[j] = j % 5 == 0 ? 0 : mlakv_f32_to_bf16(ra * (float)tu_uniform(&g_rng));
    rope[7] = rope_max;
}

/* FORMATS.md's guards in the GPU writer (two-level s_t < 2^-116 -> zero latent, RoPE scale
 * without a finite reciprocal -> zero RoPE): tokens at the bf16 values just below and at each
 * threshold and a sweep of magnitudes, through both kernels, byte-identical to the CPU writer
 * (whose guard tests/test_writer.c checks against the recipe). Then the bf16 RoPE field: a raw
 * copy of bf16 input, signalling NaNs included (0x7F81 stays 0x7F81), and fp16 NaNs as the CPU
 * converts them. */
static void test_tiny_tokens(void) {
    const uint16_t st_b = first_bf16(st_kept), rope_b = first_bf16(rope_kept);
    CHECK(st_b > 1 && rope_b > 1);
    const uint16_t one = mlakv_f32_to_bf16(1.0f);
    enum { N = 8 * 20 + 44 * 4 };
    uint16_t *kv = (uint16_t *)malloc((size_t)N * 512 * 2), *pe = (uint16_t *)malloc((size_t)N * 64 * 2);
    int64_t n = 0;
    const uint16_t lat_rope[8][2] = {{(uint16_t)(st_b - 1), one}, {st_b, one}, {(uint16_t)(st_b + 1), one},
                                     {one, (uint16_t)(rope_b - 1)}, {one, rope_b}, {one, (uint16_t)(rope_b + 1)},
                                     {(uint16_t)(st_b - 1), (uint16_t)(rope_b - 1)}, {st_b, rope_b}};
    for (int c = 0; c < 8; c++)
        for (int t = 0; t < 20; t++, n++) tiny_token(lat_rope[c][0], lat_rope[c][1], kv + n * 512, pe + n * 64);
    for (int e = -133; e <= -90; e++)
        for (int q = 0; q < 4; q++, n++) {
            const uint16_t a = mlakv_f32_to_bf16(ldexpf(1.0f + q / 4.0f, e));
            tiny_token(a, a, kv + n * 512, pe + n * 64);
        }
    for (int f = 0; f < MLAKV_FORMAT_COUNT; f++) {
        /* n = 336: the one-token-per-warp kernel by default, the grid-stride one forced */
        gpu_vs_cpu((mlakv_format)f, MLAKV_BF16, n, kv, pe, "tiny tokens [one token per warp]", NULL);
        g_kernel = MLAKV_CUDA_WRITE_KERNEL_GRID_STRIDE;
        gpu_vs_cpu((mlakv_format)f, MLAKV_BF16, n, kv, pe, "tiny tokens [grid-stride]", NULL);
        g_kernel = MLAKV_CUDA_WRITE_KERNEL_AUTO;
    }
    /* the guarded tokens are stored as zero on the GPU too (not only as the CPU does) */
    uint8_t *g;
    gpu_vs_cpu(MLAKV_NVFP4_FP8_ROPE_TOKEN_SCALE, MLAKV_BF16, 40, kv, pe, "s_t boundary", &g);
    int z = 1, kept = 1;
    for (int t = 0; t < 20; t++) {
        float st;
        memcpy(&st, g + 368 * t + 292, 4);
        z &= st == 0.0f;
        for (int i = 0; i < 288; i++) z &= g[368 * t + i] == 0;
        memcpy(&st, g + 368 * (20 + t) + 292, 4);
        kept &= st != 0.0f;
    }
    CHECKF(z, "GPU: a token with s_t below 2^-116 not stored as zero");
    CHECKF(kept, "GPU: a token with s_t at 2^-116 stored as zero");
    free(g);
    gpu_vs_cpu(MLAKV_NVFP4_FP8_ROPE, MLAKV_BF16, 80, kv + 60 * 512, pe + 60 * 64, "RoPE boundary", &g);
    z = 1;
    for (int t = 0; t < 20; t++) {
        float sc;
        memcpy(&sc, g + 368 * t + 288, 4);
        z &= sc == 0.0f;
        for (int j = 0; j < 64; j++) z &= g[368 * t + 304 + j] == 0;
    }
    CHECKF(z, "GPU: a RoPE scale without a finite reciprocal not stored as zero");
    free(g);

    /* raw bf16 RoPE: signalling and quiet NaNs, Inf, a subnormal */
    const uint16_t pats[6] = {0x7F81, 0xFF81, 0x7FBF, 0x7FC1, 0x7F80, 0x0001};
    const int64_t m = 8;
    for (int64_t t = 0; t < m; t++) {
        for (int i = 0; i < 512; i++) kv[t * 512 + i] = mlakv_f32_to_bf16((float)tu_normal(&g_rng));
        for (int j = 0; j < 64; j++) pe[t * 64 + j] = pats[(j + t) % 6];
    }
    const int offs[2] = {528, 304};
    const mlakv_format fm[2] = {MLAKV_FP8_DS_MLA, MLAKV_NVFP4_DS_MLA};
    for (int k = 0; k < 2; k++) {
        for (int small = 0; small < 2; small++) {
            if (!small) g_kernel = MLAKV_CUDA_WRITE_KERNEL_GRID_STRIDE;
            gpu_vs_cpu(fm[k], MLAKV_BF16, m, kv, pe, small ? "raw bf16 RoPE [one token per warp]"
                                                             : "raw bf16 RoPE [grid-stride]", &g);
            g_kernel = MLAKV_CUDA_WRITE_KERNEL_AUTO;
            const size_t rb = mlakv_record_bytes(fm[k]);
            int raw = 1;
            for (int64_t t = 0; t < m; t++) raw &= memcmp(g + rb * t + offs[k], pe + t * 64, 128) == 0;
            CHECKF(raw, "GPU %s: bf16 RoPE not copied bit for bit (0x7F81 must stay 0x7F81)",
                   mlakv_format_get(fm[k])->name);
            free(g);
        }
        /* fp16 input: 0x7C08 (-> bf16 0x7F81, kept) and 0x7C01 (payload does not fit: quieted) */
        for (int64_t t = 0; t < m; t++)
            for (int j = 0; j < 64; j++) pe[t * 64 + j] = (j + t) & 1 ? 0x7C08 : (j % 3 ? 0x7C01 : 0xFE01);
        for (int64_t t = 0; t < m; t++)
            for (int i = 0; i < 512; i++) kv[t * 512 + i] = mlakv_f32_to_f16((float)tu_normal(&g_rng));
        gpu_vs_cpu(fm[k], MLAKV_F16, m, kv, pe, "fp16 NaN RoPE", NULL);
        for (int64_t t = 0; t < m; t++)
            for (int j = 0; j < 64; j++) pe[t * 64 + j] = pats[(j + t) % 6];
        for (int64_t t = 0; t < m; t++)
            for (int i = 0; i < 512; i++) kv[t * 512 + i] = mlakv_f32_to_bf16((float)tu_normal(&g_rng));
    }
    free(kv);
    free(pe);
}

/* ------------------------------------------------------------------------------------------ */
/* 4. validation                                                                               */
/* ------------------------------------------------------------------------------------------ */

static void test_validation(void) {
    const int64_t n = 4;
    size_t bytes;
    CHECK_OK(mlakv_cache_bytes(MLAKV_NVFP4_DS_MLA, 2, 4, 0, &bytes));
    uint8_t *d_cache;
    uint16_t *d_kv, *d_pe;
    int64_t *d_slots;
    CUDA_OK(cudaMalloc(&d_cache, bytes + 64));
    CUDA_OK(cudaMalloc(&d_kv, 4096 * 2 * 4));
    CUDA_OK(cudaMalloc(&d_pe, 4096 * 2));
    CUDA_OK(cudaMalloc(&d_slots, 64));
    int64_t slots[4] = {0, 1, 2, 3};
    CUDA_OK(cudaMemcpy(d_slots, slots, sizeof slots, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(d_kv, 0x3F, 4096 * 2 * 4));
    CUDA_OK(cudaMemset(d_pe, 0x3F, 4096 * 2));
    uint8_t *guard = (uint8_t *)malloc(bytes + 64), *after = (uint8_t *)malloc(bytes + 64);
    fill_guard(guard, bytes + 64, 7);
    CUDA_OK(cudaMemcpy(d_cache, guard, bytes + 64, cudaMemcpyHostToDevice));
    mlakv_cache c;
    CHECK_OK(mlakv_cache_init(&c, d_cache, MLAKV_NVFP4_DS_MLA, 2, 4, 0));
    const mlakv_write_options bad_opt = {(mlakv_fp8_scale_recipe)7, MLAKV_NVFP4_ENCODER_STANDARD};

    CHECK_STATUS(mlakv_cuda_write(NULL, n, d_kv, 512, d_pe, 64, MLAKV_BF16, d_slots, NULL, NULL, NULL), MLAKV_ERR_NULL_POINTER);
    CHECK_STATUS(mlakv_cuda_write(&c, -1, d_kv, 512, d_pe, 64, MLAKV_BF16, d_slots, NULL, NULL, NULL), MLAKV_ERR_GEOMETRY);
    CHECK_STATUS(mlakv_cuda_write(&c, n, d_kv, 512, d_pe, 64, MLAKV_F32, d_slots, NULL, NULL, NULL), MLAKV_ERR_DTYPE);
    CHECK_STATUS(mlakv_cuda_write(&c, n, d_kv, 512, d_pe, 64, (mlakv_dtype)9, d_slots, NULL, NULL, NULL), MLAKV_ERR_DTYPE);
    CHECK_STATUS(mlakv_cuda_write(&c, n, NULL, 512, d_pe, 64, MLAKV_BF16, d_slots, NULL, NULL, NULL), MLAKV_ERR_NULL_POINTER);
    CHECK_STATUS(mlakv_cuda_write(&c, n, d_kv, 512, NULL, 64, MLAKV_BF16, d_slots, NULL, NULL, NULL), MLAKV_ERR_NULL_POINTER);
    CHECK_STATUS(mlakv_cuda_write(&c, n, d_kv, 512, d_pe, 64, MLAKV_BF16, NULL, NULL, NULL, NULL), MLAKV_ERR_NULL_POINTER);
    CHECK_STATUS(mlakv_cuda_write(&c, n, d_kv, 511, d_pe, 64, MLAKV_BF16, d_slots, NULL, NULL, NULL), MLAKV_ERR_STRIDE);
    CHECK_STATUS(mlakv_cuda_write(&c, n, d_kv, 512, d_pe, 32, MLAKV_BF16, d_slots, NULL, NULL, NULL), MLAKV_ERR_STRIDE);
    CHECK_STATUS(mlakv_cuda_write(&c, n, d_kv, 516, d_pe, 64, MLAKV_BF16, d_slots, NULL, NULL, NULL), MLAKV_ERR_ALIGNMENT);
    CHECK_STATUS(mlakv_cuda_write(&c, n, d_kv + 1, 512, d_pe, 64, MLAKV_BF16, d_slots, NULL, NULL, NULL), MLAKV_ERR_ALIGNMENT);
    CHECK_STATUS(mlakv_cuda_write(&c, n, d_kv, 512, d_pe + 4, 64, MLAKV_BF16, d_slots, NULL, NULL, NULL), MLAKV_ERR_ALIGNMENT);
    CHECK_STATUS(mlakv_cuda_write(&c, n, d_kv, 512, d_pe, 64, MLAKV_BF16, (const int64_t *)((char *)d_slots + 4), NULL, NULL, NULL), MLAKV_ERR_ALIGNMENT);
    CHECK_STATUS(mlakv_cuda_write(&c, n, d_kv, 512, d_pe, 64, MLAKV_BF16, d_slots, &bad_opt, NULL, NULL), MLAKV_ERR_INVALID_ARGUMENT);
    {
        mlakv_write_options bad_enc = mlakv_write_options_default();
        bad_enc.nvfp4_encoder = (mlakv_nvfp4_encoder)5;
        CHECK_STATUS(mlakv_cuda_write(&c, n, d_kv, 512, d_pe, 64, MLAKV_BF16, d_slots, &bad_enc, NULL, NULL), MLAKV_ERR_INVALID_ARGUMENT);
        CHECK_STATUS(mlakv_cuda_write_with(&c, n, d_kv, 512, d_pe, 64, MLAKV_BF16, d_slots, NULL, (mlakv_cuda_write_kernel)3, NULL, NULL), MLAKV_ERR_INVALID_ARGUMENT);
        mlakv_cache bad_scale = c;
        bad_scale.latent_scale = -1.0f;
        CHECK_STATUS(mlakv_cuda_write(&bad_scale, n, d_kv, 512, d_pe, 64, MLAKV_BF16, d_slots, NULL, NULL, NULL), MLAKV_ERR_INVALID_ARGUMENT);
    }
    CHECK_STATUS(mlakv_cuda_write(&c, INT64_MAX / 4, d_kv, 512, d_pe, 64, MLAKV_BF16, d_slots, NULL, NULL, NULL), MLAKV_ERR_OVERFLOW);
    mlakv_cache odd = c;
    odd.base = d_cache + 8;
    CHECK_STATUS(mlakv_cuda_write(&odd, n, d_kv, 512, d_pe, 64, MLAKV_BF16, d_slots, NULL, NULL, NULL), MLAKV_ERR_ALIGNMENT);
    odd = c;
    odd.block_stride_bytes = 4 * 432 + 8;
    CHECK_STATUS(mlakv_cuda_write(&odd, n, d_kv, 512, d_pe, 64, MLAKV_BF16, d_slots, NULL, NULL, NULL), MLAKV_ERR_ALIGNMENT);
    odd = c;
    odd.block_stride_bytes = 4 * 432 - 16;
    CHECK_STATUS(mlakv_cuda_write(&odd, n, d_kv, 512, d_pe, 64, MLAKV_BF16, d_slots, NULL, NULL, NULL), MLAKV_ERR_STRIDE);
    odd = c;
    odd.format = (mlakv_format)17;
    CHECK_STATUS(mlakv_cuda_write(&odd, n, d_kv, 512, d_pe, 64, MLAKV_BF16, d_slots, NULL, NULL, NULL), MLAKV_ERR_UNKNOWN_FORMAT);
    CHECK(strstr(mlakv_last_error(), "mlakv_cuda_write") != NULL);
    /* overlapping device buffers: slot_mapping or a row inside the cache, the counter in the
     * cache or over the slots (the kernel reads the inputs through the read-only path) */
    CHECK_STATUS(mlakv_cuda_write(&c, n, d_kv, 512, d_pe, 64, MLAKV_BF16, (const int64_t *)(d_cache + 432), NULL, NULL, NULL), MLAKV_ERR_ALIASING);
    CHECK_STATUS(mlakv_cuda_write(&c, n, (const uint16_t *)(d_cache + 1024), 512, d_pe, 64, MLAKV_BF16, d_slots, NULL, NULL, NULL), MLAKV_ERR_ALIASING);
    CHECK_STATUS(mlakv_cuda_write(&c, n, d_kv, 512, d_pe, 64, MLAKV_BF16, d_slots, NULL, (unsigned long long *)(d_cache + 8), NULL), MLAKV_ERR_ALIASING);
    CHECK_STATUS(mlakv_cuda_write(&c, n, d_kv, 512, d_pe, 64, MLAKV_BF16, d_slots, NULL, (unsigned long long *)(d_slots + 3), NULL), MLAKV_ERR_ALIASING);
    CHECK(strstr(mlakv_last_error(), "mlakv_cuda_write") != NULL);
    CHECK_OK(mlakv_cuda_write(&c, 0, NULL, 0, NULL, 0, MLAKV_BF16, NULL, NULL, NULL, NULL));
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(after, d_cache, bytes + 64, cudaMemcpyDeviceToHost));
    CHECKF(memcmp(after, guard, bytes + 64) == 0, "a failed call changed the cache");
    /* and the valid call then writes */
    CHECK_OK(mlakv_cuda_write(&c, n, d_kv, 512, d_pe, 64, MLAKV_BF16, d_slots, NULL, NULL, NULL));
    CUDA_OK(cudaMemcpy(after, d_cache, bytes + 64, cudaMemcpyDeviceToHost));
    CHECK(memcmp(after, guard, 4 * 432) != 0);
    CHECK(memcmp(after + 4 * 432, guard + 4 * 432, bytes + 64 - 4 * 432) == 0);
    cudaFree(d_cache);
    cudaFree(d_kv);
    cudaFree(d_pe);
    cudaFree(d_slots);
    free(guard);
    free(after);
}

int main(void) {
    mlakv_status st = mlakv_cuda_check_device();
    if (st != MLAKV_OK) {
        printf("test_cuda_write: skipped: %s (%s)\n", mlakv_status_name(st), mlakv_last_error());
        return TEST_SKIP;
    }
    tu_rng_init(&g_rng, tu_seed("test_cuda_write"));
    const char *env = getenv("MLAKV_CUDA_WRITE_MAX_N");
    int64_t max_n = env && *env ? strtoll(env, NULL, 0) : 1000000;
    const char *q = getenv("MLAKV_CUDA_WRITE_QUICK");
    int quick = q && *q && *q != '0';

    test_validation();
    test_tiny_tokens();
    test_codecs(quick);
    const int64_t block_sizes[4] = {1, 16, 64, 61};
    /* up to 4096 tokens the one-token-per-warp kernel, from 4097 the grid-stride one; 5001 and
     * 270001: more token pairs than one wave of warps, so the host shrinks the grid to balance
     * the passes (2 and 64 passes on 132 SMs); odd n: a half-empty last pair */
    const int64_t counts[9] = {1, 7, 64, 256, 4096, 4097, 5001, 270001, 1000000};
    const mlakv_dtype dtypes[2] = {MLAKV_BF16, MLAKV_F16};
    mlakv_write_options pow2 = mlakv_write_options_default();
    pow2.fp8_scale_recipe = MLAKV_FP8_SCALE_POW2;
    for (int f = 0; f < MLAKV_FORMAT_COUNT; f++) {
        for (int d = 0; d < 2; d++) {
            for (int b = 0; b < 4; b++) {
                for (int c = 0; c < 9; c++) {
                    if (counts[c] > max_n) continue;
                    /* the large cases once per format and dtype (block size 64) */
                    if (counts[c] > 5001 && block_sizes[b] != 64) continue;
                    run_case((mlakv_format)f, dtypes[d], block_sizes[b], counts[c], NULL);
                }
            }
            if (f == MLAKV_FP8_DS_MLA) {
                run_case((mlakv_format)f, dtypes[d], 64, 4096 < max_n ? 4096 : max_n, &pow2);
                run_case((mlakv_format)f, dtypes[d], 61, 7, &pow2);
            }
            /* each kernel outside its default range: the grid-stride kernel on few tokens, the
             * one-token-per-warp kernel on thousands (more inputs of every kind per run) */
            g_kernel = MLAKV_CUDA_WRITE_KERNEL_GRID_STRIDE;
            run_case((mlakv_format)f, dtypes[d], 61, 7, NULL);
            run_case((mlakv_format)f, dtypes[d], 64, 64, NULL);
            g_kernel = MLAKV_CUDA_WRITE_KERNEL_PER_WARP;
            run_case((mlakv_format)f, dtypes[d], 61, 5001 < max_n ? 5001 : max_n, NULL);
            run_case((mlakv_format)f, dtypes[d], 1, 20001 < max_n ? 20001 : max_n, NULL);
            if (f == MLAKV_FP8_DS_MLA) run_case((mlakv_format)f, dtypes[d], 16, 4096 < max_n ? 4096 : max_n, &pow2);
            g_kernel = MLAKV_CUDA_WRITE_KERNEL_AUTO;
            /* the accurate NVFP4 encoder and the latent scale s_l (static formats), each kernel
             * on both sides of its default range: bytes identical to the CPU writer's */
            if (f != MLAKV_FP8_DS_MLA) {
                mlakv_write_options acc = mlakv_write_options_default();
                acc.nvfp4_encoder = MLAKV_NVFP4_ENCODER_ACCURATE;
                const bool stat = f != MLAKV_NVFP4_FP8_ROPE_TOKEN_SCALE;
                const int64_t big = 270001 < max_n ? 270001 : max_n;
                const mlakv_cuda_write_kernel ks[3] = {MLAKV_CUDA_WRITE_KERNEL_AUTO,
                                                       MLAKV_CUDA_WRITE_KERNEL_PER_WARP,
                                                       MLAKV_CUDA_WRITE_KERNEL_GRID_STRIDE};
                for (int k = 0; k < 3; k++) {
                    g_kernel = ks[k];
                    /* a fresh s_l each case: a random float from 2^-12 to 2^4 (and an exact
                     * power of two), so that quotients round */
                    const float sl = ldexpf(1.0f + (float)tu_uniform(&g_rng), (int)tu_range(&g_rng, -12, 4));
                    run_case((mlakv_format)f, dtypes[d], 61, 7, &acc);
                    run_case((mlakv_format)f, dtypes[d], 64, k == 0 ? big : 5001, &acc);
                    if (stat) {
                        run_case((mlakv_format)f, dtypes[d], 16, 300, NULL, sl);
                        run_case((mlakv_format)f, dtypes[d], 64, k == 0 ? big : 5001, NULL, sl);
                        run_case((mlakv_format)f, dtypes[d], 61, 4096 < max_n ? 4096 : max_n, &acc, sl);
                        run_case((mlakv_format)f, dtypes[d], 1, 33, &acc, 0.0625f);
                    }
                }
                g_kernel = MLAKV_CUDA_WRITE_KERNEL_AUTO;
            }
            test_graph((mlakv_format)f, dtypes[d], 300);
            test_graph((mlakv_format)f, dtypes[d], 64);
        }
    }
    return tu_finish();
}
