/* Decode context parallelism on one GPU: the position -> local slot kernel bit for bit against
 * the CPU mapping (and out-of-table positions counted), the merge kernel against the CPU merge,
 * N simulated ranks (GPU decode of each stripe without the sink, merged with it) against one
 * GPU decode of the whole context and the CPU exact decode, and CUDA-graph replay. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_host.h"
extern "C" {
#include "testutil.h"
}

static tu_rng rng;

static void *dev_copy(const void *h, size_t n) {
    void *d = NULL;
    CUDA_OK(cudaMalloc(&d, n ? n : 16));
    if (n) CUDA_OK(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice));
    return d;
}

/* A random striped layout: per-rank block tables [world][batch][bt_stride] of a cache of nblk
 * blocks (entries past a row's blocks are -7) */
struct layout {
    int world, batch, bs, len, nblk, bt_stride, per_row;
    int32_t *bt;
};
static layout make_layout(int world, int batch, int bs, int len, int short_table) {
    layout L = {world, batch, bs, len, 0, 0, 0, NULL};
    const int local_max = (len + world - 1) / world;
    L.per_row = (local_max + bs - 1) / bs;
    L.bt_stride = short_table ? (L.per_row > 1 ? L.per_row - 1 : 1) : L.per_row + (int)tu_range(&rng, 0, 3);
    L.nblk = batch * L.per_row + 2;
    L.bt = (int32_t *)malloc(sizeof(int32_t) * world * batch * L.bt_stride);
    int *perm = (int *)malloc(sizeof(int) * L.nblk);
    for (int w = 0; w < world; w++) {
        for (int i = 0; i < L.nblk; i++) perm[i] = i;
        for (int i = L.nblk - 1; i > 0; i--) {
            int j = (int)tu_range(&rng, 0, i + 1), t = perm[i];
            perm[i] = perm[j], perm[j] = t;
        }
        for (int b = 0; b < batch; b++)
            for (int k = 0; k < L.bt_stride; k++)
                L.bt[(w * batch + b) * L.bt_stride + k] =
                    k < L.per_row ? perm[b * L.per_row + k] : (short_table ? L.nblk + 5 : -7);
    }
    free(perm);
    return L;
}

