/* Seeded xoshiro256** generator shared by the tests, the synthetic-data tools and the
 * benchmarks: reproducible streams from a 64-bit seed (splitmix64 expands the seed). */
#ifndef MLAKV_TESTS_RNG_H
#define MLAKV_TESTS_RNG_H

#include <math.h>
#include <stdint.h>

typedef struct {
    uint64_t s[4];
} mlakv_rng;

static inline uint64_t mlakv_splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline void mlakv_rng_seed(mlakv_rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = mlakv_splitmix64(&seed);
}

static inline uint64_t mlakv_rng_rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static inline uint64_t mlakv_rng_next(mlakv_rng *r) {
    uint64_t *s = r->s;
    uint64_t result = mlakv_rng_rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = mlakv_rng_rotl(s[3], 45);
    return result;
}

/* [0, 1) with 53 random bits */
static inline double mlakv_rng_uniform(mlakv_rng *r) {
    return (double)(mlakv_rng_next(r) >> 11) * 0x1.0p-53;
}

/* N(0, 1), Box-Muller */
static inline double mlakv_rng_normal(mlakv_rng *r) {
    double u1 = mlakv_rng_uniform(r), u2 = mlakv_rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

#endif
