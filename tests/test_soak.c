/* Soak test: a long random sequence of writes, overwrites, padded tokens, failing calls,
 * reads and decodes over one cache, checked after every operation against an independent
 * model of the cache.
 *
 * The model is the image the cache's bytes must have: the initial poison pattern, with each
 * written token's record (mlakv_encode_record of the token's values widened to fp32) placed at
 * the address docs/FORMAT.md gives for its slot. After every operation the whole cache must
 * equal the image byte for byte: a written record is the last one written to its slot, an
 * unwritten slot keeps its poison, the padding between blocks never changes, and a failed
 * call changes nothing. Reads must return mlakv_decode_record of the model's records; decodes
 * (exact mode) must match a float64 attention over the model's records, and partial decodes
 * merged with mlakv_merge_partials must match the full decode.
 *
 * Every format, with a dense, a padded and an oddly padded block stride. Operations per
 * configuration: MLAKV_SOAK_OPS (default 300; a few seconds in all, also under ASan).
 * MLAKV_SEED replays a run.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define MAX_BATCH 16
#define MAX_TOPK 40
#define MAX_HEADS 4

typedef struct {
    mlakv_format format;
    int64_t num_blocks, block_size, stride, capacity, rec;
    size_t bytes;
    uint8_t *mem;      /* the cache */
    uint8_t *image;    /* the model: what every byte of the cache must be */
    uint8_t *written;  /* per slot: written at least once */
    long writes, tokens, padded, reads, decodes, failures;
} soak;

/* Address of a slot, from docs/FORMAT.md (not from the library). */
static size_t slot_addr(const soak *S, int64_t s) {
    return (size_t)(s / S->block_size) * (size_t)S->stride + (size_t)(s % S->block_size) * (size_t)S->rec;
}

static int image_ok(const soak *S, const char *after) {
    for (size_t i = 0; i < S->bytes; i++) {
        if (S->mem[i] != S->image[i]) {
            int64_t block = (int64_t)(i / (size_t)S->stride), in = (int64_t)(i % (size_t)S->stride);
            CHECKF(0, "%s after %s: cache byte %zu (block %lld, byte %lld of it: %s) is %02x, "
                   "model %02x", mlakv_format_get(S->format)->name, after, i, (long long)block,
                   (long long)in, in >= S->block_size * S->rec ? "padding" : "a record",
                   S->mem[i], S->image[i]);
            return 0;
        }
    }
    return 1;
}

/* A written slot, or -1 if none yet. */
static int64_t some_written(tu_rng *r, const soak *S) {
    for (int tries = 0; tries < 64; tries++) {
        int64_t s = tu_range(r, 0, S->capacity);
        if (S->written[s]) return s;
    }
    for (int64_t s = 0; s < S->capacity; s++)
        if (S->written[s]) return s;
    return -1;
}

/* A token of realistic magnitude (max |x| between ~1e-3 and ~50), sometimes all zero. */
static void make_token(tu_rng *r, float *lat, float *rope) {
    int kind = (int)tu_range(r, 0, 16);
    double mag = exp(tu_uniform(r) * 10.0 - 7.0);
    for (int j = 0; j < MLAKV_LATENT_DIM; j++) lat[j] = kind == 0 ? 0.0f : (float)(tu_normal(r) * mag);
    double rmag = exp(tu_uniform(r) * 8.0 - 5.0);
    for (int j = 0; j < MLAKV_ROPE_DIM; j++) rope[j] = kind == 1 ? 0.0f : (float)(tu_normal(r) * rmag);
}

static void store(void *base, mlakv_dtype dt, int64_t i, float v) {
    if (dt == MLAKV_F32) ((float *)base)[i] = v;
    else if (dt == MLAKV_BF16) ((uint16_t *)base)[i] = mlakv_f32_to_bf16(v);
    else ((uint16_t *)base)[i] = mlakv_f32_to_f16(v);
}

static float load(const void *base, mlakv_dtype dt, int64_t i) {
    if (dt == MLAKV_F32) return ((const float *)base)[i];
    uint16_t h = ((const uint16_t *)base)[i];
    return dt == MLAKV_BF16 ? mlakv_bf16_to_f32(h) : mlakv_f16_to_f32(h);
}

