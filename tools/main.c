/* mlakv - command-line front end: dispatches to the subcommands declared in cli.h. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "mlakv.h"

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} command;

static const command commands[] = {
    {"formats", mlakv_cmd_formats, "table of record formats: bytes, bits per value, capacity vs fp8"},
    {"capacity", mlakv_cmd_capacity, "KV tokens that fit a memory budget, per model and format"},
    {"inspect", mlakv_cmd_inspect, "decode one record of a raw cache file field by field"},
    {"demo", mlakv_cmd_demo, "write synthetic latents through every format, compare error and size"},
    {"eval", mlakv_cmd_eval, "evaluate formats on synthetic or real latents"},
    {"calibrate", mlakv_cmd_calibrate, "per-layer latent scales of the static NVFP4 records (JSON)"},
};
#define NUM_COMMANDS (sizeof commands / sizeof commands[0])

static void usage(FILE *f) {
    fprintf(f,
            "mlakv %s - sparse-MLA KV cache records (fp8 and NVFP4)\n"
            "\n"
            "usage: mlakv <command> [options]\n"
            "       mlakv <command> --help\n"
            "       mlakv --version\n"
            "\n"
            "commands:\n",
            mlakv_version());
    for (size_t i = 0; i < NUM_COMMANDS; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "mlakv: missing command (try 'mlakv --help')\n");
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "-V") == 0) {
        printf("mlakv %s (CUDA kernels %s)\n", mlakv_version(),
               mlakv_cuda_compiled() ? "compiled" : "not compiled");
        return 0;
    }
    for (size_t i = 0; i < NUM_COMMANDS; i++)
        if (strcmp(cmd, commands[i].name) == 0) return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "mlakv: unknown command '%s' (try 'mlakv --help')\n", cmd);
    return 2;
}
