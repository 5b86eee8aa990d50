/* mlakv CLI (placeholder until the foundation CLI lands). */
#include <stdio.h>

#include "mlakv.h"

int main(void) {
    printf("mlakv %s\n", mlakv_version());
    return 0;
}
