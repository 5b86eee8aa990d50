/* wgmma (sm_90a) variant of the sparse MLA decode, used for 33..128 heads on cc 9.0 devices
 * (dispatch: decode.cu; numerics identical to decode_kernel.cuh's engine mode).
 *
 * One CTA = one query row (b, t), a block of 64 heads (rows past `heads` are zero queries,
 * never written) and one split of the candidate list; 2 warpgroups (256 threads). Per tile of
 * NK = 64 candidates:
 *   1. all threads de-quantize the tile's records (gathered earlier with cp.async) into a bf16
 *      K tile [64 x 576] laid out in the wgmma canonical 128-byte-swizzled form (nine 64-column
 *      blocks of 64 rows x 128 B, 16-byte chunk c of row r at chunk c ^ (r & 7)), then
 *      fence.proxy.async + barrier;
 *   2. warpgroup w computes S_w = Q K[32w .. 32w+32)^T with wgmma m64n32k16 (Q [64 x 576] in
 *      the same swizzled form, loaded once; both operands K-major from shared memory);
 *   3. online softmax on the accumulator fragments (fp32, log2 domain): row maxima exchanged
 *      between the two warpgroups through shared memory, P rounded to bf16 and stored into a
 *      swizzled [64 x 64] tile, each warpgroup keeping the row sums of its own 32 columns;
 *   4. warpgroup w computes O[:, 256w .. 256w+256) += P V with wgmma m64n256k16, A = P from
 *      shared memory, B = V = the same K tile's first 512 columns read MN-major (transpose
 *      bit), so one de-quantized tile serves both products. O: 128 fp32 registers per thread.
 * The result goes out directly (one split) or as an fp32 partial for the combine kernel, in the
 * same formats as the mma.sync kernel. */
#ifndef MLAKV_CUDA_DECODE_SM90_CUH
#define MLAKV_CUDA_DECODE_SM90_CUH

#include <stdlib.h>
#include <string.h>

#include "cuda/decode/decode_kernel.cuh"
#include "cuda/decode/sm90/decode_sm90.h"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define MLAKV_DEC90_DEVICE 1 /* the sm_90a pass: wgmma available */
#endif

/* Per-tile timeline, builds with -DMLAKV_DEC90_TRACE=1 only (benchmarks; bench/cuda_decode with
 * MLAKV_BENCH_TRACE=s5|v5 prints it): globaltimer stamps (ns) of the CTAs with blockIdx.x 0..3,
 * y 0, z 0 (query rows 0..3, head block 0, split 0; v5 with more than 64 heads puts the head
 * blocks of a row next to each other in x, so there they are rows 0..1 x head blocks 0..1),
 * tiles < 64, 8 events per tile written by one lane of the warpgroup named in the kernel (s5:
 * decode_sm90_small.cuh, v5: decode_sm90_direct.cuh). One buffer per .cu file; the
 * nvfp4_ds_mla files export a reader. */
#ifndef MLAKV_DEC90_TRACE
#define MLAKV_DEC90_TRACE 0
#endif
#define MLAKV_DEC90_TRACE_ROWS 4
#define MLAKV_DEC90_TRACE_TILES 64
#define MLAKV_DEC90_TRACE_EVENTS 8
#if MLAKV_DEC90_TRACE
__device__ unsigned long long
    mlakv_dec90_trace_buf[MLAKV_DEC90_TRACE_ROWS * MLAKV_DEC90_TRACE_TILES * MLAKV_DEC90_TRACE_EVENTS];
#endif
#if MLAKV_DEC90_TRACE && defined(MLAKV_DEC90_DEVICE)
__device__ __forceinline__ void mlakv_dec90_stamp(int tile, int ev, bool leader) {
    if (!leader || blockIdx.x >= MLAKV_DEC90_TRACE_ROWS || blockIdx.y != 0 || blockIdx.z != 0 ||
        tile < 0 || tile >= MLAKV_DEC90_TRACE_TILES)
        return;
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t)::"memory");
    mlakv_dec90_trace_buf[(blockIdx.x * MLAKV_DEC90_TRACE_TILES + tile) * MLAKV_DEC90_TRACE_EVENTS + ev] = t;
}
#define MLAKV_DEC90_STAMP(tile, ev, leader) mlakv_dec90_stamp(tile, ev, leader)
#else
#define MLAKV_DEC90_STAMP(tile, ev, leader) ((void)0)
#endif
/* Per-CTA timeline of the same builds (v5, s5): globaltimer stamps of every CTA whose linear block
 * index is below MLAKV_DEC90_TRACE_CTAS, MLAKV_DEC90_TRACE_CEV slots each (events: the kernel,
 * decode_sm90_direct.cuh, decode_sm90_small.cuh); the last slot holds the SM id and the CTA's
 * tile count. */
#define MLAKV_DEC90_TRACE_CTAS 2048
#define MLAKV_DEC90_TRACE_CEV 8
#if MLAKV_DEC90_TRACE
__device__ unsigned long long mlakv_dec90_cta_buf[MLAKV_DEC90_TRACE_CTAS * MLAKV_DEC90_TRACE_CEV];
#endif
#if MLAKV_DEC90_TRACE && defined(MLAKV_DEC90_DEVICE)
__device__ __forceinline__ void mlakv_dec90_cta_stamp(int ev, bool leader, unsigned long long v) {
    const unsigned cta = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    if (!leader || cta >= MLAKV_DEC90_TRACE_CTAS) return;
    unsigned long long t = v;
    if (ev < MLAKV_DEC90_TRACE_CEV - 1) asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t)::"memory");
    mlakv_dec90_cta_buf[cta * MLAKV_DEC90_TRACE_CEV + ev] = t;
}
/* the last slot: the SM id and the CTA's tile count */
__device__ __forceinline__ void mlakv_dec90_cta_stamp_sm(bool leader, int ntiles) {
    unsigned smid;
    asm volatile("mov.u32 %0, %%smid;\n" : "=r"(smid));
    mlakv_dec90_cta_stamp(MLAKV_DEC90_TRACE_CEV - 1, leader,
                          (unsigned long long)smid | (unsigned long long)ntiles << 16);
}
#define MLAKV_DEC90_CSTAMP(ev, leader, v) mlakv_dec90_cta_stamp(ev, leader, v)
#define MLAKV_DEC90_CSTAMP_SM(leader, ntiles) mlakv_dec90_cta_stamp_sm(leader, ntiles)
#else
#define MLAKV_DEC90_CSTAMP(ev, leader, v) ((void)0)
#define MLAKV_DEC90_CSTAMP_SM(leader, ntiles) ((void)0)
#endif
/* the readers the nvfp4_ds_mla files define in trace builds: buf is mlakv_dec90_trace_buf (the
 * per-tile timeline) or mlakv_dec90_cta_buf (the per-CTA stamps) */
#define MLAKV_DEC90_BUF_READER(name, buf)                                                           \
    extern "C" int name(unsigned long long *dst, size_t count) {                                    \
        const size_t n = sizeof(buf) / sizeof(unsigned long long);                                  \
        return (int)cudaMemcpyFromSymbol(dst, buf, (count < n ? count : n) * sizeof(unsigned long long)); \
    }

