/* Option parsing helpers shared by the subcommands (declared in cli.h). */
#include "cli.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cli_getopt_begin(void) {
    optind = 0;
    opterr = 0;
}

static const struct option *option_by_val(const struct option *longopts, int val) {
    for (const struct option *o = longopts; o->name != NULL; o++)
        if (o->val == val) return o;
    return NULL;
}

/* getopt leaves optind past the element that failed, except inside a cluster of short
 * options ("-xh"); messages about short options therefore name optopt, not an element. */
int cli_option_error(const char *cmd, int opt, char **argv, const struct option *longopts) {
    const char *arg = optind > 0 ? argv[optind - 1] : "";
    const int is_long = strncmp(arg, "--", 2) == 0;
    const struct option *o = optopt != 0 ? option_by_val(longopts, optopt) : NULL;
    if (opt == ':') {
        if (is_long && o != NULL)
            fprintf(stderr, "mlakv %s: --%s needs a value\n", cmd, o->name);
        else
            fprintf(stderr, "mlakv %s: -%c needs a value\n", cmd, optopt);
        return 2;
    }
    if (o != NULL && is_long) { /* "--flag=value" */
        fprintf(stderr, "mlakv %s: --%s takes no value, got '%s'\n", cmd, o->name, arg);
        return 2;
    }
    if (optopt != 0) {
        if (isprint(optopt))
            fprintf(stderr, "mlakv %s: unknown argument '-%c' (try 'mlakv %s --help')\n", cmd,
                    optopt, cmd);
        else
            fprintf(stderr, "mlakv %s: unknown argument (try 'mlakv %s --help')\n", cmd, cmd);
        return 2;
    }
    /* an unknown long option, or an abbreviation of several */
    const char *name = arg + 2;
    size_t len = strcspn(name, "=");
    int matches = 0;
    for (const struct option *p = longopts; p->name != NULL; p++)
        matches += strncmp(p->name, name, len) == 0;
    if (is_long && len > 0 && matches > 1) {
        fprintf(stderr, "mlakv %s: '--%.*s' is ambiguous:", cmd, (int)len, name);
        for (const struct option *p = longopts; p->name != NULL; p++)
            if (strncmp(p->name, name, len) == 0) fprintf(stderr, " --%s", p->name);
        fputc('\n', stderr);
        return 2;
    }
    fprintf(stderr, "mlakv %s: unknown argument '%s' (try 'mlakv %s --help')\n", cmd, arg, cmd);
    return 2;
}

int cli_no_operands(const char *cmd, int argc, char **argv) {
    if (optind >= argc) return 0;
    fprintf(stderr, "mlakv %s: unexpected argument '%s' (try 'mlakv %s --help')\n", cmd,
            argv[optind], cmd);
    return 2;
}

int cli_int(const char *cmd, const char *name, const char *v, long long lo, long long hi,
            long long *out) {
    const char *d = v + (*v == '-' || *v == '+');
    if (*d >= '0' && *d <= '9') { /* strtoll alone would take leading blanks */
        char *end;
        errno = 0;
        long long x = strtoll(v, &end, 10);
        if (errno == 0 && *end == '\0' && x >= lo && x <= hi) {
            *out = x;
            return 0;
        }
    }
    if (hi == LLONG_MAX)
        fprintf(stderr, "mlakv %s: %s '%s' is not an integer >= %lld\n", cmd, name, v, lo);
    else
        fprintf(stderr, "mlakv %s: %s '%s' is not an integer in [%lld, %lld]\n", cmd, name, v,
                lo, hi);
    return 2;
}

int cli_u64(const char *cmd, const char *name, const char *v, unsigned long long *out) {
    if (*v >= '0' && *v <= '9') { /* no sign: strtoull would wrap "-1" */
        char *end;
        errno = 0;
        unsigned long long x = strtoull(v, &end, 0);
        if (errno == 0 && *end == '\0') {
            *out = x;
            return 0;
        }
    }
    fprintf(stderr, "mlakv %s: %s '%s' is not an integer in [0, 2^64) (decimal or 0x hex)\n",
            cmd, name, v);
    return 2;
}

int cli_real(const char *cmd, const char *name, const char *v, double lo, double hi, int bounds,
             double *out) {
    if (*v != '\0' && !isspace((unsigned char)*v)) {
        char *end;
        errno = 0;
        double x = strtod(v, &end);
        int ok = errno == 0 && *end == '\0' && isfinite(x);
        ok = ok && ((bounds & CLI_LO_OPEN) ? x > lo : x >= lo);
        ok = ok && ((bounds & CLI_HI_OPEN) ? x < hi : x <= hi);
        if (ok) {
            *out = x;
            return 0;
        }
    }
    fprintf(stderr, "mlakv %s: %s '%s' is not a number in %c%g, %g%c\n", cmd, name, v,
            (bounds & CLI_LO_OPEN) ? '(' : '[', lo, hi, (bounds & CLI_HI_OPEN) ? ')' : ']');
    return 2;
}
