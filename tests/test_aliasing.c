/* Overlapping buffers: every CPU entry point either rejects an output that overlaps an input
 * or another output (MLAKV_ERR_ALIASING, message naming the function, no byte changed) or is
 * correct for it (mlakv_encode_record; mlakv_decode_record over its record). Also the shared
 * span helpers the CUDA host code calls with device pointers (pure pointer arithmetic: the
 * fabricated addresses below are never dereferenced).
 *
 * The first cases are the reported out-of-bounds accesses: slot_mapping inside the cache it
 * writes (a record rewrote the slots after they were checked and the next token landed past
 * the cache), slots inside mlakv_read's latent output, and decode's out over its indices. */
#include <stdlib.h>
#include <string.h>

#include "core/validate.h"
#include "testutil.h"

/* call must return `want`, name `fn` in its message, and leave n bytes at p unchanged */
#define EXPECT_UNCHANGED(fn, call, want, p, n)                                                 \
    do {                                                                                       \
        unsigned char *snap_ = malloc(n);                                                      \
        memcpy(snap_, (p), (n));                                                               \
        mlakv_status st_ = (call);                                                             \
        CHECKF(st_ == (want), "%s: got %s (%s), want %s", #call, mlakv_status_name(st_),       \
               mlakv_last_error(), mlakv_status_name(want));                                   \
        CHECKF(strstr(mlakv_last_error(), fn) != NULL, "%s: message '%s' does not name %s",   \
               #call, mlakv_last_error(), fn);                                                 \
        CHECKF(memcmp(snap_, (p), (n)) == 0, "%s: bytes changed on failure", #call);           \
        free(snap_);                                                                           \
    } while (0)

static void fill_bf16(tu_rng *r, uint16_t *p, size_t n) {
    for (size_t i = 0; i < n; i++) p[i] = mlakv_f32_to_bf16((float)tu_normal(r));
}

/* ---- writer ----------------------------------------------------------------------------- */

static void test_write(tu_rng *r) {
    const char *fn = "mlakv_write";
    const mlakv_format fmt = MLAKV_NVFP4_DS_MLA;
    const int64_t rec = 432, bs = 4, nb = 2, cap = bs * nb, n = 3;
    /* one allocation: the cache, then room for inputs placed inside or after it */
    const size_t cache_bytes = (size_t)(cap * rec);
    unsigned char *mem = aligned_alloc(64, cache_bytes + 8192);
    memset(mem, 0xA5, cache_bytes + 8192);
    mlakv_cache c;
    CHECK_OK(mlakv_cache_init(&c, mem, fmt, nb, bs, 0));
    uint16_t kv[3 * 512], kp[3 * 64];
    fill_bf16(r, kv, 3 * 512);
    fill_bf16(r, kp, 3 * 64);

    /* slot_mapping stored in the record of slot 1 (slots 0, 1, 7: writing slot 1 would
     * overwrite the third slot) */
    int64_t *sm_in = (int64_t *)(mem + 1 * rec + 16);
    sm_in[0] = 0, sm_in[1] = 1, sm_in[2] = cap - 1;
    EXPECT_UNCHANGED(fn, mlakv_write(&c, n, kv, 512, kp, 64, MLAKV_BF16, sm_in, NULL),
                     MLAKV_ERR_ALIASING, mem, cache_bytes + 8192);
    /* the last 8 bytes of the cache, and the first after it is fine */
    int64_t *sm_last = (int64_t *)(mem + cache_bytes - 8);
    *sm_last = 5;
    EXPECT_UNCHANGED(fn, mlakv_write(&c, 1, kv, 512, kp, 64, MLAKV_BF16, sm_last, NULL),
                     MLAKV_ERR_ALIASING, mem, cache_bytes + 8192);
    int64_t *sm_after = (int64_t *)(mem + cache_bytes);
    sm_after[0] = 0, sm_after[1] = 1, sm_after[2] = cap - 1;
    CHECK_OK(mlakv_write(&c, n, kv, 512, kp, 64, MLAKV_BF16, sm_after, NULL));

    /* kv_c / k_pe rows inside the cache */
    int64_t sm[3] = {0, 1, 2};
    EXPECT_UNCHANGED(fn, mlakv_write(&c, n, mem + 2 * rec, 512, kp, 64, MLAKV_BF16, sm, NULL),
                     MLAKV_ERR_ALIASING, mem, cache_bytes + 8192);
    EXPECT_UNCHANGED(fn, mlakv_write(&c, n, kv, 512, mem + cap * rec - 2, 64, MLAKV_BF16, sm, NULL),
                     MLAKV_ERR_ALIASING, mem, cache_bytes + 8192);
    free(mem);

    /* a padded cache (one layer of a cross-layer buffer): inputs in the padding between
     * blocks are not in the cache, inputs in a block are */
    const int64_t stride = 2 * bs * rec;
    unsigned char *big = aligned_alloc(64, (size_t)(nb * stride));
    memset(big, 0, (size_t)(nb * stride));
    CHECK_OK(mlakv_cache_init(&c, big, fmt, nb, bs, stride));
    int64_t *gap = (int64_t *)(big + bs * rec); /* padding after block 0 */
    gap[0] = 0, gap[1] = 5, gap[2] = 2;
    CHECK_OK(mlakv_write(&c, n, kv, 512, kp, 64, MLAKV_BF16, gap, NULL));
    CHECK(gap[0] == 0 && gap[1] == 5 && gap[2] == 2);
    int64_t *tail_gap = (int64_t *)(big + stride + bs * rec); /* after the last block */
    tail_gap[0] = 3;
    CHECK_OK(mlakv_write(&c, 1, kv, 512, kp, 64, MLAKV_BF16, tail_gap, NULL));
    int64_t *in_block1 = (int64_t *)(big + stride + 8);
    in_block1[0] = 3;
    EXPECT_UNCHANGED(fn, mlakv_write(&c, 1, kv, 512, kp, 64, MLAKV_BF16, in_block1, NULL),
                     MLAKV_ERR_ALIASING, big, (size_t)(nb * stride));
    /* kv_c rows that straddle block 1 (row 0 in the gap, its end inside block 1) */
    uint16_t *kv_gap = (uint16_t *)(big + stride - 512);
    EXPECT_UNCHANGED(fn, mlakv_write(&c, 1, kv_gap, 512, kp, 64, MLAKV_BF16, sm, NULL),
                     MLAKV_ERR_ALIASING, big, (size_t)(nb * stride));
    free(big);
}

/* ---- reader ----------------------------------------------------------------------------- */

static void test_read(tu_rng *r) {
    const char *fn = "mlakv_read";
    const mlakv_format fmt = MLAKV_NVFP4_FP8_ROPE;
    const int64_t bs = 4, nb = 2, n = 4;
    unsigned char *mem = aligned_alloc(64, 368 * 8);
    mlakv_cache c;
    CHECK_OK(mlakv_cache_init(&c, mem, fmt, nb, bs, 0));
    uint16_t kv[8 * 512], kp[8 * 64];
    fill_bf16(r, kv, 8 * 512);
    fill_bf16(r, kp, 8 * 64);
    int64_t all[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    CHECK_OK(mlakv_write(&c, 8, kv, 512, kp, 64, MLAKV_BF16, all, NULL));

    float *out = malloc((size_t)n * 512 * 4 + 4096), *rope = malloc((size_t)n * 64 * 4);
    memset(out, 0, (size_t)n * 512 * 4 + 4096);
    /* slots inside the latent output (its last row) */
    int64_t *slots = (int64_t *)(out + (n - 1) * 512);
    slots[0] = 7, slots[1] = 0, slots[2] = 3, slots[3] = 1;
    EXPECT_UNCHANGED(fn, mlakv_read(&c, n, slots, out, rope), MLAKV_ERR_ALIASING, out,
                     (size_t)n * 512 * 4);
    /* slots inside the rope output */
    int64_t *rs = (int64_t *)rope;
    rs[0] = 1, rs[1] = 2, rs[2] = 3, rs[3] = 4;
    EXPECT_UNCHANGED(fn, mlakv_read(&c, n, rs, out, rope), MLAKV_ERR_ALIASING, rope,
                     (size_t)n * 64 * 4);
    /* latent and rope overlapping each other; latent into the cache */
    int64_t s4[4] = {0, 1, 2, 3};
    EXPECT_UNCHANGED(fn, mlakv_read(&c, n, s4, out, out + 100), MLAKV_ERR_ALIASING, out,
                     (size_t)n * 512 * 4);
    EXPECT_UNCHANGED(fn, mlakv_read(&c, 1, s4, (float *)(mem + 368), NULL), MLAKV_ERR_ALIASING,
                     mem, 368 * 8);
    /* outputs right after the slots are fine and correct */
    int64_t *s_before = (int64_t *)out;
    s_before[0] = 5;
    float *lat_after = out + 2;
    CHECK_OK(mlakv_read(&c, 1, s_before, lat_after, NULL));
    float ref[512];
    int64_t five = 5;
    CHECK_OK(mlakv_read(&c, 1, &five, ref, NULL));
    CHECK(memcmp(ref, lat_after, sizeof ref) == 0);
    free(out);
    free(rope);
    free(mem);
}

/* ---- decode ------------------------------------------------------------------------------ */

static void test_decode(tu_rng *r) {
    const char *fn = "mlakv_sparse_decode";
    const int64_t bs = 8, nb = 2, cap = bs * nb, B = 2, H = 2, K = 4;
    unsigned char *mem = aligned_alloc(64, 432 * (size_t)cap);
    mlakv_cache c;
    CHECK_OK(mlakv_cache_init(&c, mem, MLAKV_NVFP4_DS_MLA, nb, bs, 0));
    uint16_t kv[16 * 512], kp[16 * 64];
    fill_bf16(r, kv, 16 * 512);
    fill_bf16(r, kp, 16 * 64);
    int64_t all[16];
    for (int i = 0; i < 16; i++) all[i] = i;
    CHECK_OK(mlakv_write(&c, cap, kv, 512, kp, 64, MLAKV_BF16, all, NULL));

    /* one float arena for q, indices, out, lse, sink so that any of them can overlap */
    const size_t qn = (size_t)B * H * 576, on = (size_t)B * H * 512;
    float *arena = aligned_alloc(64, (qn + on + 4096) * 4);
    memset(arena, 0, (qn + on + 4096) * 4);
    float *q = arena, *out = arena + qn, *tail = arena + qn + on;
    for (size_t i = 0; i < qn; i++) q[i] = (float)tu_normal(r);
    int32_t *idx = (int32_t *)(tail + 64);
    for (int i = 0; i < B * K; i++) idx[i] = (int32_t)tu_range(r, 0, cap);
    float *lse = tail + 16, *sink = tail + 8;
    sink[0] = sink[1] = 0.5f;

    mlakv_decode_args a = mlakv_decode_args_default(B, 1, H, K);
    a.q = q;
    a.q_dtype = MLAKV_F32;
    a.indices = idx;
    a.out = out;
    a.out_dtype = MLAKV_F32;
    a.lse = lse;
    a.sink = sink;
    a.num_threads = 2;
    CHECK_OK(mlakv_sparse_decode(&c, &a));

    const size_t arena_bytes = (qn + on + 4096) * 4;
    mlakv_decode_args b = a;
    b.out = (float *)idx - (on - 4); /* out's last 16 bytes over the indices */
    EXPECT_UNCHANGED(fn, mlakv_sparse_decode(&c, &b), MLAKV_ERR_ALIASING, arena, arena_bytes);
    b = a;
    b.out = q; /* out == q */
    EXPECT_UNCHANGED(fn, mlakv_sparse_decode(&c, &b), MLAKV_ERR_ALIASING, arena, arena_bytes);
    b = a;
    b.out = q + 576 * 3 + 575; /* out starting on q's last element */
    EXPECT_UNCHANGED(fn, mlakv_sparse_decode(&c, &b), MLAKV_ERR_ALIASING, arena, arena_bytes);
    b = a;
    b.lse = sink + 1; /* lse over the sink */
    EXPECT_UNCHANGED(fn, mlakv_sparse_decode(&c, &b), MLAKV_ERR_ALIASING, arena, arena_bytes);
    b = a;
    b.lse = out + on - 1; /* lse over out's last element */
    EXPECT_UNCHANGED(fn, mlakv_sparse_decode(&c, &b), MLAKV_ERR_ALIASING, arena, arena_bytes);
    b = a;
    int32_t lengths[2] = {4, 4};
    b.lengths = lengths;
    b.lse = (float *)lengths; /* lse over lengths */
    EXPECT_UNCHANGED(fn, mlakv_sparse_decode(&c, &b), MLAKV_ERR_ALIASING, lengths, sizeof lengths);
    b = a;
    b.out = mem + 432; /* out into the cache */
    EXPECT_UNCHANGED(fn, mlakv_sparse_decode(&c, &b), MLAKV_ERR_ALIASING, mem, 432 * (size_t)cap);
    /* adjacent buffers (out just before q's first byte) are fine */
    b = a;
    float *q2 = arena + on, *out2 = arena;
    memmove(q2, q, qn * 4);
    b.q = q2;
    b.out = out2;
    CHECK_OK(mlakv_sparse_decode(&c, &b));

    /* partials */
    const char *pfn = "mlakv_sparse_decode_partial";
    b = a;
    b.q = q2;
    float *op = malloc(on * 4 + 64), *lp = malloc(64);
    memset(op, 0, on * 4 + 64);
    EXPECT_UNCHANGED(pfn, mlakv_sparse_decode_partial(&c, &b, 0, K, q2 + 10, lp),
                     MLAKV_ERR_ALIASING, arena, arena_bytes);
    EXPECT_UNCHANGED(pfn, mlakv_sparse_decode_partial(&c, &b, 0, K, (float *)idx, lp),
                     MLAKV_ERR_ALIASING, arena, arena_bytes);
    EXPECT_UNCHANGED(pfn, mlakv_sparse_decode_partial(&c, &b, 0, K, op, op + on - 2),
                     MLAKV_ERR_ALIASING, op, on * 4 + 64);
    CHECK_OK(mlakv_sparse_decode_partial(&c, &b, 0, K, op, op + on));
    free(op);
    free(lp);
    free(arena);
    free(mem);
}

/* ---- merge ------------------------------------------------------------------------------- */

static void test_merge(void) {
    const char *fn = "mlakv_merge_partials";
    enum { P = 2, R = 3, D = 8 };
    float parts[P * R * D + R], lp[P * R], sink[R], out[R * D], lse[R];
    for (int i = 0; i < P * R * D + R; i++) parts[i] = (float)i;
    for (int i = 0; i < P * R; i++) lp[i] = (float)(i % 3);
    for (int i = 0; i < R; i++) sink[i] = 0.0f;
    EXPECT_UNCHANGED(fn, mlakv_merge_partials(P, R, D, parts, lp, NULL, parts, lse),
                     MLAKV_ERR_ALIASING, parts, sizeof parts);
    EXPECT_UNCHANGED(fn, mlakv_merge_partials(P, R, D, parts, lp, NULL, out, lp + 1),
                     MLAKV_ERR_ALIASING, lp, sizeof lp);
    EXPECT_UNCHANGED(fn, mlakv_merge_partials(P, R, D, parts, lp, sink, out, sink),
                     MLAKV_ERR_ALIASING, sink, sizeof sink);
    EXPECT_UNCHANGED(fn, mlakv_merge_partials(P, R, D, parts, lp, NULL, out, out + R * D - 1),
                     MLAKV_ERR_ALIASING, out, sizeof out);
    /* lse right after the partial outputs: fine */
    CHECK_OK(mlakv_merge_partials(P, R, D, parts, lp, NULL, out, parts + P * R * D));
}

/* ---- single records ---------------------------------------------------------------------- */

static void test_records(tu_rng *r) {
    float lat[512], rope[64];
    for (int i = 0; i < 512; i++) lat[i] = (float)tu_normal(r);
    for (int i = 0; i < 64; i++) rope[i] = (float)tu_normal(r);
    for (int f = 0; f < MLAKV_FORMAT_COUNT; f++) {
        const size_t rb = mlakv_record_bytes((mlakv_format)f);
        unsigned char want[656];
        CHECK_OK(mlakv_encode_record((mlakv_format)f, lat, rope, want, NULL));
        /* encode: the record over its own latent input gives the same bytes */
        float buf[512 + 64];
        memcpy(buf, lat, sizeof lat);
        memcpy(buf + 512, rope, sizeof rope);
        CHECK_OK(mlakv_encode_record((mlakv_format)f, buf, buf + 512, buf + 7, NULL));
        CHECKF(memcmp(buf + 7, want, rb) == 0, "format %d: in-place encode differs", f);
        /* decode: outputs over the record are fine (it is copied first) */
        float dl[512], dr[64];
        CHECK_OK(mlakv_decode_record((mlakv_format)f, want, dl, dr));
        float io[512 + 64];
        memcpy(io, want, rb);
        CHECK_OK(mlakv_decode_record((mlakv_format)f, io, io, io + 512));
        CHECKF(memcmp(io, dl, sizeof dl) == 0 && memcmp(io + 512, dr, sizeof dr) == 0,
               "format %d: decode over the record differs", f);
        /* latent and rope outputs overlapping each other: rejected */
        float both[600];
        memset(both, 0, sizeof both);
        EXPECT_UNCHANGED("mlakv_decode_record",
                         mlakv_decode_record((mlakv_format)f, want, both, both + 500),
                         MLAKV_ERR_ALIASING, both, sizeof both);
    }
}

/* ---- the span helpers (what the CUDA host code calls with device pointers) ---------------- */

static void test_spans(void) {
    /* fabricated addresses: never dereferenced */
    const uintptr_t base = (uintptr_t)1 << 40;
    mlakv_cache c;
    memset(&c, 0, sizeof c);
    c.base = (void *)base;
    c.format = MLAKV_NVFP4_FP8_ROPE; /* 368 B */
    c.num_blocks = 3;
    c.block_size = 2;
    c.block_stride_bytes = 1024; /* 736 used, 288 padding per block */
    c.latent_scale = 1.0f;
    CHECK_OK(mlakv_cache_validate(&c));
    mlakv_span cs = mlakv_cache_span(&c);
    CHECK(cs.lo == base && cs.hi == base + 2 * 1024 + 736);

    struct { uintptr_t at; uint64_t bytes; int overlap; } cases[] = {
        {base - 8, 8, 0},           /* just before */
        {base - 8, 9, 1},           /* last byte on the first record */
        {base + 735, 1, 1},         /* last byte of block 0 */
        {base + 736, 288, 0},       /* exactly the padding after block 0 */
        {base + 736, 289, 1},       /* reaches block 1 */
        {base + 1023, 1, 0},        /* last padding byte */
        {base + 2048 + 735, 1, 1},  /* last byte of the last block */
        {base + 2048 + 736, 4096, 0}, /* after the last block (its padding is not the cache) */
        {base + 100, 10000, 1},     /* covers everything */
        {UINTPTR_MAX - 16, 1000, 0}, /* saturates instead of wrapping */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const mlakv_span in = mlakv_span_of("x", (const void *)cases[i].at, cases[i].bytes);
        mlakv_status st = mlakv_check_overlap("t", &cs, 1, &in, 1);
        CHECKF((st == MLAKV_ERR_ALIASING) == cases[i].overlap, "case %zu: got %s", i,
               mlakv_status_name(st));
    }
    /* a strided row input against a plain output in one of its gaps */
    const mlakv_span rows = mlakv_span_rows("rows", (const void *)base, 4, 100, 300);
    const mlakv_span in_gap = mlakv_span_of("g", (const void *)(base + 400), 200);
    const mlakv_span on_row = mlakv_span_of("g", (const void *)(base + 400), 201);
    CHECK(mlakv_check_overlap("t", &in_gap, 1, &rows, 1) == MLAKV_OK);
    CHECK(mlakv_check_overlap("t", &on_row, 1, &rows, 1) == MLAKV_ERR_ALIASING);
    /* empty spans never overlap */
    const mlakv_span none = mlakv_span_of("n", NULL, 100), zero = mlakv_span_of("z", (void *)base, 0);
    CHECK(mlakv_check_overlap("t", &none, 1, &cs, 1) == MLAKV_OK);
    CHECK(mlakv_check_overlap("t", &zero, 1, &cs, 1) == MLAKV_OK);

    /* the writer's check: slot_mapping in the cache, the counter in kv_c, clean */
    const int64_t *sm_in_cache = (const int64_t *)(base + 1024 + 8);
    const void *kv = (const void *)(base + 8192), *kp = (const void *)(base + 16384);
    CHECK(mlakv_check_write_aliasing("w", &c, 2, kv, 512, kp, 64, MLAKV_BF16, sm_in_cache,
                                     NULL) == MLAKV_ERR_ALIASING);
    const int64_t *sm = (const int64_t *)(base + 20000);
    CHECK(mlakv_check_write_aliasing("w", &c, 2, kv, 512, kp, 64, MLAKV_BF16, sm,
                                     (const void *)(base + 8192 + 1030)) == MLAKV_ERR_ALIASING);
    CHECK(mlakv_check_write_aliasing("w", &c, 2, kv, 512, kp, 64, MLAKV_BF16, sm,
                                     (const void *)(base + 8192 + 2048)) == MLAKV_OK);
    CHECK(mlakv_check_write_aliasing("w", &c, 2, kv, 512, kp, 64, MLAKV_BF16, sm,
                                     (const void *)(base + 1024 + 736)) == MLAKV_OK); /* padding */

    /* the decoder's check with a workspace (the CUDA decode's host side) */
    mlakv_decode_args a = mlakv_decode_args_default(1, 1, 2, 8);
    a.q = (const void *)(base + 100000);                 /* 2 x 576 bf16 = 2304 B */
    a.indices = (const int32_t *)(base + 110000);        /* 32 B */
    a.out = (void *)(base + 120000);                     /* 2 x 512 bf16 = 2048 B */
    a.lse = (float *)(base + 130000);                    /* 8 B */
    CHECK(mlakv_check_decode_aliasing("d", &c, &a, (void *)(base + 140000), 4096) == MLAKV_OK);
    CHECK(mlakv_check_decode_aliasing("d", &c, &a, (void *)(base + 120000 + 2040), 4096) ==
          MLAKV_ERR_ALIASING); /* workspace over out */
    CHECK(mlakv_check_decode_aliasing("d", &c, &a, (void *)(base + 110000 - 8), 9) ==
          MLAKV_ERR_ALIASING); /* workspace over the indices */
    CHECK(mlakv_check_decode_aliasing("d", &c, &a, (void *)(base + 110000 - 8), 0) == MLAKV_OK);
    a.out = (void *)(base + 100000 + 2304 - 2); /* out on q's last element */
    CHECK(mlakv_check_decode_aliasing("d", &c, &a, NULL, 0) == MLAKV_ERR_ALIASING);
    CHECK(strstr(mlakv_last_error(), "out") && strstr(mlakv_last_error(), "q"));
    a.out = (void *)(base + 100000 + 2304);
    CHECK(mlakv_check_decode_aliasing("d", &c, &a, NULL, 0) == MLAKV_OK);
    a.lse = (float *)(base + 736); /* lse in the padding after block 0 */
    CHECK(mlakv_check_decode_aliasing("d", &c, &a, NULL, 0) == MLAKV_OK);
    a.lse = (float *)(base + 732); /* lse over the last record of block 0 */
    CHECK(mlakv_check_decode_aliasing("d", &c, &a, NULL, 0) == MLAKV_ERR_ALIASING);
    a.lse = (float *)(base + 130000);
    a.invalid_index_count = (unsigned long long *)(base + 130000); /* the counter over lse */
    CHECK(mlakv_check_decode_aliasing("d", &c, &a, NULL, 0) == MLAKV_ERR_ALIASING);
    CHECK(strstr(mlakv_last_error(), "invalid_index_count") != NULL);
    a.invalid_index_count = (unsigned long long *)(base + 110000 + 24); /* over the indices */
    CHECK(mlakv_check_decode_aliasing("d", &c, &a, NULL, 0) == MLAKV_ERR_ALIASING);
    a.invalid_index_count = (unsigned long long *)(base + 130008);
    CHECK(mlakv_check_decode_aliasing("d", &c, &a, NULL, 0) == MLAKV_OK);
}

int main(void) {
    tu_rng r;
    tu_rng_init(&r, tu_seed("test_aliasing"));
    test_write(&r);
    test_read(&r);
    test_decode(&r);
    test_merge();
    test_records(&r);
    test_spans();
    return tu_finish();
}
