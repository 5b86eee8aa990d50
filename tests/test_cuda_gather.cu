/* GPU gathers (mlakv_cuda_gather_bf16, mlakv_cuda_gather_upconvert) against the CPU gathers.
 *
 *  1. gather_bf16: every format, block sizes 1 / 61 / 64, dense and padded block strides,
 *     records from the CPU writer (magnitudes 2^-20 .. 2^10, zero tokens) and raw random bytes
 *     (NaN, subnormal and negative scales); random slot lists of many lengths (1 .. 100,003 and
 *     a 1,000,000-row run per format) with padding (-1, INT32_MIN) and slots >= capacity
 *     (capacity, INT32_MAX, random): every value bit-identical to the CPU gather (NaN: any
 *     NaN), zero rows for the padding and the bad slots, the device counter grown by exactly
 *     the number of bad slots, poisoned row gaps untouched.
 *  2. upconvert: random batches (1 .. 12 rows, one of 300,000 tokens per format) with and
 *     without seq_starts, shuffled block tables, workspace rows with gaps, and invalid values
 *     the GPU must skip and count: block ids -1 / num_blocks / INT32_MAX, rows before 0 or past
 *     out_rows, positions past the table row, negative lengths and starts. Rows not named and
 *     skipped rows must keep their poison; the counter must grow by exactly the expected count.
 *  3. a CUDA graph: one captured call of each, replayed on new data in the same buffers.
 *  4. host validation: each failure returns its status and launches nothing (out unchanged).
 *
 * Environment: MLAKV_SEED replays; MLAKV_CUDA_GATHER_MAX_N caps the row counts and
 * MLAKV_CUDA_GATHER_QUICK=1 runs block sizes 61 (padded) and 64 (dense) only, without the large
 * caches (for compute-sanitizer runs). Exit 77 without a usable GPU. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "cuda_host.h"
#include "mlakv.h"
extern "C" {
#include "testutil.h"
}

#define ROW 576
#define POISON 0xA5

static tu_rng g_rng;
static int64_t g_max_n = 1000000;

static int bf16_nan(uint16_t h) { return (h & 0x7FFF) > 0x7F80; }

/* Elements of a and b (n bf16 values) that differ, a NaN matching any NaN. */
static int64_t count_diff(const uint16_t *a, const uint16_t *b, int64_t n, int64_t *first) {
    int64_t bad = 0;
    *first = -1;
    for (int64_t i = 0; i < n; i++) {
        if (a[i] == b[i] || (bf16_nan(a[i]) && bf16_nan(b[i]))) continue;
        if (bad++ == 0) *first = i;
    }
    return bad;
}

/* ---- caches ------------------------------------------------------------------------------- */

typedef struct {
    mlakv_cache host, dev;
    void *hmem, *dmem;
    size_t bytes;
} caches;

static void fill_records(const mlakv_cache *c) {
    const int64_t cap = c->num_blocks * c->block_size;
    const size_t rec = mlakv_record_bytes(c->format);
    static float kv[512], pe[64];
    for (int64_t s = 0; s < cap; s++) {
        const uint64_t kind = tu_next(&g_rng) % 16;
        unsigned char *r = (unsigned char *)c->base + (s / c->block_size) * c->block_stride_bytes +
                           (s % c->block_size) * (int64_t)rec;
        if (kind < 3) { /* raw bytes */
            for (size_t j = 0; j < rec; j += 8) {
                const uint64_t v = tu_next(&g_rng);
                memcpy(r + j, &v, rec - j < 8 ? rec - j : 8);
            }
            continue;
        }
        const double mag = kind == 3 ? 0.0 : ldexp(1.0, (int)tu_range(&g_rng, -20, 11));
        for (int j = 0; j < 512; j++) kv[j] = (float)((2 * tu_uniform(&g_rng) - 1) * mag);
        for (int j = 0; j < 64; j++) pe[j] = (float)((2 * tu_uniform(&g_rng) - 1) * mag * 4);
        const int64_t slot = s;
        MLAKV_OK_OR_DIE(mlakv_write(c, 1, kv, 512, pe, 64, MLAKV_F32, &slot, NULL));
    }
}

