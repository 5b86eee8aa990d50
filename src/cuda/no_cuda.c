/* Built instead of src/cuda/ when no CUDA compiler is available: every CUDA entry point
 * reports MLAKV_ERR_NO_CUDA after the same argument checks a caller would hit anyway. */
#include "common/status.h"
#include "mlakv_experimental.h"

#define NO_CUDA(fn) mlakv_fail(MLAKV_ERR_NO_CUDA, "%s: mlakv was built without CUDA", fn)

int mlakv_cuda_compiled(void) { return 0; }

mlakv_status mlakv_cuda_check_device(void) { return NO_CUDA("mlakv_cuda_check_device"); }

mlakv_status mlakv_cuda_write(const mlakv_cache *cache, int64_t n, const void *kv_c,
                              int64_t kv_c_row_stride, const void *k_pe, int64_t k_pe_row_stride,
                              mlakv_dtype dtype, const int64_t *slot_mapping,
                              const mlakv_write_options *options,
                              unsigned long long *rejected_count, void *stream) {
    (void)cache, (void)n, (void)kv_c, (void)kv_c_row_stride, (void)k_pe, (void)k_pe_row_stride;
    (void)dtype, (void)slot_mapping, (void)options, (void)rejected_count, (void)stream;
    return NO_CUDA("mlakv_cuda_write");
}

mlakv_status mlakv_cuda_write_with(const mlakv_cache *cache, int64_t n, const void *kv_c,
                                   int64_t kv_c_row_stride, const void *k_pe,
                                   int64_t k_pe_row_stride, mlakv_dtype dtype,
                                   const int64_t *slot_mapping, const mlakv_write_options *options,
                                   mlakv_cuda_write_kernel kernel,
                                   unsigned long long *rejected_count, void *stream) {
    (void)cache, (void)n, (void)kv_c, (void)kv_c_row_stride, (void)k_pe, (void)k_pe_row_stride;
    (void)dtype, (void)slot_mapping, (void)options, (void)kernel, (void)rejected_count;
    (void)stream;
    return NO_CUDA("mlakv_cuda_write_with");
}

mlakv_status mlakv_cuda_decode_workspace_size(const mlakv_cache *cache,
                                              const mlakv_decode_args *args, size_t *bytes) {
    (void)cache, (void)args, (void)bytes;
    return NO_CUDA("mlakv_cuda_decode_workspace_size");
}

mlakv_status mlakv_cuda_sparse_decode(const mlakv_cache *cache, const mlakv_decode_args *args,
                                      void *workspace, size_t workspace_bytes, void *stream) {
    (void)cache, (void)args, (void)workspace, (void)workspace_bytes, (void)stream;
    return NO_CUDA("mlakv_cuda_sparse_decode");
}

const char *mlakv_cuda_decode_kernel_name(mlakv_cuda_decode_kernel kernel) {
    switch (kernel) {
        case MLAKV_CUDA_DECODE_AUTO: return "auto";
        case MLAKV_CUDA_DECODE_MMA: return "mma";
        case MLAKV_CUDA_DECODE_NARROW: return "narrow";
        case MLAKV_CUDA_DECODE_WIDE: return "wide";
        case MLAKV_CUDA_DECODE_FP8_WGMMA: return "fp8_wgmma";
    }
    return NULL;
}

mlakv_status mlakv_cuda_decode_kernel_from_name(const char *name, mlakv_cuda_decode_kernel *kernel) {
    (void)name, (void)kernel;
    return NO_CUDA("mlakv_cuda_decode_kernel_from_name");
}

mlakv_status mlakv_cuda_decode_pick(const mlakv_cache *cache, const mlakv_decode_args *args,
                                    const mlakv_cuda_decode_choice *choice,
                                    mlakv_cuda_decode_kernel *kernel) {
    (void)cache, (void)args, (void)choice, (void)kernel;
    return NO_CUDA("mlakv_cuda_decode_pick");
}

mlakv_status mlakv_cuda_decode_workspace_size_with(const mlakv_cache *cache,
                                                   const mlakv_decode_args *args,
                                                   const mlakv_cuda_decode_choice *choice,
                                                   size_t *bytes) {
    (void)cache, (void)args, (void)choice, (void)bytes;
    return NO_CUDA("mlakv_cuda_decode_workspace_size_with");
}

mlakv_status mlakv_cuda_sparse_decode_with(const mlakv_cache *cache, const mlakv_decode_args *args,
                                           const mlakv_cuda_decode_choice *choice,
                                           void *workspace, size_t workspace_bytes, void *stream) {
    (void)cache, (void)args, (void)choice, (void)workspace, (void)workspace_bytes, (void)stream;
    return NO_CUDA("mlakv_cuda_sparse_decode_with");
}
