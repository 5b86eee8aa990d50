/* mlakv eval: accuracy of every record format on realistic synthetic MLA data, per layer
 * magnitude (max |latent| from 0.02 to 5.2, the range observed across GLM-5.2 layers).
 *
 * For each magnitude one synthetic layer (tools/synth.h) provides a context of tokens (bf16
 * values, as a model emits them). For each format the context is written through
 * mlakv_write and read back with mlakv_read, and:
 *  - latent rel-RMSE  sqrt(sum (x' - x)^2 / sum x^2) over the context;
 *  - latent max-rel   max over tokens of max_i |x'_i - x_i| / max_i |x_i|;
 *  - zeroed           share of non-zero latent values that de-quantize to exactly 0;
 *  - attention        q rows attend over topk candidates (a few relevant keys among them, the
 *                     rest random context tokens) with mlakv_sparse_decode (engine mode unless
 *                     --mode exact); compared with float64 attention on the unquantized data:
 *                     pooled rel-L2 of the outputs, mean and min cosine per (row, head),
 *                     max |lse error| (natural log);
 *  - needle           one planted key among 2048 candidates drawn from a long context
 *                     (positions up to --needle-context); the query is built so that the
 *                     needle's score beats the best distractor by --needle-margin nats on the
 *                     unquantized data; on the de-quantized records: share of trials where
 *                     the needle still has the largest attention weight, and the median and
 *                     worst remaining margin (nats).
 * Queries are synth_query matched filters of the relevant keys (or the needle), centered on the
 * layer's mean key and weighted per dimension by std^-2w (--whiten w, default 0.5), scaled so
 * that the relevant keys score REL_LOGIT nats above the context mean (they then hold about 95 %
 * of the softmax mass; the per-magnitude progress lines print the measured share).
 * --input FILE evaluates one layer of real data instead (raw rows of latent 512 ; k_pe 64, bf16
 * or f32): context, candidates, queries and needles are drawn from its tokens.
 * Rows: every format, plus variants of the NVFP4 formats (unless --no-variants): "+s_l", the
 * static formats with a per-layer latent scale s_l calibrated on a separate 65536-token draw of
 * the layer (mlakv_latent_max_abs, mlakv_latent_scale), and "+accurate", the accurate NVFP4
 * encoder (and both). cos_min is the worst single (query row, head) cosine.
 * Output: an aligned table and --csv FILE (tools/plot_eval.py draws it with matplotlib).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "mlakv.h"
#include "synth.h"

#define MAX_MAGS 32
#define N_RELEVANT 4
#define REL_LOGIT 9.0 /* relevant keys' logit above the context mean, nats */

typedef struct {
    int nformats;
    mlakv_format formats[MLAKV_FORMAT_COUNT];
    int nmags;
    double mags[MAX_MAGS];
    uint64_t seed;
    int heads, topk, queries, context, needles, threads;
    int64_t needle_context;
    double needle_margin;
    double whiten;       /* query weight per dimension = std^-(2 * whiten) (see synth_query) */
    mlakv_attn_mode mode;
    const char *csv;
    int quiet, no_variants;
    const char *input;        /* --input: real latents instead of synthetic layers */
    mlakv_dtype input_dtype;
    int64_t in_n;             /* tokens loaded from --input */
    float *in_lat, *in_rope;  /* [in_n, 512], [in_n, 64] */
} eval_opts;

/* Row variants of a format: the latent scale s_l (static NVFP4 formats; calibrated on another
 * draw of the same layer) and the accurate NVFP4 encoder. */
enum { VAR_SCALE = 1, VAR_ACCURATE = 2 };
#define MAX_ROWS_PER_MAG (MLAKV_FORMAT_COUNT * 4)

typedef struct {
    mlakv_format format;
    int variant;
    double mag, measured_max;
    float latent_scale;
    double lat_rel_rmse, lat_max_rel, zeroed;
    double attn_rel_l2, attn_cos_mean, attn_cos_min, lse_err;
    int needle_ok, needle_n;
    double needle_margin_med, needle_margin_min;
} eval_row;

static void usage(FILE *f) {
    fprintf(f,
            "usage: mlakv eval [options]\n"
            "Accuracy of each record format vs float64 attention on unquantized synthetic data,\n"
            "per layer magnitude (max |latent|).\n"
            "  --formats LIST       comma-separated format names (default: all)\n"
            "  --mags LIST          layer magnitudes, max |latent| (default: "
            "0.02,0.05,0.1,0.2,0.5,1,2,5.2)\n"
            "  --seed N             data seed (default 1); same seed, same numbers\n"
            "  --heads N            query heads (default 16)\n"
            "  --topk N             candidates per query (default 2048)\n"
            "  --queries N          query rows per magnitude (default 4)\n"
            "  --context N          context tokens per magnitude (default max(8192, 2*topk))\n"
            "  --needles N          needle trials per magnitude (default 32)\n"
            "  --needle-context N   positions the needle and distractors are drawn from "
            "(default 350000)\n"
            "  --needle-margin X    needle's score lead on unquantized data, nats (default 1)\n"
            "  --whiten X           queries weight each key dimension by std^-2X (0: raw, 1: fully\n"
            "                       whitened matched filter; default 0.5)\n"
            "  --mode engine|exact  numeric mode of the quantized decode (default engine)\n"
            "  --threads N          decode threads (default 0 = all cores)\n"
            "  --input FILE         evaluate real data instead: raw little-endian rows of 576 values\n"
            "                       (latent 512 then post-rotary k_pe 64) of one layer; --mags is\n"
            "                       ignored, the row's mag is the measured max |latent|\n"
            "  --input-dtype T      bf16 (default) or f32\n"
            "  --csv FILE           also write the table as CSV\n"
            "  --no-variants        only the formats as they are (no +s_l / +accurate rows)\n"
            "  --quiet              no progress lines\n"
            "Options take their value as the next argument or after '=' (--topk=512).\n");
}

