/* GPU writer: mlakv_cuda_write. kv_c [n, 512] and k_pe [n, 64] (bf16 or fp16 rows) -> records
 * at slot_mapping[i] in a paged device cache, byte-identical to the CPU writer (mlakv_write).
 *
 * Kernel shape: two tokens per warp (one per half-warp), a grid-stride loop over token pairs
 * with the next pair's loads in flight while the current one is encoded.
 *  - Lane j of a half (j = lane & 15) loads latent elements [8j + 128k, 8j + 128k + 8), k = 0..3
 *    (four coalesced 16-byte streaming loads per lane) and its share of the 64 RoPE values.
 *  - NVFP4: a 16-value group is a lane pair: group amax with one shuffle; the token amax of the
 *    two-level format over the half-warp. fp8_ds_mla: a 128-value tile is a quarter k of the
 *    half-warp (16 lanes).
 *  - Per token pair a warp-uniform test picks a fast path (all inputs finite; NVFP4: every
 *    scale E4M3-normal and below 464, so every |q| < 7; two-level: s_t not tiny; fp8: every
 *    tile amax >= 2^-84, so s >= 2^-93) with the cheap encoders (codec.cuh: e2m1x8_fast,
 *    div_markstein), else the checked path, which handles NaN / Inf, subnormal or saturating
 *    scales and tiny tiles exactly as the CPU.
 *  - The two records are assembled in shared memory (one 2 x 656-byte stage per warp) and
 *    written with coalesced 16-byte stores (records are multiples of 16 bytes; the host checks
 *    that the cache base and block stride are 16-byte aligned).
 *  - Slots are checked in 64 bits before any narrowing: negative = padded token, skipped;
 *    >= capacity = rejected, not written, counted per half-warp and added to the optional
 *    device counter with one atomicAdd per half-warp at exit.
 * Up to 4096 tokens (decode steps) a second kernel, write_small_kernel, takes one token per warp
 * and one 16-value group per lane, with no loop and no stage (see there); mlakv_cuda_write_with
 * forces either kernel.
 * Options are template bits of both kernels: the accurate NVFP4 encoder (three candidate scale
 * bytes per group, each scored by its squared error, as src/format/record.c) and the latent
 * scale s_l (the latent rows divided by s_l and rounded to bf16 in registers, then encoded as
 * bf16 input).
 * No host synchronization and no allocation: capturable in a CUDA graph. */
#include <cfloat>
#include <cstdint>

#include "cuda/common/status.cuh"
#include "cuda/write/codec.cuh"
#include "mlakv_experimental.h"

extern "C" {
#include "cache/cache.h"
#include "core/validate.h"
#include "format/format.h"
}

namespace {

using namespace mlakv::cuda::write;

#ifndef MLAKV_WRITE_WARPS
#define MLAKV_WRITE_WARPS 8 /* warps per block */
#endif
#ifndef MLAKV_WRITE_MIN_BLOCKS
#define MLAKV_WRITE_MIN_BLOCKS 1 /* __launch_bounds__ minimum blocks per SM: 3 (80 registers,
                                  * 24 warps/SM) measured slower than the uncapped 94-110 */
#endif
constexpr int kWarps = MLAKV_WRITE_WARPS; /* two tokens per warp in flight */
constexpr int kThreads = 32 * kWarps;
constexpr int kStageChunks = 2 * 656 / 16; /* two records of the largest size, 16-byte chunks */

struct WriteParams {
    unsigned char *base;
    const unsigned char *kv_c;
    const unsigned char *k_pe;
    const long long *slots;
    unsigned long long *rejected; /* optional */
    long long n;
    long long capacity;
    long long block_size;
    long long block_stride_bytes;
    long long kv_c_stride_bytes;
    long long k_pe_stride_bytes;
    unsigned int block_size_u32; /* block_size when it fits 32 bits, else 0 */
    int block_shift;             /* log2(block_size) when it is a power of two, else -1 */
    int fp8_pow2; /* fp8_ds_mla: MLAKV_FP8_SCALE_POW2 recipe */
    float latent_scale; /* s_l (kScaled kernels) */
};

/* Kernel options (template bits): the accurate NVFP4 encoder, and a latent scale s_l != 1
 * (static NVFP4 formats). Each combination is its own instantiation, so the default kernels
 * are compiled exactly as without the options. */
constexpr int kOptAccurate = 1;
constexpr int kOptScaled = 2;

template <int F> struct RecordBytes;
template <> struct RecordBytes<MLAKV_FP8_DS_MLA> { static constexpr int value = 656; };
template <> struct RecordBytes<MLAKV_NVFP4_DS_MLA> { static constexpr int value = 432; };
template <> struct RecordBytes<MLAKV_NVFP4_FP8_ROPE> { static constexpr int value = 368; };
template <> struct RecordBytes<MLAKV_NVFP4_FP8_ROPE_TOKEN_SCALE> { static constexpr int value = 368; };

/* The 368-B formats: fp8 RoPE (scaled E4M3) instead of a bf16 copy. */
__host__ __device__ constexpr bool rope_fp8(int f) {
    return f == MLAKV_NVFP4_FP8_ROPE || f == MLAKV_NVFP4_FP8_ROPE_TOKEN_SCALE;
}

/* Four fp32 values, each divided by the tile / RoPE scale by q(x), as four E4M3 bytes (value i
 * in byte i). */
template <class Q>
__device__ __forceinline__ uint32_t e4m3x4_encode(const float *f, Q q) {
    return e4m3x2_encode(q(f[0]), q(f[1])) | (e4m3x2_encode(q(f[2]), q(f[3])) << 16);
}

/* NVFP4 group scale s = g / 6 (two-level: g * (1 / s_t) / 6), as the CPU. */
template <bool kTwoLevel>
__device__ __forceinline__ float nvfp4_scale(float g, float inv_t) {
    return kTwoLevel ? __fmul_rn(__fmul_rn(g, inv_t), inv6()) : __fmul_rn(g, inv6());
}

/* The fast NVFP4 encoder's conditions (with finite inputs): every scale byte b of s zero, or
 * E4M3-normal with s < 464 (rounds to at most 448, so d >= s / 1.07 and every |q| <= 6.375 < 7:
 * e2m1x8_fast's range; checked for every bf16 / fp16 group amax, and for the two-level s on
 * sampled token / group amax pairs); two-level: s_t >= 2^-100 (keeps inv_t * (1/d) finite) or
 * s_t == 0 (a token of zeros, every b == 0). fp8_ds_mla: Markstein division is exact when the
 * tile scale is >= 2^-93 (no underflow in the residual): amax >= 2^-84 with the vLLM recipe, and
 * always with the pow2 recipe (s >= 1e-4). */
__device__ __forceinline__ bool nvfp4_fast_scale(uint32_t b, float s) {
    return (b == 0u) | ((b >= 0x08u) & (s < 464.0f));
}
__device__ __forceinline__ bool two_level_fast(float s_t) { return (s_t == 0.0f) | (s_t >= 0x1p-100f); }
__device__ __forceinline__ bool fp8_fast_tile(float amax, int pow2) { return pow2 || amax >= 0x1p-84f; }

