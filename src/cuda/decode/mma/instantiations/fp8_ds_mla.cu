/* The mma.sync decode kernel for the fp8_ds_mla record. */
#include "cuda/decode/launchers.h"
#include "cuda/decode/mma/kernel.cuh"

namespace mlakv::decode::mma {

cudaError_t launch_fp8_ds_mla(const Params *p, int, cudaStream_t s) {
    return launch<0>(p, s);
}

} // namespace mlakv::decode::mma
