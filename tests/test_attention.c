/* CPU sparse decode: exact mode against a float64 reference written here, engine vs exact within
 * bf16 tolerance, split + merge vs unsplit, masks / -1 / empty rows / sinks / duplicates,
 * exactly quantizable data vs the original data, and every error path (nothing written). */
#include <float.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/attention.h"
#include "testutil.h"

static tu_rng rng;

/* ---- a random cache ------------------------------------------------------------------------ */

typedef struct {
    mlakv_cache cache;
    void *mem;
    int64_t cap;
    float *dec; /* [cap, 576] de-quantized by mlakv_decode_record */
    float *dec1; /* the two-level record: [cap, 576] decoded with s_t = 1 (engine mode's K) */
    float *ts;   /* the two-level record: [cap] per-token scales s_t; else NULL */
} tcache;

/* Fill every slot with random latents of max |x| around `mag` (per-channel gains). */
static void make_cache(tcache *c, mlakv_format f, int64_t min_cap, double mag) {
    int64_t bs = tu_range(&rng, 1, 80);
    int64_t nb = (min_cap + bs - 1) / bs + tu_range(&rng, 0, 3);
    int64_t rb = (int64_t)mlakv_record_bytes(f);
    int64_t stride = tu_range(&rng, 0, 2) ? 0 : bs * rb + 64 * tu_range(&rng, 1, 4);
    size_t bytes = 0;
    CHECK_OK(mlakv_cache_bytes(f, nb, bs, stride, &bytes));
    c->mem = malloc(bytes);
    memset(c->mem, 0xA5, bytes);
    CHECK_OK(mlakv_cache_init(&c->cache, c->mem, f, nb, bs, stride));
    c->cap = nb * bs;
    c->dec = malloc((size_t)c->cap * 576 * sizeof(float));
    float gain[512];
    for (int d = 0; d < 512; d++) gain[d] = (float)exp(0.5 * tu_normal(&rng));
    float *lat = malloc((size_t)c->cap * 512 * sizeof(float));
    float *rope = malloc((size_t)c->cap * 64 * sizeof(float));
    int64_t *slots = malloc((size_t)c->cap * sizeof(int64_t));
    for (int64_t s = 0; s < c->cap; s++) {
        slots[s] = s;
        for (int d = 0; d < 512; d++) lat[s * 512 + d] = (float)(mag * 0.3 * gain[d] * tu_normal(&rng));
        for (int d = 0; d < 64; d++) rope[s * 64 + d] = (float)(tu_normal(&rng) * 0.7);
    }
    CHECK_OK(mlakv_write(&c->cache, c->cap, lat, 512, rope, 64, MLAKV_F32, slots, NULL));
    float l[512], r[64];
    for (int64_t s = 0; s < c->cap; s++) {
        const uint8_t *rec = (const uint8_t *)c->mem + (s / bs) * c->cache.block_stride_bytes +
                             (s % bs) * rb;
        CHECK_OK(mlakv_decode_record(f, rec, l, r));
        memcpy(c->dec + s * 576, l, sizeof l);
        memcpy(c->dec + s * 576 + 512, r, sizeof r);
    }
    c->dec1 = NULL, c->ts = NULL;
    if (f == MLAKV_NVFP4_FP8_ROPE_TOKEN_SCALE) {
        c->dec1 = malloc((size_t)c->cap * 576 * sizeof(float));
        c->ts = malloc((size_t)c->cap * sizeof(float));
        for (int64_t s = 0; s < c->cap; s++) {
            uint8_t rec[368];
            memcpy(rec, (const uint8_t *)c->mem + (s / bs) * c->cache.block_stride_bytes + (s % bs) * rb, 368);
            memcpy(&c->ts[s], rec + 292, 4);
            const float one = 1.0f;
            memcpy(rec + 292, &one, 4);
            CHECK_OK(mlakv_decode_record(f, rec, l, r));
            memcpy(c->dec1 + s * 576, l, sizeof l);
            memcpy(c->dec1 + s * 576 + 512, r, sizeof r);
        }
    }
    free(lat);
    free(rope);
    free(slots);
}

static void free_cache(tcache *c) {
    free(c->mem);
    free(c->dec);
    free(c->dec1);
    free(c->ts);
}

/* ---- the float64 reference (two-pass softmax, written independently of the library) -------- */

/* One query row: q[576] (double), candidates idx[0..n) (negatives skipped), keys from dec. */
static void ref_row(const double *q, const int32_t *idx, int64_t n, const float *dec, double sm,
                    int has_sink, double sink, double *out, double *lse) {
    double m = has_sink ? sink : -INFINITY;
    int any = 0;
    for (int64_t c = 0; c < n; c++) {
        if (idx[c] < 0) continue;
        const float *k = dec + (int64_t)idx[c] * 576;
        double s = 0;
        for (int d = 0; d < 576; d++) s += q[d] * k[d];
        s *= sm;
        if (s > m) m = s;
        any = 1;
    }
    for (int d = 0; d < 512; d++) out[d] = 0;
    if (!any && !has_sink) {
        *lse = -INFINITY;
        return;
    }
    double den = has_sink ? exp(sink - m) : 0.0;
    for (int64_t c = 0; c < n; c++) {
        if (idx[c] < 0) continue;
        const float *k = dec + (int64_t)idx[c] * 576;
        double s = 0;
        for (int d = 0; d < 576; d++) s += q[d] * k[d];
        double p = exp(s * sm - m);
        den += p;
        for (int d = 0; d < 512; d++) out[d] += p * k[d];
    }
    for (int d = 0; d < 512; d++) out[d] /= den;
    *lse = m + log(den);
}

/* ---- a random problem ---------------------------------------------------------------------- */

typedef struct {
    mlakv_decode_args a;
    void *q;
    int32_t *idx;
    int32_t *len;
    float *sink;
    float *out;  /* fp32 out (or bf16 bits when out_dtype is BF16; sized for fp32) */
    float *lse;
    int64_t rows, nout;
} problem;

static float nanf_(void) { return NAN; }

static void poison(float *p, int64_t n) {
    for (int64_t i = 0; i < n; i++) p[i] = nanf_();
}

/* Random shape and layout; q stored with padded strides; indices in [0, cap) with -1s,
 * duplicates and (optionally) lengths. */
