/* GPU gathers: mlakv_cuda_gather_bf16 (selected slots) and mlakv_cuda_gather_upconvert (whole
 * contexts through a block table) -> bf16 rows [latent 512 ; RoPE 64], the CPU gathers' values
 * (src/cpu/gather.c) bit for bit, NaN payloads aside.
 *
 * The job is a copy that grows every record into a 1152-byte row (368-656 B read per row), so it
 * is bound by memory bandwidth, mostly by the writes. Kernel shape:
 *  - A warp takes a unit of 4 rows at a time. Lane l de-quantizes output chunks l and l + 32
 *    (16 bytes, 8 latent values each) of every row of the unit, and the RoPE chunk l % 8 of row
 *    l / 8: 9 chunks per lane, no lane idle, and every store instruction writes 512 contiguous
 *    bytes of one row (the RoPE stores: 4 rows x 128 B), in whole 128-byte lines, as
 *    streaming (evict-first) stores.
 *  - All loads of the 4 records are issued before any conversion (per lane: 2 latent words, 2
 *    scales, 1 RoPE piece per record), so each warp has ~1.5-2.6 KB of reads in flight; the
 *    grid is one wave of resident blocks sized from the SM count and the occupancy, each warp
 *    looping over units (grid-stride).
 *  - De-quantization is exact and matches the CPU: NVFP4 values e2m1 x e4m3 by byte permutes
 *    and one exact bf16 product (cuda/common/dequant.cuh), times s_t in fp32 then rounded for
 *    the two-level record; E4M3 x fp32 scale in fp32, rounded to nearest even; bf16 RoPE copied
 *    with NaNs quieted as mlakv_f32_to_bf16 does. Only a NaN produced by arithmetic may differ
 *    in sign or payload from the CPU's (the hardware's canonical NaN).
 *  - gather_bf16: unit u = rows [4u, 4u + 4); a negative slot or one >= capacity gives a zero
 *    row (the latter counted).
 *  - upconvert: the output rows of all batch rows form one index space and warp w takes the
 *    units u = w (mod warps), so that the work is balanced whatever the lengths when
 *    workspace_starts are packed. Each warp scans the batch rows 32 at a time (a lane per row:
 *    its valid interval, whether this warp owns a unit in it, a ballot), then walks only the
 *    rows where it has units. Invalid positions and rows are counted arithmetically per batch
 *    row (by one warp), invalid block ids per row written.
 * No allocation, no host synchronization: capturable in a CUDA graph. */
#include <cstdint>

#include "cuda/common/dequant.cuh"
#include "cuda/common/status.cuh"

extern "C" {
#include "cache/cache.h"
#include "common/divider.h"
#include "core/validate.h"
}

