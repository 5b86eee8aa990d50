/* The fp8_ds_mla record's wgmma decode kernel. */
#include "cuda/decode/fp8_wgmma/kernel.cuh"
#include "cuda/decode/launchers.h"

namespace mlakv::decode::fp8_wgmma {

cudaError_t launch_fp8_ds_mla(const Params *p, int, cudaStream_t s) {
    return launch(p, s);
}

} // namespace mlakv::decode::fp8_wgmma
