/*
 * mlakv.h - the public API of mlakv.
 *
 * mlakv stores the KV cache of DeepSeek-style sparse MLA attention (DeepSeek-V3.2, GLM-5.x) in
 * byte-compatible 4-bit NVFP4 records (and the 656-B fp8 baseline), writes them, reads them and
 * attends over them, on the CPU and on NVIDIA GPUs from sm_80 (Hopper first).
 *
 * Read it top to bottom: status codes, formats, scalar codecs, the paged cache, the writer and
 * reader, sparse decode attention, the capacity planner, then the CUDA entry points.
 *
 * Conventions
 *  - Every fallible call returns mlakv_status; MLAKV_OK is 0. mlakv_last_error() gives a
 *    readable message about the most recent failure on the calling thread.
 *  - A failed call changes no output byte. Nothing aborts, nothing writes outside the buffers it
 *    was given. The writers and the CUDA entry points never allocate; the CPU decoder allocates
 *    per-call scratch (see mlakv_sparse_decode).
 *  - Overlapping buffers: an output may not overlap an input or another output. mlakv_write,
 *    mlakv_read, mlakv_sparse_decode(_partial), mlakv_merge_partials, mlakv_decode_record (its
 *    two outputs) and the CUDA entry points check the byte ranges (pointer values only) and fail
 *    with MLAKV_ERR_ALIASING before writing anything. A buffer counts from its first to its
 *    last byte (decode's q whole, gaps included), except that a padded cache counts only its
 *    blocks' records and the writers' row-strided inputs only their rows. mlakv_encode_record
 *    and mlakv_decode_record are correct when the record overlaps the values.
 *  - Typed pointers (float, int32, int64, bf16 tensors) must be aligned to their element size:
 *    MLAKV_ERR_ALIGNMENT otherwise (records and caches are bytes; the CUDA paths need more).
 *  - Strides are in elements (not bytes) unless the name says _bytes.
 *  - No global state besides the per-thread error message and read-only caches (lookup tables,
 *    the per-device capability check).
 */
#ifndef MLAKV_H
#define MLAKV_H

#include <stddef.h>
#include <stdint.h>

/* MLAKV_API marks the functions libmlakv exports: the library is built with
 * -fvisibility=hidden, so everything else in it stays internal. */
#if defined(__GNUC__) || defined(__clang__)
#define MLAKV_API __attribute__((visibility("default")))
#else
#define MLAKV_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define MLAKV_VERSION_MAJOR 0
#define MLAKV_VERSION_MINOR 2
#define MLAKV_VERSION_PATCH 0
#define MLAKV_VERSION_STRING "0.2.0"

/* MLA geometry shared by DeepSeek-V3.2 and GLM-5.x. */
#define MLAKV_LATENT_DIM 512 /* "NoPE" latent: K's first 512 dims and all of V */
#define MLAKV_ROPE_DIM 64    /* post-rotary key part, K only */
#define MLAKV_QK_DIM 576     /* MLAKV_LATENT_DIM + MLAKV_ROPE_DIM */
#define MLAKV_V_DIM 512

/* ------------------------------------------------------------------------------------------ */
/* Status codes                                                                                */
/* ------------------------------------------------------------------------------------------ */

typedef enum {
    MLAKV_OK = 0,
    MLAKV_ERR_NULL_POINTER,       /* a required pointer is NULL */
    MLAKV_ERR_INVALID_ARGUMENT,   /* a value outside its documented range */
    MLAKV_ERR_UNKNOWN_FORMAT,     /* format enum or name not known */
    MLAKV_ERR_GEOMETRY,           /* zero/negative blocks, block size, heads, topk, ... */
    MLAKV_ERR_STRIDE,             /* a stride too small (rows overlap) or block stride < block */
    MLAKV_ERR_OVERFLOW,           /* a size or offset does not fit in 64 bits / size_t */
    MLAKV_ERR_ALIGNMENT,          /* a pointer or stride not aligned as the path requires */
    MLAKV_ERR_DTYPE,              /* dtype not supported by this entry point */
    MLAKV_ERR_SLOT_OUT_OF_RANGE,  /* a slot or index >= cache capacity */
    MLAKV_ERR_BUFFER_TOO_SMALL,   /* caller buffer (workspace, output) too small */
    MLAKV_ERR_OUT_OF_MEMORY,      /* a host allocation failed (CPU decode scratch, tools) */
    MLAKV_ERR_IO,                 /* file I/O failed (tools only) */
    MLAKV_ERR_NO_CUDA,            /* library built without CUDA, or no usable driver/GPU */
    MLAKV_ERR_UNSUPPORTED_DEVICE, /* the GPU's compute capability has no code in this build */
    MLAKV_ERR_CUDA,               /* a CUDA runtime call failed; the message names it */
    MLAKV_ERR_ALIASING,           /* an output buffer overlaps an input or another output */
    MLAKV_STATUS_COUNT
} mlakv_status;

