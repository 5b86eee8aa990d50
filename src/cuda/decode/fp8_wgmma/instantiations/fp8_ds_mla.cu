/* The fp8_ds_mla record's wgmma decode kernel. */
#include "cuda/decode/fp8_wgmma/kernel.cuh"
#include "cuda/decode/launchers.h"

cudaError_t mlakv_decode_fp8_wgmma_fp8_ds_mla(const mlakv_decode_params *p, int, cudaStream_t s) {
    return mlakv_decode90_launch_fp8(p, s);
}
