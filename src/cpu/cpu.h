/* Internal helpers shared by the CPU entry points (and the CUDA writer's host checks). */
#ifndef MLAKV_CPU_CPU_H
#define MLAKV_CPU_CPU_H

#include "mlakv.h"

/* Validates an [n, cols] input of `dtype` with row stride `stride` (elements): non-NULL when
 * n > 0, stride >= cols, byte extent representable in int64 and size_t, pointer aligned to its
 * element size. Shared by the CPU and CUDA writers. */
mlakv_status mlakv_check_rows(const char *fn, const char *name, const void *p, int64_t n,
                              int64_t cols, int64_t stride, mlakv_dtype dtype);

#endif
