/* nccl.h — NCCL's own device buffers, process group by process group:
 * which communicators a layout creates, whom each connects to, and the
 * device memory of every connection (engine/step/nccl.c, from NCCL 2.30.7's
 * source). */
#ifndef VP_NCCL_H
#define VP_NCCL_H

#include <stdint.h>

#include "recipe.h"

struct vp_gpu_s;

/* One communicator (process group) the rank belongs to. */
typedef struct {
    const char *name;      /* "dp", "dp_shard", "dp_replicate", "tp", "pp", "cp", "ep" */
    const char *pattern;   /* "collective", "neighbours" (send/recv), "all-to-all" */
    unsigned ranks;        /* the group's size */
    unsigned local_ranks;  /* of them on the rank's node */
    unsigned nodes;        /* nodes the group spans */
    unsigned peers;        /* ranks this one exchanges with point to point (0: collective) */
    unsigned channels;     /* collective: ring/tree channels; point to point: channels per peer */
    uint64_t ring_bytes;   /* ring connections (collective) */
    uint64_t tree_bytes;   /* tree connections beyond the ring's (collective over several nodes) */
    uint64_t nvls_bytes;   /* NVLink SHARP's unicast buffer and credits (collective on NVSwitch) */
    uint64_t p2p_bytes;    /* send/recv connections, and the network's shared pools */
    uint64_t bytes;        /* the sum */
} vp_nccl_group;

#define VP_NCCL_MAX_GROUPS 8

typedef struct {
    unsigned n;
    vp_nccl_group groups[VP_NCCL_MAX_GROUPS];
    uint64_t bytes;        /* all groups */
} vp_nccl;

/* The NCCL buffers of pipeline stage `stage`'s ranks under the recipe on
 * `gpu` (NULL: unknown, PCIe assumed). */
void vp_nccl_buffers(const vp_recipe *r, const struct vp_gpu_s *gpu, unsigned stage, vp_nccl *out);

#endif