/* Short constant name of a status ("MLAKV_ERR_STRIDE"); "unknown status" for others. */
MLAKV_API const char *mlakv_status_name(mlakv_status status);

/* Readable message for the most recent failure on this thread ("" if none yet).
 * Valid until the next mlakv call on the same thread. */
MLAKV_API const char *mlakv_last_error(void);

/* Version of the linked library, e.g. "0.2.0". */
MLAKV_API const char *mlakv_version(void);

/* ------------------------------------------------------------------------------------------ */
/* Record formats                                                                              */
/* ------------------------------------------------------------------------------------------ */

/* One record per token per layer. Layouts: docs/FORMAT.md. */
typedef enum {
    MLAKV_FP8_DS_MLA = 0,                 /* 656 B: E4M3 latent, 4 fp32 tile scales, bf16 RoPE */
    MLAKV_NVFP4_DS_MLA = 1,               /* 432 B: E2M1 latent, E4M3 group scales, bf16 RoPE */
    MLAKV_NVFP4_FP8_ROPE = 2,             /* 368 B: as 432 B with scaled E4M3 RoPE (static) */
    MLAKV_NVFP4_FP8_ROPE_TOKEN_SCALE = 3, /* 368 B: two-level, fp32 per-token latent scale */
    MLAKV_FORMAT_COUNT
} mlakv_format;

/* Everything a caller needs to know about a format; offsets in bytes within a record.
 * A field that a format does not have has offset MLAKV_NO_FIELD and size 0. */
#define MLAKV_NO_FIELD ((size_t)-1)
typedef struct {
    const char *name;            /* "fp8_ds_mla", "nvfp4_ds_mla", ... */
    size_t record_bytes;         /* 656, 432, 368, 368 */
    size_t latent_offset;        /* packed latent payload */
    size_t latent_bytes;         /* 512 (E4M3) or 256 (E2M1) */
    size_t latent_scale_offset;  /* latent scales */
    size_t latent_scale_count;   /* 4 (fp32 tiles) or 32 (E4M3 groups) */
    size_t latent_scale_bytes;   /* bytes per scale: 4 or 1 */
    size_t latent_group_size;    /* latent elements per scale: 128 or 16 */
    size_t token_scale_offset;   /* fp32 per-token scale (two-level format only) */
    size_t rope_scale_offset;    /* fp32 RoPE scale (fp8-RoPE formats only) */
    size_t rope_offset;          /* RoPE payload */
    size_t rope_bytes;           /* 128 (bf16) or 64 (E4M3) */
    double bits_per_latent_value;/* latent payload + scales, in bits per latent element */
} mlakv_format_info;

/* Traits of a format; NULL for an unknown value. */
MLAKV_API const mlakv_format_info *mlakv_format_get(mlakv_format format);

/* Record size in bytes; 0 for an unknown format. */
MLAKV_API size_t mlakv_record_bytes(mlakv_format format);

/* Format by name (the strings above). MLAKV_ERR_UNKNOWN_FORMAT if no format has that name. */
MLAKV_API mlakv_status mlakv_format_from_name(const char *name, mlakv_format *format);

/* ------------------------------------------------------------------------------------------ */
/* Scalar codecs (the oracle every fast path is tested against)                                */
/* ------------------------------------------------------------------------------------------ */

/* fp32 -> E4M3 (OCP fp8 e4m3fn): round-to-nearest-even including subnormals, saturating:
 * |x| > 448 and +-Inf -> +-448 (0x7E / 0xFE); NaN -> 0x7F. */
MLAKV_API uint8_t mlakv_e4m3_encode(float x);
/* E4M3 byte -> fp32 (exact). 0x7F and 0xFF decode to NaN. */
MLAKV_API float mlakv_e4m3_decode(uint8_t byte);

/* fp32 -> E2M1 nibble (bit 3 sign, bits 2:0 magnitude code): round-to-nearest-even, saturating
 * at +-6 (Inf too). NaN -> 0 (+0). A value that rounds to zero keeps its sign bit (0x8 = -0). */
MLAKV_API uint8_t mlakv_e2m1_encode(float x);
/* E2M1 nibble (low 4 bits used) -> fp32: {0, 0.5, 1, 1.5, 2, 3, 4, 6} with sign. */
MLAKV_API float mlakv_e2m1_decode(uint8_t nibble);

/* bf16 / fp16 bit patterns <-> fp32. The encoders round to nearest even; NaN stays NaN. */
MLAKV_API float mlakv_bf16_to_f32(uint16_t bits);
MLAKV_API uint16_t mlakv_f32_to_bf16(float x);
MLAKV_API float mlakv_f16_to_f32(uint16_t bits);
MLAKV_API uint16_t mlakv_f32_to_f16(float x);

