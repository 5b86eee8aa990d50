/* The record producers of the sm_90a NVFP4 kernels (wide and narrow): one record in the
 * registers of 4 threads, its de-quantization into the swizzled K tile, the FULL / EMPTY
 * handshake with the consumer warpgroup, and register re-allocation by setmaxnreg. */
#ifndef MLAKV_CUDA_DECODE_COMMON_PRODUCER_SM90_CUH
#define MLAKV_CUDA_DECODE_COMMON_PRODUCER_SM90_CUH

#include "cuda/decode/common/handshake.h"
#include "cuda/decode/common/sm90.cuh"

namespace mlakv::decode {

#ifdef MLAKV_SM90A_DEVICE
/* The registers one producer thread holds for one record: nibble chunks 4 part .. 4 part + 3
 * (64 contiguous bytes: groups 8 part .. 8 part + 7), their 8 scale bytes, RoPE chunks (bf16:
 * part and part + 4; fp8: part) and, for the 368-B records, bytes 288..303 (RoPE scale, token
 * scale). */
template <int FMT>
struct HeldRecord {
    uint4 nib[4], rope[FMT == 1 ? 2 : 1], misc;
    uint2 sc; /* scale bytes 8 part .. 8 part + 7 */
    bool ok;
    /* the two-level record's token scale (bytes 292..295, in misc = bytes 288..303); 0 for an
     * invalid record */
    __device__ __forceinline__ float token_scale() const {
        return ok ? __uint_as_float(misc.y) : 0.0f;
    }
};

/* Fill r (all but ok) from the record at offset 0 of ld16 / ld8 (16- and 8-byte loads at a
 * byte offset: global loads in the wide-head kernel, shared-memory loads from the narrow-head kernel's raw stage). */
template <int FMT, class L16, class L8>
__device__ __forceinline__ void fill_record(HeldRecord<FMT> &r, int part, L16 &&ld16,
                                            L8 &&ld8) {
#pragma unroll
    for (int i = 0; i < 4; i++) r.nib[i] = ld16(16 * (4 * part + i));
    r.sc = ld8(RecordTraits<1>::scale_off + 8 * part);
    r.rope[0] = ld16(RecordTraits<1>::rope_off + 16 * part);
    if constexpr (FMT == 1) {
        r.rope[1] = ld16(RecordTraits<1>::rope_off + 16 * (part + 4));
        r.misc = make_uint4(0, 0, 0, 0);
    } else {
        r.misc = ld16(RecordTraits<2>::rope_scale_off);
    }
}

/* this warpgroup's registers after setmaxnreg: up or down from the launch cap CAP (168 for 384
 * threads, 96 for 640) */
template <int N, int CAP = 168>
__device__ __forceinline__ void set_regs() {
    if constexpr (N > CAP) setmaxnreg_inc<N>();
    else setmaxnreg_dec<N>();
}

/* Issue the loads of one record (offset from the candidate's index; an invalid index loads
 * record 0's bytes, which are discarded). */
template <int FMT>
__device__ __forceinline__ void load_record(const Params &p, int idx, int part,
                                            HeldRecord<FMT> &r) {
    constexpr int REC = RecordTraits<FMT>::bytes;
    int64_t off;
    r.ok = record_offset<REC, !(FMT == 1 && kNvfp4DsMlaOffsetDiv)>(p, idx, off);
    const uint8_t *g = p.base + off;
    /* L2 evict-first when no other CTA reads these records (one head block): the kernel's
     * code, Q and the indices stay in L2 (b=128 h=64 -2 %, b=64 h=64 -4.5 %);
     * the two head blocks of a 128-head row read each record twice, the second time from L2,
     * so they keep the normal policy (evict-first measured +1.5 % there). The two-level
     * record keeps plain loads (with the policy: +1-2 %). */
    if constexpr (FMT != 3) {
        const uint64_t pol = p.head_blocks > 1 ? l2_evict_normal() : l2_evict_first();
        fill_record<FMT>(r, part, [&](int o) { return ldg16_pol(g + o, pol); },
                                   [&](int o) { return ldg8_pol(g + o, pol); });
        return;
    }
    fill_record<FMT>(
        r, part, [&](int o) { return __ldg(reinterpret_cast<const uint4 *>(g + o)); },
        [&](int o) { return __ldg(reinterpret_cast<const uint2 *>(g + o)); });
}

/* De-quantize the held record (same values as dequant_record): emit(q, v) receives each
 * 16-byte chunk, q being its place in the row; dequant_store stores them into row `key`
 * of the swizzled K tile kb. Nibble chunk c = 4 part + i holds groups 2c, 2c + 1 (scale
 * halfword i of r.sc), i.e. bf16 chunks 4c .. 4c + 3; an invalid record is zeroed through its
 * scales (finite E2M1 values times 0) and by selecting zero RoPE. Store phases (8 lanes of one
 * part, keys = lane & 7) hit 8 distinct 16-byte bank groups. */
template <int FMT, bool SFB, class Emit>
__device__ __forceinline__ void dequant_emit(
    const HeldRecord<FMT> &r, int part, Emit &&emit, uint32_t lut_lo = kE2m1LoA,
    uint32_t lut_hi = SFB ? kE2m1HiA120 : kE2m1HiA) {
    if constexpr (SFB) {
        /* the scale bytes as bf16 bits: scale byte 2c + g is byte 2 (i & 1) + g of word i >> 1 */
        const uint32_t scx = r.ok ? r.sc.x : 0u, scy = r.ok ? r.sc.y : 0u;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int c = 4 * part + i;
            const uint32_t w4[4] = {r.nib[i].x, r.nib[i].y, r.nib[i].z, r.nib[i].w};
            const uint32_t sw = i < 2 ? scx : scy;
#pragma unroll
            for (int g = 0; g < 2; g++) {
                const uint32_t k = 2 * (i & 1) + g;
                const uint32_t m = __byte_perm(sw, 0u, 0x4040u | (k * 0x0101u)) << 4;
                uint32_t a[4], b[4];
                nvfp4_group_bf16_scale(w4[2 * g], w4[2 * g + 1], m, a, b, lut_lo, lut_hi,
                                       kE2m1HiB120);
                emit(4 * c + 2 * g, make_uint4(a[0], a[1], a[2], a[3]));
                emit(4 * c + 2 * g + 1, make_uint4(b[0], b[1], b[2], b[3]));
            }
        }
    } else {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int c = 4 * part + i;
            /* scale bytes 2c, 2c + 1 = halfword i of the thread's 8 scale bytes */
            float2 sf =
                e4m3x2_to_f32((uint16_t)((i < 2 ? r.sc.x : r.sc.y) >> (16 * (i & 1))));
            if (!r.ok) sf = make_float2(0.0f, 0.0f);
            const uint32_t w4[4] = {r.nib[i].x, r.nib[i].y, r.nib[i].z, r.nib[i].w};
#pragma unroll
            for (int g = 0; g < 2; g++) {
                uint32_t a[4], b[4];
                nvfp4_group(w4[2 * g], w4[2 * g + 1], g ? sf.y : sf.x, a, b, lut_lo, lut_hi);
                emit(4 * c + 2 * g, make_uint4(a[0], a[1], a[2], a[3]));
                emit(4 * c + 2 * g + 1, make_uint4(b[0], b[1], b[2], b[3]));
            }
        }
    }
    const uint4 z = make_uint4(0, 0, 0, 0);
    if (FMT == 1) {
        emit(64 + part, r.ok ? r.rope[0] : z);
        emit(64 + part + 4, r.ok ? r.rope[1] : z);
    } else {
        const float rs = __uint_as_float(r.misc.x); /* RoPE scale: word 0 of misc */
        const uint4 lo = e4m3x8_scaled(make_uint2(r.rope[0].x, r.rope[0].y), rs);
        const uint4 hi = e4m3x8_scaled(make_uint2(r.rope[0].z, r.rope[0].w), rs);
        emit(64 + 2 * part, r.ok ? lo : z);
        emit(64 + 2 * part + 1, r.ok ? hi : z);
    }
}
/* 16-byte chunk q of row `key` of the swizzled K tile kb [NK x 576] */
template <int NK = 64>
__device__ __forceinline__ uint32_t k_chunk_off(int key, int q) {
    return (q >> 3) * (NK * 128) + sw128(key, q & 7);
}
template <int FMT, bool SFB>
__device__ __forceinline__ void dequant_store(
    const HeldRecord<FMT> &r, int part, uint8_t *kb, int key,
    uint32_t lut_lo = kE2m1LoA, uint32_t lut_hi = SFB ? kE2m1HiA120 : kE2m1HiA) {
    dequant_emit<FMT, SFB>(
        r, part,
        [&](int q, uint4 v) { *reinterpret_cast<uint4 *>(kb + k_chunk_off(key, q)) = v; },
        lut_lo, lut_hi);
}
#endif /* MLAKV_SM90A_DEVICE */

} // namespace mlakv::decode

#endif