static void test_local_indices(void) {
    for (int iter = 0; iter < 60; iter++) {
        const int world = (int)tu_range(&rng, 1, 9), batch = (int)tu_range(&rng, 1, 5);
        const int s_q = (int)tu_range(&rng, 1, 5);
        const int topk = iter % 7 == 0 ? (int)tu_range(&rng, 1, 5000) : (int)tu_range(&rng, 1, 700);
        const int bs = iter % 3 == 0 ? 1 : iter % 3 == 1 ? 61 : 64;
        const int len = (int)tu_range(&rng, 1, 5000), short_table = iter % 5 == 4;
        layout L = make_layout(world, batch, bs, len, short_table);
        const int64_t pst = topk + (iter & 1 ? 3 : 0), psb = s_q * pst + (iter & 2 ? 5 : 0);
        int32_t *pos = (int32_t *)malloc(sizeof(int32_t) * batch * psb);
        for (int64_t i = 0; i < batch * psb; i++) pos[i] = 1 << 30;
        for (int b = 0; b < batch; b++)
            for (int t = 0; t < s_q; t++)
                for (int k = 0; k < topk; k++)
                    pos[b * psb + t * pst + k] = tu_range(&rng, 0, 6) == 0 ? -1 : (int32_t)tu_range(&rng, 0, len);
        const int64_t n = (int64_t)batch * s_q * topk;
        int32_t *want = (int32_t *)malloc(4 * n), *got = (int32_t *)malloc(4 * n);
        int32_t want_len[4], got_len[4];
        int32_t *dpos = (int32_t *)dev_copy(pos, 4 * batch * psb), *dout, *dlen;
        CUDA_OK(cudaMalloc((void **)&dout, 4 * n));
        CUDA_OK(cudaMalloc((void **)&dlen, 16));
        unsigned long long *dcnt;
        CUDA_OK(cudaMalloc((void **)&dcnt, 8));
        for (int rank = 0; rank < world; rank++) {
            const int32_t *bt = L.bt + (int64_t)rank * batch * L.bt_stride;
            mlakv_cache hc;
            CHECK_OK(mlakv_cache_init(&hc, (void *)(uintptr_t)4096, MLAKV_NVFP4_DS_MLA, L.nblk, bs, 0));
            /* host expectation: the CPU mapping, with out-of-table positions dropped and counted */
            unsigned long long want_bad = 0;
            for (int b = 0; b < batch; b++) {
                want_len[b] = 0;
                for (int t = 0; t < s_q; t++) {
                    int32_t *w = want + ((int64_t)b * s_q + t) * topk;
                    int m = 0;
                    for (int k = 0; k < topk; k++) {
                        const int32_t p = pos[b * psb + t * pst + k];
                        if (p < 0 || p % world != rank) continue;
                        const int64_t lp = p / world, blk = lp / bs;
                        const int32_t id = blk < L.bt_stride ? bt[b * L.bt_stride + blk] : -1;
                        if (id < 0 || id >= L.nblk) { want_bad++; continue; }
                        w[m++] = (int32_t)((int64_t)id * bs + lp % bs);
                    }
                    if (m > want_len[b]) want_len[b] = m;
                    for (int k = m; k < topk; k++) w[k] = -1;
                }
            }
            if (want_bad == 0) { /* the CPU entry point gives the same */
                CHECK_OK(mlakv_dcp_local_indices(&hc, rank, world, batch, s_q, topk, pos, psb, pst,
                                                 bt, L.bt_stride, got, got_len));
                CHECK(memcmp(got, want, 4 * n) == 0 && memcmp(got_len, want_len, 4 * batch) == 0);
            }
            int32_t *dbt = (int32_t *)dev_copy(bt, 4 * (size_t)batch * L.bt_stride);
            mlakv_cache dc;
            CHECK_OK(mlakv_cache_init(&dc, (void *)(uintptr_t)4096, MLAKV_NVFP4_DS_MLA, L.nblk, bs, 0));
            CUDA_OK(cudaMemset(dout, 0x5A, 4 * n));
            CUDA_OK(cudaMemset(dlen, 0x5A, 16));
            const unsigned long long start = 7;
            CUDA_OK(cudaMemcpy(dcnt, &start, 8, cudaMemcpyHostToDevice));
            CHECK_OK(mlakv_cuda_dcp_local_indices(&dc, rank, world, batch, s_q, topk, dpos, psb, pst,
                                                  dbt, L.bt_stride, dout, dlen, dcnt, NULL));
            unsigned long long cnt = 0;
            CUDA_OK(cudaMemcpy(got, dout, 4 * n, cudaMemcpyDeviceToHost));
            CUDA_OK(cudaMemcpy(got_len, dlen, 4 * batch, cudaMemcpyDeviceToHost));
            CUDA_OK(cudaMemcpy(&cnt, dcnt, 8, cudaMemcpyDeviceToHost));
            CHECKF(memcmp(got, want, 4 * n) == 0,
                   "world %d rank %d batch %d s_q %d topk %d bs %d short %d: GPU local indices differ",
                   world, rank, batch, s_q, topk, bs, short_table);
            CHECK(memcmp(got_len, want_len, 4 * batch) == 0);
            CHECKF(cnt == start + want_bad, "invalid count %llu, want %llu", cnt, start + want_bad);
            cudaFree(dbt);
        }
        cudaFree(dpos), cudaFree(dout), cudaFree(dlen), cudaFree(dcnt);
        free(pos), free(want), free(got), free(L.bt);
    }
}

