/* Host side of the CUDA sparse MLA decode: argument validation, the dispatch table, the
 * split-KV plan, workspace sizing and the launches (decode kernel, then the combine kernel when
 * the candidate list is split). No allocation, no host synchronization, no environment lookups:
 * capturable in a CUDA graph.
 *
 * The table lists every kernel family with what it runs (formats, heads, architecture), its
 * plan (candidates per tile, CTAs per SM, head groups per CTA) and its launchers. The plan of a
 * call comes from the entry that runs it, so the split plan always matches the kernel's tile.
 * Default choice: the first entry, in table order, that runs the call and prefers its shape. */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

extern "C" {
#include "cache/cache.h"
#include "core/validate.h"
}
#include "cuda/common/status.cuh"
#include "cuda/decode/config.h"
#include "cuda/decode/launchers.h"
#include "cuda/decode/fp8_wgmma/config.h"
#include "cuda/decode/mma/config.h"
#include "cuda/decode/narrow/config.h"
#include "cuda/decode/wide/config.h"
#include "cuda/decode/params.h"
#include "mlakv.h"
#include "mlakv_experimental.h"

#ifndef MLAKV_CUDA_ARCH_LIST
#define MLAKV_CUDA_ARCH_LIST "unknown"
#endif

namespace decode = mlakv::decode;

/* What a kernel family needs from a call: the split plan's tile and occupancy. */
typedef struct {
    int nk;          /* candidates per tile */
    int ctas_per_sm; /* CTAs per SM the kernel is built for */
    int head_groups; /* 16-head groups per CTA (1, 2 or 4) */
} kernel_plan;

typedef struct {
    mlakv_cuda_decode_kernel id;
    const char *name;
    int min_heads, max_heads;
    bool needs_sm90a;                                  /* sm_90a code and a cc 9.x device */
    void (*plan)(mlakv_format f, int heads, kernel_plan *kp);
    bool (*prefers)(const mlakv_decode_args *a);       /* default choice for this shape */
    decode::LaunchFn launch[MLAKV_FORMAT_COUNT]; /* NULL: format not run */
} kernel_entry;

/* 16-head groups of a CTA for the kernels that tile heads by 16 (1, 2, or 64-head blocks). */
static int head_groups_for(int heads) {
    const int hg_total = (heads + 15) / 16;
    return hg_total <= 2 ? hg_total : decode::kMaxHeadGroups;
}

template <int F, int HG>
static void mma_plan_of(kernel_plan *kp) {
    typedef decode::mma::Shape<F, HG> SH;
    kp->nk = SH::NK;
    int per_sm = (int)((228 * 1024) / (SH::SMEM + 1024));
    if (per_sm > SH::MINB) per_sm = SH::MINB;
    kp->ctas_per_sm = per_sm < 1 ? 1 : per_sm;
}
template <int F>
static void mma_plan_f(int hg, kernel_plan *kp) {
    if (hg == 1) mma_plan_of<F, 1>(kp);
    else if (hg == 2) mma_plan_of<F, 2>(kp);
    else mma_plan_of<F, decode::kMaxHeadGroups>(kp);
}
static void mma_plan(mlakv_format f, int heads, kernel_plan *kp) {
    kp->head_groups = head_groups_for(heads);
    switch (f) {
        case MLAKV_FP8_DS_MLA: mma_plan_f<0>(kp->head_groups, kp); break;
        case MLAKV_NVFP4_DS_MLA: mma_plan_f<1>(kp->head_groups, kp); break;
        case MLAKV_NVFP4_FP8_ROPE: mma_plan_f<2>(kp->head_groups, kp); break;
        default: mma_plan_f<3>(kp->head_groups, kp); break;
    }
}
/* one CTA for all heads of a query row (8, 16 or 32 columns), one per SM */
static void narrow_plan(mlakv_format, int heads, kernel_plan *kp) {
    kp->head_groups = head_groups_for(heads);
    kp->nk = decode::narrow::kTile;
    kp->ctas_per_sm = 1;
}
/* 64-head blocks, one CTA per SM, each kernel's record tile */
static void wide_plan(mlakv_format, int, kernel_plan *kp) {
    kp->head_groups = decode::kMaxHeadGroups;
    kp->nk = decode::wide::kTile;
    kp->ctas_per_sm = 1;
}
static void fp8_wgmma_plan(mlakv_format, int, kernel_plan *kp) {
    kp->head_groups = decode::kMaxHeadGroups;
    kp->nk = decode::fp8_wgmma::kTile;
    kp->ctas_per_sm = 1;
}

