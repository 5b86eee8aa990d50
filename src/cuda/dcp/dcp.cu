/* Decode context parallelism on GPUs: the mapping of global top-k positions to a rank's local
 * slots, the merge of the ranks' partial outputs, and the NCCL exchange that feeds it. No
 * allocation, no host synchronization: capturable in a CUDA graph (NCCL collectives are). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#if defined(MLAKV_HAVE_NCCL_H)
#include <dlfcn.h>
#include <nccl.h>
#endif

extern "C" {
#include "cache/cache.h"
#include "core/validate.h"
#include "dcp/dcp.h"
}
#include "cuda/common/status.cuh"
#include "mlakv.h"

namespace {

constexpr int kMapThreads = 256;

constexpr int kMapBatch = 8; /* chunks whose loads are issued before their compaction */

/* One CTA per query row (grid-stride): each 256-position chunk maps its positions, a block-wide
 * prefix count over the ballots places the local slots in order at the row's front. The loads
 * of kMapBatch chunks (positions, then their block-table entries) are issued together before
 * the chunks are compacted one after another: a 2048-position row costs two memory round trips
 * instead of sixteen (10 us per call before, whatever the batch). */
__global__ void __launch_bounds__(kMapThreads)
local_indices_kernel(const int32_t *__restrict__ positions, int64_t ps_b, int64_t ps_t,
                     const int32_t *__restrict__ block_table, int64_t bt_stride, int rank,
                     int world, int64_t block_size, int64_t num_blocks, int batch, int s_q,
                     int topk, int32_t *__restrict__ out, int32_t *__restrict__ lengths,
                     unsigned long long *__restrict__ invalid_count) {
    __shared__ int warp_tot[kMapThreads / 32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    unsigned int bad = 0;
    for (int64_t r = blockIdx.x; r < (int64_t)batch * s_q; r += gridDim.x) {
        const int b = (int)(r / s_q), t = (int)(r % s_q);
        const int32_t *row = positions + b * ps_b + t * ps_t;
        const int32_t *bt = block_table + b * bt_stride;
        int32_t *dst = out + r * topk;
        int base = 0;
        for (int g0 = 0; g0 < topk; g0 += kMapThreads * kMapBatch) {
            int32_t pos[kMapBatch];
            int64_t slot[kMapBatch];
#pragma unroll
            for (int j = 0; j < kMapBatch; j++) {
                const int k = g0 + j * kMapThreads + threadIdx.x;
                pos[j] = k < topk ? __ldg(row + k) : -1;
            }
#pragma unroll
            for (int j = 0; j < kMapBatch; j++) {
                slot[j] = -1;
                const int32_t p = pos[j];
                if (p >= 0 && p % world == rank) {
                    const int64_t lp = p / world, blk = lp / block_size;
                    const int32_t id = blk < bt_stride ? __ldg(bt + blk) : -1;
                    if (id >= 0 && id < num_blocks) slot[j] = (int64_t)id * block_size + lp % block_size;
                    else bad++;
                }
            }
#pragma unroll
            for (int j = 0; j < kMapBatch; j++) {
                if (g0 + j * kMapThreads >= topk) break; /* the same for the whole block */
                const unsigned int ball = __ballot_sync(0xffffffffu, slot[j] >= 0);
                if (lane == 0) warp_tot[warp] = __popc(ball);
                __syncthreads();
                int before = 0, total = 0;
#pragma unroll
                for (int w = 0; w < kMapThreads / 32; w++) {
                    before += w < warp ? warp_tot[w] : 0;
                    total += warp_tot[w];
                }
                if (slot[j] >= 0)
                    dst[base + before + __popc(ball & ((1u << lane) - 1u))] = (int32_t)slot[j];
                base += total;
                __syncthreads(); /* warp_tot is rewritten by the next chunk */
            }
        }
        for (int k = base + threadIdx.x; k < topk; k += kMapThreads) dst[k] = -1;
        if (lengths && threadIdx.x == 0) atomicMax(lengths + b, base);
    }
    const unsigned int warp_bad = __reduce_add_sync(0xffffffffu, bad);
    if (invalid_count && lane == 0 && warp_bad) atomicAdd(invalid_count, (unsigned long long)warp_bad);
}

template <typename T> __device__ __forceinline__ float to_f(T v);
template <> __device__ __forceinline__ float to_f<float>(float v) { return v; }
template <> __device__ __forceinline__ float to_f<__nv_bfloat16>(__nv_bfloat16 v) {
    return __bfloat162float(v);
}
template <typename T> __device__ __forceinline__ T from_f(float v);
template <> __device__ __forceinline__ float from_f<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}

