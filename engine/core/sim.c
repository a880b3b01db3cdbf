/* sim.c — tensor lifetimes, autograd nodes and the backward walk. */
#include "sim.h"

#include <stdlib.h>
#include <string.h>

void vp_sim_init(vp_sim *sim, vp_ledger *ledger) {
    memset(sim, 0, sizeof *sim);
    sim->ledger = ledger;
    sim->grad_mode = true;
    sim->category = VP_CAT_ACTIVATIONS;
    sim->accumulate = VP_ACCUMULATE_INPLACE;
    /* handle 0 and node 0 are "none" */
    sim->n_tensors = 1;
    sim->n_nodes = 0;
}

void vp_sim_free(vp_sim *sim) {
    free(sim->tensors);
    free(sim->nodes);
    free(sim->holders);
    sim->tensors = NULL;
    sim->nodes = NULL;
    sim->holders = NULL;
    sim->n_holders = sim->cap_holders = 0;
    sim->n_tensors = sim->cap_tensors = sim->n_nodes = sim->cap_nodes = 0;
    free(sim->stash.back);
    sim->stash.back = NULL;
    sim->stash.n_back = sim->stash.cap_back = 0;
    free(sim->stash.keys);
    sim->stash.keys = NULL;
    sim->stash.n_keys = sim->stash.cap_keys = 0;
}

void vp_sim_adopt(vp_sim *sim, vp_sim_arrays *arrays) {
    sim->tensors = arrays->tensors;
    sim->nodes = arrays->nodes;
    sim->holders = arrays->holders;
    sim->cap_tensors = arrays->cap_tensors;
    sim->cap_nodes = arrays->cap_nodes;
    sim->cap_holders = arrays->cap_holders;
    if (sim->cap_tensors) memset(&sim->tensors[0], 0, sizeof sim->tensors[0]); /* handle 0: "none" */
    *arrays = (vp_sim_arrays){0};
}

void vp_sim_keep(vp_sim *sim, vp_sim_arrays *arrays) {
    vp_sim_arrays_free(arrays); /* (empty unless two simulations shared it) */
    *arrays = (vp_sim_arrays){sim->tensors, sim->nodes, sim->holders, sim->cap_tensors, sim->cap_nodes,
                              sim->cap_holders};
    sim->tensors = NULL;
    sim->nodes = NULL;
    sim->holders = NULL;
    vp_sim_free(sim);
}

void vp_sim_arrays_free(vp_sim_arrays *arrays) {
    free(arrays->tensors);
    free(arrays->nodes);
    free(arrays->holders);
    *arrays = (vp_sim_arrays){0};
}

static void overflow(vp_sim *sim) {
    if (sim->status == VP_SIM_OK) sim->status = VP_SIM_OVERFLOW;
}

uint64_t vp_numel(vp_sim *sim, uint64_t a, uint64_t b) {
    uint64_t r;
    if (__builtin_mul_overflow(a, b, &r)) {
        overflow(sim);
        return 0;
    }
    return r;
}

uint64_t vp_numel3(vp_sim *sim, uint64_t a, uint64_t b, uint64_t c) {
    return vp_numel(sim, vp_numel(sim, a, b), c);
}

uint64_t vp_numel4(vp_sim *sim, uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
    return vp_numel(sim, vp_numel3(sim, a, b, c), d);
}

/* Room for `need` entries. The new entries are not cleared: every entry is
 * cleared when it is taken (new_record, vp_record, vp_record_keeper) or
 * written whole (hold_back); only the first, handle 0 ("none"), is read
 * without being taken. */
static bool grow(void **array, uint32_t *cap, uint32_t need, size_t size) {
    if (need <= *cap) return true;
    uint32_t cap2 = *cap ? *cap : 64;
    while (cap2 < need) cap2 *= 2;
    void *grown = realloc(*array, (size_t)cap2 * size);
    if (!grown) return false;
    if (!*cap) memset(grown, 0, size);
    *array = grown;
    *cap = cap2;
    return true;
}

static vp_t new_record(vp_sim *sim) {
    if (!grow((void **)&sim->tensors, &sim->cap_tensors, sim->n_tensors + 1, sizeof(vp_tensor))) {
        sim->status = VP_SIM_NOMEM;
        return 0;
    }
    vp_t t = sim->n_tensors++;
    memset(&sim->tensors[t], 0, sizeof(vp_tensor));
    return t;
}

vp_t vp_new_in(vp_sim *sim, uint64_t numel, vp_dtype dtype, vp_category category, const char *label) {
    uint64_t bytes;
    if (!vp_tensor_bytes(dtype, numel, &bytes)) {
        overflow(sim);
        bytes = 0;
    }
    vp_t t = new_record(sim);
    if (!t) return 0;
    vp_tensor *x = vp_at(sim, t);
    x->numel = numel;
    x->bytes = bytes;
    x->refs = 1;
    x->dtype = (uint8_t)dtype;
    x->grad_dtype = (uint8_t)dtype;
    x->category = (uint8_t)category;
    x->live = true;
    x->label = label;
    /* past a rerun's early stop: PyTorch never got this far */
    x->phantom = (sim->phantom_from && t >= sim->phantom_from) || sim->fusing;
    if (!x->phantom) vp_ledger_alloc_tensor(sim->ledger, category, bytes, label, t);
    return t;
}

/* A phantom of a fused backward that leaves the fused chain: a kernel's
 * output, allocated now (a view's storage is its base's). */
void vp_materialize(vp_sim *sim, vp_t t) {
    vp_tensor *x = vp_at(sim, t);
    if (x->base) {
        vp_materialize(sim, x->base);
        return;
    }
    if (!x->phantom || (sim->phantom_from && t >= sim->phantom_from)) return;
    x->phantom = false;
    vp_ledger_alloc_tensor(sim->ledger, (vp_category)x->category, x->bytes, x->label, t);
}

vp_t vp_new(vp_sim *sim, uint64_t numel, vp_dtype dtype, const char *label) {
    return vp_new_in(sim, numel, dtype, sim->category, label);
}