/* Element types of caller tensors. */
typedef enum { MLAKV_F32 = 0, MLAKV_BF16 = 1, MLAKV_F16 = 2, MLAKV_DTYPE_COUNT } mlakv_dtype;

/* Bytes per element; 0 for an unknown dtype. */
MLAKV_API size_t mlakv_dtype_bytes(mlakv_dtype dtype);

/* ------------------------------------------------------------------------------------------ */
/* Record encode / decode (one token)                                                          */
/* ------------------------------------------------------------------------------------------ */

/* Scale recipe of the fp8_ds_mla writer (other formats have exactly one recipe). */
typedef enum {
    MLAKV_FP8_SCALE_VLLM = 0, /* fp32 max(amax/448, FLT_MIN): vLLM's writer (default) */
    MLAKV_FP8_SCALE_POW2 = 1  /* amax/448 clamped below at 1e-4, rounded up to a power of two
                                 (so >= 2^-13): FlashMLA's test recipe */
} mlakv_fp8_scale_recipe;

/* How the NVFP4 writers (all three NVFP4 formats) pick each 16-value group's E4M3 scale byte.
 * Both give valid records that every reader reads unchanged. */
typedef enum {
    MLAKV_NVFP4_ENCODER_STANDARD = 0, /* the recipe of docs/FORMAT.md: E4M3(amax / 6) (default) */
    MLAKV_NVFP4_ENCODER_ACCURATE = 1  /* the byte among the standard byte b0 and its neighbours
                                         b0 - 1 and b0 + 1 (inside 0x00..0x7E) whose group has
                                         the smallest squared reconstruction error; ties go to the
                                         lowest byte. Groups holding a NaN or Inf, or with
                                         amax >= 2^60, and two-level tokens stored as zero keep
                                         the standard byte. The error and the nibbles: see
                                         docs/FORMAT.md ("Accurate encoder"). */
} mlakv_nvfp4_encoder;

typedef struct {
    mlakv_fp8_scale_recipe fp8_scale_recipe;
    mlakv_nvfp4_encoder nvfp4_encoder;
} mlakv_write_options;

/* Default options (vLLM recipe, standard NVFP4 encoder). NULL options mean the same
 * everywhere. */
MLAKV_API mlakv_write_options mlakv_write_options_default(void);

/* Encode one token: latent[512], rope[64] (fp32) -> record[record_bytes]. Deterministic. */
MLAKV_API mlakv_status mlakv_encode_record(mlakv_format format, const float *latent,
                                           const float *rope, void *record,
                                           const mlakv_write_options *options);

/* Decode one record -> latent[512], rope[64] (fp32, exact de-quantized values). Either output
 * may be NULL when not wanted. */
MLAKV_API mlakv_status mlakv_decode_record(mlakv_format format, const void *record, float *latent,
                                           float *rope);

/* ------------------------------------------------------------------------------------------ */
/* The paged cache                                                                             */
/* ------------------------------------------------------------------------------------------ */

/* A paged cache of num_blocks x block_size records. Flat slot s lives at
 *   base + (s / block_size) * block_stride_bytes + (s % block_size) * record_bytes.
 * base may be host or device memory; the entry point says which it expects. */
typedef struct {
    void *base;
    mlakv_format format;
    int64_t num_blocks;
    int64_t block_size;
    int64_t block_stride_bytes; /* >= block_size * record_bytes */
    float latent_scale;         /* s_l, the layer's static outer latent scale (see below) */
} mlakv_cache;

/* The latent scale s_l (one cache holds one layer). The static NVFP4 records (nvfp4_ds_mla,
 * nvfp4_fp8_rope) have an implicit outer scale of 1.0, which leaves quiet layers (max |latent|
 * near 0.1 or below) with E4M3-subnormal group scales. With s_l the writers store
 * kv_c / s_l instead (the fp32 quotient rounded to bf16, then the unchanged recipe: the bytes
 * stay valid records) and the readers multiply every de-quantized latent value by s_l (K and
 * V; never the RoPE). s_l = max |latent| over a calibration run / 2688 (mlakv_latent_scale).
 * 1.0 (what mlakv_cache_init sets) writes and reads exactly the unscaled records. s_l must be
 * finite and > 0; fp8_ds_mla and the two-level format (which carries its own per-token scale)
 * accept only 1.0. A descriptor filled by hand must set it too (0 fails validation). */

/* Fill a descriptor after validating it; latent_scale is set to 1.0. block_stride_bytes 0
 * means dense (block_size * record_bytes). Fails on a NULL base, unknown format, num_blocks or
 * block_size < 1, a too small stride, or a total size that overflows. */
MLAKV_API mlakv_status mlakv_cache_init(mlakv_cache *cache, void *base, mlakv_format format,
                                        int64_t num_blocks, int64_t block_size,
                                        int64_t block_stride_bytes);

