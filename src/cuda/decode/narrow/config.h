/* Tile plan of the narrow-head NVFP4 kernel (sm_90a, 1..32 heads): one CTA per query row and
 * split, the heads as the wgmma N dimension (S^T = K Q^T, O^T += V^T P^T), two producer
 * warpgroups (two pairs from 16 tiles per split up to 16 heads) and one consumer warpgroup,
 * 64-record tiles, one CTA per SM; typed shared-memory plan, registers per warpgroup. */
#ifndef MLAKV_CUDA_DECODE_NARROW_CONFIG_H
#define MLAKV_CUDA_DECODE_NARROW_CONFIG_H

#include <stddef.h>

#include "cuda/common/record.cuh"
#include "cuda/decode/common/handshake.h"
#include "cuda/decode/config.h"

namespace mlakv::decode::narrow {

/* Tiles in flight per producer: cp.async stage slots up to 16 heads (a third slot does not fit),
 * records in registers at 32 heads (3 and 4 measured no faster there); registers after
 * setmaxnreg (2 P + C <= 3 x 168; the consumer holds 4N fp32 of O^T). 32 heads: 136 / 232
 * (b=64 h=32 56.9-57.1 -> 55.7 us; at 16 heads it made b=16 2.6 % slower, so they keep
 * 144 / 216). */
constexpr int kTile = 64; /* candidates per tile */
constexpr int stage_depth(int) { return 2; }
constexpr int producer_regs(int n) { return n == 32 ? 136 : 144; }
constexpr int consumer_regs(int n) { return n == 32 ? 232 : 216; }
/* staged producers (<= 16 heads): 1 pair of producer warpgroups for every tile (384 threads) or
 * 2 pairs, one per tile parity (640 threads), from kPairsMinTiles tiles per split
 * (1-5 % faster from there, 2-9 % slower below). setmaxnreg only moves registers inside the
 * CTA's launch allocation (640 x 96), so 4 P + C <= 5 x 96: more and the consumer's
 * setmaxnreg.inc waits forever. 80 / 160 against 88 / 128: b=64 h=16 42.6-43.1 -> 42.3-42.5 us,
 * b=128 h=16 70.5-70.7 -> 69.5-70.0, the two-level record 46.2-46.6 -> 45.8-46.0 */
constexpr int kPairsMinTiles = 16;
constexpr int kPairsProducerRegs = 80;
constexpr int kPairsConsumerRegs = 160;
/* the default dispatch runs this kernel from this many query rows (batch * s_q) up, and with
 * fewer rows up to kOneRowHeads heads (b=1: this kernel / the mma.sync kernel
 * 6.2 / 6.4 us at 8 heads, 7.5 / 7.2 at 16, 10.0 / 10.0 at 32) */
constexpr int kMinRows = 2;
constexpr int kOneRowHeads = 8;
/* true: the staged producers keep the E2M1 permute tables in vector registers (nvfp4_fp8_rope b=64
 * h=16 -2.5 %, the other formats and shapes within +-0.5 %) */
constexpr bool kPinTables = true;
/* group scales as bf16 bits for every NVFP4 record (wide/config.h says what that is) */
constexpr bool scale_bits(int) { return true; }

/* PR: producer warpgroup pairs (kPairs* above): 1 = 384 threads, 2 = 640
 * threads (<= 16 heads) */
template <int FMT, int N, int PR = 1>
struct Shape {
    static constexpr int NK = kTile;
    static constexpr int THREADS = PR == 2 ? 640 : kHandshakeThreads;
    static constexpr int CAP = (65536 / THREADS) & ~7; /* registers per thread at launch */
    static_assert(PR == 1 || N <= 16, "two producer pairs only with the staged path");
    /* setmaxnreg redistributes the launch allocation (THREADS x CAP) and never grows it */
    static_assert(PR == 2 ? 4 * kPairsProducerRegs + kPairsConsumerRegs <= 5 * CAP
                          : 2 * producer_regs(N) + consumer_regs(N) <= 3 * CAP,
                  "registers after setmaxnreg exceed the launch allocation");
    static constexpr size_t Q_BYTES = (size_t)N * kQkDim * 2;  /* N x 1152: 1024-aligned */
    static constexpr size_t KBUF = (size_t)NK * kQkDim * 2;    /* 72 KB */
    static constexpr size_t SMALL = 2 * 8 * 4 /* valid-mask words */ + 2 * 4 * N * 4 /* column
                                    maxima per warp, by tile parity */ + 4 * N * 4 /* sums */;
    /* up to 16 heads the raw records of STG tiles are staged by cp.async (room left by Q) */
    static constexpr int REC = cuda::RecordTraits<FMT>::bytes;
    static constexpr int STG = N <= 16 ? stage_depth(N) : 0;
    static constexpr size_t STAGE = (size_t)STG * NK * REC + (size_t)STG * NK * 4 /* indices */;
    /* the two-level record: each buffer's token scales (engine mode applies them to S and P) */
    static constexpr size_t TS_BYTES = FMT == 3 ? 2 * NK * 4 : 0;
    static constexpr size_t SMEM = 1024 + Q_BYTES + 2 * KBUF + STAGE + SMALL + TS_BYTES;
    static_assert(SMEM <= 232448, "shared memory");
};

/* named barriers of the consumer warpgroup (128 threads); FULL / EMPTY as the wide-head kernel (384 threads) */
enum {
    kBarColumnMax = 6, /* any score above the reference (OR); column maxima of the 4 warps written */
    kBarP = 7    /* P^T complete */
};


} // namespace mlakv::decode::narrow

#endif
