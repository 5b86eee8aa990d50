/* Launchers of the wgmma (sm_90a) sparse MLA decode, one per record format
 * (sm90/decode_sm90_<format>.cu); same parameters and outputs as the mma.sync kernel. */
#ifndef MLAKV_CUDA_DECODE_SM90_H
#define MLAKV_CUDA_DECODE_SM90_H

#include "cuda/decode/params.h"

cudaError_t mlakv_decode90_launch_fp8_ds_mla(const mlakv_decode_params *p, cudaStream_t s);
cudaError_t mlakv_decode90_launch_nvfp4_ds_mla(const mlakv_decode_params *p, cudaStream_t s);
cudaError_t mlakv_decode90_launch_nvfp4_fp8_rope(const mlakv_decode_params *p, cudaStream_t s);
cudaError_t mlakv_decode90_launch_nvfp4_token_scale(const mlakv_decode_params *p, cudaStream_t s);

/* Small-head (<= 32 heads) register-A wgmma kernel (decode_t90.cuh), NVFP4 records only; the
 * split plan must use its 64-candidate tile and 2 CTAs per SM (decode.cu). */
cudaError_t mlakv_decode_t90_launch_nvfp4_ds_mla(const mlakv_decode_params *p, cudaStream_t s);
cudaError_t mlakv_decode_t90_launch_nvfp4_fp8_rope(const mlakv_decode_params *p, cudaStream_t s);

/* Small-head (<= 32 heads) "s5" kernel (decode_sm90_small.cuh), NVFP4 records only; the split
 * plan must use its 64-candidate tile and one CTA per SM (decode.cu). */
cudaError_t mlakv_decode90s_launch_nvfp4_ds_mla(const mlakv_decode_params *p, cudaStream_t s);
cudaError_t mlakv_decode90s_launch_nvfp4_fp8_rope(const mlakv_decode_params *p, cudaStream_t s);
cudaError_t mlakv_decode90s_launch_nvfp4_token_scale(const mlakv_decode_params *p, cudaStream_t s);

#endif
