/* Compile-time tile constants of the sparse MLA decode kernels (src/cuda/decode/). */
#ifndef MLAKV_CUDA_DECODE_CONFIG_H
#define MLAKV_CUDA_DECODE_CONFIG_H

#define MLAKV_DEC_THREADS 256   /* 8 warps per CTA */
#define MLAKV_DEC_WARPS 8
#define MLAKV_DEC_QK 576        /* key/query head dim */
#define MLAKV_DEC_V 512         /* value dim */
#define MLAKV_DEC_KPITCH 584    /* bf16 row pitch of Q and K tiles in shared memory: 1168 B,
                                   16 B mod 128, so ldmatrix rows hit distinct banks */
#define MLAKV_DEC_MAX_HG 4      /* 16-head groups per CTA (more heads: more CTAs) */
#define MLAKV_DEC_MAX_SPLITS 128 /* split-KV partials per query row at most */

/* Candidate tile (records de-quantized together) and raw-record stages in flight per variant:
 * one head group: 32-record tiles, 2 raw stages (small CTAs, 2 per SM);
 * 2 or 4 head groups: 64-record tiles, 1 raw stage (the largest CTA fits 227 KB). */
#define MLAKV_DEC_NK(hg) ((hg) == 1 ? 32 : 64)
#define MLAKV_DEC_STAGES(hg) ((hg) == 1 ? 2 : 1)

/* Small-head (<= 32 heads: 1 or 2 head groups) variants of the mma.sync kernel, picked at run
 * time by MLAKV_CUDA_DECODE_SMALL=<name> (decode.cu; unknown names: the default):
 *   0 "base"  : the tiles above (16 heads: 32 records, 2 raw stages, 2 CTAs/SM; 32 heads: 64, 1)
 *   1 "qreg"  : base + each warp keeps its Q fragments (its k-slice) in registers
 *   2 "nk16"  : 16-record tiles, 2 raw stages: 16 heads 3 CTAs/SM, 32 heads 2 CTAs/SM
 *   3 "nk16q" : nk16 + Q fragments in registers
 *   4 "tps2"  : base kernel, split plan with at least 2 tiles per split (fewer splits at b=1)
 * MLAKV_DEC_SMALL_DEFAULT is the one used when the variable is unset. */
#define MLAKV_DEC_SMALL_DEFAULT 0
#define MLAKV_DEC_SMALL_COUNT 5

/* wgmma (sm_90a) variant (sm90/decode_sm90.cuh): 64-head blocks, 2 warpgroups, 64-record
 * tiles; used on cc 9.0 devices from MLAKV_DEC90_MIN_HEADS heads up (decode.cu). */
#define MLAKV_DEC90_THREADS 256
#define MLAKV_DEC90_NK 64
#define MLAKV_DEC90_MIN_HEADS 33
/* v5 (sm90/decode_sm90_direct.cuh, the default for the NVFP4 records): registers after
 * setmaxnreg of the producer warpgroup (two records in flight per thread), the S + softmax +
 * P V warpgroup and the P V + producer warpgroup (one record), P + S + V <= 3 x 168, by record
 * format (fmt: 1 nvfp4_ds_mla, 2 nvfp4_fp8_rope, 3 two-level). Each format keeps the split that
 * measured fastest for it (D12: 104 / 200 / 200 against the former 104 / 208 / 192 took 2 % off
 * nvfp4_ds_mla at b=128 h=64 and made nvfp4_fp8_rope 16 % slower, which 112 / 192 / 200 does
 * not; the two-level record, whose warpgroup 1 computes S in two chains and keeps a copy of it
 * for the softmax, spills at 104 / 200 / 200 and not at 96 / 216 / 192, D17). */
#define MLAKV_DEC90D_PROD_REGS(fmt) ((fmt) == 2 ? 112 : (fmt) == 3 ? 96 : 104)
#define MLAKV_DEC90D_S_REGS(fmt) ((fmt) == 2 ? 192 : (fmt) == 3 ? 216 : 200)
#define MLAKV_DEC90D_V_REGS(fmt) ((fmt) == 3 ? 192 : 200)
/* v5 (D) and s5 (S) by record format: 1 = each NVFP4 group scale is taken as bf16 bits (the E4M3
 * byte shifted left by 4: the scale times 2^-120, exact for every byte) against E2M1 tables
 * times 2^120, instead of converting it through fp16 and fp32 (decode_kernel.cuh). Where it
 * is on, it measured 0.6-1.4 % faster; v5 of nvfp4_ds_mla measured 3-10 % slower with it in
 * every form tried (ptxas's schedule of that kernel, as with the divider in D14), so that kernel
 * keeps the conversions (NOTES D20). */
#define MLAKV_DEC90D_SF_BITS(fmt) ((fmt) != 1)
#define MLAKV_DEC90S_SF_BITS(fmt) 1
/* 1: v5 of nvfp4_ds_mla computes its record offsets with the division, not the host's
 * multiplier (mlakv_dec_rec_offset): with the multiplier ptxas's schedule of that kernel measured
 * 2.5-2.7 % slower, and moving its registers to 112 / 192 / 200 did not recover it (D14) */