static void test_merge(void) {
    for (int iter = 0; iter < 40; iter++) {
        /* up to 8 parts, or 33..64 (the merge keeps the weights of parts 32.. in a second
         * register) */
        const int many = iter % 7 == 3;
        const int parts = (int)(many ? tu_range(&rng, 33, 65) : tu_range(&rng, 1, 9));
        const int heads = (int)tu_range(&rng, 1, 17);
        const int64_t rows = heads * tu_range(&rng, 1, many ? 4 : 40), dim = iter % 5 == 0 ? 7 : 512;
        const int use_sink = iter % 2, bf16_parts = iter % 3 == 0, bf16_out = iter % 4 < 2;
        float *op = (float *)malloc(sizeof(float) * parts * rows * dim);
        float *lp = (float *)malloc(sizeof(float) * parts * rows), sink[17];
        uint16_t *opb = (uint16_t *)malloc(2 * parts * rows * dim);
        for (int64_t i = 0; i < parts * rows * dim; i++) {
            opb[i] = mlakv_f32_to_bf16((float)tu_normal(&rng));
            op[i] = bf16_parts ? mlakv_bf16_to_f32(opb[i]) : (float)tu_normal(&rng);
        }
        for (int64_t i = 0; i < parts * rows; i++)
            lp[i] = tu_range(&rng, 0, 4) == 0 ? -INFINITY : (float)(tu_normal(&rng) * 3);
        if (iter % 6 == 5) /* a row empty everywhere */
            for (int i = 0; i < parts; i++) lp[(int64_t)i * rows] = -INFINITY;
        for (int h = 0; h < heads; h++) sink[h] = (float)tu_normal(&rng);
        float *row_sink = (float *)malloc(sizeof(float) * rows);
        for (int64_t r = 0; r < rows; r++) row_sink[r] = sink[r % heads];
        float *want = (float *)malloc(sizeof(float) * rows * dim), *want_lse = (float *)malloc(4 * rows);
        CHECK_OK(mlakv_merge_partials(parts, rows, dim, op, lp, use_sink ? row_sink : NULL, want, want_lse));
        void *dparts = bf16_parts ? dev_copy(opb, 2 * parts * rows * dim) : dev_copy(op, 4 * parts * rows * dim);
        float *dlp = (float *)dev_copy(lp, 4 * parts * rows), *dsink = (float *)dev_copy(sink, 4 * heads);
        void *dout;
        float *dlse;
        CUDA_OK(cudaMalloc(&dout, 4 * rows * dim));
        CUDA_OK(cudaMalloc((void **)&dlse, 4 * rows));
        CHECK_OK(mlakv_cuda_merge_partials(parts, rows, dim, heads, dparts, bf16_parts ? MLAKV_BF16 : MLAKV_F32,
                                           dlp, use_sink ? dsink : NULL, dout,
                                           bf16_out ? MLAKV_BF16 : MLAKV_F32, dlse, NULL));
        float *got = (float *)malloc(4 * rows * dim), *got_lse = (float *)malloc(4 * rows);
        if (bf16_out) {
            uint16_t *gb = (uint16_t *)malloc(2 * rows * dim);
            CUDA_OK(cudaMemcpy(gb, dout, 2 * rows * dim, cudaMemcpyDeviceToHost));
            for (int64_t i = 0; i < rows * dim; i++) got[i] = mlakv_bf16_to_f32(gb[i]);
            free(gb);
        } else {
            CUDA_OK(cudaMemcpy(got, dout, 4 * rows * dim, cudaMemcpyDeviceToHost));
        }
        CUDA_OK(cudaMemcpy(got_lse, dlse, 4 * rows, cudaMemcpyDeviceToHost));
        double worst = 0, worst_lse = 0;
        const double tol = bf16_out ? 0x1p-8 : 1e-5;
        for (int64_t o = 0; o < rows; o++) { /* error relative to the row's largest output */
            double big = 1e-30, err = 0;
            for (int64_t d = 0; d < dim; d++) {
                big = fmax(big, fabs((double)want[o * dim + d]));
                err = fmax(err, fabs((double)got[o * dim + d] - want[o * dim + d]));
            }
            worst = fmax(worst, err / big);
        }
        int lse_inf_ok = 1;
        for (int64_t r = 0; r < rows; r++) {
            if (isinf(want_lse[r]) || isinf(got_lse[r])) lse_inf_ok &= want_lse[r] == got_lse[r];
            else worst_lse = fmax(worst_lse, fabs((double)got_lse[r] - want_lse[r]));
        }
        CHECKF(worst <= tol && worst_lse < 1e-5 && lse_inf_ok,
               "merge parts %d rows %lld dim %lld sink %d bf16 parts %d out %d: out %.3g lse %.3g",
               parts, (long long)rows, (long long)dim, use_sink, bf16_parts, bf16_out, worst, worst_lse);
        /* bad input: nothing written */
        CHECK_STATUS(mlakv_cuda_merge_partials(0, rows, dim, heads, dparts, MLAKV_F32, dlp, NULL, dout,
                                               MLAKV_F32, dlse, NULL), MLAKV_ERR_GEOMETRY);
        CHECK_STATUS(mlakv_cuda_merge_partials(parts, rows, dim, heads, dparts, MLAKV_F16, dlp, NULL, dout,
                                               MLAKV_F32, dlse, NULL), MLAKV_ERR_DTYPE);
        CHECK_STATUS(mlakv_cuda_merge_partials(parts, rows, dim, heads, dparts, MLAKV_F32, dlp, NULL, dparts,
                                               MLAKV_F32, dlse, NULL), MLAKV_ERR_ALIASING);
        cudaFree(dparts), cudaFree(dlp), cudaFree(dsink), cudaFree(dout), cudaFree(dlse);
        free(op), free(lp), free(opb), free(row_sink), free(want), free(want_lse), free(got), free(got_lse);
    }
}

