/* Tile plan of the mma.sync decode kernel (sm_80 and newer, every record format, 1..128 heads):
 * 256 threads, HG 16-head groups per CTA; typed shared-memory plan (Shape). */
#ifndef MLAKV_CUDA_DECODE_MMA_CONFIG_H
#define MLAKV_CUDA_DECODE_MMA_CONFIG_H

#include <stddef.h>

#include "cuda/common/record.cuh"
#include "cuda/decode/config.h"

namespace mlakv::decode::mma {

constexpr int kThreads = 256;  /* 8 warps per CTA */
constexpr int kWarps = 8;
constexpr int kRowPitch = 584; /* bf16 row pitch of Q and K tiles in shared memory: 1168 B,
                                  16 B mod 128, so ldmatrix rows hit distinct banks */

/* Candidate tile (records de-quantized together) and raw-record stages in flight:
 * one head group: 32-record tiles, 2 raw stages (small CTAs, 2 per SM);
 * 2 or 4 head groups: 64-record tiles, 1 raw stage (the largest CTA fits 227 KB). */
constexpr int tile_records(int hg) { return hg == 1 ? 32 : 64; }
constexpr int raw_stages(int hg) { return hg == 1 ? 2 : 1; }

/* Tile plan for HG head groups: candidates per tile (NK), raw-record stages (ST), CTAs per SM
 * (MINB: launch bounds and the split plan). */
template <int HG>
struct Tile {
    static constexpr int NK = tile_records(HG);
    static constexpr int ST = raw_stages(HG);
    static constexpr int MINB = HG == 1 ? 2 : 1;
};

template <int FMT, int HG>
struct Shape {
    static constexpr int NK = Tile<HG>::NK, ST = Tile<HG>::ST;
    static constexpr int MINB = Tile<HG>::MINB;
    static constexpr int HP = HG * 16, KS = kWarps / HG, SPITCH = NK + 8;
    static constexpr int REC = cuda::RecordTraits<FMT>::bytes;
    static constexpr size_t Q_BYTES = (size_t)HP * kRowPitch * 2;
    static constexpr size_t K_BYTES = (size_t)NK * kRowPitch * 2;
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


} // namespace mlakv::decode::mma

#endif
