/* Split-KV combine kernel: one CTA per (query row x head, quarter of the 512 value dims)
 * runs the merge of combine.cuh over the fp32 partials of the decode kernel. */
#include "cuda/decode/combine.cuh"
#include "cuda/decode/config.h"
#include "cuda/decode/params.h"

#define COMBINE_WARPS MLAKV_COMBINE_WARPS

__global__ void __launch_bounds__(COMBINE_WARPS * 32)
    mlakv_decode_combine_kernel(const mlakv_decode_params p) {
    __shared__ mlakv_combine_smem sm;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory"); /* decode grid done, partials visible */
#endif
    mlakv_combine_piece<false>(p, (int64_t)blockIdx.x, (int)blockIdx.y, sm);
}

cudaError_t mlakv_decode_launch_combine(const mlakv_decode_params *p, cudaStream_t s) {
    const int64_t rows = (int64_t)p->batch * p->s_q * p->heads;
    /* programmatic dependent launch: the combine grid is set up while the decode grid drains
     * (griddepcontrol.wait in the kernel orders it after the decode grid's memory) */
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)rows, 4);
    cfg.blockDim = dim3(COMBINE_WARPS * 32);
    cfg.dynamicSmemBytes = 0;
    cfg.stream = s;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    cudaError_t err = cudaLaunchKernelEx(&cfg, mlakv_decode_combine_kernel, *p);
    if (err != cudaSuccess) { /* e.g. a driver without PDL: plain stream order */
        (void)cudaGetLastError();
        mlakv_decode_combine_kernel<<<cfg.gridDim, cfg.blockDim, 0, s>>>(*p);
        err = cudaGetLastError();
    }
    return err;
}
