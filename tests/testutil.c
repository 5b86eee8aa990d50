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

void tu_worst_rows_bf16(const uint16_t *got, const uint16_t *want, const float *got_lse,
                        const float *want_lse, int64_t rows, int dim, double *worst_rel_l2,
                        double *worst_lse) {
    double worst = 0, wl = 0;
    for (int64_t r = 0; r < rows; r++) {
        double num = 0, den = 0;
        for (int d = 0; d < dim; d++) {
            const double x = mlakv_bf16_to_f32(got[r * dim + d]);
            const double y = mlakv_bf16_to_f32(want[r * dim + d]);
            num += (x - y) * (x - y), den += y * y;
        }
        worst = fmax(worst, sqrt(num / fmax(den, 1e-30)));
        if (got_lse && want_lse) wl = fmax(wl, fabs((double)got_lse[r] - want_lse[r]));
    }
    *worst_rel_l2 = worst;
    if (worst_lse) *worst_lse = wl;
}