template <int FMT>
struct mlakv_dec90_shape {
    static constexpr int NK = MLAKV_DEC90_NK, HP = 64;
    static constexpr int REC = mlakv_rec_traits<FMT>::bytes;
    static constexpr size_t Q_BYTES = (size_t)HP * MLAKV_DEC_QK * 2;  /* 72 KB */
    static constexpr size_t K_BYTES = (size_t)NK * MLAKV_DEC_QK * 2;  /* 72 KB */
    static constexpr size_t P_BYTES = (size_t)HP * NK * 2;            /* 8 KB */
    /* two raw stages where they fit in 227 KB (432/368-B records), one for the 656-B record */
    static constexpr int ST = REC * NK * 2 + Q_BYTES + K_BYTES + P_BYTES + 8192 <= 232448 ? 2 : 1;
    static constexpr size_t RAW_BYTES = (size_t)ST * NK * REC;
    static constexpr size_t ADDR_BYTES = (size_t)NK * 8;
    static constexpr size_t VALID_BYTES = (size_t)(ST + 1) * NK * 4;
    static constexpr size_t RED_BYTES = (size_t)2 * 2 * HP * 4; /* row max and row sum per WG */
    static constexpr size_t SMEM = 1024 /* alignment slack */ + Q_BYTES + K_BYTES + P_BYTES +
                                   RAW_BYTES + ADDR_BYTES + VALID_BYTES + RED_BYTES;
};

#ifdef MLAKV_DEC90_DEVICE

/* ---- wgmma helpers ------------------------------------------------------------------------- */

/* Shared-memory matrix descriptor, 128-byte swizzle, as two 32-bit halves: the low half holds
 * the start address (bits 0-13, >> 4) and the leading byte offset; per k-step only the low
 * half moves (a 32-bit add; shared addresses < 256 KB cannot carry out of the field). */
__device__ __forceinline__ uint32_t mlakv_gdesc_lo(uint32_t saddr, uint32_t lbo) {
    return ((saddr & 0x3FFFFu) >> 4) | ((lbo >> 4) << 16);
}
__device__ __forceinline__ uint32_t mlakv_gdesc_hi(uint32_t sbo) {
    return (sbo >> 4) | (1u << 30);
}
__device__ __forceinline__ void mlakv_wgmma_fence() {
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void mlakv_wgmma_commit() {
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void mlakv_wgmma_wait0() {
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
}
/* wait until at most N committed groups are pending (the oldest complete first) */
template <int N>
__device__ __forceinline__ void mlakv_wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ void mlakv_fence_proxy_async() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
/* keep the compiler from moving accumulator accesses across wgmma issue/wait points */
template <int N>
__device__ __forceinline__ void mlakv_reg_fence(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(d[i])::"memory");
}
/* the wgmma steps that issue() puts on accumulator d, as one group, waited for: d's earlier
 * register writes stay before them and its later reads after (the two-level record's RoPE steps
 * after the latent chain's scaling, in v5; s5 puts them in a second accumulator, NOTES D20) */
template <int N, class Issue>
__device__ __forceinline__ void mlakv_wgmma_group_sync(float (&d)[N], Issue issue) {
    mlakv_reg_fence(d);
    mlakv_wgmma_fence();
    issue();
    mlakv_wgmma_commit();
    mlakv_reg_fence(d);
    mlakv_wgmma_wait0();
    mlakv_reg_fence(d);
}

/* D[64 x 32] (fp32, registers) += A (smem desc) * B (smem desc); bf16 operands. */
__device__ __forceinline__ void mlakv_wgmma_m64n32(float (&d)[16], uint32_t a_lo, uint32_t a_hi,
                                                  uint32_t b_lo, uint32_t b_hi) {
    asm volatile(
        "{\n.reg .pred p;\n.reg .b64 da, db;\nsetp.ne.b32 p, 1, 0;\n"
        "mov.b64 da, {%16, %17};\nmov.b64 db, {%18, %19};\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
        "}, da, db, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "r"(a_lo), "r"(a_hi), "r"(b_lo), "r"(b_hi)
        : "memory");
}

/* D[64 x 16] (fp32, registers) += A (smem desc) * B (smem desc); bf16 operands. */
__device__ __forceinline__ void mlakv_wgmma_m64n16(float (&d)[8], uint32_t a_lo, uint32_t a_hi,
                                                  uint32_t b_lo, uint32_t b_hi) {
    asm volatile(
        "{\n.reg .pred p;\n.reg .b64 da, db;\nsetp.ne.b32 p, 1, 0;\n"
        "mov.b64 da, {%8, %9};\nmov.b64 db, {%10, %11};\n"
        "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7"
        "}, da, db, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
        : "r"(a_lo), "r"(a_hi), "r"(b_lo), "r"(b_hi)
        : "memory");
}

/* Named barriers (ids 1..15; 0 is __syncthreads): sync waits, arrive only counts. */
__device__ __forceinline__ void mlakv_bar_sync(int id, int n) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}
__device__ __forceinline__ void mlakv_bar_arrive(int id, int n) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}
/* bar.sync with an OR over the participants' predicates: every thread gets the OR */
__device__ __forceinline__ bool mlakv_bar_red_or(int id, int n, bool v) {
    uint32_t r;
    asm volatile("{\n.reg .pred p, q;\nsetp.ne.u32 q, %3, 0;\nbar.red.or.pred p, %1, %2, q;\n"
                 "selp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(r) : "r"(id), "r"(n), "r"((uint32_t)v) : "memory");
    return r != 0;
}
template <int N>
__device__ __forceinline__ void mlakv_setmaxnreg_inc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void mlakv_setmaxnreg_dec() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}

/* D[64 x 256] (fp32, registers) += A (smem desc) * B (smem desc), B MN-major; bf16 operands. */
__device__ __forceinline__ void mlakv_wgmma_m64n256_tb(float (&d)[128], uint32_t a_lo, uint32_t a_hi,
                                                  uint32_t b_lo, uint32_t b_hi) {
    asm volatile(
        "{\n.reg .pred p;\n.reg .b64 da, db;\nsetp.ne.b32 p, 1, 0;\n"
        "mov.b64 da, {%128, %129};\nmov.b64 db, {%130, %131};\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
        "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
        "}, da, db, p, 1, 1, 0, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
          "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
          "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
          "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
          "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
          "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
          "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
          "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
          "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "r"(a_lo), "r"(a_hi), "r"(b_lo), "r"(b_hi)
        : "memory");
}

/* mbarrier (shared::cta): init with an arrival count, arrive (release: this thread's prior
 * accesses), arrive + expect `bytes` of transactions, wait for the phase of the given parity to
 * complete (acquire). */
__device__ __forceinline__ void mlakv_mbar_init(uint64_t *bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(mlakv_smem_addr(bar)), "r"(count)
                 : "memory");
}
__device__ __forceinline__ void mlakv_mbar_arrive(uint64_t *bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(mlakv_smem_addr(bar)) : "memory");
}
__device__ __forceinline__ void mlakv_mbar_expect_tx(uint64_t *bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(mlakv_smem_addr(bar)),
                 "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void mlakv_mbar_wait(uint64_t *bar, uint32_t parity) {
    uint32_t done = 0;
    do {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     "selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(mlakv_smem_addr(bar)), "r"(parity)
                     : "memory");
    } while (!done);
}

/* One 1-D bulk (TMA) copy of `bytes` (a multiple of 16; both addresses 16-byte aligned) from
 * global to shared memory, completing as transactions on `bar`. */
__device__ __forceinline__ void mlakv_bulk_copy_g2s(void *dst, const void *src, uint32_t bytes,
                                                    uint64_t *bar) {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
            mlakv_smem_addr(dst)),
        "l"(src), "r"(bytes), "r"(mlakv_smem_addr(bar))
        : "memory");
}

/* Byte offset of 16-byte chunk `c` (0..7) of row `r` inside a 128-byte-swizzled atom column. */
__device__ __forceinline__ uint32_t mlakv_sw128(int r, int c) {
    return (uint32_t)(r * 128 + ((c ^ (r & 7)) << 4));
}

