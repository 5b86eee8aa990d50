/* Benchmark of mlakv_cuda_sparse_decode on the current GPU.
 *
 * First measures the two ceilings on this device: device-to-device copy bandwidth (bytes read +
 * written) and the bf16 matrix rate (cuBLAS GemmEx 8192^3, loaded with dlopen so that only this
 * program needs it; an mma.sync register loop of ours when cuBLAS cannot be loaded). Then, for
 * every record format, the four target shapes and sweeps over heads and batch:
 * topk 2048, block size 64, random distinct indices within each request's own 32K-token context,
 * caches rotated so that the records read per call are never L2-resident from the previous call
 * (total cache >= 4x L2). Time = median over replays of a CUDA graph of the decode calls (one
 * per rotation set), divided by the calls per graph. "gather only" rows time the fastest of our
 * gather probes (gather_burst_kernel: every load of a warp in flight at once), which read the same
 * records with no arithmetic: a floor for any kernel that reads them.
 *
 * Usage: cuda_decode [results.md]   (the markdown table is also printed)
 *        cuda_decode --small-heads [results.md]
 *            the kernels that run <= 32 heads side by side (the dispatch table's choice, mma.sync,
 *            the narrow-head kernel with one and two producer pairs), each on the same buffers
 *            and graphs' inputs: b=64 h=16 and b=1 h=16 for every format, b=64 h=32, b=16 h=16,
 *            b=1 h=8 for nvfp4_ds_mla; one table row per (shape, kernel), then a pivot.
 *        cuda_decode --prefill
 *            multi-token reads through the decode entry point: one chunk of T = 8192 query
 *            tokens of one request (b=1, s_q=T, every token its own random top-2048 in a 32K
 *            context) at 16 / 32 / 64 / 128 heads, MTP verify (b=64, s_q=2 and 4, 128 heads) and
 *            b=8 h=64 decode; us per call, us per query token, TFLOP/s.
 *        MLAKV_BENCH_SHAPE=fmt,b,s_q,heads[,topk] cuda_decode   one decode shape (A/B scripts;
 *            topk 2048 unless given: other topk values separate per-CTA fixed costs);
 *            MLAKV_BENCH_KERNEL=<mma|narrow|wide|fp8_wgmma> runs that kernel instead of the
 *            dispatch table's choice
 *        MLAKV_BENCH_GATHER_PATTERNS=1 MLAKV_BENCH_SHAPE=...   the gather probe variants
 *            (access pattern x warps per SM) of that shape's records, no decode.
 *        MLAKV_BENCH_ZERO_LATENT=1 ...   the NVFP4 records' latent nibbles all 0 (a probe of
 *            how much the operands' values move the time). */
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <vector>

#include "cuda_host.h"
#include "gpu_bench.h"
#include "mlakv.h"
#include "mlakv_experimental.h"


static const int BLOCK = 64;
static int CTX = 32768; /* tokens per request (--prefill also runs 128K) */
enum { TOPK_DEFAULT = 2048 };
static int TOPK = TOPK_DEFAULT; /* one-shape runs may set it (MLAKV_BENCH_SHAPE's fifth field) */
/* index pattern: 0 = every row its own TOPK distinct random positions ("independent"); S > 0 =
 * the first S of every row's positions are one random set shared by all rows of the request,
 * the other TOPK - S the row's own (distinct from the shared ones), in random order
 * ("overlapping" with S = 1024) */
static int SHARED = 0;
/* appends to the local `text` / `len` of the caller */
#define OUTF(...) len += (size_t)snprintf(text + len, sizeof text - len, __VA_ARGS__)

/* ---- ceilings ------------------------------------------------------------------------------ */

static double measure_copy_gbs(void) {
    const size_t n = (size_t)2 << 30; /* 2 GiB each way */
    void *a, *b;
    CUDA_OK(cudaMalloc(&a, n));
    CUDA_OK(cudaMalloc(&b, n));
    CUDA_OK(cudaMemset(a, 1, n));
    cudaEvent_t e0, e1;
    CUDA_OK(cudaEventCreate(&e0));
    CUDA_OK(cudaEventCreate(&e1));
    std::vector<float> ts;
    for (int i = 0; i < 8; i++) {
        CUDA_OK(cudaEventRecord(e0));
        CUDA_OK(cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice));
        CUDA_OK(cudaEventRecord(e1));
        CUDA_OK(cudaEventSynchronize(e1));
        float ms;
        CUDA_OK(cudaEventElapsedTime(&ms, e0, e1));
        if (i >= 2) ts.push_back(ms);
    }
    std::sort(ts.begin(), ts.end());
    CUDA_OK(cudaFree(a));
    CUDA_OK(cudaFree(b));
    return 2.0 * n / (ts[ts.size() / 2] * 1e-3) / 1e9;
}

