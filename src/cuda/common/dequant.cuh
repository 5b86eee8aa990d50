/* Device codecs of the record formats: E2M1 and E4M3 to bf16 by byte permutes and exact
 * bf16 products, and one whole record to bf16 chunks (the readers' de-quantization). */
#ifndef MLAKV_CUDA_COMMON_DEQUANT_CUH
#define MLAKV_CUDA_COMMON_DEQUANT_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>

#include "cuda/common/record.cuh"

namespace mlakv::cuda {

__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t s) {
    return __byte_perm(a, b, s);
}

/* bf16 bits of the E2M1 magnitudes {0, .5, 1, 1.5, 2, 3, 4, 6}: low and high bytes, codes 0-3
 * (A) and 4-7 (B), as byte-permute tables */
constexpr uint32_t kE2m1LoA = 0xC0800000u;
constexpr uint32_t kE2m1LoB = 0xC0804000u;
constexpr uint32_t kE2m1HiA = 0x3F3F3F00u;
constexpr uint32_t kE2m1HiB = 0x40404040u;
/* the high bytes of the magnitudes times 2^120 (the low bytes do not change): paired with a
 * group scale whose E4M3 byte, shifted left by 4, is read as bf16 bits, i.e. the scale times
 * 2^-120 (exact for every byte, E4M3 subnormals becoming bf16 subnormals), so that two integer
 * instructions replace the scale's conversions and the bf16 product stays exact (the wide-head kernel / the narrow-head kernel:
 * config.h's decode::wide::scale_bits / decode::narrow::scale_bits; test_cuda_decode's sf_bits) */
constexpr uint32_t kE2m1HiA120 = 0x7B7B7B00u;
constexpr uint32_t kE2m1HiB120 = 0x7C7C7C7Cu;

/* 8 E2M1 nibbles (element 2i in the low nibble of byte i) -> 4 bf16x2 (even element low).
 * LO_A / HI_A are parameters so that a caller can keep them in registers (a permute takes one
 * table operand as an immediate, the other from a register). */
__device__ __forceinline__ void e2m1x8_to_bf16_tables(uint32_t w, uint32_t LO_A, uint32_t HI_A,
                                                      uint32_t (&o)[4],
                                                      const uint32_t HI_B = kE2m1HiB) {
    const uint32_t LO_B = kE2m1LoB;
    const uint32_t a = w & 0x77777777u, ah = a >> 16, u = w << 4;
    uint32_t lo0 = prmt(LO_A, LO_B, a), hi0 = prmt(HI_A, HI_B, a);
    uint32_t lo1 = prmt(LO_A, LO_B, ah), hi1 = prmt(HI_A, HI_B, ah);
    /* sign of element e in the msb of byte e: even elements from u = w << 4, odd from w */
    hi0 |= prmt(u, w, 0x5140) & 0x80808080u;
    hi1 |= prmt(u, w, 0x7362) & 0x80808080u;
    o[0] = prmt(lo0, hi0, 0x5140);
    o[1] = prmt(lo0, hi0, 0x7362);
    o[2] = prmt(lo1, hi1, 0x5140);
    o[3] = prmt(lo1, hi1, 0x7362);
}
/* LO_A / HI_A as per-lane register values: ptxas otherwise keeps the constants in uniform
 * registers and copies them into vector registers before each permute (~50 instructions per
 * tile and producer in the wide-head kernel / the narrow-head kernel. z is a run-time zero ptxas cannot fold: the lane id
 * masked by the sign bit of a non-negative value (the launch parameters' opaque_zero). */
__device__ __forceinline__ void e2m1_tables_pinned(int lane, int nonneg, uint32_t &lut_lo,
                                                   uint32_t &lut_hi,
                                                   const uint32_t hi_a = kE2m1HiA) {
    const uint32_t z = (uint32_t)(lane & 31) & ((uint32_t)nonneg >> 31);
    lut_lo = kE2m1LoA ^ z;
    lut_hi = hi_a ^ z;
}
__device__ __forceinline__ void e2m1x8_to_bf16(uint32_t w, uint32_t (&o)[4]) {
    e2m1x8_to_bf16_tables(w, kE2m1LoA, kE2m1HiA, o);
}

__device__ __forceinline__ float2 e4m3x2_to_f32(uint16_t two) {
    __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)two, __NV_E4M3);
    return __half22float2(*reinterpret_cast<__half2 *>(&h));
}

__device__ __forceinline__ uint32_t f32x2_to_bf16x2(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}

__device__ __forceinline__ uint32_t bf16x2_mul(uint32_t a, uint32_t b) {
    __nv_bfloat162 r = __hmul2(*reinterpret_cast<__nv_bfloat162 *>(&a),
                               *reinterpret_cast<__nv_bfloat162 *>(&b));
    return *reinterpret_cast<uint32_t *>(&r);
}

