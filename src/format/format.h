/* Internal format traits: the public info plus the scalar reference codec of each format.
 * Callers index this table by format; nothing else switches on the format. */
#ifndef MLAKV_FORMAT_FORMAT_H
#define MLAKV_FORMAT_FORMAT_H

#include "mlakv.h"

typedef struct {
    mlakv_format_info info;
    /* latent[512], rope[64] fp32 -> record bytes (all record_bytes written). */
    void (*encode)(const float *latent, const float *rope, unsigned char *record,
                   const mlakv_write_options *options);
    /* record -> latent[512], rope[64] (either may be NULL). */
    void (*decode)(const unsigned char *record, float *latent, float *rope);
} mlakv_format_traits;

/* NULL for an unknown format. */
const mlakv_format_traits *mlakv_format_traits_get(mlakv_format format);

#endif
