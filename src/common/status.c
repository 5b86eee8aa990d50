#include "common/status.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local char last_error[512];

static const char *const status_names[MLAKV_STATUS_COUNT] = {
    "MLAKV_OK",
    "MLAKV_ERR_NULL_POINTER",
    "MLAKV_ERR_INVALID_ARGUMENT",
    "MLAKV_ERR_UNKNOWN_FORMAT",
    "MLAKV_ERR_GEOMETRY",
    "MLAKV_ERR_STRIDE",
    "MLAKV_ERR_OVERFLOW",
    "MLAKV_ERR_ALIGNMENT",
    "MLAKV_ERR_DTYPE",
    "MLAKV_ERR_SLOT_OUT_OF_RANGE",
    "MLAKV_ERR_BUFFER_TOO_SMALL",
    "MLAKV_ERR_OUT_OF_MEMORY",
    "MLAKV_ERR_IO",
    "MLAKV_ERR_NO_CUDA",
    "MLAKV_ERR_UNSUPPORTED_DEVICE",
    "MLAKV_ERR_CUDA",
    "MLAKV_ERR_ALIASING",
};

const char *mlakv_status_name(mlakv_status status) {
    if ((int)status < 0 || status >= MLAKV_STATUS_COUNT) return "unknown status";
    return status_names[status];
}

const char *mlakv_last_error(void) { return last_error; }

const char *mlakv_version(void) { return MLAKV_VERSION_STRING; }

mlakv_status mlakv_fail(mlakv_status status, const char *fmt, ...) {
    char raw[sizeof last_error];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    /* Messages may quote caller strings (a format name, say): every byte outside printable
     * ASCII is written as \xNN (a backslash as \\), so a message is one line of plain text
     * whatever the caller passed; an escape that does not fit is dropped whole. */
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)raw; *p; p++) {
        char esc[4];
        size_t k = 0;
        if (*p >= 0x20 && *p < 0x7F && *p != '\\') {
            esc[k++] = (char)*p;
        } else if (*p == '\\') {
            esc[k++] = '\\', esc[k++] = '\\';
        } else {
            esc[k++] = '\\', esc[k++] = 'x', esc[k++] = hex[*p >> 4], esc[k++] = hex[*p & 15];
        }
        if (o + k >= sizeof last_error) break;
        for (size_t i = 0; i < k; i++) last_error[o++] = esc[i];
    }
    last_error[o] = '\0';
    return status;
}
