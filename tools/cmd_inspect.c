/* mlakv inspect: decode one record of a raw cache file field by field. */
#define _FILE_OFFSET_BITS 64
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "cli.h"
#include "format/records.h"
#include "mlakv.h"

static void inspect_usage(FILE *f) {
    fputs("usage: mlakv inspect --format NAME [--block-size N [--block-stride BYTES]] FILE SLOT\n"
          "\n"
          "Decodes the record of flat slot SLOT in FILE, a raw dump of one layer's paged cache\n"
          "(num_blocks x block_size records, block b at b * BYTES). Prints every field: scales\n"
          "(raw bytes and values), the first latent values, RoPE, min/max per scale group, and\n"
          "flags ('!!' lines) non-zero padding bytes, NaN or negative scales and values that\n"
          "decode to NaN or Inf; exit 1 when anything is flagged, 2 on bad arguments.\n"
          "\n"
          "  --format NAME       record format (see 'mlakv formats')\n"
          "  --block-size N      tokens per block (default 64; only matters with --block-stride)\n"
          "  --block-stride B    bytes from one block to the next (default: dense,\n"
          "                      block-size x record bytes)\n"
          "Options may come before or after FILE and SLOT and take their value as the next\n"
          "argument or after '=' (--format=nvfp4_ds_mla); '--' ends the options.\n",
          f);
}

static float f32_at(const uint8_t *rec, size_t off) {
    float v;
    memcpy(&v, rec + off, 4);
    return v;
}

static uint32_t u32_at(const uint8_t *rec, size_t off) {
    uint32_t v;
    memcpy(&v, rec + off, 4);
    return v;
}

/* Print [lo, hi) byte ranges that must be zero but are not; returns the count of bad bytes. */
static int check_zero(const uint8_t *rec, size_t lo, size_t hi, const char *what) {
    int bad = 0;
    for (size_t i = lo; i < hi; i++) bad += rec[i] != 0;
    if (bad) {
        printf("  !! %s [%zu, %zu): %d non-zero byte(s):", what, lo, hi, bad);
        for (size_t i = lo; i < hi; i++) printf(" %02x", rec[i]);
        printf("\n");
    } else {
        printf("  %s [%zu, %zu): all zero\n", what, lo, hi);
    }
    return bad;
}

static void minmax(const float *v, size_t n, float *mn, float *mx) {
    *mn = INFINITY;
    *mx = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        if (v[i] < *mn) *mn = v[i];
        if (v[i] > *mx) *mx = v[i];
    }
}

static void print_rope(const float *rope, const uint8_t *rec, const mlakv_format_info *fi) {
    float mn, mx;
    minmax(rope, MLAKV_ROPE_DIM, &mn, &mx);
    printf("rope [%zu, %zu): %s, min %.6g max %.6g\n  first 8:", fi->rope_offset,
           fi->rope_offset + fi->rope_bytes, fi->rope_bytes == 128 ? "bf16" : "e4m3 x rope scale",
           mn, mx);
    for (int j = 0; j < 8; j++) {
        if (fi->rope_bytes == 128) {
            uint16_t b;
            memcpy(&b, rec + fi->rope_offset + 2 * (size_t)j, 2);
            printf(" %.6g(%04x)", rope[j], b);
        } else {
            printf(" %.6g(%02x)", rope[j], rec[fi->rope_offset + (size_t)j]);
        }
    }
    printf("\n");
}