vp_t vp_view(vp_sim *sim, vp_t base, uint64_t numel, const char *label) {
    vp_t root = vp_at(sim, base)->base ? vp_at(sim, base)->base : base;
    vp_t t = new_record(sim);
    if (!t) return 0;
    vp_tensor *x = vp_at(sim, t);
    const vp_tensor *b = vp_at(sim, base);
    x->numel = numel;
    x->refs = 1;
    x->dtype = b->dtype;
    x->grad_dtype = b->dtype;
    x->category = b->category;
    x->live = true;
    x->base = root;
    x->offset = b->offset;
    x->gaps = b->gaps;
    x->permuted = b->permuted;
    x->label = label;
    vp_hold(sim, root);
    return t;
}

void vp_hold(vp_sim *sim, vp_t t) {
    if (t) vp_at(sim, t)->refs++;
}

void vp_drop(vp_sim *sim, vp_t t) {
    if (!t) return;
    vp_tensor *x = vp_at(sim, t);
    if (x->refs == 0) { /* a rule dropped what it did not own: a bug, not user input */
        overflow(sim);
        return;
    }
    if (--x->refs) return;
    x->live = false;
    if (!x->phantom) vp_ledger_release_tensor(sim->ledger, (vp_category)x->category, x->bytes, x->label, t);
    if (x->base) vp_drop(sim, x->base);
}

void vp_requires_grad(vp_sim *sim, vp_t t) {
    vp_tensor *x = vp_at(sim, t);
    x->requires_grad = true;
    x->leaf = true;
    x->grad_category = VP_CAT_TRANSIENT;
}

vp_t vp_leaf_resident(vp_sim *sim, uint64_t numel, vp_dtype dtype, uint64_t resident_bytes, vp_category category,
                      bool trainable, const char *label) {
    vp_t t = new_record(sim);
    if (!t) return 0;
    vp_tensor *x = vp_at(sim, t);
    x->numel = numel;
    x->bytes = resident_bytes;
    x->refs = 1;
    x->dtype = x->grad_dtype = (uint8_t)dtype;
    x->category = (uint8_t)category;
    x->live = true;
    x->label = label;
    x->leaf = true;
    x->requires_grad = trainable;
    x->grad_category = VP_CAT_GRADS;
    vp_ledger_alloc_tensor(sim->ledger, category, resident_bytes, label, t);
    return t;
}

vp_t vp_leaf(vp_sim *sim, uint64_t numel, vp_dtype dtype, vp_category category, bool trainable,
             const char *label) {
    uint64_t bytes;
    if (!vp_tensor_bytes(dtype, numel, &bytes)) {
        overflow(sim);
        bytes = 0;
    }
    return vp_leaf_resident(sim, numel, dtype, bytes, category, trainable, label);
}

vp_node *vp_record(vp_sim *sim, vp_backward_fn backward, const char *label, const vp_t *in,
                   unsigned n_in, const vp_t *out, unsigned n_out) {
    bool any = false;
    for (unsigned i = 0; i < n_in; i++)
        if (in[i] && vp_at(sim, in[i])->requires_grad) any = true;
    if (!any || !sim->grad_mode) return NULL;
    if (!grow((void **)&sim->nodes, &sim->cap_nodes, sim->n_nodes + 1, sizeof(vp_node))) {
        sim->status = VP_SIM_NOMEM;
        return NULL;
    }
    vp_node *node = &sim->nodes[sim->n_nodes++];
    memset(node, 0, sizeof *node);
    node->backward = backward;
    node->label = label;
    node->layer = sim->ledger->place.layer >= 0 ? sim->ledger->place.layer - sim->layer_offset : -1;
    for (unsigned i = 0; i < n_in && i < VP_NODE_MAX_IN; i++)
        if (in[i] && vp_at(sim, in[i])->requires_grad) node->in[i] = in[i];
    for (unsigned i = 0; i < n_out && i < VP_NODE_MAX_OUT; i++) {
        node->out[i] = out[i];
        vp_at(sim, out[i])->requires_grad = true;
    }
    return node;
}

void vp_record_output(vp_sim *sim, vp_node *node, unsigned slot, vp_t out) {
    if (!node || !out || slot >= VP_NODE_MAX_OUT) return;
    node->out[slot] = out;
    vp_at(sim, out)->requires_grad = true;
}

/* Where the rerun's early stop falls: autograd's generated code saves an
 * op's inputs, then computes, then saves its outputs, so the stop comes
 * before the op's new tensors when the last pack is an input and after them
 * when it is something the op made (an output, a dropout mask, a norm's
 * statistics: made after the op's first new tensor). The op's new tensors
 * are those made since another node's last pack; an in-place op has none.
 * An autograd.Function packs everything after its forward. */
static void place_stop(vp_sim *sim, vp_frame *f, const vp_node *node, vp_t t) {
    uint32_t index = (uint32_t)(node - sim->nodes) + 1;
    if (f->last_node != index) {
        f->last_node = index;
        f->op_floor = f->last_pack_offset;
    }
    uint32_t now = sim->n_tensors - f->first_tensor;
    uint32_t first_new = now;
    for (unsigned i = 0; i < VP_NODE_MAX_OUT; i++) {
        vp_t o = node->out[i];
        if (o >= f->first_tensor + f->op_floor && o - f->first_tensor < first_new) first_new = o - f->first_tensor;
    }
    vp_t root = vp_at(sim, t)->base ? vp_at(sim, t)->base : t;
    bool made_by_op = node->late_saves || (root >= f->first_tensor && root - f->first_tensor >= first_new);
    f->last_pack_offset = now;
    f->stop_offset = made_by_op ? now : first_new;
}

/* ---- OffloadActivations' stashes (vp_offload_stash) ---- */

const char *const vp_offload_stream_ops[] = {"offload.stream_unpack", "offload.stream_contiguous", NULL};

static vp_storage_key key_of(vp_sim *sim, vp_t t) {
    const vp_tensor *x = vp_at(sim, t);
    return (vp_storage_key){x->base ? x->base : t, x->offset, x->dtype, 0};
}