/* Loaded inputs of this half-warp's token, per lane j. */
struct TokenIn {
    long long slot; /* < 0: padding, or no token (past n) */
    uint4 v[4];     /* latent [8j + 128k, +8), k = 0..3 */
    uint4 r;        /* bf16-rope formats: rope [8j, 8j+8) on j < 8, zero elsewhere;
                       fp8-rope formats: r.x, r.y = rope [4j, 4j+4) */
};

template <bool kRopeFp8>
__device__ __forceinline__ void load_token(const WriteParams &p, long long t, int j, TokenIn &in) {
    in.r = make_uint4(0u, 0u, 0u, 0u);
    if (t < p.n) {
        in.slot = __ldg(p.slots + t);
        const uint4 *row = reinterpret_cast<const uint4 *>(p.kv_c + t * p.kv_c_stride_bytes) + j;
#pragma unroll
        for (int k = 0; k < 4; k++) in.v[k] = __ldcs(row + 16 * k);
        const unsigned char *pe = p.k_pe + t * p.k_pe_stride_bytes;
        if (kRopeFp8) {
            const uint2 r2 = __ldcs(reinterpret_cast<const uint2 *>(pe) + j);
            in.r.x = r2.x;
            in.r.y = r2.y;
        } else if (j < 8) {
            in.r = __ldcs(reinterpret_cast<const uint4 *>(pe) + j);
        }
    } else {
        in.slot = -1;
#pragma unroll
        for (int k = 0; k < 4; k++) in.v[k] = make_uint4(0u, 0u, 0u, 0u);
    }
}

/* max over the lanes lane ^ from .. lane ^ to (offsets <= 8 stay inside the half-warp) */
__device__ __forceinline__ float warp_max_xor(float v, int from, int to) {
#pragma unroll
    for (int off = from; off <= to; off <<= 1) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, off));
    return v;
}

__device__ __forceinline__ float amax8(const float f[8]) {
    float m = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; i++) m = amax_acc(m, f[i]);
    return m;
}

template <typename D> __device__ __forceinline__ float amax8_nan(const uint4 &w) { return D::amax8_nan(w); }

/* Checked NVFP4 half group: 8 values -> 32 bits of nibbles, NaN and out-of-range q handled
 * (the CPU's mlakv_e2m1_encode per element). sbyte == 0 (d == 0) gives the zero payload. */
template <typename D>
__device__ __forceinline__ uint32_t nvfp4_half_checked(const uint4 &w, uint32_t sbyte, float inv) {
    float f[8];
    D::unpack8(w, f);
    uint32_t packed = 0;
#pragma unroll
    for (int i = 0; i < 8; i++) packed |= e2m1_encode(__fmul_rn(f[i], inv)) << (4 * i);
    return sbyte != 0 ? packed : 0u;
}

/* Scale bytes of this lane's four groups (j/2 + 8k): the lane pair shares them; the even lane
 * writes k = 0, 1 and the odd lane k = 2, 3. */
__device__ __forceinline__ void nvfp4_store_scales(const uint32_t b[4], int j, unsigned char *st) {
    const bool odd = (j & 1) != 0;
    const int k0 = odd ? 2 : 0;
    st[256 + (j >> 1) + 8 * k0] = (unsigned char)(odd ? b[2] : b[0]);
    st[256 + (j >> 1) + 8 * k0 + 8] = (unsigned char)(odd ? b[3] : b[1]);
}

/* Two-level token scale s_t = token amax / 2688 from this lane pair's group maxima g (the
 * half-warp's lane pairs together hold all 32 groups). */
__device__ __forceinline__ float two_level_s_t(const float g[4]) {
    return __fmul_rn(warp_max_xor(fmaxf(fmaxf(g[0], g[1]), fmaxf(g[2], g[3])), 2, 8), inv2688());
}

/* Group scales s = g / 6 (two-level: g * (1 / s_t) / 6) and their E4M3 bytes, as the CPU. */
template <bool kTwoLevel>
__device__ __forceinline__ void nvfp4_group_scales(const float g[4], float inv_t, float s[4],
                                                   uint32_t &b01, uint32_t &b23) {
#pragma unroll
    for (int k = 0; k < 4; k++) s[k] = nvfp4_scale<kTwoLevel>(g[k], inv_t);
    b01 = e4m3x2_encode(s[0], s[1]);
    b23 = e4m3x2_encode(s[2], s[3]);
}

/* The checked path's scales from the group maxima g: s_t (two-level; 0 for a zero or tiny
 * token, whose bytes the caller zeroes) with inv_t = 1 / s_t, and the groups' E4M3 bytes
 * (s >= 0 or NaN, so the sign bit is dropped). */
template <bool kTwoLevel>
__device__ __forceinline__ void checked_scales(const float g[4], float &s_t, float &inv_t,
                                               uint32_t b[4]) {
    s_t = 0.0f;
    inv_t = 1.0f;
    if (kTwoLevel) {
        s_t = two_level_guard(two_level_s_t(g));
        inv_t = __frcp_rn(s_t);
    }
    float s[4];
    uint32_t b01, b23;
    nvfp4_group_scales<kTwoLevel>(g, inv_t, s, b01, b23);
    b[0] = b01 & 0x7Fu;
    b[1] = (b01 >> 8) & 0x7Fu;
    b[2] = b23 & 0x7Fu;
    b[3] = (b23 >> 8) & 0x7Fu;
}

/* The NVFP4 latent of this half's token into its stage: payload word j + 16k, scale bytes
 * 256 + j/2 + 8k. Returns s_t (two-level). */
