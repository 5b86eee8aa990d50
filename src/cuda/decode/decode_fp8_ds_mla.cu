/* Sparse MLA decode instantiated for the fp8_ds_mla record (kernel body: decode_kernel.cuh). */
#include "cuda/decode/decode_kernel.cuh"

cudaError_t mlakv_decode_launch_fp8_ds_mla(const mlakv_decode_params *p, cudaStream_t s) {
    return mlakv_decode_launch<0>(p, MLAKV_DEC_SMALL_DEFAULT < 4 ? MLAKV_DEC_SMALL_DEFAULT : 0, s);
}

cudaError_t mlakv_decode_launch_var_fp8_ds_mla(const mlakv_decode_params *p, int kv, cudaStream_t s) {
    return mlakv_decode_launch<0>(p, kv, s);
}
