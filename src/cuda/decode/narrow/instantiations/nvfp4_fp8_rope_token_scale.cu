/* The narrow-head NVFP4 decode kernel for the nvfp4_fp8_rope_token_scale record. */
#include "cuda/decode/launchers.h"
#include "cuda/decode/narrow/kernel.cuh"

cudaError_t mlakv_decode_narrow_nvfp4_fp8_rope_token_scale(const mlakv_decode_params *p, int pairs, cudaStream_t s) {
    return mlakv_decode90s_launch<3>(p, pairs, s);
}
