/* The mma.sync decode kernel for the nvfp4_fp8_rope record. */
#include "cuda/decode/launchers.h"
#include "cuda/decode/mma/kernel.cuh"

cudaError_t mlakv_decode_mma_nvfp4_fp8_rope(const mlakv_decode_params *p, int, cudaStream_t s) {
    return mlakv_decode_launch<2>(p, s);
}
