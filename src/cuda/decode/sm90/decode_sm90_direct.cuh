/* "v5": warp-specialized wgmma decode with a direct (global -> registers -> bf16 tile) gather,
 * NVFP4 records, 64-record tiles; the default sm90 kernel for those records (dispatch and
 * shared helpers: decode_sm90.cuh). Measurements: bench/NOTES_decode.md, D5-D11.
 *
 * Why: v3 (W4) is bound by shared-memory traffic and latency chains, not by the tensor cores:
 * its S wgmma re-reads Q's 72 KB for every 32-record tile, and its raw cp.async stage is written
 * (with 5x wavefront waste) and read again before the bf16 tile is written. Here:
 *   - warpgroup 0 (producer) loads records 0..31 of each tile straight into registers
 *     (ld.global.nc, 4 threads per record, each 64 contiguous nibble bytes, their 8 scale bytes
 *     and a RoPE share: 7 loads; two tiles in flight), de-quantizes them and stores
 *     bf16 rows of the K tile [64 x 576] (128-byte swizzle, conflict-free 16-byte stores) into
 *     one of two buffers; no raw stage in shared memory;
 *   - warpgroup 1 computes all of S = Q K^T [64 heads x 64 records] (36 wgmma m64n64k16: Q read
 *     once per 64 records), the online softmax (each row's 64 columns live in one thread quad:
 *     no exchange; mlakv_dec90d_softmax), P (bf16) and the rescale factors, then
 *     O[:, 0:256) += P V; it waits for that P V before it takes the next tile, so the buffer goes
 *     back to the producers a whole S + softmax before it is needed again;
 *   - warpgroup 2 waits for P(i) and computes O[:, 256:512) += P V(i); between those steps it
 *     gathers and de-quantizes records 32..63 of tile i + 2 (it would otherwise idle).
 * P(i) is written into the RoPE column block of tile i's K buffer (64 x 128 B, the P tile's
 * shape; dead once S(i) has read it), so P is double-buffered with the K tiles for free.
 * Record loads carry an L2 evict-first policy when no other CTA reads the records (one head
 * block), so the code, Q and indices stay in L2; one-split bf16 outputs leave through shared
 * memory as whole 512-byte row pieces (mlakv_dec90d_store_rows; D11).
 * Shared memory: Q 72 KB + 2 K buffers 144 KB + 2 KB. Registers (setmaxnreg, config.h
 * MLAKV_DEC90D_*): warpgroup 1 needs more than the 168 of the launch cap. Same numerics as
 * v1-v3 (S in fp32 by wgmma, P rounded to bf16, fp32 O) except 2^x by ex2.approx.ftz. */
#ifndef MLAKV_CUDA_DECODE_SM90_DIRECT_CUH
#define MLAKV_CUDA_DECODE_SM90_DIRECT_CUH

template <int FMT>
struct mlakv_dec90d_shape {
    static constexpr int NK = 64, HP = 64, NB = 2;
    static constexpr int REC = mlakv_rec_traits<FMT>::bytes;
    static constexpr size_t Q_BYTES = (size_t)HP * MLAKV_DEC_QK * 2;      /* 72 KB */
    static constexpr size_t KBUF = (size_t)NK * MLAKV_DEC_QK * 2;         /* 72 KB */
    static constexpr size_t SMALL = 128 /* valid-mask words */ + NB * HP * 4 /* alpha */ +
                                    2 * HP * 4 /* red_l */ + HP * 4 /* red_m */ + 3 * 8 /* mbarriers */;
    /* the two-level record, its token scale applied to S and P (engine mode): one fp32 per
     * record of each buffer, after the mbarriers */
    static constexpr size_t TSS = FMT == 3 ? NB * NK * 4 : 0;
    static constexpr size_t SMEM = 1024 + Q_BYTES + NB * KBUF + SMALL + TSS;
    static_assert(SMEM <= 232448, "shared memory");
};

#define MLAKV_DEC90D_THREADS 384
/* Measurement hook DG (template; MLAKV_V5_DIAG in builds with MLAKV_V5_DIAG_KERNELS, timing
 * only, results wrong; 0 in normal use), bits: 1 the producer loads only the first tile's
 * records (later tiles: stale registers), 2 the producer skips de-quantization and stores
 * (stale K tiles), 4 no S wgmma, 8 no P V wgmma, 16 no softmax (stale P, alpha 1), 32 no
 * RoPE loads (zero RoPE: what a RoPE path off the record registers would save at most); one
 * producer warpgroup only (D12): 64 / 128 warpgroup 2 / 0 skips de-quantization and stores,
 * 256 / 512 warpgroup 2 / 0 loads no records after tile 1, 1024 warpgroup 2 loads no RoPE,
 * 2048 warpgroup 2 stores the raw words (no arithmetic); 4096 both producers skip the odd
 * tiles (no record loads, no de-quantization or stores: what a CTA would cost if it produced
 * only every other tile and received the rest, D15); with 4096: 8192 warpgroup 0 copies the odd
 * tiles' 72 KB from L2 (cp.async from Q's rows, waited for), 32768 the same by one bulk copy
 * (an mbarrier in red_m), 16384 warpgroup 1 sends 64 KB of each even tile out by one bulk copy
 * (into its own output rows); 65536 / 131072 / 262144 record loads at other addresses
 * and 524288 / 1048576 / 2097152 nibble loads at other addresses (mlakv_dec90d_load_diag,
 * D17). Compile-time, because a run-time branch
 * around a wgmma makes ptxas serialize the chain (C7515). */
#ifndef MLAKV_V5_DIAG_KERNELS
#define MLAKV_V5_DIAG_KERNELS 0
#endif
/* named barriers (384 threads; one CTA per head block): FULL[b] both producer halves ->
 * warpgroup 1, EMPTY[b] warpgroup 1 (P V of the buffer's tile done) -> both producer halves.
 * P(i) and alpha(i) (warpgroup 1 -> 2) go through an mbarrier per tile parity (racecheck
 * reported the named-barrier arrive / sync pair for that handoff), the epilogue's row
 * statistics through a third. */
enum {
    MLAKV_BARD_FULL = 2,  /* + b */
    MLAKV_BARD_EMPTY = 4, /* + b */
    MLAKV_BARD_EPI = 6,   /* + consumer warpgroup: its epilogue's staged rows */
    MLAKV_BARD_EPI_ALL = 8 /* all 384 threads: the producers' last stores before the staging */
};

#ifdef MLAKV_DEC90_DEVICE
/* D[64 x 64] (fp32, registers) (+)= A (smem desc) * B (smem desc); bf16 operands, both K-major.
 * ACC false: D = A B (the chain's first step; D needs no zeroing, so no non-wgmma instruction
 * defines it inside the pipeline stage). */
template <bool ACC>
__device__ __forceinline__ void mlakv_wgmma_m64n64(float (&d)[32], uint32_t a_lo, uint32_t a_hi,
                                                  uint32_t b_lo, uint32_t b_hi) {
    asm volatile(
        "{\n.reg .pred p;\n.reg .b64 da, db;\nsetp.ne.b32 p, %36, 0;\n"
        "mov.b64 da, {%32, %33};\nmov.b64 db, {%34, %35};\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
        "}, da, db, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a_lo), "r"(a_hi), "r"(b_lo), "r"(b_hi), "n"(ACC ? 1 : 0)
        : "memory");
}