__global__ void fill_bf16(uint16_t *p, size_t n, uint32_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 15; h *= 2246822519u; h ^= h >> 13;
        float v = ((h & 0xFFFF) / 65536.0f - 0.5f) * 2.0f;
        uint32_t u = __float_as_uint(v);
        p[i] = (uint16_t)((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
    }
}

/* cuBLAS through dlopen (types from the public API: cudaDataType / cublasComputeType values). */
typedef int (*cublasCreate_t)(void **);
typedef int (*cublasGemmEx_t)(void *, int, int, int, int, int, const void *, const void *, int,
                              int, const void *, int, int, const void *, void *, int, int, int,
                              int);
static double measure_cublas_tflops(char *how, size_t how_len) {
    const char *names[] = {"libcublas.so", "libcublas.so.13", "libcublas.so.12",
                           "/usr/local/cuda/lib64/libcublas.so", NULL};
    void *lib = NULL;
    for (int i = 0; names[i] && !lib; i++) lib = dlopen(names[i], RTLD_NOW);
    if (!lib) return 0.0;
    cublasCreate_t create = (cublasCreate_t)dlsym(lib, "cublasCreate_v2");
    cublasGemmEx_t gemm = (cublasGemmEx_t)dlsym(lib, "cublasGemmEx");
    if (!create || !gemm) return 0.0;
    void *h = NULL;
    if (create(&h) != 0) return 0.0;
    const int n = 8192;
    uint16_t *A, *B;
    float *C;
    CUDA_OK(cudaMalloc((void **)&A, (size_t)n * n * 2));
    CUDA_OK(cudaMalloc((void **)&B, (size_t)n * n * 2));
    CUDA_OK(cudaMalloc((void **)&C, (size_t)n * n * 4));
    fill_bf16<<<1024, 256>>>(A, (size_t)n * n, 1);
    fill_bf16<<<1024, 256>>>(B, (size_t)n * n, 2);
    const float one = 1.0f, zero = 0.0f;
    /* CUDA_R_16BF = 14, CUDA_R_32F = 0, CUBLAS_COMPUTE_32F = 68, CUBLAS_GEMM_DEFAULT = -1 */
    cudaEvent_t e0, e1;
    CUDA_OK(cudaEventCreate(&e0));
    CUDA_OK(cudaEventCreate(&e1));
    std::vector<float> ts;
    for (int i = 0; i < 12; i++) {
        CUDA_OK(cudaEventRecord(e0));
        int st = gemm(h, 0, 0, n, n, n, &one, A, 14, n, B, 14, n, &zero, C, 0, n, 68, -1);
        CUDA_OK(cudaEventRecord(e1));
        CUDA_OK(cudaEventSynchronize(e1));
        if (st != 0) return 0.0;
        float ms;
        CUDA_OK(cudaEventElapsedTime(&ms, e0, e1));
        if (i >= 2) ts.push_back(ms);
    }
    std::sort(ts.begin(), ts.end());
    CUDA_OK(cudaFree(A));
    CUDA_OK(cudaFree(B));
    CUDA_OK(cudaFree(C));
    snprintf(how, how_len, "cuBLAS GemmEx bf16->fp32 %d^3, random data", n);
    return 2.0 * n * n * (double)n / (ts[ts.size() / 2] * 1e-3) / 1e12;
}

/* Fallback: mma.sync m16n8k16 bf16 issue rate from registers (an upper bound of mma.sync). */
__global__ void mma_loop(float *out, int iters) {
    uint32_t a[4] = {threadIdx.x, threadIdx.x * 3u, threadIdx.x * 5u, threadIdx.x * 7u}, b0 = 0x3F803F80u, b1 = b0;
    float d[4][4] = {};
    for (int i = 0; i < iters; i++) {
#pragma unroll
        for (int k = 0; k < 4; k++)
            asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                         : "+f"(d[k][0]), "+f"(d[k][1]), "+f"(d[k][2]), "+f"(d[k][3])
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
    float s = 0;
    for (int k = 0; k < 4; k++) s += d[k][0] + d[k][1] + d[k][2] + d[k][3];
    if (s == 12345.0f) out[0] = s;
}
static double measure_mma_tflops(int sms) {
    float *o;
    CUDA_OK(cudaMalloc((void **)&o, 4));
    const int iters = 20000, blocks = sms * 4, threads = 256;
    mma_loop<<<blocks, threads>>>(o, 100);
    cudaEvent_t e0, e1;
    CUDA_OK(cudaEventCreate(&e0));
    CUDA_OK(cudaEventCreate(&e1));
    CUDA_OK(cudaEventRecord(e0));
    mma_loop<<<blocks, threads>>>(o, iters);
    CUDA_OK(cudaEventRecord(e1));
    CUDA_OK(cudaEventSynchronize(e1));
    float ms;
    CUDA_OK(cudaEventElapsedTime(&ms, e0, e1));
    CUDA_OK(cudaFree(o));
    double flop = (double)blocks * (threads / 32) * iters * 4 * 2.0 * 16 * 8 * 16;
    return flop / (ms * 1e-3) / 1e12;
}

/* ---- cache and inputs --------------------------------------------------------------------- */

/* Valid random records (no NaN): random payload bytes, scales in a sane range. */
__global__ void fill_records(uint8_t *base, int64_t nrec, int rec, int fmt, uint32_t seed,
                             int zero_latent) {
    for (int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; r < nrec; r += (int64_t)gridDim.x * blockDim.x) {
        uint8_t *p = base + r * rec;
        uint32_t h = (uint32_t)r * 2654435761u ^ seed;
        for (int i = 0; i < rec; i += 4) {
            h ^= h << 13; h ^= h >> 17; h ^= h << 5;
            *(uint32_t *)(p + i) = h;
        }
        if (fmt == MLAKV_FP8_DS_MLA) {
            for (int i = 0; i < 512; i++) if ((p[i] & 0x7F) == 0x7F) p[i] = 0x3F;
            for (int t = 0; t < 4; t++) *(float *)(p + 512 + 4 * t) = 0.01f;
        } else {
            for (int g = 0; g < 32; g++) p[256 + g] = (uint8_t)(0x20 + (p[256 + g] & 0x1F));
            if (zero_latent) memset(p, 0, 256); /* E2M1 code 0: a latent of zeros */
            memset(p + 288, 0, 16);
            if (fmt != MLAKV_NVFP4_DS_MLA) {
                *(float *)(p + 288) = 0.004f;
                if (fmt == MLAKV_NVFP4_FP8_ROPE_TOKEN_SCALE) *(float *)(p + 292) = 0.002f;
                for (int i = 304; i < 368; i++) if ((p[i] & 0x7F) == 0x7F) p[i] = 0x3F;
            }
        }
        if (fmt == MLAKV_FP8_DS_MLA || fmt == MLAKV_NVFP4_DS_MLA) { /* bf16 RoPE, |v| < 2 */
            uint16_t *rp = (uint16_t *)(p + (fmt == MLAKV_FP8_DS_MLA ? 528 : 304));
            for (int j = 0; j < 64; j++) rp[j] = (uint16_t)(0x3C00 | (rp[j] & 0x83FF));
        }
    }
}

typedef struct {
    double us, gbs, tflops;
    int nsplit;
} result;

/* The cache and index sets of one shape: nsets rotations of b requests, each request with its
 * own 32K-token context and s_q rows of TOPK random distinct slots in it; nsets x the records
 * of one set is >= 4x L2, so a graph of one call per set never reads L2-resident records. */
typedef struct {
    uint8_t *cache;
    mlakv_cache dc;
    int32_t *idx; /* nsets x nidx */
    size_t nidx;
    int nsets, rec;
} bench_inputs;

static bench_inputs make_inputs(mlakv_format fmt, int b, int s_q, int h, size_t l2) {
    bench_inputs in;
    const int rec = (int)mlakv_record_bytes(fmt);
    in.rec = rec;
    const size_t set_bytes = (size_t)b * CTX * rec;
    int nsets = (int)std::min<size_t>(16, std::max<size_t>(1, (4 * l2 + set_bytes - 1) / set_bytes));
    /* a prefill chunk reads its context hundreds of times per call: rotation hardly matters,
     * and generating the indices of 16 sets of 8192 rows would take minutes */
    if ((size_t)b * s_q >= 1024) nsets = std::min(nsets, 4);
    in.nsets = nsets;
    const int64_t ctxs = (int64_t)nsets * b;
    const int64_t nblocks = ctxs * CTX / BLOCK;
    CUDA_OK(cudaMalloc((void **)&in.cache, (size_t)nblocks * BLOCK * rec));
    /* MLAKV_BENCH_ZERO_LATENT=1 (NVFP4 records): every latent nibble 0, the same kernels and
     * instructions on zero operands (~1 % faster than random latents at 64 heads) */
    fill_records<<<2048, 128>>>(in.cache, nblocks * BLOCK, rec, fmt, 12345u + fmt,
                                getenv("MLAKV_BENCH_ZERO_LATENT") != NULL);
    CUDA_OK(cudaGetLastError());
    MLAKV_OK_OR_DIE(mlakv_cache_init(&in.dc, in.cache, fmt, nblocks, BLOCK, 0));
    const size_t nidx = (size_t)b * s_q * TOPK;
    in.nidx = nidx;
    CUDA_OK(cudaMalloc((void **)&in.idx, nidx * 4 * nsets));
    std::vector<int32_t> hidx(nidx * nsets);
    std::vector<int32_t> perm(CTX), swaps(TOPK);
    for (int i = 0; i < CTX; i++) perm[i] = i;
    uint64_t st = 0x9E3779B97F4A7C15ull ^ ((uint64_t)b << 32) ^ (uint64_t)h;
    auto rnd = [&](uint64_t n) {
        st ^= st << 13; st ^= st >> 7; st ^= st << 17;
        return (int)(st % n);
    };
    const int shared = std::min(SHARED, TOPK);
    for (int s = 0; s < nsets; s++)
        for (int bb = 0; bb < b; bb++) {
            const int64_t ctx_base = ((int64_t)s * b + bb) * CTX;
            /* partial Fisher-Yates: perm[0, shared) is the request's shared set, then each row
             * draws perm[shared, TOPK) from the rest; swaps undone in reverse order */
            for (int k = 0; k < shared; k++) {
                swaps[k] = k + rnd((uint64_t)(CTX - k));
                std::swap(perm[k], perm[swaps[k]]);
            }
            for (int t = 0; t < s_q; t++) {
                int32_t *row = &hidx[(size_t)s * nidx + ((size_t)bb * s_q + t) * TOPK];
                for (int k = shared; k < TOPK; k++) {
                    swaps[k] = k + rnd((uint64_t)(CTX - k));
                    std::swap(perm[k], perm[swaps[k]]);
                }
                for (int k = 0; k < TOPK; k++) row[k] = (int32_t)(ctx_base + perm[k]);
                if (shared) /* random order within the row */
                    for (int k = TOPK - 1; k > 0; k--) std::swap(row[k], row[rnd((uint64_t)k + 1)]);
                for (int k = TOPK - 1; k >= shared; k--) std::swap(perm[k], perm[swaps[k]]);
            }
            for (int k = shared - 1; k >= 0; k--) std::swap(perm[k], perm[swaps[k]]); /* identity again */
        }
    CUDA_OK(cudaMemcpy(in.idx, hidx.data(), hidx.size() * 4, cudaMemcpyHostToDevice));
    return in;
}

/* Median time per call of a graph holding one call per index set (gpu_bench.h) */
template <typename Call>
static double graph_median_us(int nsets, cudaStream_t stream, Call call) {
    cudaEvent_t e0, e1;
    CUDA_OK(cudaEventCreate(&e0));
    CUDA_OK(cudaEventCreate(&e1));
    const double us = bench_graph_us(e0, e1, stream, nsets, std::max(8, 40 / nsets),
                                     [&](cudaStream_t, int s) { call(s); });
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaEventDestroy(e0));
    CUDA_OK(cudaEventDestroy(e1));
    return us;
}

/* Runs the shape once per kernel choice (mlakv_experimental.h; all zero: the dispatch table's),
 * on the same cache, indices and inputs. */
static std::vector<result> run_shape_multi(mlakv_format fmt, int b, int s_q, int h, size_t l2,
                                           const std::vector<mlakv_cuda_decode_choice> &choices) {
    bench_inputs in = make_inputs(fmt, b, s_q, h, l2);
    const int rec = in.rec, nsets = in.nsets;
    const size_t nidx = in.nidx;
    int32_t *idx = in.idx;
    mlakv_cache dc = in.dc;
    const size_t nq = (size_t)b * s_q * h * 576;
    uint16_t *q;
    CUDA_OK(cudaMalloc((void **)&q, nq * 2));
    fill_bf16<<<1024, 256>>>(q, nq, 7);
    void *out;
    float *lse;
    CUDA_OK(cudaMalloc(&out, (size_t)b * s_q * h * 512 * 2));
    CUDA_OK(cudaMalloc((void **)&lse, (size_t)b * s_q * h * 4));
    mlakv_decode_args a = mlakv_decode_args_default(b, s_q, h, TOPK);
    a.q = q;
    a.out = out;
    a.lse = lse;
    a.sm_scale = 0.13523f;
    std::vector<result> res;
    for (const mlakv_cuda_decode_choice &ch : choices) {
        size_t ws_bytes = 0;
        a.indices = idx;
        MLAKV_OK_OR_DIE(mlakv_cuda_decode_workspace_size_with(&dc, &a, &ch, &ws_bytes));
        void *ws = NULL;
        if (ws_bytes) CUDA_OK(cudaMalloc(&ws, ws_bytes));

        cudaStream_t stream;
        CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
        /* warm-up (module load) outside the graph */
        MLAKV_OK_OR_DIE(mlakv_cuda_sparse_decode_with(&dc, &a, &ch, ws, ws_bytes, stream));
        CUDA_OK(cudaStreamSynchronize(stream));
        const double us = graph_median_us(nsets, stream, [&](int s) {
            a.indices = idx + (size_t)s * nidx;
            MLAKV_OK_OR_DIE(mlakv_cuda_sparse_decode_with(&dc, &a, &ch, ws, ws_bytes, stream));
        });
        result r;
        r.us = us;
        r.gbs = (double)b * s_q * TOPK * rec / (r.us * 1e-6) / 1e9;
        r.tflops = 2.0 * h * b * s_q * (double)TOPK * 1088 / (r.us * 1e-6) / 1e12;
        r.nsplit = ws_bytes ? (int)(ws_bytes / ((size_t)b * s_q * h * 513 * 4)) : 1;
        CUDA_OK(cudaStreamDestroy(stream));
        cudaFree(ws);
        res.push_back(r);
    }
    cudaFree(in.cache), cudaFree(q), cudaFree(idx), cudaFree(out), cudaFree(lse);
    return res;
}

/* Gather probes: the same random record reads as a decode call (every record of every query row
 * once), with no arithmetic; the words are XOR-folded so nothing is eliminated. gather_kernel<0,
 * false> (the former "gather only" probe): a warp takes 32 candidates of one row and reads
 * each record as 16-byte ld.global.cg chunks across the lanes (a warp instruction reads one
 * whole record), 8 records in flight per warp, four rounds.
 * Probe variants (MLAKV_BENCH_GATHER_PATTERNS=1, see main): QUAD 1 = the decode producers'
 * pattern (4 threads per record, a warp instruction reads 64 contiguous bytes of each of 8
 * records, ld.global.nc); LOOP = a grid of one CTA (8 warps) per SM looping over the
 * candidates, as many warps as the decode kernels' producers. */
template <int QUAD, bool LOOP>
__global__ void gather_kernel(const uint8_t *base, int block_shift, int64_t block_stride,
                              int rec, const int32_t *idx, int64_t total, uint32_t *sink) {
    const int lane = threadIdx.x & 31;
    const int64_t w0 = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5;
    /* LOOP: grid-stride over the candidates; otherwise one pass of 32 candidates per warp */
    const int64_t step = LOOP ? (((int64_t)gridDim.x * blockDim.x) >> 5) * 32 : total;
    const int chunks = rec / 16;
    uint32_t acc = 0;
    for (int64_t c0 = w0 * 32; c0 < total; c0 += step) {
        const int32_t mine = c0 + lane < total ? __ldg(idx + c0 + lane) : -1;
        for (int j0 = 0; j0 < 32; j0 += 8) {
            if (QUAD == 0) {
                uint4 v[8][2];
#pragma unroll
                for (int u = 0; u < 8; u++) {
                    const int32_t slot = __shfl_sync(0xFFFFFFFFu, mine, j0 + u);
                    v[u][0] = v[u][1] = make_uint4(0u, 0u, 0u, 0u);
                    if (slot < 0) continue;
                    const uint4 *p = reinterpret_cast<const uint4 *>(
                        base + ((int64_t)slot >> block_shift) * block_stride +
                        ((int64_t)slot & ((1 << block_shift) - 1)) * rec);
                    if (lane < chunks) v[u][0] = __ldcg(p + lane);
                    if (lane + 32 < chunks) v[u][1] = __ldcg(p + lane + 32);
                }
#pragma unroll
                for (int u = 0; u < 8; u++)
                    acc ^= v[u][0].x ^ v[u][0].y ^ v[u][0].z ^ v[u][0].w ^ v[u][1].x ^ v[u][1].y ^
                           v[u][1].z ^ v[u][1].w;
            } else {
                const int32_t slot = __shfl_sync(0xFFFFFFFFu, mine, j0 + (lane & 7));
                const int part = lane >> 3;
                uint4 v[7];
                const uint4 *p = reinterpret_cast<const uint4 *>(
                    base + ((int64_t)(slot < 0 ? 0 : slot) >> block_shift) * block_stride +
                    ((int64_t)(slot < 0 ? 0 : slot) & ((1 << block_shift) - 1)) * rec);
#pragma unroll
                for (int i = 0; i < 7; i++)
                    v[i] = part + 4 * i < chunks && slot >= 0 ? __ldg(p + part + 4 * i) : make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
                for (int i = 0; i < 7; i++) acc ^= v[i].x ^ v[i].y ^ v[i].z ^ v[i].w;
            }
        }
    }
    if (acc == 0x9E3779B9u) sink[0] = acc; /* practically never; keeps the loads */
}

/* Burst gather: every load of a warp issued before any is used, one memory round trip per warp
 * (gather_kernel takes four: 32 candidates, 8 in flight). NREC candidates per warp, a whole
 * record per warp instruction (lanes take 16-byte chunks, CH per lane: records up to 512 B * CH).
 * The "gather only" rows are the faster of NREC = 4 and 16 (12 % faster than gather_kernel
 * at b=64, 65 % at b=1). */
template <int NREC, int CH>
__global__ void gather_burst_kernel(const uint8_t *base, int block_shift, int64_t block_stride,
                                    int rec, const int32_t *idx, int64_t total, uint32_t *sink) {
    const int lane = threadIdx.x & 31;
    const int64_t c0 = ((blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5) * NREC;
    if (c0 >= total) return;
    const int chunks = rec / 16;
    const int32_t mine = lane < NREC && c0 + lane < total ? __ldg(idx + c0 + lane) : -1;
    uint4 v[NREC][CH];
#pragma unroll
    for (int u = 0; u < NREC; u++) {
        const int32_t slot = __shfl_sync(0xFFFFFFFFu, mine, u);
        const uint4 *p = reinterpret_cast<const uint4 *>(
            base + ((int64_t)slot >> block_shift) * block_stride +
            ((int64_t)slot & ((1 << block_shift) - 1)) * rec);
#pragma unroll
        for (int c = 0; c < CH; c++) {
            v[u][c] = make_uint4(0u, 0u, 0u, 0u);
            if (slot >= 0 && lane + 32 * c < chunks) v[u][c] = __ldcg(p + lane + 32 * c);
        }
    }
    uint32_t acc = 0;
#pragma unroll
    for (int u = 0; u < NREC; u++)
#pragma unroll
        for (int c = 0; c < CH; c++) acc ^= v[u][c].x ^ v[u][c].y ^ v[u][c].z ^ v[u][c].w;
    if (acc == 0x9E3779B9u) sink[0] = acc;
}

/* Bulk-copy probe: each thread copies one candidate's record into shared memory with one
 * cp.async.bulk (TMA) on its warp's mbarrier; 32 records per warp in flight, 8 warps per CTA. */
__global__ void __launch_bounds__(256) gather_bulk_kernel(const uint8_t *base, int block_shift,
                                                          int64_t block_stride, int rec,
                                                          const int32_t *idx, int64_t total,
                                                          uint32_t *sink) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    extern __shared__ __align__(128) uint8_t gsm[];
    __shared__ __align__(8) uint64_t bar[8];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    const uint32_t b = (uint32_t)__cvta_generic_to_shared(&bar[warp]);
    if (lane == 0) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(b) : "memory");
    __syncwarp();
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    const int32_t slot = c < total ? __ldg(idx + c) : -1;
    const unsigned valid = __ballot_sync(0xFFFFFFFFu, slot >= 0);
    if (lane == 0)
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(b),
                     "r"(__popc(valid) * rec) : "memory");
    __syncwarp();
    uint8_t *dst = gsm + (size_t)threadIdx.x * rec;
    if (slot >= 0) {
        const uint8_t *src = base + ((int64_t)slot >> block_shift) * block_stride +
                             ((int64_t)slot & ((1 << block_shift) - 1)) * rec;
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                     ::"r"((uint32_t)__cvta_generic_to_shared(dst)), "l"(src), "r"(rec), "r"(b) : "memory");
    }
    asm volatile("{\n.reg .pred p;\nW: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], 0;\n@!p bra W;\n}\n"
                 ::"r"(b) : "memory");
    const uint32_t acc = reinterpret_cast<const uint32_t *>(dst)[lane % (rec / 4)];
    if (acc == 0x9E3779B9u) sink[0] = acc;