/* Bytes a cache of this geometry spans (what to allocate). stride 0 means dense. */
MLAKV_API mlakv_status mlakv_cache_bytes(mlakv_format format, int64_t num_blocks,
                                         int64_t block_size, int64_t block_stride_bytes,
                                         size_t *bytes);

/* Validate a descriptor filled by hand (same checks as mlakv_cache_init, plus latent_scale). */
MLAKV_API mlakv_status mlakv_cache_validate(const mlakv_cache *cache);

/* Set the latent scale s_l of a valid descriptor. MLAKV_ERR_INVALID_ARGUMENT (descriptor
 * unchanged) for a value that is not finite and > 0, or not 1.0 for fp8_ds_mla and
 * nvfp4_fp8_rope_token_scale. */
MLAKV_API mlakv_status mlakv_cache_set_latent_scale(mlakv_cache *cache, float latent_scale);

/* ---- Calibration of s_l ---- */
#define MLAKV_LATENT_SCALE_DENOMINATOR 2688.0f /* 6 * 448: the E2M1 max times the E4M3 max */

/* max |x| over n latent rows [n, 512] of `dtype` (row stride in elements, >= 512), folded into
 * the incoming *max_abs: set *max_abs = 0 before the first batch of a layer and call again for
 * more rows of it. n == 0 leaves it unchanged. A NaN or Inf sample fails with
 * MLAKV_ERR_INVALID_ARGUMENT (*max_abs unchanged), as does a negative or non-finite *max_abs. */
MLAKV_API mlakv_status mlakv_latent_max_abs(int64_t n, const void *latent, int64_t row_stride,
                                            mlakv_dtype dtype, float *max_abs);

/* s_l of a layer from its calibrated max |latent|: max_abs / 2688 (fp32 division), raised to
 * FLT_MIN when smaller, so that it stays a normal positive float. A layer whose samples are
 * all zero (max_abs == 0) gets 1.0: its records are then the unscaled ones. max_abs negative,
 * NaN or Inf: MLAKV_ERR_INVALID_ARGUMENT. */
MLAKV_API mlakv_status mlakv_latent_scale(float max_abs, float *latent_scale);

/* num_blocks * block_size; 0 for an invalid descriptor. */
MLAKV_API int64_t mlakv_cache_capacity(const mlakv_cache *cache);

/* ------------------------------------------------------------------------------------------ */
/* CPU writer and reader                                                                       */
/* ------------------------------------------------------------------------------------------ */

/* Write n tokens into a host cache. With cache->latent_scale s_l != 1 every latent value x is
 * stored as bf16(x / s_l) (fp32 quotient, rounded to nearest even) through the format's recipe.
 * kv_c is [n, 512] and k_pe [n, 64], both of `dtype`, with
 * row strides in elements (>= 512 and >= 64; rows may not overlap). slot_mapping[n] holds flat
 * slots: negative = padded token, skipped (its record is left untouched). If any slot is
 * >= capacity the call returns MLAKV_ERR_SLOT_OUT_OF_RANGE and writes nothing. */
MLAKV_API mlakv_status mlakv_write(const mlakv_cache *cache, int64_t n, const void *kv_c,
                                   int64_t kv_c_row_stride, const void *k_pe,
                                   int64_t k_pe_row_stride, mlakv_dtype dtype,
                                   const int64_t *slot_mapping,
                                   const mlakv_write_options *options);

/* De-quantize the records of n flat slots from a host cache into latent [n, 512] and
 * rope [n, 64] (fp32, contiguous; either may be NULL). Latent values are multiplied by
 * cache->latent_scale (fp32, skipped when it is 1.0). Any slot < 0 or >= capacity:
 * MLAKV_ERR_SLOT_OUT_OF_RANGE, nothing written. */
MLAKV_API mlakv_status mlakv_read(const mlakv_cache *cache, int64_t n, const int64_t *slots,
                                  float *latent, float *rope);

/* ------------------------------------------------------------------------------------------ */
/* Sparse MLA decode attention                                                                 */
/* ------------------------------------------------------------------------------------------ */

/* Numeric mode of the CPU decoder. */
typedef enum {
    MLAKV_ATTN_EXACT = 0,  /* float64 accumulation of the de-quantized values: the oracle */
    MLAKV_ATTN_ENGINE = 1  /* bf16 Q/K/V products, fp32 accumulation, P rounded to bf16 before
                              P*V: what GPU kernels compute. The two-level record keeps its
                              per-token scale s_t out of K and V (its latent e2m1*e4m3 is exact
                              in bf16): score = sm_scale * (s_t * latent dot + RoPE dot), and P*V
                              takes bf16(p * s_t). Rounding every e2m1*e4m3*s_t to bf16 instead
                              cost up to several % of output error on rows with large scores.
                              The static latent scale s_l
                              (mlakv_cache.latent_scale) is kept out of K and V as the GPU
                              kernels fold it: score = (sm_scale * s_l) * (latent dot +
                              bf16(q_rope / s_l) . RoPE), and out = s_l * (P V) in fp32
                              before the rounding to out_dtype. EXACT mode computes
                              sm_scale * (s_l * latent dot + RoPE dot) in float64. */
} mlakv_attn_mode;