/* Record loads of the direct gather: ld.global.nc (the read-only path allocates in L1, where the
 * four threads of a record hit each other's lines) with an L2 eviction policy; ld.global.cg (L2
 * only) measured slower (D6: b=128 h=64 134 vs 108 us). In the SASS the policy is part of the
 * loads' uniform memory descriptor: ~6 uniform-datapath instructions per fetch site, none per
 * load (D14). */
__device__ __forceinline__ uint64_t mlakv_l2_evict_first() {
    uint64_t pol;
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(pol));
    return pol;
}
__device__ __forceinline__ uint64_t mlakv_l2_evict_normal() {
    uint64_t pol;
    asm("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;\n" : "=l"(pol));
    return pol;
}
/* 16 / 8 bytes through the read-only path with an L2 eviction policy */
__device__ __forceinline__ uint4 mlakv_ldg16_pol(const uint8_t *g, uint64_t pol) {
    uint4 v;
    asm volatile("ld.global.nc.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(g), "l"(pol));
    return v;
}
__device__ __forceinline__ uint2 mlakv_ldg8_pol(const uint8_t *g, uint64_t pol) {
    uint2 v;
    asm volatile("ld.global.nc.L2::cache_hint.v2.u32 {%0, %1}, [%2], %3;\n"
                 : "=r"(v.x), "=r"(v.y) : "l"(g), "l"(pol));
    return v;
}

/* The registers one producer thread holds for one record: nibble chunks 4 part .. 4 part + 3
 * (64 contiguous bytes: groups 8 part .. 8 part + 7), their 8 scale bytes, RoPE chunks (bf16:
 * part and part + 4; fp8: part) and, for the 368-B records, bytes 288..303 (RoPE scale, token
 * scale). */
template <int FMT>
struct mlakv_dec90d_rec {
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
 * byte offset: global loads in v5, shared-memory loads from s5's raw stage). */
template <int FMT, bool NR = false, class L16, class L8>
__device__ __forceinline__ void mlakv_dec90d_fill(mlakv_dec90d_rec<FMT> &r, int part, L16 &&ld16,
                                                  L8 &&ld8) {
#pragma unroll
    for (int i = 0; i < 4; i++) r.nib[i] = ld16(16 * (4 * part + i));
    r.sc = ld8(256 + 8 * part);
    if constexpr (NR) { /* diag bit 32: no RoPE loads */
        r.rope[0] = make_uint4(0, 0, 0, 0);
        if constexpr (FMT == 1) r.rope[1] = r.rope[0];
        r.misc = r.rope[0];
        return;
    }
    r.rope[0] = ld16(304 + 16 * part);
    if constexpr (FMT == 1) {
        r.rope[1] = ld16(304 + 16 * (part + 4));
        r.misc = make_uint4(0, 0, 0, 0);
    } else {
        r.misc = ld16(288);
    }
}

/* diag loads (timing only), the instructions and registers of mlakv_dec90d_load with other
 * addresses. MODE 0 (bit 65536): every lane of a warp reads consecutive 16 / 8 bytes of one
 * block below the warp's first record (4 lines per instruction, fully used); 1 (bit 131072):
 * the nibble loads of each record's 4 lanes read 64 contiguous bytes per instruction (16 (part
 * + 4 i) instead of 16 (4 part + i)); 2 (bit 262144): the usual addresses, but the warp's 8
 * records are 8 consecutive slots below its first record (DRAM / L2 locality only); nibble loads
 * only, the rest as usual: 3 (bit 524288) 4 records x 8 lanes per instruction, 128 contiguous
 * bytes each; 4 (1048576) 2 records x 16 lanes, 256 bytes each; 5 (2097152) 512 contiguous
 * bytes below the warp's first record. */
template <int FMT, int MODE>
__device__ __forceinline__ void mlakv_dec90d_load_diag(const mlakv_decode_params &p, int idx, int part,
                                                       mlakv_dec90d_rec<FMT> &r) {
    constexpr int REC = mlakv_rec_traits<FMT>::bytes;
    int64_t off;
    r.ok = mlakv_dec_rec_offset<REC, !(FMT == 1 && MLAKV_DEC90D_DIV_FMT1)>(p, idx, off);
    const uint64_t pol = p.head_blocks > 1 ? mlakv_l2_evict_normal() : mlakv_l2_evict_first();
    const int lane = threadIdx.x & 31;
    int64_t b0 = 0;
    if constexpr (MODE == 0 || MODE == 2 || MODE == 5) {
        b0 = __shfl_sync(0xffffffffu, off, 0) & ~(int64_t)4095;
        b0 = b0 >= 4096 ? b0 - 4096 : 0; /* [b0, b0 + 3.5 KB) lies below the first record */
    }
    if constexpr (MODE >= 1) {
        const uint8_t *g = p.base + (MODE == 2 ? b0 + (int64_t)(lane & 7) * REC : off);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            if constexpr (MODE == 3) { /* 4 records x 8 lanes, 128 contiguous bytes each */
                const int64_t o = __shfl_sync(0xffffffffu, off, 4 * (i >> 1) + ((lane >> 1) & 3));
                r.nib[i] = mlakv_ldg16_pol(p.base + o + 16 * (8 * (i & 1) + 2 * (lane >> 3) + (lane & 1)), pol);
            } else if constexpr (MODE == 4) { /* 2 records x 16 lanes, 256 contiguous bytes each */
                const int64_t o = __shfl_sync(0xffffffffu, off, 2 * i + (lane >> 4));
                r.nib[i] = mlakv_ldg16_pol(p.base + o + 16 * (lane & 15), pol);
            } else if constexpr (MODE == 5) { /* 512 contiguous bytes */
                r.nib[i] = mlakv_ldg16_pol(p.base + b0 + 512 * i + 16 * lane, pol);
            } else {
                r.nib[i] = mlakv_ldg16_pol(g + (MODE == 1 ? 16 * (part + 4 * i) : 16 * (4 * part + i)), pol);
            }
        }
        r.sc = mlakv_ldg8_pol(g + 256 + 8 * part, pol);
        r.rope[0] = mlakv_ldg16_pol(g + 304 + 16 * part, pol);
        if constexpr (FMT == 1) {
            r.rope[1] = mlakv_ldg16_pol(g + 304 + 16 * (part + 4), pol);
            r.misc = make_uint4(0, 0, 0, 0);
        } else {
            r.misc = mlakv_ldg16_pol(g + 288, pol);
        }
        return;
    }
    const uint8_t *g = p.base + b0;
#pragma unroll
    for (int i = 0; i < 4; i++) r.nib[i] = mlakv_ldg16_pol(g + 512 * i + 16 * lane, pol);
    r.sc = mlakv_ldg8_pol(g + 2048 + 8 * lane, pol);
    r.rope[0] = mlakv_ldg16_pol(g + 2304 + 16 * lane, pol);
    if constexpr (FMT == 1) {
        r.rope[1] = mlakv_ldg16_pol(g + 2816 + 16 * lane, pol);
        r.misc = make_uint4(0, 0, 0, 0);
    } else {
        r.misc = mlakv_ldg16_pol(g + 2816 + 16 * lane, pol);
    }
}

/* this warpgroup's registers after setmaxnreg: up or down from the launch cap CAP (168 for 384
 * threads, 96 for 640) */
template <int N, int CAP = 168>
__device__ __forceinline__ void mlakv_dec90d_setreg() {
    if constexpr (N > CAP) mlakv_setmaxnreg_inc<N>();
    else mlakv_setmaxnreg_dec<N>();
}

/* Issue the loads of one record (offset from the candidate's index; an invalid index loads
 * record 0's bytes, which are discarded). */
template <int FMT, bool NR = false>
__device__ __forceinline__ void mlakv_dec90d_load(const mlakv_decode_params &p, int idx, int part,
                                                  mlakv_dec90d_rec<FMT> &r) {
    constexpr int REC = mlakv_rec_traits<FMT>::bytes;
    int64_t off;
    r.ok = mlakv_dec_rec_offset<REC, !(FMT == 1 && MLAKV_DEC90D_DIV_FMT1)>(p, idx, off);
    const uint8_t *g = p.base + off;
    /* L2 evict-first when no other CTA reads these records (one head block): the kernel's
     * code, Q and the indices stay in L2 (call 7, D11: b=128 h=64 -2 %, b=64 h=64 -4.5 %);
     * the two head blocks of a 128-head row read each record twice, the second time from L2,
     * so they keep the normal policy (evict-first measured +1.5 % there). The two-level
     * record keeps plain loads (with the policy: +1-2 %, call 8). */
    if constexpr (FMT != 3) {
        const uint64_t pol = p.head_blocks > 1 ? mlakv_l2_evict_normal() : mlakv_l2_evict_first();
        mlakv_dec90d_fill<FMT, NR>(r, part, [&](int o) { return mlakv_ldg16_pol(g + o, pol); },
                                   [&](int o) { return mlakv_ldg8_pol(g + o, pol); });
        return;
    }
    mlakv_dec90d_fill<FMT, NR>(
        r, part, [&](int o) { return __ldg(reinterpret_cast<const uint4 *>(g + o)); },
        [&](int o) { return __ldg(reinterpret_cast<const uint2 *>(g + o)); });
}

/* De-quantize the held record (same values as mlakv_dequant_record): emit(q, v) receives each
 * 16-byte chunk, q being its place in the row; mlakv_dec90d_dequant stores them into row `key`
 * of the swizzled K tile kb. Nibble chunk c = 4 part + i holds groups 2c, 2c + 1 (scale
 * halfword i of r.sc), i.e. bf16 chunks 4c .. 4c + 3; an invalid record is zeroed through its
 * scales (finite E2M1 values times 0) and by selecting zero RoPE. Store phases (8 lanes of one
 * part, keys = lane & 7) hit 8 distinct 16-byte bank groups. */
template <int FMT, bool SFB, class Emit>
__device__ __forceinline__ void mlakv_dec90d_dequant_f(
    const mlakv_dec90d_rec<FMT> &r, int part, Emit &&emit, uint32_t lut_lo = MLAKV_E2M1_LO_A,
    uint32_t lut_hi = SFB ? MLAKV_E2M1_HI_A120 : MLAKV_E2M1_HI_A) {
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
                mlakv_nvfp4_group_s2(w4[2 * g], w4[2 * g + 1], m, a, b, lut_lo, lut_hi,
                                     MLAKV_E2M1_HI_B120);
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
                mlakv_e4m3x2_to_f32((uint16_t)((i < 2 ? r.sc.x : r.sc.y) >> (16 * (i & 1))));
            if (!r.ok) sf = make_float2(0.0f, 0.0f);
            const uint32_t w4[4] = {r.nib[i].x, r.nib[i].y, r.nib[i].z, r.nib[i].w};
#pragma unroll
            for (int g = 0; g < 2; g++) {
                uint32_t a[4], b[4];
                mlakv_nvfp4_group(w4[2 * g], w4[2 * g + 1], g ? sf.y : sf.x, a, b, lut_lo, lut_hi);
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
        const float rs = __uint_as_float(r.misc.x); /* RoPE scale at byte 288 */
        const uint4 lo = mlakv_e4m3x8_scaled(make_uint2(r.rope[0].x, r.rope[0].y), rs);
        const uint4 hi = mlakv_e4m3x8_scaled(make_uint2(r.rope[0].z, r.rope[0].w), rs);
        emit(64 + 2 * part, r.ok ? lo : z);
        emit(64 + 2 * part + 1, r.ok ? hi : z);
    }
}
/* 16-byte chunk q of row `key` of the swizzled K tile kb [NK x 576] */
template <int NK = 64>
__device__ __forceinline__ uint32_t mlakv_dec90d_chunk_off(int key, int q) {
    return (q >> 3) * (NK * 128) + mlakv_sw128(key, q & 7);
}
template <int FMT, bool SFB>
__device__ __forceinline__ void mlakv_dec90d_dequant(
    const mlakv_dec90d_rec<FMT> &r, int part, uint8_t *kb, int key,
    uint32_t lut_lo = MLAKV_E2M1_LO_A, uint32_t lut_hi = SFB ? MLAKV_E2M1_HI_A120 : MLAKV_E2M1_HI_A) {
    mlakv_dec90d_dequant_f<FMT, SFB>(
        r, part,
        [&](int q, uint4 v) { *reinterpret_cast<uint4 *>(kb + mlakv_dec90d_chunk_off(key, q)) = v; },
        lut_lo, lut_hi);
}
#endif /* MLAKV_DEC90_DEVICE */

#ifdef MLAKV_DEC90_DEVICE
__device__ __forceinline__ float mlakv_ex2(float x) { /* 2^x, +0 for -inf; ftz */
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/* Online softmax of one warpgroup that holds a whole 64-column S tile (accumulator fragment:
 * s[4j + {0, 1}] row r0, s[4j + {2, 3}] row r0 + 8, columns 8j + cq + {0, 1}); valid: bit k set
 * when record k of the tile is valid (all-valid tiles skip the masking). Scales to the log2
 * domain, updates the running max / sum of rows r0 and r0 + 8, writes P (bf16) into the swizzled
 * [64 x 64] tile at pt and returns the O rescale factors. Same arithmetic as
 * mlakv_dec90_softmax except 2^x by ex2.approx.ftz (P below 2^-126 of the row max flushes to 0),
 * the lazy running max (below) and no branches: a row with no valid column so far (max -inf)
 * gets p = 0, alpha = 0. */
template <bool TS = false>
__device__ __forceinline__ void mlakv_dec90d_softmax(float c, float (&s)[32], uint64_t valid,
                                                     int r0, int cq, uint8_t *pt, float &m_run0,
                                                     float &m_run1, float &l_run0, float &l_run1,
                                                     float &al0, float &al1,
                                                     const float *tsc = nullptr) {
    float mx0 = -INFINITY, mx1 = -INFINITY;
    if (valid == ~0ull) {
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                s[4 * j + e] *= c;
                s[4 * j + 2 + e] *= c;
                mx0 = fmaxf(mx0, s[4 * j + e]);
                mx1 = fmaxf(mx1, s[4 * j + 2 + e]);
            }
    } else {
        const uint64_t vq = valid >> cq;
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const bool ok = (vq >> (8 * j + e)) & 1;
                s[4 * j + e] = ok ? s[4 * j + e] * c : -INFINITY;
                s[4 * j + 2 + e] = ok ? s[4 * j + 2 + e] * c : -INFINITY;
                mx0 = fmaxf(mx0, s[4 * j + e]);
                mx1 = fmaxf(mx1, s[4 * j + 2 + e]);
            }
    }
    mlakv_dec90_quad_max(mx0, mx1);
    /* lazy rescaling: the running max (the reference of P and of O) moves only when the tile's
     * max exceeds it by more than MLAKV_DEC90_RESCALE_LOG2 (log2 units), so P stays below
     * 2^MLAKV_DEC90_RESCALE_LOG2 and most tiles have alpha = 1 (no O rescale in either
     * consumer); O / l and the lse do not depend on the reference. A row's first valid tile
     * always moves it (-inf + x = -inf). The cost: the row's largest p is no longer exactly 1,
     * so its bf16 rounding (<= 2^-9 relative) reaches the output of a row that one candidate
     * dominates (l sums the unrounded p, as FlashMLA and the engine mode do); summing the
     * rounded P instead moved the lse off the engine's by up to 9e-4 (D10). */
    const float th = MLAKV_DEC90_RESCALE_LOG2;
    const float mn0 = mx0 > m_run0 + th ? mx0 : m_run0, mn1 = mx1 > m_run1 + th ? mx1 : m_run1;
    const float mu0 = mn0 == -INFINITY ? 0.0f : mn0, mu1 = mn1 == -INFINITY ? 0.0f : mn1;
    al0 = mlakv_ex2(m_run0 - mu0);
    al1 = mlakv_ex2(m_run1 - mu1);
    float sum0 = 0.0f, sum1 = 0.0f;
    uint8_t *row = pt + r0 * 128 + 2 * cq; /* row r0 + 8: + 1024, same swizzle (r0 & 7) */
    const int x = r0 & 7;
#pragma unroll
    for (int j = 0; j < 8; j++) {
        const float p0 = mlakv_ex2(s[4 * j] - mu0), p1 = mlakv_ex2(s[4 * j + 1] - mu0);
        const float p2 = mlakv_ex2(s[4 * j + 2] - mu1), p3 = mlakv_ex2(s[4 * j + 3] - mu1);
        sum0 += p0 + p1;
        sum1 += p2 + p3;
        uint8_t *a = row + ((j ^ x) << 4);
        if constexpr (TS) { /* P times its column's token scale (V is stored without it); l
                               sums the unscaled p */
            const float2 f = *reinterpret_cast<const float2 *>(tsc + 8 * j + cq);
            *reinterpret_cast<uint32_t *>(a) = mlakv_f32x2_to_bf16x2(p0 * f.x, p1 * f.y);
            *reinterpret_cast<uint32_t *>(a + 1024) = mlakv_f32x2_to_bf16x2(p2 * f.x, p3 * f.y);
        } else {
            *reinterpret_cast<uint32_t *>(a) = mlakv_f32x2_to_bf16x2(p0, p1);
            *reinterpret_cast<uint32_t *>(a + 1024) = mlakv_f32x2_to_bf16x2(p2, p3);
        }
    }
    mlakv_dec90_row_update(sum0, sum1, al0, al1, mn0, mn1, m_run0, m_run1, l_run0, l_run1);
}
#endif /* MLAKV_DEC90_DEVICE */

