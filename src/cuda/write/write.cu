/* GPU writer: mlakv_cuda_write. kv_c [n, 512] and k_pe [n, 64] (bf16 or fp16 rows) -> records
 * at slot_mapping[i] in a paged device cache, byte-identical to the CPU writer (mlakv_write).
 *
 * Kernel shape: one warp per token, a grid-stride loop over tokens with the next token's
 * loads in flight while the current one is encoded.
 *  - Lane l loads latent elements [8l, 8l+8) and [256+8l, 256+8l+8) (two coalesced 16-byte
 *    loads across the warp, streaming cache hint) and lanes 0..7 the 64 RoPE values.
 *  - NVFP4: a 16-value group is two lanes: group amax with one shuffle; the token amax of the
 *    two-level format with a full butterfly. fp8_ds_mla: a 128-value tile is 16 lanes.
 *  - The record is assembled in shared memory (one 656-byte stage per warp) and written with
 *    coalesced 16-byte stores (records are multiples of 16 bytes; the host checks that the
 *    cache base and block stride are 16-byte aligned).
 *  - Slots are checked in 64 bits before any narrowing: negative = padded token, skipped;
 *    >= capacity = rejected, not written, counted per warp and added to the optional device
 *    counter with one atomicAdd per warp at exit.
 * No host synchronization and no allocation: capturable in a CUDA graph. */
#include <cfloat>
#include <cstdint>

#include "cuda/cuda_common.cuh"
#include "cuda/write/codec.cuh"

extern "C" {
#include "cache/cache.h"
#include "cpu/cpu.h"
#include "format/format.h"
}

namespace {

using namespace mlakv_dev;

constexpr int kWarps = 8; /* warps (tokens in flight) per block */
constexpr int kThreads = 32 * kWarps;
constexpr int kStageChunks = 656 / 16; /* the largest record, in 16-byte chunks */

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
};

template <int F> struct RecordBytes;
template <> struct RecordBytes<MLAKV_FP8_DS_MLA> { static constexpr int value = 656; };
template <> struct RecordBytes<MLAKV_NVFP4_DS_MLA> { static constexpr int value = 432; };
template <> struct RecordBytes<MLAKV_NVFP4_FP8_ROPE> { static constexpr int value = 368; };
template <> struct RecordBytes<MLAKV_NVFP4_FP8_ROPE_TOKEN_SCALE> { static constexpr int value = 368; };

/* Loaded inputs of one token, per lane. */
struct TokenIn {
    long long slot;
    uint4 a; /* latent [8l, 8l+8) */
    uint4 b; /* latent [256+8l, 256+8l+8) */
    uint4 r; /* bf16-rope formats: rope [8l, 8l+8) on lanes 0..7, zero elsewhere;
                fp8-rope formats: r.x = rope [2l, 2l+2) on every lane */
};

template <bool kRope32>
__device__ __forceinline__ void load_token(const WriteParams &p, long long t, int lane,
                                           TokenIn &in) {
    in.slot = __ldg(p.slots + t);
    const uint4 *row = reinterpret_cast<const uint4 *>(p.kv_c + t * p.kv_c_stride_bytes);
    in.a = __ldcs(row + lane);
    in.b = __ldcs(row + 32 + lane);
    in.r = make_uint4(0u, 0u, 0u, 0u);
    if (kRope32)
        in.r.x = __ldcs(reinterpret_cast<const unsigned int *>(p.k_pe + t * p.k_pe_stride_bytes) + lane);
    else if (lane < 8)
        in.r = __ldcs(reinterpret_cast<const uint4 *>(p.k_pe + t * p.k_pe_stride_bytes) + lane);
}

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

/* max(m, |x|) that propagates NaN (max.NaN): the fast-path test for finite inputs. */
__device__ __forceinline__ float amax_nan_acc(float m, float x) {
    float r;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(m), "f"(fabsf(x)));
    return r;
}