/* N simulated ranks on one GPU against one decode of the whole context */
static void test_simulated_ranks(void) {
    const mlakv_format fmts[] = {MLAKV_FP8_DS_MLA, MLAKV_NVFP4_DS_MLA, MLAKV_NVFP4_FP8_ROPE,
                                 MLAKV_NVFP4_FP8_ROPE_TOKEN_SCALE};
    for (int iter = 0; iter < 16; iter++) {
        const mlakv_format f = fmts[iter % 4];
        const int world = 1 + iter % 4 + (iter >= 12 ? 4 : 0), batch = (int)tu_range(&rng, 1, 4);
        const int s_q = iter % 3 == 2 ? 2 : 1;
        const int heads = iter % 2 ? 16 : (iter % 4 == 0 ? 128 : 64);
        const int topk = 2048, bs = 64, len = 6000 + (int)tu_range(&rng, 0, 3000);
        const int rec = (int)mlakv_record_bytes(f);
        layout L = make_layout(world, batch, bs, len, 0);
        /* the whole context: slot b * len + p */
        const size_t gbytes = (size_t)batch * len * rec;
        uint8_t *gbuf = (uint8_t *)malloc(gbytes);
        float lat[512], rope[64];
        for (int64_t i = 0; i < (int64_t)batch * len; i++) {
            const double mag = pow(10.0, -1.0 + 1.5 * tu_uniform(&rng));
            for (int d = 0; d < 512; d++) lat[d] = (float)(tu_normal(&rng) * mag);
            for (int d = 0; d < 64; d++) rope[d] = (float)tu_normal(&rng);
            CHECK_OK(mlakv_encode_record(f, lat, rope, gbuf + i * rec, NULL));
        }
        const size_t rbytes = (size_t)L.nblk * bs * rec;
        uint8_t **rbuf = (uint8_t **)malloc(sizeof(uint8_t *) * world);
        for (int w = 0; w < world; w++) {
            rbuf[w] = (uint8_t *)malloc(rbytes);
            memset(rbuf[w], 0xFF, rbytes);
        }
        for (int b = 0; b < batch; b++)
            for (int w = 0; w < world; w++)
                for (int lp = 0; lp * world + w < len; lp++) {
                    const int p = lp * world + w;
                    const int64_t slot = (int64_t)L.bt[(w * batch + b) * L.bt_stride + lp / bs] * bs + lp % bs;
                    memcpy(rbuf[w] + slot * rec, gbuf + ((size_t)b * len + p) * rec, rec);
                }
        const int64_t rows = (int64_t)batch * s_q, n = rows * topk, orows = rows * heads;
        int32_t *pos = (int32_t *)malloc(4 * n), *gidx = (int32_t *)malloc(4 * n);
        for (int64_t i = 0; i < n; i++) {
            const int b = (int)(i / ((int64_t)s_q * topk));
            pos[i] = tu_range(&rng, 0, 10) == 0 ? -1 : (int32_t)tu_range(&rng, 0, len);
            gidx[i] = pos[i] < 0 ? -1 : b * len + pos[i];
        }
        uint16_t *q = (uint16_t *)malloc(2 * orows * 576);
        for (int64_t i = 0; i < orows * 576; i++) q[i] = mlakv_f32_to_bf16((float)tu_normal(&rng));
        float sink[128];
        for (int h = 0; h < heads; h++) sink[h] = (float)tu_normal(&rng) + 2.0f;
        void *dq = dev_copy(q, 2 * orows * 576), *dg = dev_copy(gbuf, gbytes);
        int32_t *dpos = (int32_t *)dev_copy(pos, 4 * n), *dgidx = (int32_t *)dev_copy(gidx, 4 * n);
        float *dsink = (float *)dev_copy(sink, 4 * heads);
        /* one GPU, whole context */
        mlakv_cache gc;
        CHECK_OK(mlakv_cache_init(&gc, dg, f, (int64_t)batch * len, 1, 0));
        mlakv_decode_args a = mlakv_decode_args_default(batch, s_q, heads, topk);
        a.q = dq, a.indices = dgidx, a.sink = dsink;
        void *dref, *dout, *ws = NULL, *dparts;
        float *dref_lse, *dlse, *dplse;
        CUDA_OK(cudaMalloc(&dref, 2 * orows * 512));
        CUDA_OK(cudaMalloc((void **)&dref_lse, 4 * orows));
        a.out = dref, a.lse = dref_lse;
        size_t wsb = 0, wsr = 0;
        CHECK_OK(mlakv_cuda_decode_workspace_size(&gc, &a, &wsb));
        /* the ranks: local indices, decode without the sink into part w */
        CUDA_OK(cudaMalloc(&dparts, 2 * world * orows * 512));
        CUDA_OK(cudaMalloc((void **)&dplse, 4 * world * orows));
        int32_t *dlidx, *dlen;
        CUDA_OK(cudaMalloc((void **)&dlidx, 4 * n));
        CUDA_OK(cudaMalloc((void **)&dlen, 4 * batch));
        void **dr = (void **)malloc(sizeof(void *) * world);
        int32_t **dbt = (int32_t **)malloc(sizeof(int32_t *) * world);
        mlakv_cache *rc = (mlakv_cache *)malloc(sizeof(mlakv_cache) * world);
        for (int w = 0; w < world; w++) {
            dr[w] = dev_copy(rbuf[w], rbytes);
            dbt[w] = (int32_t *)dev_copy(L.bt + (int64_t)w * batch * L.bt_stride, 4 * (size_t)batch * L.bt_stride);
            CHECK_OK(mlakv_cache_init(&rc[w], dr[w], f, L.nblk, bs, 0));
            mlakv_decode_args ra = a;
            ra.indices = dlidx, ra.sink = NULL;
            CHECK_OK(mlakv_cuda_decode_workspace_size(&rc[w], &ra, &wsr));
            if (wsr > wsb) wsb = wsr;
        }
        if (wsb) CUDA_OK(cudaMalloc(&ws, wsb));
        CHECK_OK(mlakv_cuda_sparse_decode(&gc, &a, ws, wsb, NULL));
        for (int w = 0; w < world; w++) {
            CHECK_OK(mlakv_cuda_dcp_local_indices(&rc[w], w, world, batch, s_q, topk, dpos,
                                                  (int64_t)s_q * topk, topk, dbt[w], L.bt_stride,
                                                  dlidx, dlen, NULL, NULL));
            mlakv_decode_args ra = a;
            ra.indices = dlidx, ra.lengths = dlen, ra.sink = NULL;
            ra.out = (uint16_t *)dparts + (size_t)w * orows * 512, ra.lse = dplse + (size_t)w * orows;
            CHECK_OK(mlakv_cuda_sparse_decode(&rc[w], &ra, ws, wsb, NULL));
        }
        CUDA_OK(cudaMalloc(&dout, 2 * orows * 512));
        CUDA_OK(cudaMalloc((void **)&dlse, 4 * orows));
        CUDA_OK(cudaMemset(dout, 0xFF, 2 * orows * 512));
        CHECK_OK(mlakv_cuda_merge_partials(world, orows, 512, heads, dparts, MLAKV_BF16, dplse, dsink,
                                           dout, MLAKV_BF16, dlse, NULL));
        CUDA_OK(cudaDeviceSynchronize());
        uint16_t *ref = (uint16_t *)malloc(2 * orows * 512), *got = (uint16_t *)malloc(2 * orows * 512);
        float *ref_lse = (float *)malloc(4 * orows), *got_lse = (float *)malloc(4 * orows);
        CUDA_OK(cudaMemcpy(ref, dref, 2 * orows * 512, cudaMemcpyDeviceToHost));
        CUDA_OK(cudaMemcpy(got, dout, 2 * orows * 512, cudaMemcpyDeviceToHost));
        CUDA_OK(cudaMemcpy(ref_lse, dref_lse, 4 * orows, cudaMemcpyDeviceToHost));
        CUDA_OK(cudaMemcpy(got_lse, dlse, 4 * orows, cudaMemcpyDeviceToHost));
        double worst = 0, worst_lse = 0;
        tu_worst_rows_bf16(got, ref, got_lse, ref_lse, orows, 512, &worst, &worst_lse);
        CHECKF(worst < 1.5e-2 && worst_lse < 2e-3,
               "%s world %d batch %d s_q %d heads %d: merged ranks vs one GPU: rel-L2 %.3g lse %.3g",
               mlakv_format_get(f)->name, world, batch, s_q, heads, worst, worst_lse);
        if (iter == 0 || getenv("MLAKV_TEST_VERBOSE"))
            printf("  %s world %d batch %d s_q %d heads %d: worst row rel-L2 %.3g, lse %.3g\n",
                   mlakv_format_get(f)->name, world, batch, s_q, heads, worst, worst_lse);
        for (int w = 0; w < world; w++) cudaFree(dr[w]), cudaFree(dbt[w]), free(rbuf[w]);
        free(dr), free(dbt), free(rc), free(rbuf);
        cudaFree(dq), cudaFree(dg), cudaFree(dpos), cudaFree(dgidx), cudaFree(dsink), cudaFree(dref);
        cudaFree(dref_lse), cudaFree(dparts), cudaFree(dplse), cudaFree(dlidx), cudaFree(dlen);
        cudaFree(dout), cudaFree(dlse), cudaFree(ws);
        free(gbuf), free(pos), free(gidx), free(q), free(ref), free(got), free(ref_lse), free(got_lse);
        free(L.bt);
    }
}

