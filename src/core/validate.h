/* Internal: argument validators shared by the CPU entry points and the CUDA entry points'
 * host-side checks. Pure checks on descriptors, sizes and pointer values: nothing here
 * dereferences a caller buffer, so the CUDA paths call them with device pointers. */
#ifndef MLAKV_CORE_VALIDATE_H
#define MLAKV_CORE_VALIDATE_H

#include <stddef.h>
#include <stdint.h>

#include "mlakv.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Validates an [n, cols] input of `dtype` with row stride `stride` (elements): non-NULL when
 * n > 0, stride >= cols, byte extent representable in int64 and size_t, pointer aligned to its
 * element size. Shared by the CPU and CUDA writers. */
mlakv_status mlakv_check_rows(const char *fn, const char *name, const void *p, int64_t n,
                              int64_t cols, int64_t stride, mlakv_dtype dtype);

/* Validates the q and indices strides of decode args (>= 0, no overlapping rows where a
 * dimension has more than one entry) and that the tensor extents fit 64 bits. Geometry
 * (batch, s_q, heads, topk >= 1) must have been checked. Shared by the CPU and CUDA decoders. */
mlakv_status mlakv_check_decode_strides(const char *fn, const mlakv_decode_args *a);

/* The CUDA kernels' condition on a cache: base and block_stride_bytes multiples of 16 bytes
 * (they read records in 16-byte pieces), else MLAKV_ERR_ALIGNMENT naming the field. */
mlakv_status mlakv_check_cache_aligned16(const char *fn, const mlakv_cache *cache);

/* Validates write options (NULL is valid: defaults). fn names the caller in the message. */
mlakv_status mlakv_check_write_options(const char *fn, const mlakv_write_options *options);

/* The latent scale s_l of a cache of `format`: finite and > 0 for the static NVFP4 formats,
 * exactly 1.0 for the others (MLAKV_ERR_INVALID_ARGUMENT otherwise). */
mlakv_status mlakv_check_latent_scale(const char *fn, mlakv_format format, float latent_scale);


/* The scalar and pointer arguments of the slot gathers (CPU and CUDA): n >= 0,
 * out_row_stride >= 0, and when n > 0 slots non-NULL and 4-byte aligned. */
mlakv_status mlakv_check_gather_args(const char *fn, int64_t n, const int32_t *slots,
                                     int64_t out_row_stride);

/* The scalar and pointer arguments of the upconvert gathers (CPU and CUDA): batch, out_rows
 * >= 0, block_table_stride >= 1, out_row_stride >= 0, the three required arrays non-NULL and
 * every array 4-byte aligned when batch > 0, the block table's extent within size_t. */
mlakv_status mlakv_check_upconvert_args(const char *fn, int64_t batch, const int32_t *block_table,
                                        int64_t block_table_stride, const int32_t *seq_lens,
                                        const int32_t *workspace_starts,
                                        const int32_t *seq_starts, int64_t out_rows,
                                        int64_t out_row_stride);

/* ---- overlapping buffers ----------------------------------------------------------------- *
 * A buffer's span is the byte range [lo, hi) from its first to one past its last byte. A
 * span made of equal pieces at a fixed period (the blocks of a padded cache, the rows of a
 * row-strided input) covers only its pieces: another buffer may sit in the gaps (the other
 * layers of a cross-layer cache); a span with more than one stride (q of decode) is taken
 * whole, gaps included. Only pointer values are compared, so the checks work on device
 * pointers too. An entry point that rejects overlap fails with MLAKV_ERR_ALIASING, before
 * writing anything, when an output overlaps an input or another output (inputs may overlap
 * each other). */
typedef struct {
    const char *name;
    uintptr_t lo, hi; /* bounding range; empty when lo == hi (NULL pointer or zero bytes) */
    uint64_t period, used; /* period != 0: only [lo + k*period, lo + k*period + used) count */
} mlakv_span;

/* Span of `bytes` bytes at p (empty for NULL or 0 bytes); hi saturates instead of wrapping. */
mlakv_span mlakv_span_of(const char *name, const void *p, uint64_t bytes);

/* Span of `count` pieces of `used` bytes, `period` bytes apart (period >= used), from p. */
mlakv_span mlakv_span_rows(const char *name, const void *p, uint64_t count, uint64_t used,
                           uint64_t period);

/* Span of a validated cache descriptor: num_blocks blocks of block_size records, one every
 * block_stride_bytes from base (the padding between blocks is not part of it). */
mlakv_span mlakv_cache_span(const mlakv_cache *cache);

/* MLAKV_ERR_ALIASING (message names both buffers and fn) if an output overlaps an input or an
 * earlier output; MLAKV_OK otherwise. */
mlakv_status mlakv_check_overlap(const char *fn, const mlakv_span *outs, int n_outs,
                                 const mlakv_span *ins, int n_ins);

/* Writers (mlakv_write, mlakv_cuda_write): the outputs, the cache span and the optional 8-byte
 * counter (the CUDA writer's rejected_count; NULL for none), against the inputs kv_c, k_pe and
 * slot_mapping[n] and each other. Arguments already validated (mlakv_check_rows, the cache
 * check). */
mlakv_status mlakv_check_write_aliasing(const char *fn, const mlakv_cache *cache, int64_t n,
                                        const void *kv_c, int64_t kv_c_row_stride,
                                        const void *k_pe, int64_t k_pe_row_stride,
                                        mlakv_dtype dtype, const int64_t *slot_mapping,
                                        const void *counter);

/* The input spans of sparse decode: the cache, q, indices, lengths and sink (the last two
 * empty when NULL). Requires validated geometry and strides (mlakv_check_decode_strides). */
#define MLAKV_DECODE_INPUT_SPANS 5
int mlakv_decode_input_spans(const mlakv_cache *cache, const mlakv_decode_args *a,
                             mlakv_span spans[MLAKV_DECODE_INPUT_SPANS]);

/* Gathers (CPU, and the CUDA gathers' host checks with device pointers): the bf16 rows out
 * [rows, 576] (row stride in elements) and the optional 8-byte counter (the CUDA gathers'
 * invalid count; NULL for none) against the cache and the index arrays - slots[n] of the slot
 * gather, block_table / seq_lens / workspace_starts / seq_starts of the upconvert gather - and
 * each other. Arguments already validated (mlakv_check_gather_args / _upconvert_args). */
mlakv_status mlakv_check_gather_aliasing(const char *fn, const mlakv_cache *cache, int64_t n,
                                         const int32_t *slots, const void *out,
                                         int64_t out_row_stride, const void *counter);
mlakv_status mlakv_check_upconvert_aliasing(const char *fn, const mlakv_cache *cache,
                                            int64_t batch, const int32_t *block_table,
                                            int64_t block_table_stride, const int32_t *seq_lens,
                                            const int32_t *workspace_starts,
                                            const int32_t *seq_starts, const void *out,
                                            int64_t out_rows, int64_t out_row_stride,
                                            const void *counter);

/* Sparse decode (CPU, and the CUDA decoder's host checks with device pointers): the outputs
 * out ([batch, s_q, heads, 512] of out_dtype), lse (when set, [batch, s_q, heads] fp32) and
 * workspace (workspace_bytes; NULL or 0 for none) must not overlap each other or the inputs
 * (cache span, q, indices, lengths, sink). Requires validated geometry and strides. */
mlakv_status mlakv_check_decode_aliasing(const char *fn, const mlakv_cache *cache,
                                         const mlakv_decode_args *a, const void *workspace,
                                         size_t workspace_bytes);

#ifdef __cplusplus
}
#endif

#endif
