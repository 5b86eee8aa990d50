/* wgmma sparse MLA decode instantiated for the nvfp4_token_scale record (body: decode_sm90.cuh). */
#include "cuda/decode/sm90/decode_sm90.cuh"

cudaError_t mlakv_decode90_launch_nvfp4_token_scale(const mlakv_decode_params *p, cudaStream_t s) {
    return mlakv_decode90_launch<3>(p, s);
}
