/* Small-head "s5" wgmma decode instantiated for the nvfp4_ds_mla record (body: decode_sm90_small.cuh). */
#include "cuda/decode/sm90/decode_sm90_small.cuh"

cudaError_t mlakv_decode90s_launch_nvfp4_ds_mla(const mlakv_decode_params *p, cudaStream_t s) {
    return mlakv_decode90s_launch<1>(p, s);
}
