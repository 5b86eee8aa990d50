/* Decode context parallelism over NCCL: one process per GPU (N = every GPU of the machine, at
 * least 2), each holding its stripe of the same contexts, decodes its local candidates and
 * runs mlakv_cuda_dcp_combine on a real communicator; every rank's merged output must match one
 * GPU decoding the whole context (computed by each rank on its own GPU). Skips with fewer than
 * two GPUs. NVLink multicast stays off (NCCL_NVLS_ENABLE=0). */
#include <dlfcn.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nccl.h>

#include "cuda_host.h"
extern "C" {
#include "testutil.h"
}

typedef ncclResult_t (*get_id_fn)(ncclUniqueId *);
typedef ncclResult_t (*init_rank_fn)(ncclComm_t *, int, ncclUniqueId, int);
typedef ncclResult_t (*destroy_fn)(ncclComm_t);

static void *open_nccl(void) {
    void *h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_GLOBAL);
    return h ? h : dlopen("libnccl.so", RTLD_NOW | RTLD_GLOBAL);
}

/* the GPU count, asked in a child so that this process never initializes CUDA before fork */
static int gpu_count(void) {
    pid_t pid = fork();
    if (pid == 0) {
        int n = 0;
        if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
        _exit(n > 100 ? 100 : n);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 0;
}

static int run_rank(int rank, int world, ncclUniqueId id, void *lib, uint64_t seed) {
    CUDA_OK(cudaSetDevice(rank));
    ncclComm_t comm;
    init_rank_fn init_rank = (init_rank_fn)dlsym(lib, "ncclCommInitRank");
    destroy_fn destroy = (destroy_fn)dlsym(lib, "ncclCommDestroy");
    if (!init_rank || !destroy || init_rank(&comm, world, id, rank) != ncclSuccess) {
        fprintf(stderr, "rank %d: ncclCommInitRank failed\n", rank);
        return 1;
    }
    tu_rng rng;
    tu_rng_init(&rng, seed); /* every rank draws the same contexts and step */
    const mlakv_format fmts[] = {MLAKV_NVFP4_DS_MLA, MLAKV_FP8_DS_MLA, MLAKV_NVFP4_FP8_ROPE_TOKEN_SCALE};
    for (int iter = 0; iter < 6; iter++) {
        const mlakv_format f = fmts[iter % 3];
        const int batch = 1 + iter % 3, heads = iter % 2 ? 128 : 16, topk = 2048, bs = 64;
        const int len = 20000 + (int)tu_range(&rng, 0, 5000), rec = (int)mlakv_record_bytes(f);
        const int local_max = (len + world - 1) / world, per_row = (local_max + bs - 1) / bs;
        /* whole context (slot b * len + p) and this rank's stripe (block b * per_row + k) */
        uint8_t *g = (uint8_t *)malloc((size_t)batch * len * rec);
        float lat[512], rope[64];
        for (int64_t i = 0; i < (int64_t)batch * len; i++) {
            for (int d = 0; d < 512; d++) lat[d] = (float)(tu_normal(&rng) * 0.5);
            for (int d = 0; d < 64; d++) rope[d] = (float)tu_normal(&rng);
            CHECK_OK(mlakv_encode_record(f, lat, rope, g + i * rec, NULL));
        }
        const size_t lbytes = (size_t)batch * per_row * bs * rec;
        uint8_t *l = (uint8_t *)malloc(lbytes);
        memset(l, 0xFF, lbytes);
        int32_t *bt = (int32_t *)malloc(4 * (size_t)batch * per_row);
        for (int b = 0; b < batch; b++) {
            for (int k = 0; k < per_row; k++) bt[b * per_row + k] = b * per_row + k;
            for (int lp = 0; lp * world + rank < len; lp++)
                memcpy(l + ((size_t)b * per_row * bs + lp) * rec,
                       g + ((size_t)b * len + lp * world + rank) * rec, rec);
        }
        const int64_t n = (int64_t)batch * topk, rows = (int64_t)batch * heads;
        int32_t *pos = (int32_t *)malloc(4 * n), *gidx = (int32_t *)malloc(4 * n);
        for (int64_t i = 0; i < n; i++) {
            pos[i] = (int32_t)tu_range(&rng, -1, len);
            gidx[i] = pos[i] < 0 ? -1 : (int32_t)(i / topk) * len + pos[i];
        }
        uint16_t *q = (uint16_t *)malloc(2 * rows * 576);
        for (int64_t i = 0; i < rows * 576; i++) q[i] = mlakv_f32_to_bf16((float)tu_normal(&rng));
        float sink[128];
        for (int h = 0; h < heads; h++) sink[h] = (float)tu_normal(&rng);
        void *dg, *dl, *dq, *dref, *dloc, *dout, *ws = NULL, *dws;
        int32_t *dpos, *dgidx, *dbt, *dlidx, *dlen;
        float *dsink, *dref_lse, *dloc_lse, *dlse;
        CUDA_OK(cudaMalloc(&dg, (size_t)batch * len * rec));
        CUDA_OK(cudaMemcpy(dg, g, (size_t)batch * len * rec, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMalloc(&dl, lbytes));
        CUDA_OK(cudaMemcpy(dl, l, lbytes, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMalloc(&dq, 2 * rows * 576));
        CUDA_OK(cudaMemcpy(dq, q, 2 * rows * 576, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMalloc((void **)&dpos, 4 * n));
        CUDA_OK(cudaMemcpy(dpos, pos, 4 * n, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMalloc((void **)&dgidx, 4 * n));
        CUDA_OK(cudaMemcpy(dgidx, gidx, 4 * n, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMalloc((void **)&dbt, 4 * (size_t)batch * per_row));
        CUDA_OK(cudaMemcpy(dbt, bt, 4 * (size_t)batch * per_row, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMalloc((void **)&dsink, 4 * heads));
        CUDA_OK(cudaMemcpy(dsink, sink, 4 * heads, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMalloc((void **)&dlidx, 4 * n));
        CUDA_OK(cudaMalloc((void **)&dlen, 4 * batch));
        CUDA_OK(cudaMalloc(&dref, 2 * rows * 512));
        CUDA_OK(cudaMalloc(&dloc, 2 * rows * 512));
        CUDA_OK(cudaMalloc(&dout, 2 * rows * 512));
        CUDA_OK(cudaMalloc((void **)&dref_lse, 4 * rows));
        CUDA_OK(cudaMalloc((void **)&dloc_lse, 4 * rows));
        CUDA_OK(cudaMalloc((void **)&dlse, 4 * rows));
        mlakv_cache gc, lc;
        CHECK_OK(mlakv_cache_init(&gc, dg, f, (int64_t)batch * len, 1, 0));
        CHECK_OK(mlakv_cache_init(&lc, dl, f, (int64_t)batch * per_row, bs, 0));
        mlakv_decode_args a = mlakv_decode_args_default(batch, 1, heads, topk);
        a.q = dq, a.indices = dgidx, a.sink = dsink, a.out = dref, a.lse = dref_lse;
        mlakv_decode_args la = a;
        la.indices = dlidx, la.lengths = dlen, la.sink = NULL, la.out = dloc, la.lse = dloc_lse;
        size_t w1 = 0, w2 = 0, wd = 0;
        CHECK_OK(mlakv_cuda_decode_workspace_size(&gc, &a, &w1));
        CHECK_OK(mlakv_cuda_decode_workspace_size(&lc, &la, &w2));
        if (w1 < w2) w1 = w2;
        if (w1) CUDA_OK(cudaMalloc(&ws, w1));
        CHECK_OK(mlakv_cuda_dcp_workspace_size(world, rows, &wd));
        CUDA_OK(cudaMalloc(&dws, wd));
        CHECK_OK(mlakv_cuda_sparse_decode(&gc, &a, ws, w1, NULL));
        CHECK_OK(mlakv_cuda_dcp_local_indices(&lc, rank, world, batch, 1, topk, dpos, topk, topk,
                                              dbt, per_row, dlidx, dlen, NULL, NULL));
        CHECK_OK(mlakv_cuda_sparse_decode(&lc, &la, ws, w1, NULL));
        CHECK_OK(mlakv_cuda_dcp_combine(comm, world, rows, heads, dloc, dloc_lse, dsink, dout, dlse,
                                        dws, wd, NULL));
        CUDA_OK(cudaDeviceSynchronize());
        uint16_t *ref = (uint16_t *)malloc(2 * rows * 512), *got = (uint16_t *)malloc(2 * rows * 512);
        float *rl = (float *)malloc(4 * rows), *gl = (float *)malloc(4 * rows);
        CUDA_OK(cudaMemcpy(ref, dref, 2 * rows * 512, cudaMemcpyDeviceToHost));
        CUDA_OK(cudaMemcpy(got, dout, 2 * rows * 512, cudaMemcpyDeviceToHost));
        CUDA_OK(cudaMemcpy(rl, dref_lse, 4 * rows, cudaMemcpyDeviceToHost));
        CUDA_OK(cudaMemcpy(gl, dlse, 4 * rows, cudaMemcpyDeviceToHost));
        double worst = 0, worst_lse = 0;
        tu_worst_rows_bf16(got, ref, gl, rl, rows, 512, &worst, &worst_lse);
        CHECKF(worst < 1.5e-2 && worst_lse < 2e-3,
               "rank %d of %d, %s batch %d heads %d: combined vs one GPU: rel-L2 %.3g lse %.3g", rank,
               world, mlakv_format_get(f)->name, batch, heads, worst, worst_lse);
        if (rank == 0)
            printf("  %s world %d batch %d heads %d: worst row rel-L2 %.3g, lse %.3g\n",
                   mlakv_format_get(f)->name, world, batch, heads, worst, worst_lse);
        cudaFree(dg), cudaFree(dl), cudaFree(dq), cudaFree(dref), cudaFree(dloc), cudaFree(dout);
        cudaFree(ws), cudaFree(dws), cudaFree(dpos), cudaFree(dgidx), cudaFree(dbt), cudaFree(dlidx);
        cudaFree(dlen), cudaFree(dsink), cudaFree(dref_lse), cudaFree(dloc_lse), cudaFree(dlse);
        free(g), free(l), free(bt), free(pos), free(gidx), free(q), free(ref), free(got), free(rl), free(gl);
    }
    destroy(comm);
    return tu_finish();
}

int main(void) {
    setenv("NCCL_NVLS_ENABLE", "0", 1);
    const int world = gpu_count();
    if (world < 2) {
        printf("test_cuda_dcp_nccl: skipped: needs 2 or more GPUs (found %d)\n", world);
        return TEST_SKIP;
    }
    void *lib = open_nccl();
    get_id_fn get_id = lib ? (get_id_fn)dlsym(lib, "ncclGetUniqueId") : NULL;
    if (!get_id) {
        printf("test_cuda_dcp_nccl: skipped: NCCL (libnccl.so.2) not found\n");
        return TEST_SKIP;
    }
    ncclUniqueId id;
    if (get_id(&id) != ncclSuccess) {
        printf("test_cuda_dcp_nccl: ncclGetUniqueId failed\n");
        return 1;
    }
    const uint64_t seed = tu_seed("test_cuda_dcp_nccl");
    pid_t *pids = (pid_t *)malloc(sizeof(pid_t) * world);
    for (int r = 0; r < world; r++) {
        pids[r] = fork();
        if (pids[r] == 0) _exit(run_rank(r, world, id, lib, seed) ? 1 : 0);
    }
    int failed = 0;
    for (int r = 0; r < world; r++) {
        int st = 0;
        waitpid(pids[r], &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            printf("test_cuda_dcp_nccl: rank %d failed (status %d)\n", r, st);
            failed++;
        }
    }
    free(pids);
    printf("%d passed, %d failed\n", world - failed, failed);
    return failed ? 1 : 0;
}