#ifndef MLAKV_DEC90D_DIV_FMT1
#define MLAKV_DEC90D_DIV_FMT1 1
#endif
/* v5's producers keep the E2M1 permute tables in vector registers, by record format: ptxas
 * otherwise copies them from uniform registers before each permute (~230 instructions fewer per
 * kernel). D14 call 9: the two-level record 3.1-3.2 % faster, nvfp4_fp8_rope 0.8-1.3 %,
 * nvfp4_ds_mla 0-1 % slower at b=128 h=64 (so it keeps the copies) */
#define MLAKV_DEC90D_PIN_TAB(fmt) ((fmt) != 1)
/* v5's softmax moves a row's running max only when a tile's max exceeds it by more than this
 * (log2 units; 0 = whenever it grows): P <= 2^this, and tiles that move no max of a warp's rows
 * skip the O rescale (128 multiplies per thread in each consumer warpgroup). s5 keeps the exact
 * max (its consumer is not its limit: no gain measured, D10). */
#ifndef MLAKV_DEC90_RESCALE_LOG2
#define MLAKV_DEC90_RESCALE_LOG2 8.0f
#endif
/* v2 / v3 (warp-specialized, selectable with MLAKV_CUDA_DECODE_SM90): MLAKV_DEC90WS_PWG producer
 * warpgroups (gathers, de-quantization) and two consumer warpgroups (wgmma); registers after
 * setmaxnreg, within the launch cap: 128 (PWG P + 2 C) <= 65536 */
#define MLAKV_DEC90WS_PWG 1
#define MLAKV_DEC90WS_PROD_REGS 88
#define MLAKV_DEC90WS_CONS_REGS 208

/* Small-head register-A wgmma kernel (sm90/decode_t90.cuh): one warpgroup per CTA, 64-candidate
 * tiles, MLAKV_T90_MINB CTAs per SM (shared memory and the split plan are sized for it). */
#define MLAKV_T90_THREADS 128
#define MLAKV_T90_NK 64
#define MLAKV_T90_MINB 2
/* record gather of the t90 kernel: 1 cp.async with a flat chunk mapping (a warp instruction
 * covers ~1 record), 2 bulk copies (TMA, one per record, mbarrier per stage), 3 cp.async with
 * 2 threads per record; MLAKV_T90_MODE bits 3-4 override it (diagnostics) */
#define MLAKV_T90_GATHER_DEFAULT 1

/* "s5" small-head kernel (sm90/decode_sm90_small.cuh): two producer warpgroups and one
 * transposed consumer warpgroup, one CTA per SM. Tiles in flight per producer: cp.async stage
 * slots up to 16 heads (a third slot does not fit), records in registers at 32 heads (3 and 4
 * measured no faster there, bench/NOTES_decode.md D6); registers after setmaxnreg
 * (2 P + C <= 3 x 168; the consumer holds 4N fp32 of O^T). 32 heads: 136 / 232 (D12: b=64
 * h=32 56.9-57.1 -> 55.7 us; at 16 heads it made b=16 2.6 % slower, so they keep 144 / 216). */
#define MLAKV_DEC90S_NK 64 /* candidates per tile (the split plan in decode.cu uses it) */
#define MLAKV_DEC90S_DEPTH(n) 2
#define MLAKV_DEC90S_PROD_REGS(n) ((n) == 32 ? 136 : 144)
/* staged producers (<= 16 heads): 1 pair of producer warpgroups for every tile (384 threads) or
 * 2 pairs, one per tile parity (640 threads), from MLAKV_DEC90S_PAIRS_MIN_TILES tiles per split
 * (MLAKV_S5_PAIRS=1|2 overrides: A/B, tests). setmaxnreg only moves registers inside the CTA's
 * launch allocation (640 x 96), so 4 P + C <= 5 x 96: more and the consumer's setmaxnreg.inc
 * waits forever. 80 / 160 (D12; was 88 / 128): b=64 h=16 42.6-43.1 -> 42.3-42.5 us, b=128 h=16
 * 70.5-70.7 -> 69.5-70.0, the two-level record 46.2-46.6 -> 45.8-46.0 */
#define MLAKV_DEC90S_PAIRS_MIN_TILES 16 /* 2 pairs from this many tiles per split up (D7) */
#define MLAKV_DEC90S_PAIRS_PROD_REGS 80
#define MLAKV_DEC90S_PAIRS_CONS_REGS 160
#define MLAKV_DEC90S_CONS_REGS(n) ((n) == 32 ? 232 : 216)
/* default dispatch to s5 (<= 32 NVFP4 heads) from this many query rows (batch * s_q) up, and
 * with fewer rows up to MLAKV_DEC90S_ONE_ROW_HEADS heads (b=1: s5 / mma.sync 6.2 / 6.4 us at
 * 8 heads, 7.5 / 7.2 at 16, 10.0 / 10.0 at 32; bench/NOTES_decode.md D7) */
#define MLAKV_DEC90S_MIN_ROWS 2
#define MLAKV_DEC90S_ONE_ROW_HEADS 8
/* 1: s5's staged producers keep the E2M1 permute tables in vector registers (as v5's for the
 * 368-B records; D14 call 11: nvfp4_fp8_rope b=64 h=16 -2.5 %, the other formats and shapes
 * within +-0.5 %) */
#ifndef MLAKV_DEC90S_PIN_TAB
#define MLAKV_DEC90S_PIN_TAB 1
#endif

#endif
