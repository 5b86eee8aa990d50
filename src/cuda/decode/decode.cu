/* Host side of the CUDA sparse MLA decode: argument validation, the split-KV plan, workspace
 * sizing and the launches (decode kernel, then the combine kernel when the candidate list is
 * split). No allocation, no host synchronization: capturable in a CUDA graph. */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "cache/cache.h"
#include "cpu/cpu.h"
}
#include "cuda/cuda_common.cuh"
#include "cuda/decode/config.h"
#include "cuda/decode/decode_kernel.cuh"
#include "cuda/decode/params.h"
#include "cuda/decode/sm90/decode_sm90.h"
#include "mlakv.h"

/* Tile plan of the mma.sync kernel for (format, head groups, small-head kernel variant kv):
 * shared memory bytes, candidates per tile, CTAs per SM it is built for. */
typedef struct {
    size_t smem;
    int nk, minb;
} dec_tile_plan;

template <int F, int HG, int V>
static dec_tile_plan tile_plan_of() {
    dec_tile_plan t;
    t.smem = mlakv_dec_shape<F, HG, V>::SMEM;
    t.nk = mlakv_dec_tile<HG, V>::NK;
    t.minb = mlakv_dec_tile<HG, V>::MINB;
    return t;
}

template <int F, int HG>
static dec_tile_plan tile_plan_hg(int kv) {
    switch (kv) {
        case 1: return tile_plan_of<F, HG, 1>();
        case 2: return tile_plan_of<F, HG, 2>();
        case 3: return tile_plan_of<F, HG, 3>();
        default: return tile_plan_of<F, HG, 0>();
    }
}

template <int F>
static dec_tile_plan tile_plan_f(int hg, int kv) {
    if (hg == 1) return tile_plan_hg<F, 1>(kv);
    if (hg == 2) return tile_plan_hg<F, 2>(kv);
    return tile_plan_of<F, MLAKV_DEC_MAX_HG, 0>();
}

static dec_tile_plan tile_plan(mlakv_format f, int hg, int kv) {
    switch (f) {
        case MLAKV_FP8_DS_MLA: return tile_plan_f<0>(hg, kv);
        case MLAKV_NVFP4_DS_MLA: return tile_plan_f<1>(hg, kv);
        default: return tile_plan_f<2>(hg, kv); /* both 368-B formats */
    }
}

/* Small-head variant (<= 32 heads, config.h MLAKV_DEC_SMALL_*): MLAKV_CUDA_DECODE_SMALL=<name>
 * picks one (benchmarks and tests compare them), read at each call; unset or unknown: the
 * default. *kv: the kernel variant, *min_tps: the least tiles per split in the plan. */
static const char *const small_names[MLAKV_DEC_SMALL_COUNT] = {"base", "qreg", "nk16", "nk16q",
                                                               "tps2"};
static void small_variant(int *kv, int *min_tps) {
    int v = MLAKV_DEC_SMALL_DEFAULT;
    const char *e = getenv("MLAKV_CUDA_DECODE_SMALL");
    if (e)
        for (int i = 0; i < MLAKV_DEC_SMALL_COUNT; i++)
            if (strcmp(e, small_names[i]) == 0) v = i;
    *kv = v == 4 ? 0 : v;
    *min_tps = v == 4 ? 2 : 1;
}

/* The sm_90a kernels run on cc 9.0 devices when this build has sm_90a code. */
static bool sm90a_device(int cc_major) {
#ifdef MLAKV_CUDA_ARCH_LIST
    if (strstr(MLAKV_CUDA_ARCH_LIST, "90a") == NULL) return false;
#endif
    return cc_major == 9;
}

/* MLAKV_CUDA_DECODE_KERNEL=<name> forces a kernel family (benchmarks and tests compare). */
static bool kernel_forced(const char *name) {
    const char *e = getenv("MLAKV_CUDA_DECODE_KERNEL");
    return e != NULL && strcmp(e, name) == 0;
}

/* The wgmma kernel (sm90/) runs 64-head blocks (head_groups 4) on cc 9.0 devices when this
 * build has sm_90a code; the workspace and split plan are the same as the mma.sync kernel's.
 * MLAKV_CUDA_DECODE_KERNEL=mma or =wgmma forces one kernel (benchmarks and tests compare). */
static bool use_sm90(int cc_major, const mlakv_decode_params *p) {
    if (!sm90a_device(cc_major) || p->head_groups != MLAKV_DEC_MAX_HG) return false;
    if (kernel_forced("mma")) return false;
    if (kernel_forced("wgmma")) return true;
    return p->heads >= MLAKV_DEC90_MIN_HEADS;
}

