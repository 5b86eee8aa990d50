/* Host-side checks shared by the CUDA tests and benchmarks: a failed CUDA runtime or mlakv call
 * prints where and why, then exits 1 (these are programs, not library code). */
#ifndef MLAKV_TESTS_CUDA_HOST_H
#define MLAKV_TESTS_CUDA_HOST_H

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "mlakv.h"

#define CUDA_OK(call)                                                                       \
    do {                                                                                    \
        cudaError_t e_ = (call);                                                            \
        if (e_ != cudaSuccess) {                                                            \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call,            \
                    cudaGetErrorString(e_));                                                \
            exit(1);                                                                        \
        }                                                                                   \
    } while (0)

#define MLAKV_OK_OR_DIE(call)                                                               \
    do {                                                                                    \
        mlakv_status s_ = (call);                                                           \
        if (s_ != MLAKV_OK) {                                                               \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call,            \
                    mlakv_last_error());                                                    \
            exit(1);                                                                        \
        }                                                                                   \
    } while (0)

#endif
