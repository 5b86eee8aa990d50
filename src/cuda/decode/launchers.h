/* The launchers of every decode kernel, one per (kernel family, record format), defined in the
 * families' instantiations/ files; the dispatch table (dispatch.cu) holds them. Each launches
 * its kernel for the plan already in p (head groups, splits); `pairs` is the narrow-head
 * kernel's producer pairs (1 or 2) and is ignored by the others. */
#ifndef MLAKV_CUDA_DECODE_LAUNCHERS_H
#define MLAKV_CUDA_DECODE_LAUNCHERS_H

#include "cuda/decode/params.h"

typedef cudaError_t (*mlakv_decode_launch_fn)(const mlakv_decode_params *p, int pairs,
                                              cudaStream_t s);

cudaError_t mlakv_decode_mma_fp8_ds_mla(const mlakv_decode_params *p, int pairs, cudaStream_t s);
cudaError_t mlakv_decode_mma_nvfp4_ds_mla(const mlakv_decode_params *p, int pairs, cudaStream_t s);
cudaError_t mlakv_decode_mma_nvfp4_fp8_rope(const mlakv_decode_params *p, int pairs, cudaStream_t s);
cudaError_t mlakv_decode_mma_nvfp4_fp8_rope_token_scale(const mlakv_decode_params *p, int pairs,
                                                        cudaStream_t s);

cudaError_t mlakv_decode_fp8_wgmma_fp8_ds_mla(const mlakv_decode_params *p, int pairs,
                                              cudaStream_t s);

cudaError_t mlakv_decode_wide_nvfp4_ds_mla(const mlakv_decode_params *p, int pairs, cudaStream_t s);
cudaError_t mlakv_decode_wide_nvfp4_fp8_rope(const mlakv_decode_params *p, int pairs, cudaStream_t s);
cudaError_t mlakv_decode_wide_nvfp4_fp8_rope_token_scale(const mlakv_decode_params *p, int pairs,
                                                         cudaStream_t s);

cudaError_t mlakv_decode_narrow_nvfp4_ds_mla(const mlakv_decode_params *p, int pairs,
                                             cudaStream_t s);
cudaError_t mlakv_decode_narrow_nvfp4_fp8_rope(const mlakv_decode_params *p, int pairs,
                                               cudaStream_t s);
cudaError_t mlakv_decode_narrow_nvfp4_fp8_rope_token_scale(const mlakv_decode_params *p, int pairs,
                                                           cudaStream_t s);

/* Split-KV merge of the partials into out/lse (combine/combine.cu): by_rows selects the
 * one-warp-per-row kernel (up to MLAKV_COMBINE_ROW_SPLITS splits), else the quarter kernels. */
#define MLAKV_COMBINE_ROW_SPLITS 8
cudaError_t mlakv_decode_launch_combine(const mlakv_decode_params *p, bool by_rows,
                                        cudaStream_t s);

/* Adds the number of active indices >= capacity to *count (invalid_indices.cu); launched
 * before the decode kernel when the caller passes mlakv_decode_args.invalid_index_count. */
cudaError_t mlakv_decode_launch_count_invalid(const mlakv_decode_params *p,
                                              unsigned long long *count, cudaStream_t s);

#endif
