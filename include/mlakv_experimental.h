/* mlakv experimental interface: which CUDA decode kernel (and which CUDA writer kernel) runs a
 * call.
 *
 * mlakv_cuda_sparse_decode picks its kernel from a dispatch table (docs/CUDA.md lists it). Tests
 * and benchmarks compare the kernels on one shape through the calls below, which take an explicit
 * choice instead of the table's; everything else about a call (arguments, checks, outputs,
 * workspace) is that of mlakv_cuda_sparse_decode. Names and fields here may change between
 * versions; engines should call mlakv_cuda_sparse_decode. */
#ifndef MLAKV_EXPERIMENTAL_H
#define MLAKV_EXPERIMENTAL_H

#include "mlakv.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The CUDA decode kernel families. */
typedef enum {
    MLAKV_CUDA_DECODE_AUTO = 0,     /* the dispatch table's choice for the shape */
    MLAKV_CUDA_DECODE_MMA = 1,      /* mma.sync: sm_80 and newer, every format, 1..128 heads */
    MLAKV_CUDA_DECODE_NARROW = 2,   /* sm_90a: NVFP4 records, 1..32 heads */
    MLAKV_CUDA_DECODE_WIDE = 3,     /* sm_90a: NVFP4 records, 33..128 heads */
    MLAKV_CUDA_DECODE_FP8_WGMMA = 4 /* sm_90a: fp8_ds_mla, 33..128 heads */
} mlakv_cuda_decode_kernel;

/* Split-KV combine kernels (used when a call splits its candidate list). */
typedef enum {
    MLAKV_CUDA_COMBINE_AUTO = 0,
    MLAKV_CUDA_COMBINE_ROWS = 1,    /* one warp per row and head; up to 8 splits */
    MLAKV_CUDA_COMBINE_QUARTERS = 2 /* one CTA per row, head and quarter of the value dims */
} mlakv_cuda_combine_kernel;

/* An explicit choice; all zero = the dispatch table's. */
typedef struct {
    mlakv_cuda_decode_kernel kernel;
    int narrow_pairs; /* narrow kernel's producer warpgroup pairs: 0 = table, 1, or 2 (two pairs
                         exist up to 16 heads; with more heads 2 runs as 1) */
    mlakv_cuda_combine_kernel combine;
} mlakv_cuda_decode_choice;

/* "auto", "mma", "narrow", "wide", "fp8_wgmma"; NULL for a value outside the enum. */
MLAKV_API const char *mlakv_cuda_decode_kernel_name(mlakv_cuda_decode_kernel kernel);
/* The kernel of that name into *kernel; MLAKV_ERR_INVALID_ARGUMENT for an unknown name. */
MLAKV_API mlakv_status mlakv_cuda_decode_kernel_from_name(const char *name, mlakv_cuda_decode_kernel *kernel);

/* The kernel a call with these arguments and this choice (NULL = the table's) would run, into
 * *kernel. Fails as the call would for bad arguments, and with MLAKV_ERR_INVALID_ARGUMENT when
 * the chosen kernel does not run this format, head count or device. */
MLAKV_API mlakv_status mlakv_cuda_decode_pick(const mlakv_cache *cache, const mlakv_decode_args *args,
                                    const mlakv_cuda_decode_choice *choice,
                                    mlakv_cuda_decode_kernel *kernel);

/* mlakv_cuda_decode_workspace_size and mlakv_cuda_sparse_decode with an explicit choice (NULL =
 * the table's). The workspace depends on the kernel: size it with the same choice. */
MLAKV_API mlakv_status mlakv_cuda_decode_workspace_size_with(const mlakv_cache *cache,
                                                   const mlakv_decode_args *args,
                                                   const mlakv_cuda_decode_choice *choice,
                                                   size_t *bytes);
MLAKV_API mlakv_status mlakv_cuda_sparse_decode_with(const mlakv_cache *cache, const mlakv_decode_args *args,
                                           const mlakv_cuda_decode_choice *choice,
                                           void *workspace, size_t workspace_bytes, void *stream);

/* The CUDA writer kernels: mlakv_cuda_write runs the one-token-per-warp kernel up to 4096
 * tokens and the grid-stride one above; both write the same bytes. */
typedef enum {
    MLAKV_CUDA_WRITE_KERNEL_AUTO = 0,       /* by token count, as mlakv_cuda_write */
    MLAKV_CUDA_WRITE_KERNEL_PER_WARP = 1,   /* one token per warp, one group per lane (when
                                               n < 2^33; grid-stride otherwise) */
    MLAKV_CUDA_WRITE_KERNEL_GRID_STRIDE = 2 /* two tokens per warp, grid-stride loop */
} mlakv_cuda_write_kernel;

/* mlakv_cuda_write with an explicit kernel (MLAKV_ERR_INVALID_ARGUMENT for a value outside the
 * enum); everything else is that of mlakv_cuda_write. */
MLAKV_API mlakv_status mlakv_cuda_write_with(const mlakv_cache *cache, int64_t n, const void *kv_c,
                                             int64_t kv_c_row_stride, const void *k_pe,
                                             int64_t k_pe_row_stride, mlakv_dtype dtype,
                                             const int64_t *slot_mapping,
                                             const mlakv_write_options *options,
                                             mlakv_cuda_write_kernel kernel,
                                             unsigned long long *rejected_count, void *stream);

#ifdef __cplusplus
}
#endif

#endif
