/* Benchmark of the GPU gathers (mlakv_cuda_gather_bf16, mlakv_cuda_gather_upconvert) against the
 * device copy bandwidth.
 *
 * 1. Device-to-device copy bandwidth, measured here (cudaMemcpy of 1 GiB: 2 GiB read +
 *    written), median of 20: the ceiling the gathers are compared with.
 * 2. Per format, a cache of 2^20 + 2^16 records (block size 64) written by mlakv_cuda_write from
 *    random bf16 inputs:
 *    - gather_bf16 of n = 256K and 1M uniformly random slots;
 *    - upconvert of a 256K- and a 1M-token context, batch 1 and batch 8 (equal lengths, packed
 *      workspace rows, block tables of shuffled distinct blocks, no seq_starts).
 *    Two times per case: the median of 20 single launches between CUDA events (after 3
 *    unmeasured ones: the launch's fixed cost included, ~5 us on an idle GPU), and the median of
 *    20 replays of a CUDA graph of 8 launches (after 3 unmeasured), per launch (back to back,
 *    as an engine's graph runs them); bytes = records read + rows written (1152 B) + the int32 slots (gather) or
 *    block-table entries read; GB/s and the fraction of the copy bandwidth, from the graph time.
 * Prints markdown. MLAKV_COMMIT (if set) is printed in the header. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime.h>

#include "gpu_bench.h"
#include "cuda_host.h"
#include "mlakv.h"


static unsigned int hash32(unsigned int h) {
    h ^= h >> 16;
    h *= 0x7FEB352Du;
    h ^= h >> 15;
    h *= 0x846CA68Bu;
    h ^= h >> 16;
    return h;
}


__global__ void iota64(int64_t *p, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) p[i] = i;
}

/* n uniformly random slots in [0, cap) */
__global__ void random_slots(int32_t *s, int64_t n, int64_t cap, unsigned int seed) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        unsigned int h = (unsigned int)i * 2654435761u ^ seed;
        h ^= h >> 16;
        h *= 0x7FEB352Du;
        h ^= h >> 15;
        h *= 0x846CA68Bu;
        h ^= h >> 16;
        s[i] = (int32_t)(((unsigned long long)h * (unsigned long long)cap) >> 32);
    }
}

/* Median (ms) of 20 single launches between an event pair, after 3 unmeasured ones. */
template <class F> static float time_ms(cudaEvent_t e0, cudaEvent_t e1, F f) {
    float t[20];
    for (int r = 0; r < 23; r++) {
        CUDA_OK(cudaEventRecord(e0));
        f();
        CUDA_OK(cudaEventRecord(e1));
        CUDA_OK(cudaEventSynchronize(e1));
        if (r >= 3) CUDA_OK(cudaEventElapsedTime(&t[r - 3], e0, e1));
    }
    return bench_median(t, 20);
}

/* ms per launch: 8 launches in a CUDA graph, median of 20 replays (gpu_bench.h) */
template <class F> static float graph_ms(cudaEvent_t e0, cudaEvent_t e1, cudaStream_t s, F f) {
    return 1e-3f * bench_graph_us(e0, e1, s, 8, 20, f);
}

