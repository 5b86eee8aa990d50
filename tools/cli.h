/* Subcommands of the mlakv CLI. Each takes the arguments after its name (argv[0] is the
 * subcommand name) and returns the process exit code: 0 ok, 1 failure, 2 bad arguments. */
#ifndef MLAKV_TOOLS_CLI_H
#define MLAKV_TOOLS_CLI_H

#include <getopt.h>

int mlakv_cmd_formats(int argc, char **argv);
int mlakv_cmd_capacity(int argc, char **argv);
int mlakv_cmd_inspect(int argc, char **argv);
int mlakv_cmd_demo(int argc, char **argv);
int mlakv_cmd_eval(int argc, char **argv);
int mlakv_cmd_calibrate(int argc, char **argv);

/* ---- option parsing shared by the subcommands ----------------------------------------------
 * Every command parses with getopt_long and an optstring that starts with ':' (a missing value
 * is reported as ':'), so "--opt value" and "--opt=value" both work, long options may be
 * abbreviated while unambiguous, options and operands may come in any order, and "--" ends the
 * options. A long option's val is either a short option letter of the optstring ('h', 'o')
 * or a value >= 256. Errors print one line, "mlakv CMD: ...", and the command returns 2. */

/* Restart getopt for a fresh argument vector (optind = 0: full re-initialisation, as the
 * commands may run more than once per process, e.g. in the CLI fuzzer) with getopt's own
 * messages off. */
void cli_getopt_begin(void);

/* Reports what getopt_long's ':' or '?' (opt) means: a missing value, an unknown or
 * ambiguous option, a value given to an option that takes none. Returns 2. */
int cli_option_error(const char *cmd, int opt, char **argv, const struct option *longopts);

/* Returns 2 with a message naming the first operand left after the options (argv[optind]),
 * or 0 when there is none. */
int cli_no_operands(const char *cmd, int argc, char **argv);

/* Parses v, the value of NAME, as a decimal integer in [lo, hi] (an optional sign, digits,
 * nothing else). Returns 0, or 2 with "mlakv CMD: NAME 'v' is not an integer >= lo" (hi =
 * LLONG_MAX) or "... in [lo, hi]". */
int cli_int(const char *cmd, const char *name, const char *v, long long lo, long long hi,
            long long *out);

/* Parses v as an unsigned 64-bit integer, decimal or 0x-prefixed hexadecimal (seeds).
 * Returns 0, or 2 with a message. */
int cli_u64(const char *cmd, const char *name, const char *v, unsigned long long *out);

/* Interval bounds of cli_real: open (excluded) or closed (included). */
enum { CLI_CLOSED = 0, CLI_LO_OPEN = 1, CLI_HI_OPEN = 2, CLI_OPEN = 3 };

/* Parses v as a finite real number between lo and hi (bounds per CLI_*). Returns 0, or 2 with
 * "mlakv CMD: NAME 'v' is not a number in (lo, hi]" (brackets as the bounds). */
int cli_real(const char *cmd, const char *name, const char *v, double lo, double hi, int bounds,
             double *out);

#endif