__device__ __forceinline__ float amax8_nan(const float f[8]) {
    float m = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; i++) m = amax_nan_acc(m, f[i]);
    return m;
}

/* One half group of NVFP4: 8 values -> 32 bits of nibbles (element i at bits 4i..4i+3).
 * inv is the CPU's (1.0f / d) [* inv_t]; sbyte == 0 (d == 0) gives the CPU's zero payload.
 * kChecked handles NaN q (NaN inputs, or the all-NaN group of a two-level token with an Inf);
 * without it q must be finite, which the caller guarantees. */
template <bool kChecked>
__device__ __forceinline__ uint32_t nvfp4_half(const float f[8], uint32_t sbyte, float inv) {
    uint32_t packed = 0;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const float q = __fmul_rn(f[i], inv);
        const uint32_t nib = kChecked ? e2m1_encode(q) : e2m1_encode_finite(q);
        packed |= nib << (4 * i);
    }
    return sbyte != 0 ? packed : 0u;
}

/* The NVFP4 latent (both halves of this lane) into the stage: payload bytes [4l, 4l+4) and
 * [128+4l, 128+4l+4), scale bytes 256 + l/2 and 256 + 16 + l/2. rcp[b] = 1.0f / decode(b).
 * Returns s_t (two-level). The lane-pair (2k, 2k+1) holds groups k and 16 + k. */
template <bool kTwoLevel, bool kChecked>
__device__ __forceinline__ float nvfp4_latent_impl(const float fa[8], const float fb[8], float ga,
                                                   float gb, float s_t_known, int lane,
                                                   const float *rcp, unsigned char *st) {
    ga = warp_max_xor(ga, 1, 1);
    gb = warp_max_xor(gb, 1, 1);
    float sa, sb, inv_t = 1.0f, s_t = 0.0f;
    if (kTwoLevel) {
        /* s_t_known < 0: not computed by the caller */
        s_t = s_t_known >= 0.0f ? s_t_known : __fmul_rn(warp_max_xor(fmaxf(ga, gb), 2, 16), inv2688());
        inv_t = __frcp_rn(s_t); /* the CPU's 1.0f / s_t */
        sa = __fmul_rn(__fmul_rn(ga, inv_t), inv6());
        sb = __fmul_rn(__fmul_rn(gb, inv_t), inv6());
    } else {
        sa = __fmul_rn(ga, inv6());
        sb = __fmul_rn(gb, inv6());
    }
    const uint32_t bab = e4m3x2_encode(sa, sb); /* scale >= 0 or NaN: bytes 0..0x7F */
    uint32_t ba = bab & 0x7Fu, bb = (bab >> 8) & 0x7Fu;
    float inva = rcp[ba], invb = rcp[bb];
    if (kTwoLevel) {
        inva = __fmul_rn(inva, inv_t);
        invb = __fmul_rn(invb, inv_t);
    }
    uint32_t pa = nvfp4_half<kChecked>(fa, ba, inva);
    uint32_t pb = nvfp4_half<kChecked>(fb, bb, invb);
    if (kTwoLevel && s_t == 0.0f) { /* token of zeros: latent bytes and scales all 0 */
        ba = bb = 0u;
        pa = pb = 0u;
    }
    reinterpret_cast<uint32_t *>(st)[lane] = pa;
    reinterpret_cast<uint32_t *>(st + 128)[lane] = pb;
    if ((lane & 1) == 0) {
        st[256 + (lane >> 1)] = (unsigned char)ba;
        st[256 + 16 + (lane >> 1)] = (unsigned char)bb;
    }
    return s_t;
}

/* Fast path when every latent input of the token is finite (and, two-level, 1/s_t is far
 * from overflow): every q is then finite and the NaN handling per element is skipped. The
 * test is warp-uniform, so the two paths never diverge inside a warp. */
