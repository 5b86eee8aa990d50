/* The block divider of the CUDA decode (common/divider.h) against plain division: edge divisors
 * (1, powers of two and their neighbours, 2^31 - 1, above 2^31) and random ones; for each, the
 * indices at both ends of [0, 2^31), around multiples of the divisor, and random ones. */
#include "common/divider.h"
#include "testutil.h"

static uint32_t want_div(int64_t d, uint32_t n) {
    return d > 0x7FFFFFFF ? 0u : (uint32_t)(n / (uint64_t)d);
}

int main(void) {
    tu_rng rng;
    tu_rng_init(&rng, tu_seed("test_divider"));
    int64_t ds[100];
    int nd = 0;
    ds[nd++] = 1;
    ds[nd++] = 61;
    ds[nd++] = 0x7FFFFFFE;
    ds[nd++] = 0x7FFFFFFF;
    ds[nd++] = 0x80000000ll;
    ds[nd++] = 1ll << 40;
    for (int l = 1; l <= 30; l++) {
        ds[nd++] = (1ll << l) - 1;
        ds[nd++] = 1ll << l;
        ds[nd++] = (1ll << l) + 1;
    }
    while (nd < 100) ds[nd++] = tu_range(&rng, 1, 0x80000000ll);
    long total = 0;
    for (int i = 0; i < nd; i++) {
        const int64_t d = ds[i];
        const mlakv_divider v = mlakv_divider_make(d);
        long bad = 0;
        uint32_t first_bad = 0;
        const uint64_t step = d > 0x7FFFFFFF ? 1 : (uint64_t)d;
        for (uint32_t k = 0; k < 3000; k++) {
            const uint64_t near = (k / 3) * step + (k % 3) - 1; /* m d - 1, m d, m d + 1 */
            const uint32_t n[3] = {k, 0x7FFFFFFFu - k, (uint32_t)(near & 0x7FFFFFFFu)};
            for (int c = 0; c < 3; c++)
                if (mlakv_divider_apply(v, n[c]) != want_div(d, n[c])) first_bad = n[c], bad++;
        }
        for (int k = 0; k < 30000; k++) {
            const uint32_t n = (uint32_t)(tu_next(&rng) & 0x7FFFFFFFu);
            if (mlakv_divider_apply(v, n) != want_div(d, n)) first_bad = n, bad++;
        }
        total += 3 * 3000 + 30000;
        CHECKF(bad == 0, "d=%lld: %ld wrong quotients (e.g. n=%u)", (long long)d, bad, first_bad);
    }
    printf("%ld quotients over %d divisors\n", total, nd);
    return tu_finish();
}
