/* mlakv formats: table of the record formats. */
#include <stdio.h>

#include "cli.h"
#include "mlakv.h"

static void formats_usage(FILE *f) {
    fputs("usage: mlakv formats\n"
          "\n"
          "Prints every record format: bytes per token per layer, bits per latent value (latent\n"
          "payload + its scales), RoPE storage, and how many more tokens fit the same memory as\n"
          "the 656-B fp8_ds_mla record (MLA records only; indexer cache not included).\n",
          f);
}

int mlakv_cmd_formats(int argc, char **argv) {
    static const struct option longopts[] = {{"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    cli_getopt_begin();
    int opt;
    while ((opt = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        if (opt == 'h') {
            formats_usage(stdout);
            return 0;
        }
        return cli_option_error("formats", opt, argv, longopts);
    }
    if (cli_no_operands("formats", argc, argv)) return 2;
    const mlakv_format_info *base = mlakv_format_get(MLAKV_FP8_DS_MLA);
    if (base == NULL) {
        fprintf(stderr, "mlakv formats: format table unavailable\n");
        return 1;
    }
    printf("%-28s %7s %12s %-16s %12s %12s\n", "format", "bytes", "bits/latent", "rope",
           "latent scale", "tokens/fp8");
    for (int f = 0; f < MLAKV_FORMAT_COUNT; f++) {
        const mlakv_format_info *fi = mlakv_format_get((mlakv_format)f);
        if (fi == NULL) continue;
        char rope[32], scale[32];
        snprintf(rope, sizeof rope, "%s (%zu B)", fi->rope_bytes == 128 ? "bf16" : "e4m3+fp32",
                 fi->rope_bytes);
        snprintf(scale, sizeof scale, "%s/%zu", fi->latent_scale_bytes == 4 ? "fp32" : "e4m3",
                 fi->latent_group_size);
        if (fi->token_scale_offset != MLAKV_NO_FIELD)
            snprintf(scale, sizeof scale, "e4m3/%zu+fp32", fi->latent_group_size);
        printf("%-28s %7zu %12.3f %-16s %12s %11.3fx\n", fi->name, fi->record_bytes,
               fi->bits_per_latent_value, rope, scale,
               (double)base->record_bytes / (double)fi->record_bytes);
    }
    return 0;
}
