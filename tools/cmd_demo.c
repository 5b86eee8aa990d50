/* mlakv demo: placeholder until engineer B's implementation lands (B overwrites this file). */
#include <stdio.h>

#include "cli.h"

int mlakv_cmd_demo(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "mlakv demo: not yet available\n");
    return 1;
}
