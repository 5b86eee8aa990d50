/* Device checks shared by every CUDA entry point. */
#include "cuda/cuda_common.cuh"

#include <cstdio>

/* Architectures compiled into this build (CMake passes them to nvcc). */
static const char kCompiledArchs[] = "sm_80, sm_90a";

/* The smallest kernel: its attributes tell whether this binary has code the GPU can run. */
__global__ void mlakv_probe_kernel() {}

extern "C" int mlakv_cuda_compiled(void) { return 1; }

mlakv_status mlakv_cuda_device_ready(const char *fn, int *sm_count, int *cc_major) {
    int dev = 0, count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0) {
        (void)cudaGetLastError();
        return mlakv_fail(MLAKV_ERR_NO_CUDA, "%s: no usable CUDA device (%s)", fn,
                          err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
    }
    MLAKV_CUDA_TRY(fn, cudaGetDevice(&dev));
    int major = 0, minor = 0, sms = 0;
    MLAKV_CUDA_TRY(fn, cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    MLAKV_CUDA_TRY(fn, cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
    MLAKV_CUDA_TRY(fn, cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    cudaFuncAttributes attr;
    err = cudaFuncGetAttributes(&attr, mlakv_probe_kernel);
    if (major < 8 || err != cudaSuccess) {
        (void)cudaGetLastError();
        return mlakv_fail(MLAKV_ERR_UNSUPPORTED_DEVICE,
                          "%s: device %d has compute capability %d.%d; this build has code for %s",
                          fn, dev, major, minor, kCompiledArchs);
    }
    if (sm_count) *sm_count = sms;
    if (cc_major) *cc_major = major;
    return MLAKV_OK;
}

extern "C" mlakv_status mlakv_cuda_check_device(void) {
    return mlakv_cuda_device_ready("mlakv_cuda_check_device", NULL, NULL);
}