/* Write a batch (padded tokens, duplicate slots, padded rows, any dtype); with fail = 1 one
 * slot is out of range and nothing may change. */
static void op_write(tu_rng *r, soak *S, int fail) {
    int64_t n = tu_range(r, 1, MAX_BATCH + 1);
    mlakv_dtype dt = (mlakv_dtype)tu_range(r, 0, 3);
    int64_t ks = MLAKV_LATENT_DIM + (tu_range(r, 0, 3) == 0 ? tu_range(r, 1, 40) : 0);
    int64_t ps = MLAKV_ROPE_DIM + (tu_range(r, 0, 3) == 0 ? tu_range(r, 1, 40) : 0);
    size_t es = mlakv_dtype_bytes(dt);
    void *kv = calloc((size_t)(n * ks), es), *pe = calloc((size_t)(n * ps), es);
    int64_t slots[MAX_BATCH];
    float lat[MLAKV_LATENT_DIM], rope[MLAKV_ROPE_DIM];
    if (!kv || !pe) abort();
    for (int64_t i = 0; i < n; i++) {
        make_token(r, lat, rope);
        for (int j = 0; j < MLAKV_LATENT_DIM; j++) store(kv, dt, i * ks + j, lat[j]);
        for (int j = 0; j < MLAKV_ROPE_DIM; j++) store(pe, dt, i * ps + j, rope[j]);
        int k = (int)tu_range(r, 0, 10);
        if (k == 0) slots[i] = -tu_range(r, 1, 1000); /* padded */
        else if (k == 1 && i > 0) slots[i] = slots[tu_range(r, 0, i)]; /* duplicate in batch */
        else if (k == 2 && some_written(r, S) >= 0) slots[i] = some_written(r, S); /* overwrite */
        else slots[i] = tu_range(r, 0, S->capacity);
    }
    if (fail) {
        int64_t at = tu_range(r, 0, n);
        int k = (int)tu_range(r, 0, 3);
        slots[at] = k == 0 ? S->capacity : k == 1 ? S->capacity + tu_range(r, 1, 1000) : INT64_MAX;
    }
    mlakv_write_options opt = mlakv_write_options_default();
    if (tu_range(r, 0, 2)) opt.fp8_scale_recipe = MLAKV_FP8_SCALE_POW2;
    mlakv_cache c;
    CHECK_OK(mlakv_cache_init(&c, S->mem, S->format, S->num_blocks, S->block_size, S->stride));
    mlakv_status st = mlakv_write(&c, n, kv, ks, pe, ps, dt, slots, &opt);
    if (fail) {
        CHECK_STATUS(st, MLAKV_ERR_SLOT_OUT_OF_RANGE);
        S->failures++;
    } else {
        CHECK_OK(st);
        uint8_t rec[656];
        for (int64_t i = 0; i < n; i++) {
            if (slots[i] < 0) {
                S->padded++;
                continue;
            }
            for (int j = 0; j < MLAKV_LATENT_DIM; j++) lat[j] = load(kv, dt, i * ks + j);
            for (int j = 0; j < MLAKV_ROPE_DIM; j++) rope[j] = load(pe, dt, i * ps + j);
            CHECK_OK(mlakv_encode_record(S->format, lat, rope, rec, &opt));
            memcpy(S->image + slot_addr(S, slots[i]), rec, (size_t)S->rec);
            S->written[slots[i]] = 1;
            S->tokens++;
        }
        S->writes++;
    }
    free(kv);
    free(pe);
}