constexpr int kMergeThreads = 256;
constexpr int kMaxParts = 64; /* ranks or splits per merge */
static_assert(kMaxParts <= 64, "the merge keeps two parts' weights per lane");

/* 8 bf16 (one 16-byte load) -> fp32 */
__device__ __forceinline__ void bf16x8_to_f32(const uint4 &v, float (&f)[8]) {
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int k = 0; k < 4; k++) {
        f[2 * k] = __uint_as_float(w[k] << 16);
        f[2 * k + 1] = __uint_as_float(w[k] & 0xFFFF0000u);
    }
}

template <typename TO> __device__ __forceinline__ void store8(TO *p, const float (&f)[8]);
template <> __device__ __forceinline__ void store8<float>(float *p, const float (&f)[8]) {
    reinterpret_cast<float4 *>(p)[0] = make_float4(f[0], f[1], f[2], f[3]);
    reinterpret_cast<float4 *>(p)[1] = make_float4(f[4], f[5], f[6], f[7]);
}
template <> __device__ __forceinline__ void store8<__nv_bfloat16>(__nv_bfloat16 *p, const float (&f)[8]) {
    uint32_t w[4];
#pragma unroll
    for (int k = 0; k < 4; k++)
        w[k] = (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(f[2 * k])) |
               (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(f[2 * k + 1])) << 16;
    *reinterpret_cast<uint4 *>(p) = make_uint4(w[0], w[1], w[2], w[3]);
}

constexpr int kMergeBatch = 4; /* parts whose loads are in flight together */

/* One warp per row: the parts' weights exp(lse_i - M) once per row (lane l holds those of parts
 * l and l + 32; kMaxParts = 64), then the weighted sum of the rows, lanes across dim, each
 * weight passed round by a shuffle and the loads of kMergeBatch parts issued before their sums.
 * Sums in part order, as the CPU's mlakv_merge_partials. kVec (bf16 parts, dim a multiple of
 * 256, 16-byte aligned parts and out): a lane takes 8 consecutive dims per 16-byte load; else
 * one dim per lane and load. */
