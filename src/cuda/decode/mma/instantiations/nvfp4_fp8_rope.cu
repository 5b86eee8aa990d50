/* The mma.sync decode kernel for the nvfp4_fp8_rope record. */
#include "cuda/decode/launchers.h"
#include "cuda/decode/mma/kernel.cuh"

namespace mlakv::decode::mma {

cudaError_t launch_nvfp4_fp8_rope(const Params *p, int, cudaStream_t s) {
    return launch<2>(p, s);
}

} // namespace mlakv::decode::mma