static int parse_args(int argc, char **argv, eval_opts *o) {
    memset(o, 0, sizeof *o);
    o->nformats = MLAKV_FORMAT_COUNT;
    for (int f = 0; f < MLAKV_FORMAT_COUNT; f++) o->formats[f] = (mlakv_format)f;
    static const double dm[] = {0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5.2};
    o->nmags = 8;
    memcpy(o->mags, dm, sizeof dm);
    o->seed = 1;
    o->heads = 16;
    o->topk = 2048;
    o->queries = 4;
    o->context = 0;
    o->needles = 32;
    o->needle_context = 350000;
    o->needle_margin = 1.0;
    o->whiten = 0.5;
    o->mode = MLAKV_ATTN_ENGINE;
    o->input_dtype = MLAKV_BF16;
    enum {
        OPT_FORMATS = 256, OPT_MAGS, OPT_SEED, OPT_HEADS, OPT_TOPK, OPT_QUERIES, OPT_CONTEXT,
        OPT_NEEDLES, OPT_NEEDLE_CONTEXT, OPT_NEEDLE_MARGIN, OPT_WHITEN, OPT_MODE, OPT_THREADS,
        OPT_INPUT, OPT_INPUT_DTYPE, OPT_CSV, OPT_NO_VARIANTS, OPT_QUIET
    };
    static const struct option longopts[] = {
        {"help", no_argument, NULL, 'h'},
        {"formats", required_argument, NULL, OPT_FORMATS},
        {"mags", required_argument, NULL, OPT_MAGS},
        {"seed", required_argument, NULL, OPT_SEED},
        {"heads", required_argument, NULL, OPT_HEADS},
        {"topk", required_argument, NULL, OPT_TOPK},
        {"queries", required_argument, NULL, OPT_QUERIES},
        {"context", required_argument, NULL, OPT_CONTEXT},
        {"needles", required_argument, NULL, OPT_NEEDLES},
        {"needle-context", required_argument, NULL, OPT_NEEDLE_CONTEXT},
        {"needle-margin", required_argument, NULL, OPT_NEEDLE_MARGIN},
        {"whiten", required_argument, NULL, OPT_WHITEN},
        {"mode", required_argument, NULL, OPT_MODE},
        {"threads", required_argument, NULL, OPT_THREADS},
        {"input", required_argument, NULL, OPT_INPUT},
        {"input-dtype", required_argument, NULL, OPT_INPUT_DTYPE},
        {"csv", required_argument, NULL, OPT_CSV},
        {"no-variants", no_argument, NULL, OPT_NO_VARIANTS},
        {"quiet", no_argument, NULL, OPT_QUIET},
        {NULL, 0, NULL, 0}};
    cli_getopt_begin();
    int opt;
    while ((opt = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        const char *v = optarg;
        long long x;
        switch (opt) {
        case 'h':
            usage(stdout);
            return 1;
        case OPT_QUIET:
            o->quiet = 1;
            break;
        case OPT_NO_VARIANTS:
            o->no_variants = 1;
            break;
        case OPT_FORMATS: {
            char buf[512];
            snprintf(buf, sizeof buf, "%s", v);
            o->nformats = 0;
            for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
                mlakv_format f;
                if (mlakv_format_from_name(tok, &f) != MLAKV_OK) {
                    fprintf(stderr, "mlakv eval: unknown format '%s' in --formats (see 'mlakv "
                                    "formats')\n", tok);
                    return -1;
                }
                if (o->nformats < MLAKV_FORMAT_COUNT) o->formats[o->nformats++] = f;
            }
            if (o->nformats == 0) {
                fprintf(stderr, "mlakv eval: --formats is empty\n");
                return -1;
            }
            break;
        }
        case OPT_MAGS: {
            char buf[512];
            snprintf(buf, sizeof buf, "%s", v);
            o->nmags = 0;
            for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
                if (o->nmags == MAX_MAGS) {
                    fprintf(stderr, "mlakv eval: --mags has more than %d entries\n", MAX_MAGS);
                    return -1;
                }
                if (cli_real("eval", "--mags entry", tok, 0, 1e4, CLI_OPEN, &o->mags[o->nmags]))
                    return -1;
                o->nmags++;
            }
            if (o->nmags == 0) {
                fprintf(stderr, "mlakv eval: --mags is empty\n");
                return -1;
            }
            break;
        }
        case OPT_SEED: {
            unsigned long long seed;
            if (cli_u64("eval", "--seed", v, &seed)) return -1;
            o->seed = seed;
            break;
        }
        case OPT_MODE:
            if (!strcmp(v, "engine"))
                o->mode = MLAKV_ATTN_ENGINE;
            else if (!strcmp(v, "exact"))
                o->mode = MLAKV_ATTN_EXACT;
            else {
                fprintf(stderr, "mlakv eval: --mode '%s' is not engine or exact\n", v);
                return -1;
            }
            break;
        case OPT_NEEDLE_MARGIN:
            if (cli_real("eval", "--needle-margin", v, 0, 100, CLI_OPEN, &o->needle_margin))
                return -1;
            break;
        case OPT_WHITEN:
            if (cli_real("eval", "--whiten", v, 0, 1, CLI_CLOSED, &o->whiten)) return -1;
            break;
        case OPT_INPUT:
            o->input = v;
            break;
        case OPT_INPUT_DTYPE:
            if (!strcmp(v, "bf16"))
                o->input_dtype = MLAKV_BF16;
            else if (!strcmp(v, "f32"))
                o->input_dtype = MLAKV_F32;
            else {
                fprintf(stderr, "mlakv eval: --input-dtype '%s' is not bf16 or f32\n", v);
                return -1;
            }
            break;
        case OPT_CSV:
            o->csv = v;
            break;
        case OPT_HEADS:
            if (cli_int("eval", "--heads", v, 1, 1024, &x)) return -1;
            o->heads = (int)x;
            break;
        case OPT_TOPK:
            if (cli_int("eval", "--topk", v, 1, 1 << 20, &x)) return -1;
            o->topk = (int)x;
            break;
        case OPT_QUERIES:
            if (cli_int("eval", "--queries", v, 1, 4096, &x)) return -1;
            o->queries = (int)x;
            break;
        case OPT_CONTEXT:
            if (cli_int("eval", "--context", v, 1, 1 << 24, &x)) return -1;
            o->context = (int)x;
            break;
        case OPT_NEEDLES:
            if (cli_int("eval", "--needles", v, 0, 100000, &x)) return -1;
            o->needles = (int)x;
            break;
        case OPT_THREADS:
            if (cli_int("eval", "--threads", v, 0, 256, &x)) return -1;
            o->threads = (int)x;
            break;
        case OPT_NEEDLE_CONTEXT:
            if (cli_int("eval", "--needle-context", v, 4096, 1LL << 40, &x)) return -1;
            o->needle_context = x;
            break;
        default:
            cli_option_error("eval", opt, argv, longopts);
            return -1;
        }
    }
    if (cli_no_operands("eval", argc, argv)) return -1;
    if (o->context == 0) o->context = o->topk * 2 > 8192 ? o->topk * 2 : 8192;
    if (o->context < o->topk) {
        fprintf(stderr, "mlakv eval: --context %d < --topk %d\n", o->context, o->topk);
        return -1;
    }
    return 0;
}

