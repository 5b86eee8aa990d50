/* Pieces shared by the GPU benchmarks: the header each prints first, the median of event
 * timings, the device copy bandwidth they compare with, random bf16 inputs. */
#ifndef MLAKV_BENCH_GPU_BENCH_H
#define MLAKV_BENCH_GPU_BENCH_H

#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <time.h>

#include "cuda_host.h"

/* Title, date, commit (MLAKV_COMMIT, set by bench/run_gpu_suite.sh's caller) and the device. */
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

static int bench_cmp_float(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

/* Median of n timings (sorts v). */
static inline float bench_median(float *v, int n) {
    qsort(v, (size_t)n, sizeof *v, bench_cmp_float);
    return n % 2 ? v[n / 2] : 0.5f * (v[n / 2 - 1] + v[n / 2]);
}

/* The ceiling the bandwidth-bound kernels are compared with: cudaMemcpy of 1 GiB device to
 * device, median of 20 after 3 warm-ups, in GB/s of bytes read + written; printed as a header
 * line. */
static inline double bench_copy_gbs(cudaEvent_t e0, cudaEvent_t e1) {
    const size_t copy_bytes = (size_t)1 << 30;
    void *c_src, *c_dst;
    float times[20];
    CUDA_OK(cudaMalloc(&c_src, copy_bytes));
    CUDA_OK(cudaMalloc(&c_dst, copy_bytes));
    CUDA_OK(cudaMemset(c_src, 0x5A, copy_bytes));
    for (int r = 0; r < 23; r++) {
        CUDA_OK(cudaEventRecord(e0));
        CUDA_OK(cudaMemcpy(c_dst, c_src, copy_bytes, cudaMemcpyDeviceToDevice));
        CUDA_OK(cudaEventRecord(e1));
        CUDA_OK(cudaEventSynchronize(e1));
        if (r >= 3) CUDA_OK(cudaEventElapsedTime(&times[r - 3], e0, e1));
    }
    const float copy_ms = bench_median(times, 20);
    const double copy_gbs = 2.0 * (double)copy_bytes / (copy_ms * 1e-3) / 1e9;
    printf("- device-to-device copy: 1 GiB in %.3f ms (median of 20) = **%.0f GB/s** (read + written)\n\n",
           copy_ms, copy_gbs);
    CUDA_OK(cudaFree(c_src));
    CUDA_OK(cudaFree(c_dst));
    return copy_gbs;
}

/* GPU time per call (us): `calls` calls f(s, i), i = 0 .. calls - 1, captured in one CUDA graph
 * on stream s, the graph replayed 3 times to warm up and `reps` (<= 64) times between events;
 * the median replay / calls. No host launch gaps, which dominate single launches of small
 * kernels. */
template <class F>
static float bench_graph_us(cudaEvent_t e0, cudaEvent_t e1, cudaStream_t s, int calls, int reps,
                            F f) {
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < calls; i++) f(s, i);
    CUDA_OK(cudaStreamEndCapture(s, &g));
    CUDA_OK(cudaGraphInstantiate(&ge, g, 0));
    float t[64];
    if (reps > 64) reps = 64;
    for (int r = 0; r < 3 + reps; r++) {
        CUDA_OK(cudaEventRecord(e0, s));
        CUDA_OK(cudaGraphLaunch(ge, s));
        CUDA_OK(cudaEventRecord(e1, s));
        CUDA_OK(cudaEventSynchronize(e1));
        if (r >= 3) CUDA_OK(cudaEventElapsedTime(&t[r - 3], e0, e1));
    }
    CUDA_OK(cudaGraphExecDestroy(ge));
    CUDA_OK(cudaGraphDestroy(g));
    return 1000.0f * bench_median(t, reps) / calls;
}

/* Random bf16 inputs of varied magnitude (never zeros), filled on the device. */
__global__ void bench_fill_bf16(uint16_t *p, size_t n, unsigned int seed) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        unsigned int h = (unsigned int)i * 2654435761u ^ seed;
        h ^= h >> 15;
        h *= 2246822519u;
        h ^= h >> 13;
        unsigned int e = 118 + (h >> 8) % 16; /* 2^-9 .. 2^6 */
        p[i] = (uint16_t)(((h & 1) << 15) | (e << 7) | ((h >> 1) & 0x7F));
    }
}

#endif
