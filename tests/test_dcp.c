/* Decode context parallelism on the CPU: the position -> local slot mapping against a forward
 * construction of the striped caches, every error path (nothing written), and N simulated
 * ranks (each decoding its own stripe, merged with the sink once) against one decode of the
 * whole context. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

/* A striped context: `world` rank caches of nblk blocks, each with its own shuffled block
 * table per batch row; owner/slot of every global position, built forward (rank r's local
 * position lp holds global position lp * world + r). */
typedef struct {
    int world, batch, bs, len, nblk, bt_stride;
    int32_t *bt;        /* [world][batch][bt_stride] */
    int32_t *owner;     /* [batch][len] */
    int32_t *slot;      /* [batch][len] */
} stripes;

static void stripes_make(stripes *s, tu_rng *r, int world, int batch, int bs, int len) {
    s->world = world, s->batch = batch, s->bs = bs, s->len = len;
    const int local_max = (len + world - 1) / world;
    const int per_row = (local_max + bs - 1) / bs;
    s->bt_stride = per_row + (int)tu_range(r, 0, 3);
    s->nblk = batch * per_row + 2;
    s->bt = malloc(sizeof(int32_t) * world * batch * s->bt_stride);
    s->owner = malloc(sizeof(int32_t) * batch * len);
    s->slot = malloc(sizeof(int32_t) * batch * len);
    int *perm = malloc(sizeof(int) * s->nblk);
    for (int w = 0; w < world; w++) {
        for (int i = 0; i < s->nblk; i++) perm[i] = i;
        for (int i = s->nblk - 1; i > 0; i--) {
            int j = (int)tu_range(r, 0, i + 1), t = perm[i];
            perm[i] = perm[j], perm[j] = t;
        }
        for (int b = 0; b < batch; b++)
            for (int k = 0; k < s->bt_stride; k++)
                s->bt[(w * batch + b) * s->bt_stride + k] = k < per_row ? perm[b * per_row + k] : -7;
    }
    for (int b = 0; b < batch; b++)
        for (int w = 0; w < world; w++)
            for (int lp = 0; lp * world + w < len; lp++) {
                const int p = lp * world + w;
                s->owner[b * len + p] = w;
                s->slot[b * len + p] = s->bt[(w * batch + b) * s->bt_stride + lp / bs] * bs + lp % bs;
            }
    free(perm);
}

static void stripes_free(stripes *s) { free(s->bt), free(s->owner), free(s->slot); }

static void test_mapping(tu_rng *r) {
    for (int iter = 0; iter < 40; iter++) {
        const int world = (int)tu_range(r, 1, 9), batch = (int)tu_range(r, 1, 4);
        const int s_q = (int)tu_range(r, 1, 4), topk = (int)tu_range(r, 1, 700);
        const int bs = (int)(iter % 3 == 0 ? 1 : iter % 3 == 1 ? 61 : 64);
        const int len = (int)tu_range(r, 1, 3000);
        stripes s;
        stripes_make(&s, r, world, batch, bs, len);
        const int64_t psb = (int64_t)s_q * (topk + 3) + 1, pst = topk + 3;
        int32_t *pos = malloc(sizeof(int32_t) * batch * psb);
        for (int64_t i = 0; i < batch * psb; i++) pos[i] = 1 << 30; /* padding: never read */
        for (int b = 0; b < batch; b++)
            for (int t = 0; t < s_q; t++)
                for (int k = 0; k < topk; k++)
                    pos[b * psb + t * pst + k] =
                        tu_range(r, 0, 6) == 0 ? -1 : (int32_t)tu_range(r, 0, len);
        const int64_t n = (int64_t)batch * s_q * topk;
        int32_t *got = malloc(sizeof(int32_t) * n), *want = malloc(sizeof(int32_t) * n);
        int32_t lens[4], want_lens[4];
        for (int rank = 0; rank < world; rank++) {
            mlakv_cache c;
            CHECK_OK(mlakv_cache_init(&c, (void *)(uintptr_t)4096, MLAKV_NVFP4_DS_MLA, s.nblk, bs, 0));
            for (int b = 0; b < batch; b++) {
                want_lens[b] = 0;
                for (int t = 0; t < s_q; t++) {
                    int32_t *w = want + ((int64_t)b * s_q + t) * topk;
                    int m = 0;
                    for (int k = 0; k < topk; k++) {
                        const int32_t p = pos[b * psb + t * pst + k];
                        if (p >= 0 && s.owner[b * len + p] == rank) w[m++] = s.slot[b * len + p];
                    }
                    if (m > want_lens[b]) want_lens[b] = m;
                    for (int k = m; k < topk; k++) w[k] = -1;
                }
            }
            memset(got, 0x5A, sizeof(int32_t) * n);
            CHECK_OK(mlakv_dcp_local_indices(&c, rank, world, batch, s_q, topk, pos, psb, pst,
                                             s.bt + (int64_t)rank * batch * s.bt_stride,
                                             s.bt_stride, got, lens));
            CHECKF(memcmp(got, want, sizeof(int32_t) * n) == 0,
                   "world %d rank %d batch %d s_q %d topk %d bs %d len %d: local indices differ",
                   world, rank, batch, s_q, topk, bs, len);
            CHECK(memcmp(lens, want_lens, sizeof(int32_t) * batch) == 0);
        }
        free(pos), free(got), free(want);
        stripes_free(&s);
    }
}

