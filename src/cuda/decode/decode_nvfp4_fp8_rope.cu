/* Sparse MLA decode instantiated for the nvfp4_fp8_rope record (kernel body: decode_kernel.cuh). */
#include "cuda/decode/decode_kernel.cuh"

cudaError_t mlakv_decode_launch_nvfp4_fp8_rope(const mlakv_decode_params *p, cudaStream_t s) {
    return mlakv_decode_launch<2>(p, MLAKV_DEC_SMALL_DEFAULT < 4 ? MLAKV_DEC_SMALL_DEFAULT : 0, s);
}

cudaError_t mlakv_decode_launch_var_nvfp4_fp8_rope(const mlakv_decode_params *p, int kv, cudaStream_t s) {
    return mlakv_decode_launch<2>(p, kv, s);
}
