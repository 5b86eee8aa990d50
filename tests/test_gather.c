/* CPU gathers (mlakv_gather_bf16, mlakv_gather_upconvert) against mlakv_read rounded to bf16.
 *
 * - Every format, block sizes 1 / 61 / 64, dense and padded block strides; records written by
 *   mlakv_write from inputs of every magnitude plus records of raw random bytes (NaN and
 *   subnormal scales, negative scales): every output value must be bit-identical to
 *   mlakv_f32_to_bf16 of what mlakv_read returns for the record.
 * - gather_bf16: random slots with padding (-1, INT32_MIN): zero rows; padded output rows
 *   whose gaps are poisoned and must stay so.
 * - upconvert: random batches with and without seq_starts (starts not multiples of the block
 *   size), shuffled block tables with spare columns, workspace rows with gaps between the batch
 *   rows, against a plain reference loop; rows not named must keep their poison.
 * - Every error path (NULL, geometry, stride, alignment, overflow, out-of-range slots, rows,
 *   positions and block ids, negative lengths and starts, aliasing): the status, and not one
 *   output byte changed. */
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define ROW MLAKV_QK_DIM
#define POISON 0xA5u

static tu_rng g_rng;

/* A cache of random records: most from mlakv_write (magnitudes 2^-20 .. 2^10 per token, some
 * zero tokens), one in eight raw random bytes. */
static void fill_cache(const mlakv_cache *c) {
    const int64_t cap = c->num_blocks * c->block_size;
    const size_t rec = mlakv_record_bytes(c->format);
    float kv[512], pe[64];
    for (int64_t s = 0; s < cap; s++) {
        const uint64_t kind = tu_next(&g_rng) % 16;
        if (kind < 2) {
            unsigned char *r = (unsigned char *)c->base + (s / c->block_size) * c->block_stride_bytes +
                               (s % c->block_size) * (int64_t)rec;
            for (size_t j = 0; j < rec; j++) r[j] = (unsigned char)tu_next(&g_rng);
            continue;
        }
        const double mag = kind == 2 ? 0.0 : ldexp(1.0, (int)tu_range(&g_rng, -20, 11));
        for (int j = 0; j < 512; j++) kv[j] = (float)(tu_normal(&g_rng) * mag);
        for (int j = 0; j < 64; j++) pe[j] = (float)(tu_normal(&g_rng) * mag * 4);
        const int64_t slot = s;
        if (mlakv_write(c, 1, kv, 512, pe, 64, MLAKV_F32, &slot, NULL) != MLAKV_OK) {
            CHECKF(0, "mlakv_write: %s", mlakv_last_error());
            return;
        }
    }
}

/* The expected row of a slot: mlakv_read, rounded to bf16. */
static void expected_row(const mlakv_cache *c, int64_t slot, uint16_t *row) {
    float lat[512], rope[64];
    if (mlakv_read(c, 1, &slot, lat, rope) != MLAKV_OK) {
        CHECKF(0, "mlakv_read: %s", mlakv_last_error());
        memset(row, 0, ROW * 2);
        return;
    }
    for (int j = 0; j < 512; j++) row[j] = mlakv_f32_to_bf16(lat[j]);
    for (int j = 0; j < 64; j++) row[512 + j] = mlakv_f32_to_bf16(rope[j]);
}

static int row_equal(const uint16_t *a, const uint16_t *b) { return memcmp(a, b, ROW * 2) == 0; }

static int all_poison(const void *p, size_t bytes) {
    const unsigned char *u = (const unsigned char *)p;
    for (size_t i = 0; i < bytes; i++)
        if (u[i] != POISON) return 0;
    return 1;
}

typedef struct {
    mlakv_cache c;
    void *mem;
} test_cache;

static test_cache make_cache(mlakv_format f, int64_t num_blocks, int64_t bs, int padded) {
    test_cache t;
    const int64_t stride = padded ? bs * (int64_t)mlakv_record_bytes(f) + 48 : 0;
    size_t bytes = 0;
    CHECK_OK(mlakv_cache_bytes(f, num_blocks, bs, stride, &bytes));
    t.mem = malloc(bytes);
    memset(t.mem, 0x3C, bytes);
    CHECK_OK(mlakv_cache_init(&t.c, t.mem, f, num_blocks, bs, stride));
    fill_cache(&t.c);
    /* half of the static NVFP4 caches carry a latent scale: the rows are mlakv_read's, scaled */
    if ((f == MLAKV_NVFP4_DS_MLA || f == MLAKV_NVFP4_FP8_ROPE) && tu_range(&g_rng, 0, 2))
        CHECK_OK(mlakv_cache_set_latent_scale(&t.c, (float)(tu_uniform(&g_rng) * 0.01 + 1e-4)));
    return t;
}

