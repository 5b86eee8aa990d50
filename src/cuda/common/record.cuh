/* Record layouts for device code, from the one layout source (src/format/records.h): sizes and
 * field offsets by format index (the mlakv_format order: 0 fp8_ds_mla, 1 nvfp4_ds_mla,
 * 2 nvfp4_fp8_rope, 3 nvfp4_fp8_rope_token_scale). Kernels take FMT as a template argument and
 * read every byte position from here. */
#ifndef MLAKV_CUDA_COMMON_RECORD_CUH
#define MLAKV_CUDA_COMMON_RECORD_CUH

#include "format/records.h"

namespace mlakv::cuda {

template <int FMT>
struct RecordTraits;

/* fp8_ds_mla: E4M3 latent, 4 fp32 tile scales, bf16 RoPE */
template <>
struct RecordTraits<0> {
    typedef mlakv_rec_fp8_ds_mla rec;
    static constexpr int bytes = (int)sizeof(rec);
    static constexpr int scale_off = (int)offsetof(rec, tile_scale);
    static constexpr int rope_off = (int)offsetof(rec, rope);
};

/* nvfp4_ds_mla: E2M1 latent, E4M3 group scales, bf16 RoPE */
template <>
struct RecordTraits<1> {
    typedef mlakv_rec_nvfp4_ds_mla rec;
    static constexpr int bytes = (int)sizeof(rec);
    static constexpr int scale_off = (int)offsetof(rec, group_scale);
    static constexpr int rope_off = (int)offsetof(rec, rope);
};

/* the 368-B records: E2M1 latent, E4M3 group scales, fp32 RoPE scale, fp32 token scale
 * (two-level only), E4M3 RoPE */
template <>
struct RecordTraits<2> {
    typedef mlakv_rec_nvfp4_fp8_rope rec;
    static constexpr int bytes = (int)sizeof(rec);
    static constexpr int scale_off = (int)offsetof(rec, group_scale);
    static constexpr int rope_scale_off = (int)offsetof(rec, rope_scale);
    static constexpr int token_scale_off = (int)offsetof(rec, token_scale);
    static constexpr int rope_off = (int)offsetof(rec, rope);
};
template <>
struct RecordTraits<3> : RecordTraits<2> {};

/* The NVFP4 records share the latent, group-scale and RoPE positions the kernels rely on. */
static_assert(RecordTraits<1>::scale_off == RecordTraits<2>::scale_off &&
                  RecordTraits<1>::rope_off == RecordTraits<2>::rope_off,
              "NVFP4 records: group scales and RoPE at the same offsets");
static_assert(RecordTraits<2>::rope_scale_off + 16 == RecordTraits<2>::rope_off &&
                  RecordTraits<2>::token_scale_off == RecordTraits<2>::rope_scale_off + 4,
              "368-B records: one 16-byte load at rope_scale_off holds the RoPE scale (word 0) "
              "and the token scale (word 1)");

} // namespace mlakv::cuda

#endif
