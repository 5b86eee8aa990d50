/* Benchmark of the GPU writer (mlakv_cuda_write): bandwidth and step latency.
 *
 * 1. Device-to-device copy bandwidth, measured here (cudaMemcpy of 1 GiB: 2 GiB read +
 *    written), median of 20: the ceiling the writer is compared with.
 * 2. Per format and token count (bf16 inputs, contiguous slots as a prefill writes them, block
 *    size 64): median time of many single launches (CUDA events around each), bytes read +
 *    written (1,152 B of kv_c + k_pe in, the record out, per token; the 8-B slot is not
 *    counted), GB/s and the fraction of the copy bandwidth. Inputs and slots rotate through a
 *    pool of 1 Mi tokens, so small runs do not find their inputs in L2. Second number: 10
 *    launches back to back between two events, / 10 (median of 7): the same work without an
 *    event pair and a launch gap per launch. Third number ("queued"): single launches again,
 *    each behind a 50-us spin kernel on the stream, so the event pair and the launch are queued
 *    before the GPU reaches them and the host's ~4-6 us submission gap is not timed (how a
 *    writer runs inside an engine's busy stream; triton's do_bench gets the same effect from
 *    its cache-clearing kernel).
 * 3. The 64-token decode step: events around one launch (median); back to back (events around
 *    200 launches on different inputs, / 200, median of 10 batches: the steady per-step time
 *    of a stream of writes); one graph replay of a captured launch (median); a graph of 100
 *    captured launches / 100; host time of the call (validation + launch, no sync). The same
 *    for an empty kernel (8 x 256 threads) as the floor of this machine. Queued: events around
 *    one launch behind a 20-us spin kernel (as above).
 *
 * Also: 1b. the access-pattern ceiling (pattern_kernel: the writer's loads and record stores
 * without encoding, one or two tokens per warp, 2/3/4/8 blocks per SM, 256K and 1M tokens);
 * 4. the checked path (one NaN in every token, 256K tokens); 5. the one-token-per-warp and the
 * grid-stride kernels at 64..65536 tokens, queued (mlakv_cuda_write_with forces either).
 *
 * Prints markdown tables. MLAKV_COMMIT (if set) is printed in the header. `cuda_write --one`
 * only writes 1M tokens once per format (for a profiler); `--big` runs the copy and the 256K / 1M
 * rows only; `--step` the 64-token step with each kernel, cold and warm inputs (see there).
 * `--accurate` runs every write with the accurate NVFP4 encoder, `--latent-scale X` with the
 * latent scale X on the static NVFP4 formats (compare `--big --accurate` with `--big`). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime.h>

#include "gpu_bench.h"
#include "cuda_host.h"
#include "mlakv.h"
#include "mlakv_experimental.h"

/* Writer settings of every write below: the kernel (AUTO: mlakv_cuda_write's choice), the write
 * options (--accurate: the accurate NVFP4 encoder) and the latent scale (--latent-scale X, static
 * NVFP4 formats; 1.0 otherwise). */
static mlakv_cuda_write_kernel g_kernel = MLAKV_CUDA_WRITE_KERNEL_AUTO;
static mlakv_write_options g_opt;
static float g_latent_scale = 1.0f;

static mlakv_status bench_write(const mlakv_cache *cache, int64_t n, const void *kv_c, int64_t kv_stride,
                                const void *k_pe, int64_t pe_stride, mlakv_dtype dtype,
                                const int64_t *slots, unsigned long long *rejected, void *stream) {
    mlakv_cache c = *cache;
    if (c.format == MLAKV_NVFP4_DS_MLA || c.format == MLAKV_NVFP4_FP8_ROPE) c.latent_scale = g_latent_scale;
    return mlakv_cuda_write_with(&c, n, kv_c, kv_stride, k_pe, pe_stride, dtype, slots, &g_opt, g_kernel,
                                 rejected, stream);
}




/* one quiet NaN in every token's latent row (element 37) */
__global__ void poke_nan(uint16_t *kv, int64_t n) {
    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t < n) kv[t * 512 + 37] = 0x7FC0;
}

/* Holds the stream for `ns` nanoseconds (globaltimer), so that the event pair and the launch
 * after it are queued before the GPU reaches them: the elapsed time between the events is then
 * the GPU's time for the launch, without the host's submission gap (the "queued" columns). */
__global__ void spin_kernel(unsigned long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns);
}

__global__ void empty_kernel(int *p) {
    if (p != nullptr && threadIdx.x == 1024) *p = 0;
}

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

/* The next input offset of a run of n-token writes that rotates through the pool, so that a
 * run's inputs are not in L2 from the previous one; rows stay 16-byte aligned. */
