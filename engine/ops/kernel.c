/* kernel.c — fused kernels declared in Lua (kernel.h): one autograd node
 * whose saved tensors and workspaces are the declaration's. */
#include "kernel.h"

/* A custom autograd.Function's backward: torch.empty_like for each input's
 * gradient, the kernel's workspace beside them, then the gradients handed
 * on. Without a workspace each is handed on as it is made, as the core's
 * fused rules do (prims.c's backward_fresh). */
static void backward_kernel(vp_sim *sim, uint32_t index) {
    vp_node *node = vp_node_at(sim, index);
    uint64_t workspace = node->aux[0];
    vp_t grads[VP_NODE_MAX_IN] = {0};
    for (unsigned i = 0; i < VP_NODE_MAX_IN; i++) {
        node = vp_node_at(sim, index);
        if (!vp_needs_grad(sim, node, i)) continue;
        grads[i] = vp_grad_like(sim, node->in[i], node->label);
        if (!workspace) vp_give_grad(sim, vp_node_at(sim, index), i, grads[i]);
    }
    if (!workspace) return;
    vp_scratch(sim, workspace, vp_node_at(sim, index)->label);
    for (unsigned i = 0; i < VP_NODE_MAX_IN; i++)
        if (grads[i]) vp_give_grad(sim, vp_node_at(sim, index), i, grads[i]);
}

vp_t vp_kernel(vp_sim *sim, const vp_kernel_call *call, const char *label) {
    if (call->forward_workspace) vp_scratch(sim, call->forward_workspace, label);
    vp_t y = vp_new(sim, call->out_numel, call->out_dtype, label);
    vp_t keeps[VP_KERNEL_KEEPS] = {0};
    for (unsigned k = 0; k < VP_KERNEL_KEEPS; k++)
        if (call->keep_numel[k]) keeps[k] = vp_new(sim, call->keep_numel[k], call->keep_dtype[k], label);
    vp_node *node = vp_record(sim, backward_kernel, label, call->in, call->n_in, &y, 1);
    if (node) {
        node->aux[0] = call->backward_workspace;
        for (unsigned i = 0; i < call->n_in; i++)
            if (call->saves >> i & 1u) vp_save(sim, node, call->in[i]);
        if (call->saves >> VP_KERNEL_INPUTS & 1u) vp_save(sim, node, y);
        for (unsigned k = 0; k < VP_KERNEL_KEEPS; k++)
            if (keeps[k]) vp_save(sim, node, keeps[k]);
    }
    for (unsigned k = 0; k < VP_KERNEL_KEEPS; k++) vp_drop(sim, keeps[k]);
    return y;
}
