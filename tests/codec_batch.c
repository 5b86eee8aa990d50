/* Test helper for tests/test_codecs_ref.py: streams arrays through libmlakv's scalar codecs.
 * usage: codec_batch OP < input > output
 *   e4m3_enc, e2m1_enc, bf16_enc, f16_enc: fp32 in -> uint8 / uint8 / uint16 / uint16 out
 *   e4m3_dec, e2m1_dec: uint8 in -> fp32 out;  bf16_dec, f16_dec: uint16 in -> fp32 out
 * Every element goes through the public scalar function, one call per element. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "mlakv.h"

enum { CHUNK = 1 << 16 };

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: codec_batch OP < in > out\n");
        return 2;
    }
    const char *op = argv[1];
    static float f[CHUNK];
    static uint8_t b[CHUNK];
    static uint16_t h[CHUNK];
    int kind; /* 0: f32 -> u8, 1: f32 -> u16, 2: u8 -> f32, 3: u16 -> f32 */
    if (!strcmp(op, "e4m3_enc") || !strcmp(op, "e2m1_enc")) kind = 0;
    else if (!strcmp(op, "bf16_enc") || !strcmp(op, "f16_enc")) kind = 1;
    else if (!strcmp(op, "e4m3_dec") || !strcmp(op, "e2m1_dec")) kind = 2;
    else if (!strcmp(op, "bf16_dec") || !strcmp(op, "f16_dec")) kind = 3;
    else {
        fprintf(stderr, "codec_batch: unknown op '%s'\n", op);
        return 2;
    }
    for (;;) {
        size_t n;
        if (kind == 0) {
            n = fread(f, 4, CHUNK, stdin);
            for (size_t i = 0; i < n; i++)
                b[i] = op[1] == '4' ? mlakv_e4m3_encode(f[i]) : mlakv_e2m1_encode(f[i]);
            if (fwrite(b, 1, n, stdout) != n) return 1;
        } else if (kind == 1) {
            n = fread(f, 4, CHUNK, stdin);
            for (size_t i = 0; i < n; i++)
                h[i] = op[0] == 'b' ? mlakv_f32_to_bf16(f[i]) : mlakv_f32_to_f16(f[i]);
            if (fwrite(h, 2, n, stdout) != n) return 1;
        } else if (kind == 2) {
            n = fread(b, 1, CHUNK, stdin);
            for (size_t i = 0; i < n; i++)
                f[i] = op[1] == '4' ? mlakv_e4m3_decode(b[i]) : mlakv_e2m1_decode(b[i]);
            if (fwrite(f, 4, n, stdout) != n) return 1;
        } else {
            n = fread(h, 2, CHUNK, stdin);
            for (size_t i = 0; i < n; i++)
                f[i] = op[0] == 'b' ? mlakv_bf16_to_f32(h[i]) : mlakv_f16_to_f32(h[i]);
            if (fwrite(f, 4, n, stdout) != n) return 1;
        }
        if (n < CHUNK) break;
    }
    return ferror(stdin) ? 1 : 0;
}