namespace {

using namespace mlakv::cuda;

#ifndef MLAKV_GATHER_WARPS
#define MLAKV_GATHER_WARPS 8 /* warps per block */
#endif
#ifndef MLAKV_GATHER_MIN_BLOCKS
#define MLAKV_GATHER_MIN_BLOCKS 4 /* __launch_bounds__ minimum blocks per SM: 32 warps */
#endif
#ifndef MLAKV_UPCONVERT_MIN_BLOCKS
#define MLAKV_UPCONVERT_MIN_BLOCKS 3 /* 24 warps: its row bookkeeping spills at 64 registers */
#endif
/* 1: output rows stored with st.global.cs (evict first): the rows are not read again by this
 * kernel, and keeping them out of L2's way measured +0.5-1.3 points of the copy bandwidth
 * (gather_bf16 at 256K rows, H100: 83.2-84.1 % -> 84.4-85.2 %) */
#ifndef MLAKV_GATHER_STREAMING_STORES
#define MLAKV_GATHER_STREAMING_STORES 1
#endif
constexpr int kWarps = MLAKV_GATHER_WARPS;
constexpr int kThreads = 32 * kWarps;
constexpr int kUnit = 4;          /* rows per warp step: one per 8-lane group (RoPE) */
constexpr unsigned kFull = 0xFFFFFFFFu;

/* one 16-byte chunk of an output row */
__device__ __forceinline__ void store_chunk(uint4 *d, uint4 v) {
#if MLAKV_GATHER_STREAMING_STORES
    __stcs(d, v);
#else
    *d = v;
#endif
}

struct GatherParams {
    const unsigned char *base;
    unsigned char *out;
    unsigned long long *invalid; /* optional */
    long long out_stride_bytes;
    long long block_stride_bytes;
    long long block_size;
    long long num_blocks;
    long long capacity;
    mlakv_divider div; /* block_size, for indices < 2^31 */
    float latent_scale; /* the cache's s_l (static NVFP4 records; 1 for the others) */
    /* gather_bf16 */
    const int *slots;
    long long n;
    /* upconvert */
    const int *table;
    const int *lens;
    const int *ws;
    const int *starts; /* optional */
    long long bts;
    long long batch;
    long long out_rows;
    long long pos_limit; /* bts * block_size, saturated: positions at or past it are invalid */
};

/* index / block_size and index % block_size (index >= 0) */
__device__ __forceinline__ void split_index(const GatherParams &p, long long idx, long long &blk,
                                            long long &off) {
    if (idx < 0x80000000ll)
        blk = mlakv_divider_apply(p.div, (uint32_t)idx);
    else
        blk = idx / p.block_size;
    off = idx - blk * p.block_size;
}

/* 16-bit lanes of w: a NaN gets its quiet bit, as mlakv_f32_to_bf16 does for a bf16 value */
__device__ __forceinline__ uint32_t quiet_bf16x2(uint32_t w) {
    return w | (__vcmpgtu2(w & 0x7FFF7FFFu, 0x7F807F80u) & 0x00400040u);
}

/* bf16x2 v (exact e2m1 x e4m3 products) times the two-level token scale in fp32, rounded to
 * bf16: the CPU's (e2m1 * d) * s_t */
__device__ __forceinline__ uint32_t times_st(uint32_t v, float s_t) {
    return f32x2_to_bf16x2(__fmul_rn(__uint_as_float(v << 16), s_t),
                                 __fmul_rn(__uint_as_float(v & 0xFFFF0000u), s_t));
}

/* 8 NVFP4 values (one word of nibbles) times a group scale byte -> one 16-byte chunk; s_t is the
 * two-level record's token scale, or the static records' latent scale s_l (1: skipped), applied
 * as the CPU's mlakv_read does: (e2m1 * d) * s in fp32, then bf16 */
template <bool kTwoLevel>
__device__ __forceinline__ uint4 nvfp4_chunk(uint32_t nib, uint32_t sbyte, float s_t) {
    const float sf = e4m3x2_to_f32((uint16_t)sbyte).x;
    const uint32_t s2 = f32x2_to_bf16x2(sf, sf); /* exact */
    uint32_t o[4];
    e2m1x8_to_bf16(nib, o);
#pragma unroll
    for (int k = 0; k < 4; k++) {
        o[k] = bf16x2_mul(o[k], s2);
        if (kTwoLevel || s_t != 1.0f) o[k] = times_st(o[k], s_t);
    }
    return make_uint4(o[0], o[1], o[2], o[3]);
}

/* One unit: this lane's row (row k = lane / 8 of the unit) has record my_rec (nullptr: a zero
 * row) and output my_dst (nullptr: not written); lanes of an 8-lane group agree. */
template <int FMT>
__device__ __forceinline__ void gather_unit(const unsigned char *my_rec, unsigned char *my_dst,
                                            int lane, float s_l) {
    typedef RecordTraits<FMT> T;
    const unsigned char *rec[kUnit];
    unsigned char *dst[kUnit];
#pragma unroll
    for (int k = 0; k < kUnit; k++) {
        rec[k] = reinterpret_cast<const unsigned char *>(
            __shfl_sync(kFull, reinterpret_cast<unsigned long long>(my_rec), 8 * k));
        dst[k] = reinterpret_cast<unsigned char *>(
            __shfl_sync(kFull, reinterpret_cast<unsigned long long>(my_dst), 8 * k));
    }
    const int c = lane & 7;
    if (FMT == MLAKV_FP8_DS_MLA) {
        /* chunk q: latent bytes [8q, 8q + 8), tile scale q / 16 */
        uint2 a[kUnit], b[kUnit];
        float sa[kUnit], sb[kUnit];
#pragma unroll
        for (int k = 0; k < kUnit; k++) {
            a[k] = b[k] = make_uint2(0u, 0u);
            sa[k] = sb[k] = 0.0f;
            if (rec[k] != nullptr) {
                a[k] = __ldg(reinterpret_cast<const uint2 *>(rec[k]) + lane);
                b[k] = __ldg(reinterpret_cast<const uint2 *>(rec[k]) + 32 + lane);
                const float *sc = reinterpret_cast<const float *>(rec[k] + T::scale_off);
                sa[k] = __ldg(sc + (lane >> 4));
                sb[k] = __ldg(sc + 2 + (lane >> 4));
            }
        }
        uint4 r = make_uint4(0u, 0u, 0u, 0u);
        if (my_rec != nullptr) r = __ldg(reinterpret_cast<const uint4 *>(my_rec + T::rope_off) + c);
#pragma unroll
        for (int k = 0; k < kUnit; k++) {
            if (dst[k] == nullptr) continue;
            uint4 *d = reinterpret_cast<uint4 *>(dst[k]);
            store_chunk(d + lane, e4m3x8_scaled(a[k], sa[k]));
            store_chunk(d + 32 + lane, e4m3x8_scaled(b[k], sb[k]));
        }
        if (my_dst != nullptr)
            store_chunk(reinterpret_cast<uint4 *>(my_dst) + 64 + c,
                        make_uint4(quiet_bf16x2(r.x), quiet_bf16x2(r.y), quiet_bf16x2(r.z), quiet_bf16x2(r.w)));
    } else {
        constexpr bool kTwoLevel = FMT == MLAKV_NVFP4_FP8_ROPE_TOKEN_SCALE;
        constexpr bool kRopeFp8 = FMT != MLAKV_NVFP4_DS_MLA;
        /* chunk q: nibble word q, group scale byte q / 2 */
        uint32_t a[kUnit], b[kUnit], ga[kUnit], gb[kUnit];
        float st[kUnit];
#pragma unroll
        for (int k = 0; k < kUnit; k++) {
            a[k] = b[k] = ga[k] = gb[k] = 0u;
            st[k] = s_l;
            if (rec[k] != nullptr) {
                a[k] = __ldg(reinterpret_cast<const unsigned int *>(rec[k]) + lane);
                b[k] = __ldg(reinterpret_cast<const unsigned int *>(rec[k]) + 32 + lane);
                ga[k] = __ldg(rec[k] + T::scale_off + (lane >> 1));
                gb[k] = __ldg(rec[k] + T::scale_off + 16 + (lane >> 1));
                if (kTwoLevel)
                    st[k] = __ldg(reinterpret_cast<const float *>(rec[k] + RecordTraits<3>::token_scale_off));
            }
        }
        uint4 r = make_uint4(0u, 0u, 0u, 0u);
        float rs = 0.0f;
        if (my_rec != nullptr) {
            if (kRopeFp8) {
                const uint2 r2 = __ldg(reinterpret_cast<const uint2 *>(my_rec + T::rope_off) + c);
                r.x = r2.x;
                r.y = r2.y;
                rs = __ldg(reinterpret_cast<const float *>(my_rec + RecordTraits<2>::rope_scale_off));
            } else {
                r = __ldg(reinterpret_cast<const uint4 *>(my_rec + T::rope_off) + c);
            }
        }
#pragma unroll
        for (int k = 0; k < kUnit; k++) {
            if (dst[k] == nullptr) continue;
            uint4 *d = reinterpret_cast<uint4 *>(dst[k]);
            store_chunk(d + lane, nvfp4_chunk<kTwoLevel>(a[k], ga[k], st[k]));
            store_chunk(d + 32 + lane, nvfp4_chunk<kTwoLevel>(b[k], gb[k], st[k]));
        }
        if (my_dst != nullptr) {
            uint4 o;
            if (kRopeFp8)
                o = e4m3x8_scaled(make_uint2(r.x, r.y), rs);
            else
                o = make_uint4(quiet_bf16x2(r.x), quiet_bf16x2(r.y), quiet_bf16x2(r.z), quiet_bf16x2(r.w));
            store_chunk(reinterpret_cast<uint4 *>(my_dst) + 64 + c, o);
        }
    }
}

template <int FMT>
__device__ __forceinline__ const unsigned char *record_ptr(const GatherParams &p, long long blk,
                                                           long long off) {
    return p.base + blk * p.block_stride_bytes + off * (long long)RecordTraits<FMT>::bytes;
}

template <int FMT>
__global__ void __launch_bounds__(kThreads, MLAKV_GATHER_MIN_BLOCKS) gather_bf16_kernel(const GatherParams p) {
    const int lane = threadIdx.x & 31;
    const long long nw = (long long)gridDim.x * kWarps;
    const long long units = (p.n + kUnit - 1) / kUnit;
    unsigned long long bad = 0;
    for (long long u = (long long)blockIdx.x * kWarps + (threadIdx.x >> 5); u < units; u += nw) {
        const long long t = kUnit * u + (lane >> 3);
        const unsigned char *rec = nullptr;
        unsigned char *dst = nullptr;
        if (t < p.n) {
            const int slot = __ldg(p.slots + t);
            dst = p.out + t * p.out_stride_bytes;
            if (slot >= 0) {
                if (slot < p.capacity) {
                    long long blk, off;
                    split_index(p, slot, blk, off);
                    rec = record_ptr<FMT>(p, blk, off);
                } else {
                    bad += (lane & 7) == 0; /* a zero row, counted once */
                }
            }
        }
        gather_unit<FMT>(rec, dst, lane, p.latent_scale);
    }
    if (bad != 0 && p.invalid != nullptr) atomicAdd(p.invalid, bad);
}

/* One batch row as the scan sees it: its output interval [olo, ohi) after clipping, and the
 * first and last unit this warp owns in it (u0 > u1: none). */
struct RowPlan {
    long long ws, start, olo, ohi, u0, u1;
};

__device__ __forceinline__ RowPlan plan_row(const GatherParams &p, long long b, long long w,
                                            long long nw, unsigned long long &bad) {
    RowPlan r;
    r.ws = r.start = r.olo = r.ohi = 0;
    r.u0 = 1;
    r.u1 = 0;
    const long long len = __ldg(p.lens + b);
    r.ws = __ldg(p.ws + b);
    r.start = p.starts != nullptr ? __ldg(p.starts + b) : 0;
    const bool mine = b % nw == w; /* the warp that counts this row's invalid positions */
    if (len < 0 || r.start < 0) {
        bad += mine;
        return r;
    }
    if (len == 0) return r;
    /* valid i: 0 <= ws + i < out_rows and start + i < pos_limit */
    const long long ilo = r.ws < 0 ? -r.ws : 0;
    long long ihi = len;
    ihi = min(ihi, p.out_rows - r.ws);
    ihi = min(ihi, p.pos_limit - r.start);
    if (ihi < ilo) ihi = ilo;
    if (mine) bad += (unsigned long long)(len - (ihi - ilo));
    if (ihi == ilo) return r;
    r.olo = r.ws + ilo;
    r.ohi = r.ws + ihi;
    const long long ulo = r.olo / kUnit;
    r.u1 = (r.ohi - 1) / kUnit;
    r.u0 = ulo + (w - ulo % nw + nw) % nw;
    return r;
}

template <int FMT>
__global__ void __launch_bounds__(kThreads, MLAKV_UPCONVERT_MIN_BLOCKS) upconvert_kernel(const GatherParams p) {
    const int lane = threadIdx.x & 31;
    const long long nw = (long long)gridDim.x * kWarps;
    const long long w = (long long)blockIdx.x * kWarps + (threadIdx.x >> 5);
    unsigned long long bad = 0;
    for (long long b0 = 0; b0 < p.batch; b0 += 32) {
        bool has = false;
        if (b0 + lane < p.batch) {
            const RowPlan mine = plan_row(p, b0 + lane, w, nw, bad);
            has = mine.u0 <= mine.u1;
        }
        unsigned todo = __ballot_sync(kFull, has);
        while (todo != 0) {
            const int src = __ffs(todo) - 1;
            todo &= todo - 1;
            /* planned again, warp-uniform (three cached loads), rather than kept from the scan
             * and shuffled: fewer live registers in the loop below */
            unsigned long long counted_already = 0;
            const RowPlan r = plan_row(p, b0 + src, w, nw, counted_already);
            const int *row = p.table + (b0 + src) * p.bts;
            const long long pos0 = r.start - r.ws; /* position of output row o: pos0 + o */
            for (long long u = r.u0; u <= r.u1; u += nw) {
                const long long o = kUnit * u + (lane >> 3);
                const unsigned char *rec = nullptr;
                unsigned char *dst = nullptr;
                if (o >= r.olo && o < r.ohi) {
                    long long col, off;
                    split_index(p, pos0 + o, col, off);
                const int blk = __ldg(row + col);
                    if (blk >= 0 && blk < p.num_blocks) {
                        rec = record_ptr<FMT>(p, blk, off);
                        dst = p.out + o * p.out_stride_bytes;
                    } else {
                        bad += (lane & 7) == 0; /* skipped, counted once */
                    }
                }
                gather_unit<FMT>(rec, dst, lane, p.latent_scale);
            }
        }
    }
    if (bad != 0 && p.invalid != nullptr) atomicAdd(p.invalid, bad);
}

typedef void (*KernelFn)(const GatherParams);

template <int FMT> KernelFn pick_f(bool upconvert) {
    return upconvert ? upconvert_kernel<FMT> : gather_bf16_kernel<FMT>;
}
KernelFn pick(mlakv_format f, bool upconvert) {
    switch (f) {
    case MLAKV_FP8_DS_MLA: return pick_f<MLAKV_FP8_DS_MLA>(upconvert);
    case MLAKV_NVFP4_DS_MLA: return pick_f<MLAKV_NVFP4_DS_MLA>(upconvert);
    case MLAKV_NVFP4_FP8_ROPE: return pick_f<MLAKV_NVFP4_FP8_ROPE>(upconvert);
    case MLAKV_NVFP4_FP8_ROPE_TOKEN_SCALE: return pick_f<MLAKV_NVFP4_FP8_ROPE_TOKEN_SCALE>(upconvert);
    default: return nullptr;
    }
}

/* Resident blocks per multiprocessor of each kernel, asked once per process. */
int g_blocks_per_sm[2][MLAKV_FORMAT_COUNT];

mlakv_status wave_blocks(const char *fn, KernelFn k, bool upconvert, mlakv_format f, int sm_count,
                         long long *out) {
    int v = __atomic_load_n(&g_blocks_per_sm[upconvert][f], __ATOMIC_ACQUIRE);
    if (v <= 0) {
        MLAKV_CUDA_TRY(fn, cudaOccupancyMaxActiveBlocksPerMultiprocessor(&v, k, kThreads, 0));
        if (v < 1) v = 1;
        __atomic_store_n(&g_blocks_per_sm[upconvert][f], v, __ATOMIC_RELEASE);
    }
    *out = (long long)sm_count * v;
    return MLAKV_OK;
}

/* Host checks shared by both entry points: the cache (plus the 16-byte alignment the record
 * loads need), the output (stride 0 = 576; 16-byte aligned rows) and the counter. */
mlakv_status check_common(const char *fn, const mlakv_cache *cache, void *out, int64_t rows,
                          int64_t *stride, const unsigned long long *invalid_count) {
    if (*stride == 0) *stride = MLAKV_QK_DIM;
    MLAKV_TRY(mlakv_check_rows(fn, "out", out, rows, MLAKV_QK_DIM, *stride, MLAKV_BF16));
    if (rows > 0 && (uintptr_t)out % 16 != 0)
        return mlakv_fail(MLAKV_ERR_ALIGNMENT, "%s: out (%p) is not 16-byte aligned", fn, out);
    if (*stride % 8 != 0)
        return mlakv_fail(MLAKV_ERR_ALIGNMENT,
                          "%s: out_row_stride %lld elements is not a multiple of 8 (rows must "
                          "start 16-byte aligned)", fn, (long long)*stride);
    MLAKV_TRY(mlakv_check_cache_aligned16(fn, cache));
    if ((uintptr_t)invalid_count % 8 != 0)
        return mlakv_fail(MLAKV_ERR_ALIGNMENT, "%s: invalid_count is not 8-byte aligned", fn);
    return MLAKV_OK;
}

void fill_common(GatherParams &p, const mlakv_cache *cache, void *out, int64_t stride,
                 unsigned long long *invalid_count) {
    p = GatherParams();
    p.base = static_cast<const unsigned char *>(cache->base);
    p.out = static_cast<unsigned char *>(out);
    p.invalid = invalid_count;
    p.out_stride_bytes = stride * 2;
    p.block_stride_bytes = cache->block_stride_bytes;
    p.block_size = cache->block_size;
    p.num_blocks = cache->num_blocks;
    p.capacity = mlakv_cache_capacity(cache);
    p.div = mlakv_divider_make(cache->block_size);
    p.latent_scale = cache->latent_scale;
}

mlakv_status launch(const char *fn, KernelFn k, long long nblocks, const GatherParams &p,
                    void *stream) {
    k<<<(unsigned int)nblocks, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(p);
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess)
        return mlakv_fail(MLAKV_ERR_CUDA, "%s: kernel launch failed: %s", fn, cudaGetErrorString(err));
    return MLAKV_OK;
}

} // namespace