template <typename TP, typename TO, bool kVec>
__global__ void __launch_bounds__(kMergeThreads)
merge_kernel(int n_parts, int64_t rows, int64_t dim, int64_t heads, const TP *__restrict__ parts,
             const float *__restrict__ lse_parts, const float *__restrict__ sink,
             TO *__restrict__ out, float *__restrict__ lse) {
    constexpr unsigned kFull = 0xFFFFFFFFu;
    constexpr int kPer = kVec ? 8 : 1; /* dims per lane and pass */
    const int lane = threadIdx.x & 31;
    const int64_t warps = (int64_t)gridDim.x * (kMergeThreads / 32);
    for (int64_t r = (int64_t)blockIdx.x * (kMergeThreads / 32) + (threadIdx.x >> 5); r < rows;
         r += warps) {
        const float la = lane < n_parts ? __ldg(lse_parts + (int64_t)lane * rows + r) : -INFINITY;
        const float lb =
            lane + 32 < n_parts ? __ldg(lse_parts + (int64_t)(lane + 32) * rows + r) : -INFINITY;
        float m = fmaxf(la, lb);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(kFull, m, o));
        const float sk = sink ? __ldg(sink + r % heads) : -INFINITY;
        const float M = fmaxf(m, sk);
        if (M == -INFINITY) { /* no candidate anywhere, no sink */
            for (int64_t d = lane; d < dim; d += 32) out[r * dim + d] = from_f<TO>(0.0f);
            if (lse && lane == 0) lse[r] = -INFINITY;
            continue;
        }
        /* parts with lse -inf hold no candidate: left out of the sums, not weighted by 0 */
        const unsigned valid_a = __ballot_sync(kFull, la != -INFINITY);
        const unsigned valid_b = __ballot_sync(kFull, lb != -INFINITY);
        const float wa = la == -INFINITY ? 0.0f : expf(la - M);
        const float wb = lb == -INFINITY ? 0.0f : expf(lb - M);
        auto weight = [&](int i) { return __shfl_sync(kFull, i < 32 ? wa : wb, i & 31); };
        auto valid = [&](int i) {
            return i < n_parts && (((i < 32 ? valid_a : valid_b) >> (i & 31)) & 1u);
        };
        float den = sink ? expf(sk - M) : 0.0f;
        for (int i = 0; i < n_parts; i++) den += weight(i); /* 0 for the invalid ones */
        const float inv = 1.0f / den;
        /* every lane runs every pass (the shuffles); dims past the end load and write nothing */
        for (int64_t d0 = 0; d0 < dim; d0 += 32 * kPer) {
            const int64_t d = d0 + (int64_t)lane * kPer;
            const bool here = d < dim;
            float acc[kPer];
#pragma unroll
            for (int k = 0; k < kPer; k++) acc[k] = 0.0f;
            for (int i0 = 0; i0 < n_parts; i0 += kMergeBatch) {
                float v[kMergeBatch][kPer];
#pragma unroll
                for (int j = 0; j < kMergeBatch; j++) {
                    const int i = i0 + j;
                    const bool use = here && valid(i);
                    const TP *src = parts + ((int64_t)i * rows + r) * dim + d;
                    if constexpr (kVec) {
                        const uint4 raw = use ? __ldg(reinterpret_cast<const uint4 *>(src))
                                              : make_uint4(0u, 0u, 0u, 0u);
                        bf16x8_to_f32(raw, v[j]);
                    } else {
                        v[j][0] = use ? to_f<TP>(src[0]) : 0.0f;
                    }
                }
#pragma unroll
                for (int j = 0; j < kMergeBatch; j++) {
                    const int i = i0 + j;
                    const float w = weight(i);
                    if (here && valid(i))
#pragma unroll
                        for (int k = 0; k < kPer; k++) acc[k] += w * v[j][k];
                }
            }
            if (!here) continue;
            if constexpr (kVec) {
#pragma unroll
                for (int k = 0; k < kPer; k++) acc[k] *= inv;
                store8<TO>(out + r * dim + d, acc);
            } else {
                out[r * dim + d] = from_f<TO>(acc[0] * inv);
            }
        }
        if (lse && lane == 0) lse[r] = M + logf(den);
    }
}

/* CTAs for `units` work items at per_block a CTA, at most 8 waves of the device's sms */
int grid_for(int64_t units, int per_block, int sms) {
    const int64_t want = (units + per_block - 1) / per_block, cap = (int64_t)sms * 8;
    return (int)(want < 1 ? 1 : want < cap ? want : cap);
}

mlakv_status merge(const char *fn, int sms, int64_t n_parts, int64_t rows, int64_t dim,
                   int64_t heads, const void *parts, mlakv_dtype pd, const float *lse_parts, const float *sink,
                   void *out, mlakv_dtype od, float *lse, cudaStream_t s) {
    const int grid = grid_for(rows, kMergeThreads / 32, sms);
    const int n = (int)n_parts;
    /* the 16-byte path: bf16 parts, whole 256-dim passes, aligned rows */
    const bool vec = pd == MLAKV_BF16 && dim % 256 == 0 && ((uintptr_t)parts & 15) == 0 &&
                     ((uintptr_t)out & 15) == 0;
#define MLAKV_MERGE(TP, TO, V)                                                                   \
    merge_kernel<TP, TO, V><<<grid, kMergeThreads, 0, s>>>(n, rows, dim, heads,                  \
                                                           (const TP *)parts, lse_parts, sink,   \
                                                           (TO *)out, lse)
    if (vec && od == MLAKV_BF16) MLAKV_MERGE(__nv_bfloat16, __nv_bfloat16, true);
    else if (vec) MLAKV_MERGE(__nv_bfloat16, float, true);
    else if (pd == MLAKV_BF16 && od == MLAKV_BF16) MLAKV_MERGE(__nv_bfloat16, __nv_bfloat16, false);
    else if (pd == MLAKV_BF16) MLAKV_MERGE(__nv_bfloat16, float, false);
    else if (od == MLAKV_BF16) MLAKV_MERGE(float, __nv_bfloat16, false);
    else MLAKV_MERGE(float, float, false);
#undef MLAKV_MERGE
    MLAKV_CUDA_TRY(fn, cudaGetLastError());
    return MLAKV_OK;
}

