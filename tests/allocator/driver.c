/* driver.c — engine/core/allocator.c driven from text, for the differential
 * test against tools/allocator_replay.py (tests/allocator/differential.py):
 * reads PYTORCH_CUDA_ALLOC_CONF's text on the first line, then "a ID BYTES"
 * (malloc) and "f ID" (free) lines; prints memory_reserved after each. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "allocator.h"

enum { MAX_IDS = 100000 };

int main(void) {
    char conf[256];
    if (!fgets(conf, sizeof conf, stdin)) return 1;
    conf[strcspn(conf, "\n")] = 0;
    vp_alloc_config c;
    char message[256];
    if (!vp_alloc_config_parse(conf, &c, message, sizeof message)) {
        puts(message);
        return 1;
    }
    vp_allocator a;
    vp_allocator_init_config(&a, &c);
    int32_t *block = calloc(MAX_IDS, sizeof *block);
    if (!block) return 1;
    char op;
    unsigned id;
    unsigned long long size;
    while (scanf(" %c %u", &op, &id) == 2 && id < MAX_IDS) {
        if (op == 'a' && scanf("%llu", &size) == 1) block[id] = vp_allocator_malloc(&a, size);
        else vp_allocator_release(&a, block[id]);
        printf("%llu\n", (unsigned long long)a.reserved);
    }
    int failed = a.failed;
    vp_allocator_free(&a);
    free(block);
    return failed;
}
