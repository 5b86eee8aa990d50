/* mlakv capacity: KV tokens that fit a memory budget, per model preset and record format. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli.h"
#include "mlakv.h"

static void capacity_usage(FILE *f) {
    fputs("usage: mlakv capacity --model NAME --budget SIZE [--format NAME] [--block-size N]\n"
          "                      [--dcp N] [--no-mtp]\n"
          "\n"
          "KV cache capacity of SIZE bytes of memory per GPU: bytes per token over all layers\n"
          "(MLA records + indexer cache), whole blocks of N tokens that fit, and the context that\n"
          "fits across a decode-context-parallel group of --dcp GPUs.\n"
          "\n"
          "  --model NAME      deepseek-v3.2, glm-5.2 or glm-5\n"
          "  --budget SIZE     a number and its unit, e.g. 40GiB, 80GB, 1.5TiB, 123456B (units\n"
          "                    B, KB, KiB, MB, MiB, GB, GiB, TB, TiB; KB = 1000 B, KiB = 1024 B)\n"
          "  --format NAME     one record format (default: all formats side by side)\n"
          "  --block-size N    tokens per cache block (default 64)\n"
          "  --dcp N           decode-context-parallel GPUs (default 1)\n"
          "  --no-mtp          leave out the MTP (multi-token prediction) layers\n"
          "Options take their value as the next argument or after '=' (--budget=40GiB).\n",
          f);
}

/* Parse "40GiB", "1.5 TB", "123B": digits[.digits] unit. Returns 0 and the byte count
 * (rounded down) on success, -1 on a malformed or too large value, -2 on a number without a
 * unit (a bare "40" could mean GiB or bytes: it is refused rather than guessed). */
static int parse_size(const char *s, uint64_t *out) {
    static const struct {
        const char *unit;
        long double mult;
    } units[] = {{"b", 1.0L},           {"kb", 1e3L},
                 {"kib", 1024.0L},    {"mb", 1e6L},          {"mib", 1048576.0L},
                 {"gb", 1e9L},        {"gib", 1073741824.0L}, {"tb", 1e12L},
                 {"tib", 1099511627776.0L}};
    const char *p = s;
    size_t int_digits = 0, frac_digits = 0;
    while (*p >= '0' && *p <= '9') p++, int_digits++;
    if (*p == '.') {
        p++;
        while (*p >= '0' && *p <= '9') p++, frac_digits++;
    }
    if (int_digits + frac_digits == 0 || int_digits + frac_digits > 30) return -1;
    size_t num_len = (size_t)(p - s);
    char num[40];
    memcpy(num, s, num_len);
    num[num_len] = '\0';
    while (*p == ' ') p++;
    if (*p == '\0') return -2;
    for (size_t u = 0; u < sizeof units / sizeof units[0]; u++) {
        if (strcasecmp(p, units[u].unit) != 0) continue;
        errno = 0;
        long double v = strtold(num, NULL);
        if (errno != 0) return -1;
        v = floorl(v * units[u].mult);
        if (!(v >= 0.0L) || v >= 18446744073709551616.0L) return -1;
        *out = (uint64_t)v;
        return 0;
    }
    return -1;
}

/* v (non-negative) with thousands separators; the whole uint64 range */
static void group_digits(uint64_t v, char *buf, size_t n) {
    char tmp[32];
    snprintf(tmp, sizeof tmp, "%llu", (unsigned long long)v);
    size_t len = strlen(tmp), j = 0;
    for (size_t i = 0; i < len && j + 1 < n; i++) {
        if (i > 0 && (len - i) % 3 == 0 && j + 2 < n) buf[j++] = ',';
        buf[j++] = tmp[i];
    }
    buf[j] = '\0';
}