/* The narrow kernel from two query rows up; with one query row (where the mma.sync kernel's
 * 32-record tiles give twice the splits) only up to decode::narrow::kOneRowHeads heads. */
static bool narrow_prefers(const mlakv_decode_args *a) {
    return a->batch * a->s_q >= decode::narrow::kMinRows ||
           a->heads <= decode::narrow::kOneRowHeads;
}
static bool always(const mlakv_decode_args *) { return true; }

static const kernel_entry kernel_table[] = {
    {MLAKV_CUDA_DECODE_NARROW, "narrow", 1, 32, true, narrow_plan, narrow_prefers,
     {NULL, decode::narrow::launch_nvfp4_ds_mla, decode::narrow::launch_nvfp4_fp8_rope,
      decode::narrow::launch_nvfp4_fp8_rope_token_scale}},
    {MLAKV_CUDA_DECODE_WIDE, "wide", 33, 128, true, wide_plan, always,
     {NULL, decode::wide::launch_nvfp4_ds_mla, decode::wide::launch_nvfp4_fp8_rope,
      decode::wide::launch_nvfp4_fp8_rope_token_scale}},
    {MLAKV_CUDA_DECODE_FP8_WGMMA, "fp8_wgmma", 33, 128, true, fp8_wgmma_plan, always,
     {decode::fp8_wgmma::launch_fp8_ds_mla, NULL, NULL, NULL}},
    {MLAKV_CUDA_DECODE_MMA, "mma", 1, 128, false, mma_plan, always,
     {decode::mma::launch_fp8_ds_mla, decode::mma::launch_nvfp4_ds_mla,
      decode::mma::launch_nvfp4_fp8_rope, decode::mma::launch_nvfp4_fp8_rope_token_scale}},
};
#define KERNEL_COUNT (int)(sizeof kernel_table / sizeof kernel_table[0])

/* The sm_90a kernels run on cc 9.x devices when this build has sm_90a code. */
static bool sm90a_device(int cc_major) {
    if (strstr(MLAKV_CUDA_ARCH_LIST, "90a") == NULL) return false;
    return cc_major == 9;
}

static bool entry_runs(const kernel_entry *e, mlakv_format f, int64_t heads, int cc_major) {
    return e->launch[f] != NULL && heads >= e->min_heads && heads <= e->max_heads &&
           (!e->needs_sm90a || sm90a_device(cc_major));
}

extern "C" const char *mlakv_cuda_decode_kernel_name(mlakv_cuda_decode_kernel kernel) {
    if (kernel == MLAKV_CUDA_DECODE_AUTO) return "auto";
    for (int i = 0; i < KERNEL_COUNT; i++)
        if (kernel_table[i].id == kernel) return kernel_table[i].name;
    return NULL;
}

extern "C" mlakv_status mlakv_cuda_decode_kernel_from_name(const char *name,
                                                           mlakv_cuda_decode_kernel *kernel) {
    static const char fn[] = "mlakv_cuda_decode_kernel_from_name";
    MLAKV_CHECK_NOT_NULL(fn, name);
    MLAKV_CHECK_NOT_NULL(fn, kernel);
    if (strcmp(name, "auto") == 0) {
        *kernel = MLAKV_CUDA_DECODE_AUTO;
        return MLAKV_OK;
    }
    for (int i = 0; i < KERNEL_COUNT; i++)
        if (strcmp(name, kernel_table[i].name) == 0) {
            *kernel = kernel_table[i].id;
            return MLAKV_OK;
        }
    return mlakv_fail(MLAKV_ERR_INVALID_ARGUMENT,
                      "%s: unknown kernel name (auto, narrow, wide, fp8_wgmma, mma)", fn);
}

