/* The gather shared by the decode kernels: a split's candidate range, candidate index ->
 * record offset, cp.async copies of records and Q rows, and the cp.async tile pipeline of the
 * mma.sync and fp8 wgmma kernels. */
#ifndef MLAKV_CUDA_DECODE_COMMON_GATHER_CUH
#define MLAKV_CUDA_DECODE_COMMON_GATHER_CUH

#include <stdint.h>

#include "common/divider.h"
#include "cuda/common/ptx.cuh"
#include "cuda/decode/params.h"

namespace mlakv::decode {

using namespace mlakv::cuda; /* PTX wrappers and codecs, called like intrinsics */

/* Candidates [cbeg, cend) of this CTA's split (UNIT candidates per tile of the split plan) and
 * their number of NK-candidate tiles. */
template <int UNIT, int NK>
__device__ __forceinline__ void split_range(const Params &p, int b,
                                            int split, int &cbeg, int &cend,
                                            int &ntiles) {
    int len = p.topk;
    if (p.lengths) len = min(max(__ldg(p.lengths + b), 0), p.topk);
    cbeg = split * p.tiles_per_split * UNIT;
    cend = min(len, cbeg + p.tiles_per_split * UNIT);
    ntiles = cend > cbeg ? (cend - cbeg + NK - 1) / NK : 0;
}

/* Byte offset of record idx in the cache; false (offset 0) for an invalid index. FAST: the block
 * (idx / block_size) by the host's multiplier, ~5 instructions instead of a ~20-instruction
 * division (fp8_ds_mla 1.6-3.6 %, the 368-B records in the wide-head kernel 1.3-2.3 % faster);
 * !FAST: the
 * division, for the kernel whose schedule measured faster with it. */
template <int REC, bool FAST = true>
__device__ __forceinline__ bool record_offset(const Params &p, int idx,
                                              int64_t &off) {
    bool ok = idx >= 0 && (int64_t)idx < p.capacity;
    off = 0;
    if (ok) {
        if constexpr (FAST) { /* blocks above 2^31 - 1: block 0 */
            const uint32_t n = (uint32_t)idx, blk = mlakv_divider_apply(p.blk, n);
            const uint32_t r = n - blk * (uint32_t)p.block_size; /* < block_size */
            off = (int64_t)blk * p.block_stride_bytes + (int64_t)r * REC;
        } else { /* idx < 2^31: a 32-bit division unless the block is larger than that */
            const int64_t blk =
                p.block_size > 0x7FFFFFFF ? 0 : (int64_t)((uint32_t)idx / (uint32_t)p.block_size);
            off = blk * p.block_stride_bytes + ((int64_t)idx - blk * p.block_size) * REC;
        }
    }
    return ok;
}

/* cp.async of one REC-byte record by TPR cooperating threads, this one being `part`. */
template <int REC, int TPR>
__device__ __forceinline__ void copy_record(uint8_t *dst, const uint8_t *src, int part) {
    constexpr int R16 = REC / 16;
#pragma unroll
    for (int i = 0; i < (R16 + TPR - 1) / TPR; i++) {
        const int c = part + TPR * i;
        if (c < R16) cp_async16(dst + 16 * c, src + 16 * c);
    }
}

/* Q rows of heads [h0, h0 + HP) of query (b, t) by NT threads, 16-byte chunk j of row r to
 * dst(r, j) with cp.async (padding heads: zero rows, plain stores). kScaled (a cache with a
 * latent scale, params.h): the RoPE chunks 64..71 go through registers as
 * bf16(q * p.q_rope_scale). Plain stores become visible at the same barrier as the cp.async
 * data. */
template <int HP, int NT, bool kScaled, class Dst>
__device__ __forceinline__ void load_q(const Params &p, int b, int t,
                                       int h0, int tid, Dst dst) {
    const __nv_bfloat16 *qrow = p.q + (int64_t)b * p.q_sb + (int64_t)t * p.q_st;
    if constexpr (!kScaled) {
        for (int c = tid; c < HP * 72; c += NT) {
            const int r = c / 72, j = c - r * 72;
            if (h0 + r < p.heads)
                cp_async16(dst(r, j), qrow + (int64_t)(h0 + r) * p.q_sh + 8 * j);
            else /* padding rows: zero queries */
                *reinterpret_cast<uint4 *>(dst(r, j)) = make_uint4(0, 0, 0, 0);
        }
    } else {
        for (int c = tid; c < HP * 72; c += NT) {
            const int r = c / 72, j = c - r * 72;
            if (h0 + r >= p.heads) { /* padding rows: zero queries */
                *reinterpret_cast<uint4 *>(dst(r, j)) = make_uint4(0, 0, 0, 0);
            } else if (j >= 64) {
                uint4 v = __ldg(reinterpret_cast<const uint4 *>(qrow + (int64_t)(h0 + r) * p.q_sh + 8 * j));
                __nv_bfloat162 *e = reinterpret_cast<__nv_bfloat162 *>(&v);
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    const float2 f = __bfloat1622float2(e[k]);
                    e[k] = __floats2bfloat162_rn(f.x * p.q_rope_scale, f.y * p.q_rope_scale);
                }
                *reinterpret_cast<uint4 *>(dst(r, j)) = v;
            } else {
                cp_async16(dst(r, j), qrow + (int64_t)(h0 + r) * p.q_sh + 8 * j);
            }
        }
    }
}

