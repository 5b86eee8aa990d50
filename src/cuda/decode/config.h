/* Constants shared by every sparse MLA decode kernel (each kernel family's own tile plan is in
 * its folder's config.h). */
#ifndef MLAKV_CUDA_DECODE_CONFIG_H
#define MLAKV_CUDA_DECODE_CONFIG_H

#define MLAKV_DEC_QK 576        /* key/query head dim: 512 latent + 64 RoPE */
#define MLAKV_DEC_V 512         /* value dim */
#define MLAKV_DEC_MAX_HG 4      /* 16-head groups per CTA at most (64-head blocks) */
#define MLAKV_DEC_MAX_SPLITS 128 /* split-KV partials per query row at most */

#define MLAKV_LOG2E 1.4426950408889634f
#define MLAKV_LN2 0.6931471805599453f

/* The sm_90a kernels' lazy softmax: a row's running max moves only when a tile's max exceeds it
 * by more than this (log2 units; 0 = whenever it grows): P <= 2^this, and tiles that move no max
 * skip the O rescale (128 multiplies per thread in each consumer warpgroup of the wide-head
 * kernel). */
#ifndef MLAKV_DEC90_RESCALE_LOG2
#define MLAKV_DEC90_RESCALE_LOG2 8.0f
#endif

#endif