static int64_t next_offset(int64_t off, int64_t n, int64_t pool) {
    off += n + 4096 + 64 * 7;
    return off + n > pool ? (off * 7919) % 4096 : off;
}
static int64_t same_offset(int64_t off) { return off; }
/* the next input row of the 64-token step's rotation (4096 + 832 rows on, within the pool) */
static int64_t step_offset(int64_t off, int64_t pool) { return (off + 4096 + 64 * 13) % (pool - 4096); }

/* Median (ms) of `reps` single launches, each between an event pair on the default stream,
 * after 5 unmeasured ones; launch r writes at offset off = next(off). spin_ns > 0: each launch
 * is queued behind a spin kernel that long (the "queued" columns). */
template <class Next, class Write>
static float median_single_ms(int reps, unsigned long long spin_ns, cudaEvent_t e0, cudaEvent_t e1,
                              float *times, int64_t &off, Next next, Write write) {
    for (int r = 0; r < reps + 5; r++) {
        off = next(off);
        if (spin_ns) spin_kernel<<<1, 32>>>(spin_ns);
        CUDA_OK(cudaEventRecord(e0));
        write(off);
        CUDA_OK(cudaEventRecord(e1));
        CUDA_OK(cudaEventSynchronize(e1));
        if (r >= 5) CUDA_OK(cudaEventElapsedTime(&times[r - 5], e0, e1));
    }
    return bench_median(times, reps);
}

__global__ void iota64(int64_t *p, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) p[i] = i;
}

/* Access-pattern ceiling: the writer's loads (slot, 16-byte latent chunks, RoPE) and record
 * stores (16-byte chunks, record-size bytes per token) without any encoding: record chunk c of a
 * token = latent chunk c of its input row, the RoPE bits folded into chunk 0 so their loads
 * stay. TPW = 1: one token per warp, lane l has chunks l and 32 + l (the previous writer);
 * TPW = 2: a token per half-warp, lane j has chunks j + 16k, k = 0..3 (the current writer).
 * Block size 64, dense blocks; the next token's loads are in flight during the stores. */
template <int TPW, int REC>
__global__ void __launch_bounds__(256) pattern_kernel(const uint4 *kv, const uint4 *pe, const int64_t *slots,
                                                      int64_t n, uint4 *cache) {
    constexpr int kChunks = REC / 16, kLanes = 32 / TPW, kLoads = 64 / kLanes;
    const int lane = threadIdx.x & 31, j = lane % kLanes, sub = lane / kLanes;
    const int64_t warps = (int64_t)gridDim.x * 8;
    int64_t t = ((int64_t)blockIdx.x * 8 + (threadIdx.x >> 5)) * TPW + sub;
    const int64_t step = warps * TPW;
    uint4 v[kLoads], r = make_uint4(0u, 0u, 0u, 0u);
    int64_t slot = -1;
    if (t < n) {
        slot = __ldg(slots + t);
        for (int k = 0; k < kLoads; k++) v[k] = __ldcs(kv + t * 64 + j + kLanes * k);
        if (j < 8) r = __ldcs(pe + t * 8 + j);
    }
    for (; t - sub < n; t += step) {
        uint4 nv[kLoads], nr = make_uint4(0u, 0u, 0u, 0u);
        int64_t nslot = -1;
        if (t + step < n) {
            nslot = __ldg(slots + t + step);
            for (int k = 0; k < kLoads; k++) nv[k] = __ldcs(kv + (t + step) * 64 + j + kLanes * k);
            if (j < 8) nr = __ldcs(pe + (t + step) * 8 + j);
        }
        if (slot >= 0) {
            uint4 *dst = cache + ((slot >> 6) * 64 * REC + (slot & 63) * REC) / 16;
            v[0].x ^= r.x;
            v[0].y ^= r.y;
            v[0].z ^= r.z;
            v[0].w ^= r.w;
#pragma unroll
            for (int k = 0; k < kLoads; k++)
                if (j + kLanes * k < kChunks) dst[j + kLanes * k] = v[k];
        }
        for (int k = 0; k < kLoads; k++) v[k] = nv[k];
        r = nr;
        slot = nslot;
    }
}

typedef void (*pattern_fn)(const uint4 *, const uint4 *, const int64_t *, int64_t, uint4 *);