/* The small-head sm_90a kernels (<= 32 heads, NVFP4 records, cc 9.0 devices, builds with sm_90a
 * code): SMALL90_S5 (sm90/decode_sm90_small.cuh) is the default where it measured faster than
 * the mma.sync kernel (bench/NOTES_decode.md, D6: from MLAKV_DEC90S_MIN_ROWS query rows);
 * SMALL90_T90 (sm90/decode_t90.cuh, T1) only when forced. With one query row and 9..32 heads the
 * mma.sync kernel (32-record tiles: twice the splits) measured as fast or faster (D7), so it
 * keeps those shapes. MLAKV_CUDA_DECODE_KERNEL=s5 or =t90 forces one on every shape it covers,
 * =mma (or an explicit mma.sync small-head variant, MLAKV_CUDA_DECODE_SMALL=<name>) the
 * mma.sync kernel (A/B benchmarks, tests). */
enum { SMALL90_NONE = 0, SMALL90_T90 = 1, SMALL90_S5 = 2 };
static int small90_kernel(int cc_major, mlakv_format f, const mlakv_decode_args *a) {
    if (!sm90a_device(cc_major) || a->heads > 32 || f == MLAKV_FP8_DS_MLA) return SMALL90_NONE;
    if (kernel_forced("mma")) return SMALL90_NONE;
    /* t90 has no two-level instance: engine mode applies that record's token scale to S and P
     * (src/cpu/attention.c), which s5 implements and t90 does not */
    if (kernel_forced("t90")) return f == MLAKV_NVFP4_FP8_ROPE_TOKEN_SCALE ? SMALL90_S5 : SMALL90_T90;
    if (kernel_forced("s5")) return SMALL90_S5;
    if (getenv("MLAKV_CUDA_DECODE_SMALL")) return SMALL90_NONE;
    return a->batch * a->s_q >= MLAKV_DEC90S_MIN_ROWS || a->heads <= MLAKV_DEC90S_ONE_ROW_HEADS
               ? SMALL90_S5
               : SMALL90_NONE;
}

/* Everything but pointers: validates args and fills the plan (shape, splits, workspace). */
static mlakv_status plan_decode(const char *fn, const mlakv_cache *cache,
                                const mlakv_decode_args *a, mlakv_decode_params *p,
                                size_t *ws_bytes, int *cc_major, int *kv_out, int *small90_out) {
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
    if ((uintptr_t)cache->base % 16 != 0 || cache->block_stride_bytes % 16 != 0)
        return mlakv_fail(MLAKV_ERR_ALIGNMENT,
                          "%s: cache base and block_stride_bytes must be 16-byte aligned", fn);

    int sms = 0, cc = 0;
    MLAKV_TRY(mlakv_cuda_device_ready(fn, &sms, &cc));
    if (cc_major) *cc_major = cc;

    const int hg_total = (int)((a->heads + 15) / 16);
    const int hg = hg_total == 1 ? 1 : hg_total == 2 ? 2 : MLAKV_DEC_MAX_HG;
    /* the small-head variant (1 or 2 head groups); above, always the base tiles (the
     * wgmma kernel plans with the same tile, sm90/) */
    int kv = 0, min_tps = 1;
    if (hg <= 2) small_variant(&kv, &min_tps);
    if (kv_out) *kv_out = kv;
    const int small90 = small90_kernel(cc, cache->format, a);
    if (small90_out) *small90_out = small90;
    int nk, per_sm;
    if (small90 != SMALL90_NONE) { /* one CTA for all heads, 64-candidate tiles; t90: 2 CTAs per
                                      SM (decode_t90.cuh), s5: 1 (decode_sm90_small.cuh) */
        nk = small90 == SMALL90_T90 ? MLAKV_T90_NK : MLAKV_DEC90S_NK;
        per_sm = small90 == SMALL90_T90 ? MLAKV_T90_MINB : 1;
        min_tps = 1;
    } else {
        const dec_tile_plan tp = tile_plan(cache->format, hg, kv);
        nk = tp.nk;
        per_sm = (int)((228 * 1024) / (tp.smem + 1024));
        if (per_sm > tp.minb) per_sm = tp.minb;
        if (per_sm < 1) per_sm = 1;
    }

    p->heads = (int)a->heads;
    p->batch = (int)a->batch;
    p->s_q = (int)a->s_q;
    p->topk = (int)a->topk;
    p->head_groups = hg;
    p->head_blocks = (hg_total + hg - 1) / hg;
    const int64_t base_ctas = a->batch * a->s_q * p->head_blocks;
    const int64_t tiles = (a->topk + nk - 1) / nk;
    int64_t nsplit = (int64_t)sms * per_sm / base_ctas;
    if (nsplit > tiles) nsplit = tiles;
    if (nsplit > MLAKV_DEC_MAX_SPLITS) nsplit = MLAKV_DEC_MAX_SPLITS;
    if (min_tps > 1 && nsplit > tiles / min_tps) nsplit = tiles / min_tps;
    if (nsplit < 1) nsplit = 1;
    const int64_t tps = (tiles + nsplit - 1) / nsplit;
    nsplit = (tiles + tps - 1) / tps;
    p->nsplit = (int)nsplit;
    p->tiles_per_split = (int)tps;

    *ws_bytes = 0;
    if (nsplit > 1) {
        const size_t rows = (size_t)a->batch * (size_t)a->s_q * (size_t)a->heads;
        *ws_bytes = (size_t)nsplit * rows * (MLAKV_DEC_V + 1) * sizeof(float);
    }
    return MLAKV_OK;
}

