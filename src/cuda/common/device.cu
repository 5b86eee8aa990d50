/* Device checks shared by every CUDA entry point.
 *
 * The first call on a device id queries its compute capability, multiprocessor count and
 * whether this binary has code for it, and caches the answer; later calls cost one
 * cudaGetDevice plus an atomic load (the 64-token write launch budget is a few microseconds,
 * so no attribute queries on the hot path). */
#include "cuda/common/status.cuh"

#include <atomic>
#include <cstdio>

/* Architectures compiled into this build (CMake passes them to nvcc as a definition when it
 * can; the fallback names the project default). */
#ifdef MLAKV_CUDA_ARCH_LIST
static const char kCompiledArchs[] = MLAKV_CUDA_ARCH_LIST;
#else
static const char kCompiledArchs[] = "sm_80, sm_90a (project default)";
#endif

namespace mlakv::cuda {
/* The smallest kernel: its attributes tell whether this binary has code the GPU can run. */
__global__ void probe_kernel() {}
} // namespace mlakv::cuda

extern "C" int mlakv_cuda_compiled(void) { return 1; }

namespace {

enum { kMaxDevices = 64 };
enum { kUnknown = 0, kReady = 1, kUnsupported = 2 };

/* state is written last (release) after the fields it publishes; two threads racing on the
 * first call both compute the same answer, so the duplicate store is harmless. */
struct DeviceInfo {
    std::atomic<int> state;
    int sm_count;
    int cc_major;
    int cc_minor;
};

DeviceInfo g_devices[kMaxDevices];

mlakv_status unsupported(const char *fn, int dev, int major, int minor) {
    return mlakv_fail(MLAKV_ERR_UNSUPPORTED_DEVICE,
                      "%s: device %d has compute capability %d.%d; this build has code for %s "
                      "(sm_80 or newer is required)",
                      fn, dev, major, minor, kCompiledArchs);
}

mlakv_status query(const char *fn, int dev, DeviceInfo *info) {
    int major = 0, minor = 0, sms = 0;
    MLAKV_CUDA_TRY(fn, cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    MLAKV_CUDA_TRY(fn, cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
    MLAKV_CUDA_TRY(fn, cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    cudaFuncAttributes attr;
    cudaError_t err = cudaFuncGetAttributes(&attr, mlakv::cuda::probe_kernel);
    if (err != cudaSuccess) (void)cudaGetLastError(); /* clear the non-sticky error */
    if (info) {
        info->sm_count = sms;
        info->cc_major = major;
        info->cc_minor = minor;
        info->state.store(major < 8 || err != cudaSuccess ? kUnsupported : kReady,
                          std::memory_order_release);
    }
    if (major < 8 || err != cudaSuccess) return unsupported(fn, dev, major, minor);
    return MLAKV_OK;
}

} // namespace

mlakv_status mlakv::cuda::device_ready(const char *fn, int *sm_count, int *cc_major) {
    int dev = -1;
    cudaError_t err = cudaGetDevice(&dev);
    if (err == cudaSuccess && dev >= 0 && dev < kMaxDevices) {
        DeviceInfo *info = &g_devices[dev];
        int state = info->state.load(std::memory_order_acquire);
        if (state == kReady) {
            if (sm_count) *sm_count = info->sm_count;
            if (cc_major) *cc_major = info->cc_major;
            return MLAKV_OK;
        }
        if (state == kUnsupported) return unsupported(fn, dev, info->cc_major, info->cc_minor);
    }
    /* Slow path: first call on this device, or no device at all. */
    int count = 0;
    cudaError_t cerr = cudaGetDeviceCount(&count);
    if (cerr != cudaSuccess || count == 0) {
        (void)cudaGetLastError();
        return mlakv_fail(MLAKV_ERR_NO_CUDA, "%s: no usable CUDA device (%s)", fn,
                          cerr != cudaSuccess ? cudaGetErrorString(cerr) : "0 devices");
    }
    if (err != cudaSuccess) {
        (void)cudaGetLastError();
        return mlakv_fail(MLAKV_ERR_CUDA, "%s: cudaGetDevice failed: %s", fn,
                          cudaGetErrorString(err));
    }
    DeviceInfo *info = dev >= 0 && dev < kMaxDevices ? &g_devices[dev] : NULL;
    if (info == NULL) {
        DeviceInfo scratch;
        scratch.state.store(kUnknown);
        MLAKV_TRY(query(fn, dev, &scratch));
        if (sm_count) *sm_count = scratch.sm_count;
        if (cc_major) *cc_major = scratch.cc_major;
        return MLAKV_OK;
    }
    MLAKV_TRY(query(fn, dev, info));
    if (sm_count) *sm_count = info->sm_count;
    if (cc_major) *cc_major = info->cc_major;
    return MLAKV_OK;
}

extern "C" mlakv_status mlakv_cuda_check_device(void) {
    return mlakv::cuda::device_ready("mlakv_cuda_check_device", NULL, NULL);
}