#endif
}

/* Median time (us) of a gather probe on run_shape's inputs: launch(cache, block_shift,
 * block_stride, rec, indices, total, sink, stream) issues one probe call over one index set. */
template <typename Launch>
static double time_gather(mlakv_format fmt, int b, int s_q, size_t l2, Launch launch) {
    bench_inputs in = make_inputs(fmt, b, s_q, 16, l2);
    uint32_t *sink;
    CUDA_OK(cudaMalloc((void **)&sink, 4));
    cudaStream_t stream;
    CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    int shift = 0;
    while ((1 << shift) < BLOCK) shift++;
    const int64_t bs = in.dc.block_stride_bytes ? in.dc.block_stride_bytes : (int64_t)BLOCK * in.rec;
    const double us = graph_median_us(in.nsets, stream, [&](int s) {
        launch(in.cache, shift, bs, in.rec, in.idx + (size_t)s * in.nidx, (int64_t)in.nidx, sink, stream);
    });
    CUDA_OK(cudaStreamDestroy(stream));
    cudaFree(in.cache), cudaFree(in.idx), cudaFree(sink);
    return us;
}

/* Median time (us) of a burst (NREC > 0) or bulk (NREC == 0) probe on run_shape's inputs. */
template <int NREC>
static double run_gather_burst(mlakv_format fmt, int b, int s_q, size_t l2) {
    constexpr int R = NREC > 0 ? NREC : 1;
    const size_t smem = (size_t)256 * mlakv_record_bytes(fmt);
    if (NREC == 0)
        CUDA_OK(cudaFuncSetAttribute(gather_bulk_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    return time_gather(fmt, b, s_q, l2, [&](const uint8_t *cache, int shift, int64_t bs, int rec,
                                            const int32_t *ix, int64_t total, uint32_t *sink,
                                            cudaStream_t stream) {
        const unsigned grid = (unsigned)(((total + R - 1) / R * 32 + 255) / 256);
        if (NREC == 0)
            gather_bulk_kernel<<<(unsigned)((total + 255) / 256), 256, smem, stream>>>(
                cache, shift, bs, rec, ix, total, sink);
        else if (rec <= 512)
            gather_burst_kernel<R, 1><<<grid, 256, 0, stream>>>(cache, shift, bs, rec, ix, total, sink);
        else
            gather_burst_kernel<R, 2><<<grid, 256, 0, stream>>>(cache, shift, bs, rec, ix, total, sink);
    });
}

/* Median time (us) of gather_kernel<QUAD, LOOP> on the inputs of run_shape (sms: grid of LOOP). */
template <int QUAD, bool LOOP>
static double run_gather_probe(mlakv_format fmt, int b, int s_q, size_t l2, int sms) {
    return time_gather(fmt, b, s_q, l2, [&](const uint8_t *cache, int shift, int64_t bs, int rec,
                                            const int32_t *ix, int64_t total, uint32_t *sink,
                                            cudaStream_t stream) {
        const int threads = 256;
        const unsigned grid = LOOP ? (unsigned)sms : (unsigned)((total / 32 * 32 + threads - 1) / threads);
        gather_kernel<QUAD, LOOP><<<grid, threads, 0, stream>>>(cache, shift, bs, rec, ix, total, sink);
    });
}

/* The "gather only" rows: the faster of the burst probes with 4 and 16 records per warp over the
 * same inputs as run_shape (us), and its GB/s. */
static result run_gather(mlakv_format fmt, int b, int s_q, size_t l2) {
    result r;
    r.us = std::min(run_gather_burst<4>(fmt, b, s_q, l2), run_gather_burst<16>(fmt, b, s_q, l2));
    r.gbs = (double)b * s_q * TOPK * (double)mlakv_record_bytes(fmt) / (r.us * 1e-6) / 1e9;
    r.tflops = 0;
    r.nsplit = 0;
    return r;
}

/* MLAKV_BENCH_KERNEL=<name> (one-shape runs): the kernel of run_shape's calls */
static mlakv_cuda_decode_choice bench_choice;

static result run_shape(mlakv_format fmt, int b, int s_q, int h, size_t l2,
                        const mlakv_cuda_decode_choice &choice = bench_choice) {
    return run_shape_multi(fmt, b, s_q, h, l2, std::vector<mlakv_cuda_decode_choice>{choice})[0];
}

/* --small-heads: the kernels that run <= 32 heads side by side (see the usage above). */
static int small_heads_main(const char *path, size_t l2) {
    std::vector<const char *> vars = {"table", "mma", "narrow, 1 pair", "narrow, 2 pairs"};
    std::vector<mlakv_cuda_decode_choice> choices(4);
    choices[1].kernel = MLAKV_CUDA_DECODE_MMA;
    choices[2].kernel = choices[3].kernel = MLAKV_CUDA_DECODE_NARROW;
    choices[2].narrow_pairs = 1;
    choices[3].narrow_pairs = 2;
    struct shape { mlakv_format fmt; int b, s_q, h; };
    std::vector<shape> shapes;
    const mlakv_format fmts[] = {MLAKV_NVFP4_DS_MLA, MLAKV_FP8_DS_MLA, MLAKV_NVFP4_FP8_ROPE,
                                 MLAKV_NVFP4_FP8_ROPE_TOKEN_SCALE};
    for (mlakv_format f : fmts) shapes.push_back({f, 64, 1, 16});
    for (mlakv_format f : fmts) shapes.push_back({f, 1, 1, 16});
    shapes.push_back({MLAKV_NVFP4_DS_MLA, 64, 1, 32});
    shapes.push_back({MLAKV_NVFP4_DS_MLA, 16, 1, 16});
    shapes.push_back({MLAKV_NVFP4_DS_MLA, 1, 1, 8});
    static char text[1 << 16];
    size_t len = 0;
    const char *commit = getenv("MLAKV_COMMIT") ? getenv("MLAKV_COMMIT") : "unknown";
    OUTF("# decode kernels at <= 32 heads, commit %s\n\n", commit);
    OUTF("topk %d, block %d, random distinct indices in %d-token contexts, median of CUDA-graph "
         "replays, caches rotated (>= 4x L2)\n\n", TOPK, BLOCK, CTX);
    OUTF("| kernel | format | b | s_q | heads | splits | time us | GB/s records |\n");
    OUTF("|---|---|---|---|---|---|---|---|\n");
    std::vector<std::vector<double>> us(vars.size(), std::vector<double>(shapes.size(), 0.0));
    for (size_t si = 0; si < shapes.size(); si++) {
        const shape &sh = shapes[si];
        std::vector<mlakv_cuda_decode_choice> runs = choices;
        if (sh.fmt == MLAKV_FP8_DS_MLA) runs.resize(2); /* the narrow kernel reads NVFP4 only */
        std::vector<result> rs = run_shape_multi(sh.fmt, sh.b, sh.s_q, sh.h, l2, runs);
        for (size_t vi = 0; vi < rs.size(); vi++) {
            size_t mark = len;
            OUTF("| %s | %s | %d | %d | %d | %d | %.1f | %.0f |\n", vars[vi],
                 mlakv_format_get(sh.fmt)->name, sh.b, sh.s_q, sh.h, rs[vi].nsplit, rs[vi].us,
                 rs[vi].gbs);
            fprintf(stderr, "%s", text + mark);
            us[vi][si] = rs[vi].us;
        }
    }
    /* pivot: one line per variant, time in us per shape (format initials: n4 nvfp4_ds_mla,
     * f8 fp8_ds_mla, rp nvfp4_fp8_rope, ts nvfp4_fp8_rope_token_scale) */
    OUTF("\n| kernel |");
    for (const shape &sh : shapes)
        OUTF(" %s b%d h%d |", sh.fmt == MLAKV_NVFP4_DS_MLA ? "n4" : sh.fmt == MLAKV_FP8_DS_MLA ? "f8"
                              : sh.fmt == MLAKV_NVFP4_FP8_ROPE ? "rp" : "ts", sh.b, sh.h);
    OUTF("\n|---|");
    for (size_t si = 0; si < shapes.size(); si++) OUTF("---|");
    OUTF("\n");
    for (size_t vi = 0; vi < vars.size(); vi++) {
        OUTF("| %s |", vars[vi]);
        for (size_t si = 0; si < shapes.size(); si++) OUTF(" %.1f |", us[vi][si]);
        OUTF("\n");
    }
    fputs(text, stdout);
    if (path) {
        FILE *fp = fopen(path, "w");
        if (fp) {
            fputs(text, fp);
            fclose(fp);
        }
    }
    return 0;
}


int main(int argc, char **argv) {
    if (mlakv_cuda_check_device() != MLAKV_OK) {
        printf("cuda_decode: no usable GPU (%s)\n", mlakv_last_error());
        return 0;
    }
    cudaDeviceProp prop;
    int dev;
    CUDA_OK(cudaGetDevice(&dev));
    CUDA_OK(cudaGetDeviceProperties(&prop, dev));
    if (argc > 1 && strcmp(argv[1], "--small-heads") == 0)
        return small_heads_main(argc > 2 ? argv[2] : NULL, (size_t)prop.l2CacheSize);
    if (argc > 1 && strcmp(argv[1], "--prefill") == 0) {
        const char *commit = getenv("MLAKV_COMMIT") ? getenv("MLAKV_COMMIT") : "unknown";
        const size_t l2 = (size_t)prop.l2CacheSize;
        printf("# multi-token reads through mlakv_cuda_sparse_decode, commit %s, %s\n\n", commit,
               prop.name);
        printf("nvfp4_ds_mla, topk %d, block %d, median of CUDA-graph replays; FLOP = 2 h T topk "
               "(576 + 512). One chunk of T = 8192 query tokens of one request (b=1, s_q=T). "
               "Index patterns: independent = every token its own %d random distinct positions; "
               "overlapping = 1024 positions shared by the whole chunk + 1024 of the token's own, "
               "in random order.\n\n", TOPK, BLOCK, TOPK);
        printf("| context | pattern | b | s_q | heads | us per call | us per query token | TFLOP/s | splits |\n");
        printf("|---:|---|---:|---:|---:|---:|---:|---:|---:|\n");
        const int T = 8192;
        for (int ctx : {32768, 131072})
            for (int shared : {0, 1024})
                for (int h : {16, 32, 64, 128}) {
                    CTX = ctx;
                    SHARED = shared;
                    const result r = run_shape(MLAKV_NVFP4_DS_MLA, 1, T, h, l2);
                    printf("| %dK | %s | 1 | %d | %d | %.1f | %.3f | %.0f | %d |\n", ctx >> 10,
                           shared ? "overlapping" : "independent", T, h, r.us, r.us / T, r.tflops,
                           r.nsplit);
                    fflush(stdout);
                }
        CTX = 32768;
        SHARED = 0;
        printf("\nMTP verify and a small decode batch (each request its own %dK context, "
               "independent indices):\n\n| b | s_q | heads | us per call | us per query token "
               "| TFLOP/s | splits |\n|---:|---:|---:|---:|---:|---:|---:|\n", CTX >> 10);
        const int shapes[][3] = {{64, 2, 128}, {64, 4, 128}, {8, 1, 64}};
        for (const auto &s : shapes) {
            const result r = run_shape(MLAKV_NVFP4_DS_MLA, s[0], s[1], s[2], l2);
            printf("| %d | %d | %d | %.1f | %.3f | %.0f | %d |\n", s[0], s[1], s[2], r.us,
                   r.us / ((double)s[0] * s[1]), r.tflops, r.nsplit);
            fflush(stdout);
        }
        /* A bound on a kernel that reads the union of G neighbouring tokens' candidates once for
         * all G (per-token masks aside): the decode kernels with G h heads per row over T / G
         * rows of 1024 shared + G x 1024 own positions (the overlapping pattern's union; own sets
         * drawn disjoint, so the union is at most ~3 % larger than the pattern's). */
        printf("\nUnion of G overlapping tokens read once (bound, masks not applied): T / G rows "
               "of G h heads over 1024 + G x 1024 candidates, 32K context; us per query token "
               "and TFLOP/s of the useful work (2048 candidates per token):\n\n"
               "| heads h | G | rows | heads per row | candidates | us per call | us per query token | useful TFLOP/s |\n"
               "|---:|---:|---:|---:|---:|---:|---:|---:|\n");
        const int unions[][2] = {{16, 2}, {16, 4}, {32, 2}, {8, 4}, {8, 8}, {64, 2}};
        for (const auto &u : unions) {
            const int h = u[0], G = u[1];
            SHARED = 1024;
            TOPK = 1024 + G * 1024;
            const result r = run_shape(MLAKV_NVFP4_DS_MLA, 1, T / G, G * h, l2);
            printf("| %d | %d | %d | %d | %d | %.1f | %.3f | %.0f |\n", h, G, T / G, G * h, TOPK,
                   r.us, r.us / T, 2.0 * h * T * 2048.0 * 1088 / (r.us * 1e-6) / 1e12);
            fflush(stdout);
        }
        TOPK = TOPK_DEFAULT;
        SHARED = 0;
        printf("\nThe same rows with 8 heads for reference (T = 8192, overlapping, 32K):\n\n");
        {
            SHARED = 1024;
            const result r = run_shape(MLAKV_NVFP4_DS_MLA, 1, T, 8, l2);
            printf("| 8 heads | %.1f us per call | %.3f us per query token |\n", r.us, r.us / T);
            SHARED = 0;
        }
        return 0;
    }
    if (getenv("MLAKV_BENCH_KERNEL"))
        MLAKV_OK_OR_DIE(mlakv_cuda_decode_kernel_from_name(getenv("MLAKV_BENCH_KERNEL"),
                                                           &bench_choice.kernel));
    const char *one = getenv("MLAKV_BENCH_SHAPE"); /* "format,b,s_q,heads": one shape only */
    if (one && getenv("MLAKV_BENCH_GATHER_PATTERNS")) { /* gather_kernel variants */
        int f, b, s_q, h;
        if (sscanf(one, "%d,%d,%d,%d", &f, &b, &s_q, &h) != 4) return 1;
        const mlakv_format fm = (mlakv_format)f;
        const size_t l2 = (size_t)prop.l2CacheSize;
        const int sms = prop.multiProcessorCount;
        const double bytes = (double)b * s_q * TOPK * (double)mlakv_record_bytes(fm);
        const double t[4] = {run_gather_probe<0, false>(fm, b, s_q, l2, sms),
                             run_gather_probe<1, false>(fm, b, s_q, l2, sms),
                             run_gather_probe<0, true>(fm, b, s_q, l2, sms),
                             run_gather_probe<1, true>(fm, b, s_q, l2, sms)};
        const char *names[4] = {"whole record per instruction, .cg, 1 warp per 32 candidates",
                                "4 threads per record, .nc, 1 warp per 32 candidates",
                                "whole record per instruction, .cg, 8 warps per SM",
                                "4 threads per record, .nc, 8 warps per SM"};
        for (int i = 0; i < 4; i++)
            printf("gather probe %s b=%d s_q=%d: %-62s %.1f us, %.0f GB/s\n",
                   mlakv_format_get(fm)->name, b, s_q, names[i], t[i], bytes / (t[i] * 1e-6) / 1e9);
        {
            const double tb[3] = {run_gather_burst<4>(fm, b, s_q, l2), run_gather_burst<8>(fm, b, s_q, l2),
                                  run_gather_burst<16>(fm, b, s_q, l2)};
            const int nrec[3] = {4, 8, 16};
            for (int i = 0; i < 3; i++)
                printf("gather probe %s b=%d s_q=%d: burst, %2d records per warp all in flight, .cg%*s %.1f us, %.0f GB/s\n",
                       mlakv_format_get(fm)->name, b, s_q, nrec[i], 14, "", tb[i], bytes / (tb[i] * 1e-6) / 1e9);
        }
        if (prop.major >= 9) {
            const double tb = run_gather_burst<0>(fm, b, s_q, l2);
            printf("gather probe %s b=%d s_q=%d: bulk copy per record, 256 per CTA in flight%*s %.1f us, %.0f GB/s\n",
                   mlakv_format_get(fm)->name, b, s_q, 14, "", tb, bytes / (tb * 1e-6) / 1e9);
        }
        return 0;
    }
    if (one) {
        int f, b, s_q, h, k = TOPK;
        if (sscanf(one, "%d,%d,%d,%d,%d", &f, &b, &s_q, &h, &k) < 4 || k < 1 || k > CTX) return 1;
        TOPK = k;
        result r = run_shape((mlakv_format)f, b, s_q, h, (size_t)prop.l2CacheSize);
        char tk[32] = "";
        if (k != TOPK_DEFAULT) snprintf(tk, sizeof tk, " topk=%d", k);
        printf("%s b=%d s_q=%d h=%d%s: %.1f us, %.0f GB/s, %.1f TFLOP/s, %d splits\n",
               mlakv_format_get((mlakv_format)f)->name, b, s_q, h, tk, r.us, r.gbs, r.tflops,
               r.nsplit);
        return 0;
    }
    const double copy_gbs = measure_copy_gbs();
    char how[128] = "";
    double mat_tflops = measure_cublas_tflops(how, sizeof how);
    if (mat_tflops <= 0) {
        mat_tflops = measure_mma_tflops(prop.multiProcessorCount);
        snprintf(how, sizeof how, "mma.sync m16n8k16 register loop (cuBLAS not loadable)");
    }
    char text[1 << 16];
    size_t len = 0;
    time_t now = time(NULL);
    char date[32];
    strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", gmtime(&now));
    const char *commit = getenv("MLAKV_COMMIT") ? getenv("MLAKV_COMMIT") : "unknown";
    OUTF("# mlakv CUDA sparse decode benchmark\n\n");
    OUTF("- date: %s\n- commit: %s\n- device: %s, %d SMs, L2 %d MB\n", date, commit, prop.name,
         prop.multiProcessorCount, prop.l2CacheSize >> 20);
    OUTF("- measured copy bandwidth (D2D, read+write): %.0f GB/s\n", copy_gbs);
    OUTF("- measured bf16 matrix rate: %.0f TFLOP/s (%s)\n", mat_tflops, how);
    OUTF("- topk %d, block %d, random distinct indices in each request's %d-token context, "
         "median of CUDA-graph replays, caches rotated (>= 4x L2)\n\n", TOPK, BLOCK, CTX);
    OUTF("| set | format | b | s_q | heads | splits | time us | GB/s records | %% copy BW | TFLOP/s | %% matrix |\n");
    OUTF("|---|---|---|---|---|---|---|---|---|---|---|\n");
    struct shape { const char *set; int b, s_q, h; };
    std::vector<shape> shapes = {{"target", 64, 1, 16}, {"target", 1, 1, 16},
                                 {"target", 128, 1, 64}, {"target", 128, 2, 128}};
    const size_t l2 = (size_t)prop.l2CacheSize;
    /* 2 s of decode calls, untimed: right after the matrix-rate GEMM the first rows of the table
     * measured 3-4 % slower than the same shapes later in it or alone */
    for (auto t0 = std::chrono::steady_clock::now();
         std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2);)
        (void)run_shape(MLAKV_NVFP4_DS_MLA, 128, 1, 64, l2);
    for (int f = 0; f < MLAKV_FORMAT_COUNT; f++) {
        mlakv_format fmt = (mlakv_format)(f == 0 ? 1 : f == 1 ? 0 : f);
        for (const shape &s : shapes) {
            result r = run_shape(fmt, s.b, s.s_q, s.h, l2);
            size_t mark = len;
            OUTF("| %s | %s | %d | %d | %d | %d | %.1f | %.0f | %.0f | %.1f | %.0f |\n", s.set,
                 mlakv_format_get(fmt)->name, s.b, s.s_q, s.h, r.nsplit, r.us, r.gbs,
                 100 * r.gbs / copy_gbs, r.tflops, 100 * r.tflops / mat_tflops);
            fprintf(stderr, "%s", text + mark); /* progress */
        }
    }
    /* the gather ceiling of the target shapes (the heads do not change the records read) */
    {
        const int gs[][2] = {{64, 1}, {1, 1}, {128, 1}, {128, 2}};
        for (int f = 0; f < MLAKV_FORMAT_COUNT; f++)
            for (const auto &g : gs) {
                result r = run_gather((mlakv_format)f, g[0], g[1], l2);
                size_t mark = len;
                OUTF("| gather only | %s | %d | %d | - | - | %.1f | %.0f | %.0f | - | - |\n",
                     mlakv_format_get((mlakv_format)f)->name, g[0], g[1], r.us, r.gbs,
                     100 * r.gbs / copy_gbs);
                fprintf(stderr, "%s", text + mark);
            }
    }
    /* A/B: shapes again with the mma.sync kernel forced (the default on sm_90a is a wgmma
     * kernel: the wide-head or fp8 kernel above 32 heads, the narrow-head kernel at <= 32 NVFP4
     * heads; src/cuda/decode/dispatch.cu) */
    {
        const shape ab[] = {{"mma.sync", 128, 1, 64}, {"mma.sync", 128, 2, 128}, {"mma.sync", 64, 1, 96},
                            {"mma.sync", 64, 1, 64}, {"mma.sync", 1, 1, 64}, {"mma.sync", 64, 1, 16},
                            {"mma.sync", 1, 1, 16}, {"mma.sync", 16, 1, 16}, {"mma.sync", 64, 1, 32}};
        const mlakv_format ab_fmts[] = {MLAKV_NVFP4_DS_MLA, MLAKV_FP8_DS_MLA};
        for (mlakv_format fmt : ab_fmts)
            for (const shape &s : ab) {
                if (fmt == MLAKV_FP8_DS_MLA && s.h <= 32) continue; /* mma.sync is its default */
                for (int forced = 0; forced < 2; forced++) {
                    mlakv_cuda_decode_choice ch = {};
                    if (forced) ch.kernel = MLAKV_CUDA_DECODE_MMA;
                    result r = run_shape(fmt, s.b, s.s_q, s.h, l2, ch);
                    size_t mark = len;
                    OUTF("| %s | %s | %d | %d | %d | %d | %.1f | %.0f | %.0f | %.1f | %.0f |\n",
                         forced ? "mma.sync" : "default", mlakv_format_get(fmt)->name, s.b, s.s_q,
                         s.h, r.nsplit, r.us, r.gbs, 100 * r.gbs / copy_gbs, r.tflops,
                         100 * r.tflops / mat_tflops);
                    fprintf(stderr, "%s", text + mark);
                }
            }
    }
    const int heads_sweep[] = {1, 8, 16, 32, 64, 128};
    const int batch_sweep[] = {1, 4, 16, 32, 128};
    const mlakv_format sweep_fmts[] = {MLAKV_NVFP4_DS_MLA, MLAKV_FP8_DS_MLA};
    for (mlakv_format fmt : sweep_fmts) {
        for (int h : heads_sweep) {
            result r = run_shape(fmt, 64, 1, h, l2);
            OUTF("| heads | %s | 64 | 1 | %d | %d | %.1f | %.0f | %.0f | %.1f | %.0f |\n",
                 mlakv_format_get(fmt)->name, h, r.nsplit, r.us, r.gbs, 100 * r.gbs / copy_gbs,
                 r.tflops, 100 * r.tflops / mat_tflops);
        }
        for (int b : batch_sweep) {
            result r = run_shape(fmt, b, 1, 16, l2);
            OUTF("| batch | %s | %d | 1 | 16 | %d | %.1f | %.0f | %.0f | %.1f | %.0f |\n",
                 mlakv_format_get(fmt)->name, b, r.nsplit, r.us, r.gbs, 100 * r.gbs / copy_gbs,
                 r.tflops, 100 * r.tflops / mat_tflops);
        }
    }
    fputs(text, stdout);
    if (argc > 1) {
        FILE *fp = fopen(argv[1], "w");
        if (fp) {
            fputs(text, fp);
            fclose(fp);
        }
    }
    return 0;
}