extern "C" mlakv_status mlakv_cuda_gather_bf16(const mlakv_cache *cache, int64_t n,
                                               const int32_t *slots, void *out,
                                               int64_t out_row_stride,
                                               unsigned long long *invalid_count, void *stream) {
    static const char fn[] = "mlakv_cuda_gather_bf16";
    MLAKV_TRY(mlakv_cache_check(fn, cache));
    MLAKV_TRY(mlakv_check_gather_args(fn, n, slots, out_row_stride));
    if (n == 0) return MLAKV_OK;
    int64_t stride = out_row_stride;
    MLAKV_TRY(check_common(fn, cache, out, n, &stride, invalid_count));
    /* the kernel reads the cache and the slots through the read-only path while it writes out
     * and the counter (device pointers, compared as values) */
    MLAKV_TRY(mlakv_check_gather_aliasing(fn, cache, n, slots, out, stride, invalid_count));

    int sm_count = 0;
    MLAKV_TRY(mlakv::cuda::device_ready(fn, &sm_count, NULL));
    const KernelFn k = pick(cache->format, false);
    if (k == nullptr)
        return mlakv_fail(MLAKV_ERR_UNKNOWN_FORMAT, "%s: unknown format %d", fn, (int)cache->format);
    GatherParams p;
    fill_common(p, cache, out, stride, invalid_count);
    p.slots = slots;
    p.n = n;
    /* at most one wave of resident blocks; with more units than warps in a wave, the fewest
     * blocks that need no more passes, so that every warp makes the same number of passes (or
     * one fewer) */
    long long wave = 1;
    MLAKV_TRY(wave_blocks(fn, k, false, cache->format, sm_count, &wave));
    const long long units = (n + kUnit - 1) / kUnit;
    long long nblocks = (units + kWarps - 1) / kWarps;
    if (nblocks > wave) {
        const long long passes = (units + wave * kWarps - 1) / (wave * kWarps);
        nblocks = (units + passes * kWarps - 1) / (passes * kWarps);
    }
    return launch(fn, k, nblocks, p, stream);
}