/* ---- data of one magnitude (shared by all formats) ------------------------------------------- */

typedef struct {
    int64_t n;          /* tokens */
    float *lat, *rope;  /* [n, 512], [n, 64], bf16-exact values */
} tokens;

typedef struct {
    tokens ctx;                 /* attention context */
    int32_t *idx;               /* [queries, topk] */
    uint16_t *q;                /* [queries, heads, 576] bf16 */
    double *ref_out, *ref_lse;  /* float64 attention on unquantized data */
    tokens nd;                  /* needle set: distractors then needles */
    int64_t n_distract;
    double *nq;                 /* [needles, 576] needle queries (scaled) */
    double sm_scale;
    double rel_mass;            /* mean softmax mass on the relevant keys (reference) */
    float latent_scale;         /* s_l calibrated on a separate draw of the layer */
} mag_data;

static int tokens_alloc(tokens *t, int64_t n) {
    t->n = n;
    t->lat = malloc((size_t)n * 512 * sizeof(float));
    t->rope = malloc((size_t)n * 64 * sizeof(float));
    return t->lat && t->rope ? 0 : -1;
}

static void tokens_free(tokens *t) {
    free(t->lat);
    free(t->rope);
}

static void gen_tokens(const synth_layer *L, synth_rng *r, tokens *t, int64_t max_pos) {
    int64_t *pos = malloc((size_t)t->n * sizeof(int64_t));
    for (int64_t i = 0; i < t->n; i++) pos[i] = synth_range(r, max_pos);
    synth_tokens(L, r, t->n, pos, t->lat, t->rope);
    for (int64_t i = 0; i < t->n * 512; i++) t->lat[i] = mlakv_round_bf16(t->lat[i]);
    for (int64_t i = 0; i < t->n * 64; i++) t->rope[i] = mlakv_round_bf16(t->rope[i]);
    free(pos);
}

static void key_of(const tokens *t, int64_t i, float *k) {
    memcpy(k, t->lat + i * 512, 512 * sizeof(float));
    memcpy(k + 512, t->rope + i * 64, 64 * sizeof(float));
}

/* float64 attention of one query over candidate keys (no sink). */
static void ref_attention(const double *q, const tokens *t, const int32_t *idx, int n, double sm,
                          double *out, double *lse, double *scores) {
    double m = -INFINITY;
    for (int c = 0; c < n; c++) {
        const float *l = t->lat + (int64_t)idx[c] * 512, *r = t->rope + (int64_t)idx[c] * 64;
        double s = 0;
        for (int d = 0; d < 512; d++) s += q[d] * l[d];
        for (int d = 0; d < 64; d++) s += q[512 + d] * r[d];
        scores[c] = s * sm;
        if (scores[c] > m) m = scores[c];
    }
    double den = 0;
    for (int d = 0; d < 512; d++) out[d] = 0;
    for (int c = 0; c < n; c++) {
        double p = exp(scores[c] - m);
        den += p;
        const float *l = t->lat + (int64_t)idx[c] * 512;
        for (int d = 0; d < 512; d++) out[d] += p * l[d];
    }
    for (int d = 0; d < 512; d++) out[d] /= den;
    *lse = m + log(den);
}