/* ---- gather_bf16 ---------------------------------------------------------------------------- */

static void test_gather_bf16(const mlakv_cache *c, int64_t stride) {
    const int64_t cap = c->num_blocks * c->block_size;
    const int64_t n = tu_range(&g_rng, 1, 300);
    int32_t *slots = malloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++) {
        const uint64_t k = tu_next(&g_rng) % 10;
        slots[i] = k == 0 ? -1 : k == 1 ? INT32_MIN : (int32_t)tu_range(&g_rng, 0, cap);
    }
    slots[n - 1] = (int32_t)(cap - 1);
    const int64_t st = stride ? stride : ROW;
    uint16_t *out = malloc((size_t)(n * st) * 2);
    memset(out, POISON, (size_t)(n * st) * 2);
    CHECK_OK(mlakv_gather_bf16(c, n, slots, out, stride));
    uint16_t want[ROW], zero[ROW];
    memset(zero, 0, sizeof zero);
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        if (slots[i] >= 0)
            expected_row(c, slots[i], want);
        else
            memcpy(want, zero, sizeof want);
        if (!row_equal(out + i * st, want)) bad++;
        if (st > ROW && !all_poison(out + i * st + ROW, (size_t)(st - ROW) * 2)) bad++;
    }
    CHECKF(bad == 0, "format %d block size %lld stride %lld: %lld bad rows of %lld", (int)c->format,
           (long long)c->block_size, (long long)stride, (long long)bad, (long long)n);
    free(slots);
    free(out);
}

/* ---- upconvert ------------------------------------------------------------------------------ */

typedef struct {
    int64_t batch, bts, out_rows;
    int32_t *table, *lens, *ws, *starts;
} upc_case;

/* A random valid case: per batch row a shuffled set of block ids, a start (or 0) and a length
 * that stay within the row's columns, workspace rows packed with random gaps. */
static upc_case make_upc(const mlakv_cache *c, int with_starts) {
    upc_case u;
    const int64_t bs = c->block_size;
    u.batch = tu_range(&g_rng, 1, 6);
    u.bts = tu_range(&g_rng, 1, c->num_blocks + 3);
    u.table = malloc((size_t)(u.batch * u.bts) * 4);
    u.lens = malloc((size_t)u.batch * 4);
    u.ws = malloc((size_t)u.batch * 4);
    u.starts = malloc((size_t)u.batch * 4);
    int64_t next = tu_range(&g_rng, 0, 5);
    for (int64_t b = 0; b < u.batch; b++) {
        for (int64_t k = 0; k < u.bts; k++)
            u.table[b * u.bts + k] = (int32_t)tu_range(&g_rng, 0, c->num_blocks);
        const int64_t span = u.bts * bs;
        const int64_t start = with_starts ? tu_range(&g_rng, 0, span) : 0;
        int64_t len = tu_range(&g_rng, 0, span - start + 1);
        if (len > 400) len = 400;
        if (tu_next(&g_rng) % 8 == 0) len = 0;
        /* spare columns past the last used one hold invalid ids: never read */
        if (len > 0)
            for (int64_t k = (start + len - 1) / bs + 1; k < u.bts; k++) u.table[b * u.bts + k] = -7;
        u.starts[b] = (int32_t)start;
        u.lens[b] = (int32_t)len;
        u.ws[b] = (int32_t)next;
        next += len + tu_range(&g_rng, 0, 4);
    }
    u.out_rows = next + tu_range(&g_rng, 0, 3);
    return u;
}

static void free_upc(upc_case *u) {
    free(u->table);
    free(u->lens);
    free(u->ws);
    free(u->starts);
}

