/* Small test harness shared by the C tests: checks that count, a seeded RNG, poison helpers.
 * Every test prints its seed (set MLAKV_SEED to replay) and ends with "N passed, N failed". */
#ifndef MLAKV_TESTUTIL_H
#define MLAKV_TESTUTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "rng.h"
#include "mlakv.h"

#define TEST_SKIP 77 /* exit code ctest treats as skipped */

extern long tu_passed, tu_failed;

/* Count a check; print the location and message on failure (first 20 failures per test). */
int tu_check(int ok, const char *file, int line, const char *expr, const char *fmt, ...);
#define CHECK(cond) tu_check(!!(cond), __FILE__, __LINE__, #cond, NULL)
#define CHECKF(cond, ...) tu_check(!!(cond), __FILE__, __LINE__, #cond, __VA_ARGS__)
/* A call that must return status `want`. */
#define CHECK_STATUS(call, want)                                                          \
    do {                                                                                  \
        mlakv_status tu_st_ = (call);                                                     \
        tu_check(tu_st_ == (want), __FILE__, __LINE__, #call,                             \
                 "got %s (%s), want %s", mlakv_status_name(tu_st_), mlakv_last_error(), \
                 mlakv_status_name(want));                                                \
    } while (0)
#define CHECK_OK(call) CHECK_STATUS(call, MLAKV_OK)

/* Seed from MLAKV_SEED or the clock; printed so a failure can be replayed. */
uint64_t tu_seed(const char *test_name);
/* The shared seeded generator (tests/rng.h) under the tests' names. */
typedef mlakv_rng tu_rng;
static inline void tu_rng_init(tu_rng *r, uint64_t seed) { mlakv_rng_seed(r, seed); }
static inline uint64_t tu_next(tu_rng *r) { return mlakv_rng_next(r); }
static inline double tu_uniform(tu_rng *r) { return mlakv_rng_uniform(r); } /* [0, 1) */
static inline double tu_normal(tu_rng *r) { return mlakv_rng_normal(r); }   /* N(0, 1) */
int64_t tu_range(tu_rng *r, int64_t lo, int64_t hi); /* [lo, hi) */

/* Bit casts */
uint32_t tu_f32_bits(float f);
float tu_bits_f32(uint32_t u);

/* Largest per-row relative L2 error ||got - want|| / ||want|| over `rows` rows of `dim` bf16
 * values each, and the largest |got_lse - want_lse| over the rows (lse may be NULL). */
void tu_worst_rows_bf16(const uint16_t *got, const uint16_t *want, const float *got_lse,
                        const float *want_lse, int64_t rows, int dim, double *worst_rel_l2,
                        double *worst_lse);

/* Print the summary line and return the process exit code. */
int tu_finish(void);

#endif
