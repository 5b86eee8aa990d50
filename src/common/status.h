/* Internal: setting the per-thread error message that mlakv_last_error() returns. */
#ifndef MLAKV_COMMON_STATUS_H
#define MLAKV_COMMON_STATUS_H

#include "mlakv.h"

#if defined(__GNUC__)
#define MLAKV_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define MLAKV_PRINTF(a, b)
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Record a failure: formats the message ("function: what is wrong") and returns status. */
mlakv_status mlakv_fail(mlakv_status status, const char *fmt, ...) MLAKV_PRINTF(2, 3);

#ifdef __cplusplus
}
#endif

/* Caller strings quoted in a message are cut at MLAKV_QUOTE_MAX bytes: use
 * "'%.*s%s'", MLAKV_QUOTE_MAX, s, mlakv_quote_tail(s). (mlakv_fail escapes the bytes.) */
#define MLAKV_QUOTE_MAX 48
static inline const char *mlakv_quote_tail(const char *s) {
    for (int i = 0; i <= MLAKV_QUOTE_MAX; i++)
        if (s[i] == '\0') return "";
    return "...";
}

/* Early-return helpers for argument checks. */
#define MLAKV_CHECK_NOT_NULL(fn, p)                                                          \
    do {                                                                                     \
        if ((p) == NULL) return mlakv_fail(MLAKV_ERR_NULL_POINTER, "%s: %s is NULL", fn, #p); \
    } while (0)

#define MLAKV_TRY(expr)                              \
    do {                                             \
        mlakv_status mlakv_try_st_ = (expr);         \
        if (mlakv_try_st_ != MLAKV_OK) return mlakv_try_st_; \
    } while (0)

#endif