/* ---- transposed kernels (t90, s5): S^T [64 records x N heads] and O^T [512 x N] fragments,
 * columns 8i + 2q + e of a thread, reduced over the 64 rows (4 warps) ---- */
/* column maxima of warp-column i from the 4 warps' rows at rm [4][N] (written before a barrier) */
template <int N>
__device__ __forceinline__ float2 mlakv_dec90t_colmax4(const float *rm, int i, int q) {
    float2 mx = *reinterpret_cast<const float2 *>(rm + 8 * i + 2 * q);
#pragma unroll
    for (int w = 1; w < 4; w++) {
        const float2 v = *reinterpret_cast<const float2 *>(rm + w * N + 8 * i + 2 * q);
        mx.x = fmaxf(mx.x, v.x);
        mx.y = fmaxf(mx.y, v.y);
    }
    return mx;
}
/* the column maxima of the warp's 16 rows (s: the thread's S^T fragment, rows r0 and r0 + 8,
 * columns 8i + 2q + e; the 8 row groups g8 by shuffles); lane g8 0 writes them to red [4][N] at
 * row `warp` (read back with mlakv_dec90t_colmax4 after a barrier) */
template <int N>
__device__ __forceinline__ void mlakv_dec90t_colmax_put(const float (&s)[N / 2], float *red, int warp,
                                                        int g8, int q) {
#pragma unroll
    for (int i = 0; i < N / 8; i++) {
        float cm[2];
#pragma unroll
        for (int e = 0; e < 2; e++) {
            float m = fmaxf(s[4 * i + e], s[4 * i + 2 + e]);
            m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 4));
            m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 8));
            m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 16));
            cm[e] = m;
        }
        if (g8 == 0) *reinterpret_cast<float2 *>(red + warp * N + 8 * i + 2 * q) = make_float2(cm[0], cm[1]);
    }
}
/* a column's sum over the 4 warps' rows at red [4][N] (written before a barrier) */
template <int N>
__device__ __forceinline__ float mlakv_dec90t_colsum4(const float *red, int h) {
    return red[h] + red[N + h] + red[2 * N + h] + red[3 * N + h];
}
/* the thread's partial column sums l_part (column 8i + 2q + e = index 2i + e) summed over the
 * warp's 16 rows (the 8 row groups g8, by shuffles); lane g8 0 writes them to red [4][N] at row
 * `warp` (read back after a barrier) */
template <int N>
__device__ __forceinline__ void mlakv_dec90t_colsum_put(const float (&l_part)[N / 4], float *red,
                                                        int warp, int g8, int q) {
#pragma unroll
    for (int i = 0; i < N / 8; i++) {
        float lt[2];
#pragma unroll
        for (int e = 0; e < 2; e++) {
            float l = l_part[2 * i + e];
            l += __shfl_xor_sync(0xffffffffu, l, 4);
            l += __shfl_xor_sync(0xffffffffu, l, 8);
            l += __shfl_xor_sync(0xffffffffu, l, 16);
            lt[e] = l;
        }
        if (g8 == 0) *reinterpret_cast<float2 *>(red + warp * N + 8 * i + 2 * q) = make_float2(lt[0], lt[1]);
    }
}
/* O^T *= al per column (head), skipped when no column max moved in the warp */
template <int N>
__device__ __forceinline__ void mlakv_dec90t_rescale(float (&o)[8][N / 2], const float (&al)[N / 4],
                                                     bool moved) {
    if (__any_sync(0xffffffffu, moved)) {
#pragma unroll
        for (int mb = 0; mb < 8; mb++)
#pragma unroll
            for (int i = 0; i < N / 8; i++) {
                o[mb][4 * i] *= al[2 * i];
                o[mb][4 * i + 1] *= al[2 * i + 1];
                o[mb][4 * i + 2] *= al[2 * i];
                o[mb][4 * i + 3] *= al[2 * i + 1];
            }
    }
}

/* mlakv_dequant_record into row `key` of the swizzled K tile (NK rows per 64-column block). */
template <int FMT, int TPR, int NK, bool ZS = false>
__device__ __forceinline__ void mlakv_dec90_dequant(const uint8_t *r, bool ok, uint8_t *ks,
                                                    int key, int part) {
    mlakv_dequant_record<FMT, TPR, false, ZS>(r, ok, part, [&](int q, uint4 v) {
        *reinterpret_cast<uint4 *>(ks + (q >> 3) * (NK * 128) + mlakv_sw128(key, q & 7)) = v;
    });
}

#endif /* MLAKV_DEC90_DEVICE */

#ifdef MLAKV_DEC90_DEVICE
/* Softmax pieces shared by the sm90 kernels' accumulator-fragment softmaxes (rows r0, r0 + 8
 * of a thread quad): the quad's maxima of both rows, and the end of a step: the quad's sums of
 * p, then the running sums (rescaled by alpha) and maxima. */
__device__ __forceinline__ void mlakv_dec90_quad_max(float &mx0, float &mx1) {
#pragma unroll
    for (int off = 1; off < 4; off <<= 1) {
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, off));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, off));
    }
}
__device__ __forceinline__ void mlakv_dec90_row_update(float sum0, float sum1, float al0,
                                                       float al1, float mn0, float mn1,
                                                       float &m_run0, float &m_run1,
                                                       float &l_run0, float &l_run1) {
#pragma unroll
    for (int off = 1; off < 4; off <<= 1) {
        sum0 += __shfl_xor_sync(0xffffffffu, sum0, off);
        sum1 += __shfl_xor_sync(0xffffffffu, sum1, off);
    }
    l_run0 = l_run0 * al0 + sum0;
    l_run1 = l_run1 * al1 + sum1;
    m_run0 = mn0;
    m_run1 = mn1;
}

/* Online softmax step of warpgroup `part` (0 or 1) on its S fragment: NJ n8 blocks, s[4j + {0, 1}]
 * row r0 and s[4j + {2, 3}] row r0 + 8, columns 8j + cq + {0, 1} (validity flags at v). Masks
 * and scales S (log2 domain), exchanges the row maxima with the other part through red_m
 * (barrier BAR: 0 = __syncthreads, else named barrier BAR of 256 threads), writes P (bf16) into
 * the swizzled P tile at 16-byte chunks pc + NJ * part + j, updates the running max and sum of rows
 * r0 and r0 + 8 and returns the rescale factors of O (al0, al1). */
