/* CPU sparse MLA decode over a paged cache of any record format: the oracle of every GPU
 * decode kernel.
 *
 * Work is split into units of (query row, group of heads). A unit walks its row's candidates
 * in chunks of CHUNK positions: the valid records of a chunk are de-quantized once into a
 * [n, 576] tile and reused by every head of the group (heads are only split into several
 * groups when there are fewer rows than threads, or more than HEAD_GROUP_MAX heads; engine
 * mode walks the tile for four heads at a time). Each head keeps an online softmax (running
 * max m, denominator l, accumulator acc[512]). Per-head
 * arithmetic does not depend on the grouping or the thread count, so results are
 * deterministic: the same inputs give the same bits on any machine with IEEE fp32/fp64 and a
 * correctly behaving expf/exp (the libm in use).
 *
 * Numeric modes (see mlakv.h):
 *  EXACT   q as given (fp32 or bf16, exact in double); K/V the fp32 de-quantized record values
 *          (bit-identical to mlakv_decode_record) widened to double, their latent part times the
 *          cache's latent scale s_l (exact in double); scores, softmax, P*V and
 *          the output division in double; out rounded once to out_dtype, lse to fp32.
 *  ENGINE  what a bf16 tensor-core kernel computes:
 *          - q rounded to bf16 (round-to-nearest-even) if given as fp32;
 *          - K = bf16(de-quantized fp32 value) element by element, for latent and RoPE. This is
 *            exact (no rounding) for the latent of the NVFP4 records (E2M1 x E4M3 has <= 6
 *            significant bits; the two-level record's s_t is applied below) and for bf16 RoPE;
 *            it rounds fp8_ds_mla's e4m3*scale and the scaled E4M3 RoPE e4m3*rope_scale;
 *          - V = the same bf16 latent values;
 *          - the two-level record (nvfp4_fp8_rope_token_scale) instead keeps its per-token scale
 *            s_t out of K and V: its latent K = V = e2m1 * e4m3 (exact in bf16), score = sm_scale
 *            * (s_t * latent dot + RoPE dot), and P V takes bf16(p * s_t) (l sums p). Rounding
 *            every e2m1 * e4m3 * s_t to bf16 instead costs up to several % of output error on
 *            rows with large scores;
 *          - a static latent scale s_l != 1 (mlakv_cache.latent_scale) stays out of K and V
 *            too, as the GPU kernels fold it: score = (sm_scale * s_l) * (latent dot +
 *            bf16(q_rope * (1 / s_l)) . RoPE) (one 576-wide dot), P V as without it, and out =
 *            (acc / l) * s_l in fp32 (two roundings) before the rounding to out_dtype; fp32
 *            partials carry the s_l. With s_l == 1 nothing changes: bits as without a scale;
 *          - score = sm_scale * dot, the dot an fp32 sum of exact bf16 x bf16 products (16
 *            interleaved partial sums combined pairwise);
 *          - online softmax in fp32 per chunk of 64 candidate positions: m_new = max(m, chunk
 *            max), acc and l rescaled by expf(m - m_new), p = expf(score - m_new) in fp32,
 *            l += p (unrounded), acc += bf16(p) * V (fp32);
 *          - out = acc / l in fp32 (sink folded into l), rounded to out_dtype; lse = m + logf(l).
 *  Both: lse is the natural log; an empty row (no valid candidate, no sink) gives out 0 and
 *  lse -INFINITY; duplicate indices count as separate candidates (twice the weight).
 *
 * Indices are validated before any output is written: every active candidate (position below
 * lengths[b] when lengths is given, inside [cand_begin, cand_end) for partials) that is
 * >= capacity fails the call; masked positions are never read.
 */
#include "cpu/attention.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache/cache.h"
#include "common/status.h"
#include "core/validate.h"
#include "format/format.h"
#include "format/scalar.h"

/* The two per-unit kernels are compiled for AVX-512, AVX2 and baseline x86-64 and picked at
 * load time. The results are bit-identical across clones: every fp32 sum has a fixed order
 * (16 interleaved lanes), products of bf16 values are exact in fp32 (fused or not), and ISO C
 * mode leaves floating-point contraction off. */
#if defined(__GNUC__) && defined(__x86_64__) && defined(__ELF__) && !defined(MLAKV_NO_CLONES)
#define MLAKV_SIMD_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#define MLAKV_INLINE static inline __attribute__((always_inline))
#else
#define MLAKV_SIMD_CLONES
#define MLAKV_INLINE static inline
#endif

