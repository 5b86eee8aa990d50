/* Synthetic MLA data: see synth.h. */
#include "synth.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>


/* One post-norm latent row from the layer's (unscaled or scaled) gains. */
static void latent_row(const float *gain, const float *bias, synth_rng *r, float *x) {
    double z[512], ss = 0;
    for (int d = 0; d < 512; d++) {
        z[d] = synth_normal(r) + bias[d];
        ss += z[d] * z[d];
    }
    double inv = 1.0 / sqrt(ss / 512 + 1e-6);
    for (int d = 0; d < 512; d++) x[d] = (float)(gain[d] * z[d] * inv);
}

void synth_layer_init(synth_layer *L, uint64_t seed, double max_abs) {
    synth_rng r;
    synth_seed(&r, seed);
    memset(L, 0, sizeof *L);
    L->max_abs = max_abs;
    for (int d = 0; d < 512; d++) {
        L->gain[d] = (float)exp(0.5 * synth_normal(&r)); /* log-normal: heavy right tail */
        L->bias[d] = (float)(0.3 * synth_normal(&r));
    }
    for (int i = 0; i < SYNTH_OUTLIER_CHANNELS; i++) { /* a few outlier channels */
        int d = (int)synth_range(&r, 512);
        L->outlier[i] = d;
        L->gain[d] *= (float)(8.0 + 8.0 * synth_uniform(&r));
        L->bias[d] += (float)(1.0 + synth_uniform(&r));
    }
    for (int i = 0; i < 32; i++) {
        L->rope_gain[i] = (float)(0.4 + 1.2 * synth_uniform(&r));
        L->rope_freq[i] = pow(10000.0, -(double)i / 32.0);
    }
    /* Scale the gains so that max |x| over a 4096-token sample is max_abs. */
    float x[512];
    double m = 0;
    for (int t = 0; t < 4096; t++) {
        latent_row(L->gain, L->bias, &r, x);
        for (int d = 0; d < 512; d++)
            if (fabs(x[d]) > m) m = fabs(x[d]);
    }
    double s = max_abs / m;
    for (int d = 0; d < 512; d++) L->gain[d] = (float)(L->gain[d] * s);
}

void synth_tokens(const synth_layer *L, synth_rng *r, int64_t n, const int64_t *pos,
                  float *latent, float *rope) {
    for (int64_t t = 0; t < n; t++) {
        latent_row(L->gain, L->bias, r, latent + t * 512);
        float *k = rope + t * 64;
        for (int i = 0; i < 32; i++) {
            double a = L->rope_gain[i] * synth_normal(r), b = L->rope_gain[i] * synth_normal(r);
            double th = fmod((double)pos[t] * L->rope_freq[i], 6.283185307179586);
            double c = cos(th), s = sin(th);
            k[2 * i] = (float)(a * c - b * s);
            k[2 * i + 1] = (float)(a * s + b * c);
        }
    }
}

/* One part (n dims at offset off) of synth_query. */
static void part_dir(synth_rng *r, const float *keys, int64_t key_stride, int nkeys,
                     const double *center, const double *weight, int off, int n, double noise,
                     double share, double *q) {
    double g[512], c[512], gn = 0, qn = 0;
    for (int d = 0; d < n; d++) q[d] = 0;
    for (int k = 0; k < nkeys; k++) {
        const float *key = keys + k * key_stride + off;
        double n2 = 0;
        for (int d = 0; d < n; d++) {
            c[d] = ((double)key[d] - (center ? center[off + d] : 0.0)) *
                   (weight ? weight[off + d] : 1.0);
            n2 += c[d] * c[d];
        }
        double w = (0.6 + 0.4 * synth_uniform(r)) / sqrt(n2 > 0 ? n2 : 1);
        for (int d = 0; d < n; d++) q[d] += w * c[d];
    }
    for (int d = 0; d < n; d++) {
        g[d] = synth_normal(r);
        gn += g[d] * g[d];
    }
    gn = sqrt(gn);
    for (int d = 0; d < n; d++) {
        q[d] += noise * g[d] / gn;
        qn += q[d] * q[d];
    }
    qn = sqrt(qn > 0 ? qn : 1);
    for (int d = 0; d < n; d++) q[d] = q[d] / qn * (weight ? weight[off + d] : 1.0);
    /* scale: mean over the chosen keys of q . (key - center) = share */
    double sc = 0;
    for (int k = 0; k < nkeys; k++)
        for (int d = 0; d < n; d++)
            sc += q[d] * ((double)keys[k * key_stride + off + d] - (center ? center[off + d] : 0.0));
    sc /= nkeys > 0 ? nkeys : 1;
    for (int d = 0; d < n; d++) q[d] = sc > 0 ? q[d] * share / sc : 0.0;
}

void synth_query(synth_rng *r, const float *keys, int64_t key_stride, int nkeys,
                 const double *center, const double *weight, double noise, double lat_share,
                 double *q) {
    part_dir(r, keys, key_stride, nkeys, center, weight, 0, 512, noise, lat_share, q);
    part_dir(r, keys, key_stride, nkeys, center, weight, 512, 64, noise, 1.0 - lat_share, q + 512);
}