template <int NJ, int BAR>
__device__ __forceinline__ void mlakv_dec90_softmax(const mlakv_decode_params &p,
                                                    float (&s)[4 * NJ], const int *v, int part,
                                                    int lane, int r0, int cq, float *red_m,
                                                    uint8_t *Ps, float &m_run0, float &m_run1,
                                                    float &l_run0, float &l_run1, float &al0,
                                                    float &al1, int pc = 0) {
    constexpr int HP = 64;
    float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
    for (int j = 0; j < NJ; j++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const bool ok = v[8 * j + cq + e] != 0;
            s[4 * j + e] = ok ? s[4 * j + e] * p.sm_scale_log2 : -INFINITY;
            s[4 * j + 2 + e] = ok ? s[4 * j + 2 + e] * p.sm_scale_log2 : -INFINITY;
            mx0 = fmaxf(mx0, s[4 * j + e]);
            mx1 = fmaxf(mx1, s[4 * j + 2 + e]);
        }
    mlakv_dec90_quad_max(mx0, mx1);
    if ((lane & 3) == 0) {
        red_m[part * HP + r0] = mx0;
        red_m[part * HP + r0 + 8] = mx1;
    }
    if constexpr (BAR == 0) __syncthreads();
    else mlakv_bar_sync(BAR, 256);
    const float mn0 = fmaxf(m_run0, fmaxf(red_m[r0], red_m[HP + r0]));
    const float mn1 = fmaxf(m_run1, fmaxf(red_m[r0 + 8], red_m[HP + r0 + 8]));
    al0 = mn0 == -INFINITY ? 1.0f : exp2f(m_run0 - mn0);
    al1 = mn1 == -INFINITY ? 1.0f : exp2f(m_run1 - mn1);
    float sum0 = 0.0f, sum1 = 0.0f;
#pragma unroll
    for (int j = 0; j < NJ; j++) {
        float p0 = 0.f, p1 = 0.f, p2 = 0.f, p3 = 0.f;
        if (mn0 != -INFINITY) {
            p0 = exp2f(s[4 * j] - mn0);
            p1 = exp2f(s[4 * j + 1] - mn0);
        }
        if (mn1 != -INFINITY) {
            p2 = exp2f(s[4 * j + 2] - mn1);
            p3 = exp2f(s[4 * j + 3] - mn1);
        }
        sum0 += p0 + p1;
        sum1 += p2 + p3;
        const int chunk = pc + part * NJ + j; /* 16-byte chunk of the 128-byte P row */
        *reinterpret_cast<uint32_t *>(Ps + mlakv_sw128(r0, chunk) + 2 * cq) =
            mlakv_f32x2_to_bf16x2(p0, p1);
        *reinterpret_cast<uint32_t *>(Ps + mlakv_sw128(r0 + 8, chunk) + 2 * cq) =
            mlakv_f32x2_to_bf16x2(p2, p3);
    }
    mlakv_dec90_row_update(sum0, sum1, al0, al1, mn0, mn1, m_run0, m_run1, l_run0, l_run1);
}

/* O = O * alpha + P V for one warpgroup's 256 value dims: P [64 x NK] bf16 at shared address
 * ps_a (swizzled, K-major), V = the K tile's rows [NK] x these 256 columns at v_a (MN-major,
 * transposed operand). The rescale is skipped when no row max moved. _issue leaves the group
 * in flight (committed, not waited for: o must not be touched until a wait) and leaves the
 * rescale to the caller. */
__device__ __forceinline__ void mlakv_dec90_rescale(float (&o)[128], float al0, float al1) {
    if (!__all_sync(0xffffffffu, al0 == 1.0f && al1 == 1.0f)) {
#pragma unroll
        for (int j = 0; j < 32; j++) {
            o[4 * j] *= al0;
            o[4 * j + 1] *= al0;
            o[4 * j + 2] *= al1;
            o[4 * j + 3] *= al1;
        }
    }
}
template <int NK>
__device__ __forceinline__ void mlakv_dec90_pv_issue(float (&o)[128], uint32_t ps_a,
                                                     uint32_t v_a) {
    mlakv_wgmma_fence();
    {
        const uint32_t dp0 = mlakv_gdesc_lo(ps_a, 16);
        const uint32_t dv0 = mlakv_gdesc_lo(v_a, NK * 128);
        const uint32_t dhi = mlakv_gdesc_hi(1024);
#pragma unroll
        for (int kk = 0; kk < NK / 16; kk++)
            mlakv_wgmma_m64n256_tb(o, dp0 + (uint32_t)(kk * 32 >> 4), dhi,
                                   dv0 + (uint32_t)(kk * 16 * 128 >> 4), dhi);
    }
    mlakv_wgmma_commit();
}
template <int NK>
__device__ __forceinline__ void mlakv_dec90_pv(float (&o)[128], float al0, float al1,
                                               uint32_t ps_a, uint32_t v_a) {
    mlakv_dec90_rescale(o, al0, al1);
    mlakv_dec90_pv_issue<NK>(o, ps_a, v_a);
    mlakv_wgmma_wait0();
    mlakv_reg_fence(o);
}

/* Fragment row `half` (row r0 or r0 + 8) of a warpgroup's O [64 x 256] times so, as bf16 pairs:
 * put(j, word) gets columns 8 j + cq, + 1 (shared by the direct and the staged epilogue) */
template <class Put>
__device__ __forceinline__ void mlakv_dec90_row_bf16(const float (&o)[128], int half, float so,
                                                     Put &&put) {
#pragma unroll
    for (int j = 0; j < 32; j++)
        put(j, mlakv_f32x2_to_bf16x2(o[4 * j + 2 * half] * so, o[4 * j + 2 * half + 1] * so));
}

/* Epilogue of both kernels: warpgroup `part` holds value dims [256*part, +256) of 64 head rows
 * (rows r0 and r0+8 of its fragment, running max m_run0/1 in the log2 domain); red_l holds both
 * parts' row sums. Writes the normalized bf16 output and lse (sink folded in), or the fp32 split
 * partial (O/l, natural-log lse) for the combine kernel. Padding heads are not written. */
__device__ __forceinline__ void mlakv_dec90_store_rows(const mlakv_decode_params &p,
                                                       const float (&o)[128], const float *red_l,
                                                       int part, int lane, int r0, int cq, int h0,
                                                       int bt, int split, float m_run0,
                                                       float m_run1) {
    constexpr int HP = 64;
    const int64_t rows = (int64_t)p.batch * p.s_q;
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int row = r0 + 8 * half, h = h0 + row;
        if (h >= p.heads) continue;
        const float m = half ? m_run1 : m_run0;
        const float l = red_l[row] + red_l[HP + row];
        float so, lse;
        const int dbase = part * 256 + cq;
        if (p.nsplit == 1) {
            mlakv_dec_norm_out(p, h, m, l, so, lse);
            __nv_bfloat16 *orow = p.out + ((int64_t)bt * p.heads + h) * MLAKV_DEC_V + dbase;
            mlakv_dec90_row_bf16(o, half, so, [&](int j, uint32_t w) {
                *reinterpret_cast<uint32_t *>(orow + 8 * j) = w;
            });
            if (part == 0 && (lane & 3) == 0) p.lse[(int64_t)bt * p.heads + h] = lse;
        } else {
            mlakv_dec_norm_part(m, l, so, lse);
            const int64_t prow = ((int64_t)split * rows + bt) * p.heads + h;
            float *orow = p.part_o + prow * MLAKV_DEC_V + dbase;
#pragma unroll
            for (int j = 0; j < 32; j++)
                *reinterpret_cast<float2 *>(orow + 8 * j) =
                    make_float2(o[4 * j + 2 * half] * so, o[4 * j + 2 * half + 1] * so);
            if (part == 0 && (lane & 3) == 0) p.part_lse[prow] = lse;
        }
    }
}

/* Both parts' row sums (l_run0/1) into red_l, barrier BAR (0 = __syncthreads, else named
 * barrier BAR of 256 threads), then mlakv_dec90_store_rows. */
template <int BAR>
__device__ __forceinline__ void mlakv_dec90_finish(const mlakv_decode_params &p,
                                                   const float (&o)[128], float *red_l, int part,
                                                   int lane, int r0, int cq, int h0, int bt,
                                                   int split, float m_run0, float m_run1,
                                                   float l_run0, float l_run1) {
    constexpr int HP = 64;
    if ((lane & 3) == 0) {
        red_l[part * HP + r0] = l_run0;
        red_l[part * HP + r0 + 8] = l_run1;
    }
    if constexpr (BAR == 0) __syncthreads();
    else mlakv_bar_sync(BAR, 256);
    mlakv_dec90_store_rows(p, o, red_l, part, lane, r0, cq, h0, bt, split, m_run0, m_run1);
}

#endif