#define CHUNK 64           /* candidate positions per de-quantized tile */
#define HEAD_GROUP_MAX 64  /* heads per work unit (bounds the per-thread scratch) */
#define MAX_THREADS 256

/* ---- de-quantization ------------------------------------------------------------------------ */

/* Records are de-quantized by the format's reference decoder (src/format/record.c): the
 * decoder and the codec are one piece of code, so K and V are bit-identical to
 * mlakv_decode_record by construction. */

int mlakv_cpu_resolve_threads(int num_threads) {
    if (num_threads > 0) return num_threads > MAX_THREADS ? MAX_THREADS : num_threads;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1) n = 1;
    if (n > MAX_THREADS) n = MAX_THREADS;
    return (int)n;
}

/* ---- job description ------------------------------------------------------------------------ */

typedef struct {
    const mlakv_decode_args *a;
    const uint8_t *base;
    mlakv_format format;
    const mlakv_format_traits *traits; /* reference decoder of the cache format */
    int64_t block_size, block_stride, record_bytes;
    int64_t begin, end;   /* candidate position range */
    int partial;          /* write fp32 partials, no sink */
    float latent_scale;   /* the cache's s_l */
    float *out_f32;       /* partial outputs */
    float *lse_f32;
    int64_t groups;       /* head groups per row */
    int64_t heads_per_group;
    int64_t units;
    atomic_llong next;
    size_t scratch_bytes;
} job;

MLAKV_INLINE const uint8_t *record_at(const job *J, int64_t s) {
    return J->base + (size_t)(s / J->block_size) * (size_t)J->block_stride +
           (size_t)(s % J->block_size) * (size_t)J->record_bytes;
}

MLAKV_INLINE double load_q(const mlakv_decode_args *a, int64_t off) {
    if (a->q_dtype == MLAKV_F32) return ((const float *)a->q)[off];
    return mlakv_bf16_bits_to_f32(((const uint16_t *)a->q)[off]);
}

MLAKV_INLINE int64_t row_end(const job *J, int64_t b) {
    int64_t end = J->end;
    if (J->a->lengths && (int64_t)J->a->lengths[b] < end) end = J->a->lengths[b];
    return end;
}

/* De-quantizes the valid candidates among positions [c0, c1) of idx into tile rows [n, 576]
 * (fp32, the format's reference decoder) and returns n. With ts (engine mode, two-level
 * record) the latent is decoded without its per-token scale s_t (e2m1 x e4m3, exact in bf16)
 * and ts[j] receives row j's s_t. */
static int decode_chunk(const job *J, const int32_t *idx, int64_t c0, int64_t c1, float *tile,
                        float *ts) {
    int n = 0;
    for (int64_t c = c0; c < c1; c++) {
        if (idx[c] < 0) continue;
        float *k = tile + (size_t)n * 576;
        const uint8_t *r = record_at(J, idx[c]);
        if (ts) { /* the record with s_t set to 1.0 */
            const size_t at = J->traits->info.token_scale_offset;
            uint8_t tmp[656]; /* the largest record (fp8_ds_mla) */
            memcpy(tmp, r, (size_t)J->record_bytes);
            memcpy(&ts[n], r + at, 4);
            const float one = 1.0f;
            memcpy(tmp + at, &one, 4);
            J->traits->decode(tmp, k, k + 512);
        } else {
            J->traits->decode(r, k, k + 512);
        }
        n++;
    }
    return n;
}

/* Store one finished head: out row (512) and lse. */
static void store_f(const job *J, int64_t row, int64_t h, const float *o, float lse) {
    const mlakv_decode_args *a = J->a;
    int64_t r = row * a->heads + h;
    if (J->partial) {
        memcpy(J->out_f32 + r * 512, o, 512 * sizeof(float));
        J->lse_f32[r] = lse;
        return;
    }
    if (a->out_dtype == MLAKV_F32) {
        memcpy((float *)a->out + r * 512, o, 512 * sizeof(float));
    } else {
        uint16_t *dst = (uint16_t *)a->out + r * 512;
        for (int d = 0; d < 512; d++) dst[d] = mlakv_f32_to_bf16_bits(o[d]);
    }
    if (a->lse) a->lse[r] = lse;
}