static vp_storage_key *key_find(vp_offload_stash *s, vp_storage_key key) {
    for (uint32_t k = 0; k < s->n_keys; k++)
        if (s->keys[k].storage == key.storage && s->keys[k].offset == key.offset && s->keys[k].dtype == key.dtype)
            return &s->keys[k];
    return NULL;
}

/* track_storage_key: the key now points at `pack` */
static void key_track(vp_sim *sim, vp_t t, uint32_t pack) {
    vp_offload_stash *s = &sim->stash;
    vp_storage_key key = key_of(sim, t), *found = key_find(s, key);
    if (found) {
        found->pack = pack;
        return;
    }
    if (!grow((void **)&s->keys, &s->cap_keys, s->n_keys + 1, sizeof *s->keys)) {
        sim->status = VP_SIM_NOMEM;
        return;
    }
    key.pack = pack;
    s->keys[s->n_keys++] = key;
}

/* release_storage_key: a key goes only while it points at `pack` */
static void key_release(vp_offload_stash *s, uint32_t pack) {
    for (uint32_t k = 0; k < s->n_keys; k++) {
        if (s->keys[k].pack != pack) continue;
        s->keys[k] = s->keys[--s->n_keys];
        return;
    }
}

/* The forward's pack of an offloaded tensor, first: the stash lets go of
 * those packed `window` packs ago or more (oldest first). */
static void stash_prune(vp_sim *sim) {
    vp_offload_stash *s = &sim->stash;
    unsigned gone = 0;
    while (gone < s->n_fwd && s->fwd_pack[gone] + s->window <= s->packs) {
        key_release(s, s->fwd_pack[gone]);
        vp_drop(sim, s->fwd[gone++]);
    }
    memmove(s->fwd, s->fwd + gone, (s->n_fwd - gone) * sizeof *s->fwd);
    memmove(s->fwd_pack, s->fwd_pack + gone, (s->n_fwd - gone) * sizeof *s->fwd_pack);
    memmove(s->fwd_packed, s->fwd_packed + gone, (s->n_fwd - gone) * sizeof *s->fwd_packed);
    s->n_fwd -= gone;
}

/* ... then it keeps `kept` (the tensor `packed`, or its copy) until then. */
static void stash_keep(vp_sim *sim, vp_t kept, vp_t packed) {
    vp_offload_stash *s = &sim->stash;
    if (s->n_fwd == VP_OFFLOAD_WINDOW_MAX) { /* a window wider than the stash: an engine limit */
        sim->status = VP_SIM_LIMIT;
        return;
    }
    vp_hold(sim, kept);
    s->fwd[s->n_fwd] = kept;
    s->fwd_packed[s->n_fwd] = packed;
    s->fwd_pack[s->n_fwd++] = s->packs;
    if (sim->pack_dedups) key_track(sim, packed, s->packs);
}

/* Node `index` brings back an offloaded tensor: the first time, what the
 * stash brought back for earlier nodes is marked to go after its post-hook. */
static void stash_node(vp_sim *sim, uint32_t index) {
    vp_offload_stash *s = &sim->stash;
    if (s->node != index + 1) {
        s->node = index + 1;
        s->earlier = s->n_back;
    }
    s->hook_due = true;
}

/* What the forward's stash still keeps of `original` (it, or TRL's copy of
 * it), handed back as it is; 0: nothing. */
static vp_t stash_holds(const vp_offload_stash *s, vp_t original) {
    for (unsigned k = 0; k < s->n_fwd; k++)
        if (s->fwd_packed[k] == original) return s->fwd[k];
    return 0;
}

/* Node `index` unpacks the offloaded tensor in its `slot`. Whether the
 * forward's stash still keeps that tensor: then the node takes what it
 * keeps (its saved slot holds it, a reference of the node's). */
static bool stash_takes(vp_sim *sim, uint32_t index, unsigned slot) {
    stash_node(sim, index);
    vp_node *node = vp_node_at(sim, index);
    vp_t kept = stash_holds(&sim->stash, node->saved[slot]);
    if (!kept) return false;
    vp_hold(sim, kept);
    node->saved[slot] = kept;
    node->packed &= (vp_slots)~(1u << slot);
    node->handed |= (vp_slots)(1u << slot);
    return true;
}

/* A tensor brought back: the stash keeps it beside the node. */
static void stash_back(vp_sim *sim, vp_t copy) {
    vp_offload_stash *s = &sim->stash;
    if (!grow((void **)&s->back, &s->cap_back, s->n_back + 1, sizeof *s->back)) {
        sim->status = VP_SIM_NOMEM;
        return;
    }
    vp_hold(sim, copy);
    s->back[s->n_back++] = copy;
}

/* The node's post-hook: the forward's stash goes, and what was brought
 * back for earlier nodes. */
static void stash_hook(vp_sim *sim) {
    vp_offload_stash *s = &sim->stash;
    for (unsigned k = 0; k < s->n_fwd; k++) {
        key_release(s, s->fwd_pack[k]);
        vp_drop(sim, s->fwd[k]);
    }
    s->n_fwd = 0;
    for (uint32_t k = 0; k < s->earlier; k++) vp_drop(sim, s->back[k]);
    if (s->earlier) memmove(s->back, s->back + s->earlier, (s->n_back - s->earlier) * sizeof *s->back);
    s->n_back -= s->earlier;
    s->earlier = 0;
    s->hook_due = false;
}

void vp_offload_stash_flush(vp_sim *sim) {
    vp_offload_stash *s = &sim->stash;
    for (unsigned k = 0; k < s->n_fwd; k++) vp_drop(sim, s->fwd[k]); /* (a backward that brought none back) */
    s->n_fwd = 0;
    for (uint32_t k = 0; k < s->n_back; k++) vp_drop(sim, s->back[k]);
    s->n_back = s->earlier = 0;
    s->node = 0;
    s->hook_due = false;
    s->n_keys = 0; /* __exit__, and the next forward's first pack: a new map */
}