template <int FMT>
__global__ void __launch_bounds__(MLAKV_DEC90_THREADS, 1)
    mlakv_decode90_kernel(const mlakv_decode_params p) {
#ifdef MLAKV_DEC90_DEVICE
    typedef mlakv_dec90_shape<FMT> SH;
    constexpr int NK = SH::NK, ST = SH::ST, HP = SH::HP, REC = SH::REC;
    constexpr int NT = MLAKV_DEC90_THREADS;

    extern __shared__ __align__(16) uint8_t smem_raw[];
    uint8_t *smem = smem_raw + ((1024u - (mlakv_smem_addr(smem_raw) & 1023u)) & 1023u);
    uint8_t *Qs = smem;
    uint8_t *Ks = Qs + SH::Q_BYTES;
    uint8_t *Ps = Ks + SH::K_BYTES;
    uint8_t *raw = Ps + SH::P_BYTES;
    int64_t *addr = reinterpret_cast<int64_t *>(raw + SH::RAW_BYTES);
    int *valid = reinterpret_cast<int *>(raw + SH::RAW_BYTES + SH::ADDR_BYTES);
    float *red_m = reinterpret_cast<float *>(raw + SH::RAW_BYTES + SH::ADDR_BYTES + SH::VALID_BYTES);
    float *red_l = red_m + 2 * HP;

    asm volatile("griddepcontrol.wait;\n" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");

    const int tid = threadIdx.x, lane = tid & 31;
    const int wg = tid >> 7, wt = tid & 127; /* warpgroup, thread in it */
    const int bt = blockIdx.x, hb = blockIdx.y, split = blockIdx.z;
    const int b = bt / p.s_q, t = bt - b * p.s_q;
    const int h0 = hb * HP;

    int cbeg, cend, ntiles;
    mlakv_dec_split_range<NK, NK>(p, b, split, cbeg, cend, ntiles);
    const int32_t *idx_row = p.indices + (int64_t)b * p.i_sb + (int64_t)t * p.i_st;

    const mlakv_dec_gather<NK, ST, REC, NT> g = {p, idx_row, cbeg, cend, ntiles,
                                                 tid, raw, addr, valid};

    int idx_reg = -1, idx_pre[ST];
    g.first_indices(idx_pre);
    /* Q [64 heads x 576] into nine swizzled 64-column blocks */
    mlakv_dec_load_q<HP, NT>(p, b, t, h0, tid, [&](int r, int j) {
        return Qs + (j >> 3) * (HP * 128) + mlakv_sw128(r, j & 7);
    });
    g.fill(idx_pre);
    if (tid < NK) idx_reg = g.load_idx(ST);

    /* accumulator fragment: rows r0 = 16 * warp + lane / 4 and r0 + 8 of the warpgroup's 64,
     * columns 8 j + 2 (lane % 4) + {0, 1} */
    const int r0 = 16 * (wt >> 5) + (lane >> 2), cq = 2 * (lane & 3);
    float m_run0 = -INFINITY, m_run1 = -INFINITY, l_run0 = 0.0f, l_run1 = 0.0f;
    float o[128];
#pragma unroll
    for (int i = 0; i < 128; i++) o[i] = 0.0f;

    const uint32_t qs_a = mlakv_smem_addr(Qs), ks_a = mlakv_smem_addr(Ks), ps_a = mlakv_smem_addr(Ps);

    for (int it = 0; it < ntiles; ++it) {
        mlakv_cp_async_wait<ST - 1>();
        __syncthreads(); /* raw tile `it` landed; previous P V (both warpgroups) done */

        {
            constexpr int TPR = NT / NK;
            const int key = tid / TPR;
            mlakv_dec90_dequant<FMT, TPR, NK>(raw + (it % ST) * NK * REC + key * REC,
                                              valid[(it % (ST + 1)) * NK + key] != 0, Ks, key,
                                              tid % TPR);
        }
        g.advance(it, idx_reg);
        mlakv_fence_proxy_async(); /* K tile (and Q, first time) visible to the tensor cores */
        __syncthreads();
        g.issue(it + ST);

        /* 2. S_w [64 heads x 32 candidates] */
        float s[16];
#pragma unroll
        for (int i = 0; i < 16; i++) s[i] = 0.0f;
        mlakv_wgmma_fence();
        {
            /* base descriptors once; per k-step only the start address moves (constant adds) */
            const uint32_t dq0 = mlakv_gdesc_lo(qs_a, 16), dk0 = mlakv_gdesc_lo(ks_a + wg * 32 * 128, 16);
            const uint32_t dhi = mlakv_gdesc_hi(1024);
#pragma unroll
            for (int kk = 0; kk < 36; kk++) {
                const uint32_t off_q = ((kk >> 2) * (HP * 128) + (kk & 3) * 32) >> 4;
                const uint32_t off_k = ((kk >> 2) * (NK * 128) + (kk & 3) * 32) >> 4;
                mlakv_wgmma_m64n32(s, dq0 + off_q, dhi, dk0 + off_k, dhi);
            }
        }
        mlakv_wgmma_commit();
        mlakv_wgmma_wait0();
        mlakv_reg_fence(s);

        /* 3. online softmax */
        float al0, al1;
        mlakv_dec90_softmax<4, 0>(p, s, valid + (it % (ST + 1)) * NK + wg * 32, wg, lane, r0, cq,
                                  red_m, Ps, m_run0, m_run1, l_run0, l_run1, al0, al1);
        mlakv_fence_proxy_async();
        __syncthreads(); /* P tile complete (both halves) */

        /* 4. O = O * alpha + P V[:, 256 wg .. 256 wg + 256) */
        mlakv_dec90_pv<NK>(o, al0, al1, ps_a, ks_a + wg * 4 * (NK * 128));
    }
    mlakv_cp_async_wait<0>();

    /* finalize: total row sums = both warpgroups' halves */
    mlakv_dec90_finish<0>(p, o, red_l, wg, lane, r0, cq, h0, bt, split, m_run0, m_run1, l_run0,
                          l_run1);
#endif /* MLAKV_DEC90_DEVICE */
}

/* ---- v2 / v3: warp-specialized (producer warpgroup + two consumer warpgroups) ---------------
 * Warpgroup 0 gathers (cp.async, ST raw stages) and de-quantizes 32-record tiles into NB
 * swizzled K buffers; warpgroups 1 and 2 run S (split along the 576 dims), the softmax
 * exchange and P V (256 value dims each). Handshake with named barriers: FULL[b] (producer
 * arrives, consumers sync), EMPTY[b] (consumers arrive, producer syncs), 384 threads each.
 * v2 (NB = 2): the consumers run S -> softmax -> P V of one tile, one after another, while the
 * producer fills the other buffer.
 * v3 (NB = 3): the consumers are pipelined one tile deep: S(i + 1) and P V(i) are issued back to
 * back (asynchronous wgmma groups), and the exchange + softmax of tile i + 1 run while P V(i) is
 * on the tensor cores (O is rescaled by tile i + 1's factor after P V(i) lands: the same
 * arithmetic as v2). Consumers hold two K buffers (i, i + 1), so the producer needs a third;
 * P alternates between the two 64-byte halves of the 128-byte P rows (3 K buffers leave room
 * for 2 raw stages only). v3 producer: the next gather's record offsets are computed before the
 * de-quantization barrier (2 producer barriers per tile instead of 3), and an invalid record is
 * zeroed through its scales (ZS). Same numerics as v1. */
template <int FMT, int NB>
struct mlakv_dec90ws_shape {
    static constexpr int NK = 32, HP = 64;
    static constexpr int REC = mlakv_rec_traits<FMT>::bytes;
    static constexpr size_t Q_BYTES = (size_t)HP * MLAKV_DEC_QK * 2;       /* 72 KB */
    static constexpr size_t K_BYTES = (size_t)NB * NK * MLAKV_DEC_QK * 2;  /* NB x 36 KB */
    static constexpr size_t P_BYTES = (size_t)HP * 128;                     /* 64 x 64 swizzled */
    /* fp32 pitch of the S partial exchange rows: v2 24 (padding), v3 16 (XOR swizzle: its
     * three K buffers leave no room for the padding) */
    static constexpr int XP = NB == 2 ? 24 : 16;
    static constexpr size_t X_BYTES = (size_t)2 * HP * XP * 4;
    static constexpr size_t VK_BYTES = (size_t)NB * NK * 4;
    static constexpr size_t RED_BYTES = (size_t)2 * 2 * HP * 4;
    /* v3 keeps the record offsets and flags of one tile more than the raw stages (AR = ST + 1),
     * so that the next gather's offsets are computed before the de-quantization barrier */
    static constexpr size_t FIXED = 1024 + Q_BYTES + K_BYTES + P_BYTES + X_BYTES + VK_BYTES +
                                    RED_BYTES + (NB == 2 ? 0 : NK * 12);
    static constexpr int ST_FIT = (int)((232448 - FIXED) / ((size_t)NK * REC + NK * 12));
    static constexpr int ST = ST_FIT > 4 ? 4 : ST_FIT;
    static_assert(ST >= 2, "raw stages do not fit");
    static constexpr int AR = NB == 2 ? ST : ST + 1;
    static constexpr size_t RAW_BYTES = (size_t)ST * NK * REC;
    static constexpr size_t ADDR_BYTES = (size_t)AR * NK * 8;
    static constexpr size_t VRAW_BYTES = (size_t)AR * NK * 4;
    static constexpr size_t SMEM = 1024 + Q_BYTES + K_BYTES + P_BYTES + X_BYTES + VK_BYTES +
                                   RED_BYTES + RAW_BYTES + ADDR_BYTES + VRAW_BYTES;
    static_assert(SMEM <= 232448, "shared memory");
};

/* Measurement hook (timing only, results wrong; never set in a normal build):
 * MLAKV_DEC90WS_DIAG 1: the producer skips the de-quantization (K buffers zeroed once),
 * 2: the consumers skip S, softmax and P V (barrier handshakes only), 3: the producer skips the
 * record gathers (raw stages zeroed once); v3 only: 4: the consumers skip the S exchange and the
 * softmax (P stale), 5: the consumers skip the S wgmma (S = 0). Differences against the full
 * kernel place the time. */
#ifndef MLAKV_DEC90WS_DIAG
#define MLAKV_DEC90WS_DIAG 0
#endif

#define MLAKV_DEC90WS_THREADS (128 * (MLAKV_DEC90WS_PWG + 2))
enum { MLAKV_BAR_PROD = 1, MLAKV_BAR_CONS = 2, MLAKV_BAR_FULL = 3 }; /* EMPTY[b]: FULL + NB + b */

#ifdef MLAKV_DEC90_DEVICE
/* S partial of the consumer c's tile (s16: 16 n8 fragments over all 32 candidates, its half of
 * the k16 steps) for the candidates the other consumer owns goes out through xch, the other's
 * partial for c's own 16 columns comes back; s = the full S of c's columns. XP == 16: the
 * column pair is XOR-swizzled by row bit 1 (conflict-free float2 accesses per half-warp). */
template <int XP>
__device__ __forceinline__ void mlakv_dec90ws_exchange(const float (&s16)[16], float (&s)[8],
                                                       float *xch, int c, int r0, int cq) {
    constexpr int HP = 64;
    auto at = [&](int part, int row, int col) -> float * {
        if constexpr (XP == 16) col ^= ((row >> 1) & 1) << 3;
        return xch + (part * HP + row) * XP + col;
    };
#pragma unroll
    for (int jj = 0; jj < 2; jj++) { /* the other consumer's n8 blocks */
        const float a0 = c ? s16[4 * jj] : s16[8 + 4 * jj];
        const float a1 = c ? s16[4 * jj + 1] : s16[8 + 4 * jj + 1];
        const float a2 = c ? s16[4 * jj + 2] : s16[8 + 4 * jj + 2];
        const float a3 = c ? s16[4 * jj + 3] : s16[8 + 4 * jj + 3];
        *reinterpret_cast<float2 *>(at(c, r0, cq + 8 * jj)) = make_float2(a0, a1);
        *reinterpret_cast<float2 *>(at(c, r0 + 8, cq + 8 * jj)) = make_float2(a2, a3);
    }
    mlakv_bar_sync(MLAKV_BAR_CONS, 256);
    /* own columns 16 c + 8 jj + cq + {0, 1}, rows r0 and r0 + 8 */
#pragma unroll
    for (int jj = 0; jj < 2; jj++) {
        const float2 x0 = *reinterpret_cast<const float2 *>(at(1 - c, r0, cq + 8 * jj));
        const float2 x1 = *reinterpret_cast<const float2 *>(at(1 - c, r0 + 8, cq + 8 * jj));
        s[4 * jj] = (c ? s16[8 + 4 * jj] : s16[4 * jj]) + x0.x;
        s[4 * jj + 1] = (c ? s16[8 + 4 * jj + 1] : s16[4 * jj + 1]) + x0.y;
        s[4 * jj + 2] = (c ? s16[8 + 4 * jj + 2] : s16[4 * jj + 2]) + x1.x;
        s[4 * jj + 3] = (c ? s16[8 + 4 * jj + 3] : s16[4 * jj + 3]) + x1.y;
    }
}

/* Issue (and commit, not wait for) consumer c's half of S = Q K^T for the 32-record K buffer at
 * kb_a: the k16 steps c, c + 2, ..., c + 34 (Q and K each read once per tile). */
__device__ __forceinline__ void mlakv_dec90ws_s_issue(float (&s16)[16], uint32_t qs_a,
                                                      uint32_t kb_a, int c) {
    constexpr int HP = 64, NK = 32;
#pragma unroll
    for (int i = 0; i < 16; i++) s16[i] = 0.0f;
    mlakv_wgmma_fence();
    const uint32_t dq0 = mlakv_gdesc_lo(qs_a + c * 32, 16), dk0 = mlakv_gdesc_lo(kb_a + c * 32, 16);
    const uint32_t dhi = mlakv_gdesc_hi(1024);
#pragma unroll
    for (int i = 0; i < (MLAKV_DEC90WS_DIAG == 5 ? 0 : 18); i++) { /* k16 step 2 i + c */
        const uint32_t off_q = ((i >> 1) * (HP * 128) + (i & 1) * 64) >> 4;
        const uint32_t off_k = ((i >> 1) * (NK * 128) + (i & 1) * 64) >> 4;
        mlakv_wgmma_m64n32(s16, dq0 + off_q, dhi, dk0 + off_k, dhi);
    }
    mlakv_wgmma_commit();
}
#endif /* MLAKV_DEC90_DEVICE */

template <int FMT, int NB>
__global__ void __launch_bounds__(MLAKV_DEC90WS_THREADS, 1)
    mlakv_decode90ws_kernel(const mlakv_decode_params p) {
#ifdef MLAKV_DEC90_DEVICE
    typedef mlakv_dec90ws_shape<FMT, NB> SH;
    constexpr int NK = SH::NK, ST = SH::ST, AR = SH::AR, HP = SH::HP, REC = SH::REC;
    constexpr int UNIT = MLAKV_DEC_NK(MLAKV_DEC_MAX_HG); /* the plan's tile (split granularity) */
    constexpr int KBUF = NK * MLAKV_DEC_QK * 2;          /* bytes of one K buffer */
    constexpr int BAR_EMPTY = MLAKV_BAR_FULL + NB;

    extern __shared__ __align__(16) uint8_t smem_raw[];
    uint8_t *smem = smem_raw + ((1024u - (mlakv_smem_addr(smem_raw) & 1023u)) & 1023u);
    uint8_t *Qs = smem;
    uint8_t *Ks = Qs + SH::Q_BYTES;
    uint8_t *Ps = Ks + SH::K_BYTES;
    uint8_t *raw = Ps + SH::P_BYTES;
    int64_t *addr = reinterpret_cast<int64_t *>(raw + SH::RAW_BYTES);
    int *vraw = reinterpret_cast<int *>(raw + SH::RAW_BYTES + SH::ADDR_BYTES);
    int *vk = vraw + AR * NK; /* after the AR-slot offset/flag rings */
    float *red_m = reinterpret_cast<float *>(vk + NB * NK);
    float *red_l = red_m + 2 * HP;
    float *xch = red_l + 2 * HP; /* [2][HP][XP] S partials */

    asm volatile("griddepcontrol.wait;\n" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");

    constexpr int NPT = 128 * MLAKV_DEC90WS_PWG; /* producer threads */
    const int tid = threadIdx.x, lane = tid & 31;
    const int wg = tid >> 7, wt = tid & 127;
    const int bt = blockIdx.x, hb = blockIdx.y, split = blockIdx.z;
    const int b = bt / p.s_q, t = bt - b * p.s_q;
    const int h0 = hb * HP;

    int len = p.topk;
    if (p.lengths) len = min(max(__ldg(p.lengths + b), 0), p.topk);
    const int cbeg = split * p.tiles_per_split * UNIT;
    const int cend = min(len, cbeg + p.tiles_per_split * UNIT);
    const int ntiles = cend > cbeg ? (cend - cbeg + NK - 1) / NK : 0;

    if (wg < MLAKV_DEC90WS_PWG) {
        /* ================= producer ================= */
        const int pt = tid; /* producer thread */
        mlakv_setmaxnreg_dec<MLAKV_DEC90WS_PROD_REGS>();
        const int32_t *idx_row = p.indices + (int64_t)b * p.i_sb + (int64_t)t * p.i_st;
        auto load_idx = [&](int tile) -> int {
            int pos = cbeg + tile * NK + pt;
            return (tile < ntiles && pos < cend) ? __ldg(idx_row + pos) : -1;
        };
        auto set_addr = [&](int tile, int idx) { /* pt < NK; offsets and flags: rings of AR */
            int64_t off;
            const bool ok = mlakv_dec_rec_offset<REC>(p, idx, off);
            addr[(tile % AR) * NK + pt] = off;
            vraw[(tile % AR) * NK + pt] = ok;
        };
        constexpr int TPR = NPT / NK; /* threads per record */
        const int key = pt / TPR, part = pt % TPR;
        auto issue = [&](int tile) { /* addr/vraw of `tile` visible */
            if (MLAKV_DEC90WS_DIAG != 3 && tile < ntiles && vraw[(tile % AR) * NK + key])
                mlakv_dec_copy_rec<REC, TPR>(raw + (tile % ST) * NK * REC + key * REC,
                                             p.base + addr[(tile % AR) * NK + key], part);
            mlakv_cp_async_commit();
        };
        if (MLAKV_DEC90WS_DIAG == 1 || MLAKV_DEC90WS_DIAG == 3) {
            uint4 *z = reinterpret_cast<uint4 *>(MLAKV_DEC90WS_DIAG == 1 ? Ks : raw);
            const int n = (MLAKV_DEC90WS_DIAG == 1 ? (int)SH::K_BYTES : (int)SH::RAW_BYTES) / 16;
            for (int i = pt; i < n; i += NPT) z[i] = make_uint4(0, 0, 0, 0);
            mlakv_fence_proxy_async();
        }
        int idx_pre[ST];
#pragma unroll
        for (int s = 0; s < ST; s++) idx_pre[s] = pt < NK ? load_idx(s) : -1;
        /* Q [64 heads x 576] into nine swizzled 64-column blocks (part of group 0) */
        mlakv_dec_load_q<HP, NPT>(p, b, t, h0, pt, [&](int r, int j) {
            return Qs + (j >> 3) * (HP * 128) + mlakv_sw128(r, j & 7);
        });
        if (pt < NK) {
#pragma unroll
            for (int s = 0; s < ST; s++) set_addr(s, idx_pre[s]);
        }
        mlakv_bar_sync(MLAKV_BAR_PROD, NPT);
#pragma unroll
        for (int s = 0; s < ST; s++) issue(s);
        int idx_reg = pt < NK ? load_idx(ST) : -1;

        for (int it = 0; it < ntiles; ++it) {
            const int buf = it % NB;
            mlakv_cp_async_wait<ST - 1>();
            if constexpr (NB == 3) { /* the offsets' slot of tile it + ST held tile it - 1 */
                if (pt < NK) {
                    set_addr(it + ST, idx_reg);
                    idx_reg = load_idx(it + ST + 1);
                }
            }
            mlakv_bar_sync(MLAKV_BAR_PROD, NPT); /* raw stage of `it` complete */
            if (it >= NB) mlakv_bar_sync(BAR_EMPTY + buf, MLAKV_DEC90WS_THREADS);
            const bool ok = vraw[(it % AR) * NK + key] != 0;
            if (MLAKV_DEC90WS_DIAG != 1)
                mlakv_dec90_dequant<FMT, TPR, NK, NB == 3>(raw + (it % ST) * NK * REC + key * REC,
                                                           ok, Ks + buf * KBUF, key, part);
            if (part == 0) vk[buf * NK + key] = ok;
            mlakv_fence_proxy_async();
            mlakv_bar_arrive(MLAKV_BAR_FULL + buf, MLAKV_DEC90WS_THREADS);
            mlakv_bar_sync(MLAKV_BAR_PROD, NPT); /* raw stage free */
            if constexpr (NB == 2) {
                if (pt < NK) {
                    set_addr(it + ST, idx_reg);
                    idx_reg = load_idx(it + ST + 1);
                }
                mlakv_bar_sync(MLAKV_BAR_PROD, NPT);
            }
            issue(it + ST);
        }
        mlakv_cp_async_wait<0>();
    } else {
        /* ================= consumers ================= */
        mlakv_setmaxnreg_inc<MLAKV_DEC90WS_CONS_REGS>();
        const int c = wg - MLAKV_DEC90WS_PWG;
        const int r0 = 16 * (wt >> 5) + (lane >> 2), cq = 2 * (lane & 3);
        float m_run0 = -INFINITY, m_run1 = -INFINITY, l_run0 = 0.0f, l_run1 = 0.0f;
        float o[128];
#pragma unroll
        for (int i = 0; i < 128; i++) o[i] = 0.0f;
        const uint32_t qs_a = mlakv_smem_addr(Qs), ks_a = mlakv_smem_addr(Ks), ps_a = mlakv_smem_addr(Ps);

        if constexpr (MLAKV_DEC90WS_DIAG == 2) {
            for (int it = 0; it < ntiles; ++it) {
                mlakv_bar_sync(MLAKV_BAR_FULL + it % NB, MLAKV_DEC90WS_THREADS);
                if (it + NB < ntiles) mlakv_bar_arrive(BAR_EMPTY + it % NB, MLAKV_DEC90WS_THREADS);
            }
        } else if constexpr (NB == 2) {
            for (int it = 0; it < ntiles; ++it) {
                const int buf = it & 1;
                const uint32_t kb_a = ks_a + buf * KBUF;
                mlakv_bar_sync(MLAKV_BAR_FULL + buf, MLAKV_DEC90WS_THREADS);
                float s16[16], s[8];
                mlakv_dec90ws_s_issue(s16, qs_a, kb_a, c);
                mlakv_wgmma_wait0();
                mlakv_reg_fence(s16);
                mlakv_dec90ws_exchange<SH::XP>(s16, s, xch, c, r0, cq);

                float al0, al1;
                mlakv_dec90_softmax<2, MLAKV_BAR_CONS>(p, s, vk + buf * NK + c * 16, c, lane, r0,
                                                       cq, red_m, Ps, m_run0, m_run1, l_run0,
                                                       l_run1, al0, al1);
                mlakv_fence_proxy_async();
                mlakv_bar_sync(MLAKV_BAR_CONS, 256); /* P [64 x 32] complete */

                mlakv_dec90_pv<NK>(o, al0, al1, ps_a, kb_a + c * 4 * (NK * 128));
                if (it + 2 < ntiles) mlakv_bar_arrive(BAR_EMPTY + buf, MLAKV_DEC90WS_THREADS);
            }
        } else {
            /* tile i's P sits in 16-byte chunks [4 (i & 1), 4 (i & 1) + 4) of the P rows */
            float s16[16], s[8], al0 = 1.0f, al1 = 1.0f;
            if (ntiles > 0) { /* S and softmax of tile 0 */
                mlakv_bar_sync(MLAKV_BAR_FULL, MLAKV_DEC90WS_THREADS);
                mlakv_dec90ws_s_issue(s16, qs_a, ks_a, c);
                mlakv_wgmma_wait0();
                mlakv_reg_fence(s16);
                mlakv_dec90ws_exchange<SH::XP>(s16, s, xch, c, r0, cq);
                mlakv_dec90_softmax<2, MLAKV_BAR_CONS>(p, s, vk + c * 16, c, lane, r0, cq, red_m,
                                                       Ps, m_run0, m_run1, l_run0, l_run1, al0,
                                                       al1, 0);
                mlakv_fence_proxy_async();
                mlakv_bar_sync(MLAKV_BAR_CONS, 256); /* P(0) complete */
            }
            /* the last tile is peeled off: ptxas serializes the wgmma groups (C7514) when the
             * S issue and its wait are conditional inside the loop */
            for (int it = 0; it + 1 < ntiles; ++it) {
                const int buf = it % NB, nbuf = (it + 1) % NB;
                mlakv_dec90_rescale(o, al0, al1); /* by alpha(it); o is not in flight here */
                /* S(it + 1) first: wait_group 1 below then waits for it alone */
                mlakv_bar_sync(MLAKV_BAR_FULL + nbuf, MLAKV_DEC90WS_THREADS);
                mlakv_dec90ws_s_issue(s16, qs_a, ks_a + nbuf * KBUF, c);
                /* O += P(it) V(it), in flight during the exchange and softmax of it + 1 */
                mlakv_dec90_pv_issue<NK>(o, ps_a + 64 * (it & 1),
                                         ks_a + buf * KBUF + c * 4 * (NK * 128));
                mlakv_wgmma_wait<1>();
                mlakv_reg_fence(s16);
                if (MLAKV_DEC90WS_DIAG != 4) {
                    mlakv_dec90ws_exchange<SH::XP>(s16, s, xch, c, r0, cq);
                    /* P(it + 1) goes to the half P V(it - 1) read (complete: waited for at the
                     * end of the previous iteration by both consumers, before the exchange
                     * barrier) */
                    mlakv_dec90_softmax<2, MLAKV_BAR_CONS>(p, s, vk + nbuf * NK + c * 16, c, lane,
                                                           r0, cq, red_m, Ps, m_run0, m_run1,
                                                           l_run0, l_run1, al0, al1,
                                                           4 * ((it + 1) & 1));
                    mlakv_fence_proxy_async();
                    mlakv_bar_sync(MLAKV_BAR_CONS, 256); /* P(it + 1) complete */
                }
                mlakv_wgmma_wait0();
                mlakv_reg_fence(o);
                if (it + NB < ntiles) mlakv_bar_arrive(BAR_EMPTY + buf, MLAKV_DEC90WS_THREADS);
            }
            if (ntiles > 0) { /* P V of the last tile */
                const int it = ntiles - 1;
                mlakv_dec90_rescale(o, al0, al1);
                mlakv_dec90_pv_issue<NK>(o, ps_a + 64 * (it & 1),
                                         ks_a + (it % NB) * KBUF + c * 4 * (NK * 128));
                mlakv_wgmma_wait0();
                mlakv_reg_fence(o);
            }
        }

        mlakv_dec90_finish<MLAKV_BAR_CONS>(p, o, red_l, c, lane, r0, cq, h0, bt, split, m_run0,
                                           m_run1, l_run0, l_run1);
    }
#endif /* MLAKV_DEC90_DEVICE */
}

template <int FMT, int NB>
static cudaError_t mlakv_decode90ws_launch(const mlakv_decode_params *p, dim3 grid,
                                           cudaStream_t stream) {
    const size_t sm = mlakv_dec90ws_shape<FMT, NB>::SMEM;
    cudaError_t err = cudaFuncSetAttribute(mlakv_decode90ws_kernel<FMT, NB>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm);
    if (err != cudaSuccess) return err;
    return mlakv_launch_pdl(mlakv_decode90ws_kernel<FMT, NB>, grid, dim3(MLAKV_DEC90WS_THREADS),
                            sm, stream, p);
}

#include "cuda/decode/sm90/decode_sm90_direct.cuh"

template <int FMT>
static cudaError_t mlakv_decode90_launch(const mlakv_decode_params *p, cudaStream_t stream) {
    if (p->head_groups != MLAKV_DEC_MAX_HG) return cudaErrorInvalidValue; /* 64-head blocks */
    dim3 grid((unsigned)(p->batch * p->s_q), (unsigned)p->head_blocks, (unsigned)p->nsplit);
    /* v5 (decode_sm90_direct.cuh) for the NVFP4 records: measured faster than v1-v3 on every
     * shape from b=1 to b=128, 64 and 128 heads (bench/NOTES_decode.md, D5); v1 for the fp8
     * record. MLAKV_CUDA_DECODE_SM90=v1|v2|v3|v5 forces one (A/B benchmarks, tests; v2, v3 and
     * v5 fall back to v1 for fp8_ds_mla). The two-level record always runs v5: engine mode
     * applies its token scale to S and P (src/cpu/attention.c), which only v5 implements among
     * these. */
    if constexpr (FMT == 3) {
        return mlakv_decode90d_launch<FMT>(p, grid, stream);
    } else {
        int v = FMT != 0 ? 5 : 1;
        const char *e = getenv("MLAKV_CUDA_DECODE_SM90");
        if (e && strcmp(e, "v1") == 0) v = 1;
        if (e && strcmp(e, "v2") == 0) v = 2;
        if (e && strcmp(e, "v3") == 0) v = 3;
        if (e && strcmp(e, "v5") == 0) v = 5;
        if constexpr (FMT != 0) { /* v2/v3/v5 are not instantiated for fp8 */
            if (v == 5) return mlakv_decode90d_launch<FMT>(p, grid, stream);
            if (v == 2) return mlakv_decode90ws_launch<FMT, 2>(p, grid, stream);
            if (v == 3) return mlakv_decode90ws_launch<FMT, 3>(p, grid, stream);
        }
        const size_t sm = mlakv_dec90_shape<FMT>::SMEM;
        cudaError_t err = cudaFuncSetAttribute(mlakv_decode90_kernel<FMT>,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm);
        if (err != cudaSuccess) return err;
        return mlakv_launch_pdl(mlakv_decode90_kernel<FMT>, grid, dim3(MLAKV_DEC90_THREADS), sm,
                                stream, p);
    }
}

#endif