/* 8 E4M3 bytes times an fp32 scale, each rounded to bf16 (fp8 latent, fp8 RoPE). */
__device__ __forceinline__ uint4 e4m3x8_scaled(uint2 v, float s) {
    uint4 o;
    float2 f;
    f = e4m3x2_to_f32((uint16_t)(v.x & 0xFFFF));
    o.x = f32x2_to_bf16x2(f.x * s, f.y * s);
    f = e4m3x2_to_f32((uint16_t)(v.x >> 16));
    o.y = f32x2_to_bf16x2(f.x * s, f.y * s);
    f = e4m3x2_to_f32((uint16_t)(v.y & 0xFFFF));
    o.z = f32x2_to_bf16x2(f.x * s, f.y * s);
    f = e4m3x2_to_f32((uint16_t)(v.y >> 16));
    o.w = f32x2_to_bf16x2(f.x * s, f.y * s);
    return o;
}

/* One 16-value NVFP4 group: words lo / hi of 8 E2M1 nibbles (values 0..7, 8..15) times the
 * group scale as bf16x2 s2 -> two bf16 chunks a, b (pair k = values 2k, 2k + 1), exact (<= 6
 * significant bits). HI_B (with lut_hi) picks the tables: kE2m1Hi* for s2 = the scale,
 * kE2m1Hi*120 for s2 = the scale times 2^-120 (the E4M3 byte << 4 as bf16 bits). */
__device__ __forceinline__ void nvfp4_group_bf16_scale(uint32_t lo, uint32_t hi, uint32_t s2,
                                                       uint32_t (&a)[4], uint32_t (&b)[4],
                                                       uint32_t lut_lo, uint32_t lut_hi,
                                                       const uint32_t HI_B = kE2m1HiB) {
    e2m1x8_to_bf16_tables(lo, lut_lo, lut_hi, a, HI_B);
    e2m1x8_to_bf16_tables(hi, lut_lo, lut_hi, b, HI_B);
#pragma unroll
    for (int k = 0; k < 4; k++) {
        a[k] = bf16x2_mul(a[k], s2);
        b[k] = bf16x2_mul(b[k], s2);
    }
}
/* The same with the group scale sf as fp32 (the E4M3 byte decoded). The two-level record's token
 * scale is not applied here: engine mode multiplies S and P by it (src/cpu/attention.c). */
__device__ __forceinline__ void nvfp4_group(uint32_t lo, uint32_t hi, float sf,
                                            uint32_t (&a)[4], uint32_t (&b)[4],
                                            uint32_t lut_lo = kE2m1LoA,
                                            uint32_t lut_hi = kE2m1HiA) {
    nvfp4_group_bf16_scale(lo, hi, f32x2_to_bf16x2(sf, sf) /* exact */, a, b, lut_lo, lut_hi);
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
__device__ __forceinline__ void dequant_record(const uint8_t *r, bool ok, int part,
                                               Store store) {
    const uint4 z = make_uint4(0, 0, 0, 0);
    if (FMT == 0) { /* fp8_ds_mla: 64 chunks of 8 E4M3 values, fp32 tile scales */
#pragma unroll
        for (int i = 0; i < 64 / TPR; i++) {
            const int q = part + TPR * i;
            uint4 o = z;
            if (ok) o = e4m3x8_scaled(*reinterpret_cast<const uint2 *>(r + 8 * q),
                                      *reinterpret_cast<const float *>(r + RecordTraits<0>::scale_off + 4 * (q >> 4)));
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
            sb[i] = r[RecordTraits<1>::scale_off + part + TPR * i];
        }
#pragma unroll
        for (int i = 0; i < NG; i++) {
            const int g = part + TPR * i;
            float sf = e4m3x2_to_f32((uint16_t)sb[i]).x;
            if (ZS && !ok) sf = 0.0f;
            uint32_t a[4], b[4];
            nvfp4_group(w[i].x, w[i].y, sf, a, b);
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
                if (FMT == 0) o = *reinterpret_cast<const uint4 *>(r + RecordTraits<0>::rope_off + 16 * q);
                else if (FMT == 1) o = *reinterpret_cast<const uint4 *>(r + RecordTraits<1>::rope_off + 16 * q);
                else o = e4m3x8_scaled(*reinterpret_cast<const uint2 *>(r + RecordTraits<2>::rope_off + 8 * q),
                                       *reinterpret_cast<const float *>(r + RecordTraits<2>::rope_scale_off));
            }
            store(64 + q, o);
        }
    }
}

} // namespace mlakv::cuda

#endif