/* Read slots back (written or not, in any order) and compare with the model's records. */
static void op_read(tu_rng *r, soak *S, int fail) {
    int64_t n = tu_range(r, 1, MAX_BATCH + 1), slots[MAX_BATCH];
    for (int64_t i = 0; i < n; i++) {
        int64_t w = tu_range(r, 0, 4) ? some_written(r, S) : -1;
        slots[i] = w >= 0 ? w : tu_range(r, 0, S->capacity);
    }
    if (fail) slots[tu_range(r, 0, n)] = tu_range(r, 0, 2) ? -1 : S->capacity;
    float *lat = malloc((size_t)(n + 1) * MLAKV_LATENT_DIM * sizeof(float));
    float *rope = malloc((size_t)(n + 1) * MLAKV_ROPE_DIM * sizeof(float));
    if (!lat || !rope) abort();
    memset(lat, 0x5C, (size_t)(n + 1) * MLAKV_LATENT_DIM * sizeof(float));
    memset(rope, 0x5C, (size_t)(n + 1) * MLAKV_ROPE_DIM * sizeof(float));
    mlakv_cache c;
    CHECK_OK(mlakv_cache_init(&c, S->mem, S->format, S->num_blocks, S->block_size, S->stride));
    mlakv_status st = mlakv_read(&c, n, slots, lat, rope);
    if (fail) {
        CHECK_STATUS(st, MLAKV_ERR_SLOT_OUT_OF_RANGE);
        int untouched = 1;
        for (size_t i = 0; i < (size_t)(n + 1) * MLAKV_LATENT_DIM * 4; i++)
            untouched &= ((uint8_t *)lat)[i] == 0x5C;
        CHECK(untouched);
        S->failures++;
    } else {
        CHECK_OK(st);
        for (int64_t i = 0; i < n; i++) {
            float wl[MLAKV_LATENT_DIM], wr[MLAKV_ROPE_DIM];
            CHECK_OK(mlakv_decode_record(S->format, S->image + slot_addr(S, slots[i]), wl, wr));
            CHECKF(memcmp(wl, lat + i * MLAKV_LATENT_DIM, sizeof wl) == 0 &&
                       memcmp(wr, rope + i * MLAKV_ROPE_DIM, sizeof wr) == 0,
                   "%s: read of slot %lld (written %d) differs from the model's record",
                   mlakv_format_get(S->format)->name, (long long)slots[i], S->written[slots[i]]);
        }
        uint32_t tail;
        memcpy(&tail, lat + n * MLAKV_LATENT_DIM, 4);
        CHECK(tail == 0x5C5C5C5Cu);
        S->reads++;
    }
    free(lat);
    free(rope);
}

/* Decode over written slots (and invalid -1 candidates) in exact mode against float64
 * attention over the model's records; a partial split merged must agree; with fail = 1 one
 * active index is out of range and out must stay untouched. */