mlakv_status check_merge(const char *fn, int64_t n_parts, int64_t rows, int64_t dim,
                         int64_t heads, const void *parts, mlakv_dtype pd, const float *lse_parts,
                         const float *sink, const void *out, mlakv_dtype od, const float *lse) {
    if (n_parts < 1 || n_parts > kMaxParts || rows < 1 || dim < 1 || heads < 1)
        return mlakv_fail(MLAKV_ERR_GEOMETRY,
                          "%s: need 1 <= n_parts <= %d, rows, dim, heads >= 1 (got %lld, %lld, "
                          "%lld, %lld)", fn, kMaxParts, (long long)n_parts, (long long)rows,
                          (long long)dim, (long long)heads);
    if (rows % heads != 0)
        return mlakv_fail(MLAKV_ERR_GEOMETRY, "%s: rows %lld is not a multiple of heads %lld", fn,
                          (long long)rows, (long long)heads);
    if ((pd != MLAKV_BF16 && pd != MLAKV_F32) || (od != MLAKV_BF16 && od != MLAKV_F32))
        return mlakv_fail(MLAKV_ERR_DTYPE, "%s: parts and out must be BF16 or F32", fn);
    if (rows > INT64_MAX / dim || rows * dim > INT64_MAX / n_parts / 4)
        return mlakv_fail(MLAKV_ERR_OVERFLOW, "%s: n_parts * rows * dim too large", fn);
    MLAKV_CHECK_NOT_NULL(fn, parts);
    MLAKV_CHECK_NOT_NULL(fn, lse_parts);
    MLAKV_CHECK_NOT_NULL(fn, out);
    const size_t pe = mlakv_dtype_bytes(pd), oe = mlakv_dtype_bytes(od);
    if ((uintptr_t)parts % pe || (uintptr_t)out % oe || (uintptr_t)lse_parts % 4 ||
        (uintptr_t)sink % 4 || (uintptr_t)lse % 4)
        return mlakv_fail(MLAKV_ERR_ALIGNMENT, "%s: a buffer is not aligned to its element size", fn);
    const uint64_t rd = (uint64_t)rows * (uint64_t)dim;
    const mlakv_span ins[3] = {
        mlakv_span_of("out_parts", parts, (uint64_t)n_parts * rd * pe),
        mlakv_span_of("lse_parts", lse_parts, (uint64_t)n_parts * (uint64_t)rows * 4),
        mlakv_span_of("sink", sink, (uint64_t)heads * 4),
    };
    const mlakv_span outs[2] = {
        mlakv_span_of("out", out, rd * oe),
        mlakv_span_of("lse", lse, (uint64_t)rows * 4),
    };
    return mlakv_check_overlap(fn, outs, 2, ins, 3);
}

size_t dcp_lse_offset(int world, int64_t rows) {
    const size_t o = (size_t)world * (size_t)rows * MLAKV_V_DIM * 2;
    return (o + 15) & ~(size_t)15;
}

} // namespace

extern "C" mlakv_status mlakv_cuda_dcp_local_indices(
    const mlakv_cache *local_cache, int rank, int world, int64_t batch, int64_t s_q, int64_t topk,
    const int32_t *positions, int64_t positions_stride_batch, int64_t positions_stride_token,
    const int32_t *block_table, int64_t block_table_stride, int32_t *local_indices,
    int32_t *lengths, unsigned long long *invalid_count, void *stream) {
    static const char fn[] = "mlakv_cuda_dcp_local_indices";
    MLAKV_TRY(mlakv_dcp_check(fn, local_cache, rank, world, batch, s_q, topk, positions,
                              positions_stride_batch, positions_stride_token, block_table,
                              block_table_stride, local_indices, lengths, invalid_count));
    int sms = 0;
    MLAKV_TRY(mlakv::cuda::device_ready(fn, &sms, NULL));
    cudaStream_t s = (cudaStream_t)stream;
    if (lengths) MLAKV_CUDA_TRY(fn, cudaMemsetAsync(lengths, 0, (size_t)batch * 4, s));
    const int grid = grid_for(batch * s_q, 1, sms);
    local_indices_kernel<<<grid, kMapThreads, 0, s>>>(
        positions, positions_stride_batch, positions_stride_token, block_table, block_table_stride,
        rank, world, local_cache->block_size, local_cache->num_blocks, (int)batch, (int)s_q,
        (int)topk, local_indices, lengths, invalid_count);
    MLAKV_CUDA_TRY(fn, cudaGetLastError());
    return MLAKV_OK;
}