/* The checkpoint hook's pack: a holder instead of the tensor. */
static void hold_back(vp_sim *sim, vp_node *node, unsigned slot, vp_t t) {
    vp_frame *f = sim->saving;
    if (!grow((void **)&sim->holders, &sim->cap_holders, sim->n_holders + 1, sizeof(vp_holder))) {
        sim->status = VP_SIM_NOMEM;
        return;
    }
    sim->holders[sim->n_holders++] = (vp_holder){(uint32_t)(node - sim->nodes), (uint8_t)slot};
    f->n_holders++;
    f->live++;
    node->saved[slot] = 0;
    node->holders |= (vp_slots)(1u << slot);
    node->frame = f;
    place_stop(sim, f, node, t);
}

/* The recomputation hook's pack: the k-th tensor saved fills the k-th
 * holder if it is alive; the rerun's own node keeps it only where 2.x's
 * hook returns x.detach() (until the rerun's graph goes). */
static void refill(vp_sim *sim, vp_node *node, unsigned slot, vp_t t) {
    vp_frame *f = sim->refilling;
    uint32_t k = f->refilled++;
    node->saved[slot] = 0;
    if (k < f->n_holders) {
        vp_holder h = sim->holders[f->first_holder + k];
        vp_node *owner = vp_node_at(sim, h.node);
        if ((owner->holders & (1u << h.slot)) && !owner->saved[h.slot]) {
            owner->saved[h.slot] = t;
            vp_hold(sim, t);
            /* 2.x's unpack hands it over and drops the frame's reference;
             * 1.13's storage keeps it while the holder lives */
            if (f->rerun_keeps) owner->handed |= (vp_slots)(1u << h.slot);
        }
        /* the rerun must retrace the forward: a model bug otherwise */
        if (k + 1 == f->n_holders && sim->n_tensors - f->first_tensor != f->last_pack_offset)
            sim->status = VP_SIM_UNBALANCED;
    }
    if (f->rerun_keeps && !(f->early_stop && k >= f->n_holders)) {
        node->saved[slot] = t;
        vp_hold(sim, t);
    }
}

/* Bytes a node's outputs hold. */
static uint64_t output_bytes(vp_sim *sim, const vp_node *node) {
    uint64_t total = 0;
    for (unsigned i = 0; i < VP_NODE_MAX_OUT; i++)
        if (node->out[i]) total += vp_at(sim, node->out[i])->bytes;
    return total;
}

/* CUDA copies a tensor that is not contiguous to the host through a
 * contiguous copy on its device (ATen's Copy.cu: copy_requires_temporaries,
 * then src.expand_as(dst).contiguous()), freed once copied. An op packs
 * what it saves before it computes, so the copy comes before the node's
 * outputs, which the sim has already made: it raises the peak only by what
 * it holds beyond them. An autograd.Function packs after it computes. */
static void pack_through_contiguous(vp_sim *sim, const vp_node *node, uint64_t bytes) {
    uint64_t made = node->late_saves ? 0 : output_bytes(sim, node);
    if (bytes <= made) return;
    const char *label = sim->stash.window ? "offload.stream_contiguous" : "offload.contiguous";
    vp_ledger_alloc(sim->ledger, (vp_category)sim->category, bytes - made, label);
    vp_ledger_release(sim->ledger, (vp_category)sim->category, bytes - made, label);
}

/* axolotl's patch of TRL's hooks: the hook is handed a contiguous clone of
 * the tensor, made on the compute stream: storage of its own, which no key
 * matches; one of fewer than min_offload_size bytes is kept as the node's
 * saved tensor, a larger one offloaded (with streams, the stash keeps it;
 * without, it goes once copied, made before the op's outputs). */
static void pack_clone(vp_sim *sim, vp_node *node, unsigned slot, vp_t t, uint64_t bytes) {
    uint64_t numel = vp_at(sim, t)->numel;
    vp_dtype dtype = (vp_dtype)vp_at(sim, t)->dtype;
    if (bytes < sim->pack_min_bytes) {
        node->saved[slot] = vp_new(sim, numel, dtype, "offload.clone"); /* the node's reference */
        return;
    }
    if (!sim->stash.window) {
        pack_through_contiguous(sim, node, bytes);
        node->packed |= (vp_slots)(1u << slot);
        sim->pack(sim->pack_ctx, bytes);
        return;
    }
    stash_prune(sim);
    vp_t clone = vp_new(sim, numel, dtype, "offload.clone"); /* (tensors grow, not nodes) */
    node->saved[slot] = clone;
    node->packed |= (vp_slots)(1u << slot);
    sim->pack(sim->pack_ctx, bytes);
    stash_keep(sim, clone, clone);
    vp_drop(sim, clone); /* the stash's now */
}

/* How a save's tensor is laid out, where the caller knows better than the
 * tensor's own flags (save_at) */
typedef enum {
    SAVED_AS_IS,     /* the tensor's layout: permuted, or contiguous */
    SAVED_STRIDED,   /* a strided view of it (weight.t(), mm's mat2) */
    SAVED_CONTIGUOUS /* a contiguous view or copy of it */
} saved_layout;