/* Finish the heads [h0, h0 + nh) of a unit from their online-softmax state (running max m,
 * denominator l, accumulator acc[512] per head) in the unit's precision T: fold the sink into
 * the denominator, divide, store; an empty row without a sink gives 0 and lse -INFINITY.
 * Generated for fp32 (engine mode: expf/logf) and fp64 (exact mode: exp/log). */
#define MLAKV_DEFINE_FINALIZE(name, T, EXP, LOG)                                                 \
    static void name(const job *J, int64_t row, int64_t h0, int64_t nh, const T *m, const T *l,  \
                     const T *acc, int64_t nvalid, T vs) {                                       \
        const mlakv_decode_args *a = J->a;                                                       \
        float o[512];                                                                            \
        for (int64_t hh = 0; hh < nh; hh++) {                                                    \
            T mm = m[hh], ll = l[hh], lse;                                                       \
            const T *ah = acc + hh * 512;                                                        \
            T sk = (!J->partial && a->sink) ? a->sink[h0 + hh] : (T)-INFINITY;                   \
            if (nvalid == 0) mm = (T)-INFINITY, ll = 0;                                          \
            if (sk != (T)-INFINITY) {                                                            \
                T m2 = mm > sk ? mm : sk;                                                        \
                T a1 = nvalid ? EXP(mm - m2) : 0;                                                \
                T l2 = ll * a1 + EXP(sk - m2);                                                   \
                for (int d = 0; d < 512; d++) o[d] = (float)(ah[d] * a1 / l2 * vs);              \
                lse = m2 + LOG(l2);                                                              \
            } else if (nvalid == 0) {                                                            \
                memset(o, 0, sizeof o);                                                          \
                lse = (T)-INFINITY;                                                              \
            } else {                                                                             \
                for (int d = 0; d < 512; d++) o[d] = (float)(ah[d] / ll * vs);                   \
                lse = mm + LOG(ll);                                                              \
            }                                                                                    \
            store_f(J, row, h0 + hh, o, (float)lse);                                             \
        }                                                                                        \
    }
MLAKV_DEFINE_FINALIZE(finalize_f, float, expf, logf)
MLAKV_DEFINE_FINALIZE(finalize_d, double, exp, log)
#undef MLAKV_DEFINE_FINALIZE

/* ---- engine mode (fp32 / bf16) ---------------------------------------------------------------- */

/* the same lane structure over the first len (a multiple of 16) values */
MLAKV_INLINE float dot_f(const float *x, const float *y, int len) {
    float s[16] = {0};
    for (int i = 0; i < len; i += 16)
        for (int k = 0; k < 16; k++) s[k] += x[i + k] * y[i + k];
    for (int w = 8; w >= 1; w >>= 1)
        for (int k = 0; k < w; k++) s[k] += s[k + w];
    return s[0];
}

/* four heads over values [i0, i1) of one key row, each sum with dot_f's lane structure
 * (bit-identical to four dot_f calls on x + i0, y + i0, i1 - i0) */
MLAKV_INLINE void dot_f4(const float *q0, const float *q1, const float *q2, const float *q3,
                         const float *y, int i0, int i1, float *out) {
    float s0[16] = {0}, s1[16] = {0}, s2[16] = {0}, s3[16] = {0};
    for (int i = i0; i < i1; i += 16)
        for (int k = 0; k < 16; k++) {
            float v = y[i + k];
            s0[k] += q0[i + k] * v;
            s1[k] += q1[i + k] * v;
            s2[k] += q2[i + k] * v;
            s3[k] += q3[i + k] * v;
        }
    for (int w = 8; w >= 1; w >>= 1)
        for (int k = 0; k < w; k++) {
            s0[k] += s0[k + w];
            s1[k] += s1[k + w];
            s2[k] += s2[k + w];
            s3[k] += s3[k + w];
        }
    out[0] = s0[0], out[1] = s1[0], out[2] = s2[0], out[3] = s3[0];
}

MLAKV_INLINE float dot576_f(const float *x, const float *y) { return dot_f(x, y, 576); }

/* Four heads at once over one key row: the key is loaded once; each head's sum has exactly the
 * lane structure of dot576_f, so the results are bit-identical to four dot576_f calls. */
MLAKV_INLINE void dot576_f4(const float *q0, const float *q1, const float *q2, const float *q3,
                            const float *y, float *out) {
    dot_f4(q0, q1, q2, q3, y, 0, 576, out);
}