/* Arguments of sparse decode, shared by the CPU and CUDA entry points.
 * Query row (b, t) with head h attends over the candidates indices[b, t, 0..topk) (flat slots;
 * negative = invalid, contributes nothing); if lengths is set, candidates at positions
 * >= lengths[b] are masked too. Keys are [latent ; rope] (576), values the latent (512).
 * score = sm_scale * q.k; out = softmax(score) @ V; lse = natural-log logsumexp of the scores
 * (sink included when given). An empty row (no valid candidate, no sink) gives out = 0 and
 * lse = -INFINITY. A sink adds exp(sink[h]) to the softmax denominator and no value. */
typedef struct {
    int64_t batch, s_q, heads, topk;  /* all >= 1; heads <= 128 on CUDA */
    const void *q;                    /* [batch, s_q, heads, 576] */
    mlakv_dtype q_dtype;              /* CPU: F32 or BF16; CUDA: BF16 */
    int64_t q_stride_batch, q_stride_token, q_stride_head; /* elements; dim stride is 1 */
    const int32_t *indices;           /* [batch, s_q, topk], topk contiguous */
    int64_t indices_stride_batch, indices_stride_token;    /* elements */
    const int32_t *lengths;           /* optional [batch]: active candidates per batch row */
    float sm_scale;
    const float *sink;                /* optional [heads] */
    void *out;                        /* [batch, s_q, heads, 512] contiguous */
    mlakv_dtype out_dtype;            /* CPU: F32 or BF16; CUDA: BF16 */
    float *lse;                       /* optional on CPU, required on CUDA: [batch, s_q, heads] */
    mlakv_attn_mode mode;             /* CPU only */
    int num_threads;                  /* CPU only: 0 = all cores */
    unsigned long long *invalid_index_count; /* CUDA only, optional device counter: incremented
                                                by the number of indices >= capacity seen (they
                                                are treated as invalid) */
} mlakv_decode_args;

/* Zeroed args with contiguous-layout strides for the given shape, sm_scale 1/sqrt(576),
 * q/out dtype BF16, mode ENGINE. Pointers are left NULL for the caller to set. A stride whose
 * product overflows is INT64_MAX (the decoders then fail with MLAKV_ERR_OVERFLOW); one with a
 * factor < 1 is 0 (they fail with MLAKV_ERR_GEOMETRY). */
MLAKV_API mlakv_decode_args mlakv_decode_args_default(int64_t batch, int64_t s_q, int64_t heads,
                                                      int64_t topk);

/* CPU sparse decode over a host cache. Indices >= capacity: MLAKV_ERR_SLOT_OUT_OF_RANGE,
 * reported before any output is written (only active candidates are checked: positions masked
 * by lengths are never read). Engine-mode rounding is specified in src/cpu/attention.c. Uses
 * num_threads pthreads and a per-call scratch of about 1 MB per thread
 * (MLAKV_ERR_OUT_OF_MEMORY, before any output is written, if it cannot be allocated). */
MLAKV_API mlakv_status mlakv_sparse_decode(const mlakv_cache *cache, const mlakv_decode_args *args);

/* Split-KV on the CPU: the same computation over candidate positions [cand_begin, cand_end)
 * only, writing an fp32 partial out_partial [batch, s_q, heads, 512] and lse_partial
 * [batch, s_q, heads] (args->out, out_dtype and lse are ignored; no sink is applied to
 * partials). An empty partial has lse -INFINITY and out 0. */
MLAKV_API mlakv_status mlakv_sparse_decode_partial(const mlakv_cache *cache,
                                                   const mlakv_decode_args *args,
                                                   int64_t cand_begin, int64_t cand_end,
                                                   float *out_partial, float *lse_partial);

/* Merge n_parts partials: out_parts [n_parts, rows, dim], lse_parts [n_parts, rows] ->
 * out [rows, dim] (fp32) and lse [rows]. O = sum O_i exp(lse_i - m) / sum exp(lse_i - m);
 * partials with lse -INFINITY are skipped; sink (optional, one per row, may be NULL) adds
 * exp(sink) to the denominator. lse may be NULL. */
MLAKV_API mlakv_status mlakv_merge_partials(int64_t n_parts, int64_t rows, int64_t dim,
                                            const float *out_parts, const float *lse_parts,
                                            const float *sink, float *out, float *lse);