static void make_problem(problem *P, const tcache *c, int64_t batch, int64_t s_q, int64_t heads,
                         int64_t topk, mlakv_dtype q_dtype, double q_scale, int with_len,
                         int with_sink) {
    memset(P, 0, sizeof *P);
    P->a = mlakv_decode_args_default(batch, s_q, heads, topk);
    mlakv_decode_args *a = &P->a;
    a->q_dtype = q_dtype;
    /* padded layout: head stride 576 + pad, token-major or batch-major */
    int64_t pad = tu_range(&rng, 0, 3) * 8;
    a->q_stride_head = 576 + pad;
    if (tu_range(&rng, 0, 2)) {
        a->q_stride_token = heads * a->q_stride_head + 16;
        a->q_stride_batch = s_q * a->q_stride_token;
    } else { /* [s_q, batch, heads, 576] storage */
        a->q_stride_batch = heads * a->q_stride_head;
        a->q_stride_token = batch * a->q_stride_batch;
    }
    int64_t qn = batch * s_q * heads * a->q_stride_head + batch * s_q * 16 + 576;
    size_t esz = q_dtype == MLAKV_F32 ? 4 : 2;
    P->q = malloc((size_t)qn * esz);
    for (int64_t i = 0; i < qn; i++) {
        float v = (float)(q_scale * tu_normal(&rng));
        if (q_dtype == MLAKV_F32)
            ((float *)P->q)[i] = v;
        else
            ((uint16_t *)P->q)[i] = mlakv_f32_to_bf16(v);
    }
    a->q = P->q;
    a->indices_stride_token = topk + tu_range(&rng, 0, 3);
    a->indices_stride_batch = s_q * a->indices_stride_token;
    P->idx = malloc((size_t)(batch * a->indices_stride_batch) * sizeof(int32_t));
    for (int64_t i = 0; i < batch * a->indices_stride_batch; i++) {
        double u = tu_uniform(&rng);
        P->idx[i] = u < 0.1 ? -1 : (int32_t)tu_range(&rng, 0, c->cap);
        if (u > 0.95 && i > 0 && P->idx[i - 1] >= 0) P->idx[i] = P->idx[i - 1]; /* duplicate */
    }
    a->indices = P->idx;
    if (with_len) {
        P->len = malloc((size_t)batch * sizeof(int32_t));
        for (int64_t b = 0; b < batch; b++) P->len[b] = (int32_t)tu_range(&rng, 0, topk + 3);
        a->lengths = P->len;
        /* masked tail: out-of-range garbage that must never be read */
        for (int64_t b = 0; b < batch; b++)
            for (int64_t t = 0; t < s_q; t++)
                for (int64_t k = P->len[b]; k < topk; k++)
                    if (tu_range(&rng, 0, 2))
                        P->idx[b * a->indices_stride_batch + t * a->indices_stride_token + k] =
                            (int32_t)(c->cap + tu_range(&rng, 0, 1000));
    }
    if (with_sink) {
        P->sink = malloc((size_t)heads * sizeof(float));
        for (int64_t h = 0; h < heads; h++)
            P->sink[h] = tu_range(&rng, 0, 5) == 0 ? -INFINITY : (float)(2.0 * tu_normal(&rng));
        a->sink = P->sink;
    }
    P->rows = batch * s_q * heads;
    P->nout = P->rows * 512;
    P->out = malloc((size_t)P->nout * sizeof(float));
    P->lse = malloc((size_t)P->rows * sizeof(float));
    a->out = P->out;
    a->lse = P->lse;
    a->out_dtype = MLAKV_F32;
    a->num_threads = (int)tu_range(&rng, 0, 4);
}

static void free_problem(problem *P) {
    free(P->q);
    free(P->idx);
    free(P->len);
    free(P->sink);
    free(P->out);
    free(P->lse);
}

static void q_row(const problem *P, int64_t b, int64_t t, int64_t h, double *q) {
    const mlakv_decode_args *a = &P->a;
    int64_t off = b * a->q_stride_batch + t * a->q_stride_token + h * a->q_stride_head;
    for (int d = 0; d < 576; d++)
        q[d] = a->q_dtype == MLAKV_F32 ? ((const float *)a->q)[off + d]
                                       : mlakv_bf16_to_f32(((const uint16_t *)a->q)[off + d]);
}

/* Reference for every (b, t, h) over candidate positions [begin, end) (lengths applied). */
static void ref_all(const problem *P, const tcache *c, int64_t begin, int64_t end, int use_sink,
                    double *out, double *lse) {
    const mlakv_decode_args *a = &P->a;
    double q[576];
    for (int64_t b = 0; b < a->batch; b++)
        for (int64_t t = 0; t < a->s_q; t++)
            for (int64_t h = 0; h < a->heads; h++) {
                int64_t r = (b * a->s_q + t) * a->heads + h;
                int64_t e = end;
                if (a->lengths && a->lengths[b] < e) e = a->lengths[b];
                q_row(P, b, t, h, q);
                const int32_t *idx =
                    a->indices + b * a->indices_stride_batch + t * a->indices_stride_token;
                int hs = use_sink && a->sink && a->sink[h] != -INFINITY;
                ref_row(q, idx + begin, e > begin ? e - begin : 0, c->dec, a->sm_scale, hs,
                        hs ? a->sink[h] : 0.0, out + r * 512, lse + r);
            }
}

/* Largest |ref| of one output row (scale for absolute tolerances). */
static double row_absmax(const double *x) {
    double m = 0;
    for (int d = 0; d < 512; d++)
        if (fabs(x[d]) > m) m = fabs(x[d]);
    return m;
}

/* ---- tests ----------------------------------------------------------------------------------- */

/* Exact mode vs the float64 reference (fp32 rounding), with every feature switched on. */
static void test_exact_vs_reference(void) {
    for (int it = 0; it < 24; it++) {
        mlakv_format f = (mlakv_format)(it % MLAKV_FORMAT_COUNT);
        double mag = pow(10.0, tu_uniform(&rng) * 2.4 - 1.7);
        tcache c;
        make_cache(&c, f, tu_range(&rng, 1, 400), mag);
        problem P;
        int64_t heads = it == 1 ? tu_range(&rng, 65, 130) : tu_range(&rng, 1, 20);
        int64_t topk = it == 1 ? tu_range(&rng, 1, 60) : tu_range(&rng, 1, 200);
        make_problem(&P, &c, tu_range(&rng, 1, 4), tu_range(&rng, 1, 3), heads, topk,
                     tu_range(&rng, 0, 2) ? MLAKV_F32 : MLAKV_BF16, 2.0 / mag, it % 3 != 0,
                     it % 2);
        P.a.mode = MLAKV_ATTN_EXACT;
        poison(P.out, P.nout);
        poison(P.lse, P.rows);
        CHECK_OK(mlakv_sparse_decode(&c.cache, &P.a));
        double *ro = malloc((size_t)P.nout * sizeof(double)), *rl = malloc((size_t)P.rows * 8);
        ref_all(&P, &c, 0, topk, 1, ro, rl);
        int bad = 0, badl = 0;
        for (int64_t r = 0; r < P.rows; r++) {
            double am = row_absmax(ro + r * 512);
            for (int d = 0; d < 512; d++) {
                double want = ro[r * 512 + d], got = P.out[r * 512 + d];
                if (!(fabs(got - want) <= 1.2e-7 * fabs(want) + 1e-12 * am)) bad++;
            }
            if (rl[r] == -INFINITY) {
                if (P.lse[r] != -INFINITY) badl++;
            } else if (!(fabs(P.lse[r] - rl[r]) <= 1.2e-7 * fabs(rl[r]) + 1e-12)) {
                badl++;
            }
        }
        CHECKF(bad == 0 && badl == 0, "format %d it %d: %d out / %d lse values off the reference",
               (int)f, it, bad, badl);
        free(ro);
        free(rl);
        free_problem(&P);
        free_cache(&c);
    }
}

