/* bench/cpu_decode: CPU sparse decode (engine mode) throughput in GB/s of cache records
 * gathered, per format, for heads 16 and 128 and topk 2048, next to this machine's memcpy
 * bandwidth measured here (1 thread and all threads).
 *
 * The cache (default 262144 tokens, larger than the last-level cache) holds synthetic records;
 * each call decodes `batch` query rows over topk random slots. GB/s = batch * topk *
 * record_bytes / seconds (best of --reps calls after one warm-up). memcpy GB/s = bytes copied
 * / seconds (each byte counted once, as the decoder's gather is counted) over a 256 MiB copy.
 *
 * usage: cpu_decode [--tokens N] [--batch N] [--topk N] [--reps N] [--threads N]
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mlakv.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t next_u64(void) {
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double normal(void) {
    double u1 = ((double)(next_u64() >> 11) + 1) * 0x1.0p-53, u2 = (double)(next_u64() >> 11) * 0x1.0p-53;
    return sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2);
}

/* ---- memcpy bandwidth ------------------------------------------------------------------------ */

typedef struct {
    char *dst;
    const char *src;
    size_t n;
} copy_job;

static void *copy_worker(void *p) {
    copy_job *j = (copy_job *)p;
    memcpy(j->dst, j->src, j->n);
    return NULL;
}

/* Best GB/s of copying n bytes with t threads (each copies a contiguous share). */
static double memcpy_gbs(char *dst, const char *src, size_t n, int t, int reps) {
    double best = 0;
    for (int r = 0; r < reps + 1; r++) {
        pthread_t tid[64];
        copy_job jobs[64];
        size_t share = n / (size_t)t;
        double t0 = now();
        for (int i = 0; i < t; i++) {
            jobs[i].dst = dst + share * (size_t)i;
            jobs[i].src = src + share * (size_t)i;
            jobs[i].n = i == t - 1 ? n - share * (size_t)i : share;
            if (i > 0) pthread_create(&tid[i], NULL, copy_worker, &jobs[i]);
        }
        copy_worker(&jobs[0]);
        for (int i = 1; i < t; i++) pthread_join(tid[i], NULL);
        double dt = now() - t0;
        if (r > 0 && (double)n / dt / 1e9 > best) best = (double)n / dt / 1e9;
    }
    return best;
}

int main(int argc, char **argv) {
    long tokens = 262144, batch = 4, topk = 2048, reps = 3, threads = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        long v = strtol(argv[i + 1], NULL, 10);
        if (!strcmp(argv[i], "--tokens")) tokens = v;
        else if (!strcmp(argv[i], "--batch")) batch = v;
        else if (!strcmp(argv[i], "--topk")) topk = v;
        else if (!strcmp(argv[i], "--reps")) reps = v;
        else if (!strcmp(argv[i], "--threads")) threads = v;
        else {
            fprintf(stderr, "cpu_decode: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (tokens < 1 || batch < 1 || topk < 1 || reps < 1 || threads < 0 || topk > tokens) {
        fprintf(stderr, "cpu_decode: bad arguments\n");
        return 2;
    }
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int nthr = threads ? (int)threads : (int)(ncpu > 0 ? ncpu : 1);
    if (nthr > 64) nthr = 64;

    size_t mb = (size_t)256 << 20;
    char *src = malloc(mb), *dst = malloc(mb);
    if (!src || !dst) return 1;
    memset(src, 1, mb);
    memset(dst, 2, mb);
    double bw1 = memcpy_gbs(dst, src, mb, 1, 3), bwn = memcpy_gbs(dst, src, mb, nthr, 3);
    free(src);
    free(dst);
    printf("cpu_decode: %d threads; memcpy bandwidth %.2f GB/s (1 thread), %.2f GB/s (%d threads)\n",
           nthr, bw1, bwn, nthr);
    printf("cache %ld tokens, batch %ld query rows, topk %ld, engine mode, bf16 q/out\n\n", tokens,
           batch, topk);
    printf("%-27s %5s %8s %10s %10s %10s %12s\n", "format", "heads", "rec B", "ms/call",
           "GB/s", "% memcpy", "records/s");

    /* synthetic latents, shared by all formats */
    const long nsrc = 4096;
    float *lat = malloc((size_t)nsrc * 512 * 4), *rope = malloc((size_t)nsrc * 64 * 4);
    if (!lat || !rope) return 1;
    for (long i = 0; i < nsrc * 512; i++) lat[i] = (float)(0.1 * normal());
    for (long i = 0; i < nsrc * 64; i++) rope[i] = (float)normal();
    int32_t *idx = malloc((size_t)(batch * topk) * 4);
    for (long i = 0; i < batch * topk; i++) idx[i] = (int32_t)(next_u64() % (uint64_t)tokens);
    const long heads_list[2] = {16, 128};
    uint16_t *q = malloc((size_t)(batch * 128 * 576) * 2), *out = malloc((size_t)(batch * 128 * 512) * 2);
    float *lse = malloc((size_t)(batch * 128) * 4);
    if (!idx || !q || !out || !lse) return 1;
    for (long i = 0; i < batch * 128 * 576; i++) q[i] = mlakv_f32_to_bf16((float)(0.2 * normal()));

    int rc = 0;
    for (int f = 0; f < MLAKV_FORMAT_COUNT && rc == 0; f++) {
        const int64_t bs = 64, nb = (tokens + bs - 1) / bs;
        size_t bytes;
        mlakv_cache cache;
        if (mlakv_cache_bytes((mlakv_format)f, nb, bs, 0, &bytes) != MLAKV_OK) return 1;
        void *mem = malloc(bytes);
        int64_t *slots = malloc((size_t)nsrc * 8);
        if (!mem || !slots) return 1;
        mlakv_cache_init(&cache, mem, (mlakv_format)f, nb, bs, 0);
        for (long t0 = 0; t0 < nb * bs; t0 += nsrc) { /* tile the source tokens over the cache */
            long n = nb * bs - t0 < nsrc ? nb * bs - t0 : nsrc;
            for (long i = 0; i < n; i++) slots[i] = t0 + i;
            if (mlakv_write(&cache, n, lat, 512, rope, 64, MLAKV_F32, slots, NULL) != MLAKV_OK) {
                fprintf(stderr, "cpu_decode: %s\n", mlakv_last_error());
                return 1;
            }
        }
        for (int hi = 0; hi < 2; hi++) {
            mlakv_decode_args a = mlakv_decode_args_default(batch, 1, heads_list[hi], topk);
            a.q = q;
            a.indices = idx;
            a.out = out;
            a.lse = lse;
            a.num_threads = (int)threads;
            double best = INFINITY;
            for (int r = 0; r < reps + 1; r++) {
                double t0 = now();
                if (mlakv_sparse_decode(&cache, &a) != MLAKV_OK) {
                    fprintf(stderr, "cpu_decode: %s\n", mlakv_last_error());
                    rc = 1;
                    break;
                }
                double dt = now() - t0;
                if (r > 0 && dt < best) best = dt;
            }
            if (rc) break;
            double rb = (double)mlakv_record_bytes((mlakv_format)f);
            double gbs = (double)(batch * topk) * rb / best / 1e9;
            printf("%-27s %5ld %8.0f %10.3f %10.3f %9.2f%% %12.3e\n",
                   mlakv_format_get((mlakv_format)f)->name, heads_list[hi], rb, best * 1e3, gbs,
                   100 * gbs / bwn, (double)(batch * topk) / best);
        }
        free(mem);
        free(slots);
    }
    free(lat), free(rope), free(idx), free(q), free(out), free(lse);
    return rc;
}