template <bool kTwoLevel, typename D>
__device__ __forceinline__ float nvfp4_latent(const TokenIn &in, int j, const float *rcp,
                                              unsigned char *st) {
    uint32_t *payload = reinterpret_cast<uint32_t *>(st);
    float g[4];
#pragma unroll
    for (int k = 0; k < 4; k++) g[k] = amax8_nan<D>(in.v[k]); /* NaN if any input is NaN */
    const bool finite = (g[0] < INFINITY) & (g[1] < INFINITY) & (g[2] < INFINITY) & (g[3] < INFINITY);
    if (__all_sync(0xFFFFFFFFu, finite)) {
        float s_t = 0.0f, inv_t = 1.0f;
#pragma unroll
        for (int k = 0; k < 4; k++) g[k] = warp_max_xor(g[k], 1, 1);
        if (kTwoLevel) {
            s_t = two_level_guard(two_level_s_t(g));
            /* the CPU's 1.0f / s_t; a token of zeros or a tiny one (s_t == 0 after the guard)
             * gets inv_t = 0, so every s = 0, every scale byte 0 and the payload 0: the CPU's
             * all-zero latent */
            inv_t = s_t == 0.0f ? 0.0f : __frcp_rn(s_t);
        }
        float s[4];
        uint32_t b01, b23;
        nvfp4_group_scales<kTwoLevel>(g, inv_t, s, b01, b23);
        const uint32_t b[4] = {b01 & 0xFFu, b01 >> 8, b23 & 0xFFu, b23 >> 8};
        /* the fast path when every group of the pair qualifies (nvfp4_fast_scale); a token of
         * zeros (s_t == 0) has every b == 0 (inv_t = 0 above) */
        bool ok = true;
#pragma unroll
        for (int k = 0; k < 4; k++) ok &= nvfp4_fast_scale(b[k], s[k]);
        if (kTwoLevel) ok &= two_level_fast(s_t);
        if (__all_sync(0xFFFFFFFFu, ok)) {
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const float inv = kTwoLevel ? __fmul_rn(rcp[b[k]], inv_t) : rcp[b[k]];
                uint32_t w = e2m1x8_fast<D>(in.v[k], inv);
                if (b[k] == 0u) w = 0u;
                payload[j + 16 * k] = w;
            }
            nvfp4_store_scales(b, j, st);
            return s_t;
        }
    }
    /* checked path: NaN-ignoring amax (the CPU's), clamp and NaN per element */
    float s_t, inv_t;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        float f[8];
        D::unpack8(in.v[k], f);
        g[k] = warp_max_xor(amax8(f), 1, 1);
    }
    uint32_t b[4];
    checked_scales<kTwoLevel>(g, s_t, inv_t, b);
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const float inv = kTwoLevel ? __fmul_rn(rcp[b[k]], inv_t) : rcp[b[k]];
        uint32_t w = nvfp4_half_checked<D>(in.v[k], b[k], inv);
        if (kTwoLevel && s_t == 0.0f) w = b[k] = 0u; /* zero or tiny token: latent bytes and scales 0 */
        payload[j + 16 * k] = w;
    }
    nvfp4_store_scales(b, j, st);
    return s_t;
}

/* Scaled E4M3 RoPE of the 368-B records, four values per lane; lane j == 0 also writes the
 * 16 bytes at 288 (rope scale, token scale, zeros). */
template <typename D>
__device__ __forceinline__ void fp8_rope(const uint4 &r, int j, float s_t, unsigned char *st) {
    float f0, f1, f2, f3;
    D::unpack2(r.x, f0, f1);
    D::unpack2(r.y, f2, f3);
    const float m = amax_acc(amax_acc(amax_acc(amax_acc(0.0f, f0), f1), f2), f3);
    float inv; /* the CPU's 1.0f / scale */
    const float scale = rope_scale_guard(__fmul_rn(warp_max_xor(m, 1, 8), inv448()), inv);
    const float f[4] = {f0, f1, f2, f3};
    uint32_t w = e4m3x4_encode(f, [&](float x) { return __fmul_rn(x, inv); });
    if (scale == 0.0f) w = 0u;
    reinterpret_cast<uint32_t *>(st + 304)[j] = w;
    if (j == 0)
        *reinterpret_cast<uint4 *>(st + 288) = make_uint4(__float_as_uint(scale), __float_as_uint(s_t), 0u, 0u);
}

/* The fp8_ds_mla record of this half's token into its stage. */
template <typename D>
__device__ __forceinline__ void fp8_ds_mla_token(const TokenIn &in, int j, int pow2,
                                                 unsigned char *st) {
    float g[4];
#pragma unroll
    for (int k = 0; k < 4; k++) g[k] = amax8_nan<D>(in.v[k]);
    const bool finite = (g[0] < INFINITY) & (g[1] < INFINITY) & (g[2] < INFINITY) & (g[3] < INFINITY);
    bool fast = __all_sync(0xFFFFFFFFu, finite);
    if (fast) {
#pragma unroll
        for (int k = 0; k < 4; k++) g[k] = warp_max_xor(g[k], 1, 8);
        /* Markstein division exact for every tile of the pair (fp8_fast_tile) */
        const float gmin = fminf(fminf(g[0], g[1]), fminf(g[2], g[3]));
        fast = __all_sync(0xFFFFFFFFu, fp8_fast_tile(gmin, pow2));
    }
    if (fast) {
        /* lane k of the half computes tile k's scale and reciprocal; the others read them */
        const int q = j & 3;
        const float gq = q == 0 ? g[0] : q == 1 ? g[1] : q == 2 ? g[2] : g[3];
        const float sq = fp8_scale_recipe(div448(gq), pow2);
        const float rq = __frcp_rn(sq); /* finite sq >= FLT_MIN: rq finite */
        const int base = threadIdx.x & 16;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const float s = __shfl_sync(0xFFFFFFFFu, sq, base + k);
            const float r = __shfl_sync(0xFFFFFFFFu, rq, base + k);
            float f[8];
            D::unpack8(in.v[k], f);
            uint2 o;
            auto q = [&](float x) { return div_markstein(x, s, r); };
            o.x = e4m3x4_encode(f, q);
            o.y = e4m3x4_encode(f + 4, q);
            reinterpret_cast<uint2 *>(st + 128 * k)[j] = o;
        }
        if (j < 4) reinterpret_cast<float *>(st + 512)[j] = sq;
    } else {
        /* checked: NaN-ignoring amax and IEEE division, as the CPU */
#pragma unroll
        for (int k = 0; k < 4; k++) {
            float f[8];
            D::unpack8(in.v[k], f);
            const float s = fp8_scale_recipe(__fdiv_rn(warp_max_xor(amax8(f), 1, 8), 448.0f), pow2);
            uint2 o;
            auto q = [&](float x) { return __fdiv_rn(x, s); };
            o.x = e4m3x4_encode(f, q);
            o.y = e4m3x4_encode(f + 4, q);
            reinterpret_cast<uint2 *>(st + 128 * k)[j] = o;
            if (j == 0) reinterpret_cast<float *>(st + 512)[k] = s;
        }
    }
    if (j < 8) reinterpret_cast<uint4 *>(st + 528)[j] = D::to_bf16x8(in.r);
}

/* ---- latent scale and accurate encoder ---------------------------------------------------- */

/* Eight latent values (one 16-byte vector of D) divided by s_l, as bf16 (the CPU's
 * mlakv_round_bf16(x / s_l): IEEE fp32 division, round to nearest even; NaN quieted). The
 * result is read as Bf16In. */
template <typename D>
__device__ __forceinline__ uint4 scale_latent8(const uint4 &w, float s_l) {
    float f[8];
    D::unpack8(w, f);
    uint32_t o[4];
#pragma unroll
    for (int i = 0; i < 4; i++)
        o[i] = f32_to_bf16_bits(__fdiv_rn(f[2 * i], s_l)) |
               (f32_to_bf16_bits(__fdiv_rn(f[2 * i + 1], s_l)) << 16);
    return make_uint4(o[0], o[1], o[2], o[3]);
}

/* The accurate encoder's byte (src/format/record.c, nvfp4_accurate_byte) for the group whose
 * standard byte is b0: candidates b0 - 1 .. b0 + 1 inside [0, 0x7E], the first of the smallest
 * error; err = half0 + half1, the halves' sum computed by both owners (fp32 addition commutes).
 * kPair: a lane pair holds the group (ax = this lane's 8 magnitudes, the partner's through a
 * shuffle; every lane of the warp must call it); else the lane holds both halves (ax, ax1).
 * search == false keeps b0 (the lane pair agrees on it). */