MLAKV_SIMD_CLONES
static void engine_unit(const job *J, int64_t row, int64_t h0, int64_t h1, void *scratch) {
    const mlakv_decode_args *a = J->a;
    const int64_t b = row / a->s_q, t = row % a->s_q, nh = h1 - h0;
    float *K = (float *)scratch;     /* CHUNK x 576 */
    float *qv = K + CHUNK * 576;     /* nh x 576 */
    float *acc = qv + nh * 576;      /* nh x 512 */
    float *m = acc + nh * 512, *l = m + nh; /* nh, nh */
    float *sc = l + nh;              /* nh x CHUNK scores, then bf16-rounded probabilities */
    float *tsv = sc + nh * CHUNK;    /* CHUNK token scales s_t (two-level record) */
    /* the two-level record: K and V without the token scale s_t; s_t multiplies the latent part
     * of each score and each probability before its bf16 rounding (see the header comment) */
    const int two_level = J->format == MLAKV_NVFP4_FP8_ROPE_TOKEN_SCALE;
    /* a static latent scale s_l, as the GPU kernels apply it: score = sm * s_l * (latent dot +
     * bf16(q_rope * (1 / s_l)) . RoPE), the output scaled once at the end (finalize), P V left
     * alone */
    const float s_l = two_level ? 1.0f : J->latent_scale;
    const int split = two_level;
    const float sm = s_l != 1.0f ? a->sm_scale * s_l : a->sm_scale;
    const float q_rope_scale = 1.0f / s_l;

    for (int64_t hh = 0; hh < nh; hh++) {
        int64_t off = b * a->q_stride_batch + t * a->q_stride_token + (h0 + hh) * a->q_stride_head;
        for (int d = 0; d < 576; d++) qv[hh * 576 + d] = mlakv_round_bf16((float)load_q(a, off + d));
        if (s_l != 1.0f)
            for (int d = 512; d < 576; d++)
                qv[hh * 576 + d] = mlakv_round_bf16(qv[hh * 576 + d] * q_rope_scale);
        m[hh] = -INFINITY;
        l[hh] = 0.0f;
        memset(acc + hh * 512, 0, 512 * sizeof(float));
    }
    const int32_t *idx = a->indices + b * a->indices_stride_batch + t * a->indices_stride_token;
    const int64_t end = row_end(J, b);
    int64_t nvalid = 0;
    for (int64_t c0 = J->begin; c0 < end; c0 += CHUNK) {
        int64_t c1 = c0 + CHUNK < end ? c0 + CHUNK : end;
        const int n = decode_chunk(J, idx, c0, c1, K, two_level ? tsv : NULL);
        for (size_t i = 0; i < (size_t)n * 576; i++) K[i] = mlakv_round_bf16(K[i]);
        if (n == 0) continue;
        nvalid += n;
        /* scores, four heads per pass over the tile; the two-level record:
         * sm * (s_t * latent dot + RoPE dot) */
        int64_t hh = 0;
        for (; hh + 4 <= nh; hh += 4) {
            const float *q = qv + hh * 576;
            for (int j = 0; j < n; j++) {
                const float *k = K + (size_t)j * 576;
                float d4[4];
                if (split) {
                    float dl[4], dr[4];
                    dot_f4(q, q + 576, q + 2 * 576, q + 3 * 576, k, 0, 512, dl);
                    dot_f4(q, q + 576, q + 2 * 576, q + 3 * 576, k, 512, 576, dr);
                    for (int u = 0; u < 4; u++) d4[u] = tsv[j] * dl[u] + dr[u];
                } else {
                    dot576_f4(q, q + 576, q + 2 * 576, q + 3 * 576, k, d4);
                }
                for (int u = 0; u < 4; u++) sc[(hh + u) * CHUNK + j] = sm * d4[u];
            }
        }
        for (; hh < nh; hh++)
            for (int j = 0; j < n; j++) {
                const float *q = qv + hh * 576, *k = K + (size_t)j * 576;
                sc[hh * CHUNK + j] =
                    sm * (split ? tsv[j] * dot_f(q, k, 512) + dot_f(q + 512, k + 512, 64)
                                    : dot576_f(q, k));
            }
        /* online softmax: rescale, p = exp(s - m) (fp32 into l), bf16(p) kept for P*V */
        for (hh = 0; hh < nh; hh++) {
            float *sh = sc + hh * CHUNK, *ah = acc + hh * 512;
            float mx = -INFINITY;
            for (int j = 0; j < n; j++)
                if (sh[j] > mx) mx = sh[j];
            float mnew = m[hh] > mx ? m[hh] : mx;
            if (m[hh] != -INFINITY && m[hh] != mnew) {
                float alpha = expf(m[hh] - mnew);
                l[hh] *= alpha;
                for (int d = 0; d < 512; d++) ah[d] *= alpha;
            }
            float lsum = l[hh];
            for (int j = 0; j < n; j++) {
                float p = expf(sh[j] - mnew);
                lsum += p;
                sh[j] = mlakv_round_bf16(two_level ? p * tsv[j] : p);
            }
            l[hh] = lsum;
            m[hh] = mnew;
        }
        /* P*V: acc += bf16(p) * V in candidate order, four heads per pass over the tile */
        for (hh = 0; hh + 4 <= nh; hh += 4) {
            float *a0 = acc + hh * 512, *a1 = a0 + 512, *a2 = a1 + 512, *a3 = a2 + 512;
            const float *p = sc + hh * CHUNK;
            for (int j = 0; j < n; j++) {
                const float *v = K + (size_t)j * 576;
                float p0 = p[j], p1 = p[CHUNK + j], p2 = p[2 * CHUNK + j], p3 = p[3 * CHUNK + j];
                for (int d = 0; d < 512; d++) {
                    a0[d] += p0 * v[d];
                    a1[d] += p1 * v[d];
                    a2[d] += p2 * v[d];
                    a3[d] += p3 * v[d];
                }
            }
        }
        for (; hh < nh; hh++) {
            float *ah = acc + hh * 512;
            for (int j = 0; j < n; j++) {
                const float *v = K + (size_t)j * 576;
                float pb = sc[hh * CHUNK + j];
                for (int d = 0; d < 512; d++) ah[d] += pb * v[d];
            }
        }
    }
    finalize_f(J, row, h0, nh, m, l, acc, nvalid, s_l);
}