int main(int argc, char **argv) {
    /* --accurate and --latent-scale X may come anywhere; the mode flag is the first other one */
    g_opt = mlakv_write_options_default();
    {
        int k = 1;
        for (int i = 1; i < argc; i++) {
            if (strcmp(argv[i], "--accurate") == 0) {
                g_opt.nvfp4_encoder = MLAKV_NVFP4_ENCODER_ACCURATE;
            } else if (strcmp(argv[i], "--latent-scale") == 0 && i + 1 < argc) {
                g_latent_scale = (float)atof(argv[++i]);
            } else {
                argv[k++] = argv[i];
            }
        }
        argc = k;
    }
    /* --one: one 1M-token write per format and nothing else (for a profiler run) */
    const int one = argc > 1 && strcmp(argv[1], "--one") == 0;
    /* --big: only the copy and the 256K / 1M rows of every format (to compare builds in one
     * device call) */
    const int big = argc > 1 && strcmp(argv[1], "--big") == 0;
    /* --step: the 64-token step only, each kernel, cold and warm inputs, three rounds */
    const int step = argc > 1 && strcmp(argv[1], "--step") == 0;
    mlakv_status st = mlakv_cuda_check_device();
    if (st != MLAKV_OK) {
        printf("cuda_write: no usable GPU: %s\n", mlakv_last_error());
        return 0;
    }
    const cudaDeviceProp prop = bench_print_header("mlakv_cuda_write benchmark");
    printf("- NVFP4 encoder: %s; latent scale of the static NVFP4 formats: %g\n",
           g_opt.nvfp4_encoder == MLAKV_NVFP4_ENCODER_ACCURATE ? "accurate (--accurate)" : "standard",
           (double)g_latent_scale);

    cudaEvent_t e0, e1;
    CUDA_OK(cudaEventCreate(&e0));
    CUDA_OK(cudaEventCreate(&e1));
    float times[400];

    /* 1. copy bandwidth */
    const double copy_gbs = bench_copy_gbs(e0, e1);

    /* input pool: 1 Mi tokens + a margin, bf16, dense rows */
    const int64_t pool = (1 << 20) + 4096;
    uint16_t *kv, *pe;
    int64_t *slots;
    CUDA_OK(cudaMalloc(&kv, (size_t)pool * 512 * 2));
    CUDA_OK(cudaMalloc(&pe, (size_t)pool * 64 * 2));
    CUDA_OK(cudaMalloc(&slots, (size_t)pool * 8));
    bench_fill_bf16<<<4096, 256>>>(kv, (size_t)pool * 512, 12345u);
    bench_fill_bf16<<<4096, 256>>>(pe, (size_t)pool * 64, 777u);
    iota64<<<4096, 256>>>(slots, pool);
    CUDA_OK(cudaGetLastError());
    unsigned long long *rejected;
    CUDA_OK(cudaMalloc(&rejected, 8));
    CUDA_OK(cudaMemset(rejected, 0, 8));

    if (one) {
        /* `--one N`: N tokens instead */
        const int64_t n = argc > 2 ? atoll(argv[2]) : 1 << 20, block_size = 64, num_blocks = pool / block_size;
        if (n < 1 || n > pool) {
            printf("--one: n must be in [1, %lld]\n", (long long)pool);
            return 1;
        }
        for (int f = 0; f < MLAKV_FORMAT_COUNT; f++) {
            size_t cache_bytes;
            MLAKV_OK_OR_DIE(mlakv_cache_bytes((mlakv_format)f, num_blocks, block_size, 0, &cache_bytes));
            void *base;
            CUDA_OK(cudaMalloc(&base, cache_bytes));
            mlakv_cache cache;
            MLAKV_OK_OR_DIE(mlakv_cache_init(&cache, base, (mlakv_format)f, num_blocks, block_size, 0));
            MLAKV_OK_OR_DIE(bench_write(&cache, n, kv, 512, pe, 64, MLAKV_BF16, slots, rejected, NULL));
            CUDA_OK(cudaDeviceSynchronize());
            cudaFree(base);
        }
        printf("--one: 4 writes of %lld tokens done\n", (long long)n);
        return 0;
    }

    if (step) {
        /* --step: the 64-token step alone, queued behind a 20-us spin kernel, median of 200, in
         * three alternating rounds (the spread between rounds is the noise): every format with
         * each kernel, inputs cold (rows rotating through the 1 GiB pool, as in the tables of
         * the full run) and warm (the same kv_c / k_pe rows every step, as an engine's
         * activation buffers; slot_mapping and the records still rotate) */
        const int64_t n = 64, block_size = 64, num_blocks = pool / block_size;
        mlakv_cache caches[MLAKV_FORMAT_COUNT];
        for (int f = 0; f < MLAKV_FORMAT_COUNT; f++) {
            size_t cache_bytes;
            MLAKV_OK_OR_DIE(mlakv_cache_bytes((mlakv_format)f, num_blocks, block_size, 0, &cache_bytes));
            void *base;
            CUDA_OK(cudaMalloc(&base, cache_bytes));
            MLAKV_OK_OR_DIE(mlakv_cache_init(&caches[f], base, (mlakv_format)f, num_blocks, block_size, 0));
        }
        const char *vname[2] = {"one token per warp", "grid-stride, token pairs"};
        const mlakv_cuda_write_kernel vkernel[2] = {MLAKV_CUDA_WRITE_KERNEL_PER_WARP,
                                                    MLAKV_CUDA_WRITE_KERNEL_GRID_STRIDE};
        float t[3][MLAKV_FORMAT_COUNT][2][2], te[3], tp[3][2];
        auto next = [&](int64_t o) { return step_offset(o, pool); };
        for (int r = 0; r < 3; r++) {
            for (int f = 0; f < MLAKV_FORMAT_COUNT; f++)
                for (int v = 0; v < 2; v++)
                    for (int warm = 0; warm < 2; warm++) {
                        g_kernel = vkernel[v];
                        int64_t off = 0;
                        t[r][f][v][warm] = 1e3f * median_single_ms(200, 20000ull, e0, e1, times, off, next, [&](int64_t o) {
                            const int64_t i = warm ? 0 : o;
                            MLAKV_OK_OR_DIE(bench_write(&caches[f], n, kv + i * 512, 512, pe + i * 64, 64,
                                                             MLAKV_BF16, slots + o, rejected, NULL));
                        });
                    }
            int64_t off = 0;
            te[r] = 1e3f * median_single_ms(200, 20000ull, e0, e1, times, off, same_offset,
                                            [](int64_t) { empty_kernel<<<8, 256>>>(nullptr); });
            for (int warm = 0; warm < 2; warm++)
                tp[r][warm] = 1e3f * median_single_ms(200, 20000ull, e0, e1, times, off, next, [&](int64_t o) {
                    const int64_t i = warm ? 0 : o;
                    pattern_kernel<2, 432><<<4, 256>>>((const uint4 *)(kv + i * 512), (const uint4 *)(pe + i * 64),
                                                       slots + o, n, (uint4 *)caches[MLAKV_NVFP4_DS_MLA].base);
                });
        }
        g_kernel = MLAKV_CUDA_WRITE_KERNEL_AUTO;
        printf("64-token step, queued single launch (behind a 20-us spin kernel), median of 200, three rounds:\n\n");
        printf("| format | kernel | cold inputs | warm inputs |\n|---|---|---|---|\n");
        for (int f = 0; f < MLAKV_FORMAT_COUNT; f++)
            for (int v = 0; v < 2; v++)
                printf("| %s | %s | %.2f / %.2f / %.2f us | %.2f / %.2f / %.2f us |\n", mlakv_format_get((mlakv_format)f)->name,
                       vname[v], t[0][f][v][0], t[1][f][v][0], t[2][f][v][0], t[0][f][v][1], t[1][f][v][1], t[2][f][v][1]);
        printf("| (access pattern: loads + 432-B stores, no encoding, 4 x 256 threads) | | %.2f / %.2f / %.2f us | %.2f / %.2f / %.2f us |\n",
               tp[0][0], tp[1][0], tp[2][0], tp[0][1], tp[1][1], tp[2][1]);
        printf("| (empty kernel, 8 x 256 threads) | | %.2f / %.2f / %.2f us | |\n", te[0], te[1], te[2]);
        unsigned long long rej;
        CUDA_OK(cudaMemcpy(&rej, rejected, 8, cudaMemcpyDeviceToHost));
        printf("\n(rejected slots counted: %llu, expected 0)\n", rej);
        return 0;
    }

    /* 1b. the access-pattern ceiling (pattern_kernel) per record size, mapping and blocks/SM */
    float pattern64_q = 0.0f;
    if (!big) {
        printf("Access pattern without encoding (pattern_kernel; bytes as below; median of 30 single launches):\n\n");
        printf("| record | tokens/warp | blocks/SM | tokens | median time | of copy BW |\n|---:|---:|---:|---:|---:|---:|\n");
        const int recs[3] = {656, 432, 368};
        const pattern_fn fns[3][2] = {{pattern_kernel<1, 656>, pattern_kernel<2, 656>},
                                      {pattern_kernel<1, 432>, pattern_kernel<2, 432>},
                                      {pattern_kernel<1, 368>, pattern_kernel<2, 368>}};
        uint4 *pcache;
        CUDA_OK(cudaMalloc(&pcache, (size_t)pool * 656));
        for (int ri = 0; ri < 3; ri++)
            for (int tpw = 1; tpw <= 2; tpw++) {
                const int bpss[4] = {2, 3, 4, 8};
                for (int bi = 0; bi < 4; bi++)
                    for (int64_t n = 262144; n <= 1048576; n *= 4) {
                        const int blocks = prop.multiProcessorCount * bpss[bi];
                        int64_t off = 0;
                        const float ms = median_single_ms(
                            30, 0, e0, e1, times, off, [&](int64_t o) { return next_offset(o, n, pool); },
                            [&](int64_t o) {
                                fns[ri][tpw - 1]<<<blocks, 256>>>((const uint4 *)(kv + o * 512),
                                                                 (const uint4 *)(pe + o * 64), slots + o, n, pcache);
                            });
                        CUDA_OK(cudaGetLastError());
                        const double gbs = (double)n * (1152.0 + recs[ri]) / (ms * 1e-3) / 1e9;
                        printf("| %d | %d | %d | %lld | %.2f us | %.1f%% |\n", recs[ri], tpw, bpss[bi], (long long)n,
                               ms * 1e3, 100.0 * gbs / copy_gbs);
                    }
            }
        printf("\n");
        /* the 64-token step of the same pattern (432-B records, 4 blocks), queued behind a spin
         * kernel: the floor of a 64-token write with cold inputs, without the encoding */
        int64_t off = 0, launch = 0; /* launch r reads from row ((r * 7919) % 4096) * 64 */
        const float ms64 = median_single_ms(
            200, 20000ull, e0, e1, times, off, [&](int64_t) { return (int64_t)((launch++ * 7919) % 4096) * 64; },
            [&](int64_t o) {
                pattern_kernel<2, 432><<<4, 256>>>((const uint4 *)(kv + o * 512), (const uint4 *)(pe + o * 64),
                                                   slots + o, 64, pcache);
            });
        pattern64_q = ms64 * 1e3f;
        cudaFree(pcache);
    }

    const int64_t counts[5] = {64, 4096, 65536, 262144, 1048576};
    printf("| format | tokens | median time | bytes (read + written) | GB/s | of copy BW | back-to-back x10, per launch | of copy BW | queued single launch | of copy BW |\n");
    printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    double frac_256k[MLAKV_FORMAT_COUNT] = {0}, b2b_worst[MLAKV_FORMAT_COUNT] = {0}, q_worst[MLAKV_FORMAT_COUNT] = {0};
    float step_b2b[MLAKV_FORMAT_COUNT], step_q[MLAKV_FORMAT_COUNT];
    float step_us[MLAKV_FORMAT_COUNT][3], host_us[MLAKV_FORMAT_COUNT];
    const int64_t kSmallCounts[6] = {64, 256, 1024, 4096, 16384, 65536};
    float small_ab[MLAKV_FORMAT_COUNT][6][2];
    for (int f = 0; f < MLAKV_FORMAT_COUNT; f++) {
        const mlakv_format fmt = (mlakv_format)f;
        const size_t rec = mlakv_record_bytes(fmt);
        const int64_t block_size = 64, num_blocks = pool / block_size;
        size_t cache_bytes;
        MLAKV_OK_OR_DIE(mlakv_cache_bytes(fmt, num_blocks, block_size, 0, &cache_bytes));
        void *base;
        CUDA_OK(cudaMalloc(&base, cache_bytes));
        CUDA_OK(cudaMemset(base, 0, cache_bytes));
        mlakv_cache cache;
        MLAKV_OK_OR_DIE(mlakv_cache_init(&cache, base, fmt, num_blocks, block_size, 0));
        /* n tokens from input row `off` of the pool (contiguous slots) */
        auto write_at = [&](int64_t n, int64_t off) {
            MLAKV_OK_OR_DIE(bench_write(&cache, n, kv + off * 512, 512, pe + off * 64, 64, MLAKV_BF16,
                                             slots + off, rejected, NULL));
        };
        for (int c = big ? 3 : 0; c < 5; c++) {
            const int64_t n = counts[c];
            const int reps = n <= 4096 ? 200 : n <= 65536 ? 100 : 30;
            auto next = [&](int64_t o) { return next_offset(o, n, pool); };
            auto write = [&](int64_t o) { write_at(n, o); };
            int64_t off = 0;
            const float ms = median_single_ms(reps, 0, e0, e1, times, off, next, write);
            CUDA_OK(cudaGetLastError());
            const double bytes = (double)n * (1152.0 + (double)rec);
            const double gbs = bytes / (ms * 1e-3) / 1e9;
            if (n == 262144) frac_256k[f] = gbs / copy_gbs;
            if (n == 1048576 && gbs / copy_gbs < frac_256k[f]) frac_256k[f] = gbs / copy_gbs;
            /* queued: the same single launch behind a 50-us spin kernel (no submission gap) */
            const float ms_q = median_single_ms(reps, 50000ull, e0, e1, times, off, next, write);
            const double gbs_q = bytes / (ms_q * 1e-3) / 1e9;
            if (n >= 262144 && (q_worst[f] == 0.0 || gbs_q / copy_gbs < q_worst[f])) q_worst[f] = gbs_q / copy_gbs;
            /* 10 launches back to back between two events (rotating inputs), / 10: the
             * same work without one event pair + launch gap per launch; median of 7 */
            float b2b[7];
            for (int r = 0; r < 8; r++) {
                CUDA_OK(cudaEventRecord(e0));
                for (int k = 0; k < 10; k++) {
                    off = next(off);
                    write(off);
                }
                CUDA_OK(cudaEventRecord(e1));
                CUDA_OK(cudaEventSynchronize(e1));
                if (r >= 1) CUDA_OK(cudaEventElapsedTime(&b2b[r - 1], e0, e1));
            }
            const float ms_b2b = bench_median(b2b, 7) / 10.0f;
            const double gbs_b2b = bytes / (ms_b2b * 1e-3) / 1e9;
            if (n >= 262144) {
                if (b2b_worst[f] == 0.0 || gbs_b2b / copy_gbs < b2b_worst[f]) b2b_worst[f] = gbs_b2b / copy_gbs;
            }
            printf("| %s | %lld | %.2f us | %.1f MB | %.0f | %.1f%% | %.2f us | %.1f%% | %.2f us | %.1f%% |\n",
                   mlakv_format_get(fmt)->name, (long long)n, ms * 1e3, bytes / 1e6, gbs, 100.0 * gbs / copy_gbs,
                   ms_b2b * 1e3, 100.0 * gbs_b2b / copy_gbs, ms_q * 1e3, 100.0 * gbs_q / copy_gbs);
            fflush(stdout);
        }

        /* 64-token step: single launches (above), graph replay of one launch, graph of 100 */
        if (!big) {
            const int64_t n = 64;
            const int reps = 200;
            auto next = [&](int64_t o) { return step_offset(o, pool); };
            auto write = [&](int64_t o) { write_at(n, o); };
            int64_t off = 0;
            step_us[f][0] = median_single_ms(reps, 0, e0, e1, times, off, next, write) * 1e3f;
            /* queued: behind a 20-us spin kernel, so the host's submission is not timed */
            step_q[f] = median_single_ms(reps, 20000ull, e0, e1, times, off, next, write) * 1e3f;
            /* the two kernels at a few step sizes, queued (mlakv_cuda_write_with picks one) */
            for (int c = 0; c < 6; c++) {
                const int64_t ns = kSmallCounts[c];
                auto nexts = [&](int64_t o) { return next_offset(o, ns, pool); };
                auto writes = [&](int64_t o) { write_at(ns, o); };
                for (int k = 0; k < 2; k++) {
                    g_kernel = k == 0 ? MLAKV_CUDA_WRITE_KERNEL_PER_WARP : MLAKV_CUDA_WRITE_KERNEL_GRID_STRIDE;
                    small_ab[f][c][k] = median_single_ms(reps, 20000ull, e0, e1, times, off, nexts, writes) * 1e3f;
                }
                g_kernel = MLAKV_CUDA_WRITE_KERNEL_AUTO;
            }
            /* back to back: events around 200 launches (different inputs each), / 200; median of
             * 10 batches */
            {
                float batch[10];
                for (int r = 0; r < 11; r++) {
                    CUDA_OK(cudaEventRecord(e0));
                    for (int k = 0; k < 200; k++) {
                        off = next(off);
                        write(off);
                    }
                    CUDA_OK(cudaEventRecord(e1));
                    CUDA_OK(cudaEventSynchronize(e1));
                    if (r >= 1) CUDA_OK(cudaEventElapsedTime(&batch[r - 1], e0, e1));
                }
                step_b2b[f] = bench_median(batch, 10) * 1e3f / 200.0f;
            }
            /* host time of the call itself (validation + launch), no synchronization */
            for (int r = 0; r < reps; r++) {
                off = next(off);
                double t0 = now_us();
                write(off);
                times[r] = (float)(now_us() - t0);
                if (r % 16 == 15) CUDA_OK(cudaDeviceSynchronize());
            }
            CUDA_OK(cudaDeviceSynchronize());
            host_us[f] = bench_median(times, reps);
            cudaStream_t s;
            CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
            cudaGraph_t g1, g100;
            cudaGraphExec_t x1, x100;
            CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
            MLAKV_OK_OR_DIE(bench_write(&cache, n, kv, 512, pe, 64, MLAKV_BF16, slots, rejected, s));
            CUDA_OK(cudaStreamEndCapture(s, &g1));
            CUDA_OK(cudaGraphInstantiate(&x1, g1, 0));
            CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
            for (int k = 0; k < 100; k++) {
                const int64_t o = (int64_t)k * (4096 + 64 * 13);
                MLAKV_OK_OR_DIE(bench_write(&cache, n, kv + o * 512, 512, pe + o * 64, 64, MLAKV_BF16,
                                                 slots + o, rejected, s));
            }
            CUDA_OK(cudaStreamEndCapture(s, &g100));
            CUDA_OK(cudaGraphInstantiate(&x100, g100, 0));
            for (int r = 0; r < reps + 5; r++) {
                CUDA_OK(cudaEventRecord(e0, s));
                CUDA_OK(cudaGraphLaunch(x1, s));
                CUDA_OK(cudaEventRecord(e1, s));
                CUDA_OK(cudaEventSynchronize(e1));
                if (r >= 5) CUDA_OK(cudaEventElapsedTime(&times[r - 5], e0, e1));
            }
            step_us[f][1] = bench_median(times, reps) * 1e3f;
            for (int r = 0; r < 25; r++) {
                CUDA_OK(cudaEventRecord(e0, s));
                CUDA_OK(cudaGraphLaunch(x100, s));
                CUDA_OK(cudaEventRecord(e1, s));
                CUDA_OK(cudaEventSynchronize(e1));
                if (r >= 5) CUDA_OK(cudaEventElapsedTime(&times[r - 5], e0, e1));
            }
            step_us[f][2] = bench_median(times, 20) * 1e3f / 100.0f;
            cudaGraphExecDestroy(x1);
            cudaGraphExecDestroy(x100);
            cudaGraphDestroy(g1);
            cudaGraphDestroy(g100);
            cudaStreamDestroy(s);
        }
        cudaFree(base);
    }
    if (big) {
        printf("\n| format | worst of 256K/1M, of copy BW (single launch) | >= 85%% | worst, back-to-back | worst, queued single launch |\n|---|---:|---|---:|---:|\n");
        for (int f = 0; f < MLAKV_FORMAT_COUNT; f++)
            printf("| %s | %.1f%% | %s | %.1f%% | %.1f%% |\n", mlakv_format_get((mlakv_format)f)->name,
                   100.0 * frac_256k[f], frac_256k[f] >= 0.85 ? "yes" : "no", 100.0 * b2b_worst[f], 100.0 * q_worst[f]);
        return 0;
    }

    /* the checked path: the same inputs with one NaN in every token (every token pair then
     * takes the checked encoders: NaN-aware E2M1 with clamp, IEEE division for fp8) */
    {
        const int64_t n = 262144, block_size = 64, num_blocks = pool / block_size;
        uint16_t *kvn;
        CUDA_OK(cudaMalloc(&kvn, (size_t)n * 512 * 2));
        CUDA_OK(cudaMemcpy(kvn, kv, (size_t)n * 512 * 2, cudaMemcpyDeviceToDevice));
        poke_nan<<<(unsigned)((n + 255) / 256), 256>>>(kvn, n);
        CUDA_OK(cudaGetLastError());
        printf("\nChecked path (one NaN in every token), %lld tokens, median of 30 single launches:\n\n", (long long)n);
        printf("| format | median time | of copy BW |\n|---|---:|---:|\n");
        for (int f = 0; f < MLAKV_FORMAT_COUNT; f++) {
            const mlakv_format fmt = (mlakv_format)f;
            size_t cache_bytes;
            MLAKV_OK_OR_DIE(mlakv_cache_bytes(fmt, num_blocks, block_size, 0, &cache_bytes));
            void *base;
            CUDA_OK(cudaMalloc(&base, cache_bytes));
            mlakv_cache cache;
            MLAKV_OK_OR_DIE(mlakv_cache_init(&cache, base, fmt, num_blocks, block_size, 0));
            int64_t off = 0;
            const float ms = median_single_ms(30, 0, e0, e1, times, off, same_offset, [&](int64_t) {
                MLAKV_OK_OR_DIE(bench_write(&cache, n, kvn, 512, pe, 64, MLAKV_BF16, slots, rejected, NULL));
            });
            const double gbs = (double)n * (1152.0 + (double)mlakv_record_bytes(fmt)) / (ms * 1e-3) / 1e9;
            printf("| %s | %.2f us | %.1f%% |\n", mlakv_format_get(fmt)->name, ms * 1e3, 100.0 * gbs / copy_gbs);
            cudaFree(base);
        }
        printf("\n");
        cudaFree(kvn);
    }

    unsigned long long rej;
    CUDA_OK(cudaMemcpy(&rej, rejected, 8, cudaMemcpyDeviceToHost));
    printf("\n(rejected slots counted during the runs: %llu, expected 0)\n\n", rej);
    /* baseline: an empty kernel, events around a single launch */
    int64_t no_off = 0;
    auto empty = [](int64_t) { empty_kernel<<<8, 256>>>(nullptr); };
    const float empty_us = median_single_ms(200, 0, e0, e1, times, no_off, same_offset, empty) * 1e3f;
    const float empty_q_us = median_single_ms(200, 20000ull, e0, e1, times, no_off, same_offset, empty) * 1e3f;
    for (int r = 0; r < 200; r++) {
        double t0 = now_us();
        empty_kernel<<<8, 256>>>(nullptr);
        times[r] = (float)(now_us() - t0);
        if (r % 16 == 15) CUDA_OK(cudaDeviceSynchronize());
    }
    CUDA_OK(cudaDeviceSynchronize());
    const float empty_host_us = bench_median(times, 200);
    float eb[10];
    for (int r = 0; r < 11; r++) {
        CUDA_OK(cudaEventRecord(e0));
        for (int k = 0; k < 200; k++) empty_kernel<<<8, 256>>>(nullptr);
        CUDA_OK(cudaEventRecord(e1));
        CUDA_OK(cudaEventSynchronize(e1));
        if (r >= 1) CUDA_OK(cudaEventElapsedTime(&eb[r - 1], e0, e1));
    }
    const float empty_b2b = bench_median(eb, 10) * 1e3f / 200.0f;
    printf("64-token decode step (bf16, block size 64), median of 200:\n\n");
    printf("| format | single launch (events) | queued single launch (events, behind a spin kernel) | back-to-back, per launch (200 / batch, median of 10) | graph replay of 1 launch | in a graph of 100, per launch | host time of the call |\n");
    printf("|---|---:|---:|---:|---:|---:|---:|\n");
    for (int f = 0; f < MLAKV_FORMAT_COUNT; f++)
        printf("| %s | %.2f us | %.2f us | %.2f us | %.2f us | %.2f us | %.2f us |\n", mlakv_format_get((mlakv_format)f)->name,
               step_us[f][0], step_q[f], step_b2b[f], step_us[f][1], step_us[f][2], host_us[f]);
    printf("| (empty kernel, 8 x 256 threads) | %.2f us | %.2f us | %.2f us | | | %.2f us (launch) |\n", empty_us,
           empty_q_us, empty_b2b, empty_host_us);
    printf("| (access pattern only: loads + 432-B stores, no encoding, 4 x 256 threads) | | %.2f us | | | | |\n",
           pattern64_q);
    printf("\nThe two kernels, queued single launch (median of 200; mlakv_cuda_write_with forces one; the\n"
           "default takes one token per warp up to 4096 tokens):\n\n");
    printf("| format | tokens | one token per warp | grid-stride, token pairs |\n|---|---:|---:|---:|\n");
    for (int f = 0; f < MLAKV_FORMAT_COUNT; f++)
        for (int c = 0; c < 6; c++)
            printf("| %s | %lld | %.2f us | %.2f us |\n", mlakv_format_get((mlakv_format)f)->name,
                   (long long)kSmallCounts[c], small_ab[f][c][0], small_ab[f][c][1]);
    printf("\nTargets: >= 85%% of copy bandwidth at >= 256K tokens; <= 4 us for the 64-token launch.\n\n");
    printf("| format | worst of 256K/1M, of copy BW (single launch) | >= 85%% | worst, back-to-back | worst, queued single launch | 64-token launch (single) | <= 4 us | 64-token launch (queued) | <= 4 us | back-to-back step |\n|---|---:|---|---:|---:|---:|---|---:|---|---:|\n");
    for (int f = 0; f < MLAKV_FORMAT_COUNT; f++)
        printf("| %s | %.1f%% | %s | %.1f%% | %.1f%% | %.2f us | %s | %.2f us | %s | %.2f us |\n",
               mlakv_format_get((mlakv_format)f)->name, 100.0 * frac_256k[f], frac_256k[f] >= 0.85 ? "yes" : "no",
               100.0 * b2b_worst[f], 100.0 * q_worst[f], step_us[f][0], step_us[f][0] <= 4.0f ? "yes" : "no",
               step_q[f], step_q[f] <= 4.0f ? "yes" : "no", step_b2b[f]);
    cudaFree(kv);
    cudaFree(pe);
    cudaFree(slots);
    cudaFree(rejected);
    return 0;
}