/* Bound of the score error of engine mode for one row: sm_scale * max over the active
 * candidates of (sum_i |q_i| |k_i - bf16(k_i)| + 2^-18 sum_i |q_i k_i|): the exact effect of
 * rounding K to bf16 plus fp32 accumulation. */
static double row_score_bound(const problem *P, const tcache *c, int64_t r) {
    const mlakv_decode_args *a = &P->a;
    int64_t h = r % a->heads, bt = r / a->heads, t = bt % a->s_q, b = bt / a->s_q;
    double q[576], best = 0;
    q_row(P, b, t, h, q);
    int64_t e = a->topk;
    if (a->lengths && a->lengths[b] < e) e = a->lengths[b];
    const int32_t *idx = a->indices + b * a->indices_stride_batch + t * a->indices_stride_token;
    for (int64_t k = 0; k < e; k++) {
        if (idx[k] < 0) continue;
        double s = 0, rerr = 0;
        for (int d = 0; d < 576; d++) {
            float kv = c->dec[(int64_t)idx[k] * 576 + d];
            s += fabs(q[d] * kv);
            rerr += fabs(q[d]) * fabs(kv - mlakv_bf16_to_f32(mlakv_f32_to_bf16(kv)));
        }
        s = rerr + s * 0x1p-18;
        if (s > best) best = s;
    }
    return best * fabs(a->sm_scale);
}

/* Engine mode: close to exact (bf16 tolerance); deterministic across thread counts; bf16 out
 * equals the rounded fp32 out. */
static void test_engine(void) {
    double worst_rel = 0, worst_lse = 0;
    for (int it = 0; it < 20; it++) {
        mlakv_format f = (mlakv_format)(it % MLAKV_FORMAT_COUNT);
        double mag = pow(10.0, tu_uniform(&rng) * 2.4 - 1.7);
        tcache c;
        make_cache(&c, f, tu_range(&rng, 64, 600), mag);
        problem P;
        int64_t heads = tu_range(&rng, 1, 40), topk = tu_range(&rng, 1, 300);
        make_problem(&P, &c, tu_range(&rng, 1, 3), tu_range(&rng, 1, 3), heads, topk, MLAKV_BF16,
                     1.5 / mag, it % 2, it % 3 == 0);
        /* exact */
        P.a.mode = MLAKV_ATTN_EXACT;
        float *eo = malloc((size_t)P.nout * 4), *el = malloc((size_t)P.rows * 4);
        poison(eo, P.nout);
        poison(el, P.rows);
        P.a.out = eo;
        P.a.lse = el;
        CHECK_OK(mlakv_sparse_decode(&c.cache, &P.a));
        /* engine, fp32 out, with 1 and with 3 threads */
        P.a.mode = MLAKV_ATTN_ENGINE;
        P.a.out = P.out;
        P.a.lse = P.lse;
        P.a.num_threads = 1;
        poison(P.out, P.nout);
        poison(P.lse, P.rows);
        CHECK_OK(mlakv_sparse_decode(&c.cache, &P.a));
        float *o3 = malloc((size_t)P.nout * 4), *l3 = malloc((size_t)P.rows * 4);
        poison(o3, P.nout);
        P.a.out = o3;
        P.a.lse = l3;
        P.a.num_threads = 3;
        CHECK_OK(mlakv_sparse_decode(&c.cache, &P.a));
        CHECKF(memcmp(o3, P.out, (size_t)P.nout * 4) == 0 && memcmp(l3, P.lse, (size_t)P.rows * 4) == 0,
               "engine mode differs between 1 and 3 threads");
        /* bf16 out */
        uint16_t *ob = malloc((size_t)P.nout * 2);
        memset(ob, 0xFF, (size_t)P.nout * 2);
        P.a.out = ob;
        P.a.out_dtype = MLAKV_BF16;
        P.a.lse = NULL;
        CHECK_OK(mlakv_sparse_decode(&c.cache, &P.a));
        int badb = 0;
        for (int64_t i = 0; i < P.nout; i++)
            if (ob[i] != mlakv_f32_to_bf16(P.out[i])) badb++;
        CHECKF(badb == 0, "%d bf16 outputs differ from the rounded fp32 output", badb);
        /* engine vs exact */
        int bad = 0;
        for (int64_t r = 0; r < P.rows; r++) {
            double num = 0, den = 0;
            for (int d = 0; d < 512; d++) {
                double x = P.out[r * 512 + d], y = eo[r * 512 + d];
                num += (x - y) * (x - y);
                den += y * y;
            }
            double rel = den > 0 ? sqrt(num / den) : sqrt(num);
            double dl = el[r] == -INFINITY ? (P.lse[r] == -INFINITY ? 0 : INFINITY)
                                           : fabs((double)P.lse[r] - el[r]);
            if (rel > worst_rel) worst_rel = rel;
            if (dl > worst_lse) worst_lse = dl;
            /* bf16 K moves scores (and lse) by at most sb; bf16 P and V add a few units of
             * 2^-9 to the output. */
            double sb = row_score_bound(&P, &c, r);
            if (!(rel <= 2 * sb + 8e-3) || !(dl <= sb + 2e-6 * (1 + fabs(el[r])))) {
                if (bad < 3)
                    printf("  row %lld: rel %.3g lse diff %.3g, score bound %.3g\n", (long long)r,
                           rel, dl, sb);
                bad++;
            }
        }
        CHECKF(bad == 0, "format %d: %d rows of engine mode off exact (bf16 tolerance)", (int)f, bad);
        free(eo);
        free(el);
        free(o3);
        free(l3);
        free(ob);
        P.a.out = P.out;
        P.a.lse = P.lse;
        free_problem(&P);
        free_cache(&c);
    }
    printf("engine vs exact: worst out rel-L2 %.3g, worst |lse diff| %.3g\n", worst_rel, worst_lse);
}

/* Engine mode, bit for bit, against a plain scalar statement of its documented arithmetic
 * (src/cpu/attention.c): bf16 q and K/V, 16-lane fp32 dot products, fp32 online softmax per
 * chunk of 64 candidate positions, l += p, acc += bf16(p) * v, out = acc / l. The two-level
 * record (ts != NULL): K and V decoded without s_t (dec1), score = sm * (s_t * latent dot +
 * RoPE dot), each dot with its own 16 lanes, and acc += bf16(p * s_t) * v. */
static float r_bf16(float x) { return mlakv_bf16_to_f32(mlakv_f32_to_bf16(x)); }

