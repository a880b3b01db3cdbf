/* kernel.c — fused kernels declared in Lua (kernel.h): one autograd node
 * whose saved tensors and workspaces are the declaration's.
 *
 * A kernel with more inputs than a node has slots (VP_NODE_MAX_IN; Mamba-2's
 * fused scan takes eight) is a chain: the kernel's node takes its first
 * inputs and a link, an empty tensor that a node of the next inputs made,
 * and so on. The kernel's rule makes every input's gradient, as the one
 * Function's backward does, and hands the chained ones to their nodes,
 * which run right after it (made just before it); saved tensors past the
 * kernel node's slots go to the chained nodes. The nodes' arrays stay the
 * size the built-in ops need, so the common case costs nothing more. */
#include "kernel.h"

#include <stddef.h>

enum {
    LINK = VP_NODE_MAX_IN - 1, /* the slot of a chained node's link */
    CHAIN = 3,                 /* nodes of the longest chain: 3 + 3 + 4 inputs */
};
_Static_assert(CHAIN * (VP_NODE_MAX_IN - 1) + 1 >= VP_KERNEL_INPUTS, "a chain holds every input");
_Static_assert(VP_KERNEL_INPUTS + 1 + VP_KERNEL_KEEPS <= 2 * VP_NODE_MAX_SAVED, "two nodes keep every saved tensor");

/* The chain from the kernel's node: node indices, the kernel's first. */
static unsigned chain_of(vp_sim *sim, uint32_t index, uint32_t *nodes) {
    unsigned n = 0;
    for (uint32_t at = index + 1; at && n < CHAIN; at = (uint32_t)vp_node_at(sim, at - 1)->aux[1]) nodes[n++] = at - 1;
    return n;
}

static bool is_link(vp_sim *sim, uint32_t node, unsigned slot) {
    return slot == LINK && vp_node_at(sim, node)->aux[1];
}

/* A chained node's input gradient slots are filled by the kernel's rule;
 * its own rule passes an empty gradient down the link. */
static void give_link(vp_sim *sim, uint32_t index) {
    vp_node *node = vp_node_at(sim, index);
    if (!node->aux[1] || !vp_needs_grad(sim, node, LINK)) return;
    vp_t empty = vp_new(sim, 0, (vp_dtype)vp_at(sim, node->in[LINK])->dtype, node->label);
    vp_give_grad(sim, vp_node_at(sim, index), LINK, empty);
}

/* A custom autograd.Function's backward: torch.empty_like for each input's
 * gradient, the kernel's workspace beside them, then the gradients handed
 * on. Without a workspace each is handed on as it is made, as the core's
 * fused rules do (prims.c's backward_fresh). */
static void backward_kernel(vp_sim *sim, uint32_t index) {
    uint32_t nodes[CHAIN];
    unsigned n = chain_of(sim, index, nodes);
    uint64_t workspace = vp_node_at(sim, index)->aux[0];
    vp_t grads[CHAIN][VP_NODE_MAX_IN] = {{0}};
    for (unsigned c = 0; c < n; c++) {
        for (unsigned i = 0; i < VP_NODE_MAX_IN; i++) {
            vp_node *node = vp_node_at(sim, nodes[c]);
            if (is_link(sim, nodes[c], i) || !vp_needs_grad(sim, node, i)) continue;
            grads[c][i] = vp_grad_like(sim, node->in[i], node->label);
            if (!workspace && c == 0) vp_give_grad(sim, vp_node_at(sim, index), i, grads[c][i]);
        }
    }
    if (workspace) vp_scratch(sim, workspace, vp_node_at(sim, index)->label);
    for (unsigned c = 0; c < n; c++)
        for (unsigned i = 0; i < VP_NODE_MAX_IN; i++)
            if (grads[c][i] && (workspace || c > 0)) vp_give_grad(sim, vp_node_at(sim, nodes[c]), i, grads[c][i]);
    give_link(sim, index);
}

