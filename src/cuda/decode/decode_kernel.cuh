/* Kernel body of the sparse MLA decode (included by one small .cu per record format).
 *
 * One CTA computes one query row (b, t), HG*16 heads (rows past `heads` are padding: zero
 * queries, never written) and one split of the candidate list. Per tile of NK candidates:
 *   1. the records of the tile (fetched earlier with cp.async, ST stages deep) are de-quantized
 *      from shared memory into a bf16 K tile [NK][576] (zero rows for invalid candidates);
 *      E2M1 -> bf16 in software with byte permutes (no lookup-table loads), times the E4M3
 *      group scale as a bf16x2 multiply (exact: <= 6 significant bits);
 *   2. S = Q K^T with mma.sync m16n8k16 (bf16 -> fp32), the 36 k-steps split over the warps
 *      (KS = 8/HG warps per head group), partial sums reduced through shared memory;
 *   3. online softmax in fp32 (log2 domain), P rounded to bf16;
 *   4. O += P V with mma.sync, each warp owning 64 of the 512 value dims for all its heads.
 * The same K tile serves every head of the CTA and both products (V = K's first 512 dims).
 * The result is written directly (one split) or as an fp32 partial (O/l, natural-log lse)
 * for the combine kernel. Engine-mode numerics: see src/cpu/attention.c (ENGINE). */
#ifndef MLAKV_CUDA_DECODE_KERNEL_CUH
#define MLAKV_CUDA_DECODE_KERNEL_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>

#include "cuda/decode/common.cuh"
#include "cuda/decode/config.h"
#include "cuda/decode/params.h"

#define MLAKV_LOG2E 1.4426950408889634f
#define MLAKV_LN2 0.6931471805599453f

template <int FMT>
struct mlakv_rec_traits;
template <> struct mlakv_rec_traits<0> { static constexpr int bytes = 656; };
template <> struct mlakv_rec_traits<1> { static constexpr int bytes = 432; };
template <> struct mlakv_rec_traits<2> { static constexpr int bytes = 368; };
template <> struct mlakv_rec_traits<3> { static constexpr int bytes = 368; };

/* ---- PTX helpers ----------------------------------------------------------------------------- */

__device__ __forceinline__ uint32_t mlakv_smem_addr(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void mlakv_ldsm_x4(uint32_t (&r)[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(mlakv_smem_addr(p)));
}

__device__ __forceinline__ void mlakv_ldsm_x4_t(uint32_t (&r)[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(mlakv_smem_addr(p)));
}

__device__ __forceinline__ void mlakv_mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                          uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void mlakv_cp_async16(void *smem, const void *gmem) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(mlakv_smem_addr(smem)),
                 "l"(gmem));
}
__device__ __forceinline__ void mlakv_cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::);
}
/* "memory": shared-memory reads of the landed bytes must not be hoisted above the wait */
template <int N>
__device__ __forceinline__ void mlakv_cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

/* ---- de-quantization ------------------------------------------------------------------------- */

__device__ __forceinline__ uint32_t mlakv_prmt(uint32_t a, uint32_t b, uint32_t s) {
    return __byte_perm(a, b, s);
}

/* bf16 bits of the E2M1 magnitudes {0, .5, 1, 1.5, 2, 3, 4, 6}: low and high bytes, codes 0-3
 * (A) and 4-7 (B), as byte-permute tables */
#define MLAKV_E2M1_LO_A 0xC0800000u
#define MLAKV_E2M1_LO_B 0xC0804000u
#define MLAKV_E2M1_HI_A 0x3F3F3F00u
#define MLAKV_E2M1_HI_B 0x40404040u
/* the high bytes of the magnitudes times 2^120 (the low bytes do not change): paired with a
 * group scale whose E4M3 byte, shifted left by 4, is read as bf16 bits, i.e. the scale times
 * 2^-120 (exact for every byte, E4M3 subnormals becoming bf16 subnormals), so that two integer
 * instructions replace the scale's conversions and the bf16 product stays exact (v5 / s5:
 * config.h's MLAKV_DEC90D_SF_BITS / MLAKV_DEC90S_SF_BITS; test_cuda_decode's sf_bits) */
#define MLAKV_E2M1_HI_A120 0x7B7B7B00u
#define MLAKV_E2M1_HI_B120 0x7C7C7C7Cu

/* 8 E2M1 nibbles (element 2i in the low nibble of byte i) -> 4 bf16x2 (even element low).
 * LO_A / HI_A are parameters so that a caller can keep them in registers (a permute takes one
 * table operand as an immediate, the other from a register). */
