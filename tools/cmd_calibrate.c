/* mlakv calibrate: per-layer latent scales s_l from sample latents.
 *
 * Each input is one layer's sample latents as a .npy file (little-endian float32 or float16,
 * C order, shape [..., 512] or [..., 576]: rows of the latent, or of latent then k_pe, of which
 * the first 512 values count); a directory stands for its *.npy files sorted by name. The
 * layer's max |x| gives s_l = max_abs / 2688 (mlakv_latent_max_abs, mlakv_latent_scale), and
 * the file written is the calibration JSON of calib_json.h. --check FILE validates such a file
 * and prints its scales. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "calib_json.h"
#include "cli.h"
#include "mlakv.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: mlakv calibrate [-o FILE] LAYER.npy... | DIR\n"
            "       mlakv calibrate --check FILE\n"
            "Per-layer latent scale s_l = max |latent| / 2688 of the static NVFP4 records, from\n"
            "sample latents: one .npy per layer (float32 or float16, shape [..., 512] or\n"
            "[..., 576], first 512 values of a row), or a directory of them (sorted by name).\n"
            "  -o, --out FILE  calibration JSON to write (default: print it to stdout)\n"
            "  --check FILE    validate a calibration file and print its scales\n"
            "Options may come before or after the inputs and take their value as the next\n"
            "argument or after '=' (--out=FILE, -oFILE); '--' ends the options.\n");
}

/* One .npy's rows: latent max |x| folded into *max_abs. 0 ok, -1 with a message printed. */
static int npy_max_abs(const char *path, float *max_abs) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "mlakv calibrate: %s: %s\n", path, strerror(errno));
        return -1;
    }
    unsigned char pre[10];
    char *hdr = NULL, *data = NULL;
    int rc = -1;
    if (fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY", 6) != 0) {
        fprintf(stderr, "mlakv calibrate: %s: not a .npy file\n", path);
        goto out;
    }
    size_t hlen;
    if (pre[6] == 1) {
        hlen = (size_t)pre[8] | ((size_t)pre[9] << 8);
    } else if (pre[6] == 2 || pre[6] == 3) {
        unsigned char b[2];
        if (fread(b, 1, 2, f) != 2) goto trunc;
        hlen = (size_t)pre[8] | ((size_t)pre[9] << 8) | ((size_t)b[0] << 16) | ((size_t)b[1] << 24);
    } else {
        fprintf(stderr, "mlakv calibrate: %s: .npy version %d not supported\n", path, pre[6]);
        goto out;
    }
    if (hlen > (1u << 20)) goto trunc;
    hdr = (char *)malloc(hlen + 1);
    if (!hdr || fread(hdr, 1, hlen, f) != hlen) goto trunc;
    hdr[hlen] = '\0';
    mlakv_dtype dtype;
    size_t esz;
    if (strstr(hdr, "'descr': '<f4'")) dtype = MLAKV_F32, esz = 4;
    else if (strstr(hdr, "'descr': '<f2'")) dtype = MLAKV_F16, esz = 2;
    else {
        fprintf(stderr, "mlakv calibrate: %s: dtype not supported (float32 '<f4' or float16 '<f2'): %s\n",
                path, hdr);
        goto out;
    }
    if (!strstr(hdr, "'fortran_order': False")) {
        fprintf(stderr, "mlakv calibrate: %s: Fortran order not supported\n", path);
        goto out;
    }
    const char *sh = strstr(hdr, "'shape': (");
    if (!sh) goto bad_shape;
    sh += strlen("'shape': (");
    long long dims[8], total = 1;
    int nd = 0;
    for (;;) {
        while (*sh == ' ') sh++;
        if (*sh == ')') break;
        char *e;
        long long d = strtoll(sh, &e, 10);
        if (e == sh || d < 0 || nd == 8) goto bad_shape;
        dims[nd++] = d;
        sh = e;
        while (*sh == ' ') sh++;
        if (*sh == ',') sh++;
    }
    if (nd < 1) goto bad_shape;
    const long long cols = dims[nd - 1];
    if (cols != 512 && cols != 576) goto bad_shape;
    for (int i = 0; i < nd; i++) {
        if (dims[i] != 0 && total > (1ll << 40) / dims[i]) goto bad_shape;
        total *= dims[i];
    }
    const long long rows = total / cols;
    data = (char *)malloc((size_t)(total ? total : 1) * esz);
    if (!data) {
        fprintf(stderr, "mlakv calibrate: %s: out of memory\n", path);
        goto out;
    }
    if (fread(data, esz, (size_t)total, f) != (size_t)total) goto trunc;
    if (mlakv_latent_max_abs(rows, data, cols, dtype, max_abs) != MLAKV_OK) {
        fprintf(stderr, "mlakv calibrate: %s: %s\n", path, mlakv_last_error());
        goto out;
    }
    rc = 0;
    goto out;
bad_shape:
    fprintf(stderr, "mlakv calibrate: %s: shape must be [..., 512] or [..., 576]: %s\n", path,
            hdr ? hdr : "");
    goto out;