/* Records the chain's nodes past the kernel's, last first (so that they
 * run after it): the kernel node's inputs, with its link. Returns the
 * kernel node, or NULL when no input needs a gradient. */
static vp_node *record_chain(vp_sim *sim, const vp_kernel_call *call, vp_t y, const char *label, uint32_t *nodes,
                             unsigned *n_nodes) {
    unsigned starts[CHAIN], n = 0;
    for (unsigned first = 0; n < CHAIN; first += LINK) {
        starts[n++] = first;
        if (call->n_in - first <= VP_NODE_MAX_IN) break;
    }
    vp_t link = 0;
    uint32_t next = 0; /* index + 1 of the chained node after this one */
    vp_node *node = NULL;
    for (unsigned c = n; c-- > 0;) {
        vp_t in[VP_NODE_MAX_IN] = {0};
        unsigned count = call->n_in - starts[c];
        if (c + 1 < n) count = LINK;
        for (unsigned i = 0; i < count; i++) in[i] = call->in[starts[c] + i];
        if (link) in[LINK] = link;
        vp_t out = c ? vp_new(sim, 0, call->out_dtype, label) : y;
        node = vp_record(sim, c ? give_link : backward_kernel, label, in, VP_NODE_MAX_IN, &out, 1);
        vp_drop(sim, link);
        link = c ? out : 0;
        if (node) {
            node->aux[1] = next;
            next = (uint32_t)(node - sim->nodes) + 1;
        }
    }
    *n_nodes = node ? chain_of(sim, (uint32_t)(node - sim->nodes), nodes) : 0;
    return node;
}

/* Saves the list into the chain's nodes, eight to a node. A chained node
 * none of whose inputs needs a gradient is not recorded: when the slots
 * left are too few, parameters are not saved (they are resident; only
 * save_on_cpu would have copied them), the last first. */
static void save_all(vp_sim *sim, const uint32_t *nodes, unsigned n, vp_t *list, unsigned count) {
    for (unsigned i = count; i-- > 0 && count > n * VP_NODE_MAX_SAVED;) {
        if (!vp_at(sim, list[i])->leaf) continue;
        for (unsigned j = i; j + 1 < count; j++) list[j] = list[j + 1];
        count--;
    }
    for (unsigned i = 0; i < count; i++) {
        unsigned c = i / VP_NODE_MAX_SAVED;
        vp_save(sim, vp_node_at(sim, nodes[c < n ? c : n - 1]), list[i]); /* past every slot: vp_save reports it */
    }
}

vp_t vp_kernel(vp_sim *sim, const vp_kernel_call *call, const char *label) {
    vp_t y = vp_new(sim, call->out_numel, call->out_dtype, label);
    vp_t keeps[VP_KERNEL_KEEPS] = {0};
    for (unsigned k = 0; k < VP_KERNEL_KEEPS; k++)
        if (call->keep_numel[k]) keeps[k] = vp_new(sim, call->keep_numel[k], call->keep_dtype[k], label);
    /* the forward's intermediates, alive beside what it returns and keeps */
    if (call->forward_workspace) vp_scratch(sim, call->forward_workspace, label);
    uint32_t nodes[CHAIN];
    unsigned n = 0, count = 0;
    vp_node *node = record_chain(sim, call, y, label, nodes, &n);
    if (node) {
        node->aux[0] = call->backward_workspace;
        vp_t list[VP_KERNEL_INPUTS + 1 + VP_KERNEL_KEEPS];
        for (unsigned i = 0; i < call->n_in; i++)
            if (call->saves >> i & 1u) list[count++] = call->saved_as && call->saved_as[i] ? call->saved_as[i] : call->in[i];
        if (call->saves >> VP_KERNEL_INPUTS & 1u) list[count++] = y;
        for (unsigned k = 0; k < VP_KERNEL_KEEPS; k++)
            if (keeps[k]) list[count++] = keeps[k];
        save_all(sim, nodes, n, list, count);
    }
    for (unsigned k = 0; k < VP_KERNEL_KEEPS; k++) vp_drop(sim, keeps[k]);
    return y;
}