static int inspect_record(mlakv_format format, const uint8_t *rec) {
    const mlakv_format_info *fi = mlakv_format_get(format);
    float latent[MLAKV_LATENT_DIM], rope[MLAKV_ROPE_DIM];
    if (mlakv_decode_record(format, rec, latent, rope) != MLAKV_OK) {
        fprintf(stderr, "mlakv inspect: %s\n", mlakv_last_error());
        return 1;
    }
    int problems = 0;
    float mn, mx;
    minmax(latent, MLAKV_LATENT_DIM, &mn, &mx);
    printf("latent: min %.6g max %.6g", mn, mx);
    size_t nonzero = 0, nans = 0, infs = 0, rope_bad = 0;
    for (int i = 0; i < MLAKV_LATENT_DIM; i++) {
        nonzero += latent[i] != 0.0f;
        nans += isnan(latent[i]) != 0;
        infs += isinf(latent[i]) != 0;
    }
    for (int j = 0; j < MLAKV_ROPE_DIM; j++) rope_bad += !isfinite(rope[j]);
    printf(", %zu of 512 non-zero\n", nonzero);
    if (nans) {
        printf("  !! %zu latent value(s) decode to NaN\n", nans);
        problems++;
    }
    if (infs) {
        printf("  !! %zu latent value(s) decode to +-Inf\n", infs);
        problems++;
    }
    if (rope_bad) {
        printf("  !! %zu RoPE value(s) decode to NaN or +-Inf\n", rope_bad);
        problems++;
    }

    if (format == MLAKV_FP8_DS_MLA) {
        for (int t = 0; t < 4; t++) {
            size_t off = fi->latent_scale_offset + 4 * (size_t)t;
            float s = f32_at(rec, off);
            minmax(latent + 128 * t, 128, &mn, &mx);
            printf("tile %d [%3d, %3d): scale %.9g (fp32 %08x @%zu), min %.6g max %.6g\n", t,
                   128 * t, 128 * t + 128, s, u32_at(rec, off), off, mn, mx);
            if (!isfinite(s) || s < 0.0f) {
                printf("  !! tile scale is not a finite non-negative number\n");
                problems++;
            }
            printf("  first 8:");
            for (int i = 0; i < 8; i++)
                printf(" %.6g(%02x)", latent[128 * t + i], rec[128 * (size_t)t + (size_t)i]);
            printf("\n");
        }
        print_rope(rope, rec, fi);
        printf("padding: none in this format\n");
        return problems ? 1 : 0;
    }

    /* NVFP4 formats. */
    float outer = 1.0f;
    if (fi->token_scale_offset != MLAKV_NO_FIELD) {
        outer = f32_at(rec, fi->token_scale_offset);
        printf("token scale s_t: %.9g (fp32 %08x @%zu)\n", outer, u32_at(rec, fi->token_scale_offset),
               fi->token_scale_offset);
        if (!isfinite(outer) || outer < 0.0f) {
            printf("  !! token scale is not a finite non-negative number\n");
            problems++;
        }
    }
    for (int g = 0; g < 32; g++) {
        uint8_t sb = rec[fi->latent_scale_offset + (size_t)g];
        float d = mlakv_e4m3_decode(sb);
        minmax(latent + 16 * g, 16, &mn, &mx);
        printf("group %2d [%3d, %3d): scale %02x = %-10.6g", g, 16 * g, 16 * g + 16, sb, d);
        if (fi->token_scale_offset != MLAKV_NO_FIELD) printf(" (x s_t = %.6g)", d * outer);
        printf(" min %-10.6g max %-10.6g first 4:", mn, mx);
        for (int i = 0; i < 4; i++) {
            size_t e = 16 * (size_t)g + (size_t)i;
            uint8_t nib = (uint8_t)((rec[e / 2] >> ((e & 1) ? 4 : 0)) & 0xF);
            printf(" %.6g(%x)", latent[e], nib);
        }
        printf("\n");
        if (sb == 0x7F || sb == 0xFF) {
            printf("  !! group scale byte is NaN\n");
            problems++;
        } else if (sb & 0x80) {
            printf("  !! group scale is negative (writers never store one)\n");
            problems++;
        }
    }
    if (fi->rope_scale_offset != MLAKV_NO_FIELD) {
        float rs = f32_at(rec, fi->rope_scale_offset);
        printf("rope scale: %.9g (fp32 %08x @%zu)\n", rs, u32_at(rec, fi->rope_scale_offset),
               fi->rope_scale_offset);
        if (!isfinite(rs) || rs < 0.0f) {
            printf("  !! rope scale is not a finite non-negative number\n");
            problems++;
        }
    }
    print_rope(rope, rec, fi);
    int bad = 0;
    if (format == MLAKV_NVFP4_DS_MLA) {
        bad += check_zero(rec, 288, 304, "padding");
    } else if (format == MLAKV_NVFP4_FP8_ROPE) {
        bad += check_zero(rec, 292, 304, "padding (incl. unused token-scale field)");
    } else {
        bad += check_zero(rec, 296, 304, "padding");
    }
    if (bad) problems++;
    return problems ? 1 : 0;
}