extern "C" mlakv_status mlakv_cuda_decode_workspace_size(const mlakv_cache *cache,
                                                         const mlakv_decode_args *args,
                                                         size_t *bytes) {
    static const char fn[] = "mlakv_cuda_decode_workspace_size";
    MLAKV_CHECK_NOT_NULL(fn, bytes);
    mlakv_decode_params p;
    size_t ws = 0;
    MLAKV_TRY(plan_decode(fn, cache, args, &p, &ws, NULL, NULL, NULL));
    *bytes = ws;
    return MLAKV_OK;
}

extern "C" mlakv_status mlakv_cuda_sparse_decode(const mlakv_cache *cache,
                                                 const mlakv_decode_args *args, void *workspace,
                                                 size_t workspace_bytes, void *stream) {
    static const char fn[] = "mlakv_cuda_sparse_decode";
    mlakv_decode_params p;
    size_t ws = 0;
    int cc_major = 0, kv = 0, small90 = SMALL90_NONE;
    MLAKV_TRY(plan_decode(fn, cache, args, &p, &ws, &cc_major, &kv, &small90));
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
        (a->sink && (uintptr_t)a->sink % 4 != 0))
        return mlakv_fail(MLAKV_ERR_ALIGNMENT,
                          "%s: out must be 16-byte aligned, lse/indices/lengths/sink 4-byte", fn);
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
    p.sm_scale_log2 = a->sm_scale * MLAKV_LOG2E;
    {
        /* diagnostics: decode_t90.cuh, sm90/decode_sm90_direct.cuh */
        const char *e = getenv(small90 == SMALL90_T90 ? "MLAKV_T90_MODE" : "MLAKV_V5_DIAG");
        p.diag = e ? atoi(e) : 0;
        if (p.diag < 0) p.diag = 0; /* v5 builds a run-time zero from its sign bit */
    }
    p.sink = a->sink;
    p.out = (__nv_bfloat16 *)a->out;
    p.lse = a->lse;
    const size_t rows = (size_t)a->batch * (size_t)a->s_q * (size_t)a->heads;
    p.part_o = ws > 0 ? (float *)workspace : NULL;
    p.part_lse = ws > 0 ? (float *)workspace + (size_t)p.nsplit * rows * MLAKV_DEC_V : NULL;

    cudaStream_t s = (cudaStream_t)stream;
    cudaError_t err;
    if (small90 == SMALL90_S5) {
        switch (cache->format) {
            case MLAKV_NVFP4_DS_MLA: err = mlakv_decode90s_launch_nvfp4_ds_mla(&p, s); break;
            case MLAKV_NVFP4_FP8_ROPE: err = mlakv_decode90s_launch_nvfp4_fp8_rope(&p, s); break;
            default: err = mlakv_decode90s_launch_nvfp4_token_scale(&p, s); break;
        }
    } else if (small90 == SMALL90_T90) {
        switch (cache->format) {
            case MLAKV_NVFP4_DS_MLA: err = mlakv_decode_t90_launch_nvfp4_ds_mla(&p, s); break;
            case MLAKV_NVFP4_FP8_ROPE: err = mlakv_decode_t90_launch_nvfp4_fp8_rope(&p, s); break;
            default: err = cudaErrorInvalidValue; break; /* the two-level record runs s5 */
        }
    } else if (use_sm90(cc_major, &p)) {
        switch (cache->format) {
            case MLAKV_FP8_DS_MLA: err = mlakv_decode90_launch_fp8_ds_mla(&p, s); break;
            case MLAKV_NVFP4_DS_MLA: err = mlakv_decode90_launch_nvfp4_ds_mla(&p, s); break;
            case MLAKV_NVFP4_FP8_ROPE: err = mlakv_decode90_launch_nvfp4_fp8_rope(&p, s); break;
            default: err = mlakv_decode90_launch_nvfp4_token_scale(&p, s); break;
        }
    } else switch (cache->format) {
        case MLAKV_FP8_DS_MLA: err = mlakv_decode_launch_var_fp8_ds_mla(&p, kv, s); break;
        case MLAKV_NVFP4_DS_MLA: err = mlakv_decode_launch_var_nvfp4_ds_mla(&p, kv, s); break;
        case MLAKV_NVFP4_FP8_ROPE: err = mlakv_decode_launch_var_nvfp4_fp8_rope(&p, kv, s); break;
        default: err = mlakv_decode_launch_var_nvfp4_token_scale(&p, kv, s); break;
    }
    if (err != cudaSuccess)
        return mlakv_fail(MLAKV_ERR_CUDA, "%s: decode kernel launch failed: %s", fn,
                          cudaGetErrorString(err));
    if (p.nsplit > 1) {
        err = mlakv_decode_launch_combine(&p, s);
        if (err != cudaSuccess)
            return mlakv_fail(MLAKV_ERR_CUDA, "%s: combine kernel launch failed: %s", fn,
                              cudaGetErrorString(err));
    }
    return MLAKV_OK;
}
