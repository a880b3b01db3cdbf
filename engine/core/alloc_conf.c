/* alloc_conf.c — PYTORCH_CUDA_ALLOC_CONF's text, "option:value,...", read
 * as c10's allocator configuration reads it (c10/core/AllocatorConfig.cpp
 * since PyTorch 2.8, c10/cuda/CUDAAllocatorConfig.cpp before: tokens split
 * at ',' and ':', spaces ignored), for the options the simulation honours
 * (allocator.c); the others are refused by name, or accepted where they
 * touch no device memory. */
#include "allocator.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIB (1024ull * 1024ull)

/* The next token: an option name or value up to ',' or ':' (spaces
 * trimmed), into `out`; returns where it ended. */
static const char *token(const char *s, char *out, size_t size) {
    while (*s == ' ') s++;
    size_t n = 0;
    while (*s && *s != ',' && *s != ':') {
        if (n + 1 < size) out[n++] = *s;
        s++;
    }
    while (n && out[n - 1] == ' ') n--;
    out[n] = 0;
    return s;
}

static bool whole(const char *s, unsigned long long *out) {
    if (!isdigit((unsigned char)*s)) return false;
    char *end = NULL;
    *out = strtoull(s, &end, 10);
    return end && !*end && *out < (1ull << 40);
}

/* Options with no effect on device memory: accepted as they are. */
static const char *const host_only[] = {"release_lock_on_cudamalloc", "pinned_use_cuda_host_register",
                                        "pinned_num_register_threads", "pinned_use_background_threads", NULL};

static bool option(vp_alloc_config *c, const char *name, const char *value, char *message, size_t size) {
    unsigned long long n;
    if (strcmp(name, "max_split_size_mb") == 0) {
        /* kLargeBuffer / kMB = 20 at least (AllocatorConfig::parseMaxSplitSize) */
        if (!whole(value, &n) || n < 20) {
            snprintf(message, size, "alloc_conf: max_split_size_mb must be a whole number of MiB, 20 or more (got '%s')",
                     value);
            return false;
        }
        c->max_split_size = n * MIB;
    } else if (strcmp(name, "expandable_segments") == 0) {
        if (strcmp(value, "True") != 0 && strcmp(value, "False") != 0) {
            snprintf(message, size, "alloc_conf: expandable_segments must be True or False (got '%s')", value);
            return false;
        }
        c->expandable_segments = strcmp(value, "True") == 0;
    } else if (strcmp(name, "roundup_power2_divisions") == 0) {
        if (*value == '[') {
            snprintf(message, size, "alloc_conf: roundup_power2_divisions: the [size:divisions,...] form is not "
                                    "modelled; give one power of 2");
            return false;
        }
        /* "For roundups, the divisions has to be power of 2" */
        if (!whole(value, &n) || n == 0 || (n & (n - 1)) || n > 1024) {
            snprintf(message, size, "alloc_conf: roundup_power2_divisions must be a power of 2 up to 1024 (got '%s')",
                     value);
            return false;
        }
        c->roundup_power2_divisions = (unsigned)n;
    } else if (strcmp(name, "backend") == 0) {
        if (strcmp(value, "native") != 0) {
            snprintf(message, size, "alloc_conf: backend %s is not the caching allocator vramplan simulates "
                                    "(native)", value);
            return false;
        }
    } else if (strcmp(name, "garbage_collection_threshold") == 0 || strcmp(name, "max_non_split_rounding_mb") == 0 ||
               strcmp(name, "per_process_memory_fraction") == 0) {
        snprintf(message, size, "alloc_conf: %s is not simulated (docs/reserved.md); leave it out", name);
        return false;
    } else {
        for (const char *const *h = host_only; *h; h++)
            if (strcmp(name, *h) == 0) return true;
        snprintf(message, size, "alloc_conf: unknown option '%s' (max_split_size_mb, expandable_segments, "
                                "roundup_power2_divisions, backend)", name);
        return false;
    }
    return true;
}

bool vp_alloc_config_parse(const char *text, vp_alloc_config *out, char *message, size_t size) {
    memset(out, 0, sizeof *out);
    const char *s = text ? text : "";
    char name[64], value[64];
    while (*s) {
        s = token(s, name, sizeof name);
        if (!*name && (*s == ',' || !*s)) { /* an empty entry */
            if (*s) s++;
            continue;
        }
        if (*s != ':') {
            snprintf(message, size, "alloc_conf: option '%s' needs a value, as option:value", name);
            return false;
        }
        const char *start = s + 1;
        while (*start == ' ') start++;
        if (*start == '[') { /* a list value: up to its ']' */
            const char *close = strchr(start, ']');
            size_t n = close ? (size_t)(close - start + 1) : strlen(start);
            snprintf(value, sizeof value, "%.*s", (int)(n < sizeof value ? n : sizeof value - 1), start);
            s = start + n;
        } else {
            s = token(s + 1, value, sizeof value);
        }
        if (!*value) {
            snprintf(message, size, "alloc_conf: option '%s' has no value", name);
            return false;
        }
        if (!option(out, name, value, message, size)) return false;
        while (*s == ' ') s++;
        if (*s == ',') s++;
        else if (*s) {
            snprintf(message, size, "alloc_conf: expected ',' after %s:%s", name, value);
            return false;
        }
    }
    return true;
}

void vp_alloc_config_format(const vp_alloc_config *c, char *out, size_t size) {
    int n = 0;
    out[0] = 0;
    if (c->expandable_segments) n += snprintf(out + n, size - (size_t)n, "expandable_segments:True");
    if (c->max_split_size && n >= 0 && (size_t)n < size)
        n += snprintf(out + n, size - (size_t)n, "%smax_split_size_mb:%llu", n ? "," : "",
                      (unsigned long long)(c->max_split_size / MIB));
    if (c->roundup_power2_divisions > 1 && n >= 0 && (size_t)n < size)
        snprintf(out + n, size - (size_t)n, "%sroundup_power2_divisions:%u", n ? "," : "", c->roundup_power2_divisions);
}
