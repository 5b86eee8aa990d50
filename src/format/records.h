/* Record layouts as packed C structs, one per format, with their sizes and field offsets
 * pinned by static asserts: a layout change cannot compile silently. Included by C and CUDA
 * code alike. The authoritative description is docs/FORMAT.md. */
#ifndef MLAKV_FORMAT_RECORDS_H
#define MLAKV_FORMAT_RECORDS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
#define MLAKV_STATIC_ASSERT(c, m) static_assert(c, m)
#else
#define MLAKV_STATIC_ASSERT(c, m) _Static_assert(c, m)
#endif

/* fp8_ds_mla: 656 B */
typedef struct {
    uint8_t latent[512];     /* E4M3, element i at byte i */
    float tile_scale[4];     /* tile t covers latent [128t, 128t+128) */
    uint16_t rope[64];       /* bf16 bits, raw copy of k_pe */
} mlakv_rec_fp8_ds_mla;
MLAKV_STATIC_ASSERT(sizeof(mlakv_rec_fp8_ds_mla) == 656, "fp8_ds_mla record is 656 B");
MLAKV_STATIC_ASSERT(offsetof(mlakv_rec_fp8_ds_mla, tile_scale) == 512, "fp8 scales at 512");
MLAKV_STATIC_ASSERT(offsetof(mlakv_rec_fp8_ds_mla, rope) == 528, "fp8 rope at 528");

/* nvfp4_ds_mla: 432 B */
typedef struct {
    uint8_t latent[256];     /* E2M1 x2: element d in byte d/2, even d = low nibble */
    uint8_t group_scale[32]; /* E4M3, byte g scales latent [16g, 16g+16) */
    uint8_t zero[16];
    uint16_t rope[64];       /* bf16 bits */
} mlakv_rec_nvfp4_ds_mla;
MLAKV_STATIC_ASSERT(sizeof(mlakv_rec_nvfp4_ds_mla) == 432, "nvfp4_ds_mla record is 432 B");
MLAKV_STATIC_ASSERT(offsetof(mlakv_rec_nvfp4_ds_mla, group_scale) == 256, "scales at 256");
MLAKV_STATIC_ASSERT(offsetof(mlakv_rec_nvfp4_ds_mla, zero) == 288, "zero pad at 288");
MLAKV_STATIC_ASSERT(offsetof(mlakv_rec_nvfp4_ds_mla, rope) == 304, "rope at 304");

/* nvfp4_fp8_rope (static) and nvfp4_fp8_rope_token_scale (two-level): 368 B */
typedef struct {
    uint8_t latent[256];     /* E2M1 x2 */
    uint8_t group_scale[32]; /* E4M3 */
    float rope_scale;        /* fp32 */
    float token_scale;       /* fp32 s_t (two-level); zero in the static format */
    uint8_t zero[8];
    uint8_t rope[64];        /* E4M3, value = e4m3 * rope_scale */
} mlakv_rec_nvfp4_fp8_rope;
MLAKV_STATIC_ASSERT(sizeof(mlakv_rec_nvfp4_fp8_rope) == 368, "nvfp4_fp8_rope record is 368 B");
MLAKV_STATIC_ASSERT(offsetof(mlakv_rec_nvfp4_fp8_rope, rope_scale) == 288, "rope scale at 288");
MLAKV_STATIC_ASSERT(offsetof(mlakv_rec_nvfp4_fp8_rope, token_scale) == 292, "token scale at 292");
MLAKV_STATIC_ASSERT(offsetof(mlakv_rec_nvfp4_fp8_rope, rope) == 304, "fp8 rope at 304");

/* Recipe constants from FORMATS.md (fp32 bit patterns). */
#define MLAKV_INV6_BITS 0x3E2AAAABu    /* fp32 nearest to 1/6 */
#define MLAKV_INV448_BITS 0x3B124925u  /* fp32 nearest to 1/448 */
#define MLAKV_INV2688_BITS 0x39C30C31u /* fp32 nearest to 1/2688 = 1/(6*448) */
/* Two-level guard: a token whose s_t is below 2^-116 is stored as zero (s_t 0, latent bytes
 * and scales 0); below it 1/s_t, or (1/d) * (1/s_t) for a group with a tiny scale, overflows. */
#define MLAKV_TWO_LEVEL_MIN_ST_BITS 0x05800000u /* 2^-116 */

#endif
