/* A program outside the source tree, built against an installed mlakv (find_package and
 * pkg-config, see check.sh): writes tokens into a paged cache through the public API, reads
 * them back, checks them against the one-record codec, and runs one CPU sparse decode.
 * Exit 0 and one summary line when everything holds. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mlakv.h>

#define N_TOK 10
#define FAIL(...) (fprintf(stderr, "roundtrip: " __VA_ARGS__), fputc('\n', stderr), exit(1))
#define OK(call)                                                                            \
    do {                                                                                    \
        mlakv_status s_ = (call);                                                           \
        if (s_ != MLAKV_OK) FAIL("%s: %s (%s)", #call, mlakv_status_name(s_), mlakv_last_error()); \
    } while (0)

int main(void) {
    if (strcmp(mlakv_version(), MLAKV_VERSION_STRING) != 0)
        FAIL("library %s, header %s", mlakv_version(), MLAKV_VERSION_STRING);

    mlakv_format fmt;
    OK(mlakv_format_from_name("nvfp4_ds_mla", &fmt));
    const int64_t num_blocks = 2, block_size = 8;
    size_t bytes;
    OK(mlakv_cache_bytes(fmt, num_blocks, block_size, 0, &bytes));
    void *base = calloc(1, bytes);
    if (!base) FAIL("out of memory");
    mlakv_cache cache;
    OK(mlakv_cache_init(&cache, base, fmt, num_blocks, block_size, 0));

    static float kv_c[N_TOK][MLAKV_LATENT_DIM], k_pe[N_TOK][MLAKV_ROPE_DIM];
    int64_t slots[N_TOK];
    unsigned seed = 12345u;
    for (int t = 0; t < N_TOK; t++) {
        for (int d = 0; d < MLAKV_LATENT_DIM; d++) {
            seed = seed * 1664525u + 1013904223u;
            kv_c[t][d] = ((float)(seed >> 8) / 16777216.0f - 0.5f) * 4.0f;
        }
        for (int d = 0; d < MLAKV_ROPE_DIM; d++) k_pe[t][d] = (float)(d - 32) / 16.0f;
        slots[t] = (int64_t)(t * 3 % (num_blocks * block_size)); /* scattered, distinct */
    }
    OK(mlakv_write(&cache, N_TOK, kv_c, MLAKV_LATENT_DIM, k_pe, MLAKV_ROPE_DIM, MLAKV_F32, slots,
                   NULL));

    static float latent[N_TOK][MLAKV_LATENT_DIM], rope[N_TOK][MLAKV_ROPE_DIM];
    OK(mlakv_read(&cache, N_TOK, slots, &latent[0][0], &rope[0][0]));
    double worst = 0.0;
    for (int t = 0; t < N_TOK; t++) {
        unsigned char rec[1024];
        float ref_lat[MLAKV_LATENT_DIM], ref_rope[MLAKV_ROPE_DIM];
        OK(mlakv_encode_record(fmt, kv_c[t], k_pe[t], rec, NULL));
        OK(mlakv_decode_record(fmt, rec, ref_lat, ref_rope));
        if (memcmp(ref_lat, latent[t], sizeof ref_lat) || memcmp(ref_rope, rope[t], sizeof ref_rope))
            FAIL("token %d: read back differs from encode_record + decode_record", t);
        for (int d = 0; d < MLAKV_LATENT_DIM; d++)
            worst = fmax(worst, fabs((double)latent[t][d] - kv_c[t][d]));
    }
    if (!(worst < 0.5)) FAIL("latent error %g too large for nvfp4", worst);

    /* one query row, two heads, attending over all written tokens */
    const int64_t heads = 2;
    mlakv_decode_args a = mlakv_decode_args_default(1, 1, heads, N_TOK);
    static float q[2][MLAKV_QK_DIM], out[2][MLAKV_V_DIM], lse[2];
    int32_t idx[N_TOK];
    for (int h = 0; h < heads; h++)
        for (int d = 0; d < MLAKV_QK_DIM; d++) q[h][d] = (float)((d + h) % 7) / 7.0f - 0.4f;
    for (int t = 0; t < N_TOK; t++) idx[t] = (int32_t)slots[t];
    a.q = q;
    a.q_dtype = MLAKV_F32;
    a.indices = idx;
    a.out = out;
    a.out_dtype = MLAKV_F32;
    a.lse = lse;
    a.mode = MLAKV_ATTN_EXACT;
    a.num_threads = 1;
    OK(mlakv_sparse_decode(&cache, &a));
    for (int h = 0; h < heads; h++)
        if (!isfinite(lse[h]) || !isfinite(out[h][0])) FAIL("decode: non-finite output");

    printf("mlakv %s: wrote and read %d %s records (max latent error %.3g), decode lse %.4f %.4f,"
           " CUDA kernels %s\n",
           mlakv_version(), N_TOK, mlakv_format_get(fmt)->name, worst, lse[0], lse[1],
           mlakv_cuda_compiled() ? "compiled" : "not compiled");
    free(base);
    return 0;
}