template <bool kTwoLevel, bool kPair>
__device__ __forceinline__ uint32_t accurate_byte(const float ax[8], const float ax1[8], uint32_t b0,
                                                  bool search, float s_t, float inv_t) {
    uint32_t best = b0;
    float best_err = INFINITY;
#pragma unroll
    for (int o = -1; o <= 1; o++) {
        const int c = (int)b0 + o;
        const bool valid = search && c >= 0 && c <= 0x7E;
        const uint32_t cc = valid ? (uint32_t)c : 0u;
        const float d = e4m3_decode_fast(cc);
        float inv = cc == 0u ? 0.0f : rcp_e4m3(d); /* the CPU's 1.0f / d */
        if (kTwoLevel) inv = __fmul_rn(inv, inv_t);
        const float h = accurate_half_error<kTwoLevel>(ax, d, inv, s_t);
        const float h1 = kPair ? __shfl_xor_sync(0xFFFFFFFFu, h, 1)
                               : accurate_half_error<kTwoLevel>(ax1, d, inv, s_t);
        const float err = __fadd_rn(h, h1);
        if (valid && err < best_err) {
            best_err = err;
            best = cc;
        }
    }
    return best;
}

/* whether the accurate encoder searches a group: finite values, amax < 2^60; two-level: a
 * finite, non-zero s_t (the CPU's conditions) */
template <bool kTwoLevel>
__device__ __forceinline__ bool accurate_search(bool finite, float g, float s_t) {
    bool ok = finite && g < 0x1p60f;
    if (kTwoLevel) ok = ok && s_t != 0.0f && s_t < INFINITY;
    return ok;
}

/* nvfp4_latent with the accurate encoder: the checked path's scales (NaN-ignoring amax, the
 * standard byte), the search per group, then the nibbles of the chosen byte (finite groups:
 * e2m1x8_sat; others: the checked encoder). Returns s_t (two-level). */
template <bool kTwoLevel, typename D>
__device__ __forceinline__ float nvfp4_latent_accurate(const TokenIn &in, int j, unsigned char *st) {
    uint32_t *payload = reinterpret_cast<uint32_t *>(st);
    float g[4];
    bool fin[4];
#pragma unroll
    for (int k = 0; k < 4; k++) {
        float f[8];
        D::unpack8(in.v[k], f);
        const bool mine = amax8_nan<D>(in.v[k]) < INFINITY;
        /* every lane takes part in the shuffle (a short-circuit would skip it on some lanes) */
        const int partner = __shfl_xor_sync(0xFFFFFFFFu, (int)mine, 1);
        fin[k] = mine && partner != 0;
        g[k] = warp_max_xor(amax8(f), 1, 1);
    }
    float s_t, inv_t;
    uint32_t b[4];
    checked_scales<kTwoLevel>(g, s_t, inv_t, b);
#pragma unroll
    for (int k = 0; k < 4; k++) {
        float f[8], ax[8];
        D::unpack8(in.v[k], f);
#pragma unroll
        for (int i = 0; i < 8; i++) ax[i] = fabsf(f[i]);
        b[k] = accurate_byte<kTwoLevel, true>(ax, ax, b[k], accurate_search<kTwoLevel>(fin[k], g[k], s_t),
                                              s_t, inv_t);
        float inv = b[k] == 0u ? 0.0f : rcp_e4m3(e4m3_decode_fast(b[k]));
        if (kTwoLevel) inv = __fmul_rn(inv, inv_t);
        uint32_t w = fin[k] ? e2m1x8_sat<D>(in.v[k], inv) : nvfp4_half_checked<D>(in.v[k], b[k], inv);
        if (b[k] == 0u) w = 0u;
        if (kTwoLevel && s_t == 0.0f) w = b[k] = 0u; /* zero or tiny token: latent bytes and scales 0 */
        payload[j + 16 * k] = w;
    }
    nvfp4_store_scales(b, j, st);
    return s_t;
}

/* The NVFP4 latent of this half's token with the kernel's options. */
template <bool kTwoLevel, int kOpt, typename D>
__device__ __forceinline__ float nvfp4_latent_opt(const TokenIn &in, int j, const float *rcp,
                                                  float s_l, unsigned char *st) {
    if (kOpt & kOptScaled) {
        TokenIn t = in;
#pragma unroll
        for (int k = 0; k < 4; k++) t.v[k] = scale_latent8<D>(in.v[k], s_l);
        if (kOpt & kOptAccurate) return nvfp4_latent_accurate<kTwoLevel, Bf16In>(t, j, st);
        return nvfp4_latent<kTwoLevel, Bf16In>(t, j, rcp, st);
    }
    if (kOpt & kOptAccurate) return nvfp4_latent_accurate<kTwoLevel, D>(in, j, st);
    return nvfp4_latent<kTwoLevel, D>(in, j, rcp, st);
}

/* Encode the token of this half-warp into its stage. Every lane of the warp calls this (the
 * shuffles and votes need the whole warp), whatever its token's slot. */
template <int F, typename D, int kOpt>
__device__ __forceinline__ void encode_token(const TokenIn &in, int j, const WriteParams &p,
                                             const float *rcp, unsigned char *st) {
    if (F == MLAKV_FP8_DS_MLA) {
        fp8_ds_mla_token<D>(in, j, p.fp8_pow2, st);
    } else if (F == MLAKV_NVFP4_DS_MLA) {
        nvfp4_latent_opt<false, kOpt, D>(in, j, rcp, p.latent_scale, st);
        if (j < 8) reinterpret_cast<uint4 *>(st + 304)[j] = D::to_bf16x8(in.r);
        if (j == 8) *reinterpret_cast<uint4 *>(st + 288) = make_uint4(0u, 0u, 0u, 0u);
    } else {
        const float s_t = nvfp4_latent_opt<F == MLAKV_NVFP4_FP8_ROPE_TOKEN_SCALE, kOpt, D>(
            in, j, rcp, p.latent_scale, st);
        fp8_rope<D>(in.r, j, F == MLAKV_NVFP4_FP8_ROPE_TOKEN_SCALE ? s_t : 0.0f, st);
    }
}

/* Where this half's record goes, or nullptr (padding, past n, or rejected: counted). */
template <int kRec>
__device__ __forceinline__ uint4 *record_dst(const WriteParams &p, long long slot, bool leader,
                                             unsigned int &rejected) {
    if (slot < 0) return nullptr;
    if (slot >= p.capacity) {
        rejected += leader; /* counted once per half-warp */
        return nullptr;
    }
    long long blk;
    if (p.block_shift >= 0)
        blk = slot >> p.block_shift;
    else if (((unsigned long long)slot >> 32) == 0 && p.block_size_u32 != 0)
        blk = (unsigned int)slot / p.block_size_u32;
    else
        blk = slot / p.block_size;
    const long long off = slot - blk * p.block_size;
    return reinterpret_cast<uint4 *>(p.base + blk * p.block_stride_bytes + off * kRec);
}

/* One token pair: encode both halves into the stage, then write both records with 16-byte
 * stores spread over the whole warp. */
