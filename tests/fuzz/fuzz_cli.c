/* Fuzz the mlakv CLI: its argument parsers and `mlakv inspect` over a fuzzed cache file.
 *
 * The CLI's sources (tools/) are compiled into this program with main renamed mlakv_cli_main.
 * Input layout: one flag byte, a 2-byte length L (mod 4096), L bytes written to the file
 * c.bin in a private temporary directory, then the arguments separated by NUL bytes (the
 * argument "@" stands for that file). Arguments containing '/' are refused (no path outside
 * the working directory is opened; `inspect` and `calibrate --check` only read, and no command
 * that writes a file gets to write it, see below). `demo` and `eval` get two unknown options
 * appended, so that only their parsers run (a successful parse would start minutes of work; two,
 * because the first may be taken as the value of a trailing option, and after "--" both are
 * refused as operands). `calibrate` inputs with an argument that may name its output file
 * ("-o...", "--o...": -o, -oFILE, --out and its abbreviations) are refused: it reads "@" as
 * a .npy file and would write the JSON into the working directory.
 *
 * Properties: no crash, no sanitizer report; the exit status is 0, 1 or 2; a failing status
 * comes with a message.
 * MLAKV_FUZZ_STRICT_INSPECT (off by default): `inspect` exits 0 only for a record whose values
 * all decode to finite numbers.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_common.h"

#ifndef MLAKV_FUZZ_STRICT_INSPECT
#define MLAKV_FUZZ_STRICT_INSPECT 0
#endif

int mlakv_cli_main(int argc, char **argv);

#define MAX_ARGS 24
#define MAX_ARG_LEN 200

static char dir_template[] = "/tmp/mlakv-fuzz-cli-XXXXXX";
static char cache_path[sizeof dir_template + 8];

static void cleanup(void) {
    unlink(cache_path);
    rmdir(dir_template);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    if (!mkdtemp(dir_template)) {
        perror("fuzz_cli: temporary directory");
        abort();
    }
    snprintf(cache_path, sizeof cache_path, "%s/c.bin", dir_template);
    atexit(cleanup);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_in in = fz_make(data, size);
    (void)fz_u8(&in); /* flags, reserved */
    size_t len = fz_u16(&in) % 4096;
    if (len > fz_left(&in)) len = fz_left(&in);
    const uint8_t *content = in.p + in.at;
    in.at += len;
    FILE *f = fopen(cache_path, "wb");
    if (!f || fwrite(content, 1, len, f) != len || fclose(f) != 0) abort();

    /* arguments */
    static char store[MAX_ARGS + 4][MAX_ARG_LEN + 1];
    char *argv[MAX_ARGS + 5];
    int argc = 0;
    strcpy(store[argc], "mlakv");
    argv[argc] = store[argc];
    argc++;
    while (fz_left(&in) > 0 && argc < MAX_ARGS) {
        size_t n = 0;
        while (fz_left(&in) > 0) {
            uint8_t c = fz_u8(&in);
            if (c == 0) break;
            if (n < MAX_ARG_LEN) store[argc][n++] = (char)c;
        }
        store[argc][n] = '\0';
        if (strchr(store[argc], '/')) return -1;
        if (strcmp(store[argc], "@") == 0) strcpy(store[argc], cache_path);
        argv[argc] = store[argc];
        argc++;
    }
    if (argc >= 2 && strcmp(argv[1], "calibrate") == 0)
        for (int i = 2; i < argc; i++)
            if (strncmp(argv[i], "-o", 2) == 0 || strncmp(argv[i], "--o", 3) == 0) return -1;
    if (argc >= 2 && (strcmp(argv[1], "demo") == 0 || strcmp(argv[1], "eval") == 0)) {
        strcpy(store[argc], "--no-such-option");
        argv[argc] = store[argc];
        argc++;
        strcpy(store[argc], "--no-such-option");
        argv[argc] = store[argc];
        argc++;
    }
    argv[argc] = NULL;

    /* run with stdout and stderr captured */
    char *out_text = NULL, *err_text = NULL;
    size_t out_len = 0, err_len = 0;
    FILE *out = open_memstream(&out_text, &out_len), *err = open_memstream(&err_text, &err_len);
    if (!out || !err) abort();
    FILE *saved_out = stdout, *saved_err = stderr;
    stdout = out;
    stderr = err;
    int rc = mlakv_cli_main(argc, argv);
    stdout = saved_out;
    stderr = saved_err;
    fclose(out);
    fclose(err);

    FUZZ_ASSERT(rc == 0 || rc == 1 || rc == 2, "exit status %d (argv[1] '%s')", rc,
                argc > 1 ? argv[1] : "");
    FUZZ_ASSERT(rc == 0 || err_len > 0 || out_len > 0, "exit status %d without a message "
                "(argv[1] '%s')", rc, argc > 1 ? argv[1] : "");

#if MLAKV_FUZZ_STRICT_INSPECT
    /* inspect's first line names the file offset and format of the record it decoded */
    if (rc == 0 && argc > 1 && strcmp(argv[1], "inspect") == 0 && out_text) {
        const char *p = strstr(out_text, "; file offset ");
        unsigned long long off;
        char fname[64];
        if (p && sscanf(p, "; file offset %llu; format %63s", &off, fname) == 2) {
            mlakv_format fmt;
            if (mlakv_format_from_name(fname, &fmt) == MLAKV_OK && off + mlakv_record_bytes(fmt) <= len) {
                float l[512], r[64];
                if (mlakv_decode_record(fmt, content + off, l, r) == MLAKV_OK) {
                    for (int i = 0; i < 512; i++)
                        FUZZ_ASSERT(isfinite(l[i]), "inspect exits 0 on latent[%d] = %g", i, l[i]);
                    for (int i = 0; i < 64; i++)
                        FUZZ_ASSERT(isfinite(r[i]), "inspect exits 0 on rope[%d] = %g", i, r[i]);
                }
            }
        }
    }
#endif
    free(out_text);
    free(err_text);
    return 0;
}