static void test_upconvert(const mlakv_cache *c, int with_starts, int64_t stride) {
    upc_case u = make_upc(c, with_starts);
    const int64_t st = stride ? stride : ROW;
    const size_t out_bytes = (size_t)((u.out_rows > 0 ? u.out_rows : 1) * st) * 2;
    uint16_t *out = malloc(out_bytes);
    memset(out, POISON, out_bytes);
    CHECK_OK(mlakv_gather_upconvert(c, u.batch, u.table, u.bts, u.lens, u.ws,
                                    with_starts ? u.starts : NULL, out, u.out_rows, stride));
    char *named = calloc((size_t)u.out_rows + 1, 1);
    uint16_t want[ROW];
    int64_t bad = 0;
    for (int64_t b = 0; b < u.batch; b++) {
        for (int64_t i = 0; i < u.lens[b]; i++) {
            const int64_t p = (with_starts ? u.starts[b] : 0) + i;
            const int64_t slot = (int64_t)u.table[b * u.bts + p / c->block_size] * c->block_size +
                                 p % c->block_size;
            expected_row(c, slot, want);
            const int64_t r = u.ws[b] + i;
            named[r] = 1;
            if (!row_equal(out + r * st, want)) bad++;
        }
    }
    for (int64_t r = 0; r < u.out_rows; r++) {
        if (!named[r] && !all_poison(out + r * st, ROW * 2)) bad++;
        if (st > ROW && !all_poison(out + r * st + ROW, (size_t)(st - ROW) * 2)) bad++;
    }
    CHECKF(bad == 0, "format %d block size %lld starts %d stride %lld: %lld bad rows",
           (int)c->format, (long long)c->block_size, with_starts, (long long)stride,
           (long long)bad);
    free(named);
    free(out);
    free_upc(&u);
}

/* ---- errors --------------------------------------------------------------------------------- */

