#include "testutil.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

long tu_passed, tu_failed;

int tu_check(int ok, const char *file, int line, const char *expr, const char *fmt, ...) {
    if (ok) {
        tu_passed++;
        return 1;
    }
    tu_failed++;
    if (tu_failed <= 20) {
        fprintf(stderr, "FAIL %s:%d: %s", file, line, expr);
        if (fmt) {
            va_list ap;
            va_start(ap, fmt);
            fputs(": ", stderr);
            vfprintf(stderr, fmt, ap);
            va_end(ap);
        }
        fputc('\n', stderr);
    }
    return 0;
}

uint64_t tu_seed(const char *test_name) {
    const char *env = getenv("MLAKV_SEED");
    uint64_t seed;
    if (env && *env) {
        seed = strtoull(env, NULL, 0);
    } else {
        struct timespec ts;
        timespec_get(&ts, TIME_UTC);
        seed = (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec;
    }
    printf("%s: seed %llu (set MLAKV_SEED to replay)\n", test_name, (unsigned long long)seed);
    return seed;
}

static uint64_t splitmix(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void tu_rng_init(tu_rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = splitmix(&seed);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t tu_next(tu_rng *r) {
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double tu_uniform(tu_rng *r) { return (double)(tu_next(r) >> 11) * 0x1.0p-53; }

double tu_normal(tu_rng *r) {
    double u1 = tu_uniform(r), u2 = tu_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

int64_t tu_range(tu_rng *r, int64_t lo, int64_t hi) {
    return lo + (int64_t)(tu_next(r) % (uint64_t)(hi - lo));
}

uint32_t tu_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

float tu_bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

int tu_finish(void) {
    printf("%ld passed, %ld failed\n", tu_passed, tu_failed);
    return tu_failed ? 1 : 0;
}
