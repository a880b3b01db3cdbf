/* sac_policy.c — torchtitan's op-level selective activation checkpointing
 * (activation_checkpoint.mode = "selective", selective_ac_option = "op";
 * torchtitan/distributed/activation_checkpoint.py at 8a6c9fe6e, 2025-08-28,
 * _save_list and _custom_policy under create_selective_checkpoint_contexts):
 * the outputs of the listed ops are saved (CheckpointPolicy.MUST_SAVE), but
 * of aten.mm only every other one (the counter is per checkpointed block
 * and per pass: the 1st, 3rd, ... mm saved, the 2nd, 4th, ... recomputed);
 * every other op is recomputed (PREFER_RECOMPUTE). The list written out,
 * beside the op of vramplan's primitives that makes each (none: no op the
 * engine models makes it). torch._scaled_mm (torchao's float8 GEMMs) is
 * not on the list: under precision = fp8-torchao every float8 linear's
 * GEMM is recomputed, and no aten.mm is counted for it. */
#include "sac_policy.h"

#include <stdbool.h>

typedef struct {
    const char *torch_op;   /* as torchtitan names it */
    vp_aten_op op;          /* the primitives' op (VP_ATEN_OTHER: none modelled) */
    bool every_other;       /* "except every second mm" */
} save_entry;

static const save_entry torchtitan_save_list[] = {
    {"torch.ops.aten.mm.default", VP_ATEN_MM, true},
    {"torch.ops.aten._scaled_dot_product_efficient_attention.default", VP_ATEN_SDPA_EFFICIENT, false},
    {"torch.ops.aten._scaled_dot_product_flash_attention.default", VP_ATEN_SDPA_FLASH, false},
    /* (in torchtitan's _op_sac_save_list beside the two above) */
    {"torch.ops.aten._scaled_dot_product_cudnn_attention.default", VP_ATEN_SDPA_CUDNN, false},
    /* tensor parallelism's reduce-scatter (DTensor's sequence parallel) */
    {"torch.ops._c10d_functional.reduce_scatter_tensor.default", VP_ATEN_REDUCE_SCATTER, false},
    /* the amax of float8 training's tensorwise dynamic scaling (torchao's
     * tensor_to_amax: torch.max(torch.abs(x)), a 0-dim tensor; the rowwise
     * recipes' torch.amax is aten.amax, not listed) */
    {"torch.ops.aten.max.default", VP_ATEN_MAX, false},
    {"torch._higher_order_ops.flex_attention", VP_ATEN_OTHER, false},
};

void vp_sac_torchtitan(vp_sac_rules *rules) {
    *rules = (vp_sac_rules){{false}, {false}};
    for (unsigned i = 0; i < sizeof torchtitan_save_list / sizeof *torchtitan_save_list; i++) {
        const save_entry *e = &torchtitan_save_list[i];
        if (e->op == VP_ATEN_OTHER) continue;
        rules->saved[e->op] = true;
        rules->alternate[e->op] = e->every_other;
    }
}