/* ---- exact mode (float64) --------------------------------------------------------------------- */

MLAKV_INLINE double dot576_d(const double *x, const double *y) {
    double s[8] = {0};
    for (int i = 0; i < 576; i += 8)
        for (int k = 0; k < 8; k++) s[k] += x[i + k] * y[i + k];
    for (int w = 4; w >= 1; w >>= 1)
        for (int k = 0; k < w; k++) s[k] += s[k + w];
    return s[0];
}

MLAKV_SIMD_CLONES
static void exact_unit(const job *J, int64_t row, int64_t h0, int64_t h1, void *scratch) {
    const mlakv_decode_args *a = J->a;
    const int64_t b = row / a->s_q, t = row % a->s_q, nh = h1 - h0;
    double *K = (double *)scratch;   /* CHUNK x 576 */
    double *qv = K + CHUNK * 576;    /* nh x 576 */
    double *acc = qv + nh * 576;     /* nh x 512 */
    double *m = acc + nh * 512, *l = m + nh, *sc = l + nh; /* nh, nh, CHUNK */
    float *kf = (float *)(sc + CHUNK); /* CHUNK x 576 fp32 */
    const double sm = a->sm_scale, s_l = J->latent_scale;

    for (int64_t hh = 0; hh < nh; hh++) {
        int64_t off = b * a->q_stride_batch + t * a->q_stride_token + (h0 + hh) * a->q_stride_head;
        for (int d = 0; d < 576; d++) qv[hh * 576 + d] = load_q(a, off + d);
        m[hh] = -INFINITY;
        l[hh] = 0.0;
        for (int d = 0; d < 512; d++) acc[hh * 512 + d] = 0.0;
    }
    const int32_t *idx = a->indices + b * a->indices_stride_batch + t * a->indices_stride_token;
    const int64_t end = row_end(J, b);
    int64_t nvalid = 0;
    for (int64_t c0 = J->begin; c0 < end; c0 += CHUNK) {
        int64_t c1 = c0 + CHUNK < end ? c0 + CHUNK : end;
        const int n = decode_chunk(J, idx, c0, c1, kf, NULL);
        for (size_t i = 0; i < (size_t)n * 576; i++) K[i] = kf[i];
        if (s_l != 1.0) /* V and the latent part of K times s_l: exact in double */
            for (int j = 0; j < n; j++)
                for (int d = 0; d < 512; d++) K[(size_t)j * 576 + d] *= s_l;
        if (n == 0) continue;
        nvalid += n;
        for (int64_t hh = 0; hh < nh; hh++) {
            const double *qh = qv + hh * 576;
            double *ah = acc + hh * 512;
            double mx = -INFINITY;
            for (int j = 0; j < n; j++) {
                sc[j] = sm * dot576_d(qh, K + (size_t)j * 576);
                if (sc[j] > mx) mx = sc[j];
            }
            double mnew = m[hh] > mx ? m[hh] : mx;
            if (m[hh] != -INFINITY && m[hh] != mnew) {
                double alpha = exp(m[hh] - mnew);
                l[hh] *= alpha;
                for (int d = 0; d < 512; d++) ah[d] *= alpha;
            }
            for (int j = 0; j < n; j++) {
                double p = exp(sc[j] - mnew);
                l[hh] += p;
                const double *v = K + (size_t)j * 576;
                for (int d = 0; d < 512; d++) ah[d] += p * v[d];
            }
            m[hh] = mnew;
        }
    }
    finalize_d(J, row, h0, nh, m, l, acc, nvalid, 1.0);
}