template <bool kTwoLevel>
__device__ __forceinline__ float nvfp4_latent(const float fa[8], const float fb[8], int lane,
                                              const float *rcp, unsigned char *st) {
    const float ga = amax8_nan(fa), gb = amax8_nan(fb); /* NaN if any input is NaN */
    bool fast = __all_sync(0xFFFFFFFFu, ga < INFINITY && gb < INFINITY);
    float s_t = -1.0f;
    if (kTwoLevel && fast) {
        /* all finite: this is the token amax; s_t >= 2^-100 keeps inv_t * (1/d) <= 2^109,
         * s_t == 0 is zeroed anyway */
        s_t = __fmul_rn(warp_max_xor(fmaxf(ga, gb), 1, 16), inv2688());
        fast = s_t == 0.0f || s_t >= 0x1p-100f;
    }
    if (fast) return nvfp4_latent_impl<kTwoLevel, false>(fa, fb, ga, gb, s_t, lane, rcp, st);
    return nvfp4_latent_impl<kTwoLevel, true>(fa, fb, amax8(fa), amax8(fb), -1.0f, lane, rcp, st);
}

/* Scaled E4M3 RoPE of the 368-B records, two values per lane; lane 0 also writes the
 * 16 bytes at 288 (rope scale, token scale, zeros). */
template <typename D>
__device__ __forceinline__ void fp8_rope(uint32_t r, int lane, float s_t, unsigned char *st) {
    float f0, f1;
    D::unpack2(r, f0, f1);
    const float scale = __fmul_rn(warp_max_xor(amax_acc(amax_acc(0.0f, f0), f1), 1, 16), inv448());
    const float inv = __frcp_rn(scale); /* the CPU's 1.0f / scale */
    uint32_t w = e4m3x2_encode(__fmul_rn(f0, inv), __fmul_rn(f1, inv));
    if (scale == 0.0f) w = 0u;
    reinterpret_cast<unsigned short *>(st + 304)[lane] = (unsigned short)w;
    if (lane == 0)
        *reinterpret_cast<uint4 *>(st + 288) = make_uint4(__float_as_uint(scale), __float_as_uint(s_t), 0u, 0u);
}

/* fp8_ds_mla tile scale, both recipes exactly as the CPU computes them. */
__device__ __forceinline__ float fp8_tile_scale(float amax, int pow2) {
    float s = __fdiv_rn(amax, 448.0f);
    if (pow2) {
        if (!(s >= 1e-4f)) s = 1e-4f;
        uint32_t b = __float_as_uint(s); /* finite (Inf -> FLT_MAX -> 2^128 = Inf) or Inf */
        if (b == 0x7F800000u) b = 0x7F7FFFFFu;
        if (b & 0x7FFFFFu) b = (b & 0xFF800000u) + 0x800000u; /* up to a power of two */
        s = __uint_as_float(b);
    } else {
        if (!(s >= FLT_MIN)) s = FLT_MIN;
    }
    return s;
}

__device__ __forceinline__ uint2 fp8_eight(const float f[8], float s) {
    uint32_t w0 = 0, w1 = 0;
#pragma unroll
    for (int i = 0; i < 4; i += 2) {
        w0 |= e4m3x2_encode(__fdiv_rn(f[i], s), __fdiv_rn(f[i + 1], s)) << (8 * i);
        w1 |= e4m3x2_encode(__fdiv_rn(f[4 + i], s), __fdiv_rn(f[5 + i], s)) << (8 * i);
    }
    return make_uint2(w0, w1);
}