static void engine_row(const float *q576, const int32_t *idx, int64_t n, const float *dec,
                       const float *ts, float sm, float *out, float *lse) {
    float q[576], acc[512] = {0}, m = -INFINITY, l = 0;
    int64_t nvalid = 0;
    for (int d = 0; d < 576; d++) q[d] = r_bf16(q576[d]);
    for (int64_t c0 = 0; c0 < n; c0 += 64) {
        float s[64], k[64][576], st[64];
        int cnt = 0;
        for (int64_t c = c0; c < c0 + 64 && c < n; c++) {
            if (idx[c] < 0) continue;
            for (int d = 0; d < 576; d++) k[cnt][d] = r_bf16(dec[(int64_t)idx[c] * 576 + d]);
            if (ts) {
                float ln[16] = {0}, lr[16] = {0};
                for (int i = 0; i < 512; i++) ln[i % 16] += q[i] * k[cnt][i];
                for (int i = 512; i < 576; i++) lr[i % 16] += q[i] * k[cnt][i];
                for (int w = 8; w >= 1; w >>= 1)
                    for (int j = 0; j < w; j++) ln[j] += ln[j + w], lr[j] += lr[j + w];
                st[cnt] = ts[idx[c]];
                s[cnt] = sm * (st[cnt] * ln[0] + lr[0]);
                cnt++;
                continue;
            }
            float lane[16] = {0};
            for (int i = 0; i < 576; i++) lane[i % 16] += q[i] * k[cnt][i];
            for (int w = 8; w >= 1; w >>= 1)
                for (int j = 0; j < w; j++) lane[j] += lane[j + w];
            s[cnt++] = sm * lane[0];
        }
        if (!cnt) continue;
        nvalid += cnt;
        float mx = -INFINITY;
        for (int j = 0; j < cnt; j++) mx = s[j] > mx ? s[j] : mx;
        float mn = m > mx ? m : mx;
        if (m != -INFINITY && m != mn) {
            float al = expf(m - mn);
            l *= al;
            for (int d = 0; d < 512; d++) acc[d] *= al;
        }
        for (int j = 0; j < cnt; j++) {
            float p = expf(s[j] - mn);
            l += p;
            float pb = r_bf16(ts ? p * st[j] : p);
            for (int d = 0; d < 512; d++) acc[d] += pb * k[j][d];
        }
        m = mn;
    }
    if (!nvalid) {
        for (int d = 0; d < 512; d++) out[d] = 0;
        *lse = -INFINITY;
        return;
    }
    for (int d = 0; d < 512; d++) out[d] = acc[d] / l;
    *lse = m + logf(l);
}

static void test_engine_bits(void) {
    for (int it = 0; it < 8; it++) {
        mlakv_format f = (mlakv_format)(it % MLAKV_FORMAT_COUNT);
        double mag = pow(10.0, tu_uniform(&rng) * 2 - 1.5);
        tcache c;
        make_cache(&c, f, tu_range(&rng, 1, 300), mag);
        problem P;
        /* it 0: more heads than one work unit takes (64), split into groups */
        int64_t heads = it == 0 ? tu_range(&rng, 65, 140) : tu_range(&rng, 1, 14);
        int64_t topk = it == 0 ? tu_range(&rng, 1, 100) : tu_range(&rng, 1, 260);
        make_problem(&P, &c, tu_range(&rng, 1, 3), tu_range(&rng, 1, 3), heads, topk,
                     tu_range(&rng, 0, 2) ? MLAKV_F32 : MLAKV_BF16, 1.0 / mag, it % 2, 0);
        poison(P.out, P.nout);
        poison(P.lse, P.rows);
        CHECK_OK(mlakv_sparse_decode(&c.cache, &P.a));
        const mlakv_decode_args *a = &P.a;
        int bad = 0;
        double qd[576];
        float qf[576], o[512], ls;
        for (int64_t b = 0; b < a->batch; b++)
            for (int64_t t = 0; t < a->s_q; t++)
                for (int64_t h = 0; h < a->heads; h++) {
                    int64_t r = (b * a->s_q + t) * a->heads + h;
                    int64_t e = a->topk;
                    if (a->lengths && a->lengths[b] < e) e = a->lengths[b];
                    q_row(&P, b, t, h, qd);
                    for (int d = 0; d < 576; d++) qf[d] = (float)qd[d];
                    engine_row(qf, a->indices + b * a->indices_stride_batch + t * a->indices_stride_token,
                               e, c.ts ? c.dec1 : c.dec, c.ts, a->sm_scale, o, &ls);
                    bad += memcmp(o, P.out + r * 512, sizeof o) != 0;
                    bad += memcmp(&ls, P.lse + r, sizeof ls) != 0;
                }
        CHECKF(bad == 0, "format %d: %d engine rows differ bitwise from the scalar statement", (int)f, bad);
        free_problem(&P);
        free_cache(&c);
    }
}

/* Partials over random splits merge back to the unsplit result; a sink passed to the merge
 * equals the sink inside mlakv_sparse_decode. */