int mlakv_cmd_inspect(int argc, char **argv) {
    const char *format_name = NULL, *file = NULL, *slot_str = NULL;
    long long block_size = 64, block_stride = 0;
    int have_block_size = 0;
    enum { OPT_FORMAT = 256, OPT_BLOCK_SIZE, OPT_BLOCK_STRIDE };
    static const struct option longopts[] = {
        {"help", no_argument, NULL, 'h'},
        {"format", required_argument, NULL, OPT_FORMAT},
        {"block-size", required_argument, NULL, OPT_BLOCK_SIZE},
        {"block-stride", required_argument, NULL, OPT_BLOCK_STRIDE},
        {NULL, 0, NULL, 0}};
    cli_getopt_begin();
    int opt;
    /* GNU getopt_long permutes: FILE and SLOT may come before, between or after the options */
    while ((opt = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        const char *v = optarg;
        switch (opt) {
        case 'h':
            inspect_usage(stdout);
            return 0;
        case OPT_FORMAT:
            format_name = v;
            break;
        case OPT_BLOCK_SIZE:
            if (cli_int("inspect", "--block-size", v, 1, LLONG_MAX, &block_size)) return 2;
            have_block_size = 1;
            break;
        case OPT_BLOCK_STRIDE:
            if (cli_int("inspect", "--block-stride", v, 1, LLONG_MAX, &block_stride)) return 2;
            break;
        default:
            return cli_option_error("inspect", opt, argv, longopts);
        }
    }
    if (optind < argc) file = argv[optind++];
    if (optind < argc) slot_str = argv[optind++];
    if (cli_no_operands("inspect", argc, argv)) return 2;
    if (format_name == NULL || file == NULL || slot_str == NULL) {
        fprintf(stderr, "mlakv inspect: needs --format NAME, FILE and SLOT (try 'mlakv inspect "
                        "--help')\n");
        return 2;
    }
    mlakv_format format;
    if (mlakv_format_from_name(format_name, &format) != MLAKV_OK) {
        fprintf(stderr, "mlakv inspect: unknown format '%s' (see 'mlakv formats')\n", format_name);
        return 2;
    }
    long long slot;
    if (cli_int("inspect", "SLOT", slot_str, 0, LLONG_MAX, &slot)) return 2;
    if (block_stride != 0 && !have_block_size) {
        fprintf(stderr, "mlakv inspect: --block-stride needs --block-size\n");
        return 2;
    }
    const size_t rb = mlakv_record_bytes(format);
    if (block_stride == 0) {
        if ((unsigned long long)block_size > (unsigned long long)INT64_MAX / rb) {
            fprintf(stderr, "mlakv inspect: --block-size %lld is too large\n", block_size);
            return 2;
        }
        block_stride = block_size * (long long)rb;
    } else if (block_stride / block_size < (long long)rb) {
        fprintf(stderr, "mlakv inspect: --block-stride %lld is smaller than block-size x %zu B\n",
                block_stride, rb);
        return 2;
    }

    FILE *fp = fopen(file, "rb");
    if (fp == NULL) {
        fprintf(stderr, "mlakv inspect: cannot open '%s': %s\n", file, strerror(errno));
        return 1;
    }
    struct stat stbuf;
    if (fstat(fileno(fp), &stbuf) != 0 || !S_ISREG(stbuf.st_mode)) {
        fprintf(stderr, "mlakv inspect: '%s' is not a regular file\n", file);
        fclose(fp);
        return 1;
    }
    const unsigned long long fsize = (unsigned long long)stbuf.st_size;
    const unsigned long long block = (unsigned long long)slot / (unsigned long long)block_size;
    const unsigned long long in_block = (unsigned long long)slot % (unsigned long long)block_size;
    /* offset = block * stride + in_block * rb, checked against the file size without overflow. */
    int in_range = block <= fsize / (unsigned long long)block_stride;
    unsigned long long offset = 0;
    if (in_range) {
        offset = block * (unsigned long long)block_stride + in_block * rb;
        in_range = offset <= fsize && fsize - offset >= rb;
    }
    if (!in_range) {
        fprintf(stderr, "mlakv inspect: slot %lld lies beyond the end of '%s' (%llu B)\n", slot,
                file, fsize);
        fclose(fp);
        return 2;
    }
    uint8_t rec[656];
    if (fseeko(fp, (off_t)offset, SEEK_SET) != 0 || fread(rec, 1, rb, fp) != rb) {
        fprintf(stderr, "mlakv inspect: cannot read %zu B at offset %llu of '%s'\n", rb, offset,
                file);
        fclose(fp);
        return 1;
    }
    fclose(fp);
    printf("%s: slot %lld = block %llu, offset %llu in block; file offset %llu; format %s (%zu B)\n",
           file, slot, block, in_block, offset, mlakv_format_get(format)->name, rb);
    return inspect_record(format, rec);
}