template <int F, typename D, int kOpt>
__device__ __forceinline__ void write_pair(const WriteParams &p, const TokenIn &in, int lane,
                                           const float *rcp, uint4 *stage, unsigned int &rejected) {
    constexpr int kRec = RecordBytes<F>::value;
    constexpr int kChunks = kRec / 16;
    const int j = lane & 15, half = lane >> 4;
    encode_token<F, D, kOpt>(in, j, p, rcp, reinterpret_cast<unsigned char *>(stage + half * kChunks));
    uint4 *mine = record_dst<kRec>(p, in.slot, j == 0, rejected);
    uint4 *other = reinterpret_cast<uint4 *>(__shfl_xor_sync(0xFFFFFFFFu, reinterpret_cast<unsigned long long>(mine), 16));
    uint4 *dst0 = half ? other : mine, *dst1 = half ? mine : other;
    __syncwarp();
#pragma unroll
    for (int i = 0; i < (2 * kChunks + 31) / 32; i++) {
        const int c = lane + 32 * i;
        if (c < 2 * kChunks) {
            uint4 *d = c < kChunks ? dst0 + c : dst1 + (c - kChunks);
            if ((c < kChunks ? dst0 : dst1) != nullptr) *d = stage[c];
        }
    }
    __syncwarp();
}

/* The accurate encoder's kernels are bound by instruction issue, not memory: uncapped (136-140
 * registers, one block of 8 warps per SM) they kept the issue slots 62-63 % busy; capped at 2
 * blocks per SM (122-124 registers, no spills) they have twice the warps to hide the search's
 * dependent chains. The standard kernels keep MLAKV_WRITE_MIN_BLOCKS. */
#ifndef MLAKV_WRITE_ACCURATE_MIN_BLOCKS
#define MLAKV_WRITE_ACCURATE_MIN_BLOCKS 2
#endif
template <int kOpt> constexpr int write_min_blocks() {
    return (kOpt & kOptAccurate) ? MLAKV_WRITE_ACCURATE_MIN_BLOCKS : MLAKV_WRITE_MIN_BLOCKS;
}

template <int F, typename D, int kOpt>
__global__ void __launch_bounds__(kThreads, write_min_blocks<kOpt>()) write_kernel(const WriteParams p) {
    __shared__ uint4 stage[kWarps][kStageChunks];
    __shared__ float rcp[128]; /* 1.0f / decode(b) of the E4M3 scale bytes, as the CPU rounds */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, half = lane >> 4, j = lane & 15;
    constexpr bool kRopeFp8 = rope_fp8(F);
    const long long step = 2ll * gridDim.x * kWarps;              /* tokens per grid pass */
    long long t0 = 2ll * ((long long)blockIdx.x * kWarps + warp); /* the pair's first token */
    unsigned int rejected = 0;

    /* ping-pong over two input buffers (no register copies between iterations); the first
     * loads go out before the reciprocal table is built, so their latency covers it */
    TokenIn a, b;
    if (t0 < p.n) load_token<kRopeFp8>(p, t0 + half, j, a);
    if (F != MLAKV_FP8_DS_MLA) {
        for (int i = threadIdx.x; i < 128; i += kThreads) rcp[i] = __frcp_rn(e4m3_decode(i));
        __syncthreads();
    }
    while (t0 < p.n) {
        load_token<kRopeFp8>(p, t0 + step + half, j, b); /* past n: no loads */
        write_pair<F, D, kOpt>(p, a, lane, rcp, stage[warp], rejected);
        t0 += step;
        if (t0 >= p.n) break;
        load_token<kRopeFp8>(p, t0 + step + half, j, a);
        write_pair<F, D, kOpt>(p, b, lane, rcp, stage[warp], rejected);
        t0 += step;
    }
    if (j == 0 && rejected != 0 && p.rejected != nullptr)
        atomicAdd(p.rejected, (unsigned long long)rejected);
}

/* ---- small n: one token per warp ------------------------------------------------------------
 * A decode step writes a few dozen tokens; then the grid-stride kernel's chain (a warp encodes a
 * token pair, 32 latent values per lane, through a shared-memory stage) is most of the launch.
 * Here lane l owns latent values [16l, 16l + 16): one NVFP4 group, or a sixteenth of an
 * fp8_ds_mla tile (lanes 8k .. 8k + 7 = tile k), and stores its bytes straight from registers.
 * Each group (fp8: each tile) picks the fast or the checked encoder on its own; both give the
 * CPU's bytes, so the choice never shows in the record. No shared memory, no block barrier. */
constexpr int kSmallWarps = 4; /* latent warps (tokens) per block */

/* all of the 8 lanes of this lane's aligned group */
__device__ __forceinline__ bool all8(bool x) {
    return ((__ballot_sync(0xFFFFFFFFu, x) >> (threadIdx.x & 24)) & 0xFFu) == 0xFFu;
}

/* max of two fp32, NaN if either is NaN */
__device__ __forceinline__ float max_nan(float a, float b) {
    float r;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}

/* amax of this lane's 16 values as the CPU (NaN ignored) and whether all are finite */
template <typename D>
__device__ __forceinline__ float amax16(const uint4 &v0, const uint4 &v1, bool &finite) {
    const float gn = max_nan(amax8_nan<D>(v0), amax8_nan<D>(v1)); /* NaN if any input is NaN */
    finite = gn < INFINITY;
    if (finite) return gn;
    float f[8];
    D::unpack8(v0, f);
    const float m0 = amax8(f);
    D::unpack8(v1, f);
    return fmaxf(m0, amax8(f));
}

/* The lane's NVFP4 group: 16 nibbles (nib) and the E4M3 scale byte (sb). Two-level: s_t of the
 * token (the warp's 32 groups) into s_t. kAccurate: the accurate encoder's byte. */
