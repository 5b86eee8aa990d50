/* Tile plan of the wide-head NVFP4 kernel (sm_90a, 33..128 heads): 64-head blocks, 384 threads
 * (a producer warpgroup, the S + softmax + P V warpgroup, the P V + producer warpgroup),
 * 64-record tiles in two K buffers; typed shared-memory plan, registers per warpgroup. */
#ifndef MLAKV_CUDA_DECODE_WIDE_CONFIG_H
#define MLAKV_CUDA_DECODE_WIDE_CONFIG_H

#include <stddef.h>

#include "cuda/common/record.cuh"
#include "cuda/decode/common/handshake.h"
#include "cuda/decode/config.h"

namespace mlakv::decode::wide {

constexpr int kTile = 64; /* candidates per tile */
/* Registers after setmaxnreg of the producer warpgroup (two records in flight per thread), the
 * S + softmax + P V warpgroup and the P V + producer warpgroup (one record), P + S + V <=
 * 3 x 168, by record format (fmt: 1 nvfp4_ds_mla, 2 nvfp4_fp8_rope, 3 two-level). Each format
 * keeps the split that measured fastest for it: 104 / 200 / 200 against 104 / 208 / 192 took
 * 2 % off nvfp4_ds_mla at b=128 h=64 and made nvfp4_fp8_rope 16 % slower, which 112 / 192 / 200
 * does not; the two-level record, whose warpgroup 1 computes S in two chains and keeps a copy of
 * it for the softmax, spills at 104 / 200 / 200 and not at 96 / 216 / 192. */
constexpr int producer_regs(int fmt) { return fmt == 2 ? 112 : fmt == 3 ? 96 : 104; }
constexpr int score_regs(int fmt) { return fmt == 2 ? 192 : fmt == 3 ? 216 : 200; }
constexpr int value_regs(int fmt) { return fmt == 3 ? 192 : 200; }
/* true: each NVFP4 group scale is taken as bf16 bits (the E4M3 byte shifted left by 4: the scale
 * times 2^-120, exact for every byte) against E2M1 tables times 2^120, instead of converting it
 * through fp16 and fp32 (cuda/common/dequant.cuh). 0.6-1.4 % faster for the 368-B records;
 * 3-10 % slower for nvfp4_ds_mla in every form tried (ptxas's schedule of that kernel), so that
 * format keeps the conversions. */
constexpr bool scale_bits(int fmt) { return fmt != 1; }
/* The producers keep the E2M1 permute tables in vector registers, by record format: ptxas
 * otherwise copies them from uniform registers before each permute (~230 instructions fewer per
 * kernel): the two-level record 3.1-3.2 % faster, nvfp4_fp8_rope 0.8-1.3 %, nvfp4_ds_mla 0-1 %
 * slower at b=128 h=64 (so it keeps the copies) */
constexpr bool pin_tables(int fmt) { return fmt != 1; }

template <int FMT>
struct Shape {
    static constexpr int NK = kTile, HP = 64, NB = 2;
    static constexpr int REC = cuda::RecordTraits<FMT>::bytes;
    static constexpr size_t Q_BYTES = (size_t)HP * kQkDim * 2;      /* 72 KB */
    static constexpr size_t KBUF = (size_t)NK * kQkDim * 2;         /* 72 KB */
    static constexpr size_t SMALL = 128 /* valid-mask words */ + NB * HP * 4 /* alpha */ +
                                    2 * HP * 4 /* red_l */ + HP * 4 /* red_m */ + 3 * 8 /* mbarriers */;
    /* the two-level record, its token scale applied to S and P (engine mode): one fp32 per
     * record of each buffer, after the mbarriers */
    static constexpr size_t TSS = FMT == 3 ? NB * NK * 4 : 0;
    static constexpr size_t SMEM = 1024 + Q_BYTES + NB * KBUF + SMALL + TSS;
    static_assert(SMEM <= 232448, "shared memory");
};


} // namespace mlakv::decode::wide

#endif
