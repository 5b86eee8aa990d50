/* The launchers of every decode kernel, one per (kernel family, record format), defined in the
 * families' instantiations/ files; the dispatch table (dispatch.cu) holds them. Each launches
 * its kernel for the plan already in p (head groups, splits); `pairs` is the narrow-head
 * kernel's producer pairs (1 or 2) and is ignored by the others. */
#ifndef MLAKV_CUDA_DECODE_LAUNCHERS_H
#define MLAKV_CUDA_DECODE_LAUNCHERS_H

#include "cuda/decode/params.h"

namespace mlakv::decode {

typedef cudaError_t (*LaunchFn)(const Params *p, int pairs, cudaStream_t s);

namespace mma {
cudaError_t launch_fp8_ds_mla(const Params *p, int pairs, cudaStream_t s);
cudaError_t launch_nvfp4_ds_mla(const Params *p, int pairs, cudaStream_t s);
cudaError_t launch_nvfp4_fp8_rope(const Params *p, int pairs, cudaStream_t s);
cudaError_t launch_nvfp4_fp8_rope_token_scale(const Params *p, int pairs, cudaStream_t s);
} // namespace mma

namespace fp8_wgmma {
cudaError_t launch_fp8_ds_mla(const Params *p, int pairs, cudaStream_t s);
} // namespace fp8_wgmma

namespace wide {
cudaError_t launch_nvfp4_ds_mla(const Params *p, int pairs, cudaStream_t s);
cudaError_t launch_nvfp4_fp8_rope(const Params *p, int pairs, cudaStream_t s);
cudaError_t launch_nvfp4_fp8_rope_token_scale(const Params *p, int pairs, cudaStream_t s);
} // namespace wide

namespace narrow {
cudaError_t launch_nvfp4_ds_mla(const Params *p, int pairs, cudaStream_t s);
cudaError_t launch_nvfp4_fp8_rope(const Params *p, int pairs, cudaStream_t s);
cudaError_t launch_nvfp4_fp8_rope_token_scale(const Params *p, int pairs, cudaStream_t s);
} // namespace narrow

/* Split-KV merge of the partials into out/lse (combine/combine.cu): by_rows selects the
 * one-warp-per-row kernel (up to kCombineRowSplits splits), else the quarter kernels. */
constexpr int kCombineRowSplits = 8;
cudaError_t launch_combine(const Params *p, bool by_rows, cudaStream_t s);

/* Adds the number of active indices >= capacity to *count (invalid_indices.cu); launched
 * before the decode kernel when the caller passes mlakv_decode_args.invalid_index_count. */
cudaError_t launch_count_invalid(const Params *p, unsigned long long *count, cudaStream_t s);

} // namespace mlakv::decode

#endif