static void save_at(vp_sim *sim, vp_node *node, unsigned slot, vp_t t, saved_layout layout) {
    if (!node || !t || slot >= VP_NODE_MAX_SAVED || node->saved[slot] || (node->holders & (1u << slot))) {
        overflow(sim); /* more saved tensors than a node has room for: an op-table bug */
        return;
    }
    if (slot >= node->n_saved) node->n_saved = (uint8_t)(slot + 1);
    if (sim->refilling) {
        refill(sim, node, slot, t);
        return;
    }
    if (sim->saving) {
        hold_back(sim, node, slot, t);
        return;
    }
    node->saved[slot] = t;
    if (!sim->pack) {
        vp_hold(sim, t);
        return;
    }
    sim->stash.packs++;
    /* pack_to_cpu: torch.empty(tensor.size(), pin_memory=True).copy_(tensor),
     * the view's own elements, contiguous */
    uint64_t bytes;
    const vp_tensor *x = vp_at(sim, t);
    if (!vp_tensor_bytes((vp_dtype)x->dtype, x->numel, &bytes)) overflow(sim);
    bool strided = layout == SAVED_STRIDED || (layout == SAVED_AS_IS && x->permuted);
    /* (isinstance(t, nn.Parameter): the parameter itself, not a view of it
     * such as the transposed weight a matmul saves, weight.t()) */
    bool parameter = x->category == VP_CAT_PARAMS && !x->base && !strided;
    vp_t root = x->base ? x->base : t;
    bool expanded = x->base && x->numel > vp_at(sim, root)->numel; /* a stride-0 dimension */
    bool gapped = x->gaps; /* not dense: no copy keeps its strides */
    if (sim->pack_clones_views && !parameter && (strided || gapped || x->offset || expanded)) {
        pack_clone(sim, node, slot, t, bytes);
        return;
    }
    /* TRL: a storage whose key is tracked stays, and the key now points here */
    bool kept = sim->pack_dedups && key_find(&sim->stash, key_of(sim, t));
    if (kept) key_track(sim, t, sim->stash.packs);
    kept = kept || (sim->pack_skips_params && parameter) || bytes < sim->pack_min_bytes;
    kept = kept || (sim->pack_skips_param_views && x->category == VP_CAT_PARAMS);
    if (kept) {
        vp_hold(sim, t);
        return;
    }
    if (sim->stash.window) stash_prune(sim);
    vp_t stashed = t;
    if (!sim->pack_copies_views) {
        if ((strided && !sim->pack_keeps_strides) || gapped || expanded) pack_through_contiguous(sim, node, bytes);
    } else if (expanded) { /* TRL: the storage's raw elements to the host */
        bytes = vp_at(sim, root)->bytes;
    } else if (strided || gapped || x->offset) {
        /* TRL: activation.contiguous() (a clone at an offset), which the
         * stash keeps; without streams it goes once copied */
        if (sim->stash.window) stashed = vp_new(sim, x->numel, (vp_dtype)x->dtype, "offload.stream_contiguous");
        else pack_through_contiguous(sim, node, bytes);
    }
    node->packed |= (vp_slots)(1u << slot);
    sim->pack(sim->pack_ctx, bytes);
    if (sim->stash.window) stash_keep(sim, stashed, t);
    if (stashed != t) vp_drop(sim, stashed); /* the stash's now */
}

void vp_save_at(vp_sim *sim, vp_node *node, unsigned slot, vp_t t) { save_at(sim, node, slot, t, SAVED_AS_IS); }

void vp_hold_at(vp_sim *sim, vp_node *node, unsigned slot, vp_t t) {
    if (!node || !t || slot >= VP_NODE_MAX_SAVED || node->saved[slot]) {
        overflow(sim);
        return;
    }
    if (slot >= node->n_saved) node->n_saved = (uint8_t)(slot + 1);
    node->saved[slot] = t;
    vp_hold(sim, t);
}

static void save(vp_sim *sim, vp_node *node, vp_t t, saved_layout layout) {
    if (!node || !t) return;
    for (unsigned i = 0; i < VP_NODE_MAX_SAVED; i++) {
        if (!node->saved[i] && !(node->holders & (1u << i))) {
            save_at(sim, node, i, t, layout);
            return;
        }
    }
    overflow(sim); /* more saved tensors than a node has room for: an op-table bug */
}

void vp_save(vp_sim *sim, vp_node *node, vp_t t) { save(sim, node, t, SAVED_AS_IS); }
void vp_save_view(vp_sim *sim, vp_node *node, vp_t t, bool strided) {
    save(sim, node, t, strided ? SAVED_STRIDED : SAVED_AS_IS);
}
void vp_save_contiguous(vp_sim *sim, vp_node *node, vp_t t) { save(sim, node, t, SAVED_CONTIGUOUS); }

void vp_keep_layout(vp_sim *sim, vp_t y, vp_t a, vp_t b) {
    if (!y) return;
    uint64_t n = vp_at(sim, y)->numel;
    vp_t first = a && vp_at(sim, a)->numel == n ? a : b && vp_at(sim, b)->numel == n ? b : 0;
    vp_at(sim, y)->permuted = first && vp_at(sim, first)->permuted;
}

/* What comes back to the GPU for a packed tensor: its elements, or (TRL)
 * a broadcast view's whole storage, viewed as it was (as_strided). */
static uint64_t unpacked_numel(vp_sim *sim, vp_t original) {
    const vp_tensor *x = vp_at(sim, original);
    bool raw = sim->pack_copies_views && !sim->pack_clones_views; /* (axolotl's clones the broadcast first) */
    if (raw && x->base && x->numel > vp_at(sim, x->base)->numel) return vp_at(sim, x->base)->numel;
    return x->numel;
}

/* unpack_from_cpu: tensor.to(device) for every packed slot, as the node's
 * apply unpacks its saved variables before computing; the copies take the
 * slots and go with them. */
static void unpack(vp_sim *sim, uint32_t index) {
    vp_frame *frame = vp_node_at(sim, index)->frame;
    if (vp_node_at(sim, index)->holders && !frame->recomputed) { /* the checkpoint's first unpack */
        frame->recomputed = true;
        frame->recompute(sim, frame, index);
    }
    for (unsigned i = 0; i < VP_NODE_MAX_SAVED; i++) {
        vp_node *node = vp_node_at(sim, index);
        if (!(node->packed & (1u << i))) continue;
        vp_t original = node->saved[i];
        bool recomputed = node->recomputed & (1u << i);
        bool streamed = sim->stash.window && !recomputed;
        const char *label = recomputed ? "compile.recompute" : streamed ? "offload.stream_unpack" : "offload.unpack";
        if (streamed && stash_takes(sim, index, i)) continue;
        /* a fused node recomputes an element-wise value inside its kernel */
        sim->fusing = recomputed && node->fused;
        vp_t copy = vp_new(sim, unpacked_numel(sim, original), (vp_dtype)vp_at(sim, original)->dtype, label);
        sim->fusing = false;
        if (streamed) stash_back(sim, copy);
        /* SavedVariable::unpack gives it the original's autograd metadata */
        vp_at(sim, copy)->requires_grad = vp_at(sim, original)->requires_grad;
        node = vp_node_at(sim, index);
        node->saved[i] = copy;
        node->packed &= (vp_slots)~(1u << i);
        node->recomputed &= (vp_slots)~(1u << i);
        node->handed |= (vp_slots)(1u << i);
    }
}