extern "C" mlakv_status mlakv_cuda_merge_partials(int64_t n_parts, int64_t rows, int64_t dim,
                                                  int64_t heads, const void *out_parts,
                                                  mlakv_dtype parts_dtype, const float *lse_parts,
                                                  const float *sink, void *out,
                                                  mlakv_dtype out_dtype, float *lse, void *stream) {
    static const char fn[] = "mlakv_cuda_merge_partials";
    MLAKV_TRY(check_merge(fn, n_parts, rows, dim, heads, out_parts, parts_dtype, lse_parts, sink,
                          out, out_dtype, lse));
    int sms = 0;
    MLAKV_TRY(mlakv::cuda::device_ready(fn, &sms, NULL));
    return merge(fn, sms, n_parts, rows, dim, heads, out_parts, parts_dtype, lse_parts, sink, out,
                 out_dtype, lse, (cudaStream_t)stream);
}

extern "C" mlakv_status mlakv_cuda_dcp_workspace_size(int world, int64_t rows, size_t *bytes) {
    static const char fn[] = "mlakv_cuda_dcp_workspace_size";
    MLAKV_CHECK_NOT_NULL(fn, bytes);
    if (world < 1 || world > kMaxParts || rows < 1)
        return mlakv_fail(MLAKV_ERR_GEOMETRY, "%s: need 1 <= world <= %d and rows >= 1", fn,
                          kMaxParts);
    if ((uint64_t)rows > (SIZE_MAX / 2) / ((size_t)world * (MLAKV_V_DIM * 2 + 4) + 16))
        return mlakv_fail(MLAKV_ERR_OVERFLOW, "%s: workspace size overflows", fn);
    *bytes = dcp_lse_offset(world, rows) + (size_t)world * (size_t)rows * 4;
    return MLAKV_OK;
}

#if defined(MLAKV_HAVE_NCCL_H)
namespace {
/* NCCL is resolved at run time, so the library loads (and everything else works) on machines
 * without it; RTLD_NOLOAD first picks the NCCL the process already uses (e.g. torch's). */
struct nccl_api {
    ncclResult_t (*all_gather)(const void *, void *, size_t, ncclDataType_t, ncclComm_t,
                               cudaStream_t);
    ncclResult_t (*group_start)(void);
    ncclResult_t (*group_end)(void);
    ncclResult_t (*comm_count)(const ncclComm_t, int *);
    const char *(*error_string)(ncclResult_t);
};

const nccl_api *load_nccl(void) {
    static nccl_api api;
    static int state; /* 0 unknown, 1 loaded, -1 missing (benign race: same result each time) */
    if (state == 1) return &api;
    if (state == -1) return NULL;
    void *h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_NOLOAD);
    if (!h) h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!h) h = dlopen("libnccl.so", RTLD_NOW | RTLD_LOCAL);
    nccl_api a;
    if (h) {
        *(void **)&a.all_gather = dlsym(h, "ncclAllGather");
        *(void **)&a.group_start = dlsym(h, "ncclGroupStart");
        *(void **)&a.group_end = dlsym(h, "ncclGroupEnd");
        *(void **)&a.comm_count = dlsym(h, "ncclCommCount");
        *(void **)&a.error_string = dlsym(h, "ncclGetErrorString");
    }
    if (!h || !a.all_gather || !a.group_start || !a.group_end || !a.comm_count || !a.error_string) {
        state = -1;
        return NULL;
    }
    api = a;
    state = 1;
    return &api;
}
} // namespace
#endif

