/* Internal: the validators the CPU and CUDA paths share now live in core/validate.h; this
 * header forwards to it for code that still includes it. */
#ifndef MLAKV_CPU_CPU_H
#define MLAKV_CPU_CPU_H

#include "core/validate.h"

#endif