__device__ __forceinline__ void mlakv_e2m1x8_to_bf16_t(uint32_t w, uint32_t LO_A, uint32_t HI_A,
                                                       uint32_t (&o)[4],
                                                       const uint32_t HI_B = MLAKV_E2M1_HI_B) {
    const uint32_t LO_B = MLAKV_E2M1_LO_B;
    const uint32_t a = w & 0x77777777u, ah = a >> 16, u = w << 4;
    uint32_t lo0 = mlakv_prmt(LO_A, LO_B, a), hi0 = mlakv_prmt(HI_A, HI_B, a);
    uint32_t lo1 = mlakv_prmt(LO_A, LO_B, ah), hi1 = mlakv_prmt(HI_A, HI_B, ah);
    /* sign of element e in the msb of byte e: even elements from u = w << 4, odd from w */
    hi0 |= mlakv_prmt(u, w, 0x5140) & 0x80808080u;
    hi1 |= mlakv_prmt(u, w, 0x7362) & 0x80808080u;
    o[0] = mlakv_prmt(lo0, hi0, 0x5140);
    o[1] = mlakv_prmt(lo0, hi0, 0x7362);
    o[2] = mlakv_prmt(lo1, hi1, 0x5140);
    o[3] = mlakv_prmt(lo1, hi1, 0x7362);
}
/* LO_A / HI_A as per-lane register values: ptxas otherwise keeps the constants in uniform
 * registers and copies them into vector registers before each permute (~50 instructions per
 * tile and producer in v5 / s5, NOTES D14). z is a run-time zero ptxas cannot fold: the lane id
 * masked by the sign bit of a non-negative value (p.diag, clamped in decode.cu). */
__device__ __forceinline__ void mlakv_e2m1_tables_pinned(int lane, int nonneg, uint32_t &lut_lo,
                                                         uint32_t &lut_hi,
                                                         const uint32_t hi_a = MLAKV_E2M1_HI_A) {
    const uint32_t z = (uint32_t)(lane & 31) & ((uint32_t)nonneg >> 31);
    lut_lo = MLAKV_E2M1_LO_A ^ z;
    lut_hi = hi_a ^ z;
}
__device__ __forceinline__ void mlakv_e2m1x8_to_bf16(uint32_t w, uint32_t (&o)[4]) {
    mlakv_e2m1x8_to_bf16_t(w, MLAKV_E2M1_LO_A, MLAKV_E2M1_HI_A, o);
}

__device__ __forceinline__ float2 mlakv_e4m3x2_to_f32(uint16_t two) {
    __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)two, __NV_E4M3);
    return __half22float2(*reinterpret_cast<__half2 *>(&h));
}

__device__ __forceinline__ uint32_t mlakv_f32x2_to_bf16x2(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}

__device__ __forceinline__ uint32_t mlakv_bmul2(uint32_t a, uint32_t b) {
    __nv_bfloat162 r = __hmul2(*reinterpret_cast<__nv_bfloat162 *>(&a),
                               *reinterpret_cast<__nv_bfloat162 *>(&b));
    return *reinterpret_cast<uint32_t *>(&r);
}

/* 8 E4M3 bytes times an fp32 scale, each rounded to bf16 (fp8 latent, fp8 RoPE). */
__device__ __forceinline__ uint4 mlakv_e4m3x8_scaled(uint2 v, float s) {
    uint4 o;
    float2 f;
    f = mlakv_e4m3x2_to_f32((uint16_t)(v.x & 0xFFFF));
    o.x = mlakv_f32x2_to_bf16x2(f.x * s, f.y * s);
    f = mlakv_e4m3x2_to_f32((uint16_t)(v.x >> 16));
    o.y = mlakv_f32x2_to_bf16x2(f.x * s, f.y * s);
    f = mlakv_e4m3x2_to_f32((uint16_t)(v.y & 0xFFFF));
    o.z = mlakv_f32x2_to_bf16x2(f.x * s, f.y * s);
    f = mlakv_e4m3x2_to_f32((uint16_t)(v.y >> 16));
    o.w = mlakv_f32x2_to_bf16x2(f.x * s, f.y * s);
    return o;
}

/* One 16-value NVFP4 group: words lo / hi of 8 E2M1 nibbles (values 0..7, 8..15) times the
 * group scale as bf16x2 s2 -> two bf16 chunks a, b (pair k = values 2k, 2k + 1), exact (<= 6
 * significant bits). HI_B (with lut_hi) picks the tables: MLAKV_E2M1_HI_* for s2 = the scale,
 * MLAKV_E2M1_HI_*120 for s2 = the scale times 2^-120 (the E4M3 byte << 4 as bf16 bits). */
__device__ __forceinline__ void mlakv_nvfp4_group_s2(uint32_t lo, uint32_t hi, uint32_t s2,
                                                     uint32_t (&a)[4], uint32_t (&b)[4],
                                                     uint32_t lut_lo, uint32_t lut_hi,
                                                     const uint32_t HI_B = MLAKV_E2M1_HI_B) {
    mlakv_e2m1x8_to_bf16_t(lo, lut_lo, lut_hi, a, HI_B);
    mlakv_e2m1x8_to_bf16_t(hi, lut_lo, lut_hi, b, HI_B);
#pragma unroll
    for (int k = 0; k < 4; k++) {
        a[k] = mlakv_bmul2(a[k], s2);
        b[k] = mlakv_bmul2(b[k], s2);
    }
}
/* The same with the group scale sf as fp32 (the E4M3 byte decoded). The two-level record's token
 * scale is not applied here: engine mode multiplies S and P by it (src/cpu/attention.c). */
