/* Decode context parallelism, one rank's share of a decode step, on one GPU: each of N ranks
 * holds 1/N of every sequence's tokens (1M-token contexts), maps the step's 2048 global top-k
 * positions to its local slots, decodes them (no sink; per-row lengths skip the padding) and
 * merges the N gathered partials with the sink. Printed per (b, heads, N): the rank's time for
 * map + decode + merge against the single-GPU decode of the whole context (N = 1), and the
 * cache memory a rank holds. The NCCL all-gather between the decode and the merge is not in
 * these numbers (it needs N GPUs): its bytes per rank are printed beside them. GPU time per
 * call from CUDA-graph replays (time_us); nvfp4_ds_mla records, block size 64. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpu_bench.h"
#include "cuda_host.h"


/* GPU time per call: 20 calls in a CUDA graph, median of 11 replays (gpu_bench.h) */
template <class F> static float time_us(cudaEvent_t e0, cudaEvent_t e1, cudaStream_t s, F f) {
    return bench_graph_us(e0, e1, s, 20, 11, f);
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t next_u64(void) {
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return rng_state;
}

int main(void) {
    if (mlakv_cuda_check_device() != MLAKV_OK) {
        printf("cuda_dcp: skipped: %s\n", mlakv_last_error());
        return 0;
    }
    bench_print_header("mlakv decode context parallelism: one rank's step on one GPU");
    printf("- 1M-token context per sequence, topk 2048 global positions, nvfp4_ds_mla, block 64;\n"
           "  N = 1 is the single-GPU decode of the whole context; N > 1 is rank 0's map + decode\n"
           "  + merge (the NCCL all-gather, `gather B` bytes per rank, is not timed)\n\n");
    printf("| b | heads | N | map us | decode us | merge us | rank total us | vs N=1 | cache per rank GB | gather B |\n");
    printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    cudaEvent_t e0, e1;
    CUDA_OK(cudaEventCreate(&e0));
    CUDA_OK(cudaEventCreate(&e1));
    cudaStream_t st;
    CUDA_OK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    const int64_t ctx = 1 << 20, topk = 2048, bs = 64;
    const mlakv_format f = MLAKV_NVFP4_DS_MLA;
    const int64_t rec = (int64_t)mlakv_record_bytes(f);
    const int bsz[3] = {1, 8, 64}, hs[2] = {16, 128}, ns[4] = {1, 2, 4, 8};
    for (int bi = 0; bi < 3; bi++)
        for (int hi = 0; hi < 2; hi++) {
            const int64_t b = bsz[bi], h = hs[hi], rows = b * h;
            float t_single = 0;
            for (int ni = 0; ni < 4; ni++) {
                const int world = ns[ni];
                const int64_t local = ctx / world, blocks_per_seq = (local + bs - 1) / bs;
                const int64_t nblk = b * blocks_per_seq;
                size_t cache_bytes = 0;
                MLAKV_OK_OR_DIE(mlakv_cache_bytes(f, nblk, bs, 0, &cache_bytes));
                void *dcache;
                CUDA_OK(cudaMalloc(&dcache, cache_bytes));
                CUDA_OK(cudaMemset(dcache, 0x22, cache_bytes)); /* finite records */
                mlakv_cache c;
                MLAKV_OK_OR_DIE(mlakv_cache_init(&c, dcache, f, nblk, bs, 0));
                /* block tables: sequence j owns blocks [j * blocks_per_seq, ...) */
                int32_t *bt = (int32_t *)malloc(sizeof(int32_t) * b * blocks_per_seq);
                for (int64_t i = 0; i < b * blocks_per_seq; i++) bt[i] = (int32_t)i;
                /* global positions: 2048 distinct-ish random positions per row */
                int32_t *pos = (int32_t *)malloc(sizeof(int32_t) * b * topk);
                for (int64_t i = 0; i < b * topk; i++) pos[i] = (int32_t)(next_u64() % ctx);
                int32_t *dbt, *dpos, *didx, *dlen;
                CUDA_OK(cudaMalloc((void **)&dbt, sizeof(int32_t) * b * blocks_per_seq));
                CUDA_OK(cudaMemcpy(dbt, bt, sizeof(int32_t) * b * blocks_per_seq, cudaMemcpyHostToDevice));
                CUDA_OK(cudaMalloc((void **)&dpos, sizeof(int32_t) * b * topk));
                CUDA_OK(cudaMemcpy(dpos, pos, sizeof(int32_t) * b * topk, cudaMemcpyHostToDevice));
                CUDA_OK(cudaMalloc((void **)&didx, sizeof(int32_t) * b * topk));
                CUDA_OK(cudaMalloc((void **)&dlen, sizeof(int32_t) * b));
                void *dq, *dout, *dparts, *ws = NULL;
                float *dlse, *dplse, *dsink, *dmlse;
                CUDA_OK(cudaMalloc(&dq, 2 * rows * 576));
                CUDA_OK(cudaMemset(dq, 0x3C, 2 * rows * 576));
                CUDA_OK(cudaMalloc(&dout, 2 * rows * 512));
                CUDA_OK(cudaMalloc((void **)&dlse, 4 * rows));
                CUDA_OK(cudaMalloc(&dparts, 2 * world * rows * 512));
                CUDA_OK(cudaMemset(dparts, 0, 2 * world * rows * 512));
                CUDA_OK(cudaMalloc((void **)&dplse, 4 * world * rows));
                CUDA_OK(cudaMemset(dplse, 0, 4 * world * rows));
                CUDA_OK(cudaMalloc((void **)&dsink, 4 * h));
                CUDA_OK(cudaMemset(dsink, 0, 4 * h));
                CUDA_OK(cudaMalloc((void **)&dmlse, 4 * rows));
                mlakv_decode_args a = mlakv_decode_args_default(b, 1, h, topk);
                a.q = dq, a.indices = didx, a.out = dout, a.lse = dlse;
                a.sink = world == 1 ? dsink : NULL;
                a.lengths = world == 1 ? NULL : dlen;
                size_t wsb = 0;
                MLAKV_OK_OR_DIE(mlakv_cuda_decode_workspace_size(&c, &a, &wsb));
                if (wsb) CUDA_OK(cudaMalloc(&ws, wsb));
                /* N = 1: the global positions are the slots (rank 0 of 1) */
                MLAKV_OK_OR_DIE(mlakv_cuda_dcp_local_indices(&c, 0, world, b, 1, topk, dpos, topk,
                                                             topk, dbt, blocks_per_seq, didx, dlen,
                                                             NULL, NULL));
                const float t_map = time_us(e0, e1, st, [&](cudaStream_t s, int) {
                    MLAKV_OK_OR_DIE(mlakv_cuda_dcp_local_indices(&c, 0, world, b, 1, topk, dpos, topk,
                                                                 topk, dbt, blocks_per_seq, didx,
                                                                 dlen, NULL, s));
                });
                const float t_dec = time_us(e0, e1, st, [&](cudaStream_t s, int) {
                    MLAKV_OK_OR_DIE(mlakv_cuda_sparse_decode(&c, &a, ws, wsb, s));
                });
                float t_merge = 0;
                if (world > 1)
                    t_merge = time_us(e0, e1, st, [&](cudaStream_t s, int) {
                        MLAKV_OK_OR_DIE(mlakv_cuda_merge_partials(world, rows, 512, h, dparts,
                                                                  MLAKV_BF16, dplse, dsink, dout,
                                                                  MLAKV_BF16, dmlse, s));
                    });
                const float total = world == 1 ? t_dec : t_map + t_dec + t_merge;
                if (world == 1) t_single = total;
                if (world == 1)
                    printf("| %lld | %lld | 1 | - | %.1f | - | %.1f | 1.00 | %.2f | 0 |\n", (long long)b,
                           (long long)h, t_dec, total, cache_bytes / 1e9);
                else
                    printf("| %lld | %lld | %d | %.1f | %.1f | %.1f | %.1f | %.2f | %.2f | %lld |\n",
                           (long long)b, (long long)h, world, t_map, t_dec, t_merge, total,
                           total / t_single, cache_bytes / 1e9,
                           (long long)((world - 1) * rows * (512 * 2 + 4)));
                fflush(stdout);
                cudaFree(dcache), cudaFree(dbt), cudaFree(dpos), cudaFree(didx), cudaFree(dlen);
                cudaFree(dq), cudaFree(dout), cudaFree(dlse), cudaFree(dparts), cudaFree(dplse);
                cudaFree(dsink), cudaFree(dmlse), cudaFree(ws);
                free(bt), free(pos);
            }
        }
    return 0;
}