/* Load --input: rows of 576 values (latent ; rope). Returns 0, or -1 with a message printed. */
static int load_input(eval_opts *o) {
    FILE *f = fopen(o->input, "rb");
    if (!f) {
        fprintf(stderr, "mlakv eval: cannot open %s\n", o->input);
        return -1;
    }
    size_t esz = o->input_dtype == MLAKV_F32 ? 4 : 2, row = 576 * esz;
    long size = -1;
    if (fseek(f, 0, SEEK_END) == 0) size = ftell(f);
    if (size <= 0 || (size_t)size % row != 0 || fseek(f, 0, SEEK_SET) != 0) {
        fprintf(stderr, "mlakv eval: %s: size %ld is not a positive multiple of %zu bytes (576 %s "
                "values per token)\n", o->input, size, row, esz == 4 ? "f32" : "bf16");
        fclose(f);
        return -1;
    }
    o->in_n = (int64_t)((size_t)size / row);
    o->in_lat = malloc((size_t)o->in_n * 512 * sizeof(float));
    o->in_rope = malloc((size_t)o->in_n * 64 * sizeof(float));
    unsigned char *buf = malloc(row);
    int rc = o->in_lat && o->in_rope && buf ? 0 : -1;
    for (int64_t i = 0; rc == 0 && i < o->in_n; i++) {
        if (fread(buf, 1, row, f) != row) {
            rc = -1;
            break;
        }
        for (int d = 0; d < 576; d++) {
            float v;
            if (esz == 4) {
                memcpy(&v, buf + 4 * d, 4);
            } else {
                uint16_t b;
                memcpy(&b, buf + 2 * d, 2);
                v = mlakv_bf16_to_f32(b);
            }
            if (!isfinite(v)) {
                fprintf(stderr, "mlakv eval: %s: token %lld value %d is not finite\n", o->input,
                        (long long)i, d);
                rc = -2;
                break;
            }
            if (d < 512)
                o->in_lat[i * 512 + d] = v;
            else
                o->in_rope[i * 64 + d - 512] = v;
        }
    }
    if (rc == -1) fprintf(stderr, "mlakv eval: cannot read %s\n", o->input);
    free(buf);
    fclose(f);
    if (rc) return -1;
    double mx = 0;
    for (int64_t i = 0; i < o->in_n * 512; i++) mx = fmax(mx, fabs(o->in_lat[i]));
    if (!(mx > 0)) {
        fprintf(stderr, "mlakv eval: %s: all latents are zero\n", o->input);
        return -1;
    }
    o->nmags = 1;
    o->mags[0] = mx;
    if (o->context > o->in_n) o->context = (int)o->in_n;
    if (o->context < o->topk) {
        fprintf(stderr, "mlakv eval: %s holds %lld tokens, fewer than --topk %d\n", o->input,
                (long long)o->in_n, o->topk);
        return -1;
    }
    if (o->needles > 0 && o->in_n < 2048 + (int64_t)o->needles) {
        int64_t nn = o->in_n - 2047;
        fprintf(stderr, "mlakv eval: %s: %lld tokens; needle trials reduced to %lld\n", o->input,
                (long long)o->in_n, (long long)(nn > 0 ? nn : 0));
        o->needles = nn > 0 ? (int)nn : 0;
    }
    return 0;
}

/* n distinct random tokens of --input into t. */
static int sample_input(const eval_opts *o, synth_rng *r, tokens *t, int64_t n) {
    if (tokens_alloc(t, n)) return -1;
    int64_t *perm = malloc((size_t)o->in_n * sizeof(int64_t));
    if (!perm) return -1;
    for (int64_t i = 0; i < o->in_n; i++) perm[i] = i;
    for (int64_t i = 0; i < n; i++) {
        int64_t j = i + synth_range(r, o->in_n - i), x = perm[i];
        perm[i] = perm[j];
        perm[j] = x;
        memcpy(t->lat + i * 512, o->in_lat + perm[i] * 512, 512 * sizeof(float));
        memcpy(t->rope + i * 64, o->in_rope + perm[i] * 64, 64 * sizeof(float));
    }
    free(perm);
    return 0;
}

