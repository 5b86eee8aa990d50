/* Sparse MLA decode instantiated for the fp8_ds_mla record (kernel body: decode_kernel.cuh). */
#include "cuda/decode/decode_kernel.cuh"

cudaError_t mlakv_decode_launch_fp8_ds_mla(const mlakv_decode_params *p, cudaStream_t s) {
    return mlakv_decode_launch<0>(p, s);
}