trunc:
    fprintf(stderr, "mlakv calibrate: %s: truncated or malformed .npy\n", path);
out:
    free(hdr);
    free(data);
    fclose(f);
    return rc;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* the *.npy files of a directory, sorted by name (malloc'd paths) */
static int list_dir(const char *dir, char ***out, int *n) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    char **v = NULL;
    int k = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t l = strlen(e->d_name);
        if (l < 5 || strcmp(e->d_name + l - 4, ".npy") != 0) continue;
        if (k == cap) {
            cap = cap ? 2 * cap : 64;
            char **w = (char **)realloc(v, sizeof(char *) * (size_t)cap);
            if (!w) break;
            v = w;
        }
        size_t pl = strlen(dir) + l + 2;
        v[k] = (char *)malloc(pl);
        if (!v[k]) break;
        snprintf(v[k], pl, "%s/%s", dir, e->d_name);
        k++;
    }
    closedir(d);
    qsort(v, (size_t)k, sizeof(char *), cmp_str);
    *out = v;
    *n = k;
    return 0;
}

int mlakv_cmd_calibrate(int argc, char **argv) {
    const char *outp = NULL, *check = NULL;
    enum { OPT_CHECK = 256 };
    static const struct option longopts[] = {{"help", no_argument, NULL, 'h'},
                                             {"out", required_argument, NULL, 'o'},
                                             {"check", required_argument, NULL, OPT_CHECK},
                                             {NULL, 0, NULL, 0}};
    cli_getopt_begin();
    int opt;
    while ((opt = getopt_long(argc, argv, ":ho:", longopts, NULL)) != -1) {
        switch (opt) {
        case 'h':
            usage(stdout);
            return 0;
        case 'o':
            outp = optarg;
            break;
        case OPT_CHECK:
            check = optarg;
            break;
        default:
            return cli_option_error("calibrate", opt, argv, longopts);
        }
    }
    /* the operands, in order (getopt_long has moved them behind the options) */
    char **inputs = argv + optind;
    const int nin = argc - optind;
    if (check && (outp || nin > 0)) {
        fprintf(stderr, "mlakv calibrate: --check FILE takes no %s (try 'mlakv calibrate --help')\n",
                outp ? "-o/--out" : "input files");
        return 2;
    }
    char err[512];
    if (check) {
        calib_file c;
        if (calib_read(check, &c, err, sizeof err) != 0) {
            fprintf(stderr, "mlakv calibrate: %s: %s\n", check, err);
            return 1;
        }
        printf("%s: %d layers\n", check, c.num_layers);
        for (int l = 0; l < c.num_layers; l++)
            printf("  layer %d: max_abs %.9g scale %.9g\n", l, (double)c.max_abs[l], (double)c.scales[l]);
        calib_free(&c);
        return 0;
    }
    if (nin == 0) {
        fprintf(stderr, "mlakv calibrate: no input files (try 'mlakv calibrate --help')\n");
        return 2;
    }
    /* a single directory stands for its sorted *.npy files */
    char **files = inputs, **owned = NULL;
    int nf = nin;
    struct stat st;
    if (nin == 1 && stat(inputs[0], &st) == 0 && S_ISDIR(st.st_mode)) {
        if (list_dir(inputs[0], &owned, &nf) != 0 || nf == 0) {
            fprintf(stderr, "mlakv calibrate: %s: no .npy files\n", inputs[0]);
            free(owned);
            return 1;
        }
        files = owned;
    }
    int rc = 0;
    float *max_abs = (float *)calloc((size_t)nf, sizeof(float));
    float *scales = (float *)calloc((size_t)nf, sizeof(float));
    if (!max_abs || !scales) rc = 1;
    for (int l = 0; l < nf && rc == 0; l++) {
        max_abs[l] = 0.0f;
        if (npy_max_abs(files[l], &max_abs[l]) != 0 ||
            mlakv_latent_scale(max_abs[l], &scales[l]) != MLAKV_OK)
            rc = 1;
    }
    if (rc == 0) {
        if (outp) {
            if (calib_write(outp, nf, max_abs, scales, err, sizeof err) != 0) {
                fprintf(stderr, "mlakv calibrate: %s\n", err);
                rc = 1;
            } else {
                printf("wrote %s: %d layers\n", outp, nf);
            }
        } else {
            printf("{\"format\": \"%s\", \"num_layers\": %d, \"latent_dim\": 512, "
                   "\"denominator\": 2688.0,\n \"scales\": [", CALIB_FORMAT_TAG, nf);
            for (int l = 0; l < nf; l++) printf("%s%.9g", l ? ", " : "", (double)scales[l]);
            printf("],\n \"max_abs\": [");
            for (int l = 0; l < nf; l++) printf("%s%.9g", l ? ", " : "", (double)max_abs[l]);
            printf("]}\n");
        }
    }
    if (owned) {
        for (int i = 0; i < nf; i++) free(owned[i]);
        free(owned);
    }
    free(max_abs);
    free(scales);
    return rc;
}