static int build_mag(const eval_opts *o, int mi, mag_data *D) {
    memset(D, 0, sizeof *D);
    uint64_t s = o->seed * 0x9E3779B97F4A7C15ull + (uint64_t)mi * 0xD1B54A32D192ED03ull;
    synth_layer L;
    synth_layer_init(&L, s, o->mags[mi]);
    synth_rng r;
    synth_seed(&r, s ^ 0x5DEECE66Dull);
    D->sm_scale = 1.0 / sqrt(576.0);
    if (o->input) {
        if (sample_input(o, &r, &D->ctx, o->context)) return -1;
    } else {
        if (tokens_alloc(&D->ctx, o->context)) return -1;
        gen_tokens(&L, &r, &D->ctx, o->needle_context);
    }
    /* s_l: the max |latent| of a calibration draw (65536 other tokens of the layer, 8x the
     * default context; real data: every loaded token), as an engine would calibrate over a
     * calibration run before serving. A draw smaller than the context under-estimates the
     * tail, and the context's larger values saturate: with 4096 tokens the worst query at max|x|
     * 0.5 fell to 0.988 */
    {
        float m = 0.0f;
        if (o->input) {
            if (mlakv_latent_max_abs(o->in_n, o->in_lat, 512, MLAKV_F32, &m) != MLAKV_OK) return -1;
        } else {
            tokens cal;
            synth_rng rc;
            synth_seed(&rc, s ^ 0xCA11B7A7Eull);
            if (tokens_alloc(&cal, 65536)) return -1;
            gen_tokens(&L, &rc, &cal, o->needle_context);
            const mlakv_status st = mlakv_latent_max_abs(cal.n, cal.lat, 512, MLAKV_F32, &m);
            tokens_free(&cal);
            if (st != MLAKV_OK) return -1;
        }
        if (mlakv_latent_scale(m, &D->latent_scale) != MLAKV_OK) return -1;
    }
    /* mean key of the layer and std^-whiten per dimension: queries are built in that space */
    double center[576] = {0}, weight[576] = {0};
    for (int64_t i = 0; i < D->ctx.n; i++) {
        for (int d = 0; d < 512; d++) center[d] += D->ctx.lat[i * 512 + d];
        for (int d = 0; d < 64; d++) center[512 + d] += D->ctx.rope[i * 64 + d];
    }
    for (int d = 0; d < 576; d++) center[d] /= (double)D->ctx.n;
    for (int64_t i = 0; i < D->ctx.n; i++) {
        for (int d = 0; d < 512; d++) weight[d] += pow(D->ctx.lat[i * 512 + d] - center[d], 2);
        for (int d = 0; d < 64; d++) weight[512 + d] += pow(D->ctx.rope[i * 64 + d] - center[512 + d], 2);
    }
    for (int d = 0; d < 576; d++)
        weight[d] = pow(weight[d] / (double)D->ctx.n + 1e-30, -0.5 * o->whiten);

    /* attention queries: topk distinct candidates, the first N_RELEVANT of them relevant */
    const int Q = o->queries, H = o->heads, K = o->topk;
    D->idx = malloc((size_t)Q * (size_t)K * sizeof(int32_t));
    D->q = malloc((size_t)Q * (size_t)H * 576 * sizeof(uint16_t));
    D->ref_out = malloc((size_t)Q * (size_t)H * 512 * sizeof(double));
    D->ref_lse = malloc((size_t)Q * (size_t)H * sizeof(double));
    int32_t *perm = malloc((size_t)o->context * sizeof(int32_t));
    double *scores = malloc((size_t)K * sizeof(double));
    if (!D->idx || !D->q || !D->ref_out || !D->ref_lse || !perm || !scores) {
        free(perm);
        free(scores);
        return -1;
    }
    for (int i = 0; i < o->context; i++) perm[i] = i;
    int nrel = K < N_RELEVANT ? K : N_RELEVANT;
    float keys[N_RELEVANT * 576];
    double q[576];
    for (int b = 0; b < Q; b++) {
        for (int c = 0; c < K; c++) { /* partial Fisher-Yates */
            int64_t j = c + synth_range(&r, o->context - c);
            int32_t t = perm[c];
            perm[c] = perm[j];
            perm[j] = t;
            D->idx[(size_t)b * K + c] = perm[c];
        }
        for (int k = 0; k < nrel; k++) key_of(&D->ctx, D->idx[(size_t)b * K + k], keys + k * 576);
        for (int h = 0; h < H; h++) {
            synth_query(&r, keys, 576, nrel, center, weight, 0.5, 0.8, q);
            double lead = 0; /* relevant keys' score above the context mean */
            for (int k = 0; k < nrel; k++)
                for (int d = 0; d < 576; d++) lead += q[d] * (keys[k * 576 + d] - center[d]);
            lead /= nrel;
            /* relevant keys that do not stand out from the context mean (a context of one
             * token is its own mean): no scale makes them lead; a zero query (uniform
             * attention) keeps every metric defined */
            double g = lead > 0 ? REL_LOGIT / (lead * D->sm_scale) : 0.0;
            if (!isfinite(g)) g = 0.0;
            uint16_t *qb = D->q + ((size_t)b * H + h) * 576;
            for (int d = 0; d < 576; d++) {
                float v = (float)(q[d] * g);
                qb[d] = mlakv_f32_to_bf16(v);
                q[d] = mlakv_bf16_to_f32(qb[d]);
            }
            ref_attention(q, &D->ctx, D->idx + (size_t)b * K, K, D->sm_scale,
                          D->ref_out + ((size_t)b * H + h) * 512, D->ref_lse + (size_t)b * H + h,
                          scores);
            for (int k = 0; k < nrel; k++)
                D->rel_mass += exp(scores[k] - D->ref_lse[(size_t)b * H + h]) / (Q * H);
        }
    }
    free(perm);
    free(scores);

    /* needles: n_distract distractors + one needle per trial, all from a long context */
    D->n_distract = 2047;
    if (o->needles > 0) {
        if (o->input) {
            if (sample_input(o, &r, &D->nd, D->n_distract + o->needles)) return -1;
        } else {
            if (tokens_alloc(&D->nd, D->n_distract + o->needles)) return -1;
            gen_tokens(&L, &r, &D->nd, o->needle_context);
        }
        D->nq = malloc((size_t)o->needles * 576 * sizeof(double));
        double *sc = malloc((size_t)(D->n_distract + 1) * sizeof(double));
        if (!D->nq || !sc) {
            free(sc);
            return -1;
        }
        for (int t = 0; t < o->needles; t++) {
            int64_t ni = D->n_distract + t;
            float key[576];
            key_of(&D->nd, ni, key);
            double *qn = D->nq + (size_t)t * 576;
            /* noisy query: the needle leads, but not by much; scale to the wanted margin */
            double noise = 2.0, lead = -1;
            for (int tries = 0; tries < 40 && !(lead > 0); tries++, noise *= 0.85) {
                synth_query(&r, key, 576, 1, center, weight, noise, 0.85, qn);
                double sn = 0, best = -INFINITY;
                for (int d = 0; d < 512; d++) sn += qn[d] * D->nd.lat[ni * 512 + d];
                for (int d = 0; d < 64; d++) sn += qn[512 + d] * D->nd.rope[ni * 64 + d];
                for (int64_t j = 0; j < D->n_distract; j++) {
                    double s2 = 0;
                    for (int d = 0; d < 512; d++) s2 += qn[d] * D->nd.lat[j * 512 + d];
                    for (int d = 0; d < 64; d++) s2 += qn[512 + d] * D->nd.rope[j * 64 + d];
                    if (s2 > best) best = s2;
                }
                lead = sn - best;
            }
            double g = lead > 0 ? o->needle_margin / lead : 0; /* g = 0: trial unusable */
            for (int d = 0; d < 576; d++) qn[d] *= g;
        }
        free(sc);
    }
    return 0;
}

static void free_mag(mag_data *D) {
    tokens_free(&D->ctx);
    tokens_free(&D->nd);
    free(D->idx);
    free(D->q);
    free(D->ref_out);
    free(D->ref_lse);
    free(D->nq);
}

/* ---- one format at one magnitude ------------------------------------------------------------- */

/* Write tokens into a fresh cache of format f (latent scale s_l, write options opt), read them
 * back de-quantized. */