/* ---- threading -------------------------------------------------------------------------------- */

typedef struct {
    job *J;
    void *scratch;
} worker_arg;

static void *worker(void *p) {
    worker_arg *w = (worker_arg *)p;
    job *J = w->J;
    for (;;) {
        long long u = atomic_fetch_add(&J->next, 1);
        if (u >= J->units) break;
        int64_t row = u / J->groups, g = u % J->groups;
        int64_t h0 = g * J->heads_per_group;
        int64_t h1 = h0 + J->heads_per_group;
        if (h1 > J->a->heads) h1 = J->a->heads;
        if (J->a->mode == MLAKV_ATTN_EXACT)
            exact_unit(J, row, h0, h1, w->scratch);
        else
            engine_unit(J, row, h0, h1, w->scratch);
    }
    return NULL;
}

/* ---- validation ------------------------------------------------------------------------------- */

static mlakv_status check_args(const char *fn, const mlakv_cache *cache,
                               const mlakv_decode_args *a, int partial, int64_t begin,
                               int64_t end, const float *out_partial, const float *lse_partial) {
    MLAKV_CHECK_NOT_NULL(fn, cache);
    MLAKV_CHECK_NOT_NULL(fn, a);
    MLAKV_TRY(mlakv_cache_check(fn, cache));
    if (!partial) begin = 0, end = a->topk;
    if (a->batch < 1 || a->s_q < 1 || a->heads < 1 || a->topk < 1)
        return mlakv_fail(MLAKV_ERR_GEOMETRY,
                          "%s: batch, s_q, heads and topk must be >= 1 (got %lld, %lld, %lld, %lld)",
                          fn, (long long)a->batch, (long long)a->s_q, (long long)a->heads,
                          (long long)a->topk);
    if (a->q == NULL) return mlakv_fail(MLAKV_ERR_NULL_POINTER, "%s: args->q is NULL", fn);
    if (a->indices == NULL)
        return mlakv_fail(MLAKV_ERR_NULL_POINTER, "%s: args->indices is NULL", fn);
    if (!partial && a->out == NULL)
        return mlakv_fail(MLAKV_ERR_NULL_POINTER, "%s: args->out is NULL", fn);
    if (a->q_dtype != MLAKV_F32 && a->q_dtype != MLAKV_BF16)
        return mlakv_fail(MLAKV_ERR_DTYPE, "%s: args->q_dtype %d not supported (F32 or BF16)", fn,
                          (int)a->q_dtype);
    if (!partial && a->out_dtype != MLAKV_F32 && a->out_dtype != MLAKV_BF16)
        return mlakv_fail(MLAKV_ERR_DTYPE, "%s: args->out_dtype %d not supported (F32 or BF16)",
                          fn, (int)a->out_dtype);
    if ((uintptr_t)a->q % mlakv_dtype_bytes(a->q_dtype) != 0 || (uintptr_t)a->indices % 4 != 0 ||
        (!partial && (uintptr_t)a->out % mlakv_dtype_bytes(a->out_dtype) != 0) ||
        (!partial && a->lse && (uintptr_t)a->lse % 4 != 0) ||
        (a->lengths && (uintptr_t)a->lengths % 4 != 0) || (a->sink && (uintptr_t)a->sink % 4 != 0))
        return mlakv_fail(MLAKV_ERR_ALIGNMENT,
                          "%s: q, indices, out, lse, lengths or sink not aligned to its element size",
                          fn);
    if (a->mode != MLAKV_ATTN_EXACT && a->mode != MLAKV_ATTN_ENGINE)
        return mlakv_fail(MLAKV_ERR_INVALID_ARGUMENT, "%s: args->mode %d unknown", fn, (int)a->mode);
    if (a->num_threads < 0)
        return mlakv_fail(MLAKV_ERR_INVALID_ARGUMENT, "%s: args->num_threads %d < 0", fn,
                          a->num_threads);
    if (!isfinite(a->sm_scale))
        return mlakv_fail(MLAKV_ERR_INVALID_ARGUMENT, "%s: args->sm_scale is not finite", fn);

    MLAKV_TRY(mlakv_check_decode_strides(fn, a));
    if (partial) {
        MLAKV_CHECK_NOT_NULL(fn, out_partial);
        MLAKV_CHECK_NOT_NULL(fn, lse_partial);
        if ((uintptr_t)out_partial % 4 != 0 || (uintptr_t)lse_partial % 4 != 0)
            return mlakv_fail(MLAKV_ERR_ALIGNMENT,
                              "%s: out_partial or lse_partial not aligned to 4 bytes", fn);
        /* the indices are read twice (checked here, used by the workers): no output may lie
         * over them or over any other input */
        mlakv_span ins[MLAKV_DECODE_INPUT_SPANS];
        const int n_ins = mlakv_decode_input_spans(cache, a, ins);
        const uint64_t rows = (uint64_t)a->batch * (uint64_t)a->s_q * (uint64_t)a->heads;
        const mlakv_span outs[2] = {
            mlakv_span_of("out_partial", out_partial, rows * MLAKV_V_DIM * sizeof(float)),
            mlakv_span_of("lse_partial", lse_partial, rows * sizeof(float))};
        MLAKV_TRY(mlakv_check_overlap(fn, outs, 2, ins, n_ins));
    } else {
        MLAKV_TRY(mlakv_check_decode_aliasing(fn, cache, a, NULL, 0));
    }

    if (partial && (begin < 0 || begin > end || end > a->topk))
        return mlakv_fail(MLAKV_ERR_INVALID_ARGUMENT,
                          "%s: candidate range [%lld, %lld) not inside [0, topk=%lld)", fn,
                          (long long)begin, (long long)end, (long long)a->topk);
    if (!partial && a->sink) {
        for (int64_t h = 0; h < a->heads; h++)
            if (isnan(a->sink[h]) || a->sink[h] == INFINITY)
                return mlakv_fail(MLAKV_ERR_INVALID_ARGUMENT,
                                  "%s: args->sink[%lld] is NaN or +Inf", fn, (long long)h);
    }
    if (a->lengths) {
        for (int64_t b = 0; b < a->batch; b++)
            if (a->lengths[b] < 0)
                return mlakv_fail(MLAKV_ERR_INVALID_ARGUMENT, "%s: args->lengths[%lld] = %d < 0",
                                  fn, (long long)b, (int)a->lengths[b]);
    }
    const int64_t cap = mlakv_cache_capacity(cache);
    for (int64_t b = 0; b < a->batch; b++) {
        int64_t e = end;
        if (a->lengths && a->lengths[b] < e) e = a->lengths[b];
        for (int64_t t = 0; t < a->s_q; t++) {
            const int32_t *idx =
                a->indices + b * a->indices_stride_batch + t * a->indices_stride_token;
            for (int64_t c = begin; c < e; c++)
                if ((int64_t)idx[c] >= cap)
                    return mlakv_fail(MLAKV_ERR_SLOT_OUT_OF_RANGE,
                                      "%s: indices[%lld, %lld, %lld] = %d >= cache capacity %lld",
                                      fn, (long long)b, (long long)t, (long long)c, (int)idx[c],
                                      (long long)cap);
        }
    }
    return MLAKV_OK;
}

