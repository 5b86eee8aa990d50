/* Shared by the CUDA launchers: status mapping for runtime errors and the device check. */
#ifndef MLAKV_CUDA_COMMON_STATUS_CUH
#define MLAKV_CUDA_COMMON_STATUS_CUH

#include <cuda_runtime.h>

#include "common/status.h"

/* Turn a failed runtime call into MLAKV_ERR_CUDA with the call and CUDA's message. */
#define MLAKV_CUDA_TRY(fn, call)                                                            \
    do {                                                                                    \
        cudaError_t mlakv_cu_err_ = (call);                                                 \
        if (mlakv_cu_err_ != cudaSuccess)                                                   \
            return mlakv_fail(MLAKV_ERR_CUDA, "%s: %s failed: %s", fn, #call,               \
                              cudaGetErrorString(mlakv_cu_err_));                           \
    } while (0)

namespace mlakv::cuda {

/* Check the current device once per call: sm_80 or newer, with code in this build.
 * On success *sm_count gets the multiprocessor count (may be NULL). */
mlakv_status device_ready(const char *fn, int *sm_count, int *cc_major);

} // namespace mlakv::cuda

#endif