extern "C" mlakv_status mlakv_cuda_gather_upconvert(const mlakv_cache *cache, int64_t batch,
                                                    const int32_t *block_table,
                                                    int64_t block_table_stride,
                                                    const int32_t *seq_lens,
                                                    const int32_t *workspace_starts,
                                                    const int32_t *seq_starts, void *out,
                                                    int64_t out_rows, int64_t out_row_stride,
                                                    unsigned long long *invalid_count,
                                                    void *stream) {
    static const char fn[] = "mlakv_cuda_gather_upconvert";
    MLAKV_TRY(mlakv_cache_check(fn, cache));
    MLAKV_TRY(mlakv_check_upconvert_args(fn, batch, block_table, block_table_stride, seq_lens,
                                         workspace_starts, seq_starts, out_rows, out_row_stride));
    if (batch == 0) return MLAKV_OK;
    int64_t stride = out_row_stride;
    MLAKV_TRY(check_common(fn, cache, out, out_rows, &stride, invalid_count));
    MLAKV_TRY(mlakv_check_upconvert_aliasing(fn, cache, batch, block_table, block_table_stride,
                                             seq_lens, workspace_starts, seq_starts, out,
                                             out_rows, stride, invalid_count));

    int sm_count = 0;
    MLAKV_TRY(mlakv::cuda::device_ready(fn, &sm_count, NULL));
    const KernelFn k = pick(cache->format, true);
    if (k == nullptr)
        return mlakv_fail(MLAKV_ERR_UNKNOWN_FORMAT, "%s: unknown format %d", fn, (int)cache->format);
    GatherParams p;
    fill_common(p, cache, out, stride, invalid_count);
    p.table = block_table;
    p.lens = seq_lens;
    p.ws = workspace_starts;
    p.starts = seq_starts;
    p.bts = block_table_stride;
    p.batch = batch;
    p.out_rows = out_rows;
    /* positions are < 2^32 (int32 start + int32 length): saturate the limit there */
    p.pos_limit = block_table_stride > (1ll << 33) / cache->block_size
                      ? (1ll << 33)
                      : block_table_stride * cache->block_size;
    /* the row lengths live on the device: one wave of resident blocks */
    long long wave = 1;
    MLAKV_TRY(wave_blocks(fn, k, true, cache->format, sm_count, &wave));
    return launch(fn, k, wave, p, stream);
}