static caches make_caches(mlakv_format f, int64_t num_blocks, int64_t bs, int padded) {
    caches c;
    const int64_t stride = padded ? bs * (int64_t)mlakv_record_bytes(f) + 64 : 0;
    MLAKV_OK_OR_DIE(mlakv_cache_bytes(f, num_blocks, bs, stride, &c.bytes));
    c.hmem = malloc(c.bytes);
    memset(c.hmem, 0x3C, c.bytes);
    MLAKV_OK_OR_DIE(mlakv_cache_init(&c.host, c.hmem, f, num_blocks, bs, stride));
    fill_records(&c.host);
    CUDA_OK(cudaMalloc(&c.dmem, c.bytes));
    CUDA_OK(cudaMemcpy(c.dmem, c.hmem, c.bytes, cudaMemcpyHostToDevice));
    MLAKV_OK_OR_DIE(mlakv_cache_init(&c.dev, c.dmem, f, num_blocks, bs, stride));
    /* half of the static NVFP4 caches carry a latent scale (applied by both sides' readers) */
    if ((f == MLAKV_NVFP4_DS_MLA || f == MLAKV_NVFP4_FP8_ROPE) && tu_range(&g_rng, 0, 2)) {
        const float s_l = (float)(tu_uniform(&g_rng) * 0.01 + 1e-4);
        MLAKV_OK_OR_DIE(mlakv_cache_set_latent_scale(&c.host, s_l));
        MLAKV_OK_OR_DIE(mlakv_cache_set_latent_scale(&c.dev, s_l));
    }
    return c;
}

static void free_caches(caches *c) {
    free(c->hmem);
    cudaFree(c->dmem);
}

/* ---- 1. gather_bf16 ------------------------------------------------------------------------ */