/* ---- driver ----------------------------------------------------------------------------------- */

static mlakv_status run(const char *fn, const mlakv_cache *cache, const mlakv_decode_args *a,
                        int partial, int64_t begin, int64_t end, float *out_partial,
                        float *lse_partial) {
    MLAKV_TRY(check_args(fn, cache, a, partial, begin, end, out_partial, lse_partial));
    job J;
    memset(&J, 0, sizeof J);
    J.a = a;
    J.base = (const uint8_t *)cache->base;
    J.format = cache->format;
    J.traits = mlakv_format_traits_get(cache->format);
    J.record_bytes = (int64_t)mlakv_record_bytes(cache->format);
    J.block_size = cache->block_size;
    J.block_stride = cache->block_stride_bytes ? cache->block_stride_bytes
                                               : cache->block_size * J.record_bytes;
    J.begin = partial ? begin : 0;
    J.end = partial ? end : a->topk;
    J.partial = partial;
    J.latent_scale = cache->latent_scale;
    J.out_f32 = out_partial;
    J.lse_f32 = lse_partial;

    const int64_t rows = a->batch * a->s_q;
    int threads = mlakv_cpu_resolve_threads(a->num_threads);
    int64_t groups = (a->heads + HEAD_GROUP_MAX - 1) / HEAD_GROUP_MAX;
    if (rows * groups < threads) {
        groups = (threads + rows - 1) / rows;
        if (groups > a->heads) groups = a->heads;
    }
    J.heads_per_group = (a->heads + groups - 1) / groups;
    J.groups = (a->heads + J.heads_per_group - 1) / J.heads_per_group;
    J.units = rows * J.groups;
    atomic_init(&J.next, 0);
    if (threads > J.units) threads = (int)J.units;

    const size_t hpg = (size_t)J.heads_per_group;
    /* engine: fp32 tile, q, acc, m, l, scores [hpg x CHUNK]; exact: the same in double with
     * scores [CHUNK] plus a CHUNK x 576 fp32 decode tile. The larger of the two (~1 MB). */
    size_t scratch = (CHUNK * 576 + hpg * 576 + hpg * 512 + 2 * hpg + hpg * CHUNK + CHUNK) *
                         sizeof(double) + CHUNK * 576 * sizeof(float);
    scratch = (scratch + 63) & ~(size_t)63;
    void *mem = malloc(scratch * (size_t)threads);
    if (!mem)
        return mlakv_fail(MLAKV_ERR_OUT_OF_MEMORY, "%s: cannot allocate %zu bytes of scratch", fn,
                          scratch * (size_t)threads);

    /* From here on nothing can fail: a thread that cannot be started leaves its share of the
     * work to the others (the work queue is shared). */
    pthread_t tid[MAX_THREADS];
    worker_arg wa[MAX_THREADS];
    int started = 0;
    for (int i = 0; i < threads; i++) {
        wa[i].J = &J;
        wa[i].scratch = (char *)mem + scratch * (size_t)i;
    }
    for (int i = 1; i < threads; i++) {
        if (pthread_create(&tid[started], NULL, worker, &wa[i]) != 0) break;
        started++;
    }
    worker(&wa[0]);
    for (int i = 0; i < started; i++) pthread_join(tid[i], NULL);
    free(mem);
    return MLAKV_OK;
}