/* The gather pipeline of the mma.sync and fp8 wgmma kernels, over the kernel's own variables (NT
 * threads; thread i < NK loads candidate i of a tile): offsets of the tile to issue next (addr),
 * validity flags in a ring of ST + 1 tiles (valid), raw records in ST stages of NK (raw), one
 * cp.async group per tile. */
template <int NK, int ST, int REC, int NT>
struct TilePipeline {
    const Params &p;
    const int32_t *const &idx_row;
    const int &cbeg, &cend, &ntiles, &tid;
    uint8_t *const &raw;
    int64_t *const &addr;
    int *const &valid;

    __device__ __forceinline__ int load_idx(int tile) const { /* -1 past the split */
        int pos = cbeg + tile * NK + tid;
        return (tile < ntiles && pos < cend) ? __ldg(idx_row + pos) : -1;
    }
    __device__ __forceinline__ void set_addr(int tile, int idx) const { /* tid < NK */
        int64_t off;
        const bool ok = record_offset<REC>(p, idx, off);
        addr[tid] = off;
        valid[(tile % (ST + 1)) * NK + tid] = ok;
    }
    __device__ __forceinline__ void issue(int tile) const { /* all threads; addr/valid visible */
        if (tile < ntiles) {
            constexpr int TPR = NT / NK; /* threads per record */
            const int key = tid / TPR, part = tid % TPR;
            if (valid[(tile % (ST + 1)) * NK + key])
                copy_record<REC, TPR>(raw + (tile % ST) * NK * REC + key * REC,
                                      p.base + addr[key], part);
        }
        cp_async_commit();
    }
    /* prologue: the indices of the first ST tiles (threads < NK; the others -1) */
    __device__ __forceinline__ void first_indices(int (&idx_pre)[ST]) const {
#pragma unroll
        for (int s = 0; s < ST; s++) idx_pre[s] = tid < NK ? load_idx(s) : -1;
    }
    /* prologue, after the first indices (idx_pre) and Q: ST tiles in flight (the first group
     * also carries Q) */
    __device__ __forceinline__ void fill(const int (&idx_pre)[ST]) const {
#pragma unroll
        for (int s = 0; s < ST; s++) {
            if (tid < NK) set_addr(s, idx_pre[s]);
            __syncthreads();
            issue(s);
            __syncthreads();
        }
    }
    /* tile `it` de-quantized (addr free): offsets of tile it + ST, index of the next */
    __device__ __forceinline__ void advance(int it, int &idx_reg) const {
        if (tid < NK) {
            set_addr(it + ST, idx_reg);
            idx_reg = load_idx(it + ST + 1);
        }
    }
};

} // namespace mlakv::decode

#endif