static void run_gather(const caches *c, int64_t n, int64_t stride) {
    if (n > g_max_n) n = g_max_n;
    const int64_t cap = c->host.num_blocks * c->host.block_size;
    const int64_t st = stride ? stride : ROW;
    int32_t *slots = (int32_t *)malloc((size_t)n * 4), *cpu_slots = (int32_t *)malloc((size_t)n * 4);
    unsigned long long want_bad = 0;
    for (int64_t i = 0; i < n; i++) {
        const uint64_t k = tu_next(&g_rng) % 32;
        int32_t s = (int32_t)tu_range(&g_rng, 0, cap);
        if (k == 0) s = -1;
        if (k == 1) s = INT32_MIN;
        if (k == 2) s = (int32_t)cap;
        if (k == 3) s = INT32_MAX;
        if (k == 4) s = (int32_t)tu_range(&g_rng, cap, (int64_t)INT32_MAX + 1);
        slots[i] = s;
        cpu_slots[i] = s >= cap ? -1 : s; /* the GPU's zero row */
        want_bad += s >= cap;
    }
    const size_t ob = (size_t)(n * st) * 2;
    uint16_t *ref = (uint16_t *)malloc(ob), *got = (uint16_t *)malloc(ob);
    memset(ref, POISON, ob);
    MLAKV_OK_OR_DIE(mlakv_gather_bf16(&c->host, n, cpu_slots, ref, stride));

    int32_t *d_slots;
    void *d_out;
    unsigned long long *d_cnt, base_cnt = tu_next(&g_rng) >> 20, cnt = 0;
    CUDA_OK(cudaMalloc(&d_slots, (size_t)n * 4));
    CUDA_OK(cudaMalloc(&d_out, ob));
    CUDA_OK(cudaMalloc(&d_cnt, 8));
    CUDA_OK(cudaMemcpy(d_slots, slots, (size_t)n * 4, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(d_out, POISON, ob));
    CUDA_OK(cudaMemcpy(d_cnt, &base_cnt, 8, cudaMemcpyHostToDevice));
    CHECK_OK(mlakv_cuda_gather_bf16(&c->dev, n, d_slots, d_out, stride, d_cnt, NULL));
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(got, d_out, ob, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(&cnt, d_cnt, 8, cudaMemcpyDeviceToHost));
    int64_t first;
    const int64_t bad = count_diff(got, ref, n * st, &first);
    CHECKF(bad == 0, "gather format %d bs %lld n %lld stride %lld: %lld values differ, first row "
           "%lld col %lld: got %04x want %04x (slot %d)", (int)c->host.format,
           (long long)c->host.block_size, (long long)n, (long long)stride, (long long)bad,
           (long long)(first / st), (long long)(first % st), bad ? got[first] : 0,
           bad ? ref[first] : 0, bad ? slots[first / st] : 0);
    CHECKF(cnt == base_cnt + want_bad, "gather counter %llu, want %llu", cnt - base_cnt, want_bad);
    /* without a counter too */
    CHECK_OK(mlakv_cuda_gather_bf16(&c->dev, n, d_slots, d_out, stride, NULL, NULL));
    CUDA_OK(cudaDeviceSynchronize());
    cudaFree(d_slots);
    cudaFree(d_out);
    cudaFree(d_cnt);
    free(slots);
    free(cpu_slots);
    free(ref);
    free(got);
}

/* ---- 2. upconvert ------------------------------------------------------------------------- */

typedef struct {
    int64_t batch, bts, out_rows;
    int32_t *table, *lens, *ws, *starts;
    int use_starts;
} upc;

/* A random case. bad != 0 puts invalid values in (each kind with some probability); total
 * sets one long row of that many tokens instead (block tables of distinct shuffled blocks). */
static upc make_upc(const mlakv_cache *c, int use_starts, int bad, int64_t total) {
    upc u;
    const int64_t bs = c->block_size, nb = c->num_blocks;
    u.use_starts = use_starts;
    u.batch = total ? 1 + (int64_t)(tu_next(&g_rng) % 8) : tu_range(&g_rng, 1, 13);
    int64_t want_len = total ? (total + u.batch - 1) / u.batch : 0;
    u.bts = total ? (want_len + bs - 1) / bs + 2 : tu_range(&g_rng, 1, nb + 3);
    u.table = (int32_t *)malloc((size_t)(u.batch * u.bts) * 4);
    u.lens = (int32_t *)malloc((size_t)u.batch * 4);
    u.ws = (int32_t *)malloc((size_t)u.batch * 4);
    u.starts = (int32_t *)malloc((size_t)u.batch * 4);
    int64_t next = tu_range(&g_rng, 0, 9);
    for (int64_t b = 0; b < u.batch; b++) {
        for (int64_t k = 0; k < u.bts; k++) {
            int32_t id = (int32_t)tu_range(&g_rng, 0, nb);
            if (bad && tu_next(&g_rng) % 40 == 0) {
                const int32_t bads[3] = {-1, (int32_t)nb, INT32_MAX};
                id = bads[tu_next(&g_rng) % 3];
            }
            u.table[b * u.bts + k] = id;
        }
        const int64_t span = u.bts * bs;
        int64_t start = use_starts ? tu_range(&g_rng, 0, total ? bs : span) : 0;
        int64_t len = total ? want_len : tu_range(&g_rng, 0, (span - start < 600 ? span - start : 600) + 1);
        if (!total && tu_next(&g_rng) % 10 == 0) len = 0;
        if (bad && tu_next(&g_rng) % 8 == 0) len += tu_range(&g_rng, 1, 3 * bs); /* past the row */
        if (bad && tu_next(&g_rng) % 16 == 0) len = -(int64_t)tu_range(&g_rng, 1, 100);
        if (bad && use_starts && tu_next(&g_rng) % 16 == 0) start = -(int64_t)tu_range(&g_rng, 1, 100);
        u.lens[b] = (int32_t)len;
        u.starts[b] = (int32_t)start;
        u.ws[b] = (int32_t)next;
        if (len > 0) next += len;
        next += tu_range(&g_rng, 0, 5);
    }
    u.out_rows = next + tu_range(&g_rng, 0, 4);
    if (bad && tu_next(&g_rng) % 2 == 0 && u.lens[0] > 0) u.ws[0] -= (int32_t)tu_range(&g_rng, 1, u.lens[0] + 1);
    if (bad && tu_next(&g_rng) % 2 == 0) u.out_rows -= tu_range(&g_rng, 0, next / 2 + 1);
    if (u.out_rows < 0) u.out_rows = 0;
    return u;
}

static void free_upc(upc *u) {
    free(u->table);
    free(u->lens);
    free(u->ws);
    free(u->starts);
}

static int32_t *to_dev(const int32_t *h, int64_t n) {
    int32_t *d;
    CUDA_OK(cudaMalloc(&d, (size_t)(n > 0 ? n : 1) * 4));
    CUDA_OK(cudaMemcpy(d, h, (size_t)n * 4, cudaMemcpyHostToDevice));
    return d;
}

/* The expected output (poison where nothing is written) and count, from the CPU gather. */
static unsigned long long upc_expected(const caches *c, const upc *u, int64_t st, uint16_t *ref) {
    const int64_t bs = c->host.block_size, nb = c->host.num_blocks;
    unsigned long long bad = 0;
    int64_t nv = 0;
    for (int64_t b = 0; b < u->batch; b++) nv += u->lens[b] > 0 ? u->lens[b] : 0;
    int32_t *slots = (int32_t *)malloc((size_t)(nv > 0 ? nv : 1) * 4);
    int64_t *rows = (int64_t *)malloc((size_t)(nv > 0 ? nv : 1) * 8);
    int64_t k = 0;
    for (int64_t b = 0; b < u->batch; b++) {
        const int64_t len = u->lens[b], start = u->use_starts ? u->starts[b] : 0, ws = u->ws[b];
        if (len < 0 || start < 0) {
            bad++;
            continue;
        }
        for (int64_t i = 0; i < len; i++) {
            const int64_t p = start + i, o = ws + i;
            if (o < 0 || o >= u->out_rows || p >= u->bts * bs) {
                bad++;
                continue;
            }
            const int32_t id = u->table[b * u->bts + p / bs];
            if (id < 0 || id >= nb) {
                bad++;
                continue;
            }
            slots[k] = (int32_t)(id * bs + p % bs);
            rows[k++] = o;
        }
    }
    uint16_t *tmp = (uint16_t *)malloc((size_t)(k > 0 ? k : 1) * ROW * 2);
    MLAKV_OK_OR_DIE(mlakv_gather_bf16(&c->host, k, slots, tmp, 0));
    for (int64_t j = 0; j < k; j++) memcpy(ref + rows[j] * st, tmp + j * ROW, ROW * 2);
    free(tmp);
    free(slots);
    free(rows);
    return bad;
}

static void run_upconvert(const caches *c, int use_starts, int bad_values, int64_t total,
                          int64_t stride) {
    if (total > g_max_n) total = g_max_n;
    upc u = make_upc(&c->host, use_starts, bad_values, total);
    const int64_t st = stride ? stride : ROW;
    const size_t ob = (size_t)((u.out_rows > 0 ? u.out_rows : 1) * st) * 2;
    uint16_t *ref = (uint16_t *)malloc(ob), *got = (uint16_t *)malloc(ob);
    memset(ref, POISON, ob);
    const unsigned long long want_bad = upc_expected(c, &u, st, ref);

    int32_t *d_table = to_dev(u.table, u.batch * u.bts), *d_lens = to_dev(u.lens, u.batch);
    int32_t *d_ws = to_dev(u.ws, u.batch), *d_starts = to_dev(u.starts, u.batch);
    void *d_out;
    unsigned long long *d_cnt, base_cnt = tu_next(&g_rng) >> 20, cnt = 0;
    CUDA_OK(cudaMalloc(&d_out, ob));
    CUDA_OK(cudaMalloc(&d_cnt, 8));
    CUDA_OK(cudaMemset(d_out, POISON, ob));
    CUDA_OK(cudaMemcpy(d_cnt, &base_cnt, 8, cudaMemcpyHostToDevice));
    CHECK_OK(mlakv_cuda_gather_upconvert(&c->dev, u.batch, d_table, u.bts, d_lens, d_ws,
                                         use_starts ? d_starts : NULL, d_out, u.out_rows, stride,
                                         d_cnt, NULL));
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(got, d_out, ob, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(&cnt, d_cnt, 8, cudaMemcpyDeviceToHost));
    int64_t first;
    const int64_t bad = count_diff(got, ref, (int64_t)(ob / 2), &first);
    CHECKF(bad == 0, "upconvert format %d bs %lld batch %lld starts %d bad %d rows %lld: %lld "
           "values differ, first row %lld col %lld: got %04x want %04x", (int)c->host.format,
           (long long)c->host.block_size, (long long)u.batch, use_starts, bad_values,
           (long long)u.out_rows, (long long)bad, (long long)(first / st),
           (long long)(first % st), bad ? got[first] : 0, bad ? ref[first] : 0);
    CHECKF(cnt == base_cnt + want_bad, "upconvert counter %llu, want %llu (format %d batch %lld)",
           cnt - base_cnt, want_bad, (int)c->host.format, (long long)u.batch);
    cudaFree(d_table);
    cudaFree(d_lens);
    cudaFree(d_ws);
    cudaFree(d_starts);
    cudaFree(d_out);
    cudaFree(d_cnt);
    free(ref);
    free(got);
    free_upc(&u);
}

/* ---- 3. graph ----------------------------------------------------------------------------- */

static void test_graph(const caches *c) {
    const int64_t n = 777, cap = c->host.num_blocks * c->host.block_size;
    int32_t slots[777];
    uint16_t *ref = (uint16_t *)malloc(n * ROW * 2), *got = (uint16_t *)malloc(n * ROW * 2);
    int32_t *d_slots;
    void *d_out;
    CUDA_OK(cudaMalloc(&d_slots, n * 4));
    CUDA_OK(cudaMalloc(&d_out, n * ROW * 2));
    cudaStream_t s;
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    CHECK_OK(mlakv_cuda_gather_bf16(&c->dev, n, d_slots, d_out, 0, NULL, s));
    CUDA_OK(cudaStreamEndCapture(s, &g));
    CUDA_OK(cudaGraphInstantiate(&ge, g, 0));
    for (int rep = 0; rep < 2; rep++) {
        for (int64_t i = 0; i < n; i++) slots[i] = (int32_t)tu_range(&g_rng, -1, cap);
        CUDA_OK(cudaMemcpy(d_slots, slots, n * 4, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemset(d_out, POISON, n * ROW * 2));
        CUDA_OK(cudaGraphLaunch(ge, s));
        CUDA_OK(cudaStreamSynchronize(s));
        CUDA_OK(cudaMemcpy(got, d_out, n * ROW * 2, cudaMemcpyDeviceToHost));
        MLAKV_OK_OR_DIE(mlakv_gather_bf16(&c->host, n, slots, ref, 0));
        int64_t first;
        CHECK(count_diff(got, ref, n * ROW, &first) == 0);
    }
    CUDA_OK(cudaGraphExecDestroy(ge));
    CUDA_OK(cudaGraphDestroy(g));

    /* upconvert: one row of 500 tokens from position 3, block table replaced between replays */
    const int64_t bs = c->host.block_size, len = 500, bts = (len + 3 + bs - 1) / bs;
    int32_t *table = (int32_t *)malloc(bts * 4), lens[1] = {(int32_t)len}, ws[1] = {0}, st[1] = {3};
    int32_t *d_table = to_dev(table, bts), *d_lens = to_dev(lens, 1), *d_ws = to_dev(ws, 1);
    int32_t *d_st = to_dev(st, 1);
    CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    CHECK_OK(mlakv_cuda_gather_upconvert(&c->dev, 1, d_table, bts, d_lens, d_ws, d_st, d_out, len,
                                         0, NULL, s));
    CUDA_OK(cudaStreamEndCapture(s, &g));
    CUDA_OK(cudaGraphInstantiate(&ge, g, 0));
    for (int rep = 0; rep < 2; rep++) {
        for (int64_t k = 0; k < bts; k++) table[k] = (int32_t)tu_range(&g_rng, 0, c->host.num_blocks);
        CUDA_OK(cudaMemcpy(d_table, table, bts * 4, cudaMemcpyHostToDevice));
        CUDA_OK(cudaGraphLaunch(ge, s));
        CUDA_OK(cudaStreamSynchronize(s));
        CUDA_OK(cudaMemcpy(got, d_out, len * ROW * 2, cudaMemcpyDeviceToHost));
        MLAKV_OK_OR_DIE(mlakv_gather_upconvert(&c->host, 1, table, bts, lens, ws, st, ref, len, 0));
        int64_t first;
        CHECK(count_diff(got, ref, len * ROW, &first) == 0);
    }
    CUDA_OK(cudaGraphExecDestroy(ge));
    CUDA_OK(cudaGraphDestroy(g));
    CUDA_OK(cudaStreamDestroy(s));
    cudaFree(d_slots);
    cudaFree(d_out);
    cudaFree(d_table);
    cudaFree(d_lens);
    cudaFree(d_ws);
    cudaFree(d_st);
    free(table);
    free(ref);
    free(got);
}

/* ---- 4. validation ------------------------------------------------------------------------ */

static void test_validation(const caches *c) {
    const int64_t n = 16, ob = n * ROW * 2 + 4096;
    int32_t *d_slots;
    unsigned char *d_out;
    unsigned long long *d_cnt;
    unsigned char *h = (unsigned char *)malloc(ob);
    CUDA_OK(cudaMalloc(&d_slots, n * 4));
    CUDA_OK(cudaMemset(d_slots, 0, n * 4));
    CUDA_OK(cudaMalloc(&d_out, ob));
    CUDA_OK(cudaMalloc(&d_cnt, 16));
    CUDA_OK(cudaMemset(d_out, POISON, ob));
    const mlakv_cache *dc = &c->dev;
    mlakv_cache odd = *dc;
    odd.base = (char *)dc->base + 8;
#define G(call, want) CHECK_STATUS(call, want)
    G(mlakv_cuda_gather_bf16(NULL, n, d_slots, d_out, 0, NULL, NULL), MLAKV_ERR_NULL_POINTER);
    G(mlakv_cuda_gather_bf16(dc, -1, d_slots, d_out, 0, NULL, NULL), MLAKV_ERR_GEOMETRY);
    G(mlakv_cuda_gather_bf16(dc, n, NULL, d_out, 0, NULL, NULL), MLAKV_ERR_NULL_POINTER);
    G(mlakv_cuda_gather_bf16(dc, n, d_slots, NULL, 0, NULL, NULL), MLAKV_ERR_NULL_POINTER);
    G(mlakv_cuda_gather_bf16(dc, n, d_slots, d_out, 575, NULL, NULL), MLAKV_ERR_STRIDE);
    G(mlakv_cuda_gather_bf16(dc, n, d_slots, d_out, -8, NULL, NULL), MLAKV_ERR_STRIDE);
    G(mlakv_cuda_gather_bf16(dc, n, d_slots, d_out, 580, NULL, NULL), MLAKV_ERR_ALIGNMENT);
    G(mlakv_cuda_gather_bf16(dc, n, d_slots, d_out + 8, 0, NULL, NULL), MLAKV_ERR_ALIGNMENT);
    G(mlakv_cuda_gather_bf16(dc, n, d_slots + 0, d_out, 0, (unsigned long long *)(void *)(d_out + ob - 4), NULL),
      MLAKV_ERR_ALIGNMENT);
    G(mlakv_cuda_gather_bf16(dc, n, (const int32_t *)(void *)((char *)d_slots + 2), d_out, 0, NULL, NULL),
      MLAKV_ERR_ALIGNMENT);
    G(mlakv_cuda_gather_bf16(&odd, n, d_slots, d_out, 0, NULL, NULL), MLAKV_ERR_ALIGNMENT);
    G(mlakv_cuda_gather_bf16(dc, n, d_slots, d_out, INT64_MAX / 4, NULL, NULL), MLAKV_ERR_OVERFLOW);
    G(mlakv_cuda_gather_bf16(dc, n, d_slots, dc->base, 0, NULL, NULL), MLAKV_ERR_ALIASING);
    G(mlakv_cuda_gather_bf16(dc, n, d_slots, d_out, 0, (unsigned long long *)(void *)d_out, NULL),
      MLAKV_ERR_ALIASING);
    G(mlakv_cuda_gather_bf16(dc, n, d_slots, d_out, 0, (unsigned long long *)(void *)d_slots, NULL),
      MLAKV_ERR_ALIASING);
    G(mlakv_cuda_gather_bf16(dc, 4, (const int32_t *)(void *)(d_out + 64), d_out, 0, NULL, NULL),
      MLAKV_ERR_ALIASING);
    G(mlakv_cuda_gather_bf16(dc, 0, NULL, NULL, 0, NULL, NULL), MLAKV_OK);

    int32_t hv[8] = {0, 1, 2, 3, 4, 4, 0, 4};
    int32_t *d_v = to_dev(hv, 8); /* table {0,1} | lens {4,4} at +4 | ws {0,4} at +6 ... */
    const int32_t *t = d_v, *l = d_v + 4, *w = d_v + 6;
#define U(cache_, b_, t_, bts_, l_, w_, s_, o_, r_, st_, cnt_) \
    mlakv_cuda_gather_upconvert(cache_, b_, t_, bts_, l_, w_, s_, o_, r_, st_, cnt_, NULL)
    G(U(dc, 2, t, 2, l, w, NULL, d_out, 8, 0, d_cnt), MLAKV_OK);
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemset(d_out, POISON, ob));
    G(U(dc, 0, NULL, 1, NULL, NULL, NULL, NULL, 0, 0, NULL), MLAKV_OK);
    G(U(NULL, 2, t, 2, l, w, NULL, d_out, 8, 0, NULL), MLAKV_ERR_NULL_POINTER);
    G(U(dc, -1, t, 2, l, w, NULL, d_out, 8, 0, NULL), MLAKV_ERR_GEOMETRY);
    G(U(dc, 2, t, 2, l, w, NULL, d_out, -1, 0, NULL), MLAKV_ERR_GEOMETRY);
    G(U(dc, 2, t, 0, l, w, NULL, d_out, 8, 0, NULL), MLAKV_ERR_STRIDE);
    G(U(dc, 2, NULL, 2, l, w, NULL, d_out, 8, 0, NULL), MLAKV_ERR_NULL_POINTER);
    G(U(dc, 2, t, 2, NULL, w, NULL, d_out, 8, 0, NULL), MLAKV_ERR_NULL_POINTER);
    G(U(dc, 2, t, 2, l, NULL, NULL, d_out, 8, 0, NULL), MLAKV_ERR_NULL_POINTER);
    G(U(dc, 2, t, 2, l, w, NULL, NULL, 8, 0, NULL), MLAKV_ERR_NULL_POINTER);
    G(U(dc, 2, t, 2, l, w, (const int32_t *)(void *)((char *)w + 1), d_out, 8, 0, NULL), MLAKV_ERR_ALIGNMENT);
    G(U(dc, 2, t, 2, l, w, NULL, d_out + 16, 8, 4, NULL), MLAKV_ERR_STRIDE);
    G(U(dc, 2, t, 2, l, w, NULL, d_out + 16, 8, 582, NULL), MLAKV_ERR_ALIGNMENT);
    G(U(dc, 2, t, 2, l, w, NULL, d_out + 4, 8, 0, NULL), MLAKV_ERR_ALIGNMENT);
    G(U(&odd, 2, t, 2, l, w, NULL, d_out, 8, 0, NULL), MLAKV_ERR_ALIGNMENT);
    G(U(dc, 2, t, INT64_MAX / 2, l, w, NULL, d_out, 8, 0, NULL), MLAKV_ERR_OVERFLOW);
    G(U(dc, 2, t, 2, l, w, NULL, dc->base, 8, 0, NULL), MLAKV_ERR_ALIASING);
    G(U(dc, 2, t, 2, l, w, NULL, d_out, 8, 0, (unsigned long long *)(void *)d_v), MLAKV_ERR_ALIASING);
    {
        /* inputs inside out */
        CUDA_OK(cudaMemcpy(d_out + 1152, hv, sizeof hv, cudaMemcpyHostToDevice));
        const int32_t *in = (const int32_t *)(void *)(d_out + 1152);
        G(U(dc, 2, in, 2, l, w, NULL, d_out, 8, 0, NULL), MLAKV_ERR_ALIASING);
        G(U(dc, 2, t, 2, in + 4, w, NULL, d_out, 8, 0, NULL), MLAKV_ERR_ALIASING);
        G(U(dc, 2, t, 2, l, in + 6, NULL, d_out, 8, 0, NULL), MLAKV_ERR_ALIASING);
        G(U(dc, 2, t, 2, l, w, in, d_out, 8, 0, NULL), MLAKV_ERR_ALIASING);
        CUDA_OK(cudaMemset(d_out + 1152, POISON, sizeof hv));
    }
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(h, d_out, ob, cudaMemcpyDeviceToHost));
    int64_t changed = 0;
    for (int64_t i = 0; i < ob; i++) changed += h[i] != POISON;
    CHECKF(changed == 0, "%lld output bytes changed by failing calls", (long long)changed);
    cudaFree(d_v);
    cudaFree(d_slots);
    cudaFree(d_out);
    cudaFree(d_cnt);
    free(h);
}