/* A call's plan: the kernel entry, the launch parameters' shape fields, the narrow kernel's
 * producer pairs and the combine kernel. */
typedef struct {
    const kernel_entry *kernel;
    int pairs;
    bool combine_by_rows;
} call_plan;

/* Everything but pointers: validates args and the choice, picks the kernel and fills the plan
 * (shape, splits, workspace). */
static mlakv_status plan_decode(const char *fn, const mlakv_cache *cache,
                                const mlakv_decode_args *a, const mlakv_cuda_decode_choice *choice,
                                decode::Params *p, size_t *ws_bytes, call_plan *cp) {
    MLAKV_CHECK_NOT_NULL(fn, cache);
    MLAKV_CHECK_NOT_NULL(fn, a);
    MLAKV_TRY(mlakv_cache_check(fn, cache));
    if (a->batch < 1 || a->s_q < 1 || a->topk < 1)
        return mlakv_fail(MLAKV_ERR_GEOMETRY, "%s: batch, s_q and topk must be >= 1 (got %lld, %lld, %lld)",
                          fn, (long long)a->batch, (long long)a->s_q, (long long)a->topk);
    if (a->heads < 1 || a->heads > 128)
        return mlakv_fail(MLAKV_ERR_GEOMETRY, "%s: heads must be in 1..128 on CUDA (got %lld)", fn,
                          (long long)a->heads);
    if (a->topk > INT_MAX / 2 || a->batch * a->s_q > INT_MAX || a->batch > INT_MAX)
        return mlakv_fail(MLAKV_ERR_OVERFLOW, "%s: batch*s_q or topk too large", fn);
    if (a->q_dtype != MLAKV_BF16)
        return mlakv_fail(MLAKV_ERR_DTYPE, "%s: q_dtype must be BF16 on CUDA", fn);
    if (a->out_dtype != MLAKV_BF16)
        return mlakv_fail(MLAKV_ERR_DTYPE, "%s: out_dtype must be BF16 on CUDA", fn);
    if (!isfinite(a->sm_scale))
        return mlakv_fail(MLAKV_ERR_INVALID_ARGUMENT, "%s: sm_scale is not finite", fn);
    MLAKV_TRY(mlakv_check_decode_strides(fn, a));
    if ((a->q_stride_batch | a->q_stride_token | a->q_stride_head) % 8 != 0)
        return mlakv_fail(MLAKV_ERR_ALIGNMENT,
                          "%s: q strides must be multiples of 8 elements (16-byte rows)", fn);
    MLAKV_TRY(mlakv_check_cache_aligned16(fn, cache));

    const mlakv_cuda_decode_choice none = {MLAKV_CUDA_DECODE_AUTO, 0, MLAKV_CUDA_COMBINE_AUTO};
    if (choice == NULL) choice = &none;
    if (choice->narrow_pairs < 0 || choice->narrow_pairs > 2)
        return mlakv_fail(MLAKV_ERR_INVALID_ARGUMENT, "%s: choice->narrow_pairs must be 0, 1 or 2 (got %d)",
                          fn, choice->narrow_pairs);
    if ((int)choice->combine < 0 || (int)choice->combine > MLAKV_CUDA_COMBINE_QUARTERS)
        return mlakv_fail(MLAKV_ERR_INVALID_ARGUMENT, "%s: choice->combine is not a combine kernel (got %d)",
                          fn, (int)choice->combine);
    if (mlakv_cuda_decode_kernel_name(choice->kernel) == NULL)
        return mlakv_fail(MLAKV_ERR_INVALID_ARGUMENT, "%s: choice->kernel is not a decode kernel (got %d)",
                          fn, (int)choice->kernel);

    int sms = 0, cc = 0;
    MLAKV_TRY(mlakv::cuda::device_ready(fn, &sms, &cc));

    const kernel_entry *k = NULL;
    for (int i = 0; i < KERNEL_COUNT && k == NULL; i++) {
        const kernel_entry *e = &kernel_table[i];
        if (choice->kernel == MLAKV_CUDA_DECODE_AUTO ? entry_runs(e, cache->format, a->heads, cc) &&
                                                           e->prefers(a)
                                                     : e->id == choice->kernel) {
            if (!entry_runs(e, cache->format, a->heads, cc))
                return mlakv_fail(MLAKV_ERR_INVALID_ARGUMENT,
                                  "%s: kernel %s does not run %s records with %lld heads on this "
                                  "device (cc %d.x, build %s)",
                                  fn, e->name, mlakv_format_get(cache->format)->name,
                                  (long long)a->heads, cc, MLAKV_CUDA_ARCH_LIST);
            k = e;
        }
    }
    if (k == NULL) /* the mma.sync entry runs everything the device runs */
        return mlakv_fail(MLAKV_ERR_UNSUPPORTED_DEVICE, "%s: no decode kernel for this call", fn);
    kernel_plan kp;
    k->plan(cache->format, (int)a->heads, &kp);

    p->heads = (int)a->heads;
    p->batch = (int)a->batch;
    p->s_q = (int)a->s_q;
    p->topk = (int)a->topk;
    p->head_groups = kp.head_groups;
    const int hg_total = (int)((a->heads + 15) / 16);
    p->head_blocks = k->id == MLAKV_CUDA_DECODE_NARROW ? 1 : (hg_total + kp.head_groups - 1) / kp.head_groups;
    const int64_t base_ctas = a->batch * a->s_q * p->head_blocks;
    const int64_t tiles = (a->topk + kp.nk - 1) / kp.nk;
    int64_t nsplit = (int64_t)sms * kp.ctas_per_sm / base_ctas;
    if (nsplit > tiles) nsplit = tiles;
    if (nsplit > decode::kMaxSplits) nsplit = decode::kMaxSplits;
    if (nsplit < 1) nsplit = 1;
    const int64_t tps = (tiles + nsplit - 1) / nsplit;
    nsplit = (tiles + tps - 1) / tps;
    p->nsplit = (int)nsplit;
    p->tiles_per_split = (int)tps;

    const int64_t rows = a->batch * a->s_q * a->heads;
    if (choice->combine == MLAKV_CUDA_COMBINE_ROWS && nsplit > decode::kCombineRowSplits)
        return mlakv_fail(MLAKV_ERR_INVALID_ARGUMENT,
                          "%s: the rows combine kernel takes up to %d splits (this call has %d)", fn,
                          decode::kCombineRowSplits, p->nsplit);
    cp->kernel = k;
    /* two producer pairs (up to 16 heads) gained 1-5 % from decode::narrow::kPairsMinTiles tiles per
     * split up and lost 2-9 % with fewer */
    cp->pairs = choice->narrow_pairs != 0 ? choice->narrow_pairs
                                          : tps >= decode::narrow::kPairsMinTiles ? 2 : 1;
    /* the rows kernel up to 4 splits, or up to 8 with >= 1024 rows: 8 splits over 256 rows (b=16
     * h=16: 32 CTAs) measured 18.0 vs 17.1 us, the quarter kernel's 8 warps per quarter taking
     * one split each */
    cp->combine_by_rows =
        choice->combine == MLAKV_CUDA_COMBINE_AUTO
            ? nsplit <= decode::kCombineRowSplits / 2 || (nsplit <= decode::kCombineRowSplits && rows >= 1024)
            : choice->combine == MLAKV_CUDA_COMBINE_ROWS;

    *ws_bytes = 0;
    if (nsplit > 1) *ws_bytes = (size_t)nsplit * (size_t)rows * (decode::kVDim + 1) * sizeof(float);
    return MLAKV_OK;
}