template <bool kTwoLevel, bool kAccurate, typename D>
__device__ __forceinline__ void nvfp4_group_small(const uint4 &v0, const uint4 &v1, uint2 &nib,
                                                  uint32_t &sb, float &s_t) {
    bool finite;
    const float g = amax16<D>(v0, v1, finite);
    float inv_t = 1.0f;
    s_t = 0.0f;
    if (kTwoLevel) {
        s_t = two_level_guard(__fmul_rn(warp_max_xor(g, 1, 16), inv2688()));
        inv_t = s_t == 0.0f ? 0.0f : __frcp_rn(s_t); /* s_t == 0: every byte 0 (below) */
    }
    const float s = nvfp4_scale<kTwoLevel>(g, inv_t);
    uint32_t b = e4m3_encode(s) & 0x7Fu; /* s >= 0 or NaN */
    if (kAccurate) {
        float f[8], ax0[8], ax1[8];
        D::unpack8(v0, f);
#pragma unroll
        for (int i = 0; i < 8; i++) ax0[i] = fabsf(f[i]);
        D::unpack8(v1, f);
#pragma unroll
        for (int i = 0; i < 8; i++) ax1[i] = fabsf(f[i]);
        b = accurate_byte<kTwoLevel, false>(ax0, ax1, b, accurate_search<kTwoLevel>(finite, g, s_t),
                                            s_t, inv_t);
        float inv = b == 0u ? 0.0f : rcp_e4m3(e4m3_decode_fast(b));
        if (kTwoLevel) inv = __fmul_rn(inv, inv_t);
        if (finite)
            nib = make_uint2(e2m1x8_sat<D>(v0, inv), e2m1x8_sat<D>(v1, inv));
        else
            nib = make_uint2(nvfp4_half_checked<D>(v0, b, inv), nvfp4_half_checked<D>(v1, b, inv));
        if (b == 0u) nib = make_uint2(0u, 0u);
        sb = b;
        if (kTwoLevel && s_t == 0.0f) {
            nib = make_uint2(0u, 0u);
            sb = 0u;
        }
        return;
    }
    float inv = rcp_e4m3(e4m3_decode_fast(b));   /* the CPU's 1.0f / d */
    if (kTwoLevel) inv = __fmul_rn(inv, inv_t);
    /* the fast encoder's conditions (nvfp4_fast_scale, two_level_fast), per group */
    bool fast = finite & nvfp4_fast_scale(b, s);
    if (kTwoLevel) fast &= two_level_fast(s_t);
    if (fast) {
        nib = make_uint2(e2m1x8_fast<D>(v0, inv), e2m1x8_fast<D>(v1, inv));
        if (b == 0u) nib = make_uint2(0u, 0u);
    } else {
        nib = make_uint2(nvfp4_half_checked<D>(v0, b, inv), nvfp4_half_checked<D>(v1, b, inv));
    }
    sb = b;
    if (kTwoLevel && s_t == 0.0f) { /* zero or tiny token: latent bytes and scales 0 */
        nib = make_uint2(0u, 0u);
        sb = 0u;
    }
}

