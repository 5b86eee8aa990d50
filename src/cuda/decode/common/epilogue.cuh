/* Output scale and lse of a finished row, shared by every decode kernel. */
#ifndef MLAKV_CUDA_DECODE_COMMON_EPILOGUE_CUH
#define MLAKV_CUDA_DECODE_COMMON_EPILOGUE_CUH

#include <math.h>

#include "cuda/decode/config.h"
#include "cuda/decode/params.h"

namespace mlakv::decode {

/* Output scale and natural-log lse of a finished row (running max m, log2 domain; sum l) of head
 * h written directly (one split): the head's sink folded in; kScaled: the output scale carries
 * the cache's latent scale (p.out_scale). */
template <bool kScaled>
__device__ __forceinline__ void norm_out(const Params &p, int h, float m,
                                         float l, float &so, float &lse) {
    if (p.sink) {
        const float s2 = __ldg(p.sink + h) * kLog2e;
        const float M = fmaxf(m, s2);
        const float e = l > 0.0f ? exp2f(m - M) : 0.0f;
        const float L = l * e + exp2f(s2 - M);
        so = kScaled ? e / L * p.out_scale : e / L;
        lse = (M + log2f(L)) * kLn2;
    } else if (l > 0.0f) {
        so = (kScaled ? p.out_scale : 1.0f) / l;
        lse = (m + log2f(l)) * kLn2;
    } else {
        so = 0.0f;
        lse = -INFINITY;
    }
}

/* The same for an fp32 split partial (O/l, lse without the sink; merged by the combine kernel). */
template <bool kScaled>
__device__ __forceinline__ void norm_part(const Params &p, float m, float l,
                                          float &so, float &lse) {
    so = l > 0.0f ? (kScaled ? p.out_scale : 1.0f) / l : 0.0f;
    lse = l > 0.0f ? (m + log2f(l)) * kLn2 : -INFINITY;
}

} // namespace mlakv::decode

#endif
