/* Constants shared by every sparse MLA decode kernel (each kernel family's own tile plan is in
 * its folder's config.h). */
#ifndef MLAKV_CUDA_DECODE_CONFIG_H
#define MLAKV_CUDA_DECODE_CONFIG_H

namespace mlakv::decode {

constexpr int kQkDim = 576;        /* key/query head dim: 512 latent + 64 RoPE */
constexpr int kVDim = 512;         /* value dim */
constexpr int kMaxHeadGroups = 4;  /* 16-head groups per CTA at most (64-head blocks) */
constexpr int kMaxSplits = 128;    /* split-KV partials per query row at most */

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

} // namespace mlakv::decode

/* The sm_90a kernels' lazy softmax: a row's running max moves only when a tile's max exceeds it
 * by more than this (log2 units; 0 = whenever it grows): P <= 2^this, and tiles that move no max
 * skip the O rescale (128 multiplies per thread in each consumer warpgroup of the wide-head
 * kernel). A macro so that an experiment can set it at build time. */
#ifndef MLAKV_LAZY_RESCALE_LOG2
#define MLAKV_LAZY_RESCALE_LOG2 8.0f
#endif

#endif