/* ------------------------------------------------------------------------------------------ */
/* Decode context parallelism (DCP): one context striped over `world` ranks                    */
/* ------------------------------------------------------------------------------------------ */
/* Token p of a sequence lives on rank p % world, at local position p / world of that rank's
 * cache (its own block table). A decode step: every rank maps the step's global top-k token
 * positions to its local slots (mlakv_dcp_local_indices), decodes them without the sink
 * (partial out + lse; a rank with no candidate gives out 0 and lse -inf), and the partials of
 * all ranks are merged with the sink applied once (mlakv_merge_partials on the CPU;
 * mlakv_cuda_dcp_combine = NCCL all-gather + merge, or mlakv_cuda_merge_partials, on GPUs). */

/* Global positions -> this rank's flat slots. positions [batch, s_q, topk] int32 (strides in
 * elements, topk contiguous; negative = invalid). A position p with p % world == rank maps to
 * slot block_table[b * block_table_stride + (p / world) / block_size] * block_size +
 * (p / world) % block_size of local_cache; every other position is not this rank's. Each
 * query row's local slots are compacted to its front in their order, the rest of the row is
 * -1: local_indices [batch, s_q, topk] contiguous int32. lengths (optional, [batch]) gets the
 * largest local count over a batch row's s_q query rows, so mlakv_*sparse_decode skips the
 * padding. A local position past the block table's row (block_table_stride entries) or a block
 * id outside local_cache is MLAKV_ERR_SLOT_OUT_OF_RANGE (nothing written). */
MLAKV_API mlakv_status mlakv_dcp_local_indices(const mlakv_cache *local_cache, int rank, int world,
                                               int64_t batch, int64_t s_q, int64_t topk,
                                               const int32_t *positions,
                                               int64_t positions_stride_batch,
                                               int64_t positions_stride_token,
                                               const int32_t *block_table,
                                               int64_t block_table_stride,
                                               int32_t *local_indices, int32_t *lengths);

/* ------------------------------------------------------------------------------------------ */
/* Gathers: records -> bf16 rows, for engines that keep their own attention kernel             */
/* ------------------------------------------------------------------------------------------ */
/* Row layout of both gathers: 576 bf16 values, the 512 latent values then the 64 RoPE values,
 * each the round-to-nearest-even bf16 of what mlakv_read returns for that record (bit for
 * bit). out_row_stride is in elements (>= 576, 0 = 576), out 4-byte aligned; the elements
 * between rows (stride > 576) are never written. A failed call writes nothing. */

/* Selected slots -> out [n, 576] bf16. slots [n] int32: a negative slot gives a zero row (the
 * engines' -1 padding); a slot >= capacity is MLAKV_ERR_SLOT_OUT_OF_RANGE (nothing written).
 * n = 0 does nothing. */
MLAKV_API mlakv_status mlakv_gather_bf16(const mlakv_cache *cache, int64_t n, const int32_t *slots,
                                         void *out, int64_t out_row_stride);

/* Whole-context upconvert, vLLM's cp_gather_and_upconvert_fp8_kv_cache for every format, with
 * cp_gather_cache's optional seq_starts: for each batch row b and i in [0, seq_lens[b]), the
 * token at position p = seq_starts[b] + i of sequence b (seq_starts NULL = all 0; a start need
 * not be a multiple of block_size), which lives in block block_table[b * block_table_stride +
 * p / block_size] at offset p % block_size, is written to out row workspace_starts[b] + i.
 * block_table [batch, block_table_stride] int32 (block_table_stride >= 1 columns per row),
 * seq_lens, workspace_starts and seq_starts [batch] int32; out has out_rows rows. A negative
 * seq_lens[b] or seq_starts[b] is MLAKV_ERR_INVALID_ARGUMENT; a row written outside
 * [0, out_rows), a position past the row's block_table_stride columns or a block id outside
 * [0, num_blocks) is MLAKV_ERR_SLOT_OUT_OF_RANGE (only the columns a row reaches are checked).
 * Nothing is written on failure. Rows of out not named by any (b, i) are left unchanged; two
 * (b, i) naming the same row is a caller error (the CPU writes them in order, the GPU in any).
 * batch = 0 does nothing. */
MLAKV_API mlakv_status mlakv_gather_upconvert(const mlakv_cache *cache, int64_t batch,
                                              const int32_t *block_table,
                                              int64_t block_table_stride,
                                              const int32_t *seq_lens,
                                              const int32_t *workspace_starts,
                                              const int32_t *seq_starts, void *out,
                                              int64_t out_rows, int64_t out_row_stride);

/* ------------------------------------------------------------------------------------------ */
/* Capacity planner                                                                            */
/* ------------------------------------------------------------------------------------------ */