static void test_split_merge(void) {
    for (int it = 0; it < 16; it++) {
        mlakv_format f = (mlakv_format)(it % MLAKV_FORMAT_COUNT);
        double mag = pow(10.0, tu_uniform(&rng) * 2 - 1.5);
        tcache c;
        make_cache(&c, f, tu_range(&rng, 1, 500), mag);
        problem P;
        int64_t heads = tu_range(&rng, 1, 9), topk = tu_range(&rng, 1, 400);
        make_problem(&P, &c, tu_range(&rng, 1, 3), tu_range(&rng, 1, 3), heads, topk, MLAKV_BF16,
                     1.5 / mag, it % 2, 0);
        mlakv_attn_mode mode = it < 8 ? MLAKV_ATTN_EXACT : MLAKV_ATTN_ENGINE;
        P.a.mode = mode;
        int64_t nparts = tu_range(&rng, 1, 6);
        int64_t cut[8];
        cut[0] = 0;
        cut[nparts] = topk;
        for (int64_t i = 1; i < nparts; i++) cut[i] = tu_range(&rng, 0, topk + 1);
        for (int64_t i = 1; i < nparts; i++) /* sort */
            for (int64_t j = i; j > 1 && cut[j] < cut[j - 1]; j--) {
                int64_t t = cut[j]; cut[j] = cut[j - 1]; cut[j - 1] = t;
            }
        float *po = malloc((size_t)(nparts * P.nout) * 4), *pl = malloc((size_t)(nparts * P.rows) * 4);
        poison(po, nparts * P.nout);
        poison(pl, nparts * P.rows);
        for (int64_t i = 0; i < nparts; i++)
            CHECK_OK(mlakv_sparse_decode_partial(&c.cache, &P.a, cut[i], cut[i + 1], po + i * P.nout,
                                                 pl + i * P.rows));
        /* empty partials: out 0, lse -inf */
        for (int64_t i = 0; i < nparts; i++)
            if (cut[i] == cut[i + 1]) {
                int ok = 1;
                for (int64_t r = 0; r < P.rows; r++) ok &= pl[i * P.rows + r] == -INFINITY;
                for (int64_t k = 0; k < P.nout; k++) ok &= po[i * P.nout + k] == 0.0f;
                CHECKF(ok, "empty partial [%lld, %lld) not (0, -inf)", (long long)cut[i], (long long)cut[i]);
            }
        float *uo = malloc((size_t)P.nout * 4), *ul = malloc((size_t)P.rows * 4);
        CHECK_OK(mlakv_sparse_decode_partial(&c.cache, &P.a, 0, topk, uo, ul));
        float *mo = malloc((size_t)P.nout * 4), *ml = malloc((size_t)P.rows * 4);
        poison(mo, P.nout);
        poison(ml, P.rows);
        CHECK_OK(mlakv_merge_partials(nparts, P.rows, 512, po, pl, NULL, mo, ml));
        double otol = mode == MLAKV_ATTN_EXACT ? 4e-7 : 1.5e-2;
        int bad = 0;
        /* partial lse values are fp32: each carries |lse| * 2^-24 of rounding, which becomes a
         * relative error of the merge weights */
        double *lsemax = calloc((size_t)P.rows, sizeof(double));
        for (int64_t i = 0; i < nparts; i++)
            for (int64_t r = 0; r < P.rows; r++)
                if (isfinite(pl[i * P.rows + r])) lsemax[r] = fmax(lsemax[r], fabs(pl[i * P.rows + r]));
        for (int64_t r = 0; r < P.rows; r++) {
            double am = 0, tol = otol + 2 * lsemax[r] * 0x1p-24;
            for (int d = 0; d < 512; d++) am = fmax(am, fabs(uo[r * 512 + d]));
            for (int d = 0; d < 512; d++)
                if (!(fabs(mo[r * 512 + d] - uo[r * 512 + d]) <= tol * am + 1e-30)) {
                    if (bad < 2)
                        printf("  row %lld d %d: merged %.9g unsplit %.9g (row max %.3g, max |lse| %.3g)\n",
                               (long long)r, d, mo[r * 512 + d], uo[r * 512 + d], am, lsemax[r]);
                    bad++;
                }
            if (ul[r] == -INFINITY ? ml[r] != -INFINITY
                                   : !(fabs(ml[r] - ul[r]) <= (mode == MLAKV_ATTN_EXACT ? 4e-7 : 1e-2) * fmax(1, fabs(ul[r]))))
                bad++;
        }
        CHECKF(bad == 0, "mode %d format %d: merge of %lld partials differs from unsplit (%d)",
               (int)mode, (int)f, (long long)nparts, bad);

        /* sinks: merge(sink) == decode with sink (exact mode, fp32 out) */
        if (mode == MLAKV_ATTN_EXACT) {
            float *sink_h = malloc((size_t)heads * 4), *sink_r = malloc((size_t)P.rows * 4);
            for (int64_t h = 0; h < heads; h++) sink_h[h] = (float)(3 * tu_normal(&rng));
            for (int64_t r = 0; r < P.rows; r++) sink_r[r] = sink_h[r % heads];
            CHECK_OK(mlakv_merge_partials(nparts, P.rows, 512, po, pl, sink_r, mo, ml));
            P.a.sink = sink_h;
            poison(P.out, P.nout);
            CHECK_OK(mlakv_sparse_decode(&c.cache, &P.a));
            int bads = 0;
            for (int64_t r = 0; r < P.rows; r++) {
                double am = 0, tol = 4e-7 + 2 * fmax(lsemax[r], fabs(sink_r[r])) * 0x1p-24;
                for (int d = 0; d < 512; d++) am = fmax(am, fabs(P.out[r * 512 + d]));
                for (int d = 0; d < 512; d++)
                    if (!(fabs(mo[r * 512 + d] - P.out[r * 512 + d]) <= tol * am + 1e-30)) bads++;
                if (!(fabs(ml[r] - P.lse[r]) <= 4e-7 * fmax(1, fabs(P.lse[r])))) bads++;
            }
            CHECKF(bads == 0, "merge with sink differs from decode with sink (%d)", bads);
            P.a.sink = NULL;
            free(sink_h);
            free(sink_r);
        }
        free(po); free(pl); free(uo); free(ul); free(mo); free(ml); free(lsemax);
        free_problem(&P);
        free_cache(&c);
    }
}

/* Empty rows, sinks on empty rows, -1 everywhere, lengths 0, duplicates counted twice. */
static void test_masks(void) {
    tcache c;
    mlakv_format f = (mlakv_format)tu_range(&rng, 0, MLAKV_FORMAT_COUNT);
    make_cache(&c, f, 64, 1.0);
    for (int mode = 0; mode < 2; mode++) {
        problem P;
        make_problem(&P, &c, 3, 1, 4, 16, MLAKV_BF16, 1.0, 1, 0);
        P.a.mode = (mlakv_attn_mode)mode;
        int64_t isb = P.a.indices_stride_batch;
        P.len[0] = 16;
        for (int k = 0; k < 16; k++) P.idx[k] = (int32_t)tu_range(&rng, 0, c.cap);
        P.len[1] = 0;  /* row 1: masked entirely */
        P.len[2] = 16;
        for (int k = 0; k < 16; k++) P.idx[2 * isb + k] = -1 - k; /* row 2: all invalid */
        for (int k = 0; k < 16; k++) P.idx[1 * isb + k] = (int32_t)(c.cap + 5); /* never read */
        poison(P.out, P.nout);
        poison(P.lse, P.rows);
        CHECK_OK(mlakv_sparse_decode(&c.cache, &P.a));
        int ok = 1;
        for (int64_t r = 4; r < 12; r++) {
            ok &= P.lse[r] == -INFINITY;
            for (int d = 0; d < 512; d++) ok &= P.out[r * 512 + d] == 0.0f && !signbit(P.out[r * 512 + d]);
        }
        CHECKF(ok, "mode %d: empty rows are not out 0 / lse -inf", mode);
        /* a sink on empty rows: out 0, lse = sink */
        float sink[4] = {0.5f, -1.0f, -INFINITY, 3.0f};
        P.a.sink = sink;
        poison(P.out, P.nout);
        poison(P.lse, P.rows);
        CHECK_OK(mlakv_sparse_decode(&c.cache, &P.a));
        ok = 1;
        for (int64_t r = 4; r < 12; r++) {
            ok &= P.lse[r] == sink[r % 4];
            for (int d = 0; d < 512; d++) ok &= P.out[r * 512 + d] == 0.0f;
        }
        CHECKF(ok, "mode %d: empty rows with sink are not out 0 / lse = sink", mode);
        P.a.sink = NULL;

        /* duplicates: [a, a, b] == weights 2:1, i.e. same as the reference; [a, a] vs [a]:
         * same out, lse + log 2 */
        int32_t a0 = (int32_t)tu_range(&rng, 0, c.cap);
        for (int k = 0; k < 16; k++) P.idx[k] = -1;
        P.idx[3] = a0;
        P.len[0] = 16;
        CHECK_OK(mlakv_sparse_decode(&c.cache, &P.a));
        float o1[4 * 512], l1[4];
        memcpy(o1, P.out, sizeof o1);
        memcpy(l1, P.lse, sizeof l1);
        P.idx[9] = a0;
        CHECK_OK(mlakv_sparse_decode(&c.cache, &P.a));
        ok = 1;
        for (int h = 0; h < 4; h++) {
            ok &= fabs(P.lse[h] - (l1[h] + log(2.0))) <= 1e-5 * fmax(1, fabs(l1[h]));
            for (int d = 0; d < 512; d++)
                ok &= fabs(P.out[h * 512 + d] - o1[h * 512 + d]) <= 1e-6 * fabs(o1[h * 512 + d]) + 1e-30;
        }
        CHECKF(ok, "mode %d: a duplicated candidate does not count twice", mode);
        /* one valid candidate: out = its value (softmax weight 1) */
        ok = 1;
        for (int h = 0; h < 4; h++)
            for (int d = 0; d < 512; d++) {
                double v = c.dec[(int64_t)a0 * 576 + d];
                double tol = mode == 0 ? 1e-7 * fabs(v) : 8e-3 * fabs(v) + 1e-30;
                ok &= fabs(o1[h * 512 + d] - v) <= tol + 1e-38;
            }
        CHECKF(ok, "mode %d: a single candidate does not give its own value", mode);
        free_problem(&P);
    }
    free_cache(&c);
}