static void test_errors(void) {
    mlakv_cache c;
    CHECK_OK(mlakv_cache_init(&c, (void *)(uintptr_t)4096, MLAKV_NVFP4_DS_MLA, 4, 8, 0));
    int32_t pos[2][4] = {{0, 3, 8, -1}, {5, 9, 2, 1}};
    int32_t bt[2][3] = {{0, 1, 2}, {3, 2, 1}};
    int32_t out[8], lens[2];
    const int32_t poison = 0x7E7E7E7E;
#define POISON() for (int i = 0; i < 8; i++) out[i] = poison; lens[0] = lens[1] = poison
#define UNTOUCHED() do { int ok = lens[0] == poison && lens[1] == poison;             \
        for (int i = 0; i < 8; i++) ok &= out[i] == poison;                               \
        CHECKF(ok, "a failed call wrote its output"); } while (0)
    POISON();
    CHECK_OK(mlakv_dcp_local_indices(&c, 1, 2, 2, 1, 4, &pos[0][0], 4, 4, &bt[0][0], 3, out, lens));
    /* rank 1 of 2: row 0 holds 3 (local 1), row 1 holds 5 (local 2), 9 (local 4), 1 (local 0) */
    CHECK(out[0] == 0 * 8 + 1 && out[1] == -1 && out[2] == -1 && out[3] == -1);
    CHECK(out[4] == 3 * 8 + 2 && out[5] == 3 * 8 + 4 && out[6] == 3 * 8 + 0 && out[7] == -1);
    CHECK(lens[0] == 1 && lens[1] == 3);
    POISON();
    CHECK_STATUS(mlakv_dcp_local_indices(&c, 2, 2, 2, 1, 4, &pos[0][0], 4, 4, &bt[0][0], 3, out, lens),
                 MLAKV_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(mlakv_dcp_local_indices(&c, -1, 2, 2, 1, 4, &pos[0][0], 4, 4, &bt[0][0], 3, out, lens),
                 MLAKV_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(mlakv_dcp_local_indices(&c, 0, 0, 2, 1, 4, &pos[0][0], 4, 4, &bt[0][0], 3, out, lens),
                 MLAKV_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(mlakv_dcp_local_indices(&c, 0, 2, 0, 1, 4, &pos[0][0], 4, 4, &bt[0][0], 3, out, lens),
                 MLAKV_ERR_GEOMETRY);
    CHECK_STATUS(mlakv_dcp_local_indices(&c, 0, 2, 2, 1, 4, NULL, 4, 4, &bt[0][0], 3, out, lens),
                 MLAKV_ERR_NULL_POINTER);
    CHECK_STATUS(mlakv_dcp_local_indices(&c, 0, 2, 2, 1, 4, &pos[0][0], 4, 4, &bt[0][0], 3, NULL, lens),
                 MLAKV_ERR_NULL_POINTER);
    CHECK_STATUS(mlakv_dcp_local_indices(&c, 0, 2, 2, 1, 4, &pos[0][0], 2, 4, &bt[0][0], 3, out, lens),
                 MLAKV_ERR_STRIDE); /* batch rows overlap */
    CHECK_STATUS(mlakv_dcp_local_indices(&c, 0, 2, 2, 1, 4, &pos[0][0], 4, 4, &bt[0][0], 0, out, lens),
                 MLAKV_ERR_STRIDE);
    CHECK_STATUS(mlakv_dcp_local_indices(&c, 0, 2, 2, 1, 4, &pos[0][0], 4, 4, &bt[0][0], 3,
                                         (int32_t *)((char *)out + 2), lens),
                 MLAKV_ERR_ALIGNMENT);
    CHECK_STATUS(mlakv_dcp_local_indices(&c, 0, 2, 2, 1, 4, &pos[0][0], 4, 4, &bt[0][0], 3,
                                         &pos[0][0], lens),
                 MLAKV_ERR_ALIASING);
    CHECK_STATUS(mlakv_dcp_local_indices(&c, 0, 2, 2, 1, 4, &pos[0][0], 4, 4, &bt[0][0], 3, out,
                                         &bt[1][0]),
                 MLAKV_ERR_ALIASING);
    /* rank 0 of 1 owns position 9 at local block 1 of row 1: fine; with one table entry per
     * row, local position 9 (block 1) is past it */
    CHECK_STATUS(mlakv_dcp_local_indices(&c, 0, 1, 2, 1, 4, &pos[0][0], 4, 4, &bt[0][0], 1, out, lens),
                 MLAKV_ERR_SLOT_OUT_OF_RANGE);
    int32_t bad_bt[2][3] = {{0, 1, 2}, {3, 4, 1}}; /* block id 4 of a 4-block cache */
    CHECK_STATUS(mlakv_dcp_local_indices(&c, 0, 1, 2, 1, 4, &pos[0][0], 4, 4, &bad_bt[0][0], 3, out,
                                         lens),
                 MLAKV_ERR_SLOT_OUT_OF_RANGE);
    CHECK(strstr(mlakv_last_error(), "nothing written") != NULL);
    UNTOUCHED();
#undef POISON
#undef UNTOUCHED
}

/* N simulated ranks: per-rank caches hold the striped records, each rank decodes its local
 * candidates as a partial (no sink), the partials merge with the sink; the result equals one
 * decode of the whole context (float64 exact mode on both sides: only the summation order
 * differs). */
static void test_simulated_ranks(tu_rng *r) {
    const mlakv_format fmts[] = {MLAKV_FP8_DS_MLA, MLAKV_NVFP4_DS_MLA, MLAKV_NVFP4_FP8_ROPE,
                                 MLAKV_NVFP4_FP8_ROPE_TOKEN_SCALE};
    for (int iter = 0; iter < 12; iter++) {
        const mlakv_format f = fmts[iter % 4];
        const int world = (int)tu_range(r, 1, 6), batch = (int)tu_range(r, 1, 3);
        const int s_q = (int)tu_range(r, 1, 3), heads = (int)tu_range(r, 1, 5);
        const int topk = (int)tu_range(r, 1, 200), bs = iter % 2 ? 64 : 7;
        const int len = (int)tu_range(r, 1, 400);
        const int rec = (int)mlakv_record_bytes(f);
        stripes s;
        stripes_make(&s, r, world, batch, bs, len);
        /* the whole context: global cache with slot b * len + p */
        mlakv_cache g;
        uint8_t *gbuf = malloc((size_t)batch * len * rec);
        CHECK_OK(mlakv_cache_init(&g, gbuf, f, (int64_t)batch * len, 1, 0));
        float lat[512], rope[64];
        for (int64_t i = 0; i < (int64_t)batch * len; i++) {
            const double mag = pow(10.0, -1.0 + 1.5 * tu_uniform(r));
            for (int d = 0; d < 512; d++) lat[d] = (float)(tu_normal(r) * mag);
            for (int d = 0; d < 64; d++) rope[d] = (float)tu_normal(r);
            CHECK_OK(mlakv_encode_record(f, lat, rope, gbuf + i * rec, NULL));
        }
        uint8_t **rbuf = malloc(sizeof(uint8_t *) * world);
        mlakv_cache *rc = malloc(sizeof(mlakv_cache) * world);
        for (int w = 0; w < world; w++) {
            rbuf[w] = malloc((size_t)s.nblk * bs * rec);
            memset(rbuf[w], 0xFF, (size_t)s.nblk * bs * rec); /* NaN: unreferenced slots */
            CHECK_OK(mlakv_cache_init(&rc[w], rbuf[w], f, s.nblk, bs, 0));
        }
        for (int b = 0; b < batch; b++)
            for (int p = 0; p < len; p++)
                memcpy(rbuf[s.owner[b * len + p]] + (size_t)s.slot[b * len + p] * rec,
                       gbuf + ((size_t)b * len + p) * rec, rec);
        /* one step: positions, q, sink */
        const int64_t rows = (int64_t)batch * s_q, n = rows * topk;
        int32_t *pos = malloc(sizeof(int32_t) * n), *gidx = malloc(sizeof(int32_t) * n);
        for (int64_t i = 0; i < n; i++) {
            const int b = (int)(i / ((int64_t)s_q * topk));
            pos[i] = tu_range(r, 0, 8) == 0 ? -1 : (int32_t)tu_range(r, 0, len);
            gidx[i] = pos[i] < 0 ? -1 : b * len + pos[i];
        }
        float *q = malloc(sizeof(float) * rows * heads * 576), sink[8];
        for (int64_t i = 0; i < rows * heads * 576; i++) q[i] = (float)tu_normal(r);
        for (int h = 0; h < heads; h++) sink[h] = (float)tu_normal(r);
        mlakv_decode_args a = mlakv_decode_args_default(batch, s_q, heads, topk);
        a.q = q, a.q_dtype = MLAKV_F32, a.out_dtype = MLAKV_F32, a.mode = MLAKV_ATTN_EXACT;
        a.sink = sink;
        const int64_t orows = rows * heads;
        float *want = malloc(sizeof(float) * orows * 512), *want_lse = malloc(sizeof(float) * orows);
        a.indices = gidx, a.out = want, a.lse = want_lse;
        CHECK_OK(mlakv_sparse_decode(&g, &a));
        /* the ranks */
        float *parts = malloc(sizeof(float) * world * orows * 512);
        float *plse = malloc(sizeof(float) * world * orows);
        int32_t *lidx = malloc(sizeof(int32_t) * n), lens[4];
        float *row_sink = malloc(sizeof(float) * orows);
        for (int64_t i = 0; i < orows; i++) row_sink[i] = sink[i % heads];
        for (int w = 0; w < world; w++) {
            CHECK_OK(mlakv_dcp_local_indices(&rc[w], w, world, batch, s_q, topk, pos,
                                             (int64_t)s_q * topk, topk,
                                             s.bt + (int64_t)w * batch * s.bt_stride, s.bt_stride,
                                             lidx, lens));
            mlakv_decode_args ra = a;
            ra.indices = lidx, ra.sink = NULL, ra.lengths = s_q == 1 ? lens : NULL;
            CHECK_OK(mlakv_sparse_decode_partial(&rc[w], &ra, 0, topk, parts + w * orows * 512,
                                                 plse + w * orows));
        }
        float *got = malloc(sizeof(float) * orows * 512), *got_lse = malloc(sizeof(float) * orows);
        CHECK_OK(mlakv_merge_partials(world, orows, 512, parts, plse, row_sink, got, got_lse));
        double worst = 0, worst_lse = 0;
        for (int64_t o = 0; o < orows; o++) { /* error relative to the row's largest output */
            double big = 1e-30, err = 0;
            for (int d = 0; d < 512; d++) {
                big = fmax(big, fabs((double)want[o * 512 + d]));
                err = fmax(err, fabs((double)got[o * 512 + d] - want[o * 512 + d]));
            }
            worst = fmax(worst, err / big);
        }
        for (int64_t i = 0; i < orows; i++)
            worst_lse = fmax(worst_lse, fabs((double)got_lse[i] - want_lse[i]));
        CHECKF(worst < 1e-5 && worst_lse < 1e-5,
               "%s world %d batch %d s_q %d heads %d topk %d: merged ranks differ from one decode "
               "(out %.3g, lse %.3g)", mlakv_format_get(f)->name, world, batch, s_q, heads, topk,
               worst, worst_lse);
        for (int w = 0; w < world; w++) free(rbuf[w]);
        free(rbuf), free(rc), free(gbuf), free(pos), free(gidx), free(q), free(want);
        free(want_lse), free(parts), free(plse), free(lidx), free(row_sink), free(got), free(got_lse);
        stripes_free(&s);
    }
}

int main(void) {
    tu_rng r;
    tu_rng_init(&r, tu_seed("test_dcp"));
    test_mapping(&r);
    test_errors();
    test_simulated_ranks(&r);
    return tu_finish();
}