typedef enum {
    MLAKV_MODEL_DEEPSEEK_V32 = 0, /* 61 MLA layers + 1 MTP, indexer (132 B) in every layer */
    MLAKV_MODEL_GLM_5_2 = 1,      /* 78 MLA layers + 1 MTP, 21 indexer layers + 1 for MTP */
    MLAKV_MODEL_GLM_5 = 2,        /* 78 MLA layers + 1 MTP, indexer in every layer */
    MLAKV_MODEL_COUNT
} mlakv_model;

typedef struct {
    const char *name;            /* "deepseek-v3.2", "glm-5.2", "glm-5" */
    int mla_layers;              /* without MTP */
    int mtp_layers;
    int indexer_layers;          /* without MTP */
    int mtp_indexer_layers;
    int indexer_bytes_per_token; /* per indexer layer */
} mlakv_model_info;

/* Preset of a model; NULL for an unknown value. */
MLAKV_API const mlakv_model_info *mlakv_model_get(mlakv_model model);
/* Model by name. MLAKV_ERR_INVALID_ARGUMENT if no preset has that name. */
MLAKV_API mlakv_status mlakv_model_from_name(const char *name, mlakv_model *model);

typedef struct {
    int64_t bytes_per_token;     /* all layers (MLA records + indexer), one GPU */
    int64_t blocks;              /* whole blocks of block_size that fit the budget, one GPU */
    int64_t tokens_per_gpu;      /* blocks * block_size */
    int64_t tokens;              /* context that fits: tokens_per_gpu * dcp */
} mlakv_capacity;

/* KV capacity of `budget_bytes` of memory per GPU for a model and format, rounded down to
 * whole blocks; include_mtp adds the MTP layers; dcp >= 1 is the decode-context-parallel
 * factor (each of dcp GPUs holds 1/dcp of every sequence's tokens). */
MLAKV_API mlakv_status mlakv_plan_capacity(mlakv_model model, mlakv_format format,
                                           uint64_t budget_bytes, int64_t block_size, int dcp,
                                           int include_mtp,
                                           mlakv_capacity *result);

/* ------------------------------------------------------------------------------------------ */
/* CUDA (device pointers; `stream` is a cudaStream_t, NULL = legacy default stream)            */
/* ------------------------------------------------------------------------------------------ */
/* In a build without CUDA every entry point below returns MLAKV_ERR_NO_CUDA. None of them
 * synchronizes with the host or allocates: all are capturable in a CUDA graph. */

/* 1 if the library was built with CUDA kernels, else 0. */
MLAKV_API int mlakv_cuda_compiled(void);

/* Check that the current device can run this build's kernels: MLAKV_OK, MLAKV_ERR_NO_CUDA
 * (no driver / no device) or MLAKV_ERR_UNSUPPORTED_DEVICE (message names the compute
 * capability and the architectures compiled in). */
MLAKV_API mlakv_status mlakv_cuda_check_device(void);

/* GPU writer: same semantics and bytes as mlakv_write (latent_scale and the accurate NVFP4
 * encoder included). kv_c, k_pe, slot_mapping and
 * cache->base are device pointers; dtype BF16 or F16; rows 16-byte aligned.
 * rejected_count (optional, device) is incremented by the number of slots >= capacity found,
 * which are not written (the GPU cannot fail the call without a host synchronization). */
MLAKV_API mlakv_status mlakv_cuda_write(const mlakv_cache *cache, int64_t n, const void *kv_c,
                                        int64_t kv_c_row_stride, const void *k_pe,
                                        int64_t k_pe_row_stride, mlakv_dtype dtype,
                                        const int64_t *slot_mapping,
                                        const mlakv_write_options *options,
                                        unsigned long long *rejected_count, void *stream);

/* Workspace bytes mlakv_cuda_sparse_decode needs for this shape (split-KV partials). */
MLAKV_API mlakv_status mlakv_cuda_decode_workspace_size(const mlakv_cache *cache,
                                                        const mlakv_decode_args *args,
                                                        size_t *bytes);

/* GPU sparse decode: q bf16, out bf16, lse fp32 required. Invalid (negative) indices
 * contribute nothing; an index >= capacity is treated as invalid (never read) since the GPU
 * cannot report it without a host synchronization: args->invalid_index_count (optional,
 * device, 8-byte aligned) is incremented by their number, by a separate small kernel launched
 * only when the counter is given (the decode kernel is the same either way). workspace: device
 * memory of at least mlakv_cuda_decode_workspace_size bytes (may be NULL when that size is 0).
 * Numerics: those of MLAKV_ATTN_ENGINE up to rounding order; for NVFP4 records on Hopper
 * (sm_90a) the softmax reference may trail a row's running max by up to 2^8 (fewer rescales),
 * so P is rounded to bf16 relative to it: a row dominated by one candidate can differ from
 * engine mode by up to 2^-9 relative. A latent scale s_l != 1 is applied as engine mode
 * describes (folded into sm_scale, the RoPE half of q and the output scale: nothing added to
 * the kernels' inner loops). */
