/* Internal: pieces of the CPU sparse decoder that tests and tools check or reuse. */
#ifndef MLAKV_CPU_ATTENTION_H
#define MLAKV_CPU_ATTENTION_H

#include <stdint.h>

#include "mlakv.h"

/* De-quantize one record into k[576] = [latent(512) ; rope(64)] as fp32. Table-driven fast
 * path of mlakv_decode_record: the values are bit-identical to it (tests/test_attention.c
 * checks every format). `format` must be valid. */
void mlakv_cpu_dequant_record(mlakv_format format, const void *record, float *k);

/* Number of worker threads a num_threads argument resolves to (0 = all online cores). */
int mlakv_cpu_resolve_threads(int num_threads);

#endif