/* out is poisoned before each call; after a failing call it must be all poison */
#define CHECK_FAILS(call, want, buf, bytes)                                  \
    do {                                                                     \
        memset((buf), POISON, (bytes));                                      \
        CHECK_STATUS(call, want);                                            \
        CHECKF(all_poison((buf), (bytes)), "%s changed the output", #call); \
    } while (0)

static void test_errors(void) {
    test_cache t = make_cache(MLAKV_NVFP4_FP8_ROPE, 4, 16, 0);
    const mlakv_cache *c = &t.c;
    enum { N = 8 };
    int32_t slots[N] = {0, 1, -1, 63, 5, 6, 7, 8};
    const size_t ob = (size_t)10 * ROW * 2;
    unsigned char *outmem = malloc(ob + 16);
    uint16_t *out = (uint16_t *)(void *)outmem; /* malloc: 16-byte aligned */

    /* gather_bf16 */
    CHECK_FAILS(mlakv_gather_bf16(NULL, N, slots, out, 0), MLAKV_ERR_NULL_POINTER, out, ob);
    mlakv_cache bad = *c;
    bad.block_stride_bytes = 0;
    CHECK_FAILS(mlakv_gather_bf16(&bad, N, slots, out, 0), MLAKV_ERR_STRIDE, out, ob);
    bad = *c;
    bad.format = (mlakv_format)9;
    CHECK_FAILS(mlakv_gather_bf16(&bad, N, slots, out, 0), MLAKV_ERR_UNKNOWN_FORMAT, out, ob);
    CHECK_FAILS(mlakv_gather_bf16(c, -1, slots, out, 0), MLAKV_ERR_GEOMETRY, out, ob);
    CHECK_FAILS(mlakv_gather_bf16(c, N, NULL, out, 0), MLAKV_ERR_NULL_POINTER, out, ob);
    CHECK_FAILS(mlakv_gather_bf16(c, N, slots, NULL, 0), MLAKV_ERR_NULL_POINTER, out, ob);
    CHECK_FAILS(mlakv_gather_bf16(c, N, slots, out, 575), MLAKV_ERR_STRIDE, out, ob);
    CHECK_FAILS(mlakv_gather_bf16(c, N, slots, out, -576), MLAKV_ERR_STRIDE, out, ob);
    CHECK_FAILS(mlakv_gather_bf16(c, N, (const int32_t *)(void *)((char *)slots + 2), out, 0),
                MLAKV_ERR_ALIGNMENT, out, ob);
    CHECK_FAILS(mlakv_gather_bf16(c, 1, slots, (char *)out + 2, 0), MLAKV_ERR_ALIGNMENT, out, ob);
    CHECK_FAILS(mlakv_gather_bf16(c, 1, slots, (char *)out + 1, 0), MLAKV_ERR_ALIGNMENT, out, ob);
    CHECK_FAILS(mlakv_gather_bf16(c, N, slots, out, INT64_MAX / 2), MLAKV_ERR_OVERFLOW, out, ob);
    slots[4] = 64; /* == capacity */
    CHECK_FAILS(mlakv_gather_bf16(c, N, slots, out, 0), MLAKV_ERR_SLOT_OUT_OF_RANGE, out, ob);
    slots[4] = INT32_MAX;
    CHECK_FAILS(mlakv_gather_bf16(c, N, slots, out, 0), MLAKV_ERR_SLOT_OUT_OF_RANGE, out, ob);
    slots[4] = 4;
    /* out over the cache or over the slots */
    CHECK_STATUS(mlakv_gather_bf16(c, 1, slots, (char *)c->base + 64, 0), MLAKV_ERR_ALIASING);
    {
        int32_t *sl = (int32_t *)(void *)(outmem + 1152 * 2);
        sl[0] = 1;
        sl[1] = 2;
        memset(outmem, POISON, 1152 * 2);
        CHECK_STATUS(mlakv_gather_bf16(c, 2, sl, outmem + 1152, 0), MLAKV_ERR_ALIASING);
        CHECK(all_poison(outmem, 1152 * 2));
        /* rows with a stride leave gaps: slots in a gap do not overlap */
        CHECK_OK(mlakv_gather_bf16(c, 2, sl, outmem, 1200));
    }
    /* n = 0: nothing to do, any pointers */
    CHECK_OK(mlakv_gather_bf16(c, 0, NULL, NULL, 0));

    /* upconvert: batch 2, 2 columns of 16-token blocks, out rows [0, 5) and [5, 9) of 9 */
    int32_t table[4] = {0, 1, 2, 3}, lens[2] = {5, 4}, ws[2] = {0, 5}, starts[2] = {3, 20};
    const int64_t rows = 9;
#define UPC(c_, b_, t_, bts_, l_, w_, s_, o_, r_, st_) \
    mlakv_gather_upconvert(c_, b_, t_, bts_, l_, w_, s_, o_, r_, st_)
    CHECK_OK(UPC(c, 2, table, 2, lens, ws, starts, out, rows, 0));
    CHECK_OK(UPC(c, 0, NULL, 1, NULL, NULL, NULL, NULL, 0, 0));
    CHECK_FAILS(UPC(NULL, 2, table, 2, lens, ws, starts, out, rows, 0), MLAKV_ERR_NULL_POINTER, out, ob);
    CHECK_FAILS(UPC(c, -1, table, 2, lens, ws, starts, out, rows, 0), MLAKV_ERR_GEOMETRY, out, ob);
    CHECK_FAILS(UPC(c, 2, table, 2, lens, ws, starts, out, -1, 0), MLAKV_ERR_GEOMETRY, out, ob);
    CHECK_FAILS(UPC(c, 2, table, 0, lens, ws, starts, out, rows, 0), MLAKV_ERR_STRIDE, out, ob);
    CHECK_FAILS(UPC(c, 2, table, 2, lens, ws, starts, out, rows, 100), MLAKV_ERR_STRIDE, out, ob);
    CHECK_FAILS(UPC(c, 2, table, 2, lens, ws, starts, out, rows, -1), MLAKV_ERR_STRIDE, out, ob);
    CHECK_FAILS(UPC(c, 2, NULL, 2, lens, ws, starts, out, rows, 0), MLAKV_ERR_NULL_POINTER, out, ob);
    CHECK_FAILS(UPC(c, 2, table, 2, NULL, ws, starts, out, rows, 0), MLAKV_ERR_NULL_POINTER, out, ob);
    CHECK_FAILS(UPC(c, 2, table, 2, lens, NULL, starts, out, rows, 0), MLAKV_ERR_NULL_POINTER, out, ob);
    CHECK_FAILS(UPC(c, 2, table, 2, lens, ws, starts, NULL, rows, 0), MLAKV_ERR_NULL_POINTER, out, ob);
    CHECK_FAILS(UPC(c, 2, (const int32_t *)(void *)((char *)table + 1), 2, lens, ws, starts, out, rows, 0),
                MLAKV_ERR_ALIGNMENT, out, ob);
    CHECK_FAILS(UPC(c, 2, table, 2, lens, ws, (const int32_t *)(void *)((char *)starts + 2), out, rows, 0),
                MLAKV_ERR_ALIGNMENT, out, ob);
    CHECK_FAILS(UPC(c, 2, table, 2, lens, ws, starts, (char *)out + 2, rows, 0), MLAKV_ERR_ALIGNMENT, out, ob);
    CHECK_FAILS(UPC(c, 2, table, INT64_MAX / 2, lens, ws, starts, out, rows, 0), MLAKV_ERR_OVERFLOW, out, ob);
    CHECK_FAILS(UPC(c, 2, table, 2, lens, ws, starts, out, INT64_MAX / 4, 0), MLAKV_ERR_OVERFLOW, out, ob);
    lens[1] = -1;
    CHECK_FAILS(UPC(c, 2, table, 2, lens, ws, starts, out, rows, 0), MLAKV_ERR_INVALID_ARGUMENT, out, ob);
    lens[1] = 4;
    starts[1] = -1;
    CHECK_FAILS(UPC(c, 2, table, 2, lens, ws, starts, out, rows, 0), MLAKV_ERR_INVALID_ARGUMENT, out, ob);
    starts[1] = 20;
    ws[1] = 6; /* rows [6, 10) of 9 */
    CHECK_FAILS(UPC(c, 2, table, 2, lens, ws, starts, out, rows, 0), MLAKV_ERR_SLOT_OUT_OF_RANGE, out, ob);
    ws[1] = -1;
    CHECK_FAILS(UPC(c, 2, table, 2, lens, ws, starts, out, rows, 0), MLAKV_ERR_SLOT_OUT_OF_RANGE, out, ob);
    ws[1] = 5;
    starts[1] = 29; /* positions 29..32: column 2 of 2 */
    CHECK_FAILS(UPC(c, 2, table, 2, lens, ws, starts, out, rows, 0), MLAKV_ERR_SLOT_OUT_OF_RANGE, out, ob);
    starts[1] = 28; /* positions 28..31: the last column, fine */
    CHECK_OK(UPC(c, 2, table, 2, lens, ws, starts, out, rows, 0));
    table[3] = 4; /* == num_blocks */
    CHECK_FAILS(UPC(c, 2, table, 2, lens, ws, starts, out, rows, 0), MLAKV_ERR_SLOT_OUT_OF_RANGE, out, ob);
    table[3] = -1;
    CHECK_FAILS(UPC(c, 2, table, 2, lens, ws, starts, out, rows, 0), MLAKV_ERR_SLOT_OUT_OF_RANGE, out, ob);
    /* a column no row reaches may hold anything */
    table[3] = 3;
    table[0] = -5; /* row 0: positions 3..7, column 0 of 16-token blocks */
    CHECK_FAILS(UPC(c, 2, table, 2, lens, ws, starts, out, rows, 0), MLAKV_ERR_SLOT_OUT_OF_RANGE, out, ob);
    table[0] = 0;
    table[1] = -5; /* never reached */
    CHECK_OK(UPC(c, 2, table, 2, lens, ws, starts, out, rows, 0));
    table[1] = 1;
    /* aliasing: out over the cache, the block table, seq_lens, workspace_starts, seq_starts */
    CHECK_STATUS(UPC(c, 2, table, 2, lens, ws, starts, c->base, rows, 0), MLAKV_ERR_ALIASING);
    {
        int32_t *in = (int32_t *)(void *)(outmem + 3 * 1152);
        const int32_t vals[8] = {0, 1, 2, 3, 5, 4, 0, 5};
        for (int k = 0; k < 5; k++) {
            memcpy(in, vals, sizeof vals);
            const int32_t *t_ = k == 0 ? in : table, *l_ = k == 1 ? in + 4 : lens;
            const int32_t *w_ = k == 2 ? in + 6 : ws, *s_ = k == 3 ? in : k == 4 ? in : starts;
            if (k == 4) s_ = in + 2;
            memset(outmem, POISON, 3 * 1152);
            CHECK_STATUS(UPC(c, 2, t_, 2, l_, w_, s_, out, rows, 0), MLAKV_ERR_ALIASING);
            CHECK(all_poison(outmem, 3 * 1152));
        }
    }
    free(outmem);
    free(t.mem);
}

int main(void) {
    tu_rng_init(&g_rng, tu_seed("test_gather"));
    const int64_t block_sizes[3] = {1, 61, 64};
    for (int f = 0; f < MLAKV_FORMAT_COUNT; f++) {
        for (int b = 0; b < 3; b++) {
            for (int padded = 0; padded < 2; padded++) {
                const int64_t bs = block_sizes[b];
                const int64_t nb = bs == 1 ? 300 : 5;
                test_cache t = make_cache((mlakv_format)f, nb, bs, padded);
                for (int rep = 0; rep < 3; rep++) {
                    test_gather_bf16(&t.c, 0);
                    test_gather_bf16(&t.c, 576 + 8 * rep + 3);
                    test_upconvert(&t.c, 0, 0);
                    test_upconvert(&t.c, 1, 0);
                    test_upconvert(&t.c, 1, 600);
                }
                free(t.mem);
            }
        }
    }
    test_errors();
    return tu_finish();
}