MLAKV_API mlakv_status mlakv_cuda_sparse_decode(const mlakv_cache *cache,
                                                const mlakv_decode_args *args, void *workspace,
                                                size_t workspace_bytes, void *stream);

/* GPU mlakv_dcp_local_indices (device pointers; lengths, when given, is zeroed then filled on
 * `stream`). A local position past the block table's row or a block id outside local_cache
 * gives -1 (not a candidate) and is counted in invalid_count (optional, device). */
MLAKV_API mlakv_status mlakv_cuda_dcp_local_indices(const mlakv_cache *local_cache, int rank,
                                                    int world, int64_t batch, int64_t s_q,
                                                    int64_t topk, const int32_t *positions,
                                                    int64_t positions_stride_batch,
                                                    int64_t positions_stride_token,
                                                    const int32_t *block_table,
                                                    int64_t block_table_stride,
                                                    int32_t *local_indices, int32_t *lengths,
                                                    unsigned long long *invalid_count,
                                                    void *stream);

/* GPU merge of n_parts (1..64) partials: out_parts [n_parts, rows, dim] (parts_dtype BF16 or F32),
 * lse_parts [n_parts, rows] (natural log, -inf = empty) -> out [rows, dim] (out_dtype BF16 or
 * F32) and lse [rows] (optional). Row r is head r % heads of its query: sink (optional,
 * [heads]) adds exp(sink[r % heads]) to the denominator, as mlakv_merge_partials does. A row
 * with every part empty and no sink gives out 0 and lse -inf. */
MLAKV_API mlakv_status mlakv_cuda_merge_partials(int64_t n_parts, int64_t rows, int64_t dim,
                                                 int64_t heads, const void *out_parts,
                                                 mlakv_dtype parts_dtype, const float *lse_parts,
                                                 const float *sink, void *out,
                                                 mlakv_dtype out_dtype, float *lse, void *stream);

/* Workspace bytes of mlakv_cuda_dcp_combine: the gathered partials of `world` (1..64) ranks. */
MLAKV_API mlakv_status mlakv_cuda_dcp_workspace_size(int world, int64_t rows, size_t *bytes);

/* The DCP exchange on the caller's NCCL communicator `nccl_comm` (an ncclComm_t of `world`
 * ranks, this process's rank on the current device) and stream: all-gathers every rank's
 * decode output local_out [rows, 512] bf16 and local_lse [rows] (rows = batch * s_q * heads,
 * decoded without the sink) into workspace, then merges them as mlakv_cuda_merge_partials into
 * out [rows, 512] bf16 and lse [rows] (optional), the sink applied once. NCCL is loaded at the
 * first call (libnccl.so.2, the one the process already uses when loaded); a build without
 * NCCL headers or a process without NCCL gets MLAKV_ERR_NO_CUDA with a message saying so. */
MLAKV_API mlakv_status mlakv_cuda_dcp_combine(void *nccl_comm, int world, int64_t rows,
                                              int64_t heads, const void *local_out,
                                              const float *local_lse, const float *sink,
                                              void *out, float *lse, void *workspace,
                                              size_t workspace_bytes, void *stream);

/* GPU gathers: the CPU gathers' rows from device pointers (slots, block_table, seq_lens,
 * workspace_starts, seq_starts, out; cache base and block_stride_bytes 16-byte aligned, out
 * 16-byte aligned, out_row_stride a multiple of 8), bit for bit except that a NaN (from NaN
 * bytes or scales in a record) is a NaN of unspecified sign and payload. The GPU cannot fail
 * the call on device values without a host synchronization, so each bad value is counted in
 * invalid_count (optional, device, 8-byte aligned) instead: a slot >= capacity gives a zero
 * row (counted once); a (b, i) whose row is outside [0, out_rows), whose position is past the
 * row's block_table columns or whose block id is outside the cache is skipped (counted once
 * each); a batch row with a negative seq_lens or seq_starts is skipped (counted once). Host
 * arguments are checked as on the CPU. */
MLAKV_API mlakv_status mlakv_cuda_gather_bf16(const mlakv_cache *cache, int64_t n,
                                              const int32_t *slots, void *out,
                                              int64_t out_row_stride,
                                              unsigned long long *invalid_count, void *stream);
MLAKV_API mlakv_status mlakv_cuda_gather_upconvert(const mlakv_cache *cache, int64_t batch,
                                                   const int32_t *block_table,
                                                   int64_t block_table_stride,
                                                   const int32_t *seq_lens,
                                                   const int32_t *workspace_starts,
                                                   const int32_t *seq_starts, void *out,
                                                   int64_t out_rows, int64_t out_row_stride,
                                                   unsigned long long *invalid_count,
                                                   void *stream);

#ifdef __cplusplus
}
#endif

#endif /* MLAKV_H */