static void op_decode(tu_rng *r, soak *S, int fail) {
    if (some_written(r, S) < 0) return;
    const int64_t B = tu_range(r, 1, 3), H = tu_range(r, 1, MAX_HEADS + 1),
                  K = tu_range(r, 1, MAX_TOPK + 1);
    mlakv_decode_args a = mlakv_decode_args_default(B, 1, H, K);
    float *q = malloc((size_t)(B * H * 576) * sizeof(float));
    int32_t *idx = malloc((size_t)(B * K) * sizeof(int32_t));
    float *out = malloc((size_t)(B * H * 512) * sizeof(float)), *lse = malloc((size_t)(B * H) * sizeof(float));
    float *part = malloc((size_t)(2 * B * H * 512) * sizeof(float)), *plse = malloc((size_t)(2 * B * H) * sizeof(float));
    float *merged = malloc((size_t)(B * H * 512) * sizeof(float)), *mlse = malloc((size_t)(B * H) * sizeof(float));
    float sink[MAX_HEADS];
    int32_t lengths[2];
    if (!q || !idx || !out || !lse || !part || !plse || !merged || !mlse) abort();
    for (int64_t i = 0; i < B * H * 576; i++) q[i] = (float)(tu_normal(r) * 0.5);
    for (int64_t i = 0; i < B * K; i++) idx[i] = tu_range(r, 0, 5) ? (int32_t)some_written(r, S) : -1;
    for (int64_t h = 0; h < H; h++) sink[h] = (float)tu_range(r, -3, 4);
    int use_sink = tu_range(r, 0, 2) == 0, use_len = tu_range(r, 0, 3) == 0;
    for (int64_t b = 0; b < B; b++) lengths[b] = (int32_t)tu_range(r, 0, K + 1);
    if (fail) {
        int64_t b = tu_range(r, 0, B);
        int64_t e = use_len ? lengths[b] : K;
        if (e == 0) lengths[b] = 1, e = 1;
        idx[b * K + tu_range(r, 0, e)] = (int32_t)(S->capacity + tu_range(r, 0, 3));
    }
    a.q = q;
    a.q_dtype = MLAKV_F32;
    a.indices = idx;
    a.lengths = use_len ? lengths : NULL;
    a.sink = use_sink ? sink : NULL;
    a.sm_scale = 0.0625f;
    a.out = out;
    a.out_dtype = MLAKV_F32;
    a.lse = lse;
    a.mode = MLAKV_ATTN_EXACT;
    a.num_threads = (int)tu_range(r, 1, 3);
    memset(out, 0x7A, (size_t)(B * H * 512) * sizeof(float));
    mlakv_cache c;
    CHECK_OK(mlakv_cache_init(&c, S->mem, S->format, S->num_blocks, S->block_size, S->stride));
    mlakv_status st = mlakv_sparse_decode(&c, &a);
    if (fail) {
        CHECK_STATUS(st, MLAKV_ERR_SLOT_OUT_OF_RANGE);
        int untouched = 1;
        for (size_t i = 0; i < (size_t)(B * H * 512) * 4; i++) untouched &= ((uint8_t *)out)[i] == 0x7A;
        CHECK(untouched);
        S->failures++;
        goto done;
    }
    CHECK_OK(st);
    /* float64 reference over the model's records */
    for (int64_t b = 0; b < B; b++) {
        int64_t e = use_len && lengths[b] < K ? lengths[b] : K;
        for (int64_t h = 0; h < H; h++) {
            const float *qh = q + (b * H + h) * 576;
            double sc[MAX_TOPK], m = use_sink ? sink[h] : -INFINITY, acc[512] = {0}, l = 0, vmax = 0;
            float kv[MAX_TOPK][576];
            int nv = 0;
            for (int64_t c0 = 0; c0 < e; c0++) {
                if (idx[b * K + c0] < 0) continue;
                CHECK_OK(mlakv_decode_record(S->format, S->image + slot_addr(S, idx[b * K + c0]),
                                             kv[nv], kv[nv] + 512));
                double s = 0;
                for (int d = 0; d < 576; d++) s += (double)qh[d] * kv[nv][d];
                sc[nv] = 0.0625 * s;
                if (sc[nv] > m) m = sc[nv];
                for (int d = 0; d < 512; d++) vmax = fmax(vmax, fabs(kv[nv][d]));
                nv++;
            }
            const float *o = out + (b * H + h) * 512;
            float ol = lse[b * H + h];
            if (nv == 0 && !use_sink) {
                int zero = 1;
                for (int d = 0; d < 512; d++) zero &= o[d] == 0.0f;
                CHECK(zero && ol == -INFINITY);
                continue;
            }
            if (use_sink) l = exp(sink[h] - m);
            for (int j = 0; j < nv; j++) {
                double p = exp(sc[j] - m);
                l += p;
                for (int d = 0; d < 512; d++) acc[d] += p * kv[j][d];
            }
            double err = 0;
            for (int d = 0; d < 512; d++) err = fmax(err, fabs(o[d] - acc[d] / l));
            CHECKF(err <= 1e-5 * vmax + 1e-30, "%s: decode (b %lld h %lld, %d valid) differs from "
                   "the model by %g (max |v| %g)", mlakv_format_get(S->format)->name, (long long)b,
                   (long long)h, nv, err, vmax);
            CHECKF(fabs(ol - (m + log(l))) <= 1e-5 * (1 + fabs(m + log(l))), "lse %g vs %g", ol,
                   m + log(l));
        }
    }
    /* split at a random position, merge, compare with the full decode */
    if (!use_sink) {
        int64_t split = tu_range(r, 0, K + 1);
        CHECK_OK(mlakv_sparse_decode_partial(&c, &a, 0, split, part, plse));
        CHECK_OK(mlakv_sparse_decode_partial(&c, &a, split, K, part + B * H * 512, plse + B * H));
        CHECK_OK(mlakv_merge_partials(2, B * H, 512, part, plse, NULL, merged, mlse));
        double err = 0, scale = 0;
        for (int64_t i = 0; i < B * H * 512; i++) {
            err = fmax(err, fabs(merged[i] - out[i]));
            scale = fmax(scale, fabs(out[i]));
        }
        CHECKF(err <= 1e-5 * scale + 1e-30, "%s: merged partials differ from the full decode by %g",
               mlakv_format_get(S->format)->name, err);
        for (int64_t i = 0; i < B * H; i++)
            CHECK(mlse[i] == lse[i] || fabs(mlse[i] - lse[i]) <= 1e-5 * (1 + fabs(lse[i])));
    }
    S->decodes++;
done:
    free(q), free(idx), free(out), free(lse), free(part), free(plse), free(merged), free(mlse);
}