static int roundtrip(mlakv_format f, float s_l, const mlakv_write_options *opt, const tokens *t,
                     mlakv_cache *cache, void **mem, float *lat, float *rope) {
    const int64_t bs = 64, nb = (t->n + bs - 1) / bs;
    size_t bytes;
    if (mlakv_cache_bytes(f, nb, bs, 0, &bytes) != MLAKV_OK) return -1;
    *mem = calloc(1, bytes);
    int64_t *slots = malloc((size_t)t->n * sizeof(int64_t));
    if (!*mem || !slots) {
        free(slots);
        return -1;
    }
    for (int64_t i = 0; i < t->n; i++) slots[i] = i;
    int rc = (mlakv_cache_init(cache, *mem, f, nb, bs, 0) == MLAKV_OK &&
              mlakv_cache_set_latent_scale(cache, s_l) == MLAKV_OK &&
              mlakv_write(cache, t->n, t->lat, 512, t->rope, 64, MLAKV_F32, slots, opt) ==
                  MLAKV_OK &&
              mlakv_read(cache, t->n, slots, lat, rope) == MLAKV_OK)
                 ? 0
                 : -1;
    free(slots);
    return rc;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int eval_one(const eval_opts *o, const mag_data *D, mlakv_format f, int variant,
                    eval_row *row) {
    memset(row, 0, sizeof *row);
    row->format = f;
    row->variant = variant;
    const float s_l = (variant & VAR_SCALE) ? D->latent_scale : 1.0f;
    row->latent_scale = s_l;
    mlakv_write_options wo = mlakv_write_options_default();
    if (variant & VAR_ACCURATE) wo.nvfp4_encoder = MLAKV_NVFP4_ENCODER_ACCURATE;
    const tokens *C = &D->ctx;
    float *lat = malloc((size_t)C->n * 512 * sizeof(float));
    float *rope = malloc((size_t)C->n * 64 * sizeof(float));
    mlakv_cache cache;
    void *mem = NULL;
    if (!lat || !rope || roundtrip(f, s_l, &wo, C, &cache, &mem, lat, rope)) {
        fprintf(stderr, "mlakv eval: %s: %s\n", mlakv_format_get(f)->name, mlakv_last_error());
        free(lat), free(rope), free(mem);
        return -1;
    }
    /* latent error */
    double se = 0, sx = 0, maxrel = 0, mx = 0;
    int64_t nz = 0, zeroed = 0;
    for (int64_t i = 0; i < C->n; i++) {
        double tmax = 0, emax = 0;
        for (int d = 0; d < 512; d++) {
            double x = C->lat[i * 512 + d], y = lat[i * 512 + d];
            se += (y - x) * (y - x);
            sx += x * x;
            tmax = fmax(tmax, fabs(x));
            emax = fmax(emax, fabs(y - x));
            if (x != 0) {
                nz++;
                zeroed += y == 0;
            }
        }
        mx = fmax(mx, tmax);
        if (tmax > 0) maxrel = fmax(maxrel, emax / tmax);
    }
    row->measured_max = mx;
    row->lat_rel_rmse = sqrt(se / sx);
    row->lat_max_rel = maxrel;
    row->zeroed = nz ? (double)zeroed / (double)nz : 0;

    /* attention */
    const int Q = o->queries, H = o->heads, K = o->topk;
    mlakv_decode_args a = mlakv_decode_args_default(Q, 1, H, K);
    float *out = malloc((size_t)Q * H * 512 * sizeof(float)), *lse = malloc((size_t)Q * H * sizeof(float));
    if (!out || !lse) {
        free(lat), free(rope), free(mem), free(out), free(lse);
        return -1;
    }
    a.q = D->q;
    a.q_dtype = MLAKV_BF16;
    a.indices = D->idx;
    a.sm_scale = (float)D->sm_scale;
    a.out = out;
    a.out_dtype = MLAKV_F32;
    a.lse = lse;
    a.mode = o->mode;
    a.num_threads = o->threads;
    if (mlakv_sparse_decode(&cache, &a) != MLAKV_OK) {
        fprintf(stderr, "mlakv eval: decode: %s\n", mlakv_last_error());
        free(lat), free(rope), free(mem), free(out), free(lse);
        return -1;
    }
    double num = 0, den = 0, cs = 0, cmin = 1, lerr = 0;
    for (int64_t r = 0; r < (int64_t)Q * H; r++) {
        double dot = 0, n1 = 0, n2 = 0;
        for (int d = 0; d < 512; d++) {
            double x = D->ref_out[r * 512 + d], y = out[r * 512 + d];
            num += (y - x) * (y - x);
            den += x * x;
            dot += x * y;
            n1 += x * x;
            n2 += y * y;
        }
        /* cosine of two zero rows is 1 (identical), of a zero and a non-zero row 0 */
        double c = n1 > 0 && n2 > 0 ? dot / sqrt(n1 * n2) : (n1 == n2 ? 1.0 : 0.0);
        cs += c;
        cmin = fmin(cmin, c);
        lerr = fmax(lerr, fabs(lse[r] - D->ref_lse[r]));
    }
    /* relative to a zero reference: 0 when the output is zero too, else undefined (n/a) */
    row->attn_rel_l2 = den > 0 ? sqrt(num / den) : (num == 0 ? 0.0 : NAN);
    row->attn_cos_mean = cs / (double)(Q * H);
    row->attn_cos_min = cmin;
    row->lse_err = lerr;
    free(out), free(lse), free(mem);
    mem = NULL;
    free(lat), free(rope);

    /* needles: scores on de-quantized records (float64 dot products) */
    if (o->needles > 0) {
        const tokens *N = &D->nd;
        float *nl = malloc((size_t)N->n * 512 * sizeof(float)), *nr = malloc((size_t)N->n * 64 * sizeof(float));
        double *margins = malloc((size_t)o->needles * sizeof(double));
        if (!nl || !nr || !margins || roundtrip(f, s_l, &wo, N, &cache, &mem, nl, nr)) {
            fprintf(stderr, "mlakv eval: needle cache: %s\n", mlakv_last_error());
            free(nl), free(nr), free(margins), free(mem);
            return -1;
        }
        int nm = 0;
        for (int t = 0; t < o->needles; t++) {
            const double *q = D->nq + (size_t)t * 576;
            if (q[0] == 0 && q[1] == 0 && q[575] == 0) continue; /* unusable trial (g = 0) */
            int64_t ni = D->n_distract + t;
            double sn = 0, best = -INFINITY;
            for (int d = 0; d < 512; d++) sn += q[d] * nl[ni * 512 + d];
            for (int d = 0; d < 64; d++) sn += q[512 + d] * nr[ni * 64 + d];
            for (int64_t j = 0; j < D->n_distract; j++) {
                double s = 0;
                for (int d = 0; d < 512; d++) s += q[d] * nl[j * 512 + d];
                for (int d = 0; d < 64; d++) s += q[512 + d] * nr[j * 64 + d];
                best = fmax(best, s);
            }
            margins[nm++] = sn - best;
        }
        qsort(margins, (size_t)nm, sizeof(double), cmp_double);
        row->needle_n = nm;
        for (int i = 0; i < nm; i++) row->needle_ok += margins[i] > 0;
        row->needle_margin_med = nm ? margins[nm / 2] : NAN;
        row->needle_margin_min = nm ? margins[0] : NAN;
        free(nl), free(nr), free(margins), free(mem);
    }
    return 0;
}

/* ---- output ---------------------------------------------------------------------------------- */

/* v with printf format fmt into buf, or "n/a" when v is NaN (an undefined metric: printf
 * would write "nan" or "-nan") */
static const char *metric(char *buf, size_t n, const char *fmt, double v) {
    if (isnan(v)) snprintf(buf, n, "n/a");
    else snprintf(buf, n, fmt, v);
    return buf;
}

/* "nvfp4_ds_mla", "nvfp4_ds_mla+s_l", "nvfp4_ds_mla+accurate", ... */
static const char *row_label(const eval_row *r, char *buf, size_t n) {
    snprintf(buf, n, "%s%s%s", mlakv_format_get(r->format)->name,
             (r->variant & VAR_SCALE) ? "+s_l" : "", (r->variant & VAR_ACCURATE) ? "+accurate" : "");
    return buf;
}

static void print_table(FILE *f, const eval_opts *o, const eval_row *rows, int n) {
    char lb[96];
    fprintf(f, "%-40s %7s %7s %9s %9s %7s %9s %9s %9s %8s %7s %8s %8s\n", "format", "mag",
            "max|x|", "lat_rmse", "lat_maxr", "zeroed", "attn_l2", "cos_mean", "cos_min",
            "lse_err", "needle", "marg_med", "marg_min");
    for (int i = 0; i < n; i++) {
        const eval_row *r = &rows[i];
        char nd[32] = "-", med[32] = "-", mn[32] = "-";
        if (o->needles && r->needle_n) {
            snprintf(nd, sizeof nd, "%d/%d", r->needle_ok, r->needle_n);
            snprintf(med, sizeof med, "%.3f", r->needle_margin_med);
            snprintf(mn, sizeof mn, "%.3f", r->needle_margin_min);
        }
        char b[7][32];
        char zeroed[32];
        if (isnan(r->zeroed)) snprintf(zeroed, sizeof zeroed, "n/a");
        else snprintf(zeroed, sizeof zeroed, "%.2f%%", 100 * r->zeroed);
        fprintf(f, "%-40s %7.3g %7s %9s %9s %7s %9s %9s %9s %8s %7s %8s %8s\n",
                row_label(r, lb, sizeof lb), r->mag,
                metric(b[0], 32, "%.3g", r->measured_max), metric(b[1], 32, "%.3e", r->lat_rel_rmse),
                metric(b[2], 32, "%.3e", r->lat_max_rel), zeroed,
                metric(b[3], 32, "%.3e", r->attn_rel_l2), metric(b[4], 32, "%.6f", r->attn_cos_mean),
                metric(b[5], 32, "%.6f", r->attn_cos_min), metric(b[6], 32, "%.2e", r->lse_err), nd,
                med, mn);
    }
}

/* NaN with its sign bit cleared: the CSV has "nan" for an undefined metric, never "-nan" */
static double csv_num(double v) { return isnan(v) ? fabs(v) : v; }

static int write_csv(const char *path, const eval_opts *o, const eval_row *rows, int n) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f, "format,mag,measured_max_abs,latent_rel_rmse,latent_max_rel_err,zeroed_frac,"
               "attn_rel_l2,attn_cos_mean,attn_cos_min,lse_max_abs_err,needle_top1,needle_trials,"
               "needle_margin_median,needle_margin_min,mode,seed,heads,topk,queries,latent_scale,"
               "encoder,label\n");
    for (int i = 0; i < n; i++) {
        const eval_row *r = &rows[i];
        char lb[96];
        fprintf(f, "%s,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%d,%d,%.9g,%.9g,%s,%llu,%d,%d,%d,"
                   "%.9g,%s,%s\n",
                mlakv_format_get(r->format)->name, r->mag, csv_num(r->measured_max),
                csv_num(r->lat_rel_rmse), csv_num(r->lat_max_rel), csv_num(r->zeroed),
                csv_num(r->attn_rel_l2), csv_num(r->attn_cos_mean), csv_num(r->attn_cos_min),
                csv_num(r->lse_err), r->needle_ok, r->needle_n, csv_num(r->needle_margin_med),
                csv_num(r->needle_margin_min),
                o->mode == MLAKV_ATTN_EXACT ? "exact" : "engine", (unsigned long long)o->seed,
                o->heads, o->topk, o->queries, (double)r->latent_scale,
                (r->variant & VAR_ACCURATE) ? "accurate" : "standard", row_label(r, lb, sizeof lb));
    }
    return fclose(f) == 0 ? 0 : -1;
}