/* Encode the token held by the warp into its stage. */
template <int F, typename D>
__device__ __forceinline__ void encode_token(const TokenIn &in, int lane, int fp8_pow2,
                                             const float *rcp, unsigned char *st) {
    float fa[8], fb[8];
    D::unpack8(in.a, fa);
    D::unpack8(in.b, fb);
    if (F == MLAKV_FP8_DS_MLA) {
        /* tiles: lanes 0..15 -> tile 0 (a) and 2 (b), lanes 16..31 -> tiles 1 and 3 */
        const float sa = fp8_tile_scale(warp_max_xor(amax8(fa), 1, 8), fp8_pow2);
        const float sb = fp8_tile_scale(warp_max_xor(amax8(fb), 1, 8), fp8_pow2);
        reinterpret_cast<uint2 *>(st)[lane] = fp8_eight(fa, sa);
        reinterpret_cast<uint2 *>(st + 256)[lane] = fp8_eight(fb, sb);
        if ((lane & 15) == 0) {
            float *ts = reinterpret_cast<float *>(st + 512);
            ts[lane >> 4] = sa;
            ts[2 + (lane >> 4)] = sb;
        }
        if (lane < 8) reinterpret_cast<uint4 *>(st + 528)[lane] = D::to_bf16x8(in.r);
    } else if (F == MLAKV_NVFP4_DS_MLA) {
        nvfp4_latent<false>(fa, fb, lane, rcp, st);
        if (lane < 8) reinterpret_cast<uint4 *>(st + 304)[lane] = D::to_bf16x8(in.r);
        if (lane == 8) *reinterpret_cast<uint4 *>(st + 288) = make_uint4(0u, 0u, 0u, 0u);
    } else {
        const float s_t = nvfp4_latent<F == MLAKV_NVFP4_FP8_ROPE_TOKEN_SCALE>(fa, fb, lane, rcp, st);
        fp8_rope<D>(in.r.x, lane, F == MLAKV_NVFP4_FP8_ROPE_TOKEN_SCALE ? s_t : 0.0f, st);
    }
}

template <int F, typename D>
__global__ void __launch_bounds__(kThreads) write_kernel(const WriteParams p) {
    constexpr int kRec = RecordBytes<F>::value;
    constexpr int kChunks = kRec / 16;
    __shared__ uint4 stage[kWarps][kStageChunks];
    __shared__ float rcp[128]; /* 1.0f / decode(b) of the E4M3 scale bytes, as the CPU rounds */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (F != MLAKV_FP8_DS_MLA) {
        if (threadIdx.x < 128) rcp[threadIdx.x] = __frcp_rn(e4m3_decode(threadIdx.x));
        __syncthreads();
    }
    unsigned char *st = reinterpret_cast<unsigned char *>(stage[warp]);
    const long long step = (long long)gridDim.x * kWarps;
    long long t = (long long)blockIdx.x * kWarps + warp;
    unsigned int rejected = 0;

    TokenIn cur;
    constexpr bool kRope32 = F == MLAKV_NVFP4_FP8_ROPE || F == MLAKV_NVFP4_FP8_ROPE_TOKEN_SCALE;
    if (t < p.n) load_token<kRope32>(p, t, lane, cur);
    for (; t < p.n; t += step) {
        TokenIn next;
        const bool more = t + step < p.n;
        if (more) load_token<kRope32>(p, t + step, lane, next);
        const long long slot = cur.slot; /* warp-uniform */
        if (slot >= p.capacity) {
            rejected++;
        } else if (slot >= 0) {
            encode_token<F, D>(cur, lane, p.fp8_pow2, rcp, st);
            __syncwarp();
            long long blk; /* slot is in [0, capacity): all branches are warp-uniform */
            if (p.block_shift >= 0)
                blk = slot >> p.block_shift;
            else if (((unsigned long long)slot >> 32) == 0 && p.block_size_u32 != 0)
                blk = (unsigned int)slot / p.block_size_u32;
            else
                blk = slot / p.block_size;
            const long long off = slot - blk * p.block_size;
            uint4 *dst = reinterpret_cast<uint4 *>(p.base + blk * p.block_stride_bytes + off * kRec);
#pragma unroll
            for (int c = lane; c < kChunks; c += 32) dst[c] = stage[warp][c];
            __syncwarp();
        }
        if (more) cur = next;
    }
    if (lane == 0 && rejected != 0 && p.rejected != nullptr)
        atomicAdd(p.rejected, (unsigned long long)rejected);
}