__device__ __forceinline__ void mlakv_nvfp4_group(uint32_t lo, uint32_t hi, float sf,
                                                  uint32_t (&a)[4], uint32_t (&b)[4],
                                                  uint32_t lut_lo = MLAKV_E2M1_LO_A,
                                                  uint32_t lut_hi = MLAKV_E2M1_HI_A) {
    mlakv_nvfp4_group_s2(lo, hi, mlakv_f32x2_to_bf16x2(sf, sf) /* exact */, a, b, lut_lo, lut_hi);
}

/* De-quantize one record (576 bf16 values, 72 16-byte chunks: store(q, v) puts chunk q = values
 * [8q, 8q + 8) in place) by TPR cooperating threads, this one being `part`: fixed work per
 * thread, one 16-value NVFP4 group (one scale) per step, 8-byte nibble loads, unrolled so that
 * the groups are independent instruction streams. SEL2 only orders the code (both chunks of a
 * group selected before the stores, or each before its store): each kernel keeps the order its
 * register allocation was measured with. ZS (NVFP4 records): an invalid record is zeroed through
 * its group scale instead of selecting every output word: the decoded E2M1
 * values are finite, so the products are +-0, which add nothing to S (masked anyway) or P V. */
template <int FMT, int TPR, bool SEL2 = true, bool ZS = false, class Store>
__device__ __forceinline__ void mlakv_dequant_record(const uint8_t *r, bool ok, int part,
                                                     Store store) {
    const uint4 z = make_uint4(0, 0, 0, 0);
    if (FMT == 0) { /* fp8_ds_mla: 64 chunks of 8 E4M3 values, fp32 tile scales */
#pragma unroll
        for (int i = 0; i < 64 / TPR; i++) {
            const int q = part + TPR * i;
            uint4 o = z;
            if (ok) o = mlakv_e4m3x8_scaled(*reinterpret_cast<const uint2 *>(r + 8 * q),
                                            *reinterpret_cast<const float *>(r + 512 + 4 * (q >> 4)));
            store(q, o);
        }
    } else {
        constexpr int NG = 32 / TPR; /* groups per thread */
        uint2 w[NG];
        uint32_t sb[NG];
        /* all loads first (garbage for an invalid record is computed and discarded) */
#pragma unroll
        for (int i = 0; i < NG; i++) {
            w[i] = *reinterpret_cast<const uint2 *>(r + 8 * (part + TPR * i));
            sb[i] = r[256 + part + TPR * i];
        }
#pragma unroll
        for (int i = 0; i < NG; i++) {
            const int g = part + TPR * i;
            float sf = mlakv_e4m3x2_to_f32((uint16_t)sb[i]).x;
            if (ZS && !ok) sf = 0.0f;
            uint32_t a[4], b[4];
            mlakv_nvfp4_group(w[i].x, w[i].y, sf, a, b);
            if constexpr (ZS) {
                store(2 * g, make_uint4(a[0], a[1], a[2], a[3]));
                store(2 * g + 1, make_uint4(b[0], b[1], b[2], b[3]));
            } else if constexpr (SEL2) {
                const uint4 o0 = ok ? make_uint4(a[0], a[1], a[2], a[3]) : z;
                const uint4 o1 = ok ? make_uint4(b[0], b[1], b[2], b[3]) : z;
                store(2 * g, o0);
                store(2 * g + 1, o1);
            } else {
                store(2 * g, ok ? make_uint4(a[0], a[1], a[2], a[3]) : z);
                store(2 * g + 1, ok ? make_uint4(b[0], b[1], b[2], b[3]) : z);
            }
        }
    }
    /* RoPE: 8 chunks of 8 values */
#pragma unroll
    for (int i = 0; i < (8 + TPR - 1) / TPR; i++) {
        const int q = part + TPR * i;
        if (q < 8) {
            uint4 o = z;
            if (ok) {
                if (FMT == 0) o = *reinterpret_cast<const uint4 *>(r + 528 + 16 * q);
                else if (FMT == 1) o = *reinterpret_cast<const uint4 *>(r + 304 + 16 * q);
                else o = mlakv_e4m3x8_scaled(*reinterpret_cast<const uint2 *>(r + 304 + 8 * q),
                                             *reinterpret_cast<const float *>(r + 288));
            }
            store(64 + q, o);
        }
    }
}

/* ---- gather: candidate indices -> record offsets -> raw records (cp.async) --------------------- */

/* Candidates [cbeg, cend) of this CTA's split (UNIT candidates per tile of the split plan) and
 * their number of NK-candidate tiles. */
