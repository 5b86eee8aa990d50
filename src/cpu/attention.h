/* Internal: pieces of the CPU sparse decoder that tests and tools check or reuse. */
#ifndef MLAKV_CPU_ATTENTION_H
#define MLAKV_CPU_ATTENTION_H

#include <stdint.h>

#include "mlakv.h"

/* Number of worker threads a num_threads argument resolves to (0 = all online cores). */
int mlakv_cpu_resolve_threads(int num_threads);

#endif