int main(void) {
    mlakv_status st = mlakv_cuda_check_device();
    if (st != MLAKV_OK) {
        printf("test_cuda_gather: skipped: %s (%s)\n", mlakv_status_name(st), mlakv_last_error());
        return TEST_SKIP;
    }
    tu_rng_init(&g_rng, tu_seed("test_cuda_gather"));
    const char *env = getenv("MLAKV_CUDA_GATHER_MAX_N");
    if (env && *env) g_max_n = strtoll(env, NULL, 0);
    const char *q = getenv("MLAKV_CUDA_GATHER_QUICK");
    const int quick = q && *q && *q != '0';
    const int64_t block_sizes[3] = {1, 61, 64};
    const int64_t counts[9] = {1, 3, 4, 5, 63, 1000, 4097, 33333, 100003};
    for (int f = 0; f < MLAKV_FORMAT_COUNT; f++) {
        for (int b = 0; b < 3; b++) {
            for (int padded = 0; padded < 2; padded++) {
                const int64_t bs = block_sizes[b];
                if (quick && !(bs == 61 && padded) && !(bs == 64 && !padded)) continue;
                caches c = make_caches((mlakv_format)f, bs == 1 ? 5000 : 6000 / bs + 3, bs, padded);
                if (f == 0 && bs == 64 && !padded) test_validation(&c);
                for (int k = 0; k < 9; k++) run_gather(&c, counts[k], k % 3 == 2 ? 576 + 8 * (k + 1) : 0);
                for (int rep = 0; rep < 4; rep++) {
                    run_upconvert(&c, rep & 1, 0, 0, rep == 3 ? 600 : 0);
                    run_upconvert(&c, rep & 1, 1, 0, rep == 2 ? 592 : 0);
                }
                run_upconvert(&c, 1, 1, 20000, 0);
                if (bs == 64 && !padded) test_graph(&c);
                free_caches(&c);
            }
        }
        if (quick) continue;
        /* large: a 300,000-token context and 1,000,000 random slots over a 2^18-record cache */
        caches big = make_caches((mlakv_format)f, (1 << 18) / 64, 64, 0);
        run_gather(&big, 1000000, 0);
        run_upconvert(&big, 1, 0, 300000, 0);
        run_upconvert(&big, 0, 1, 300000, 0);
        free_caches(&big);
    }
    return tu_finish();
}