static void soak_run(tu_rng *r, mlakv_format format, int64_t num_blocks, int64_t block_size,
                     int64_t pad, long ops) {
    soak S;
    memset(&S, 0, sizeof S);
    S.format = format;
    S.num_blocks = num_blocks;
    S.block_size = block_size;
    S.rec = (int64_t)mlakv_record_bytes(format);
    S.stride = block_size * S.rec + pad;
    S.capacity = num_blocks * block_size;
    CHECK_OK(mlakv_cache_bytes(format, num_blocks, block_size, S.stride, &S.bytes));
    CHECK(S.bytes == (size_t)(num_blocks * S.stride));
    S.mem = malloc(S.bytes);
    S.image = malloc(S.bytes);
    S.written = calloc((size_t)S.capacity, 1);
    if (!S.mem || !S.image || !S.written) abort();
    for (size_t i = 0; i < S.bytes; i++) S.mem[i] = (uint8_t)(0xA5 ^ (i * 131u) ^ (i >> 9));
    memcpy(S.image, S.mem, S.bytes);

    static const char *names[] = {"write", "failing write", "read", "failing read", "decode",
                                  "failing decode"};
    long fails_before = tu_failed;
    for (long op = 0; op < ops && tu_failed - fails_before < 5; op++) {
        int k = (int)tu_range(r, 0, 20), which;
        if (k < 9) which = 0;
        else if (k < 10) which = 1;
        else if (k < 13) which = 2;
        else if (k < 14) which = 3;
        else if (k < 19) which = 4;
        else which = 5;
        switch (which) {
        case 0: case 1: op_write(r, &S, which == 1); break;
        case 2: case 3: op_read(r, &S, which == 3); break;
        default: op_decode(r, &S, which == 5); break;
        }
        if (!image_ok(&S, names[which])) break;
    }
    /* final sweep: every slot reads back as the model says */
    for (int64_t s = 0; s < S.capacity; s++) {
        float l1[512], r1[64], l2[512], r2[64];
        mlakv_cache c;
        CHECK_OK(mlakv_cache_init(&c, S.mem, S.format, S.num_blocks, S.block_size, S.stride));
        CHECK_OK(mlakv_read(&c, 1, &s, l1, r1));
        CHECK_OK(mlakv_decode_record(S.format, S.image + slot_addr(&S, s), l2, r2));
        if (!CHECK(memcmp(l1, l2, sizeof l1) == 0 && memcmp(r1, r2, sizeof r1) == 0)) break;
    }
    long used = 0;
    for (int64_t s = 0; s < S.capacity; s++) used += S.written[s];
    printf("  %-28s blocks %lld x %-3lld stride %-6lld: %ld writes (%ld tokens, %ld padded), "
           "%ld reads, %ld decodes, %ld failing calls; %ld of %lld slots written\n",
           mlakv_format_get(format)->name, (long long)num_blocks, (long long)block_size,
           (long long)S.stride, S.writes, S.tokens, S.padded, S.reads, S.decodes, S.failures, used,
           (long long)S.capacity);
    free(S.mem);
    free(S.image);
    free(S.written);
}

int main(void) {
    tu_rng r;
    tu_rng_init(&r, tu_seed("test_soak"));
    long ops = 300;
    const char *env = getenv("MLAKV_SOAK_OPS");
    if (env && *env) ops = strtol(env, NULL, 10);
    if (ops < 1) ops = 1;
    printf("%ld operations per configuration (MLAKV_SOAK_OPS)\n", ops);
    for (int f = 0; f < MLAKV_FORMAT_COUNT; f++) {
        soak_run(&r, (mlakv_format)f, 24, 5, 0, ops);     /* dense, small blocks */
        soak_run(&r, (mlakv_format)f, 4, 64, 192, ops);   /* engine block size, padded */
        soak_run(&r, (mlakv_format)f, 9, 16, 13, ops);    /* odd padding */
    }
    return tu_finish();
}
