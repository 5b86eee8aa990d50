/* The narrow-head NVFP4 decode kernel for the nvfp4_fp8_rope record. */
#include "cuda/decode/launchers.h"
#include "cuda/decode/narrow/kernel.cuh"

namespace mlakv::decode::narrow {

cudaError_t launch_nvfp4_fp8_rope(const Params *p, int pairs, cudaStream_t s) {
    return launch<2>(p, pairs, s);
}

} // namespace mlakv::decode::narrow