/* local indices + merge captured in a graph: replays give the same bits */
static void test_graph(void) {
    const int world = 2, batch = 2, s_q = 1, topk = 300, heads = 4, bs = 16, len = 1000;
    layout L = make_layout(world, batch, bs, len, 0);
    int32_t pos[batch * topk];
    for (int i = 0; i < batch * topk; i++) pos[i] = (int32_t)tu_range(&rng, -1, len);
    int32_t *dpos = (int32_t *)dev_copy(pos, sizeof pos), *dbt = (int32_t *)dev_copy(L.bt, 4 * batch * L.bt_stride);
    int32_t *dout, *dlen;
    CUDA_OK(cudaMalloc((void **)&dout, sizeof pos));
    CUDA_OK(cudaMalloc((void **)&dlen, 4 * batch));
    const int64_t rows = batch * heads;
    float parts[2 * 8 * 512], lse[2 * 8];
    for (int i = 0; i < 2 * 8 * 512; i++) parts[i] = (float)tu_normal(&rng);
    for (int i = 0; i < 2 * 8; i++) lse[i] = (float)tu_normal(&rng);
    float *dp = (float *)dev_copy(parts, sizeof parts), *dl = (float *)dev_copy(lse, sizeof lse), *dm, *dml;
    CUDA_OK(cudaMalloc((void **)&dm, 4 * rows * 512));
    CUDA_OK(cudaMalloc((void **)&dml, 4 * rows));
    mlakv_cache c;
    CHECK_OK(mlakv_cache_init(&c, (void *)(uintptr_t)4096, MLAKV_NVFP4_DS_MLA, L.nblk, bs, 0));
    int32_t a1[batch * topk], a2[batch * topk];
    float m1[8 * 512], m2[8 * 512];
    CHECK_OK(mlakv_cuda_dcp_local_indices(&c, 1, world, batch, s_q, topk, dpos, topk, topk, dbt,
                                          L.bt_stride, dout, dlen, NULL, NULL));
    CHECK_OK(mlakv_cuda_merge_partials(world, rows, 512, heads, dp, MLAKV_F32, dl, NULL, dm, MLAKV_F32, dml, NULL));
    CUDA_OK(cudaMemcpy(a1, dout, sizeof a1, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(m1, dm, sizeof m1, cudaMemcpyDeviceToHost));
    cudaStream_t st;
    CUDA_OK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CUDA_OK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    mlakv_status s1 = mlakv_cuda_dcp_local_indices(&c, 1, world, batch, s_q, topk, dpos, topk, topk,
                                                   dbt, L.bt_stride, dout, dlen, NULL, st);
    mlakv_status s2 = mlakv_cuda_merge_partials(world, rows, 512, heads, dp, MLAKV_F32, dl, NULL, dm,
                                                MLAKV_F32, dml, st);
    CUDA_OK(cudaStreamEndCapture(st, &g));
    CHECK(s1 == MLAKV_OK && s2 == MLAKV_OK);
    CUDA_OK(cudaGraphInstantiate(&ge, g, 0));
    CUDA_OK(cudaMemset(dout, 0, sizeof pos));
    CUDA_OK(cudaMemset(dm, 0, 4 * rows * 512));
    CUDA_OK(cudaGraphLaunch(ge, st));
    CUDA_OK(cudaGraphLaunch(ge, st));
    CUDA_OK(cudaStreamSynchronize(st));
    CUDA_OK(cudaMemcpy(a2, dout, sizeof a2, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(m2, dm, sizeof m2, cudaMemcpyDeviceToHost));
    CHECK(memcmp(a1, a2, sizeof a1) == 0 && memcmp(m1, m2, sizeof m1) == 0);
    cudaGraphExecDestroy(ge), cudaGraphDestroy(g), cudaStreamDestroy(st);
    cudaFree(dpos), cudaFree(dbt), cudaFree(dout), cudaFree(dlen), cudaFree(dp), cudaFree(dl);
    cudaFree(dm), cudaFree(dml);
    free(L.bt);
}

int main(void) {
    mlakv_status st = mlakv_cuda_check_device();
    if (st != MLAKV_OK) {
        printf("test_cuda_dcp: skipped: %s (%s)\n", mlakv_status_name(st), mlakv_last_error());
        return TEST_SKIP;
    }
    tu_rng_init(&rng, tu_seed("test_cuda_dcp"));
    test_local_indices();
    test_merge();
    test_simulated_ranks();
    test_graph();
    return tu_finish();
}
