/* Host-side launch shared by the decode kernels and the combine kernel. */
#ifndef MLAKV_CUDA_COMMON_LAUNCH_CUH
#define MLAKV_CUDA_COMMON_LAUNCH_CUH

#include "cuda/decode/params.h"

namespace mlakv::cuda {

/* Launch with the programmatic-stream-serialization attribute (the kernels start with
 * griddepcontrol.wait, so stream order is kept); plain launch if the driver refuses it
 * (e.g. a driver without PDL). */
static inline cudaError_t launch_pdl(void (*kernel)(const decode::Params), dim3 grid,
                                     dim3 block, size_t smem, cudaStream_t stream,
                                     const decode::Params *p) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    cudaError_t err = cudaLaunchKernelEx(&cfg, kernel, *p);
    if (err != cudaSuccess) {
        (void)cudaGetLastError();
        kernel<<<grid, block, smem, stream>>>(*p);
        err = cudaGetLastError();
    }
    return err;
}

} // namespace mlakv::cuda

#endif