int mlakv_cmd_eval(int argc, char **argv) {
    eval_opts o;
    int pr = parse_args(argc, argv, &o);
    if (pr) return pr > 0 ? 0 : 2;
    if (o.input && load_input(&o)) {
        free(o.in_lat), free(o.in_rope);
        return 1;
    }
    /* the rows of one magnitude: each format, then its variants */
    int vf[MAX_ROWS_PER_MAG], vv[MAX_ROWS_PER_MAG], nv = 0;
    for (int fi = 0; fi < o.nformats; fi++) {
        const mlakv_format f = o.formats[fi];
        const int stat = f == MLAKV_NVFP4_DS_MLA || f == MLAKV_NVFP4_FP8_ROPE;
        vf[nv] = f, vv[nv++] = 0;
        if (o.no_variants || f == MLAKV_FP8_DS_MLA) continue;
        vf[nv] = f, vv[nv++] = VAR_ACCURATE;
        if (!stat) continue;
        vf[nv] = f, vv[nv++] = VAR_SCALE;
        vf[nv] = f, vv[nv++] = VAR_SCALE | VAR_ACCURATE;
    }
    int nrows = o.nmags * nv;
    eval_row *rows = calloc((size_t)nrows, sizeof(eval_row));
    if (!rows) return 1;
    struct timespec t0, t1;
    timespec_get(&t0, TIME_UTC);
    if (o.input)
        printf("mlakv eval: %lld tokens of real data from %s (%s)\n", (long long)o.in_n, o.input,
               o.input_dtype == MLAKV_F32 ? "f32" : "bf16");
    char where[64] = "drawn from the input";
    if (!o.input) snprintf(where, sizeof where, "positions < %lld", (long long)o.needle_context);
    printf("mlakv eval: seed %llu, %d queries x %d heads, topk %d, context %d tokens, %d needle "
           "trials (2048 candidates, %s, lead %.2g nats), whiten %.2g, decode mode %s\n",
           (unsigned long long)o.seed, o.queries, o.heads, o.topk, o.context, o.needles, where,
           o.needle_margin, o.whiten, o.mode == MLAKV_ATTN_EXACT ? "exact" : "engine");
    int k = 0, rc = 0;
    for (int mi = 0; mi < o.nmags && rc == 0; mi++) {
        mag_data D;
        if (build_mag(&o, mi, &D)) {
            fprintf(stderr, "mlakv eval: out of memory\n");
            free_mag(&D);
            rc = 1;
            break;
        }
        for (int vi = 0; vi < nv; vi++) {
            if (eval_one(&o, &D, (mlakv_format)vf[vi], vv[vi], &rows[k])) {
                rc = 1;
                break;
            }
            rows[k].mag = o.mags[mi];
            k++;
        }
        if (!o.quiet)
            fprintf(stderr, "  magnitude %g done: relevant keys hold %.0f%% of the attention\n",
                    o.mags[mi], isnan(D.rel_mass) ? 0.0 : 100 * D.rel_mass);
        free_mag(&D);
    }
    if (rc == 0) {
        /* grouped by format and variant, magnitudes ascending within each */
        eval_row *sorted = calloc((size_t)nrows, sizeof(eval_row));
        int m = 0;
        for (int vi = 0; vi < nv; vi++)
            for (int i = 0; i < nrows; i++)
                if (rows[i].format == (mlakv_format)vf[vi] && rows[i].variant == vv[vi])
                    sorted[m++] = rows[i];
        print_table(stdout, &o, sorted, nrows);
        /* per-format summary: the worst magnitude for attention and for the needle */
        printf("\nworst magnitude per format (mean cosine; worst single query in brackets):\n");
        for (int vi = 0; vi < nv; vi++) {
            const eval_row *wc = NULL, *wn = NULL, *wq = NULL;
            for (int i = 0; i < nrows; i++) {
                const eval_row *r = &sorted[i];
                if (r->format != (mlakv_format)vf[vi] || r->variant != vv[vi]) continue;
                if (!wc || r->attn_cos_mean < wc->attn_cos_mean) wc = r;
                if (!wq || r->attn_cos_min < wq->attn_cos_min) wq = r;
                if (r->needle_n &&
                    (!wn || (double)r->needle_ok / r->needle_n < (double)wn->needle_ok / wn->needle_n))
                    wn = r;
            }
            if (!wc) continue;
            char cb[32], qb[32], lb[96];
            printf("  %-40s attention cosine %s at max|x| %g (worst query %s at %g)",
                   row_label(wc, lb, sizeof lb), metric(cb, sizeof cb, "%.4f", wc->attn_cos_mean),
                   wc->mag, metric(qb, sizeof qb, "%.4f", wq->attn_cos_min), wq->mag);
            if (wn)
                printf("; needle kept %d/%d at max|x| %g", wn->needle_ok, wn->needle_n, wn->mag);
            printf("\n");
        }
        timespec_get(&t1, TIME_UTC);
        printf("(%.1f s) lat_rmse: latent rel-RMSE; lat_maxr: max over tokens of max|err|/max|x|; "
               "zeroed: non-zero values stored as 0;\nattn_l2 / cos: decode output vs float64 on "
               "unquantized data; lse_err: max |lse error| (nats);\nneedle: trials where the "
               "needle keeps the largest weight; marg: its lead in nats (%.2g before quantization)\n",
               (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec),
               o.needle_margin);
        if (o.csv && write_csv(o.csv, &o, sorted, nrows)) {
            fprintf(stderr, "mlakv eval: cannot write %s\n", o.csv);
            rc = 1;
        }
        free(sorted);
    }
    free(rows);
    free(o.in_lat), free(o.in_rope);
    return rc;
}