typedef void (*KernelFn)(const WriteParams);

template <typename D> KernelFn pick(mlakv_format f) {
    switch (f) {
    case MLAKV_FP8_DS_MLA: return write_kernel<MLAKV_FP8_DS_MLA, D>;
    case MLAKV_NVFP4_DS_MLA: return write_kernel<MLAKV_NVFP4_DS_MLA, D>;
    case MLAKV_NVFP4_FP8_ROPE: return write_kernel<MLAKV_NVFP4_FP8_ROPE, D>;
    case MLAKV_NVFP4_FP8_ROPE_TOKEN_SCALE: return write_kernel<MLAKV_NVFP4_FP8_ROPE_TOKEN_SCALE, D>;
    default: return nullptr;
    }
}

/* Resident blocks per multiprocessor of each kernel, asked once per process (the same for
 * every GPU of one architecture; the kernels use no dynamic shared memory). */
int g_blocks_per_sm[2][MLAKV_FORMAT_COUNT];

mlakv_status blocks_per_sm(const char *fn, KernelFn k, int dt, mlakv_format f, int *out) {
    int v = __atomic_load_n(&g_blocks_per_sm[dt][f], __ATOMIC_ACQUIRE);
    if (v <= 0) {
        MLAKV_CUDA_TRY(fn, cudaOccupancyMaxActiveBlocksPerMultiprocessor(&v, k, kThreads, 0));
        if (v < 1) v = 1;
        __atomic_store_n(&g_blocks_per_sm[dt][f], v, __ATOMIC_RELEASE);
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

extern "C" mlakv_status mlakv_cuda_write(const mlakv_cache *cache, int64_t n, const void *kv_c,
                                         int64_t kv_c_row_stride, const void *k_pe,
                                         int64_t k_pe_row_stride, mlakv_dtype dtype,
                                         const int64_t *slot_mapping,
                                         const mlakv_write_options *options,
                                         unsigned long long *rejected_count, void *stream) {
    static const char fn[] = "mlakv_cuda_write";
    MLAKV_TRY(mlakv_cache_check(fn, cache));
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
    if ((uintptr_t)cache->base % 16 != 0)
        return mlakv_fail(MLAKV_ERR_ALIGNMENT, "%s: cache->base (%p) is not 16-byte aligned", fn,
                          cache->base);
    if (cache->block_stride_bytes % 16 != 0)
        return mlakv_fail(MLAKV_ERR_ALIGNMENT,
                          "%s: cache->block_stride_bytes %lld is not a multiple of 16", fn,
                          (long long)cache->block_stride_bytes);
    if ((uintptr_t)rejected_count % 8 != 0)
        return mlakv_fail(MLAKV_ERR_ALIGNMENT, "%s: rejected_count is not 8-byte aligned", fn);

    int sm_count = 0;
    MLAKV_TRY(mlakv_cuda_device_ready(fn, &sm_count, NULL));
    const int dt = dtype == MLAKV_BF16 ? 0 : 1;
    KernelFn k = dt == 0 ? pick<Bf16In>(cache->format) : pick<F16In>(cache->format);
    if (k == nullptr)
        return mlakv_fail(MLAKV_ERR_UNKNOWN_FORMAT, "%s: unknown format %d", fn, (int)cache->format);
    int per_sm = 1;
    MLAKV_TRY(blocks_per_sm(fn, k, dt, cache->format, &per_sm));

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

    /* one wave of resident blocks at most; each warp loops over its tokens */
    const long long want = (n + kWarps - 1) / kWarps;
    const long long wave = (long long)sm_count * per_sm;
    const unsigned int blocks = (unsigned int)(want < wave ? want : wave);
    k<<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(p);
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess)
        return mlakv_fail(MLAKV_ERR_CUDA, "%s: kernel launch failed: %s", fn, cudaGetErrorString(err));
    return MLAKV_OK;
}
