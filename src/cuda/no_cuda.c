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

mlakv_status mlakv_cuda_dcp_local_indices(const mlakv_cache *local_cache, int rank, int world,
                                          int64_t batch, int64_t s_q, int64_t topk,
                                          const int32_t *positions, int64_t positions_stride_batch,
                                          int64_t positions_stride_token,
                                          const int32_t *block_table, int64_t block_table_stride,
                                          int32_t *local_indices, int32_t *lengths,
                                          unsigned long long *invalid_count, void *stream) {
    (void)local_cache, (void)rank, (void)world, (void)batch, (void)s_q, (void)topk;
    (void)positions, (void)positions_stride_batch, (void)positions_stride_token;
    (void)block_table, (void)block_table_stride, (void)local_indices, (void)lengths;
    (void)invalid_count, (void)stream;
    return NO_CUDA("mlakv_cuda_dcp_local_indices");
}

mlakv_status mlakv_cuda_merge_partials(int64_t n_parts, int64_t rows, int64_t dim, int64_t heads,
                                       const void *out_parts, mlakv_dtype parts_dtype,
                                       const float *lse_parts, const float *sink, void *out,
                                       mlakv_dtype out_dtype, float *lse, void *stream) {
    (void)n_parts, (void)rows, (void)dim, (void)heads, (void)out_parts, (void)parts_dtype;
    (void)lse_parts, (void)sink, (void)out, (void)out_dtype, (void)lse, (void)stream;
    return NO_CUDA("mlakv_cuda_merge_partials");
}

mlakv_status mlakv_cuda_dcp_workspace_size(int world, int64_t rows, size_t *bytes) {
    (void)world, (void)rows, (void)bytes;
    return NO_CUDA("mlakv_cuda_dcp_workspace_size");
}

mlakv_status mlakv_cuda_dcp_combine(void *nccl_comm, int world, int64_t rows, int64_t heads,
                                    const void *local_out, const float *local_lse,
                                    const float *sink, void *out, float *lse, void *workspace,
                                    size_t workspace_bytes, void *stream) {
    (void)nccl_comm, (void)world, (void)rows, (void)heads, (void)local_out, (void)local_lse;
    (void)sink, (void)out, (void)lse, (void)workspace, (void)workspace_bytes, (void)stream;
    return NO_CUDA("mlakv_cuda_dcp_combine");
}

mlakv_status mlakv_cuda_gather_bf16(const mlakv_cache *cache, int64_t n, const int32_t *slots,
                                    void *out, int64_t out_row_stride,
                                    unsigned long long *invalid_count, void *stream) {
    (void)cache, (void)n, (void)slots, (void)out, (void)out_row_stride, (void)invalid_count;
    (void)stream;
    return NO_CUDA("mlakv_cuda_gather_bf16");
}

mlakv_status mlakv_cuda_gather_upconvert(const mlakv_cache *cache, int64_t batch,
                                         const int32_t *block_table, int64_t block_table_stride,
                                         const int32_t *seq_lens, const int32_t *workspace_starts,
                                         const int32_t *seq_starts, void *out, int64_t out_rows,
                                         int64_t out_row_stride, unsigned long long *invalid_count,
                                         void *stream) {
    (void)cache, (void)batch, (void)block_table, (void)block_table_stride, (void)seq_lens;
    (void)workspace_starts, (void)seq_starts, (void)out, (void)out_rows, (void)out_row_stride;
    (void)invalid_count, (void)stream;
    return NO_CUDA("mlakv_cuda_gather_upconvert");
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