int main(void) {
    mlakv_status st = mlakv_cuda_check_device();
    if (st != MLAKV_OK) {
        printf("cuda_gather: no usable GPU: %s\n", mlakv_last_error());
        return 0;
    }
    const cudaDeviceProp prop = bench_print_header("mlakv GPU gather benchmark");

    cudaEvent_t e0, e1;
    CUDA_OK(cudaEventCreate(&e0));
    CUDA_OK(cudaEventCreate(&e1));
    cudaStream_t stream;
    CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

    /* 1. copy bandwidth */
    const double copy_gbs = bench_copy_gbs(e0, e1);

    /* caches: 2^20 + 2^16 records, block size 64, written from random bf16 inputs in chunks */
    const int64_t block_size = 64, num_blocks = ((1 << 20) + (1 << 16)) / 64;
    const int64_t cap = num_blocks * block_size, chunk = 1 << 16;
    uint16_t *kv, *pe;
    int64_t *wslots;
    CUDA_OK(cudaMalloc(&kv, (size_t)chunk * 512 * 2));
    CUDA_OK(cudaMalloc(&pe, (size_t)chunk * 64 * 2));
    CUDA_OK(cudaMalloc(&wslots, (size_t)cap * 8));
    iota64<<<1024, 256>>>(wslots, cap);
    CUDA_OK(cudaGetLastError());

    /* outputs and index arrays for the largest case */
    const int64_t max_n = 1 << 20;
    void *out;
    int32_t *slots, *table, *lens, *ws;
    unsigned long long *invalid;
    CUDA_OK(cudaMalloc(&out, (size_t)max_n * 1152));
    CUDA_OK(cudaMalloc(&slots, (size_t)max_n * 4));
    CUDA_OK(cudaMalloc(&table, (size_t)num_blocks * 4));
    CUDA_OK(cudaMalloc(&lens, 8 * 4));
    CUDA_OK(cudaMalloc(&ws, 8 * 4));
    CUDA_OK(cudaMalloc(&invalid, 8));
    CUDA_OK(cudaMemset(invalid, 0, 8));
    /* block tables: a shuffled permutation of all blocks, each batch row a slice of it */
    int32_t *h_table = (int32_t *)malloc((size_t)num_blocks * 4);
    for (int64_t i = 0; i < num_blocks; i++) h_table[i] = (int32_t)i;
    for (int64_t i = num_blocks - 1; i > 0; i--) {
        const int64_t j = hash32((unsigned int)i * 977u + 13u) % (i + 1);
        const int32_t t = h_table[i];
        h_table[i] = h_table[j];
        h_table[j] = t;
    }
    CUDA_OK(cudaMemcpy(table, h_table, (size_t)num_blocks * 4, cudaMemcpyHostToDevice));

    printf("Single: median of 20 launches between events. Graph: median of 20 replays of 8 launches, "
           "per launch; GB/s from the graph time. bytes = records read + 1152-B rows written + "
           "indices read.\n\n");
    printf("| format | call | rows | batch | single | graph | bytes | GB/s | of copy BW |\n");
    printf("|---|---|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int f = 0; f < MLAKV_FORMAT_COUNT; f++) {
        const size_t rec = mlakv_record_bytes((mlakv_format)f);
        size_t cache_bytes;
        MLAKV_OK_OR_DIE(mlakv_cache_bytes((mlakv_format)f, num_blocks, block_size, 0, &cache_bytes));
        void *base;
        CUDA_OK(cudaMalloc(&base, cache_bytes));
        mlakv_cache cache;
        MLAKV_OK_OR_DIE(mlakv_cache_init(&cache, base, (mlakv_format)f, num_blocks, block_size, 0));
        for (int64_t t0 = 0; t0 < cap; t0 += chunk) {
            bench_fill_bf16<<<1024, 256>>>(kv, (size_t)chunk * 512, 12345u + (unsigned int)t0);
            bench_fill_bf16<<<1024, 256>>>(pe, (size_t)chunk * 64, 777u + (unsigned int)t0);
            MLAKV_OK_OR_DIE(mlakv_cuda_write(&cache, chunk, kv, 512, pe, 64, MLAKV_BF16, wslots + t0,
                                             NULL, NULL, NULL));
        }
        CUDA_OK(cudaDeviceSynchronize());
        const char *name = mlakv_format_get((mlakv_format)f)->name;

        for (int64_t n = 1 << 18; n <= max_n; n *= 4) {
            random_slots<<<1024, 256>>>(slots, n, cap, 4242u + (unsigned int)n);
            CUDA_OK(cudaGetLastError());
            const float ms1 = time_ms(e0, e1, [&] {
                MLAKV_OK_OR_DIE(mlakv_cuda_gather_bf16(&cache, n, slots, out, 0, invalid, NULL));
            });
            const float ms = graph_ms(e0, e1, stream, [&](cudaStream_t s, int) {
                MLAKV_OK_OR_DIE(mlakv_cuda_gather_bf16(&cache, n, slots, out, 0, invalid, s));
            });
            const double bytes = (double)n * (double)(rec + 1152 + 4);
            const double gbs = bytes / (ms * 1e-3) / 1e9;
            printf("| %s | gather_bf16 | %lldK | | %.1f us | %.1f us | %.0f MB | %.0f | %.1f %% |\n",
                   name, (long long)(n >> 10), ms1 * 1e3, ms * 1e3, bytes / 1e6, gbs,
                   100.0 * gbs / copy_gbs);
        }
        for (int64_t n = 1 << 18; n <= max_n; n *= 4) {
            for (int batch = 1; batch <= 8; batch *= 8) {
                const int64_t len = n / batch, cols = (len + block_size - 1) / block_size;
                int32_t h_lens[8], h_ws[8];
                for (int b = 0; b < batch; b++) {
                    h_lens[b] = (int32_t)len;
                    h_ws[b] = (int32_t)(b * len);
                }
                CUDA_OK(cudaMemcpy(lens, h_lens, (size_t)batch * 4, cudaMemcpyHostToDevice));
                CUDA_OK(cudaMemcpy(ws, h_ws, (size_t)batch * 4, cudaMemcpyHostToDevice));
                /* row b's table: columns [b * cols, (b + 1) * cols) of the permutation */
                const float ms1 = time_ms(e0, e1, [&] {
                    MLAKV_OK_OR_DIE(mlakv_cuda_gather_upconvert(&cache, batch, table, cols, lens, ws,
                                                                NULL, out, n, 0, invalid, NULL));
                });
                const float ms = graph_ms(e0, e1, stream, [&](cudaStream_t s, int) {
                    MLAKV_OK_OR_DIE(mlakv_cuda_gather_upconvert(&cache, batch, table, cols, lens, ws,
                                                                NULL, out, n, 0, invalid, s));
                });
                const double bytes = (double)n * (double)(rec + 1152) + (double)(batch * cols) * 4;
                const double gbs = bytes / (ms * 1e-3) / 1e9;
                printf("| %s | upconvert | %lldK | %d | %.1f us | %.1f us | %.0f MB | %.0f | %.1f %% |\n",
                       name, (long long)(n >> 10), batch, ms1 * 1e3, ms * 1e3, bytes / 1e6, gbs,
                       100.0 * gbs / copy_gbs);
            }
        }
        cudaFree(base);
    }
    unsigned long long bad = 0;
    CUDA_OK(cudaMemcpy(&bad, invalid, 8, cudaMemcpyDeviceToHost));
    printf("\n(invalid values counted: %llu, expected 0)\n", bad);
    CUDA_OK(cudaStreamDestroy(stream));
    free(h_table);
    cudaFree(kv);
    cudaFree(pe);
    cudaFree(wslots);
    cudaFree(out);
    cudaFree(slots);
    cudaFree(table);
    cudaFree(lens);
    cudaFree(ws);
    cudaFree(invalid);
    return 0;
}