#ifdef MLAKV_DEC90_DEVICE
/* v5's epilogue for one consumer warpgroup c (output columns 256 c .. 256 c + 255) of a
 * one-split launch: the normalized bf16 rows go through shared memory st (64 rows x 512 B;
 * 16-byte chunks XOR-swizzled by row: conflict-free both ways), then out as whole row pieces,
 * one 512-byte piece per warp store (4 full lines). Storing the accumulator fragments directly
 * (16 bytes of 8 rows per warp store: 8 write requests each, ~4,000 per CTA) took 4-6 us per
 * CTA after its last P V; this takes ~2.5 (per-CTA stamps, D11). bar: a named barrier of the
 * warpgroup's 128 threads. */
__device__ __forceinline__ void mlakv_dec90d_store_rows(const mlakv_decode_params &p, int bar,
                                                        const float (&o)[128], const float *red_l,
                                                        int c, int wt, int r0, int cq, int h0,
                                                        int bt, float m_run0, float m_run1,
                                                        uint8_t *st) {
    constexpr int HP = 64;
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int row = r0 + 8 * half, h = h0 + row, x = row & 7;
        float so = 0.0f, lse; /* padding heads: staged, never written out */
        if (h < p.heads) {
            mlakv_dec_norm_out(p, h, half ? m_run1 : m_run0, red_l[row] + red_l[HP + row], so, lse);
            if (c == 0 && (wt & 3) == 0) p.lse[(int64_t)bt * p.heads + h] = lse;
        }
        uint8_t *srow = st + row * 512 + 2 * cq;
        mlakv_dec90_row_bf16(o, half, so, [&](int j, uint32_t w) { /* chunk j */
            *reinterpret_cast<uint32_t *>(srow + ((j ^ x) << 4)) = w;
        });
    }
    mlakv_bar_sync(bar, 128);
