/* Internal: argument validators shared by the CPU entry points and the CUDA entry points'
 * host-side checks. Pure checks on descriptors, sizes and pointer values: nothing here
 * dereferences a caller buffer, so the CUDA paths call them with device pointers. */
#ifndef MLAKV_CORE_VALIDATE_H
#define MLAKV_CORE_VALIDATE_H

#include "mlakv.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Validates an [n, cols] input of `dtype` with row stride `stride` (elements): non-NULL when
 * n > 0, stride >= cols, byte extent representable in int64 and size_t, pointer aligned to its
 * element size. Shared by the CPU and CUDA writers. */
mlakv_status mlakv_check_rows(const char *fn, const char *name, const void *p, int64_t n,
                              int64_t cols, int64_t stride, mlakv_dtype dtype);

/* Validates the q and indices strides of decode args (>= 0, no overlapping rows where a
 * dimension has more than one entry) and that the tensor extents fit 64 bits. Geometry
 * (batch, s_q, heads, topk >= 1) must have been checked. Shared by the CPU and CUDA decoders. */
mlakv_status mlakv_check_decode_strides(const char *fn, const mlakv_decode_args *a);

/* Validates write options (NULL is valid: defaults). fn names the caller in the message. */
mlakv_status mlakv_check_write_options(const char *fn, const mlakv_write_options *options);

#ifdef __cplusplus
}
#endif

#endif