extern "C" mlakv_status mlakv_cuda_dcp_combine(void *nccl_comm, int world, int64_t rows,
                                               int64_t heads, const void *local_out,
                                               const float *local_lse, const float *sink,
                                               void *out, float *lse, void *workspace,
                                               size_t workspace_bytes, void *stream) {
    static const char fn[] = "mlakv_cuda_dcp_combine";
    MLAKV_CHECK_NOT_NULL(fn, nccl_comm);
    MLAKV_CHECK_NOT_NULL(fn, local_out);
    MLAKV_CHECK_NOT_NULL(fn, local_lse);
    MLAKV_CHECK_NOT_NULL(fn, workspace);
    size_t need = 0;
    MLAKV_TRY(mlakv_cuda_dcp_workspace_size(world, rows, &need));
    if (workspace_bytes < need)
        return mlakv_fail(MLAKV_ERR_BUFFER_TOO_SMALL, "%s: workspace_bytes %zu < %zu needed", fn,
                          workspace_bytes, need);
    if ((uintptr_t)workspace % 16 || (uintptr_t)local_out % 2 || (uintptr_t)local_lse % 4)
        return mlakv_fail(MLAKV_ERR_ALIGNMENT, "%s: workspace must be 16-byte aligned", fn);
    uint8_t *ws = (uint8_t *)workspace;
    float *lse_parts = (float *)(ws + dcp_lse_offset(world, rows));
    /* the merge's own checks (shapes, out/lse against the gathered parts and the sink), and the
     * local buffers against the workspace they are gathered into */
    MLAKV_TRY(check_merge(fn, world, rows, MLAKV_V_DIM, heads, ws, MLAKV_BF16, lse_parts, sink,
                          out, MLAKV_BF16, lse));
    /* out and lse may be the local buffers (the gather reads them before the merge writes) */
    const mlakv_span locals[2] = {
        mlakv_span_of("local_out", local_out, (uint64_t)rows * MLAKV_V_DIM * 2),
        mlakv_span_of("local_lse", local_lse, (uint64_t)rows * 4),
    };
    const mlakv_span gathered = mlakv_span_of("workspace", workspace, need);
    MLAKV_TRY(mlakv_check_overlap(fn, &gathered, 1, locals, 2));
#if defined(MLAKV_HAVE_NCCL_H)
    int sms = 0;
    MLAKV_TRY(mlakv::cuda::device_ready(fn, &sms, NULL));
    const nccl_api *nc = load_nccl();
    if (!nc)
        return mlakv_fail(MLAKV_ERR_NO_CUDA, "%s: NCCL (libnccl.so.2) could not be loaded", fn);
    int count = 0;
    ncclResult_t r = nc->comm_count((ncclComm_t)nccl_comm, &count);
    if (r != ncclSuccess)
        return mlakv_fail(MLAKV_ERR_CUDA, "%s: ncclCommCount failed: %s", fn, nc->error_string(r));
    if (count != world)
        return mlakv_fail(MLAKV_ERR_INVALID_ARGUMENT, "%s: world %d but the communicator has %d ranks",
                          fn, world, count);
    cudaStream_t s = (cudaStream_t)stream;
    const size_t n_out = (size_t)rows * MLAKV_V_DIM;
    if ((r = nc->group_start()) != ncclSuccess)
        return mlakv_fail(MLAKV_ERR_CUDA, "%s: ncclGroupStart failed: %s", fn, nc->error_string(r));
    ncclResult_t r1 = nc->all_gather(local_out, ws, n_out, ncclBfloat16, (ncclComm_t)nccl_comm, s);
    ncclResult_t r2 = nc->all_gather(local_lse, lse_parts, (size_t)rows, ncclFloat32,
                                     (ncclComm_t)nccl_comm, s);
    r = nc->group_end();
    if (r1 != ncclSuccess || r2 != ncclSuccess || r != ncclSuccess)
        return mlakv_fail(MLAKV_ERR_CUDA, "%s: NCCL all-gather failed: %s", fn,
                          nc->error_string(r1 != ncclSuccess ? r1 : r2 != ncclSuccess ? r2 : r));
    return merge(fn, sms, world, rows, MLAKV_V_DIM, heads, ws, MLAKV_BF16, lse_parts, sink, out,
                 MLAKV_BF16, lse, s);
#else
    (void)sink, (void)out, (void)lse, (void)stream, (void)lse_parts;
    return mlakv_fail(MLAKV_ERR_NO_CUDA, "%s: this build has no NCCL support (nccl.h not found)", fn);
#endif
}