#pragma unroll 4
    for (int i = 0; i < 16; i++) { /* 64 rows x 32 chunks; a warp takes one row */
        const int k = i * 128 + wt, row = k >> 5, ch = k & 31, h = h0 + row;
        const uint4 v = *reinterpret_cast<const uint4 *>(st + row * 512 + ((ch ^ (row & 7)) << 4));
        if (h < p.heads)
            *reinterpret_cast<uint4 *>(p.out + ((int64_t)bt * p.heads + h) * MLAKV_DEC_V + 256 * c + 8 * ch) = v;
    }
}
#endif /* MLAKV_DEC90_DEVICE */

/* DG: the measurement hook above (compile-time; 0 in normal use). A 2-CTA cluster variant for
 * 128 heads (the two head blocks of a row sharing the de-quantized tiles through st.async) was
 * measured slower in every form (D5, D8; D13 with the current registers: 454 vs 357-360 us at
 * b=128 s_q=2 h=128, 119-120 vs 93-94 at b=64 h=128) and removed after 5c57c86. */
template <int FMT, int DG>
__global__ void __launch_bounds__(MLAKV_DEC90D_THREADS, 1)
    mlakv_decode90d_kernel(const mlakv_decode_params p) {
#ifdef MLAKV_DEC90_DEVICE
    typedef mlakv_dec90d_shape<FMT> SH;
    constexpr int NK = SH::NK, HP = SH::HP;
    static_assert(MLAKV_DEC90D_PROD_REGS(FMT) + MLAKV_DEC90D_S_REGS(FMT) + MLAKV_DEC90D_V_REGS(FMT) <=
                      3 * 168,
                  "v5 registers: setmaxnreg.inc only takes what the other warpgroups released");
    constexpr int KBUF = (int)SH::KBUF;
    /* the staged epilogue (mlakv_dec90d_store_rows) for bf16 outputs (one split); the split
     * partials (fp32) and the two-level record keep the direct stores, which measured faster
     * there (call 7, D11: b=1 h=64 11.6 vs 13.1 us; two-level +7 %). All 384 threads meet on
     * MLAKV_BARD_EPI_ALL when it is taken, so the producers and consumers test this one
     * condition (evaluated where used: kept live across the loops it moved ptxas's schedule) */
    auto staged_out = [&]() { return FMT != 3 && p.nsplit == 1; };

    extern __shared__ __align__(16) uint8_t smem_raw[];
    uint8_t *smem = smem_raw + ((1024u - (mlakv_smem_addr(smem_raw) & 1023u)) & 1023u);
    uint8_t *Qs = smem;
    uint8_t *Ks = Qs + SH::Q_BYTES;
    /* [2][8] record-valid masks: word k of a buffer holds bits of records 8k .. 8k + 7 */
    uint32_t *vk = reinterpret_cast<uint32_t *>(Ks + 2 * SH::KBUF);
    float *alpha = reinterpret_cast<float *>(vk + 32);      /* [2][HP] O rescale of tile i */
    float *red_l = alpha + 2 * HP;                          /* [2][HP] */
    float *red_m = red_l + 2 * HP;
    /* mbarriers: [0], [1] P(i) ready by tile parity, [2] warpgroup 1's row statistics */
    uint64_t *p_ready = reinterpret_cast<uint64_t *>(red_m + HP);
    constexpr bool TSP = SH::TSS > 0; /* two-level: token scale on S and P, not in K */
    float *tss = reinterpret_cast<float *>(p_ready + 3); /* [2][NK] token scales (TSP) */
    (void)tss;

    /* per-CTA stamps (trace builds, decode_sm90.cuh): 0 entry, 1 past griddepcontrol.wait,
     * 2 warpgroup 0 with Q landed, 3 warpgroup 1 with S(0), 4 its last P V done, 5 its
     * epilogue stored, 6 warpgroup 2's epilogue stored, 7 SM id | tiles << 16 */
    MLAKV_DEC90_CSTAMP(0, threadIdx.x == 0, 0);
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
    MLAKV_DEC90_CSTAMP(1, threadIdx.x == 0, 0);

    const int tid = threadIdx.x, lane = tid & 31;
    const int wg = tid >> 7, wt = tid & 127;
    /* one-CTA launches with several head blocks run the head blocks of a query row as
     * neighbours in blockIdx.x (see mlakv_decode90d_launch_t): they read the same records,
     * and neighbours run at the same time, so the second reads hit L2 */
    const bool paired = gridDim.y == 1 && p.head_blocks > 1;
    const int bt = paired ? (int)blockIdx.x / p.head_blocks : (int)blockIdx.x;
    const int hb = paired ? (int)blockIdx.x - bt * p.head_blocks : (int)blockIdx.y;
    const int split = blockIdx.z;
    const int b = bt / p.s_q, t = bt - b * p.s_q;
    const int h0 = hb * HP;

    int cbeg, cend, ntiles;
    mlakv_dec_split_range<NK, NK>(p, b, split, cbeg, cend, ntiles);
    if (tid == 0) { /* P(i) ready: warpgroup 1's 128 threads arrive, warpgroup 2 waits */
        mlakv_mbar_init(p_ready, 128);
        mlakv_mbar_init(p_ready + 1, 128);
        mlakv_mbar_init(p_ready + 2, 128); /* row sums / maxima for the epilogue */
        if constexpr ((DG & 32768) != 0) mlakv_mbar_init(reinterpret_cast<uint64_t *>(red_m), 1);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    auto full_wait = [&](int tile) { /* warpgroup 1 */
        mlakv_bar_sync(MLAKV_BARD_FULL + (tile & 1), MLAKV_DEC90D_THREADS);
    };
    auto empty_wait = [&](int tile) { /* producers, before writing `tile` (>= 2) */
        mlakv_bar_sync(MLAKV_BARD_EMPTY + (tile & 1), MLAKV_DEC90D_THREADS);
    };
    auto empty_signal = [&](int tile) { /* warpgroup 1, its P V of `tile` done */
        if (wg == 1) mlakv_bar_arrive(MLAKV_BARD_EMPTY + (tile & 1), MLAKV_DEC90D_THREADS);
    };

    /* ---- the gather + de-quantization of one half of each tile (32 records, 4 threads per
     * record): warpgroup 0 does records 0..31, warpgroup 2 records 32..63 between its P V
     * steps (it would otherwise idle while warpgroup 1 runs S and the softmax) */
    const int32_t *idx_row = p.indices + (int64_t)b * p.i_sb + (int64_t)t * p.i_st;
    const int part = lane >> 3; /* 16-byte column of the record's parts */
    auto load_idx = [&](int tile, int key) -> int {
        const int pos = cbeg + tile * NK + key;
        return (tile < ntiles && pos < cend) ? __ldg(idx_row + pos) : -1;
    };
    /* record of `tile` into registers (its index in `in`) and the next tile's index. For the
     * 432-B records the index load goes first (b=128 h=64 -2.4 %, bench/NOTES_decode.md D10);
     * the 368-B records measured slower that way (fp8 RoPE +6 %) and keep the record loads
     * first. */
    auto load_rec = [&](mlakv_dec90d_rec<FMT> &r, int idx, int tile) {
        if (tile < ntiles && !(DG & 1) && !((DG & 256) && wg == 2 && tile >= 2) &&
            !((DG & 4096) && (tile & 1)) &&
            !((DG & 512) && wg == 0 && tile >= 2)) {
            if constexpr ((DG & 65536) != 0) mlakv_dec90d_load_diag<FMT, 0>(p, idx, part, r);
            else if constexpr ((DG & 131072) != 0) mlakv_dec90d_load_diag<FMT, 1>(p, idx, part, r);
            else if constexpr ((DG & 262144) != 0) mlakv_dec90d_load_diag<FMT, 2>(p, idx, part, r);
            else if constexpr ((DG & 524288) != 0) mlakv_dec90d_load_diag<FMT, 3>(p, idx, part, r);
            else if constexpr ((DG & 1048576) != 0) mlakv_dec90d_load_diag<FMT, 4>(p, idx, part, r);
            else if constexpr ((DG & 2097152) != 0) mlakv_dec90d_load_diag<FMT, 5>(p, idx, part, r);
            else if ((DG & 1024) && wg == 2) mlakv_dec90d_load<FMT, true>(p, idx, part, r);
            else mlakv_dec90d_load<FMT, (DG & 32) != 0>(p, idx, part, r);
        }
    };
    auto fetch = [&](mlakv_dec90d_rec<FMT> &r, int &in, int tile, int key) {
        int next = -1;
        if constexpr (FMT == 1) next = load_idx(tile + 1, key);
        load_rec(r, in, tile);
        if constexpr (FMT != 1) next = load_idx(tile + 1, key);
        in = next;
    };
    /* diag 8192 / 16384 / 32768 copy whole 64-head blocks of Q rows and output rows: only where
     * the block has 64 heads and Q's rows are contiguous (the benchmark's layout) */
    const bool diag_whole = h0 + HP <= p.heads && p.q_sh == MLAKV_DEC_QK;
    (void)diag_whole;
    /* E2M1 permute tables, in vector registers for the formats of MLAKV_DEC90D_PIN_TAB */
    constexpr bool SFB = MLAKV_DEC90D_SF_BITS(FMT);
    constexpr uint32_t HI_A = SFB ? MLAKV_E2M1_HI_A120 : MLAKV_E2M1_HI_A;
    uint32_t lut_lo = MLAKV_E2M1_LO_A, lut_hi = HI_A;
    if constexpr (MLAKV_DEC90D_PIN_TAB(FMT))
        mlakv_e2m1_tables_pinned(threadIdx.x, p.diag, lut_lo, lut_hi, HI_A);
    /* the held record of `tile` into its K buffer, then FULL */
    auto put = [&](const mlakv_dec90d_rec<FMT> &r, int tile, int key) {
        uint8_t *kb = Ks + (tile & 1) * KBUF;
        const uint32_t okb = __ballot_sync(0xffffffffu, r.ok) & 0xFFu; /* lanes 0..7: part 0 */
        uint32_t *vw = vk + (tile & 1) * 8 + (key >> 3);
        if ((DG & 2048) && wg == 2) { /* diag: the raw words stored, no arithmetic */
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int g = 0; g < 4; g++)
                    *reinterpret_cast<uint4 *>(kb + mlakv_dec90d_chunk_off(key, 4 * (4 * part + i) + g)) =
                        r.nib[i];
            *reinterpret_cast<uint4 *>(kb + mlakv_dec90d_chunk_off(key, 64 + part)) = r.rope[0];
            *reinterpret_cast<uint4 *>(kb + mlakv_dec90d_chunk_off(key, 68 + part)) = r.rope[FMT == 1 ? 1 : 0];
        } else if (!(DG & 2) && !((DG & 64) && wg == 2) && !((DG & 128) && wg == 0) &&
                   !((DG & 4096) && (tile & 1))) {
            mlakv_dec90d_dequant<FMT, SFB>(r, part, kb, key, lut_lo, lut_hi);
        }
        if constexpr (TSP) {
            if (part == 0) tss[(tile & 1) * NK + key] = r.token_scale();
        }
        if constexpr ((DG & (8192 | 32768)) != 0) { /* diag: an odd tile arrives as 72 KB from L2 */
            if (wg == 0 && (tile & 1) && diag_whole) {
                const uint8_t *src = reinterpret_cast<const uint8_t *>(
                    p.q + (int64_t)b * p.q_sb + (int64_t)t * p.q_st + (int64_t)h0 * p.q_sh);
                if constexpr ((DG & 8192) != 0) { /* by cp.async, 36 per thread */
                    for (int c = wt; c < (int)(KBUF / 16); c += 128) mlakv_cp_async16(kb + 16 * c, src + 16 * c);
                    mlakv_cp_async_commit();
                    mlakv_cp_async_wait<0>();
                } else { /* one bulk copy, completing on an mbarrier in red_m (used only after the loop) */
                    uint64_t *xbar = reinterpret_cast<uint64_t *>(red_m);
                    if (wt == 0) {
                        mlakv_mbar_expect_tx(xbar, (uint32_t)KBUF);
                        mlakv_bulk_copy_g2s(kb, src, (uint32_t)KBUF, xbar);
                    }
                    mlakv_mbar_wait(xbar, (uint32_t)(tile >> 1) & 1u);
                }
            }
        }
        if (lane == 0) *vw = okb;
        mlakv_fence_proxy_async(); /* K rows (and Q, first time) to the tensor cores */
        mlakv_bar_arrive(MLAKV_BARD_FULL + (tile & 1), MLAKV_DEC90D_THREADS);
    };

    if (wg == 0) {
        /* ================= producer (records 0..31) ================= */
        mlakv_dec90d_setreg<MLAKV_DEC90D_PROD_REGS(FMT)>();
        const int key = 8 * (wt >> 5) + (lane & 7);
        mlakv_dec90d_rec<FMT> ra, rb; /* records of tiles it and it + 1 (two tiles in flight) */
        /* the first three tiles' indices at once: both first records are requested after one
         * index latency (fetch would load each tile's next index before its record) */
        const int in0 = load_idx(0, key), in1 = load_idx(1, key);
        int in = load_idx(2, key);
        /* Q [64 heads x 576] into nine swizzled 64-column blocks */
        mlakv_dec_load_q<HP, 128>(p, b, t, h0, wt, [&](int rr, int j) {
            return Qs + (j >> 3) * (HP * 128) + mlakv_sw128(rr, j & 7);
        });
        mlakv_cp_async_commit();
        load_rec(ra, in0, 0);
        load_rec(rb, in1, 1);
        mlakv_cp_async_wait<0>();
        MLAKV_DEC90_CSTAMP(2, wt == 0, 0);
        /* the consumers release tile it - 2's buffer as soon as its P V is done; the record of
         * tile it + 2 is requested as soon as tile it's registers are free */
        /* trace builds (MLAKV_DEC90_TRACE, decode_sm90.cuh), v5 events: 0 warpgroup 0 at the
         * tile, 1 its buffer free (EMPTY), 2 its half stored (FULL arrive), 3 warpgroup 2's half
         * stored; warpgroup 1: 4 P ready, 5 past FULL, 6 S done, 7 its P V done */
        const bool leader = wt == 0;
        (void)leader;
        for (int it = 0; it < ntiles; it += 2) {
            MLAKV_DEC90_STAMP(it, 0, leader);
            if (it >= 2) empty_wait(it);
            MLAKV_DEC90_STAMP(it, 1, leader);
            put(ra, it, key);
            MLAKV_DEC90_STAMP(it, 2, leader);
            fetch(ra, in, it + 2, key);
            if (it + 1 < ntiles) {
                MLAKV_DEC90_STAMP(it + 1, 0, leader);
                if (it >= 2) empty_wait(it + 1);
                MLAKV_DEC90_STAMP(it + 1, 1, leader);
                put(rb, it + 1, key);
                MLAKV_DEC90_STAMP(it + 1, 2, leader);
                fetch(rb, in, it + 3, key);
            }
        }
        if (staged_out()) mlakv_bar_sync(MLAKV_BARD_EPI_ALL, MLAKV_DEC90D_THREADS); /* epilogue */
    } else {
        /* ================= consumers ================= */
        const int c = wg - 1;
        const int r0 = 16 * (wt >> 5) + (lane >> 2), cq = 2 * (lane & 3);
        float m_run0 = -INFINITY, m_run1 = -INFINITY, l_run0 = 0.0f, l_run1 = 0.0f;
        float o[128];
#pragma unroll
        for (int i = 0; i < 128; i++) o[i] = 0.0f;
        const uint32_t qs_a = mlakv_smem_addr(Qs), ks_a = mlakv_smem_addr(Ks);
        /* P of tile i: the RoPE column block of its K buffer, dead once S(i) has read it */
        constexpr int P_OFF = 8 * NK * 128;
        auto pv_issue = [&](int i, int vcol) { /* O += P(i) V(i)[:, vcol .. vcol + 256) */
            const uint32_t kb_a = ks_a + (i & 1) * KBUF;
            if constexpr (!(DG & 8)) {
                mlakv_dec90_pv_issue<NK>(o, kb_a + P_OFF, kb_a + (vcol / 64) * (NK * 128));
            } else {
                mlakv_wgmma_fence();
                mlakv_wgmma_commit();
            }
        };
        /* both consumers' rows: the row sums and maxima are warpgroup 1's (red_l, red_m; to
         * warpgroup 2 through the third mbarrier) */
        auto finish = [&]() {
            mlakv_wgmma_wait0(); /* nothing in flight; said here, on the uniform path */
            mlakv_reg_fence(o);
            if (c == 1) {
                mlakv_mbar_wait(p_ready + 2, 0);
                m_run0 = red_m[r0];
                m_run1 = red_m[r0 + 8];
            }
            if (staged_out()) { /* staged through dead shared memory: warpgroup 1 in Q (its last
                                 S is done), warpgroup 2 in the K buffer the last tile did not
                                 use (both P V of the tile before are done); the barrier orders
                                 the producers' last K-tile stores first */
                mlakv_bar_sync(MLAKV_BARD_EPI_ALL, MLAKV_DEC90D_THREADS);
                mlakv_dec90d_store_rows(p, MLAKV_BARD_EPI + c, o, red_l, c, wt, r0, cq, h0, bt, m_run0,
                                        m_run1, c == 0 ? Qs : Ks + (ntiles & 1) * KBUF);
            } else
                mlakv_dec90_store_rows(p, o, red_l, c, lane, r0, cq, h0, bt, split, m_run0, m_run1);
        };
        if (c == 0) {
            /* warpgroup 1, per tile i: S(i) landed -> softmax -> P(i) -> O += P V(i), waited for,
             * buffer released -> FULL(i + 1) -> S(i + 1) issued (the producers get S + softmax
             * of a tile to refill the released buffer) */
            mlakv_dec90d_setreg<MLAKV_DEC90D_S_REGS(FMT)>();
            float s[32];
            /* k16 steps k0 .. k1 - 1 of S(i) = Q K(i)^T into s (step 0 overwrites: no zeroing
             * of s inside the pipeline stage); the caller fences and commits */
            auto s_steps = [&](int i, int k0, int k1) {
                const uint32_t dq0 = mlakv_gdesc_lo(qs_a, 16);
                const uint32_t dk0 = mlakv_gdesc_lo(ks_a + (i & 1) * KBUF, 16);
                const uint32_t dhi = mlakv_gdesc_hi(1024);
#pragma unroll
                for (int kk = k0; kk < k1; kk++) {
                    const uint32_t off_q = ((kk >> 2) * (HP * 128) + (kk & 3) * 32) >> 4;
                    const uint32_t off_k = ((kk >> 2) * (NK * 128) + (kk & 3) * 32) >> 4;
                    if (kk == 0)
                        mlakv_wgmma_m64n64<false>(s, dq0 + off_q, dhi, dk0 + off_k, dhi);
                    else
                        mlakv_wgmma_m64n64<true>(s, dq0 + off_q, dhi, dk0 + off_k, dhi);
                }
            };
            auto s_issue = [&](int i) { /* S(i): one chain of 36 k16 steps (two-level: the 32
                                           latent ones; the RoPE steps follow its scaling) */
                mlakv_wgmma_fence();
                if constexpr (!(DG & 4)) {
                    s_steps(i, 0, TSP ? 32 : 36);
                } else {
#pragma unroll
                    for (int k = 0; k < 32; k++) s[k] = 0.0f;
                }
                mlakv_wgmma_commit();
            };
            /* diag 16384: an even tile also leaves as one 64 KB bulk copy (into this CTA's own
             * output rows, rewritten by the epilogue), read before its buffer is released */
            auto bulk_out = [&](int i) {
                if constexpr ((DG & 16384) != 0) {
                    if (!(i & 1) && wt == 0 && diag_whole) {
                        const uint32_t src = ks_a + (i & 1) * KBUF;
                        void *dst = p.out + ((int64_t)bt * p.heads + h0) * MLAKV_DEC_V;
                        asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], 65536;\n"
                                     "cp.async.bulk.commit_group;\n" ::"l"(dst), "r"(src) : "memory");
                    }
                }
            };
            auto bulk_read_wait = [&](int i) {
                if constexpr ((DG & 16384) != 0) {
                    if (!(i & 1) && wt == 0 && diag_whole) asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
                }
            };
            float al0 = 1.0f, al1 = 1.0f;
            if (ntiles > 0) {
                full_wait(0);
                bulk_out(0);
                MLAKV_DEC90_STAMP(0, 5, wt == 0);
                s_issue(0);
            }
            for (int it = 0; it < ntiles; ++it) {
                mlakv_wgmma_wait0(); /* S(it) */
                mlakv_reg_fence(s);
                if constexpr (TSP && !(DG & 4)) {
                    /* two-level record: S = s_t (Q K'^T over the 512 latent columns) + the RoPE
                     * columns' product, K' being the latent without its token scale s_t */
                    const float *tsc = tss + (it & 1) * NK;
#pragma unroll
                    for (int j = 0; j < 8; j++) {
                        const float2 f = *reinterpret_cast<const float2 *>(tsc + 8 * j + cq);
                        s[4 * j] *= f.x;
                        s[4 * j + 1] *= f.y;
                        s[4 * j + 2] *= f.x;
                        s[4 * j + 3] *= f.y;
                    }
                    mlakv_wgmma_group_sync(s, [&] { s_steps(it, 32, 36); });
                }
                MLAKV_DEC90_STAMP(it, 6, wt == 0);
                MLAKV_DEC90_CSTAMP(3, wt == 0 && it == 0, 0);
                if constexpr (!(DG & 16)) {
                    const uint4 w0 = *reinterpret_cast<const uint4 *>(vk + (it & 1) * 8);
                    const uint4 w1 = *reinterpret_cast<const uint4 *>(vk + (it & 1) * 8 + 4);
                    const uint64_t vm =
                        (uint64_t)(w0.x | w0.y << 8 | w0.z << 16 | w0.w << 24) |
                        (uint64_t)(w1.x | w1.y << 8 | w1.z << 16 | w1.w << 24) << 32;
                    if constexpr (TSP) { /* on a copy: a non-wgmma write of s after its second
                                            chain serializes every chain (ptxas C7515) */
                        float sc[32];
#pragma unroll
                        for (int k = 0; k < 32; k++) sc[k] = s[k];
                        mlakv_dec90d_softmax<true>(p.sm_scale_log2, sc, vm, r0, cq,
                                                   Ks + (it & 1) * KBUF + P_OFF, m_run0, m_run1,
                                                   l_run0, l_run1, al0, al1, tss + (it & 1) * NK);
                    } else {
                        mlakv_dec90d_softmax(p.sm_scale_log2, s, vm, r0, cq,
                                             Ks + (it & 1) * KBUF + P_OFF, m_run0, m_run1, l_run0,
                                             l_run1, al0, al1);
                    }
                }
                if ((lane & 3) == 0) {
                    alpha[(it & 1) * HP + r0] = al0;
                    alpha[(it & 1) * HP + r0 + 8] = al1;
                }
                mlakv_fence_proxy_async();
                mlakv_mbar_arrive(p_ready + (it & 1));
                MLAKV_DEC90_STAMP(it, 4, wt == 0);
                mlakv_dec90_rescale(o, al0, al1); /* P V(it - 1) was waited for */
                pv_issue(it, 0);
                /* P V(it) first: the buffer goes back to the producers without waiting for
                 * the next tile (warpgroup 2's P V(it) runs meanwhile) */
                mlakv_wgmma_wait0();
                mlakv_reg_fence(o);
                MLAKV_DEC90_STAMP(it, 7, wt == 0);
                bulk_read_wait(it);
                if (it + 2 < ntiles) empty_signal(it);
                if (it + 1 < ntiles) {
                    full_wait(it + 1);
                    bulk_out(it + 1);
                    MLAKV_DEC90_STAMP(it + 1, 5, wt == 0);
                    s_issue(it + 1);
                }
            }
            MLAKV_DEC90_CSTAMP(4, wt == 0, 0);
            if ((lane & 3) == 0) {
                red_l[r0] = l_run0;
                red_l[r0 + 8] = l_run1;
                red_l[HP + r0] = 0.0f;
                red_l[HP + r0 + 8] = 0.0f;
                red_m[r0] = m_run0;
                red_m[r0 + 8] = m_run1;
            }
            __syncwarp();
            mlakv_mbar_arrive(p_ready + 2);
            finish();
            MLAKV_DEC90_CSTAMP(5, wt == 0, 0);
        } else {
            /* warpgroup 2: O[:, 256:512) += P V(i), and records 32..63 of tile i + 2 */
            mlakv_dec90d_setreg<MLAKV_DEC90D_V_REGS(FMT)>();
            const int key = 32 + 8 * (wt >> 5) + (lane & 7);
            mlakv_dec90d_rec<FMT> r;
            int in = load_idx(0, key);
            fetch(r, in, 0, key);
            for (int it = 0; it < 2 && it < ntiles; ++it) {
                put(r, it, key);
                MLAKV_DEC90_STAMP(it, 3, wt == 0);
                fetch(r, in, it + 1, key);
            }
            for (int it = 0; it < ntiles; ++it) {
                mlakv_mbar_wait(p_ready + (it & 1), (uint32_t)(it >> 1) & 1u); /* P(it), alpha(it) */
                mlakv_dec90_rescale(o, alpha[(it & 1) * HP + r0], alpha[(it & 1) * HP + r0 + 8]);
                pv_issue(it, 256);
                mlakv_wgmma_wait0();
                mlakv_reg_fence(o);
                if (it + 2 < ntiles) {
                    empty_wait(it + 2);
                    put(r, it + 2, key);
                    MLAKV_DEC90_STAMP(it + 2, 3, wt == 0);
                    fetch(r, in, it + 3, key);
                }
            }
            finish();
            MLAKV_DEC90_CSTAMP(6, wt == 0, 0);
            MLAKV_DEC90_CSTAMP_SM(wt == 0, ntiles);
        }
    }
