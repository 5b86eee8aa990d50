/* Small-head "s5" wgmma decode instantiated for the nvfp4_ds_mla record (body: decode_sm90_small.cuh). */
#include "cuda/decode/sm90/decode_sm90_small.cuh"

cudaError_t mlakv_decode90s_launch_nvfp4_ds_mla(const mlakv_decode_params *p, cudaStream_t s) {
    return mlakv_decode90s_launch<1>(p, s);
}

#if MLAKV_S5_TRACE
/* trace builds only (not in the public API): the timeline of the last s5 launch, see
 * decode_sm90_small.cuh; bench/cuda_decode finds it with dlsym */
extern "C" int mlakv_cuda_s5_trace_read(unsigned long long *dst, size_t count) {
    const size_t n = sizeof(mlakv_s5_trace_buf) / sizeof(unsigned long long);
    return (int)cudaMemcpyFromSymbol(dst, mlakv_s5_trace_buf, (count < n ? count : n) * sizeof(unsigned long long));
}
#endif
