/* Tile plan of the fp8_ds_mla wgmma kernel (sm_90a, 33..128 heads): 64-head blocks, two
 * warpgroups, 64-record tiles gathered by cp.async; typed shared-memory plan. */
#ifndef MLAKV_CUDA_DECODE_FP8_WGMMA_CONFIG_H
#define MLAKV_CUDA_DECODE_FP8_WGMMA_CONFIG_H

#include <stddef.h>

#include "cuda/common/record.cuh"
#include "cuda/decode/config.h"

namespace mlakv::decode::fp8_wgmma {

constexpr int kThreads = 256;
constexpr int kTile = 64; /* candidates per tile */

template <int FMT>
struct Shape {
    static constexpr int NK = kTile, HP = 64;
    static constexpr int REC = cuda::RecordTraits<FMT>::bytes;
    static constexpr size_t Q_BYTES = (size_t)HP * kQkDim * 2;  /* 72 KB */
    static constexpr size_t K_BYTES = (size_t)NK * kQkDim * 2;  /* 72 KB */
    static constexpr size_t P_BYTES = (size_t)HP * NK * 2;            /* 8 KB */
    /* two raw stages where they fit in 227 KB (432/368-B records), one for the 656-B record */
    static constexpr int ST = REC * NK * 2 + Q_BYTES + K_BYTES + P_BYTES + 8192 <= 232448 ? 2 : 1;
    static constexpr size_t RAW_BYTES = (size_t)ST * NK * REC;
    static constexpr size_t ADDR_BYTES = (size_t)NK * 8;
    static constexpr size_t VALID_BYTES = (size_t)(ST + 1) * NK * 4;
    static constexpr size_t RED_BYTES = (size_t)2 * 2 * HP * 4; /* row max and row sum per WG */
    static constexpr size_t SMEM = 1024 /* alignment slack */ + Q_BYTES + K_BYTES + P_BYTES +
                                   RAW_BYTES + ADDR_BYTES + VALID_BYTES + RED_BYTES;
};


} // namespace mlakv::decode::fp8_wgmma

#endif