/* The lane's 16 fp8_ds_mla latent bytes; the tile's scale into s. */
template <typename D>
__device__ __forceinline__ uint4 fp8_tile_small(const uint4 &v0, const uint4 &v1, int pow2,
                                                float &s) {
    bool finite;
    const float g = amax16<D>(v0, v1, finite);
    const float tmax = warp_max_xor(g, 1, 4); /* the 8 lanes of the tile */
    const bool fast = all8(finite) && fp8_fast_tile(tmax, pow2);
    float f[16];
    D::unpack8(v0, f);
    D::unpack8(v1, f + 8);
    uint32_t w[4];
    if (fast) { /* Markstein division, exact here (see fp8_ds_mla_token) */
        s = fp8_scale_recipe(div448(tmax), pow2);
        const float r = __frcp_rn(s);
#pragma unroll
        for (int i = 0; i < 4; i++) w[i] = e4m3x4_encode(f + 4 * i, [&](float x) { return div_markstein(x, s, r); });
    } else { /* checked: IEEE division, as the CPU */
        s = fp8_scale_recipe(__fdiv_rn(tmax, 448.0f), pow2);
#pragma unroll
        for (int i = 0; i < 4; i++) w[i] = e4m3x4_encode(f + 4 * i, [&](float x) { return __fdiv_rn(x, s); });
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
}

/* Scaled E4M3 RoPE of a 368-B record from 8 lanes (8 values each, an aligned group): 8 bytes
 * per lane. Every lane of the warp calls it (shuffles within the group). */
template <typename D>
__device__ __forceinline__ uint2 fp8_rope_small(const uint4 &r, float &scale) {
    float f[8];
    D::unpack8(r, f);
    const float m = fmaxf(fmaxf(amax_acc(amax_acc(0.0f, f[0]), f[1]), amax_acc(amax_acc(0.0f, f[2]), f[3])),
                          fmaxf(amax_acc(amax_acc(0.0f, f[4]), f[5]), amax_acc(amax_acc(0.0f, f[6]), f[7])));
    float inv; /* the CPU's 1.0f / scale */
    scale = rope_scale_guard(__fmul_rn(warp_max_xor(m, 1, 4), inv448()), inv);
    auto q = [&](float x) { return __fmul_rn(x, inv); };
    uint2 o = make_uint2(e4m3x4_encode(f, q), e4m3x4_encode(f + 4, q));
    if (scale == 0.0f) o = make_uint2(0u, 0u);
    return o;
}

/* Block: kSmallWarps latent warps (warp w: token blockIdx.x * kSmallWarps + w, whole record
 * except, in the 368-B formats, the fp8 RoPE) and, in the 368-B formats, one RoPE warp (lanes
 * 8j .. 8j + 7: token j's 64 RoPE values and scale), so that the RoPE's chain (amax, scale,
 * reciprocal, encoding) runs beside the latent's instead of after it in the same warp. */
__host__ __device__ constexpr int small_threads(int f) { return 32 * (kSmallWarps + (rope_fp8(f) ? 1 : 0)); }
template <int F> struct SmallShape {
    static constexpr bool kRopeWarp = rope_fp8(F);
    static constexpr int kThreads = small_threads(F);
};

template <int F, typename D, int kOpt>
__global__ void __launch_bounds__(SmallShape<F>::kThreads) write_small_kernel(const WriteParams p) {
    constexpr int kRec = RecordBytes<F>::value;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const long long t0 = (long long)blockIdx.x * kSmallWarps;
    unsigned int rejected = 0;
    if (SmallShape<F>::kRopeWarp && warp == kSmallWarps) {
        const long long t = t0 + (lane >> 3);
        const bool valid = t < p.n; /* uniform per 8-lane group; all lanes stay for the shuffles */
        long long slot = -1;
        uint4 r = make_uint4(0u, 0u, 0u, 0u);
        if (valid) {
            slot = __ldg(p.slots + t);
            r = __ldcs(reinterpret_cast<const uint4 *>(p.k_pe + t * p.k_pe_stride_bytes) + (lane & 7));
        }
        float scale;
        const uint2 o = fp8_rope_small<D>(r, scale);
        unsigned char *rec = reinterpret_cast<unsigned char *>(record_dst<kRec>(p, slot, false, rejected));
        if (rec == nullptr) return; /* counted by the latent warp */
        reinterpret_cast<uint2 *>(rec + 304)[lane & 7] = o;
        if ((lane & 7) == 0) reinterpret_cast<float *>(rec)[288 / 4] = scale;
        return;
    }
    const long long t = t0 + warp;
    if (t >= p.n) return; /* warp-uniform */
    /* every load before the slot is known: the latency is paid once */
    const long long slot = __ldg(p.slots + t);
    const uint4 *row = reinterpret_cast<const uint4 *>(p.kv_c + t * p.kv_c_stride_bytes) + 2 * lane;
    uint4 v0 = __ldcs(row), v1 = __ldcs(row + 1);
    uint4 r = make_uint4(0u, 0u, 0u, 0u);
    if (!SmallShape<F>::kRopeWarp && lane < 8)
        r = __ldcs(reinterpret_cast<const uint4 *>(p.k_pe + t * p.k_pe_stride_bytes) + lane);
    uint4 *dst = record_dst<kRec>(p, slot, lane == 0, rejected);
    if (dst == nullptr) { /* warp-uniform: the slot is the warp's */
        if (rejected != 0 && p.rejected != nullptr) atomicAdd(p.rejected, 1ull);
        return;
    }
    unsigned char *rec = reinterpret_cast<unsigned char *>(dst);
    /* the record's lines into L2 now (address translation and allocation), while the inputs
     * are still arriving, not after the encoding (measured: never slower, at times one event
     * timer step faster) */
    if (lane * 128 < kRec) asm volatile("prefetch.global.L2 [%0];" ::"l"(rec + 128 * lane) : "memory");
    if (F == MLAKV_FP8_DS_MLA) {
        float s;
        const uint4 w = fp8_tile_small<D>(v0, v1, p.fp8_pow2, s);
        dst[lane] = w;
        if ((lane & 7) == 0) reinterpret_cast<float *>(rec + 512)[lane >> 3] = s;
        if (lane < 8) reinterpret_cast<uint4 *>(rec + 528)[lane] = D::to_bf16x8(r);
    } else {
        constexpr bool kTwoLevel = F == MLAKV_NVFP4_FP8_ROPE_TOKEN_SCALE;
        constexpr bool kAccurate = (kOpt & kOptAccurate) != 0;
        uint2 nib;
        uint32_t sb;
        float s_t;
        if (kOpt & kOptScaled) { /* bf16(x / s_l), read as bf16 */
            v0 = scale_latent8<D>(v0, p.latent_scale);
            v1 = scale_latent8<D>(v1, p.latent_scale);
            nvfp4_group_small<kTwoLevel, kAccurate, Bf16In>(v0, v1, nib, sb, s_t);
        } else {
            nvfp4_group_small<kTwoLevel, kAccurate, D>(v0, v1, nib, sb, s_t);
        }
        reinterpret_cast<uint2 *>(rec)[lane] = nib;
        rec[256 + lane] = (unsigned char)sb;
        if (F == MLAKV_NVFP4_DS_MLA) {
            if (lane < 8) reinterpret_cast<uint4 *>(rec + 304)[lane] = D::to_bf16x8(r);
            if (lane == 8) *reinterpret_cast<uint4 *>(rec + 288) = make_uint4(0u, 0u, 0u, 0u);
        } else {
            /* bytes 292..303 (token scale or 0, zeros); the RoPE warp writes 288..291 */
            if (lane == 0) reinterpret_cast<float *>(rec)[292 / 4] = kTwoLevel ? s_t : 0.0f;
            if (lane == 1) reinterpret_cast<uint2 *>(rec)[296 / 8] = make_uint2(0u, 0u);
        }
    }
}

typedef void (*KernelFn)(const WriteParams);

/* the kernel for a format, input type and options: the one-token-per-warp kernel (small) or
 * the grid-stride one. Options a format does not take (validated by the host) are not
 * instantiated. */
template <mlakv_format F, typename D, int kOpt> KernelFn pick_fo(bool small) {
    return small ? write_small_kernel<F, D, kOpt> : write_kernel<F, D, kOpt>;
}
template <mlakv_format F, typename D> KernelFn pick_f(bool small, int opt) {
    constexpr bool kStatic = F == MLAKV_NVFP4_DS_MLA || F == MLAKV_NVFP4_FP8_ROPE;
    if constexpr (F == MLAKV_FP8_DS_MLA) return pick_fo<F, D, 0>(small);
    switch (kStatic ? opt : opt & kOptAccurate) {
    case 0: return pick_fo<F, D, 0>(small);
    case kOptAccurate: return pick_fo<F, D, kOptAccurate>(small);
    case kOptScaled: return pick_fo<F, D, (kStatic ? kOptScaled : 0)>(small);
    default: return pick_fo<F, D, (kStatic ? kOptScaled | kOptAccurate : kOptAccurate)>(small);
    }
}
template <typename D> KernelFn pick(mlakv_format f, bool small, int opt) {
    switch (f) {
    case MLAKV_FP8_DS_MLA: return pick_f<MLAKV_FP8_DS_MLA, D>(small, opt);
    case MLAKV_NVFP4_DS_MLA: return pick_f<MLAKV_NVFP4_DS_MLA, D>(small, opt);
    case MLAKV_NVFP4_FP8_ROPE: return pick_f<MLAKV_NVFP4_FP8_ROPE, D>(small, opt);
    case MLAKV_NVFP4_FP8_ROPE_TOKEN_SCALE: return pick_f<MLAKV_NVFP4_FP8_ROPE_TOKEN_SCALE, D>(small, opt);
    default: return nullptr;
    }
}

/* Largest n for the one-token-per-warp kernel (mlakv_cuda_write_with can force either). */
#ifndef MLAKV_WRITE_SMALL_MAX
#define MLAKV_WRITE_SMALL_MAX 4096
#endif

/* Resident blocks per multiprocessor of each kernel, asked once per process (the same for
 * every GPU of one architecture; the kernels use no dynamic shared memory). */
int g_blocks_per_sm[2][MLAKV_FORMAT_COUNT][4];

mlakv_status blocks_per_sm(const char *fn, KernelFn k, int dt, mlakv_format f, int opt, int *out) {
    int v = __atomic_load_n(&g_blocks_per_sm[dt][f][opt], __ATOMIC_ACQUIRE);
    if (v <= 0) {
        MLAKV_CUDA_TRY(fn, cudaOccupancyMaxActiveBlocksPerMultiprocessor(&v, k, kThreads, 0));
        if (v < 1) v = 1;
        __atomic_store_n(&g_blocks_per_sm[dt][f][opt], v, __ATOMIC_RELEASE);
    }
    *out = v;
    return MLAKV_OK;
}

/* The CPU writer's row checks (NULL, stride, 64-bit extent), plus what the kernel's 16-byte
 * loads need: a 16-byte aligned base and rows that start 16-byte aligned. */
mlakv_status check_rows(const char *fn, const char *name, const void *p, int64_t n, int64_t cols,
                        int64_t stride, mlakv_dtype dtype) {
    MLAKV_TRY(mlakv_check_rows(fn, name, p, n, cols, stride, dtype));
    if ((uintptr_t)p % 16 != 0)
        return mlakv_fail(MLAKV_ERR_ALIGNMENT, "%s: %s (%p) is not 16-byte aligned", fn, name, p);
    if (stride % 8 != 0)
        return mlakv_fail(MLAKV_ERR_ALIGNMENT,
                          "%s: %s row stride %lld elements is not a multiple of 8 (rows must "
                          "start 16-byte aligned)",
                          fn, name, (long long)stride);
    return MLAKV_OK;
}

} // namespace

