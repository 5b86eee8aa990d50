/* Small-head register-A wgmma decode instantiated for the nvfp4_ds_mla record (body: decode_t90.cuh). */
#include "cuda/decode/sm90/decode_t90.cuh"

cudaError_t mlakv_decode_t90_launch_nvfp4_ds_mla(const mlakv_decode_params *p, cudaStream_t s) {
    return mlakv_decode_t90_launch<1>(p, s);
}
