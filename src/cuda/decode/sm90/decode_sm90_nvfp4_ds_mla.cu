/* wgmma sparse MLA decode instantiated for the nvfp4_ds_mla record (body: decode_sm90.cuh). */
#include "cuda/decode/sm90/decode_sm90.cuh"

cudaError_t mlakv_decode90_launch_nvfp4_ds_mla(const mlakv_decode_params *p, cudaStream_t s) {
    return mlakv_decode90_launch<1>(p, s);
}

#if MLAKV_DEC90_TRACE
/* trace builds only (not in the public API): the timeline of the last v5 launch */
MLAKV_DEC90_BUF_READER(mlakv_cuda_v5_trace_read, mlakv_dec90_trace_buf)
MLAKV_DEC90_BUF_READER(mlakv_cuda_v5_cta_read, mlakv_dec90_cta_buf)
#endif
