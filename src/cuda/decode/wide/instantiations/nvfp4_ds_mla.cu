/* The wide-head NVFP4 decode kernel for the nvfp4_ds_mla record. */
#include "cuda/decode/launchers.h"
#include "cuda/decode/wide/kernel.cuh"

cudaError_t mlakv_decode_wide_nvfp4_ds_mla(const mlakv_decode_params *p, int, cudaStream_t s) {
    return mlakv_decode90_launch<1>(p, s);
}