/* Data exactly representable in the format: decode(encode(x)) == x, so attention over the
 * cache must equal the float64 attention over the original x to fp32 rounding. */
static void exact_values(mlakv_format f, float *lat, float *rope) {
    static const float e2m1[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
    int k = (int)tu_range(&rng, -10, 4); /* layer magnitude 2^k */
    switch (f) {
    case MLAKV_FP8_DS_MLA:
        for (int t = 0; t < 4; t++) {
            int kt = k + (int)tu_range(&rng, -2, 3);
            for (int i = 0; i < 128; i++) {
                uint8_t b = (uint8_t)tu_range(&rng, 0, 0x7F); /* finite E4M3, <= 448 */
                float v = mlakv_e4m3_decode(b) * ldexpf(1, kt);
                lat[128 * t + i] = tu_range(&rng, 0, 2) ? -v : v;
            }
            lat[128 * t + tu_range(&rng, 0, 128)] = 448.0f * ldexpf(1, kt); /* scale = 2^kt */
        }
        break;
    default: {
        int two = f == MLAKV_NVFP4_FP8_ROPE_TOKEN_SCALE;
        for (int g = 0; g < 32; g++) {
            /* group scale d = 2^e (E4M3 normal); two-level: relative to s_t = 2^k */
            int e = two ? (int)tu_range(&rng, 0, 9) : k + (int)tu_range(&rng, -3, 3);
            if (!two && e < -9) e = -9; /* smallest E4M3 subnormal */
            float d = two ? ldexpf(1, e + k) : ldexpf(1, e);
            for (int i = 0; i < 16; i++) {
                float v = e2m1[tu_range(&rng, 0, 8)] * d;
                lat[16 * g + i] = tu_range(&rng, 0, 2) ? -v : v;
            }
            lat[16 * g + tu_range(&rng, 0, 16)] = 6 * d;
        }
        if (two) { /* one group at d = 448 * 2^k holding 6 * d: token amax 2688 * 2^k, s_t = 2^k */
            int g = (int)tu_range(&rng, 0, 32);
            float d = 448.0f * ldexpf(1, k);
            for (int i = 0; i < 16; i++) {
                float v = e2m1[tu_range(&rng, 0, 8)] * d;
                lat[16 * g + i] = tu_range(&rng, 0, 2) ? -v : v;
            }
            lat[16 * g + tu_range(&rng, 0, 16)] = 6 * d;
        }
        break;
    }
    }
    if (f == MLAKV_NVFP4_FP8_ROPE || f == MLAKV_NVFP4_FP8_ROPE_TOKEN_SCALE) {
        int kr = (int)tu_range(&rng, -8, 2);
        for (int j = 0; j < 64; j++) {
            float v = mlakv_e4m3_decode((uint8_t)tu_range(&rng, 0, 0x7F)) * ldexpf(1, kr);
            rope[j] = tu_range(&rng, 0, 2) ? -v : v;
        }
        rope[tu_range(&rng, 0, 64)] = 448.0f * ldexpf(1, kr);
    } else {
        for (int j = 0; j < 64; j++) rope[j] = mlakv_bf16_to_f32(mlakv_f32_to_bf16((float)tu_normal(&rng)));
    }
}

static void test_exactly_quantizable(void) {
    for (int f = 0; f < MLAKV_FORMAT_COUNT; f++) {
        int64_t cap = 300;
        float *orig = malloc((size_t)cap * 576 * 4);
        float lat[512], rope[64], back_l[512], back_r[64];
        for (int64_t s = 0; s < cap; s++) {
            int tries = 0, same = 0;
            while (!same && tries++ < 50) {
                exact_values((mlakv_format)f, lat, rope);
                uint8_t rec[656];
                CHECK_OK(mlakv_encode_record((mlakv_format)f, lat, rope, rec, NULL));
                CHECK_OK(mlakv_decode_record((mlakv_format)f, rec, back_l, back_r));
                same = memcmp(lat, back_l, sizeof lat) == 0 && memcmp(rope, back_r, sizeof rope) == 0;
            }
            CHECKF(same, "format %d: could not build exactly representable data", f);
            memcpy(orig + s * 576, lat, sizeof lat);
            memcpy(orig + s * 576 + 512, rope, sizeof rope);
        }
        /* write through the writer into a paged cache */
        tcache c;
        memset(&c, 0, sizeof c);
        int64_t bs = tu_range(&rng, 1, 70), nb = (cap + bs - 1) / bs;
        size_t bytes;
        CHECK_OK(mlakv_cache_bytes((mlakv_format)f, nb, bs, 0, &bytes));
        c.mem = calloc(1, bytes);
        CHECK_OK(mlakv_cache_init(&c.cache, c.mem, (mlakv_format)f, nb, bs, 0));
        c.cap = nb * bs;
        float *L = malloc((size_t)cap * 512 * 4), *R = malloc((size_t)cap * 64 * 4);
        int64_t *slots = malloc((size_t)cap * 8);
        for (int64_t s = 0; s < cap; s++) {
            memcpy(L + s * 512, orig + s * 576, 512 * 4);
            memcpy(R + s * 64, orig + s * 576 + 512, 64 * 4);
            slots[s] = s;
        }
        CHECK_OK(mlakv_write(&c.cache, cap, L, 512, R, 64, MLAKV_F32, slots, NULL));
        c.dec = orig; /* the reference runs on the ORIGINAL data */
        problem P;
        make_problem(&P, &c, 2, 2, 5, 257, MLAKV_F32, f == MLAKV_FP8_DS_MLA ? 2e-4 : 0.05, 0, 1);
        for (int64_t i = 0; i < P.a.batch * P.a.indices_stride_batch; i++)
            if (P.idx[i] >= cap) P.idx[i] = (int32_t)(P.idx[i] % cap);
        P.a.mode = MLAKV_ATTN_EXACT;
        poison(P.out, P.nout);
        poison(P.lse, P.rows);
        CHECK_OK(mlakv_sparse_decode(&c.cache, &P.a));
        double *ro = malloc((size_t)P.nout * 8), *rl = malloc((size_t)P.rows * 8);
        ref_all(&P, &c, 0, P.a.topk, 1, ro, rl);
        int bad = 0;
        for (int64_t r = 0; r < P.rows; r++) {
            double am = row_absmax(ro + r * 512);
            for (int d = 0; d < 512; d++)
                if (!(fabs(P.out[r * 512 + d] - ro[r * 512 + d]) <= 1.2e-7 * fabs(ro[r * 512 + d]) + 1e-12 * am))
                    bad++;
            if (!(fabs(P.lse[r] - rl[r]) <= 1.2e-7 * fabs(rl[r]) + 1e-12)) bad++;
        }
        CHECKF(bad == 0, "format %d: attention on exactly quantizable data is off the original (%d)",
               f, bad);
        free(ro); free(rl); free(L); free(R); free(slots);
        free_problem(&P);
        free(c.mem);
        free(orig);
    }
}

/* Every error path: the right status, a message, and not one output byte written. */
static void test_errors(void) {
    tcache c;
    make_cache(&c, (mlakv_format)tu_range(&rng, 0, MLAKV_FORMAT_COUNT), 50, 1.0);
    problem P;
    make_problem(&P, &c, 2, 2, 3, 8, MLAKV_BF16, 1.0, 0, 1);
    float *snap_o = malloc((size_t)P.nout * 4), *snap_l = malloc((size_t)P.rows * 4);
    float *po = malloc((size_t)P.nout * 4), *pl = malloc((size_t)P.rows * 4);
    poison(P.out, P.nout);
    poison(P.lse, P.rows);
    poison(po, P.nout);
    poison(pl, P.rows);
    memcpy(snap_o, P.out, (size_t)P.nout * 4);
    memcpy(snap_l, P.lse, (size_t)P.rows * 4);
    const mlakv_decode_args good = P.a;
    mlakv_decode_args a;
    mlakv_cache bc;
    int32_t neg_len[2] = {3, -1};
    float bad_sink[3] = {0, NAN, 0}, inf_sink[3] = {INFINITY, 0, 0};
#define UNCHANGED()                                                                       \
    CHECKF(memcmp(snap_o, P.out, (size_t)P.nout * 4) == 0 &&                             \
               memcmp(snap_l, P.lse, (size_t)P.rows * 4) == 0 &&                         \
               memcmp(snap_o, po, (size_t)P.nout * 4) == 0 &&                            \
               memcmp(snap_l, pl, (size_t)P.rows * 4) == 0,                              \
           "output written by a failed call")
#define EXPECT(mod, want)                                                                 \
    do {                                                                                  \
        a = good;                                                                         \
        mod;                                                                              \
        CHECK_STATUS(mlakv_sparse_decode(&c.cache, &a), want);                            \
        CHECK(strlen(mlakv_last_error()) > 10);                                           \
        CHECK_STATUS(mlakv_sparse_decode_partial(&c.cache, &a, 0, a.topk, po, pl), want); \
        UNCHANGED();                                                                      \
    } while (0)

    CHECK_STATUS(mlakv_sparse_decode(NULL, &good), MLAKV_ERR_NULL_POINTER);
    CHECK_STATUS(mlakv_sparse_decode(&c.cache, NULL), MLAKV_ERR_NULL_POINTER);
    bc = c.cache;
    bc.num_blocks = 0;
    CHECK_STATUS(mlakv_sparse_decode(&bc, &good), MLAKV_ERR_GEOMETRY);
    bc = c.cache;
    bc.base = NULL;
    CHECK_STATUS(mlakv_sparse_decode(&bc, &good), MLAKV_ERR_NULL_POINTER);
    bc = c.cache;
    bc.format = (mlakv_format)9;
    CHECK_STATUS(mlakv_sparse_decode(&bc, &good), MLAKV_ERR_UNKNOWN_FORMAT);
    UNCHANGED();
    EXPECT(a.batch = 0, MLAKV_ERR_GEOMETRY);
    EXPECT(a.s_q = -1, MLAKV_ERR_GEOMETRY);
    EXPECT(a.heads = 0, MLAKV_ERR_GEOMETRY);
    EXPECT(a.topk = 0, MLAKV_ERR_GEOMETRY);
    EXPECT(a.q = NULL, MLAKV_ERR_NULL_POINTER);
    EXPECT(a.indices = NULL, MLAKV_ERR_NULL_POINTER);
    EXPECT(a.q_dtype = MLAKV_F16, MLAKV_ERR_DTYPE);
    EXPECT(a.q_dtype = (mlakv_dtype)7, MLAKV_ERR_DTYPE);
    EXPECT(a.mode = (mlakv_attn_mode)5, MLAKV_ERR_INVALID_ARGUMENT);
    EXPECT(a.num_threads = -2, MLAKV_ERR_INVALID_ARGUMENT);
    EXPECT(a.sm_scale = NAN, MLAKV_ERR_INVALID_ARGUMENT);
    EXPECT(a.sm_scale = INFINITY, MLAKV_ERR_INVALID_ARGUMENT);
    EXPECT(a.q_stride_head = 575, MLAKV_ERR_STRIDE);
    EXPECT(a.q_stride_token = -576, MLAKV_ERR_STRIDE);
    EXPECT(a.q_stride_batch = 1, MLAKV_ERR_STRIDE);
    EXPECT(a.indices_stride_token = 7, MLAKV_ERR_STRIDE);
    EXPECT(a.indices_stride_batch = -1, MLAKV_ERR_STRIDE);
    EXPECT(a.q_stride_batch = INT64_MAX - 100, MLAKV_ERR_OVERFLOW);
    EXPECT(a.indices_stride_token = INT64_MAX - 3, MLAKV_ERR_OVERFLOW);
    EXPECT(a.q = (const char *)a.q + 1, MLAKV_ERR_ALIGNMENT);
    EXPECT(a.lengths = neg_len, MLAKV_ERR_INVALID_ARGUMENT);
    EXPECT(P.idx[good.indices_stride_batch + good.indices_stride_token + 7] = (int32_t)c.cap,
           MLAKV_ERR_SLOT_OUT_OF_RANGE);
    EXPECT(P.idx[good.indices_stride_batch + good.indices_stride_token + 7] = INT32_MAX,
           MLAKV_ERR_SLOT_OUT_OF_RANGE);
    P.idx[good.indices_stride_batch + good.indices_stride_token + 7] = 0;
    /* decode-only fields */
    a = good;
    a.out = NULL;
    CHECK_STATUS(mlakv_sparse_decode(&c.cache, &a), MLAKV_ERR_NULL_POINTER);
    a = good;
    a.out_dtype = MLAKV_F16;
    CHECK_STATUS(mlakv_sparse_decode(&c.cache, &a), MLAKV_ERR_DTYPE);
    a = good;
    a.sink = bad_sink;
    CHECK_STATUS(mlakv_sparse_decode(&c.cache, &a), MLAKV_ERR_INVALID_ARGUMENT);
    a.sink = inf_sink;
    CHECK_STATUS(mlakv_sparse_decode(&c.cache, &a), MLAKV_ERR_INVALID_ARGUMENT);
    /* partial-only */
    a = good;
    CHECK_STATUS(mlakv_sparse_decode_partial(&c.cache, &a, -1, 3, po, pl), MLAKV_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(mlakv_sparse_decode_partial(&c.cache, &a, 5, 3, po, pl), MLAKV_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(mlakv_sparse_decode_partial(&c.cache, &a, 0, 9, po, pl), MLAKV_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(mlakv_sparse_decode_partial(&c.cache, &a, 0, 8, NULL, pl), MLAKV_ERR_NULL_POINTER);
    CHECK_STATUS(mlakv_sparse_decode_partial(&c.cache, &a, 0, 8, po, NULL), MLAKV_ERR_NULL_POINTER);
    UNCHANGED();
    /* out-of-range index outside the partial's range or masked by lengths: fine, never read */
    int32_t *bad_slot = &P.idx[good.indices_stride_token + 6];
    *bad_slot = (int32_t)c.cap;
    CHECK_OK(mlakv_sparse_decode_partial(&c.cache, &a, 0, 6, po, pl));
    int32_t len_ok[2] = {6, 8};
    a.lengths = len_ok;
    CHECK_OK(mlakv_sparse_decode(&c.cache, &a));
    len_ok[0] = 7;
    poison(P.out, P.nout);
    CHECK_STATUS(mlakv_sparse_decode(&c.cache, &a), MLAKV_ERR_SLOT_OUT_OF_RANGE);
    CHECK(isnan(P.out[0]) && isnan(P.out[P.nout - 1]));
    *bad_slot = 0;

    /* merge */
    float mo[8 * 4], ml[4], op[2 * 4 * 8], lp[2 * 4];
    for (int i = 0; i < 64; i++) op[i] = (float)tu_normal(&rng);
    for (int i = 0; i < 8; i++) lp[i] = (float)tu_normal(&rng);
    poison(mo, 32);
    poison(ml, 4);
    CHECK_STATUS(mlakv_merge_partials(0, 4, 8, op, lp, NULL, mo, ml), MLAKV_ERR_GEOMETRY);
    CHECK_STATUS(mlakv_merge_partials(2, 0, 8, op, lp, NULL, mo, ml), MLAKV_ERR_GEOMETRY);
    CHECK_STATUS(mlakv_merge_partials(2, 4, 0, op, lp, NULL, mo, ml), MLAKV_ERR_GEOMETRY);
    CHECK_STATUS(mlakv_merge_partials(2, 4, 8, NULL, lp, NULL, mo, ml), MLAKV_ERR_NULL_POINTER);
    CHECK_STATUS(mlakv_merge_partials(2, 4, 8, op, NULL, NULL, mo, ml), MLAKV_ERR_NULL_POINTER);
    CHECK_STATUS(mlakv_merge_partials(2, 4, 8, op, lp, NULL, NULL, ml), MLAKV_ERR_NULL_POINTER);
    CHECK_STATUS(mlakv_merge_partials(INT64_MAX / 2, 4, 8, op, lp, NULL, mo, ml), MLAKV_ERR_OVERFLOW);
    float sk[4] = {0, 0, NAN, 0};
    CHECK_STATUS(mlakv_merge_partials(2, 4, 8, op, lp, sk, mo, ml), MLAKV_ERR_INVALID_ARGUMENT);
    lp[7] = NAN;
    CHECK_STATUS(mlakv_merge_partials(2, 4, 8, op, lp, NULL, mo, ml), MLAKV_ERR_INVALID_ARGUMENT);
    lp[7] = INFINITY;
    CHECK_STATUS(mlakv_merge_partials(2, 4, 8, op, lp, NULL, mo, ml), MLAKV_ERR_INVALID_ARGUMENT);
    int untouched = 1;
    for (int i = 0; i < 32; i++) untouched &= isnan(mo[i]);
    for (int i = 0; i < 4; i++) untouched &= isnan(ml[i]);
    CHECKF(untouched, "merge wrote output on failure");
    /* merge: one part -inf is skipped (its NaN out not read), lse NULL allowed */
    lp[7] = -INFINITY;
    for (int i = 0; i < 8; i++) op[4 * 8 + 3 * 8 + i] = NAN;
    CHECK_OK(mlakv_merge_partials(2, 4, 8, op, lp, NULL, mo, NULL));
    int fine = 1;
    for (int i = 0; i < 8; i++) fine &= fabsf(mo[3 * 8 + i] - op[3 * 8 + i]) <= 1e-6f * fabsf(op[3 * 8 + i]) + 1e-30f;
    CHECKF(fine, "merge did not skip an empty partial");
    free(snap_o); free(snap_l); free(po); free(pl);
    free_problem(&P);
    free_cache(&c);
#undef EXPECT
#undef UNCHANGED
}

/* decode_args_default: documented defaults. */
static void test_defaults(void) {
    mlakv_decode_args a = mlakv_decode_args_default(3, 2, 16, 2048);
    CHECK(a.batch == 3 && a.s_q == 2 && a.heads == 16 && a.topk == 2048);
    CHECK(a.q_stride_head == 576 && a.q_stride_token == 16 * 576 && a.q_stride_batch == 2 * 16 * 576);
    CHECK(a.indices_stride_token == 2048 && a.indices_stride_batch == 2 * 2048);
    CHECK(fabsf(a.sm_scale - 1.0f / 24.0f) < 1e-7f);
    CHECK(a.q_dtype == MLAKV_BF16 && a.out_dtype == MLAKV_BF16 && a.mode == MLAKV_ATTN_ENGINE);
    CHECK(a.q == NULL && a.out == NULL && a.indices == NULL && a.lse == NULL && a.sink == NULL &&
          a.lengths == NULL && a.num_threads == 0);
}

int main(void) {
    tu_rng_init(&rng, tu_seed("test_attention"));
    test_defaults();
    test_exact_vs_reference();
    test_engine();
    test_engine_bits();
    test_split_merge();
    test_masks();
    test_exactly_quantizable();
    test_errors();
    return tu_finish();
}