extern "C" mlakv_status mlakv_cuda_decode_pick(const mlakv_cache *cache,
                                               const mlakv_decode_args *args,
                                               const mlakv_cuda_decode_choice *choice,
                                               mlakv_cuda_decode_kernel *kernel) {
    static const char fn[] = "mlakv_cuda_decode_pick";
    MLAKV_CHECK_NOT_NULL(fn, kernel);
    decode::Params p;
    size_t ws = 0;
    call_plan cp;
    MLAKV_TRY(plan_decode(fn, cache, args, choice, &p, &ws, &cp));
    *kernel = cp.kernel->id;
    return MLAKV_OK;
}

static mlakv_status workspace_size(const char *fn, const mlakv_cache *cache,
                                   const mlakv_decode_args *args,
                                   const mlakv_cuda_decode_choice *choice, size_t *bytes) {
    MLAKV_CHECK_NOT_NULL(fn, bytes);
    decode::Params p;
    size_t ws = 0;
    call_plan cp;
    MLAKV_TRY(plan_decode(fn, cache, args, choice, &p, &ws, &cp));
    *bytes = ws;
    return MLAKV_OK;
}

extern "C" mlakv_status mlakv_cuda_decode_workspace_size(const mlakv_cache *cache,
                                                         const mlakv_decode_args *args,
                                                         size_t *bytes) {
    return workspace_size("mlakv_cuda_decode_workspace_size", cache, args, NULL, bytes);
}