/* a * b for the default strides: INT64_MAX when it overflows (the stride check then reports
 * MLAKV_ERR_OVERFLOW), 0 for a non-positive factor (the geometry check rejects the shape). */
static int64_t stride_mul(int64_t a, int64_t b) {
    if (a <= 0 || b <= 0) return 0;
    return a > INT64_MAX / b ? INT64_MAX : a * b;
}

mlakv_decode_args mlakv_decode_args_default(int64_t batch, int64_t s_q, int64_t heads,
                                            int64_t topk) {
    mlakv_decode_args a;
    memset(&a, 0, sizeof a);
    a.batch = batch;
    a.s_q = s_q;
    a.heads = heads;
    a.topk = topk;
    a.q_dtype = MLAKV_BF16;
    a.q_stride_head = MLAKV_QK_DIM;
    a.q_stride_token = stride_mul(heads, MLAKV_QK_DIM);
    a.q_stride_batch = stride_mul(s_q, a.q_stride_token);
    a.indices_stride_token = topk;
    a.indices_stride_batch = stride_mul(s_q, topk);
    a.sm_scale = (float)(1.0 / sqrt((double)MLAKV_QK_DIM));
    a.out_dtype = MLAKV_BF16;
    a.mode = MLAKV_ATTN_ENGINE;
    a.num_threads = 0;
    return a;
}

mlakv_status mlakv_sparse_decode(const mlakv_cache *cache, const mlakv_decode_args *args) {
    return run("mlakv_sparse_decode", cache, args, 0, 0, 0, NULL, NULL);
}

mlakv_status mlakv_sparse_decode_partial(const mlakv_cache *cache, const mlakv_decode_args *args,
                                         int64_t cand_begin, int64_t cand_end,
                                         float *out_partial, float *lse_partial) {
    return run("mlakv_sparse_decode_partial", cache, args, 1, cand_begin, cand_end, out_partial,
               lse_partial);
}