int mlakv_cmd_capacity(int argc, char **argv) {
    const char *model_name = NULL, *budget_str = NULL, *format_name = NULL;
    long long block_size = 64, dcp = 1;
    int include_mtp = 1;
    enum { OPT_MODEL = 256, OPT_BUDGET, OPT_FORMAT, OPT_BLOCK_SIZE, OPT_DCP, OPT_NO_MTP };
    static const struct option longopts[] = {
        {"help", no_argument, NULL, 'h'},
        {"model", required_argument, NULL, OPT_MODEL},
        {"budget", required_argument, NULL, OPT_BUDGET},
        {"format", required_argument, NULL, OPT_FORMAT},
        {"block-size", required_argument, NULL, OPT_BLOCK_SIZE},
        {"dcp", required_argument, NULL, OPT_DCP},
        {"no-mtp", no_argument, NULL, OPT_NO_MTP},
        {NULL, 0, NULL, 0}};
    cli_getopt_begin();
    int opt;
    while ((opt = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        const char *v = optarg;
        switch (opt) {
        case 'h':
            capacity_usage(stdout);
            return 0;
        case OPT_NO_MTP:
            include_mtp = 0;
            break;
        case OPT_MODEL:
            model_name = v;
            break;
        case OPT_BUDGET:
            budget_str = v;
            break;
        case OPT_FORMAT:
            format_name = v;
            break;
        case OPT_BLOCK_SIZE:
            if (cli_int("capacity", "--block-size", v, 1, LLONG_MAX, &block_size)) return 2;
            break;
        case OPT_DCP:
            if (cli_int("capacity", "--dcp", v, 1, 1 << 20, &dcp)) return 2;
            break;
        default:
            return cli_option_error("capacity", opt, argv, longopts);
        }
    }
    if (cli_no_operands("capacity", argc, argv)) return 2;
    if (model_name == NULL || budget_str == NULL) {
        fprintf(stderr, "mlakv capacity: --model and --budget are required (try 'mlakv capacity "
                        "--help')\n");
        return 2;
    }
    mlakv_model model;
    if (mlakv_model_from_name(model_name, &model) != MLAKV_OK) {
        fprintf(stderr, "mlakv capacity: unknown model '%s' (deepseek-v3.2, glm-5.2, glm-5)\n",
                model_name);
        return 2;
    }
    uint64_t budget;
    int size_rc = parse_size(budget_str, &budget);
    if (size_rc == -2) {
        fprintf(stderr, "mlakv capacity: --budget '%s' has no unit: write e.g. %sGiB (units B, KB, "
                        "KiB, MB, MiB, GB, GiB, TB, TiB)\n", budget_str, budget_str);
        return 2;
    }
    if (size_rc != 0) {
        fprintf(stderr, "mlakv capacity: --budget '%s' is not a size like 40GiB, 80GB or 123456B "
                        "(units B, KB, KiB, MB, MiB, GB, GiB, TB, TiB)\n", budget_str);
        return 2;
    }
    int first = 0, last = MLAKV_FORMAT_COUNT - 1;
    if (format_name != NULL) {
        mlakv_format fmt;
        if (mlakv_format_from_name(format_name, &fmt) != MLAKV_OK) {
            fprintf(stderr, "mlakv capacity: unknown format '%s' (see 'mlakv formats')\n",
                    format_name);
            return 2;
        }
        first = last = (int)fmt;
    }

    const mlakv_model_info *mi = mlakv_model_get(model);
    mlakv_capacity base;
    mlakv_status st = mlakv_plan_capacity(model, MLAKV_FP8_DS_MLA, budget, block_size, (int)dcp,
                                          include_mtp, &base);
    if (st != MLAKV_OK) {
        fprintf(stderr, "mlakv capacity: %s\n", mlakv_last_error());
        return st == MLAKV_ERR_OVERFLOW ? 2 : 1;
    }
    printf("model %s: %d MLA layers%s, indexer (%d B/token) in %d layers%s\n", mi->name,
           mi->mla_layers + (include_mtp ? mi->mtp_layers : 0),
           include_mtp ? " incl. MTP" : " (MTP left out)",
           mi->indexer_bytes_per_token, mi->indexer_layers + (include_mtp ? mi->mtp_indexer_layers : 0),
           include_mtp ? " incl. MTP" : "");
    /* the budget as computed with (all of uint64: no clamping) */
    char budget_buf[40];
    group_digits(budget, budget_buf, sizeof budget_buf);
    printf("budget %s (%s B) per GPU, block size %lld, dcp %lld\n\n", budget_str, budget_buf,
           block_size, dcp);
    printf("%-28s %10s %14s %16s %16s %9s\n", "format", "B/token", "blocks/GPU", "tokens/GPU",
           "context tokens", "vs fp8");
    for (int f = first; f <= last; f++) {
        mlakv_capacity c;
        st = mlakv_plan_capacity(model, (mlakv_format)f, budget, block_size, (int)dcp,
                                 include_mtp, &c);
        if (st != MLAKV_OK) {
            fprintf(stderr, "mlakv capacity: %s\n", mlakv_last_error());
            return st == MLAKV_ERR_OVERFLOW ? 2 : 1;
        }
        char bpt[32], blocks[32], per_gpu[32], total[32];
        group_digits((uint64_t)c.bytes_per_token, bpt, sizeof bpt);
        group_digits((uint64_t)c.blocks, blocks, sizeof blocks);
        group_digits((uint64_t)c.tokens_per_gpu, per_gpu, sizeof per_gpu);
        group_digits((uint64_t)c.tokens, total, sizeof total);
        char ratio[16] = "-";
        if (base.tokens > 0) snprintf(ratio, sizeof ratio, "%.3fx", (double)c.tokens / (double)base.tokens);
        printf("%-28s %10s %14s %16s %16s %9s\n", mlakv_format_get((mlakv_format)f)->name, bpt,
               blocks, per_gpu, total, ratio);
    }
    return 0;
}