vp_t vp_unpack_for(vp_sim *sim, uint32_t running, uint32_t holder, unsigned slot) {
    vp_t original = vp_node_at(sim, holder)->saved[slot];
    bool streamed = sim->stash.window != 0;
    if (streamed) {
        stash_node(sim, running);
        vp_t kept = stash_holds(&sim->stash, original);
        if (kept) {
            vp_hold(sim, kept);
            return kept;
        }
    }
    vp_t copy = vp_new(sim, unpacked_numel(sim, original), (vp_dtype)vp_at(sim, original)->dtype,
                       streamed ? "offload.stream_unpack" : "offload.unpack");
    /* SavedVariable::unpack gives it the original's autograd metadata */
    vp_at(sim, copy)->requires_grad = vp_at(sim, original)->requires_grad;
    if (streamed) stash_back(sim, copy);
    return copy;
}

void vp_pack_kept(vp_sim *sim) { sim->stash.packs++; }

void vp_recompute_saved(vp_sim *sim, uint32_t index, unsigned slot) {
    vp_node *node = vp_node_at(sim, index);
    vp_t t = node->saved[slot];
    if (!t || (node->packed & (1u << slot))) return;
    node->packed |= (vp_slots)(1u << slot);
    node->recomputed |= (vp_slots)(1u << slot);
    vp_drop(sim, t);
}

void vp_drop_handed(vp_sim *sim, uint32_t index) {
    vp_node *node = vp_node_at(sim, index);
    for (unsigned i = 0; i < VP_NODE_MAX_SAVED; i++) {
        if (!(node->handed & (1u << i))) continue;
        vp_t t = node->saved[i];
        node->saved[i] = 0;
        vp_drop(sim, t);
        node = vp_node_at(sim, index);
    }
    node->handed = 0;
}

bool vp_needs_grad(vp_sim *sim, const vp_node *node, unsigned i) {
    (void)sim;
    return i < VP_NODE_MAX_IN && node->in[i] != 0;
}

vp_t vp_grad_sized(vp_sim *sim, uint64_t numel, vp_dtype dtype, const char *label) {
    return vp_new(sim, numel, dtype, label);
}

vp_t vp_grad_like(vp_sim *sim, vp_t like, const char *label) {
    const vp_tensor *x = vp_at(sim, like);
    return vp_new(sim, x->numel, (vp_dtype)x->grad_dtype, label);
}

void vp_give_grad(vp_sim *sim, vp_node *node, unsigned input, vp_t grad) {
    if (input >= VP_NODE_MAX_IN || !node->in[input] || node->grads[input]) {
        vp_drop(sim, grad);
        return;
    }
    node->grads[input] = grad;
}

vp_t vp_grad_out(vp_sim *sim, const vp_node *node, unsigned i) {
    return node->out[i] ? vp_at(sim, node->out[i])->grad : 0;
}

void vp_scratch(vp_sim *sim, uint64_t bytes, const char *label) {
    if (sim->phantom_from && sim->n_tensors >= sim->phantom_from) return; /* past an early stop */
    if (sim->fusing) return; /* a fused kernel's scratch is its registers */
    vp_ledger_alloc(sim->ledger, sim->category, bytes, label);
    vp_ledger_release(sim->ledger, sim->category, bytes, label);
}

/* AccumulateGrad::apply runs the leaf's post-accumulate-grad hooks after
 * it has set .grad, before it returns: the gradient it was given is still
 * its local then (accumulate_grad.cpp, PyTorch 2.1+). */
static void post_accumulate(vp_sim *sim, vp_t leaf) {
    if (sim->post_accumulate && vp_at(sim, leaf)->post_accumulate) sim->post_accumulate(sim->post_accumulate_ctx, leaf);
}

/* AccumulateGrad (torch/csrc/autograd/functions/accumulate_grad.h): the
 * first gradient of a step is stolen into .grad without a copy when nobody
 * else holds it; later ones are added in place and freed. */
static void accumulate_into_leaf(vp_sim *sim, vp_t to, vp_t grad) {
    vp_tensor *x = vp_at(sim, to);
    if (x->grad_drop) { /* a hook copied it into a communication bucket */
        vp_drop(sim, grad);
        return;
    }
    if (!x->param_grad && vp_at(sim, grad)->refs == 1 && !vp_at(sim, grad)->base) {
        vp_tensor *g = vp_at(sim, grad);
        vp_ledger_move(sim->ledger, (vp_category)g->category, (vp_category)x->grad_category, g->bytes);
        g->category = x->grad_category;
        x->param_grad = grad;
        post_accumulate(sim, to);
        return;
    }
    if (!x->param_grad) { /* shared or a view: clone into .grad, obeying the layout contract */
        vp_t copy = vp_new_in(sim, x->numel, (vp_dtype)x->grad_dtype, (vp_category)x->grad_category,
                              "accumulate_grad.clone");
        vp_at(sim, to)->param_grad = copy;
    }
    post_accumulate(sim, to);
    vp_drop(sim, grad);
}

void vp_deliver_grad(vp_sim *sim, vp_t to, vp_t grad) {
    vp_tensor *x = vp_at(sim, to);
    if (!x->requires_grad) {
        vp_drop(sim, grad);
        return;
    }
    if (x->leaf && !x->pending) {
        accumulate_into_leaf(sim, to, grad);
        return;
    }
    /* a non-leaf's input buffer, or a leaf's while more of its edges are to come */
    if (!x->grad) {
        x->grad = grad;
        return;
    }
    vp_t old = x->grad;
    const vp_tensor *o = vp_at(sim, old);
    if (sim->accumulate == VP_ACCUMULATE_INPLACE && o->refs == 1 && !o->base) {
        vp_drop(sim, grad); /* old.add_(new) */
        return;
    }
    if (sim->accumulate == VP_ACCUMULATE_INPLACE && vp_at(sim, grad)->refs == 1 && !vp_at(sim, grad)->base) {
        vp_drop(sim, old); /* new.add_(old) */
        vp_at(sim, to)->grad = grad;
        return;
    }
    vp_t sum = vp_grad_like(sim, to, "accumulate"); /* old + new */
    vp_drop(sim, old);
    vp_drop(sim, grad);
    vp_at(sim, to)->grad = sum;
}