extern "C" mlakv_status mlakv_cuda_decode_workspace_size_with(
    const mlakv_cache *cache, const mlakv_decode_args *args,
    const mlakv_cuda_decode_choice *choice, size_t *bytes) {
    return workspace_size("mlakv_cuda_decode_workspace_size_with", cache, args, choice, bytes);
}

static mlakv_status sparse_decode(const char *fn, const mlakv_cache *cache,
                                  const mlakv_decode_args *args,
                                  const mlakv_cuda_decode_choice *choice, void *workspace,
                                  size_t workspace_bytes, void *stream) {
    decode::Params p;
    size_t ws = 0;
    call_plan cp;
    MLAKV_TRY(plan_decode(fn, cache, args, choice, &p, &ws, &cp));
    const mlakv_decode_args *a = args;
    MLAKV_CHECK_NOT_NULL(fn, a->q);
    MLAKV_CHECK_NOT_NULL(fn, a->indices);
    MLAKV_CHECK_NOT_NULL(fn, a->out);
    if (a->lse == NULL)
        return mlakv_fail(MLAKV_ERR_NULL_POINTER, "%s: args->lse is NULL (required on CUDA)", fn);
    if ((uintptr_t)a->q % 16 != 0)
        return mlakv_fail(MLAKV_ERR_ALIGNMENT, "%s: q must be 16-byte aligned", fn);
    if ((uintptr_t)a->out % 16 != 0 || (uintptr_t)a->lse % 4 != 0 ||
        (uintptr_t)a->indices % 4 != 0 || (a->lengths && (uintptr_t)a->lengths % 4 != 0) ||
        (a->sink && (uintptr_t)a->sink % 4 != 0) ||
        (uintptr_t)a->invalid_index_count % 8 != 0)
        return mlakv_fail(MLAKV_ERR_ALIGNMENT,
                          "%s: out must be 16-byte aligned, lse/indices/lengths/sink 4-byte, "
                          "invalid_index_count 8-byte", fn);
    /* outputs (out, lse, workspace) must not overlap each other or an input: the kernels read
     * the inputs while they write */
    MLAKV_TRY(mlakv_check_decode_aliasing(fn, cache, a, ws > 0 ? workspace : NULL, ws > 0 ? ws : 0));
    if (ws > 0) {
        if (workspace_bytes < ws)
            return mlakv_fail(MLAKV_ERR_BUFFER_TOO_SMALL,
                              "%s: workspace_bytes %zu < %zu needed (mlakv_cuda_decode_workspace_size)",
                              fn, workspace_bytes, ws);
        if (workspace == NULL)
            return mlakv_fail(MLAKV_ERR_NULL_POINTER, "%s: workspace is NULL but %zu bytes are needed",
                              fn, ws);
        if ((uintptr_t)workspace % 16 != 0)
            return mlakv_fail(MLAKV_ERR_ALIGNMENT, "%s: workspace must be 16-byte aligned", fn);
    }

    p.base = (const uint8_t *)cache->base;
    p.block_size = cache->block_size;
    p.block_stride_bytes = cache->block_stride_bytes;
    p.capacity = mlakv_cache_capacity(cache);
    p.blk = mlakv_divider_make(p.block_size);
    p.q = (const __nv_bfloat16 *)a->q;
    p.q_sb = a->q_stride_batch;
    p.q_st = a->q_stride_token;
    p.q_sh = a->q_stride_head;
    p.indices = a->indices;
    p.i_sb = a->indices_stride_batch;
    p.i_st = a->indices_stride_token;
    p.lengths = a->lengths;
    /* the cache's latent scale s_l (1 outside the static NVFP4 records): params.h */
    const float s_l = cache->latent_scale;
    p.sm_scale_log2 = a->sm_scale * s_l * decode::kLog2e;
    p.opaque_zero = 0;
    p.out_scale = s_l;
    p.q_rope_scale = 1.0f / s_l;
    p.q_rope_scaled = s_l != 1.0f;
    p.sink = a->sink;
    p.out = (__nv_bfloat16 *)a->out;
    p.lse = a->lse;
    const size_t rows = (size_t)a->batch * (size_t)a->s_q * (size_t)a->heads;
    p.part_o = ws > 0 ? (float *)workspace : NULL;
    p.part_lse = ws > 0 ? (float *)workspace + (size_t)p.nsplit * rows * decode::kVDim : NULL;

    cudaStream_t s = (cudaStream_t)stream;
    cudaError_t err;
    if (a->invalid_index_count) {
        err = decode::launch_count_invalid(&p, a->invalid_index_count, s);
        if (err != cudaSuccess)
            return mlakv_fail(MLAKV_ERR_CUDA, "%s: invalid-index count kernel launch failed: %s",
                              fn, cudaGetErrorString(err));
    }
    err = cp.kernel->launch[cache->format](&p, cp.pairs, s);
    if (err != cudaSuccess)
        return mlakv_fail(MLAKV_ERR_CUDA, "%s: %s decode kernel launch failed: %s", fn,
                          cp.kernel->name, cudaGetErrorString(err));
    if (p.nsplit > 1) {
        err = decode::launch_combine(&p, cp.combine_by_rows, s);
        if (err != cudaSuccess)
            return mlakv_fail(MLAKV_ERR_CUDA, "%s: combine kernel launch failed: %s", fn,
                              cudaGetErrorString(err));
    }
    return MLAKV_OK;
}

extern "C" mlakv_status mlakv_cuda_sparse_decode(const mlakv_cache *cache,
                                                 const mlakv_decode_args *args, void *workspace,
                                                 size_t workspace_bytes, void *stream) {
    return sparse_decode("mlakv_cuda_sparse_decode", cache, args, NULL, workspace,
                         workspace_bytes, stream);
}

extern "C" mlakv_status mlakv_cuda_sparse_decode_with(const mlakv_cache *cache,
                                                      const mlakv_decode_args *args,
                                                      const mlakv_cuda_decode_choice *choice,
                                                      void *workspace, size_t workspace_bytes,
                                                      void *stream) {
    return sparse_decode("mlakv_cuda_sparse_decode_with", cache, args, choice, workspace,
                         workspace_bytes, stream);
}