#endif /* MLAKV_DEC90_DEVICE */
}

template <int FMT, int DG>
static cudaError_t mlakv_decode90d_launch_t(const mlakv_decode_params *p, dim3 grid,
                                            cudaStream_t stream) {
    const size_t sm = mlakv_dec90d_shape<FMT>::SMEM;
    cudaError_t err = cudaFuncSetAttribute(mlakv_decode90d_kernel<FMT, DG>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm);
    if (err != cudaSuccess) return err;
    /* head blocks of a query row next to each other (MLAKV_V5_PAIRED=0: the (row, head block)
     * grid, for A/B runs) */
    const char *e = getenv("MLAKV_V5_PAIRED");
    if (grid.y > 1 && (uint64_t)grid.x * grid.y <= 0x7FFFFFFFu && !(e && strcmp(e, "0") == 0))
        grid = dim3(grid.x * grid.y, 1, grid.z);
    return mlakv_launch_pdl(mlakv_decode90d_kernel<FMT, DG>, grid, dim3(MLAKV_DEC90D_THREADS), sm,
                            stream, p);
}

/* Builds with -DMLAKV_V5_DIAG_KERNELS=1 also carry stage-removal variants of nvfp4_ds_mla, picked
 * by MLAKV_V5_DIAG (p.diag, benchmarks only). */