template <int UNIT, int NK>
__device__ __forceinline__ void mlakv_dec_split_range(const mlakv_decode_params &p, int b,
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
 * division (D14: fp8_ds_mla 1.6-3.6 %, the 368-B records in v5 1.3-2.3 % faster); !FAST: the
 * division, for the kernel whose schedule measured faster with it. */
template <int REC, bool FAST = true>
__device__ __forceinline__ bool mlakv_dec_rec_offset(const mlakv_decode_params &p, int idx,
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
__device__ __forceinline__ void mlakv_dec_copy_rec(uint8_t *dst, const uint8_t *src, int part) {
    constexpr int R16 = REC / 16;
#pragma unroll
    for (int i = 0; i < (R16 + TPR - 1) / TPR; i++) {
        const int c = part + TPR * i;
        if (c < R16) mlakv_cp_async16(dst + 16 * c, src + 16 * c);
    }
}

/* Q rows of heads [h0, h0 + HP) of query (b, t) by NT threads, 16-byte chunk j of row r to
 * dst(r, j) with cp.async (padding heads: zero rows, plain stores). */
template <int HP, int NT, class Dst>
__device__ __forceinline__ void mlakv_dec_load_q(const mlakv_decode_params &p, int b, int t,
                                                 int h0, int tid, Dst dst) {
    const __nv_bfloat16 *qrow = p.q + (int64_t)b * p.q_sb + (int64_t)t * p.q_st;
    for (int c = tid; c < HP * 72; c += NT) {
        const int r = c / 72, j = c - r * 72;
        if (h0 + r < p.heads)
            mlakv_cp_async16(dst(r, j), qrow + (int64_t)(h0 + r) * p.q_sh + 8 * j);
        else /* padding rows: zero queries */
            *reinterpret_cast<uint4 *>(dst(r, j)) = make_uint4(0, 0, 0, 0);
    }
}

/* The gather pipeline of the mma.sync and sm90 v1 kernels, over the kernel's own variables (NT
 * threads; thread i < NK loads candidate i of a tile): offsets of the tile to issue next (addr),
 * validity flags in a ring of ST + 1 tiles (valid), raw records in ST stages of NK (raw), one
 * cp.async group per tile. */
template <int NK, int ST, int REC, int NT>
struct mlakv_dec_gather {
    const mlakv_decode_params &p;
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
        const bool ok = mlakv_dec_rec_offset<REC>(p, idx, off);
        addr[tid] = off;
        valid[(tile % (ST + 1)) * NK + tid] = ok;
    }
    __device__ __forceinline__ void issue(int tile) const { /* all threads; addr/valid visible */
        if (tile < ntiles) {
            constexpr int TPR = NT / NK; /* threads per record */
            const int key = tid / TPR, part = tid % TPR;
            if (valid[(tile % (ST + 1)) * NK + key])
                mlakv_dec_copy_rec<REC, TPR>(raw + (tile % ST) * NK * REC + key * REC,
                                             p.base + addr[key], part);
        }
        mlakv_cp_async_commit();
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

/* ---- epilogue ---------------------------------------------------------------------------------- */

/* Output scale and natural-log lse of a finished row (running max m, log2 domain; sum l) of head
 * h written directly (one split): the head's sink folded in. */
__device__ __forceinline__ void mlakv_dec_norm_out(const mlakv_decode_params &p, int h, float m,
                                                   float l, float &so, float &lse) {
    if (p.sink) {
        const float s2 = __ldg(p.sink + h) * MLAKV_LOG2E;
        const float M = fmaxf(m, s2);
        const float e = l > 0.0f ? exp2f(m - M) : 0.0f;
        const float L = l * e + exp2f(s2 - M);
        so = e / L;
        lse = (M + log2f(L)) * MLAKV_LN2;
    } else if (l > 0.0f) {
        so = 1.0f / l;
        lse = (m + log2f(l)) * MLAKV_LN2;
    } else {
        so = 0.0f;
        lse = -INFINITY;
    }
}

/* The same for an fp32 split partial (O/l, lse without the sink; merged by the combine kernel). */
__device__ __forceinline__ void mlakv_dec_norm_part(float m, float l, float &so, float &lse) {
    so = l > 0.0f ? 1.0f / l : 0.0f;
    lse = l > 0.0f ? (m + log2f(l)) * MLAKV_LN2 : -INFINITY;
}

/* ---- the kernel -------------------------------------------------------------------------------- */

/* Tile plan of variant V (config.h, MLAKV_DEC_SMALL_*) for HG head groups; variants change
 * only the 1- and 2-head-group kernels (<= 32 heads). MINB: CTAs per SM (launch bounds and the
 * split plan); QREG: Q fragments of the warp's k-slice held in registers across tiles. */
template <int HG, int V>
struct mlakv_dec_tile {
    static constexpr bool SMALL = HG <= 2;
    static constexpr bool NK16 = SMALL && (V == 2 || V == 3);
    static constexpr int NK = NK16 ? 16 : MLAKV_DEC_NK(HG);
    static constexpr int ST = NK16 ? 2 : MLAKV_DEC_STAGES(HG);
    static constexpr int MINB = NK16 ? (HG == 1 ? 3 : 2) : (HG == 1 ? 2 : 1);
    static constexpr bool QREG = SMALL && (V == 1 || V == 3);
    /* k-steps per warp whose Q fragment stays in registers (4 registers each): all of them
     * (5 or 9) at 2 CTAs/SM; fewer where the register budget of more CTAs/SM is tight (nk16q:
     * 80 registers at 3 CTAs/SM for one head group, 128 at 2 for two; no spills) */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
    static constexpr int QN = !QREG ? 0 : !NK16 ? 36 : HG == 1 ? 3 : 2; /* sm_80: 4 spills */
#else
    static constexpr int QN = !QREG ? 0 : !NK16 ? 36 : HG == 1 ? 4 : 2;
#endif
};

template <int FMT, int HG, int V = 0>
struct mlakv_dec_shape {
    static constexpr int NK = mlakv_dec_tile<HG, V>::NK, ST = mlakv_dec_tile<HG, V>::ST;
    static constexpr int MINB = mlakv_dec_tile<HG, V>::MINB;
    static constexpr bool QREG = mlakv_dec_tile<HG, V>::QREG;
    static constexpr int QN = mlakv_dec_tile<HG, V>::QN;
    static constexpr int HP = HG * 16, KS = MLAKV_DEC_WARPS / HG, SPITCH = NK + 8;
    static constexpr int REC = mlakv_rec_traits<FMT>::bytes;
    static constexpr size_t Q_BYTES = (size_t)HP * MLAKV_DEC_KPITCH * 2;
    static constexpr size_t K_BYTES = (size_t)NK * MLAKV_DEC_KPITCH * 2;
    static constexpr size_t S_BYTES = (size_t)KS * HP * SPITCH * 4;
    /* P (bf16) has its own buffer where it fits (saves a barrier per tile); with 4 head groups
     * it reuses the partial-score buffer */
    static constexpr bool SEP_P = HG < 4;
    static constexpr size_t P_BYTES = SEP_P ? (size_t)HP * SPITCH * 2 : 0;
    static constexpr size_t RAW_BYTES = (size_t)ST * NK * REC;
    static constexpr size_t ADDR_BYTES = (size_t)NK * 8;
    static constexpr size_t VALID_BYTES = (size_t)(ST + 1) * NK * 4;
    static constexpr size_t ROW_BYTES = (size_t)3 * HP * 4;
    /* the two-level record: the tile's token scales (engine mode applies them to S and P) */
    static constexpr size_t TS_BYTES = FMT == 3 ? (size_t)NK * 4 : 0;
    static constexpr size_t SMEM = Q_BYTES + K_BYTES + S_BYTES + RAW_BYTES + ADDR_BYTES +
                                   VALID_BYTES + ROW_BYTES + P_BYTES + TS_BYTES;
};

template <int FMT, int HG, int V>
__global__ void __launch_bounds__(MLAKV_DEC_THREADS, mlakv_dec_tile<HG, V>::MINB)
    mlakv_decode_kernel(const mlakv_decode_params p) {
    typedef mlakv_dec_shape<FMT, HG, V> SH;
    constexpr int NK = SH::NK, ST = SH::ST, HP = SH::HP, KS = SH::KS, SPITCH = SH::SPITCH;
    constexpr int REC = SH::REC, KP = MLAKV_DEC_KPITCH;
    constexpr int G = MLAKV_DEC_THREADS / HP, C = NK / G; /* softmax: threads and cols per row */
    constexpr int CV = C >= 2 ? 2 : 1;                    /* columns per vector access */
    static_assert(C >= 1 && C % CV == 0, "softmax columns per thread");

    extern __shared__ __align__(16) uint8_t smem[];
    __nv_bfloat16 *Qs = reinterpret_cast<__nv_bfloat16 *>(smem);
    __nv_bfloat16 *Ks = reinterpret_cast<__nv_bfloat16 *>(smem + SH::Q_BYTES);
    float *Sp = reinterpret_cast<float *>(smem + SH::Q_BYTES + SH::K_BYTES);
    __nv_bfloat16 *Ps = reinterpret_cast<__nv_bfloat16 *>(
        SH::SEP_P ? smem + SH::Q_BYTES + SH::K_BYTES + SH::S_BYTES + SH::RAW_BYTES +
                        SH::ADDR_BYTES + SH::VALID_BYTES + SH::ROW_BYTES
                  : reinterpret_cast<uint8_t *>(Sp));
    uint8_t *raw = smem + SH::Q_BYTES + SH::K_BYTES + SH::S_BYTES;
    int64_t *addr = reinterpret_cast<int64_t *>(raw + SH::RAW_BYTES);
    int *valid = reinterpret_cast<int *>(raw + SH::RAW_BYTES + SH::ADDR_BYTES);
    float *alpha_s = reinterpret_cast<float *>(raw + SH::RAW_BYTES + SH::ADDR_BYTES +
                                               SH::VALID_BYTES);
    float *m_s = alpha_s + HP, *l_s = m_s + HP;
    float *ts_s = reinterpret_cast<float *>(smem + SH::SMEM - SH::TS_BYTES); /* [NK] (FMT 3) */
    (void)ts_s;

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    /* Programmatic dependent launch: wait until the previous kernel in the stream has finished
     * and its memory is visible (it may have produced q or still read the workspace), then let
     * the next one (the combine) be scheduled; it waits for this grid the same way. */
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int bt = blockIdx.x, hb = blockIdx.y, split = blockIdx.z;
    const int b = bt / p.s_q, t = bt - b * p.s_q;
    const int h0 = hb * HP;

    int cbeg, cend, ntiles;
    mlakv_dec_split_range<NK, NK>(p, b, split, cbeg, cend, ntiles);
    const int32_t *idx_row = p.indices + (int64_t)b * p.i_sb + (int64_t)t * p.i_st;

    const mlakv_dec_gather<NK, ST, REC, MLAKV_DEC_THREADS> g = {p, idx_row, cbeg, cend, ntiles,
                                                                tid, raw, addr, valid};

    /* prologue: the first indices, then Q (cp.async, part of the first group), then ST tiles
     * in flight; nothing waits on a global load before all of these are issued */
    int idx_reg = -1, idx_pre[ST];
    g.first_indices(idx_pre);
    mlakv_dec_load_q<HP, MLAKV_DEC_THREADS>(p, b, t, h0, tid,
                                            [&](int r, int j) { return Qs + r * KP + 8 * j; });
    g.fill(idx_pre);
    if (tid < NK) idx_reg = g.load_idx(ST);

    const int srow = tid / G, sq = tid - srow * G;
    float m_run = -INFINITY, l_run = 0.0f;
    float o[HG][8][4];
#pragma unroll
    for (int g = 0; g < HG; g++)
#pragma unroll
        for (int n = 0; n < 8; n++)
#pragma unroll
            for (int i = 0; i < 4; i++) o[g][n][i] = 0.0f;

    const int fg = lane >> 2, fc = lane & 3; /* mma fragment row / column pair */

    /* S warp roles: warp = (head group, k-slice); with QREG the warp's Q fragments (its k-steps
     * kp, kp + KS, ...) are loaded once, after the first group (Q + tile 0) has landed */
    constexpr int NKS = (36 + KS - 1) / KS; /* k-steps per warp (the last may be past 36) */
    constexpr int QN = SH::QN < NKS ? SH::QN : NKS; /* the first QN of them from registers */
    const int s_hg = warp / KS, s_kp = warp - s_hg * KS;
    const __nv_bfloat16 *qa = Qs + (s_hg * 16 + (lane & 15)) * KP + (lane >> 4) * 8;
    uint32_t qf[QN > 0 ? QN : 1][4];
    if constexpr (QN > 0) {
        mlakv_cp_async_wait<ST - 1>();
        __syncthreads();
#pragma unroll
        for (int i = 0; i < QN; i++) {
            const int kk = s_kp + KS * i;
            if (kk < 36) mlakv_ldsm_x4(qf[i], qa + kk * 16);
            else qf[i][0] = qf[i][1] = qf[i][2] = qf[i][3] = 0u;
        }
    } else {
        qf[0][0] = qf[0][1] = qf[0][2] = qf[0][3] = 0u;
    }

    for (int it = 0; it < ntiles; ++it) {
        mlakv_cp_async_wait<ST - 1>();
        __syncthreads(); /* raw tile `it` landed; previous P*V done with Ks and Ps */

        /* 1. de-quantize into Ks */
        {
            constexpr int TPR = MLAKV_DEC_THREADS / NK; /* threads per record */
            const int key = tid / TPR;
            __nv_bfloat16 *krow = Ks + key * KP;
            const uint8_t *rec = raw + (it % ST) * NK * REC + key * REC;
            const bool ok = valid[(it % (ST + 1)) * NK + key] != 0;
            /* the two-level record: K without its token scale, which goes to ts_s (engine mode) */
            mlakv_dequant_record<FMT, TPR>(
                rec, ok, tid % TPR,
                [&](int q, uint4 v) { *reinterpret_cast<uint4 *>(krow + 8 * q) = v; });
            if constexpr (FMT == 3) {
                if (tid % TPR == 0) ts_s[key] = ok ? *reinterpret_cast<const float *>(rec + 292) : 0.0f;
            }
        }
        g.advance(it, idx_reg);
        __syncthreads(); /* Ks ready, raw stage free, next addresses visible */
        g.issue(it + ST);

        /* 2. S partials: warp = (head group, k-slice) */
        {
            const int hg = s_hg, kp = s_kp;
            float s[NK / 8][4];
#pragma unroll
            for (int n = 0; n < NK / 8; n++)
#pragma unroll
                for (int i = 0; i < 4; i++) s[n][i] = 0.0f;
            const __nv_bfloat16 *kb = Ks + ((lane & 7) + ((lane >> 4) << 3)) * KP + ((lane >> 3) & 1) * 8;
            /* the two-level record: the latent k-steps (kk < 32), the columns times their token
             * scale, then the RoPE k-steps (pass 1) */
#pragma unroll
            for (int pass = 0; pass < (FMT == 3 ? 2 : 1); pass++) {
                if (FMT == 3 && pass == 1) {
#pragma unroll
                    for (int n = 0; n < NK / 8; n++) {
                        const float2 f = *reinterpret_cast<const float2 *>(ts_s + n * 8 + 2 * fc);
                        s[n][0] *= f.x;
                        s[n][1] *= f.y;
                        s[n][2] *= f.x;
                        s[n][3] *= f.y;
                    }
                }
#pragma unroll
                for (int i = 0; i < NKS; i++) {
                    const int kk = kp + KS * i;
                    if (FMT == 3 ? (pass == 0 ? kk < 32 : kk >= 32 && kk < 36) : kk < 36) {
                        uint32_t a[4];
                        if (i < QN) {
                            const int iq = i < QN ? i : 0; /* constant after unrolling */
                            a[0] = qf[iq][0], a[1] = qf[iq][1], a[2] = qf[iq][2], a[3] = qf[iq][3];
                        } else {
                            mlakv_ldsm_x4(a, qa + kk * 16);
                        }
#pragma unroll
                        for (int np = 0; np < NK / 16; np++) {
                            uint32_t bb[4];
                            mlakv_ldsm_x4(bb, kb + np * 16 * KP + kk * 16);
                            mlakv_mma(s[2 * np], a, bb[0], bb[1]);
                            mlakv_mma(s[2 * np + 1], a, bb[2], bb[3]);
                        }
                    }
                }
            }
            float *dst = Sp + (kp * HP + hg * 16 + fg) * SPITCH + 2 * fc;
#pragma unroll
            for (int n = 0; n < NK / 8; n++) {
                *reinterpret_cast<float2 *>(dst + n * 8) = make_float2(s[n][0], s[n][1]);
                *reinterpret_cast<float2 *>(dst + 8 * SPITCH + n * 8) = make_float2(s[n][2], s[n][3]);
            }
        }
        __syncthreads();

        /* 3. online softmax: row srow, columns [sq*C, sq*C + C) */
        float pr[C];
        float alpha;
        {
            const int *v = valid + (it % (ST + 1)) * NK;
#pragma unroll
            for (int i = 0; i < C; i++) pr[i] = 0.0f;
#pragma unroll
            for (int k = 0; k < KS; k++) {
                const float *src = Sp + (k * HP + srow) * SPITCH + sq * C;
#pragma unroll
                for (int i = 0; i < C; i += CV) {
                    if constexpr (CV == 2) {
                        float2 x = *reinterpret_cast<const float2 *>(src + i);
                        pr[i] += x.x;
                        pr[i + CV - 1] += x.y;
                    } else {
                        pr[i] += src[i];
                    }
                }
            }
            float mt = -INFINITY;
#pragma unroll
            for (int i = 0; i < C; i++) {
                pr[i] = v[sq * C + i] ? pr[i] * p.sm_scale_log2 : -INFINITY;
                mt = fmaxf(mt, pr[i]);
            }
#pragma unroll
            for (int off = 1; off < G; off <<= 1) mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, off));
            const float m_new = fmaxf(m_run, mt);
            float sum = 0.0f;
            if (m_new == -INFINITY) {
                alpha = 1.0f;
#pragma unroll
                for (int i = 0; i < C; i++) pr[i] = 0.0f;
            } else {
                alpha = exp2f(m_run - m_new);
#pragma unroll
                for (int i = 0; i < C; i++) {
                    pr[i] = exp2f(pr[i] - m_new);
                    sum += pr[i];
                }
            }
#pragma unroll
            for (int off = 1; off < G; off <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
            l_run = l_run * alpha + sum;
            m_run = m_new;
        }
        if (!SH::SEP_P) __syncthreads(); /* partials consumed: Ps may overwrite them */
        {
            __nv_bfloat16 *dst = Ps + srow * SPITCH + sq * C;
            if constexpr (FMT == 3) { /* P V takes p times its column's token scale (l sums p) */
#pragma unroll
                for (int i = 0; i < C; i++) pr[i] *= ts_s[sq * C + i];
            }
#pragma unroll
            for (int i = 0; i < C; i += CV) {
                if constexpr (CV == 2)
                    *reinterpret_cast<uint32_t *>(dst + i) = mlakv_f32x2_to_bf16x2(pr[i], pr[i + CV - 1]);
                else
                    dst[i] = __float2bfloat16_rn(pr[i]); /* the same RN rounding as the pair */
            }
            if (sq == 0) alpha_s[srow] = alpha;
        }
        __syncthreads();

        /* 4. O = O * alpha + P V, warp owns value dims [64 warp, 64 warp + 64) */
        {
            const int d0 = warp * 64;
#pragma unroll
            for (int g = 0; g < HG; g++) {
                const float a0 = alpha_s[g * 16 + fg], a1 = alpha_s[g * 16 + fg + 8];
                if (__all_sync(0xffffffffu, a0 == 1.0f && a1 == 1.0f)) continue; /* max unchanged */
#pragma unroll
                for (int n = 0; n < 8; n++) {
                    o[g][n][0] *= a0;
                    o[g][n][1] *= a0;
                    o[g][n][2] *= a1;
                    o[g][n][3] *= a1;
                }
            }
            const __nv_bfloat16 *pa = Ps + (lane & 15) * SPITCH + (lane >> 4) * 8;
            const __nv_bfloat16 *vb = Ks + ((lane & 7) + ((lane >> 3) & 1) * 8) * KP + d0 + (lane >> 4) * 8;
#pragma unroll
            for (int kk = 0; kk < NK / 16; kk++) {
                uint32_t bb[4][4]; /* V fragments, shared by every head group */
#pragma unroll
                for (int np = 0; np < 4; np++) mlakv_ldsm_x4_t(bb[np], vb + kk * 16 * KP + np * 16);
#pragma unroll
                for (int g = 0; g < HG; g++) {
                    uint32_t a[4];
                    mlakv_ldsm_x4(a, pa + g * 16 * SPITCH + kk * 16);
#pragma unroll
                    for (int np = 0; np < 4; np++) {
                        mlakv_mma(o[g][2 * np], a, bb[np][0], bb[np][1]);
                        mlakv_mma(o[g][2 * np + 1], a, bb[np][2], bb[np][3]);
                    }
                }
            }
        }
    }
    mlakv_cp_async_wait<0>();

    /* finalize */
    if (sq == 0) {
        m_s[srow] = m_run;
        l_s[srow] = l_run;
    }
    __syncthreads();
    const int64_t rows = (int64_t)p.batch * p.s_q;
#pragma unroll
    for (int g = 0; g < HG; g++) {
#pragma unroll
        for (int half = 0; half < 2; half++) {
            const int row = g * 16 + fg + 8 * half, h = h0 + row;
            if (h >= p.heads) continue;
            const float m = m_s[row], l = l_s[row];
            float so, lse;
            if (p.nsplit == 1) {
                mlakv_dec_norm_out(p, h, m, l, so, lse);
                __nv_bfloat16 *orow = p.out + ((int64_t)bt * p.heads + h) * MLAKV_DEC_V + warp * 64 + 2 * fc;
#pragma unroll
                for (int n = 0; n < 8; n++)
                    *reinterpret_cast<uint32_t *>(orow + n * 8) =
                        mlakv_f32x2_to_bf16x2(o[g][n][2 * half] * so, o[g][n][2 * half + 1] * so);
                if (warp == 0 && fc == 0) p.lse[(int64_t)bt * p.heads + h] = lse;
            } else {
                mlakv_dec_norm_part(m, l, so, lse);
                const int64_t prow = ((int64_t)split * rows + bt) * p.heads + h;
                float *orow = p.part_o + prow * MLAKV_DEC_V + warp * 64 + 2 * fc;
#pragma unroll
                for (int n = 0; n < 8; n++)
                    *reinterpret_cast<float2 *>(orow + n * 8) =
                        make_float2(o[g][n][2 * half] * so, o[g][n][2 * half + 1] * so);
                if (warp == 0 && fc == 0) p.part_lse[prow] = lse;
            }
        }
    }
}

/* Launch the kernel for p->head_groups (1, 2 or 4) and, for 1 or 2 head groups, the
 * small-head variant kv (0..3: base, qreg, nk16, nk16q; config.h). The split plan in
 * p (tiles_per_split) must have been made with the same variant's NK (decode.cu). */
template <int FMT, int HGV, int V>
static cudaError_t mlakv_decode_launch_one(const mlakv_decode_params *p, dim3 grid,
                                           cudaStream_t stream) {
    const size_t sm = mlakv_dec_shape<FMT, HGV, V>::SMEM;
    cudaError_t err = cudaFuncSetAttribute(mlakv_decode_kernel<FMT, HGV, V>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm);
    if (err != cudaSuccess) return err;
    return mlakv_launch_pdl(mlakv_decode_kernel<FMT, HGV, V>, grid, dim3(MLAKV_DEC_THREADS), sm,
                            stream, p);
}

template <int FMT, int HGV>
static cudaError_t mlakv_decode_launch_small(const mlakv_decode_params *p, int kv, dim3 grid,
                                             cudaStream_t stream) {
    switch (kv) {
        case 1: return mlakv_decode_launch_one<FMT, HGV, 1>(p, grid, stream);
        case 2: return mlakv_decode_launch_one<FMT, HGV, 2>(p, grid, stream);
        case 3: return mlakv_decode_launch_one<FMT, HGV, 3>(p, grid, stream);
        default: return mlakv_decode_launch_one<FMT, HGV, 0>(p, grid, stream);
    }
}

template <int FMT>
static cudaError_t mlakv_decode_launch(const mlakv_decode_params *p, int kv, cudaStream_t stream) {
    dim3 grid((unsigned)(p->batch * p->s_q), (unsigned)p->head_blocks, (unsigned)p->nsplit);
    switch (p->head_groups) {
        case 1: return mlakv_decode_launch_small<FMT, 1>(p, kv, grid, stream);
        case 2: return mlakv_decode_launch_small<FMT, 2>(p, kv, grid, stream);
        case 4: return mlakv_decode_launch_one<FMT, 4, 0>(p, grid, stream);
        default: return cudaErrorInvalidValue;
    }
}

/* Per-format launchers with the small-head kernel variant (decode_<format>.cu). */
cudaError_t mlakv_decode_launch_var_fp8_ds_mla(const mlakv_decode_params *p, int kv, cudaStream_t s);
cudaError_t mlakv_decode_launch_var_nvfp4_ds_mla(const mlakv_decode_params *p, int kv, cudaStream_t s);
cudaError_t mlakv_decode_launch_var_nvfp4_fp8_rope(const mlakv_decode_params *p, int kv, cudaStream_t s);
cudaError_t mlakv_decode_launch_var_nvfp4_token_scale(const mlakv_decode_params *p, int kv,
                                                      cudaStream_t s);

#endif