/* A leaf's AccumulateGrad runs on what its input buffer gathered. */
static void flush_leaf_buffer(vp_sim *sim, vp_t leaf) {
    vp_tensor *x = vp_at(sim, leaf);
    vp_t buffered = x->grad;
    x->grad = 0;
    if (buffered) accumulate_into_leaf(sim, leaf, buffered);
}

/* One edge to `to` has been followed; the last one runs its AccumulateGrad. */
static void settle_leaf_edge(vp_sim *sim, vp_t to) {
    vp_tensor *x = vp_at(sim, to);
    if (!x->leaf || !x->pending || --x->pending) return;
    flush_leaf_buffer(sim, to);
}

static void frame_goes(vp_sim *sim, vp_frame *f);

/* A node done with: its saved tensors released (a host copy is no GPU
 * memory). A checkpoint frame dies with its last holder (the hooks that
 * reference it go with the saved variables), and the function's arguments
 * with it. */
static void release_saved(vp_sim *sim, vp_node *node) {
    for (unsigned i = 0; i < node->n_saved; i++) {
        if (!(node->packed & (1u << i))) vp_drop(sim, node->saved[i]);
        node->saved[i] = 0;
    }
    node->packed = 0;
    node->recomputed = 0;
    node->handed = 0;
    unsigned held = (unsigned)__builtin_popcount(node->holders);
    node->holders = 0;
    vp_frame *f = node->frame;
    if (!held || !f) return;
    f->live -= held < f->live ? held : f->live;
    if (!f->live && f->keeper) frame_goes(sim, f);
}

/* The frame goes: the call's arguments, and the outputs a selective
 * policy cached that no rerun took (past an early stop). */
static void frame_goes(vp_sim *sim, vp_frame *f) {
    uint32_t keeper = f->keeper - 1;
    f->keeper = 0;
    while (f->sac_taken < f->sac_cached) vp_drop(sim, f->sac_cache[f->sac_taken++]);
    release_saved(sim, vp_node_at(sim, keeper));
}

static vp_t sac_new(vp_sim *sim, vp_aten_op op, uint64_t numel, vp_dtype dtype, const char *label);

vp_t vp_sac_new(vp_sim *sim, vp_aten_op op, uint64_t numel, vp_dtype dtype, const char *label) {
    vp_t t = sac_new(sim, op, numel, dtype, label);
    if (t) vp_at(sim, t)->aten = (uint8_t)op;
    return t;
}

static vp_t sac_new(vp_sim *sim, vp_aten_op op, uint64_t numel, vp_dtype dtype, const char *label) {
    bool rerun = sim->refilling != NULL;
    vp_frame *f = rerun ? sim->refilling : sim->saving;
    if (!f || !f->selective || !f->sac.saved[op]) return vp_new(sim, numel, dtype, label);
    if (f->sac.alternate[op] && ++f->sac_count[rerun] % 2 == 0) return vp_new(sim, numel, dtype, label);
    if (!rerun) {
        vp_t t = vp_new(sim, numel, dtype, label);
        if (f->sac_cached == VP_SAC_CACHE_MAX) {
            sim->status = VP_SIM_LIMIT; /* more saved outputs in one call than a frame keeps */
            return t;
        }
        vp_hold(sim, t);
        f->sac_cache[f->sac_cached++] = t;
        return t;
    }
    /* past an early stop the rerun never gets here: the cache keeps it */
    if (sim->phantom_from && sim->n_tensors >= sim->phantom_from) return vp_new(sim, numel, dtype, label);
    if (f->sac_taken == f->sac_cached) {
        sim->status = VP_SIM_UNBALANCED; /* the rerun must retrace the forward */
        return vp_new(sim, numel, dtype, label);
    }
    vp_t cached = f->sac_cache[f->sac_taken++];
    vp_t t = vp_view(sim, cached, numel, label);
    vp_drop(sim, cached);
    return t;
}

uint32_t vp_record_keeper(vp_sim *sim, const char *label) {
    if (!grow((void **)&sim->nodes, &sim->cap_nodes, sim->n_nodes + 1, sizeof(vp_node))) {
        sim->status = VP_SIM_NOMEM;
        return 0;
    }
    vp_node *node = &sim->nodes[sim->n_nodes++];
    memset(node, 0, sizeof *node);
    node->label = label;
    node->layer = sim->ledger->place.layer >= 0 ? sim->ledger->place.layer - sim->layer_offset : -1;
    node->done = true;
    return sim->n_nodes;
}

void vp_frame_begin(vp_sim *sim, vp_frame *frame, uint32_t keeper) {
    frame->keeper = keeper;
    frame->first_holder = sim->n_holders;
    frame->first_tensor = sim->n_tensors;
    sim->saving = frame;
}

void vp_frame_end(vp_sim *sim, vp_frame *frame) {
    sim->saving = NULL;
    if (frame->live || !frame->keeper) return;
    /* nothing saved: the frame is gone with the forward */
    frame_goes(sim, frame);
}

void vp_frame_rerun_begin(vp_sim *sim, vp_frame *frame) {
    frame->refilled = 0;
    frame->sac_count[1] = 0;
    frame->first_tensor = sim->n_tensors;
    sim->refilling = frame;
    if (frame->early_stop) sim->phantom_from = sim->n_tensors + frame->stop_offset;
}