template <int FMT>
static cudaError_t mlakv_decode90d_launch(const mlakv_decode_params *p, dim3 grid,
                                          cudaStream_t stream) {
#if MLAKV_V5_DIAG_KERNELS
    if constexpr (FMT == 1) {
        switch (p->diag) {
            case 3: return mlakv_decode90d_launch_t<1, 3>(p, grid, stream);
            case 4: return mlakv_decode90d_launch_t<1, 4>(p, grid, stream);
            case 8: return mlakv_decode90d_launch_t<1, 8>(p, grid, stream);
            case 12: return mlakv_decode90d_launch_t<1, 12>(p, grid, stream);
            case 19: return mlakv_decode90d_launch_t<1, 19>(p, grid, stream);
            case 23: return mlakv_decode90d_launch_t<1, 23>(p, grid, stream);
            case 27: return mlakv_decode90d_launch_t<1, 27>(p, grid, stream);
            case 28: return mlakv_decode90d_launch_t<1, 28>(p, grid, stream);
            case 29: return mlakv_decode90d_launch_t<1, 29>(p, grid, stream);
            case 30: return mlakv_decode90d_launch_t<1, 30>(p, grid, stream);
            case 31: return mlakv_decode90d_launch_t<1, 31>(p, grid, stream);
            case 32: return mlakv_decode90d_launch_t<1, 32>(p, grid, stream);
            case 64: return mlakv_decode90d_launch_t<1, 64>(p, grid, stream);
            case 128: return mlakv_decode90d_launch_t<1, 128>(p, grid, stream);
            case 320: return mlakv_decode90d_launch_t<1, 320>(p, grid, stream);
            case 640: return mlakv_decode90d_launch_t<1, 640>(p, grid, stream);
            case 1024: return mlakv_decode90d_launch_t<1, 1024>(p, grid, stream);
            case 2048: return mlakv_decode90d_launch_t<1, 2048>(p, grid, stream);
            case 4096: return mlakv_decode90d_launch_t<1, 4096>(p, grid, stream);
            case 12288: return mlakv_decode90d_launch_t<1, 12288>(p, grid, stream);
            case 20480: return mlakv_decode90d_launch_t<1, 20480>(p, grid, stream);
            case 36864: return mlakv_decode90d_launch_t<1, 36864>(p, grid, stream);
            case 53248: return mlakv_decode90d_launch_t<1, 53248>(p, grid, stream);
            case 65536: return mlakv_decode90d_launch_t<1, 65536>(p, grid, stream);
            case 65538: return mlakv_decode90d_launch_t<1, 65538>(p, grid, stream);
            case 131072: return mlakv_decode90d_launch_t<1, 131072>(p, grid, stream);
            case 262144: return mlakv_decode90d_launch_t<1, 262144>(p, grid, stream);
            case 524288: return mlakv_decode90d_launch_t<1, 524288>(p, grid, stream);
            case 1048576: return mlakv_decode90d_launch_t<1, 1048576>(p, grid, stream);
            case 2097152: return mlakv_decode90d_launch_t<1, 2097152>(p, grid, stream);
            default: break;
        }
    }
#endif
    return mlakv_decode90d_launch_t<FMT, 0>(p, grid, stream);
}

#endif
