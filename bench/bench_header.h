/* The header every GPU benchmark prints first: title, date, commit (MLAKV_COMMIT, set by
 * bench/run_gpu_suite.sh's caller) and the device. */
#ifndef MLAKV_BENCH_HEADER_H
#define MLAKV_BENCH_HEADER_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "cuda_host.h"

static inline cudaDeviceProp bench_print_header(const char *title) {
    cudaDeviceProp prop;
    int dev;
    CUDA_OK(cudaGetDevice(&dev));
    CUDA_OK(cudaGetDeviceProperties(&prop, dev));
    char date[32];
    time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", gmtime(&now));
    const char *commit = getenv("MLAKV_COMMIT");
    printf("# %s\n\n", title);
    printf("- date: %s\n- commit: %s\n- device: %s (%d SMs, L2 %d MB, sm_%d%d)\n", date,
           commit ? commit : "(unknown)", prop.name, prop.multiProcessorCount,
           prop.l2CacheSize >> 20, prop.major, prop.minor);
    return prop;
}

#endif
