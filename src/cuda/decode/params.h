/* Host -> kernel parameters of the sparse MLA decode (plain struct, validated by dispatch.cu). */
#ifndef MLAKV_CUDA_DECODE_PARAMS_H
#define MLAKV_CUDA_DECODE_PARAMS_H

#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "common/divider.h"

namespace mlakv::decode {

struct Params {
    const uint8_t *base;          /* cache base (device) */
    int64_t block_size, block_stride_bytes, capacity;
    mlakv_divider blk;            /* idx / block_size without a division (common/divider.h) */
    int batch, s_q, heads, topk;
    const __nv_bfloat16 *q;
    int64_t q_sb, q_st, q_sh;     /* elements */
    const int32_t *indices;
    int64_t i_sb, i_st;           /* elements */
    const int32_t *lengths;       /* optional */
    float sm_scale_log2;          /* sm_scale * log2(e) */
    const float *sink;            /* optional [heads] */
    __nv_bfloat16 *out;           /* [batch, s_q, heads, 512] */
    float *lse;                   /* [batch, s_q, heads] */
    float *part_o;                /* [nsplit, batch*s_q, heads, 512] when nsplit > 1 */
    float *part_lse;              /* [nsplit, batch*s_q, heads] */
    int nsplit;                   /* splits of the candidate list per query row */
    int tiles_per_split;          /* candidate tiles (of NK) per split */
    int head_groups;              /* 16-head groups per CTA: 1, 2 or 4 */
    int head_blocks;              /* CTAs along heads */
    int opaque_zero;              /* always 0: kernels read it to build values that ptxas cannot
                                     fold into constants (cuda::e2m1_tables_pinned) */
    /* The cache's latent scale s_l (static NVFP4 records): score = sm_scale (s_l q_lat.k_lat +
     * q_rope.k_rope) = sm_scale s_l (q_lat.k_lat + (q_rope / s_l).k_rope), so s_l joins
     * sm_scale_log2, the RoPE part of q is loaded as bf16(q_rope * q_rope_scale) with
     * q_rope_scale = 1 / s_l, and out = s_l P V through out_scale. Those two steps live in a
     * second instantiation of each kernel (template flag SC, chosen when q_rope_scaled is set):
     * a runtime branch for them cost the wide-head kernel 5-9 % (H100, b=128 h=64 and
     * b=128 s_q=2 h=128), and the instantiation without the scale is the code without it. */
    float out_scale;
    float q_rope_scale;
    int q_rope_scaled;
};

} // namespace mlakv::decode

#endif