static mlakv_status cuda_write(const char *fn, const mlakv_cache *cache, int64_t n,
                               const void *kv_c, int64_t kv_c_row_stride, const void *k_pe,
                               int64_t k_pe_row_stride, mlakv_dtype dtype,
                               const int64_t *slot_mapping, const mlakv_write_options *options,
                               mlakv_cuda_write_kernel kernel, unsigned long long *rejected_count,
                               void *stream) {
    MLAKV_TRY(mlakv_cache_check(fn, cache));
    if (kernel != MLAKV_CUDA_WRITE_KERNEL_AUTO && kernel != MLAKV_CUDA_WRITE_KERNEL_PER_WARP &&
        kernel != MLAKV_CUDA_WRITE_KERNEL_GRID_STRIDE)
        return mlakv_fail(MLAKV_ERR_INVALID_ARGUMENT, "%s: unknown write kernel %d", fn, (int)kernel);
    if (n < 0)
        return mlakv_fail(MLAKV_ERR_GEOMETRY, "%s: n is %lld, must be >= 0", fn, (long long)n);
    if (dtype != MLAKV_BF16 && dtype != MLAKV_F16)
        return mlakv_fail(MLAKV_ERR_DTYPE, "%s: dtype %d not supported (BF16 or F16)", fn,
                          (int)dtype);
    MLAKV_TRY(mlakv_check_write_options(fn, options));
    if (n == 0) return MLAKV_OK;
    MLAKV_TRY(check_rows(fn, "kv_c", kv_c, n, MLAKV_LATENT_DIM, kv_c_row_stride, dtype));
    MLAKV_TRY(check_rows(fn, "k_pe", k_pe, n, MLAKV_ROPE_DIM, k_pe_row_stride, dtype));
    MLAKV_CHECK_NOT_NULL(fn, slot_mapping);
    if ((uintptr_t)slot_mapping % 8 != 0)
        return mlakv_fail(MLAKV_ERR_ALIGNMENT, "%s: slot_mapping is not 8-byte aligned", fn);
    MLAKV_TRY(mlakv_check_cache_aligned16(fn, cache));
    if ((uintptr_t)rejected_count % 8 != 0)
        return mlakv_fail(MLAKV_ERR_ALIGNMENT, "%s: rejected_count is not 8-byte aligned", fn);
    /* the kernel reads its inputs through the read-only path while writing records: no input
     * may lie in the cache or under the counter (device pointers, compared as values) */
    MLAKV_TRY(mlakv_check_write_aliasing(fn, cache, n, kv_c, kv_c_row_stride, k_pe,
                                         k_pe_row_stride, dtype, slot_mapping, rejected_count));

    int sm_count = 0;
    MLAKV_TRY(mlakv::cuda::device_ready(fn, &sm_count, NULL));
    const int dt = dtype == MLAKV_BF16 ? 0 : 1;
    const bool fits_small = n <= 4ll * 0x7FFFFFFF; /* grid.x < 2^31 */
    const bool small = kernel == MLAKV_CUDA_WRITE_KERNEL_AUTO
                           ? n <= MLAKV_WRITE_SMALL_MAX
                           : kernel == MLAKV_CUDA_WRITE_KERNEL_PER_WARP && fits_small;
    const int opt = (options != NULL && options->nvfp4_encoder == MLAKV_NVFP4_ENCODER_ACCURATE
                         ? kOptAccurate : 0) |
                    (cache->latent_scale != 1.0f ? kOptScaled : 0);
    const KernelFn k = dt == 0 ? pick<Bf16In>(cache->format, small, opt)
                               : pick<F16In>(cache->format, small, opt);
    if (k == nullptr)
        return mlakv_fail(MLAKV_ERR_UNKNOWN_FORMAT, "%s: unknown format %d", fn, (int)cache->format);

    WriteParams p;
    p.base = static_cast<unsigned char *>(cache->base);
    p.kv_c = static_cast<const unsigned char *>(kv_c);
    p.k_pe = static_cast<const unsigned char *>(k_pe);
    p.slots = reinterpret_cast<const long long *>(slot_mapping);
    p.rejected = rejected_count;
    p.n = n;
    p.capacity = mlakv_cache_capacity(cache);
    p.block_size = cache->block_size;
    p.block_size_u32 = cache->block_size <= 0xFFFFFFFFll ? (unsigned int)cache->block_size : 0u;
    p.block_shift = -1;
    if ((cache->block_size & (cache->block_size - 1)) == 0) {
        p.block_shift = 0;
        while ((1ll << p.block_shift) < cache->block_size) p.block_shift++;
    }
    p.block_stride_bytes = cache->block_stride_bytes;
    p.kv_c_stride_bytes = kv_c_row_stride * 2;
    p.k_pe_stride_bytes = k_pe_row_stride * 2;
    p.fp8_pow2 = options != NULL && options->fp8_scale_recipe == MLAKV_FP8_SCALE_POW2;
    p.latent_scale = cache->latent_scale;

    /* few tokens (a decode step): one token per warp, no loop; else one wave of resident
     * blocks at most, each warp looping over its token pairs. With more pairs than warps in a
     * wave, the grid is shrunk to the fewest blocks that still need no more passes, so every
     * warp makes the same number of passes (or one fewer) and the last pass is not left to a
     * few warps on an idle machine (256K tokens, 2 x 132 blocks: 62.06 passes -> 63 passes for
     * 128 warps) */
    long long nblocks;
    int threads;
    if (small) {
        nblocks = (n + kSmallWarps - 1) / kSmallWarps;
        threads = small_threads(cache->format);
    } else {
        int per_sm = 1;
        MLAKV_TRY(blocks_per_sm(fn, k, dt, cache->format, opt, &per_sm));
        const long long pairs = (n + 1) / 2;
        const long long want = (pairs + kWarps - 1) / kWarps;
        const long long wave = (long long)sm_count * per_sm;
        nblocks = want < wave ? want : wave;
        if (want > wave) {
            const long long passes = (pairs + wave * kWarps - 1) / (wave * kWarps);
            nblocks = (pairs + passes * kWarps - 1) / (passes * kWarps);
        }
        threads = kThreads;
    }
    k<<<(unsigned int)nblocks, threads, 0, static_cast<cudaStream_t>(stream)>>>(p);
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess)
        return mlakv_fail(MLAKV_ERR_CUDA, "%s: kernel launch failed: %s", fn, cudaGetErrorString(err));
    return MLAKV_OK;
}

extern "C" mlakv_status mlakv_cuda_write(const mlakv_cache *cache, int64_t n, const void *kv_c,
                                         int64_t kv_c_row_stride, const void *k_pe,
                                         int64_t k_pe_row_stride, mlakv_dtype dtype,
                                         const int64_t *slot_mapping,
                                         const mlakv_write_options *options,
                                         unsigned long long *rejected_count, void *stream) {
    return cuda_write("mlakv_cuda_write", cache, n, kv_c, kv_c_row_stride, k_pe, k_pe_row_stride,
                      dtype, slot_mapping, options, MLAKV_CUDA_WRITE_KERNEL_AUTO, rejected_count,
                      stream);
}

extern "C" mlakv_status mlakv_cuda_write_with(const mlakv_cache *cache, int64_t n, const void *kv_c,
                                              int64_t kv_c_row_stride, const void *k_pe,
                                              int64_t k_pe_row_stride, mlakv_dtype dtype,
                                              const int64_t *slot_mapping,
                                              const mlakv_write_options *options,
                                              mlakv_cuda_write_kernel kernel,
                                              unsigned long long *rejected_count, void *stream) {
    return cuda_write("mlakv_cuda_write_with", cache, n, kv_c, kv_c_row_stride, k_pe,
                      k_pe_row_stride, dtype, slot_mapping, options, kernel, rejected_count,
                      stream);
}
