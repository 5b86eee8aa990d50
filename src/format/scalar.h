/* Internal helpers next to the public scalar codecs. */
#ifndef MLAKV_FORMAT_SCALAR_H
#define MLAKV_FORMAT_SCALAR_H

#include "mlakv.h"

/* Element i of a tensor of `dtype` as fp32 (exact for bf16/fp16). */
float mlakv_load_as_f32(const void *base, mlakv_dtype dtype, int64_t i);

#endif
