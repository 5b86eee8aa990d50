/* Every error path of every public CPU entry point: the documented status comes back, the
 * message names the function, and no output byte changes (every output buffer is compared
 * with a snapshot taken before the call). */
#include <float.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

/* ---- watched output buffers ------------------------------------------------------------- */

#define MAX_WATCH 8
static struct {
    void *p;
    size_t n;
    unsigned char *snap;
} watch[MAX_WATCH];
static int n_watch;

static void watch_buf(void *p, size_t n) {
    watch[n_watch].p = p;
    watch[n_watch].n = n;
    watch[n_watch].snap = malloc(n);
    n_watch++;
}

static void unwatch_all(void) {
    for (int i = 0; i < n_watch; i++) free(watch[i].snap);
    n_watch = 0;
}

static void snapshot(void) {
    for (int i = 0; i < n_watch; i++) memcpy(watch[i].snap, watch[i].p, watch[i].n);
}

static int unchanged(void) {
    for (int i = 0; i < n_watch; i++)
        if (memcmp(watch[i].snap, watch[i].p, watch[i].n) != 0) return 0;
    return 1;
}

/* call must return `want`, name `fn` in its message, and leave every watched buffer alone. */
#define EXPECT_FAIL(fn, call, want)                                                            \
    do {                                                                                       \
        snapshot();                                                                            \
        mlakv_status st_ = (call);                                                             \
        CHECKF(st_ == (want), "%s: got %s (%s), want %s", #call, mlakv_status_name(st_),       \
               mlakv_last_error(), mlakv_status_name(want));                                   \
        CHECKF(st_ == MLAKV_OK || strstr(mlakv_last_error(), fn) != NULL,                      \
               "%s: message '%s' does not name %s", #call, mlakv_last_error(), fn);            \
        CHECKF(unchanged(), "%s: an output changed on failure", #call);                        \
    } while (0)

static void fill_random(tu_rng *r, void *p, size_t n) {
    unsigned char *b = p;
    for (size_t i = 0; i < n; i++) b[i] = (unsigned char)tu_next(r);
}

/* ---- formats, names, codecs ------------------------------------------------------------- */

static void test_formats(tu_rng *r) {
    CHECK(mlakv_format_get(MLAKV_FORMAT_COUNT) == NULL);
    CHECK(mlakv_format_get((mlakv_format)-1) == NULL);
    CHECK(mlakv_record_bytes(MLAKV_FORMAT_COUNT) == 0);
    CHECK(mlakv_record_bytes((mlakv_format)-7) == 0);
    CHECK(mlakv_dtype_bytes(MLAKV_DTYPE_COUNT) == 0);
    CHECK(mlakv_dtype_bytes((mlakv_dtype)-1) == 0);
    CHECK(strcmp(mlakv_status_name(MLAKV_STATUS_COUNT), "unknown status") == 0);
    CHECK(strcmp(mlakv_status_name((mlakv_status)-1), "unknown status") == 0);
    for (int s = 0; s < MLAKV_STATUS_COUNT; s++)
        CHECK(strncmp(mlakv_status_name((mlakv_status)s), "MLAKV_", 6) == 0);

    mlakv_format f = MLAKV_NVFP4_FP8_ROPE;
    watch_buf(&f, sizeof f);
    EXPECT_FAIL("mlakv_format_from_name", mlakv_format_from_name(NULL, &f), MLAKV_ERR_NULL_POINTER);
    EXPECT_FAIL("mlakv_format_from_name", mlakv_format_from_name("fp8_ds_mla", NULL),
                MLAKV_ERR_NULL_POINTER);
    const char *bad_names[] = {"", "nvfp4", "FP8_DS_MLA", "fp8_ds_mla ", "nvfp4_ds_mla\n", "x"};
    for (size_t i = 0; i < sizeof bad_names / sizeof bad_names[0]; i++)
        EXPECT_FAIL("mlakv_format_from_name", mlakv_format_from_name(bad_names[i], &f),
                    MLAKV_ERR_UNKNOWN_FORMAT);
    unwatch_all();

    /* encode / decode one record */
    float lat[512], rope[64];
    for (int i = 0; i < 512; i++) lat[i] = (float)tu_normal(r);
    for (int j = 0; j < 64; j++) rope[j] = (float)tu_normal(r);
    unsigned char rec[700];
    fill_random(r, rec, sizeof rec);
    mlakv_write_options bad = {(mlakv_fp8_scale_recipe)7, MLAKV_NVFP4_ENCODER_STANDARD},
                        neg = {(mlakv_fp8_scale_recipe)-1, MLAKV_NVFP4_ENCODER_STANDARD};
    watch_buf(rec, sizeof rec);
    const char *enc = "mlakv_encode_record";
    EXPECT_FAIL(enc, mlakv_encode_record(MLAKV_FORMAT_COUNT, lat, rope, rec, NULL),
                MLAKV_ERR_UNKNOWN_FORMAT);
    EXPECT_FAIL(enc, mlakv_encode_record((mlakv_format)-1, lat, rope, rec, NULL),
                MLAKV_ERR_UNKNOWN_FORMAT);
    for (int fm = 0; fm < MLAKV_FORMAT_COUNT; fm++) {
        EXPECT_FAIL(enc, mlakv_encode_record((mlakv_format)fm, NULL, rope, rec, NULL),
                    MLAKV_ERR_NULL_POINTER);
        EXPECT_FAIL(enc, mlakv_encode_record((mlakv_format)fm, lat, NULL, rec, NULL),
                    MLAKV_ERR_NULL_POINTER);
        EXPECT_FAIL(enc, mlakv_encode_record((mlakv_format)fm, lat, rope, NULL, NULL),
                    MLAKV_ERR_NULL_POINTER);
        EXPECT_FAIL(enc, mlakv_encode_record((mlakv_format)fm, lat, rope, rec, &bad),
                    MLAKV_ERR_INVALID_ARGUMENT);
        EXPECT_FAIL(enc, mlakv_encode_record((mlakv_format)fm, lat, rope, rec, &neg),
                    MLAKV_ERR_INVALID_ARGUMENT);
    }
    unwatch_all();
    float ylat[512], yrope[64];
    fill_random(r, ylat, sizeof ylat);
    fill_random(r, yrope, sizeof yrope);
    watch_buf(ylat, sizeof ylat);
    watch_buf(yrope, sizeof yrope);
    const char *dec = "mlakv_decode_record";
    EXPECT_FAIL(dec, mlakv_decode_record(MLAKV_FORMAT_COUNT, rec, ylat, yrope), MLAKV_ERR_UNKNOWN_FORMAT);
    EXPECT_FAIL(dec, mlakv_decode_record((mlakv_format)-2, rec, ylat, yrope), MLAKV_ERR_UNKNOWN_FORMAT);
    EXPECT_FAIL(dec, mlakv_decode_record(MLAKV_NVFP4_DS_MLA, NULL, ylat, yrope), MLAKV_ERR_NULL_POINTER);
    unwatch_all();
}

/* ---- cache descriptor ------------------------------------------------------------------- */

static void test_cache_descriptor(tu_rng *r) {
    static unsigned char mem[4096];
    mlakv_cache c;
    fill_random(r, &c, sizeof c);
    size_t bytes = 12345;
    watch_buf(&c, sizeof c);
    watch_buf(&bytes, sizeof bytes);
    const char *init = "mlakv_cache_init", *cb = "mlakv_cache_bytes";
    EXPECT_FAIL(init, mlakv_cache_init(NULL, mem, MLAKV_NVFP4_DS_MLA, 1, 1, 0), MLAKV_ERR_NULL_POINTER);
    EXPECT_FAIL(init, mlakv_cache_init(&c, NULL, MLAKV_NVFP4_DS_MLA, 1, 1, 0), MLAKV_ERR_NULL_POINTER);
    EXPECT_FAIL(cb, mlakv_cache_bytes(MLAKV_NVFP4_DS_MLA, 1, 1, 0, NULL), MLAKV_ERR_NULL_POINTER);
    struct {
        mlakv_format f;
        int64_t nb, bs, stride;
        mlakv_status want;
    } geo[] = {
        {MLAKV_FORMAT_COUNT, 1, 1, 0, MLAKV_ERR_UNKNOWN_FORMAT},
        {(mlakv_format)-1, 1, 1, 0, MLAKV_ERR_UNKNOWN_FORMAT},
        {MLAKV_NVFP4_DS_MLA, 0, 64, 0, MLAKV_ERR_GEOMETRY},
        {MLAKV_NVFP4_DS_MLA, -1, 64, 0, MLAKV_ERR_GEOMETRY},
        {MLAKV_NVFP4_DS_MLA, INT64_MIN, 64, 0, MLAKV_ERR_GEOMETRY},
        {MLAKV_NVFP4_DS_MLA, 4, 0, 0, MLAKV_ERR_GEOMETRY},
        {MLAKV_NVFP4_DS_MLA, 4, -64, 0, MLAKV_ERR_GEOMETRY},
        {MLAKV_NVFP4_DS_MLA, 4, 64, 64 * 432 - 1, MLAKV_ERR_STRIDE},
        {MLAKV_FP8_DS_MLA, 4, 64, 1, MLAKV_ERR_STRIDE},
        {MLAKV_FP8_DS_MLA, 4, 64, -1, MLAKV_ERR_STRIDE},
        {MLAKV_NVFP4_FP8_ROPE, 4, 1, 367, MLAKV_ERR_STRIDE},
        {MLAKV_NVFP4_FP8_ROPE, 4, INT64_MAX / 100, 0, MLAKV_ERR_OVERFLOW},
        {MLAKV_NVFP4_FP8_ROPE, INT64_MAX, 64, 0, MLAKV_ERR_OVERFLOW},
        {MLAKV_NVFP4_FP8_ROPE, INT64_MAX / 368 + 1, 1, 0, MLAKV_ERR_OVERFLOW},
        {MLAKV_FP8_DS_MLA, 3, 64, INT64_MAX / 2, MLAKV_ERR_OVERFLOW},
    };
    for (size_t i = 0; i < sizeof geo / sizeof geo[0]; i++) {
        EXPECT_FAIL(init, mlakv_cache_init(&c, mem, geo[i].f, geo[i].nb, geo[i].bs, geo[i].stride),
                    geo[i].want);
        EXPECT_FAIL(cb, mlakv_cache_bytes(geo[i].f, geo[i].nb, geo[i].bs, geo[i].stride, &bytes),
                    geo[i].want);
        /* the same geometry filled in by hand (stride 0 means "dense" only for init) */
        if (geo[i].stride != 0) {
            mlakv_cache h = {mem, geo[i].f, geo[i].nb, geo[i].bs, geo[i].stride, 1.0f};
            EXPECT_FAIL("mlakv_cache_validate", mlakv_cache_validate(&h), geo[i].want);
            CHECK(mlakv_cache_capacity(&h) == 0);
        }
    }
    unwatch_all();
    mlakv_cache h = {NULL, MLAKV_NVFP4_DS_MLA, 1, 1, 432, 1.0f};
    EXPECT_FAIL("mlakv_cache_validate", mlakv_cache_validate(&h), MLAKV_ERR_NULL_POINTER);
    CHECK(mlakv_cache_capacity(&h) == 0);
    EXPECT_FAIL("mlakv_cache_validate", mlakv_cache_validate(NULL), MLAKV_ERR_NULL_POINTER);
    CHECK(mlakv_cache_capacity(NULL) == 0);
    h.base = mem;
    h.block_stride_bytes = 0; /* a hand-filled descriptor has no "0 = dense" shortcut */
    EXPECT_FAIL("mlakv_cache_validate", mlakv_cache_validate(&h), MLAKV_ERR_STRIDE);
    h.block_stride_bytes = 432;
    CHECK_OK(mlakv_cache_validate(&h));
    CHECK(mlakv_cache_capacity(&h) == 1);
}

/* ---- writer / reader -------------------------------------------------------------------- */

static void test_write_read(tu_rng *r) {
    const int64_t nb = 3, bs = 5, cap = nb * bs;
    for (int fm = 0; fm < MLAKV_FORMAT_COUNT; fm++) {
        const mlakv_format f = (mlakv_format)fm;
        const size_t rb = mlakv_record_bytes(f);
        const int64_t stride = bs * (int64_t)rb + 16;
        unsigned char *mem = malloc((size_t)(nb * stride));
        fill_random(r, mem, (size_t)(nb * stride));
        mlakv_cache c;
        CHECK_OK(mlakv_cache_init(&c, mem, f, nb, bs, stride));
        enum { N = 4 };
        /* inputs: fp32 with 8 bytes spare so misaligned views stay inside the buffer */
        float *kv = malloc(N * 512 * sizeof(float) + 8), *pe = malloc(N * 64 * sizeof(float) + 8);
        for (int i = 0; i < N * 512; i++) kv[i] = (float)tu_normal(r);
        for (int i = 0; i < N * 64; i++) pe[i] = (float)tu_normal(r);
        int64_t slots[N] = {0, 7, -1, 14};
        mlakv_write_options bad = {(mlakv_fp8_scale_recipe)3, MLAKV_NVFP4_ENCODER_STANDARD};
        watch_buf(mem, (size_t)(nb * stride));
        const char *w = "mlakv_write";
        const mlakv_dtype F32 = MLAKV_F32, BF16 = MLAKV_BF16;
        EXPECT_FAIL(w, mlakv_write(NULL, N, kv, 512, pe, 64, F32, slots, NULL), MLAKV_ERR_NULL_POINTER);
        mlakv_cache broken = c;
        broken.num_blocks = 0;
        EXPECT_FAIL(w, mlakv_write(&broken, N, kv, 512, pe, 64, F32, slots, NULL), MLAKV_ERR_GEOMETRY);
        broken = c;
        broken.block_stride_bytes = (int64_t)rb;
        EXPECT_FAIL(w, mlakv_write(&broken, N, kv, 512, pe, 64, F32, slots, NULL), MLAKV_ERR_STRIDE);
        broken = c;
        broken.format = MLAKV_FORMAT_COUNT;
        EXPECT_FAIL(w, mlakv_write(&broken, N, kv, 512, pe, 64, F32, slots, NULL), MLAKV_ERR_UNKNOWN_FORMAT);
        broken = c;
        broken.base = NULL;
        EXPECT_FAIL(w, mlakv_write(&broken, N, kv, 512, pe, 64, F32, slots, NULL), MLAKV_ERR_NULL_POINTER);
        EXPECT_FAIL(w, mlakv_write(&c, -1, kv, 512, pe, 64, F32, slots, NULL), MLAKV_ERR_GEOMETRY);
        EXPECT_FAIL(w, mlakv_write(&c, INT64_MIN, kv, 512, pe, 64, F32, slots, NULL), MLAKV_ERR_GEOMETRY);
        EXPECT_FAIL(w, mlakv_write(&c, N, NULL, 512, pe, 64, F32, slots, NULL), MLAKV_ERR_NULL_POINTER);
        EXPECT_FAIL(w, mlakv_write(&c, N, kv, 512, NULL, 64, F32, slots, NULL), MLAKV_ERR_NULL_POINTER);
        EXPECT_FAIL(w, mlakv_write(&c, N, kv, 512, pe, 64, F32, NULL, NULL), MLAKV_ERR_NULL_POINTER);
        EXPECT_FAIL(w, mlakv_write(&c, N, kv, 511, pe, 64, F32, slots, NULL), MLAKV_ERR_STRIDE);
        EXPECT_FAIL(w, mlakv_write(&c, N, kv, 0, pe, 64, F32, slots, NULL), MLAKV_ERR_STRIDE);
        EXPECT_FAIL(w, mlakv_write(&c, N, kv, -512, pe, 64, F32, slots, NULL), MLAKV_ERR_STRIDE);
        EXPECT_FAIL(w, mlakv_write(&c, N, kv, 512, pe, 63, F32, slots, NULL), MLAKV_ERR_STRIDE);
        EXPECT_FAIL(w, mlakv_write(&c, N, kv, 512, pe, -1, BF16, slots, NULL), MLAKV_ERR_STRIDE);
        EXPECT_FAIL(w, mlakv_write(&c, N, kv, 512, pe, 64, MLAKV_DTYPE_COUNT, slots, NULL), MLAKV_ERR_DTYPE);
        EXPECT_FAIL(w, mlakv_write(&c, N, kv, 512, pe, 64, (mlakv_dtype)-1, slots, NULL), MLAKV_ERR_DTYPE);
        EXPECT_FAIL(w, mlakv_write(&c, N, (char *)kv + 1, 512, pe, 64, BF16, slots, NULL), MLAKV_ERR_ALIGNMENT);
        EXPECT_FAIL(w, mlakv_write(&c, N, (char *)kv + 2, 512, pe, 64, F32, slots, NULL), MLAKV_ERR_ALIGNMENT);
        EXPECT_FAIL(w, mlakv_write(&c, N, kv, 512, (char *)pe + 1, 64, MLAKV_F16, slots, NULL), MLAKV_ERR_ALIGNMENT);
        /* n * stride beyond 64 bits / size_t: rejected before any row or slot is read */
        EXPECT_FAIL(w, mlakv_write(&c, INT64_MAX / 256, kv, 512, pe, 64, F32, slots, NULL), MLAKV_ERR_OVERFLOW);
        EXPECT_FAIL(w, mlakv_write(&c, 2, kv, INT64_MAX, pe, 64, F32, slots, NULL), MLAKV_ERR_OVERFLOW);
        EXPECT_FAIL(w, mlakv_write(&c, 2, kv, 512, pe, INT64_MAX - 1, BF16, slots, NULL), MLAKV_ERR_OVERFLOW);
        EXPECT_FAIL(w, mlakv_write(&c, INT64_MAX, kv, 512, pe, 64, BF16, slots, NULL), MLAKV_ERR_OVERFLOW);
        EXPECT_FAIL(w, mlakv_write(&c, N, kv, 512, pe, 64, F32, slots, &bad), MLAKV_ERR_INVALID_ARGUMENT);
        const int64_t oor[] = {cap, cap + 1, INT64_MAX, ((int64_t)1 << 32) + 3, (int64_t)1 << 40};
        for (size_t k = 0; k < sizeof oor / sizeof oor[0]; k++) {
            int64_t s2[N] = {0, 7, -1, oor[k]};
            EXPECT_FAIL(w, mlakv_write(&c, N, kv, 512, pe, 64, F32, s2, NULL), MLAKV_ERR_SLOT_OUT_OF_RANGE);
            int64_t s3[N] = {oor[k], 7, -1, 0};
            EXPECT_FAIL(w, mlakv_write(&c, N, kv, 512, pe, 64, F32, s3, NULL), MLAKV_ERR_SLOT_OUT_OF_RANGE);
        }
        /* n == 0 is a valid empty call */
        EXPECT_FAIL(w, mlakv_write(&c, 0, kv, 512, pe, 64, F32, slots, NULL), MLAKV_OK);
        unwatch_all();
        CHECK_OK(mlakv_write(&c, N, kv, 512, pe, 64, F32, slots, NULL));

        /* reader */
        float *yl = malloc(N * 512 * sizeof(float)), *yr = malloc(N * 64 * sizeof(float));
        fill_random(r, yl, N * 512 * sizeof(float));
        fill_random(r, yr, N * 64 * sizeof(float));
        watch_buf(yl, N * 512 * sizeof(float));
        watch_buf(yr, N * 64 * sizeof(float));
        watch_buf(mem, (size_t)(nb * stride));
        const char *rd = "mlakv_read";
        int64_t ok_slots[N] = {0, 7, 14, 3};
        EXPECT_FAIL(rd, mlakv_read(NULL, N, ok_slots, yl, yr), MLAKV_ERR_NULL_POINTER);
        broken = c;
        broken.block_size = 0;
        EXPECT_FAIL(rd, mlakv_read(&broken, N, ok_slots, yl, yr), MLAKV_ERR_GEOMETRY);
        EXPECT_FAIL(rd, mlakv_read(&c, -1, ok_slots, yl, yr), MLAKV_ERR_GEOMETRY);
        EXPECT_FAIL(rd, mlakv_read(&c, N, NULL, yl, yr), MLAKV_ERR_NULL_POINTER);
        EXPECT_FAIL(rd, mlakv_read(&c, INT64_MAX, ok_slots, yl, yr), MLAKV_ERR_OVERFLOW);
        const int64_t bad_slots[] = {-1, INT64_MIN, cap, INT64_MAX, ((int64_t)1 << 32) + 1};
        for (size_t k = 0; k < sizeof bad_slots / sizeof bad_slots[0]; k++) {
            int64_t s2[N] = {0, 7, 14, bad_slots[k]};
            EXPECT_FAIL(rd, mlakv_read(&c, N, s2, yl, yr), MLAKV_ERR_SLOT_OUT_OF_RANGE);
        }
        EXPECT_FAIL(rd, mlakv_read(&c, 0, ok_slots, yl, yr), MLAKV_OK);
        unwatch_all();
        CHECK_OK(mlakv_read(&c, N, ok_slots, yl, NULL));
        CHECK_OK(mlakv_read(&c, N, ok_slots, NULL, yr));
        free(yl), free(yr), free(kv), free(pe), free(mem);
    }
}

/* ---- sparse decode, partials, merge ----------------------------------------------------- */

static void test_decode(tu_rng *r) {
    const int64_t nb = 2, bs = 8, cap = nb * bs;
    const mlakv_format f = MLAKV_NVFP4_FP8_ROPE_TOKEN_SCALE;
    unsigned char *mem = malloc((size_t)(nb * bs) * mlakv_record_bytes(f));
    mlakv_cache c;
    CHECK_OK(mlakv_cache_init(&c, mem, f, nb, bs, 0));
    float kv[512], pe[64];
    for (int64_t s = 0; s < cap; s++) {
        for (int i = 0; i < 512; i++) kv[i] = (float)tu_normal(r);
        for (int j = 0; j < 64; j++) pe[j] = (float)tu_normal(r);
        CHECK_OK(mlakv_write(&c, 1, kv, 512, pe, 64, MLAKV_F32, &s, NULL));
    }
    enum { B = 1, S = 2, H = 2, K = 4 };
    float *q = malloc(B * S * H * 576 * sizeof(float) + 8);
    for (int i = 0; i < B * S * H * 576; i++) q[i] = (float)tu_normal(r);
    int32_t idx[B * S * K + 1] = {0, 3, -1, 15, 2, 9, 1, 0};
    int32_t lengths[B + 1] = {4};
    float sink[H] = {0.5f, -1.0f};
    float *out = malloc(B * S * H * 512 * sizeof(float) + 8), lse[B * S * H + 1];
    float *op = malloc(B * S * H * 512 * sizeof(float)), lp[B * S * H];
    mlakv_decode_args a = mlakv_decode_args_default(B, S, H, K);
    a.q = q;
    a.q_dtype = MLAKV_F32;
    a.indices = idx;
    a.out = out;
    a.out_dtype = MLAKV_F32;
    a.lse = lse;
    a.lengths = lengths;
    a.sink = sink;
    a.num_threads = 1;
    CHECK_OK(mlakv_sparse_decode(&c, &a)); /* the base arguments are valid */
    CHECK_OK(mlakv_sparse_decode_partial(&c, &a, 0, K, op, lp));
    fill_random(r, out, B * S * H * 512 * sizeof(float));
    fill_random(r, lse, sizeof lse);
    fill_random(r, op, B * S * H * 512 * sizeof(float));
    fill_random(r, lp, sizeof lp);
    watch_buf(out, B * S * H * 512 * sizeof(float));
    watch_buf(lse, sizeof lse);
    watch_buf(op, B * S * H * 512 * sizeof(float));
    watch_buf(lp, sizeof lp);
    watch_buf(mem, (size_t)(nb * bs) * mlakv_record_bytes(f));

    const char *sd = "mlakv_sparse_decode", *pd = "mlakv_sparse_decode_partial";
    EXPECT_FAIL(sd, mlakv_sparse_decode(NULL, &a), MLAKV_ERR_NULL_POINTER);
    EXPECT_FAIL(sd, mlakv_sparse_decode(&c, NULL), MLAKV_ERR_NULL_POINTER);
    EXPECT_FAIL(pd, mlakv_sparse_decode_partial(NULL, &a, 0, K, op, lp), MLAKV_ERR_NULL_POINTER);
    EXPECT_FAIL(pd, mlakv_sparse_decode_partial(&c, NULL, 0, K, op, lp), MLAKV_ERR_NULL_POINTER);
    mlakv_cache broken = c;
    broken.block_stride_bytes = 1;
    EXPECT_FAIL(sd, mlakv_sparse_decode(&broken, &a), MLAKV_ERR_STRIDE);

    /* one field broken at a time: sparse_decode and (where it applies) the partial entry */
    struct {
        const char *what;
        mlakv_decode_args a;
        mlakv_status want;
        int applies_to_partial;
    } cases[64];
    int nc = 0;
#define CASE(desc, field_stmt, status, partial_too)                                    \
    do {                                                                               \
        mlakv_decode_args b_ = a;                                                      \
        field_stmt;                                                                    \
        cases[nc].what = desc;                                                         \
        cases[nc].a = b_;                                                              \
        cases[nc].want = status;                                                       \
        cases[nc].applies_to_partial = partial_too;                                    \
        nc++;                                                                          \
    } while (0)
    CASE("batch 0", b_.batch = 0, MLAKV_ERR_GEOMETRY, 1);
    CASE("s_q -1", b_.s_q = -1, MLAKV_ERR_GEOMETRY, 1);
    CASE("heads 0", b_.heads = 0, MLAKV_ERR_GEOMETRY, 1);
    CASE("topk 0", b_.topk = 0, MLAKV_ERR_GEOMETRY, 1);
    CASE("topk min", b_.topk = INT64_MIN, MLAKV_ERR_GEOMETRY, 1);
    CASE("q NULL", b_.q = NULL, MLAKV_ERR_NULL_POINTER, 1);
    CASE("indices NULL", b_.indices = NULL, MLAKV_ERR_NULL_POINTER, 1);
    CASE("out NULL", b_.out = NULL, MLAKV_ERR_NULL_POINTER, 0);
    CASE("q fp16", b_.q_dtype = MLAKV_F16, MLAKV_ERR_DTYPE, 1);
    CASE("q dtype 9", b_.q_dtype = (mlakv_dtype)9, MLAKV_ERR_DTYPE, 1);
    CASE("out fp16", b_.out_dtype = MLAKV_F16, MLAKV_ERR_DTYPE, 0);
    CASE("q misaligned", b_.q = (char *)q + 2, MLAKV_ERR_ALIGNMENT, 1);
    CASE("indices misaligned", b_.indices = (const int32_t *)((const char *)idx + 2), MLAKV_ERR_ALIGNMENT, 1);
    CASE("out misaligned", b_.out = (char *)out + 1, MLAKV_ERR_ALIGNMENT, 0);
    CASE("mode 5", b_.mode = (mlakv_attn_mode)5, MLAKV_ERR_INVALID_ARGUMENT, 1);
    CASE("threads -1", b_.num_threads = -1, MLAKV_ERR_INVALID_ARGUMENT, 1);
    CASE("sm_scale NaN", b_.sm_scale = NAN, MLAKV_ERR_INVALID_ARGUMENT, 1);
    CASE("sm_scale Inf", b_.sm_scale = INFINITY, MLAKV_ERR_INVALID_ARGUMENT, 1);
    CASE("q head stride", b_.q_stride_head = 575, MLAKV_ERR_STRIDE, 1);
    CASE("q stride negative", b_.q_stride_head = -576, MLAKV_ERR_STRIDE, 1);
    CASE("indices token stride", b_.indices_stride_token = K - 1, MLAKV_ERR_STRIDE, 1);
    CASE("q stride overflow", b_.q_stride_token = INT64_MAX / 2 + 1, MLAKV_ERR_OVERFLOW, 1);
    CASE("indices stride overflow", b_.indices_stride_token = INT64_MAX, MLAKV_ERR_OVERFLOW, 1);
    CASE("huge heads", (b_.heads = INT64_MAX / 1000, b_.q_stride_token = INT64_MAX / 100), MLAKV_ERR_OVERFLOW, 1);
    static const float sink_nan[H] = {0.0f, NAN}, sink_inf[H] = {INFINITY, 0.0f};
    static const int32_t len_neg[B] = {-1};
    static const int32_t idx_cap[B * S * K] = {0, 1, 2, 16, 0, 0, 0, 0};
    static const int32_t idx_max[B * S * K] = {0, 1, 2, 3, 0, 0, 0, INT32_MAX};
    CASE("sink NaN", b_.sink = sink_nan, MLAKV_ERR_INVALID_ARGUMENT, 0);
    CASE("sink +Inf", b_.sink = sink_inf, MLAKV_ERR_INVALID_ARGUMENT, 0);
    CASE("lengths < 0", b_.lengths = len_neg, MLAKV_ERR_INVALID_ARGUMENT, 1);
    CASE("index = capacity", b_.indices = idx_cap, MLAKV_ERR_SLOT_OUT_OF_RANGE, 1);
    CASE("index INT32_MAX", b_.indices = idx_max, MLAKV_ERR_SLOT_OUT_OF_RANGE, 1);
    for (int i = 0; i < nc; i++) {
        long failed_before = tu_failed;
        EXPECT_FAIL(sd, mlakv_sparse_decode(&c, &cases[i].a), cases[i].want);
        if (cases[i].applies_to_partial)
            EXPECT_FAIL(pd, mlakv_sparse_decode_partial(&c, &cases[i].a, 0, K, op, lp), cases[i].want);
        if (tu_failed != failed_before) fprintf(stderr, "  (case: %s)\n", cases[i].what);
    }
    EXPECT_FAIL(pd, mlakv_sparse_decode_partial(&c, &a, -1, K, op, lp), MLAKV_ERR_INVALID_ARGUMENT);
    EXPECT_FAIL(pd, mlakv_sparse_decode_partial(&c, &a, 3, 2, op, lp), MLAKV_ERR_INVALID_ARGUMENT);
    EXPECT_FAIL(pd, mlakv_sparse_decode_partial(&c, &a, 0, K + 1, op, lp), MLAKV_ERR_INVALID_ARGUMENT);
    EXPECT_FAIL(pd, mlakv_sparse_decode_partial(&c, &a, 0, K, NULL, lp), MLAKV_ERR_NULL_POINTER);
    EXPECT_FAIL(pd, mlakv_sparse_decode_partial(&c, &a, 0, K, op, NULL), MLAKV_ERR_NULL_POINTER);
    unwatch_all();

    /* merge */
    enum { P = 3, R = 4, D = 8 };
    float parts[P * R * D], lparts[P * R], mo[R * D], ml[R], msink[R] = {0, 0, 0, 0};
    for (int i = 0; i < P * R * D; i++) parts[i] = (float)tu_normal(r);
    for (int i = 0; i < P * R; i++) lparts[i] = (float)tu_normal(r);
    lparts[5] = -INFINITY; /* an empty partial is valid */
    CHECK_OK(mlakv_merge_partials(P, R, D, parts, lparts, msink, mo, ml));
    fill_random(r, mo, sizeof mo);
    fill_random(r, ml, sizeof ml);
    watch_buf(mo, sizeof mo);
    watch_buf(ml, sizeof ml);
    const char *mg = "mlakv_merge_partials";
    EXPECT_FAIL(mg, mlakv_merge_partials(0, R, D, parts, lparts, NULL, mo, ml), MLAKV_ERR_GEOMETRY);
    EXPECT_FAIL(mg, mlakv_merge_partials(P, 0, D, parts, lparts, NULL, mo, ml), MLAKV_ERR_GEOMETRY);
    EXPECT_FAIL(mg, mlakv_merge_partials(P, R, -1, parts, lparts, NULL, mo, ml), MLAKV_ERR_GEOMETRY);
    EXPECT_FAIL(mg, mlakv_merge_partials(P, R, D, NULL, lparts, NULL, mo, ml), MLAKV_ERR_NULL_POINTER);
    EXPECT_FAIL(mg, mlakv_merge_partials(P, R, D, parts, NULL, NULL, mo, ml), MLAKV_ERR_NULL_POINTER);
    EXPECT_FAIL(mg, mlakv_merge_partials(P, R, D, parts, lparts, NULL, NULL, ml), MLAKV_ERR_NULL_POINTER);
    EXPECT_FAIL(mg, mlakv_merge_partials(2, INT64_MAX / 2, 4, parts, lparts, NULL, mo, ml), MLAKV_ERR_OVERFLOW);
    EXPECT_FAIL(mg, mlakv_merge_partials(INT64_MAX, 2, 2, parts, lparts, NULL, mo, ml), MLAKV_ERR_OVERFLOW);
    lparts[7] = NAN;
    EXPECT_FAIL(mg, mlakv_merge_partials(P, R, D, parts, lparts, NULL, mo, ml), MLAKV_ERR_INVALID_ARGUMENT);
    lparts[7] = INFINITY;
    EXPECT_FAIL(mg, mlakv_merge_partials(P, R, D, parts, lparts, NULL, mo, ml), MLAKV_ERR_INVALID_ARGUMENT);
    lparts[7] = 0.0f;
    msink[2] = NAN;
    EXPECT_FAIL(mg, mlakv_merge_partials(P, R, D, parts, lparts, msink, mo, ml), MLAKV_ERR_INVALID_ARGUMENT);
    msink[2] = INFINITY;
    EXPECT_FAIL(mg, mlakv_merge_partials(P, R, D, parts, lparts, msink, mo, ml), MLAKV_ERR_INVALID_ARGUMENT);
    unwatch_all();
    free(q), free(out), free(op), free(mem);
}

/* ---- CUDA entry points in a build without CUDA ------------------------------------------ */

static void test_no_cuda(void) {
    if (mlakv_cuda_compiled()) {
        printf("CUDA compiled in: the NO_CUDA paths are covered by the CUDA tests\n");
        return;
    }
    static unsigned char mem[432];
    mlakv_cache c;
    CHECK_OK(mlakv_cache_init(&c, mem, MLAKV_NVFP4_DS_MLA, 1, 1, 0));
    mlakv_decode_args a = mlakv_decode_args_default(1, 1, 1, 1);
    size_t ws = 777;
    watch_buf(&ws, sizeof ws);
    EXPECT_FAIL("", mlakv_cuda_check_device(), MLAKV_ERR_NO_CUDA);
    EXPECT_FAIL("", mlakv_cuda_write(&c, 0, NULL, 512, NULL, 64, MLAKV_BF16, NULL, NULL, NULL, NULL),
                MLAKV_ERR_NO_CUDA);
    EXPECT_FAIL("", mlakv_cuda_decode_workspace_size(&c, &a, &ws), MLAKV_ERR_NO_CUDA);
    EXPECT_FAIL("", mlakv_cuda_sparse_decode(&c, &a, NULL, 0, NULL), MLAKV_ERR_NO_CUDA);
    unwatch_all();
}

/* ---- host-side checks of the CUDA decoder (a CUDA build, with or without a GPU) ---------- */

/* The CUDA decoder validates its arguments before it looks for a device, with the CPU decoder's
 * stride rules (mlakv_check_decode_strides), so these statuses hold on any machine. */
static void test_cuda_decode_host_checks(void) {
    if (!mlakv_cuda_compiled()) return;
    static unsigned char mem[64 * 432] __attribute__((aligned(16)));
    mlakv_cache c;
    CHECK_OK(mlakv_cache_init(&c, mem, MLAKV_NVFP4_DS_MLA, 1, 64, 0));
    const char *fn = "mlakv_cuda_decode_workspace_size";
    size_t ws = 777;
    watch_buf(&ws, sizeof ws);
    mlakv_decode_args a = mlakv_decode_args_default(2, 2, 16, 64), b;
    b = a; b.q_stride_batch = 568; /* batch rows overlap */
    EXPECT_FAIL(fn, mlakv_cuda_decode_workspace_size(&c, &b, &ws), MLAKV_ERR_STRIDE);
    b = a; b.q_stride_token = 8;
    EXPECT_FAIL(fn, mlakv_cuda_decode_workspace_size(&c, &b, &ws), MLAKV_ERR_STRIDE);
    b = a; b.q_stride_head = -576;
    EXPECT_FAIL(fn, mlakv_cuda_decode_workspace_size(&c, &b, &ws), MLAKV_ERR_STRIDE);
    b = a; b.indices_stride_token = 63;
    EXPECT_FAIL(fn, mlakv_cuda_decode_workspace_size(&c, &b, &ws), MLAKV_ERR_STRIDE);
    b = a; b.indices_stride_batch = 63;
    EXPECT_FAIL(fn, mlakv_cuda_decode_workspace_size(&c, &b, &ws), MLAKV_ERR_STRIDE);
    b = a; b.q_stride_batch = INT64_MAX - 15; /* a multiple of 8: only the extent is wrong */
    EXPECT_FAIL(fn, mlakv_cuda_decode_workspace_size(&c, &b, &ws), MLAKV_ERR_OVERFLOW);
    b = a; b.indices_stride_batch = INT64_MAX - 10;
    EXPECT_FAIL(fn, mlakv_cuda_decode_workspace_size(&c, &b, &ws), MLAKV_ERR_OVERFLOW);
    b = a; b.q_stride_head = 580; /* valid stride, not a 16-byte row pitch */
    EXPECT_FAIL(fn, mlakv_cuda_decode_workspace_size(&c, &b, &ws), MLAKV_ERR_ALIGNMENT);
    b = a; b.heads = 129;
    EXPECT_FAIL(fn, mlakv_cuda_decode_workspace_size(&c, &b, &ws), MLAKV_ERR_GEOMETRY);
    b = a; b.q_stride_token = 8;
    EXPECT_FAIL("mlakv_cuda_sparse_decode", mlakv_cuda_sparse_decode(&c, &b, NULL, 0, NULL),
                MLAKV_ERR_STRIDE);
    unwatch_all();
}

/* ---- misaligned typed pointers ---------------------------------------------------------- */

/* Every typed pointer of the CPU entry points is checked against its element size, as decode
 * and write's kv_c / k_pe always were (UBSan flagged the misaligned accesses otherwise). */
static void test_alignment(tu_rng *r) {
    const int64_t nb = 2, bs = 4;
    unsigned char *mem = malloc(432 * 8);
    mlakv_cache c;
    CHECK_OK(mlakv_cache_init(&c, mem, MLAKV_NVFP4_DS_MLA, nb, bs, 0));
    float kv[2 * 512], pe[2 * 64];
    for (int i = 0; i < 2 * 512; i++) kv[i] = (float)tu_normal(r);
    for (int i = 0; i < 2 * 64; i++) pe[i] = (float)tu_normal(r);
    int64_t slot_buf[4] = {0, 1, 0, 0};
    CHECK_OK(mlakv_write(&c, 2, kv, 512, pe, 64, MLAKV_F32, slot_buf, NULL));
    /* slots 0, 1 at an address that is 4 mod 8 */
    _Alignas(8) unsigned char raw[64];
    int64_t *slots4 = (int64_t *)(void *)(raw + 4);
    memcpy(slots4, slot_buf, 16);

    watch_buf(mem, 432 * 8);
    EXPECT_FAIL("mlakv_write", mlakv_write(&c, 2, kv, 512, pe, 64, MLAKV_F32, slots4, NULL),
                MLAKV_ERR_ALIGNMENT);
    unwatch_all();

    float *lat = malloc(2 * 512 * 4 + 16), *rope = malloc(2 * 64 * 4 + 16);
    watch_buf(lat, 2 * 512 * 4 + 16);
    watch_buf(rope, 2 * 64 * 4 + 16);
    const char *rd = "mlakv_read";
    EXPECT_FAIL(rd, mlakv_read(&c, 2, slots4, lat, rope), MLAKV_ERR_ALIGNMENT);
    EXPECT_FAIL(rd, mlakv_read(&c, 2, slot_buf, (float *)((char *)lat + 2), rope), MLAKV_ERR_ALIGNMENT);
    EXPECT_FAIL(rd, mlakv_read(&c, 2, slot_buf, lat, (float *)((char *)rope + 1)), MLAKV_ERR_ALIGNMENT);
    CHECK_OK(mlakv_read(&c, 2, slot_buf, lat, rope));

    const char *enc = "mlakv_encode_record", *dec = "mlakv_decode_record";
    unsigned char rec[656 + 1];
    EXPECT_FAIL(enc, mlakv_encode_record(MLAKV_NVFP4_DS_MLA, (float *)((char *)lat + 1), pe, rec, NULL),
                MLAKV_ERR_ALIGNMENT);
    EXPECT_FAIL(enc, mlakv_encode_record(MLAKV_NVFP4_DS_MLA, kv, (float *)((char *)rope + 2), rec, NULL),
                MLAKV_ERR_ALIGNMENT);
    /* records are bytes: any alignment */
    CHECK_OK(mlakv_encode_record(MLAKV_FP8_DS_MLA, kv, pe, rec + 1, NULL));
    snapshot();
    EXPECT_FAIL(dec, mlakv_decode_record(MLAKV_NVFP4_DS_MLA, rec, (float *)((char *)lat + 3), NULL),
                MLAKV_ERR_ALIGNMENT);
    EXPECT_FAIL(dec, mlakv_decode_record(MLAKV_NVFP4_DS_MLA, rec, NULL, (float *)((char *)rope + 2)),
                MLAKV_ERR_ALIGNMENT);
    CHECK_OK(mlakv_decode_record(MLAKV_FP8_DS_MLA, rec + 1, lat, rope));
    unwatch_all();

    enum { P = 2, R = 2, D = 4 };
    float parts[P * R * D + 1], lp[P * R + 1], sink[R + 1], out[R * D + 1], lse[R + 1];
    for (int i = 0; i < P * R * D + 1; i++) parts[i] = (float)i;
    for (int i = 0; i < P * R + 1; i++) lp[i] = 0.0f;
    for (int i = 0; i < R + 1; i++) sink[i] = 0.0f;
    watch_buf(out, sizeof out);
    watch_buf(lse, sizeof lse);
    const char *mg = "mlakv_merge_partials";
#define MIS(p) ((float *)((char *)(p) + 2))
    EXPECT_FAIL(mg, mlakv_merge_partials(P, R, D, MIS(parts), lp, sink, out, lse), MLAKV_ERR_ALIGNMENT);
    EXPECT_FAIL(mg, mlakv_merge_partials(P, R, D, parts, MIS(lp), sink, out, lse), MLAKV_ERR_ALIGNMENT);
    EXPECT_FAIL(mg, mlakv_merge_partials(P, R, D, parts, lp, MIS(sink), out, lse), MLAKV_ERR_ALIGNMENT);
    EXPECT_FAIL(mg, mlakv_merge_partials(P, R, D, parts, lp, sink, MIS(out), lse), MLAKV_ERR_ALIGNMENT);
    EXPECT_FAIL(mg, mlakv_merge_partials(P, R, D, parts, lp, sink, out, MIS(lse)), MLAKV_ERR_ALIGNMENT);
    unwatch_all();

    /* decode partials: out_partial / lse_partial */
    float q[576];
    for (int i = 0; i < 576; i++) q[i] = (float)tu_normal(r);
    int32_t idx[2] = {0, 1};
    mlakv_decode_args a = mlakv_decode_args_default(1, 1, 1, 2);
    a.q = q;
    a.q_dtype = MLAKV_F32;
    a.indices = idx;
    a.num_threads = 1;
    float op[512 + 1], lsp[2];
    watch_buf(op, sizeof op);
    watch_buf(lsp, sizeof lsp);
    const char *pd = "mlakv_sparse_decode_partial";
    EXPECT_FAIL(pd, mlakv_sparse_decode_partial(&c, &a, 0, 2, MIS(op), lsp), MLAKV_ERR_ALIGNMENT);
    EXPECT_FAIL(pd, mlakv_sparse_decode_partial(&c, &a, 0, 2, op, MIS(lsp)), MLAKV_ERR_ALIGNMENT);
#undef MIS
    unwatch_all();
    CHECK_OK(mlakv_sparse_decode_partial(&c, &a, 0, 2, op, lsp));
    free(lat);
    free(rope);
    free(mem);
}

/* ---- caller strings in messages ------------------------------------------------------------ */

static int printable_line(const char *s) {
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || (unsigned char)*s >= 0x7F) return 0;
    return 1;
}

static void test_messages(void) {
    mlakv_format f;
    CHECK(mlakv_format_from_name("fp8\n\x1b[31mred", &f) == MLAKV_ERR_UNKNOWN_FORMAT);
    const char *m = mlakv_last_error();
    CHECKF(printable_line(m), "message not one printable line: '%s'", m);
    CHECKF(strstr(m, "fp8\\x0a\\x1b[31mred") != NULL, "escapes missing: '%s'", m);
    mlakv_model mo;
    CHECK(mlakv_model_from_name("glm\r\x7f\xff", &mo) == MLAKV_ERR_INVALID_ARGUMENT);
    m = mlakv_last_error();
    CHECKF(printable_line(m) && strstr(m, "glm\\x0d\\x7f\\xff") != NULL, "message '%s'", m);
    /* a long name is cut: the message stays short and says so */
    char longname[4000];
    memset(longname, 'A', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    longname[10] = '\t';
    CHECK(mlakv_format_from_name(longname, &f) == MLAKV_ERR_UNKNOWN_FORMAT);
    m = mlakv_last_error();
    CHECKF(printable_line(m) && strlen(m) < 300 && strstr(m, "...'") != NULL, "message '%s'", m);
    /* a backslash is escaped too (the message cannot fake an escape) */
    CHECK(mlakv_format_from_name("a\\x0a", &f) == MLAKV_ERR_UNKNOWN_FORMAT);
    CHECKF(strstr(mlakv_last_error(), "a\\\\x0a") != NULL, "message '%s'", mlakv_last_error());
}

/* ---- default args with huge shapes -------------------------------------------------------- */

static void test_default_strides(void) {
    /* strides of mlakv_decode_args_default never overflow (signed overflow was UB) */
    mlakv_decode_args a = mlakv_decode_args_default(2, 3, (int64_t)1 << 60, 4);
    CHECK(a.q_stride_head == 576 && a.q_stride_token == INT64_MAX && a.q_stride_batch == INT64_MAX);
    CHECK(a.indices_stride_token == 4 && a.indices_stride_batch == 12);
    a = mlakv_decode_args_default(INT64_MAX, INT64_MAX, INT64_MAX, INT64_MAX);
    CHECK(a.q_stride_token == INT64_MAX && a.q_stride_batch == INT64_MAX &&
          a.indices_stride_batch == INT64_MAX);
    a = mlakv_decode_args_default(1, -5, INT64_MIN, 3);
    CHECK(a.q_stride_token == 0 && a.q_stride_batch == 0 && a.indices_stride_batch == 0);
    /* and the decoder reports the overflow instead of using the strides */
    static unsigned char mem[432];
    mlakv_cache c;
    CHECK_OK(mlakv_cache_init(&c, mem, MLAKV_NVFP4_DS_MLA, 1, 1, 0));
    a = mlakv_decode_args_default(2, 3, (int64_t)1 << 60, 4);
    float q[576] = {0}, out[512];
    int32_t idx[4] = {0, 0, 0, 0};
    a.q = q;
    a.indices = idx;
    a.out = out;
    CHECK_STATUS(mlakv_sparse_decode(&c, &a), MLAKV_ERR_OVERFLOW);
}

int main(void) {
    tu_rng r;
    tu_rng_init(&r, tu_seed("test_errors"));
    test_formats(&r);
    test_cache_descriptor(&r);
    test_write_read(&r);
    test_decode(&r);
    test_no_cuda();
    test_cuda_decode_host_checks();
    test_alignment(&r);
    test_messages();
    test_default_strides();
    return tu_finish();
}