void vp_frame_rerun_end(vp_sim *sim, vp_frame *frame) {
    sim->refilling = NULL;
    sim->phantom_from = 0;
    if (frame->refilled < frame->n_holders) sim->status = VP_SIM_UNBALANCED;
    for (uint32_t k = 0; k < frame->n_holders; k++) {
        vp_holder h = sim->holders[frame->first_holder + k];
        const vp_node *owner = vp_node_at(sim, h.node);
        if ((owner->holders & (1u << h.slot)) && !owner->saved[h.slot]) sim->status = VP_SIM_UNBALANCED;
    }
}

void vp_frame_drop_rerun_graph(vp_sim *sim, uint32_t first) {
    for (uint32_t i = first; i < sim->n_nodes; i++) release_saved(sim, vp_node_at(sim, i));
    sim->n_nodes = first;
}

/* Whether the gradient for `t`, an input of fused node `index`, stays in
 * the fused chain: `t` was made by a fused node of the same region. */
static bool stays_fused(vp_sim *sim, uint32_t index, vp_t t) {
    uint32_t region = vp_node_at(sim, index)->region;
    for (uint32_t j = index; j-- > 0;) {
        const vp_node *producer = vp_node_at(sim, j);
        if (producer->region != region) return false; /* regions are contiguous: left it */
        for (unsigned k = 0; k < VP_NODE_MAX_OUT; k++)
            if (producer->out[k] == t) return producer->fused;
    }
    return false;
}

/* One node, as torch/csrc/autograd/engine.cpp evaluate_function runs it: the
 * rule computes input gradients while its output gradients and saved tensors
 * are alive; then the output gradients are freed, the saved tensors released
 * (release_variables), and the new gradients routed to their inputs. */
static void run_node(vp_sim *sim, uint32_t index) {
    vp_node *node = vp_node_at(sim, index);
    bool any_grad = false;
    sim->ledger->place.layer = node->layer >= 0 ? node->layer + sim->layer_offset : -1;
    for (unsigned i = 0; i < VP_NODE_MAX_OUT; i++)
        if (vp_grad_out(sim, node, i)) any_grad = true;
    if (any_grad) {
        unpack(sim, index);
        bool fused = vp_node_at(sim, index)->fused;
        sim->fusing = fused;
        vp_node_at(sim, index)->backward(sim, index);
        sim->fusing = false;
        node = vp_node_at(sim, index);
        for (unsigned i = 0; fused && i < VP_NODE_MAX_IN; i++)
            if (node->grads[i] && !stays_fused(sim, index, node->in[i])) vp_materialize(sim, node->grads[i]);
    }
    node = vp_node_at(sim, index); /* the rule may have grown the node array */
    for (unsigned i = 0; i < VP_NODE_MAX_OUT; i++) {
        if (!node->out[i]) continue;
        vp_tensor *o = vp_at(sim, node->out[i]);
        vp_t g = o->grad;
        o->grad = 0;
        vp_drop(sim, g);
    }
    release_saved(sim, node);
    if (sim->stash.hook_due && sim->stash.node == index + 1) stash_hook(sim);
    node = vp_node_at(sim, index);
    for (unsigned i = 0; i < VP_NODE_MAX_IN; i++) {
        vp_t g = node->grads[i];
        node->grads[i] = 0;
        if (g) vp_deliver_grad(sim, node->in[i], g);
        if (node->in[i]) settle_leaf_edge(sim, node->in[i]);
    }
    node->done = true;
}

/* A leaf's AccumulateGrad is a node like any other: it runs once, when every
 * node of the graph task with an edge to it has run (its dependency count,
 * torch/csrc/autograd/engine.cpp compute_dependencies), on the sum its input
 * buffer gathered. Counting the edges of the nodes in [first, end). */
static void count_leaf_edges(vp_sim *sim, uint32_t first, uint32_t end) {
    for (uint32_t i = first; i < end; i++) {
        vp_node *node = vp_node_at(sim, i);
        if (node->done || node->counted) continue;
        node->counted = true;
        for (unsigned j = 0; j < VP_NODE_MAX_IN; j++)
            if (node->in[j] && vp_at(sim, node->in[j])->leaf) vp_at(sim, node->in[j])->pending++;
    }
}

void vp_backward_task(vp_sim *sim, uint32_t first, uint32_t end) { count_leaf_edges(sim, first, end); }

void vp_backward_task_end(vp_sim *sim) {
    for (vp_t t = 1; t < sim->n_tensors; t++) {
        vp_tensor *x = vp_at(sim, t);
        if (!x->leaf || !x->pending) continue;
        x->pending = 0;
        flush_leaf_buffer(sim, t);
    }
}

static bool feeds_later_node(vp_sim *sim, uint32_t index, vp_t t) {
    for (uint32_t j = index + 1; j < sim->n_nodes; j++) {
        const vp_node *later = vp_node_at(sim, j);
        if (later->done) continue;
        for (unsigned i = 0; i < VP_NODE_MAX_IN; i++)
            if (later->in[i] == t) return true;
    }
    return false;
}

void vp_drop_dead_nodes(vp_sim *sim, uint32_t first, uint32_t end) {
    /* newest first: a node kept only by a later dead node's saved input dies too */
    for (uint32_t i = end; i-- > first;) {
        vp_node *node = vp_node_at(sim, i);
        bool alive = node->done;
        for (unsigned o = 0; o < VP_NODE_MAX_OUT && !alive; o++) {
            vp_t t = node->out[o];
            alive = t && (vp_at(sim, t)->live || feeds_later_node(sim, i, t));
        }
        if (alive) continue;
        node = vp_node_at(sim, i);
        release_saved(sim, node);
        node->done = true;
    }
}

/* The engine's ready queue runs the node with the highest sequence number
 * first; for a graph recorded in program order that is reverse creation
 * order, and every consumer of a tensor runs before its producer. */
void vp_backward(vp_sim *sim, uint32_t first, uint32_t end) {
    vp_category saved = sim->category;
    sim->category = VP_CAT_TRANSIENT;
    count_leaf_edges(sim, first, end);
    for (uint32_t i = end; i-- > first;) {
        if (sim->status != VP_SIM_OK) break;
        if (!vp_node_at(sim, i)->done) run_node(sim, i);
    }
    sim->category = saved;
}
