/* Seeded, reproducible synthetic MLA data for `mlakv eval`, `mlakv demo` and the benchmarks.
 *
 * Latents look like post-RMSNorm MLA latents: x = gain * z / rms(z), z = N(0, 1) + a small
 * shared bias, with per-channel gains that are log-normal (heavy tail) plus a few outlier
 * channels; the gains of a layer are scaled so that max |x| over a 4096-token sample equals the
 * layer magnitude (0.02 .. 5.2 across GLM-5.2 layers). RoPE keys are per-pair Gaussian
 * vectors rotated by position (pair i at angle pos * 10000^(-i/32)). Queries are built from
 * chosen keys so that attention is peaky: a few relevant keys among the topk carry most of the
 * softmax mass, as sparse-attention indexers pick. Everything is a pure function of the seeds.
 */
#ifndef MLAKV_TOOLS_SYNTH_H
#define MLAKV_TOOLS_SYNTH_H

#include <stdint.h>

#include "rng.h"
#include "format/scalar.h"

/* The shared seeded generator (tests/rng.h) under the tools' names. */
typedef mlakv_rng synth_rng;
static inline void synth_seed(synth_rng *r, uint64_t seed) { mlakv_rng_seed(r, seed); }
static inline uint64_t synth_next(synth_rng *r) { return mlakv_rng_next(r); }
static inline double synth_uniform(synth_rng *r) { return mlakv_rng_uniform(r); } /* [0, 1) */
static inline double synth_normal(synth_rng *r) { return mlakv_rng_normal(r); }   /* N(0, 1) */
static inline int64_t synth_range(synth_rng *r, int64_t n) {                     /* [0, n) */
    return (int64_t)(mlakv_rng_next(r) % (uint64_t)n);
}

#define SYNTH_OUTLIER_CHANNELS 4

typedef struct {
    double max_abs;           /* layer magnitude: target max |latent| */
    float gain[512];          /* per-channel gain (includes the layer scale) */
    float bias[512];          /* shared mean of z before the norm */
    float rope_gain[32];      /* std of k_pe pair i before rotation */
    double rope_freq[32];     /* radians per position of pair i */
    int outlier[SYNTH_OUTLIER_CHANNELS];
} synth_layer;

/* A layer of magnitude max_abs (> 0). Deterministic in (seed, max_abs). */
void synth_layer_init(synth_layer *L, uint64_t seed, double max_abs);

/* n tokens at positions pos[0..n): latent [n, 512] and post-rotary rope [n, 64] (fp32, rows
 * contiguous). Draws from r. */
void synth_tokens(const synth_layer *L, synth_rng *r, int64_t n, const int64_t *pos,
                  float *latent, float *rope);

/* A query q[576] attending to nkeys chosen keys ([latent 512 ; rope 64] rows of key_stride
 * floats), built as a whitened matched filter: with c = (key - center) * weight per dimension
 * (center, weight optional, 576 entries; e.g. the layer's mean key and 1/std - post-norm
 * latents share a large common component, outlier channels above all, that would otherwise
 * decide every score), each part (latent, RoPE) is u * weight where u is the unit direction of
 * sum_k w_k c_k / |c_k| + noise * g (w_k ~ U(0.6, 1), g a random unit vector). The parts are
 * scaled so that q.(key_k - center), averaged over the chosen keys, is lat_share from the
 * latent and 1 - lat_share from the RoPE part; the other keys score about 1/sqrt(dim) of that
 * per part. The caller scales q to the logits it wants. */
void synth_query(synth_rng *r, const float *keys, int64_t key_stride, int nkeys,
                 const double *center, const double *weight, double noise, double lat_share,
                 double *q);


#endif
