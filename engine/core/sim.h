/* sim.h — a symbolic PyTorch: tensors that have sizes and lifetimes but no
 * data, autograd nodes that keep what torch.autograd keeps, and a backward
 * pass that allocates and frees gradients in the order the autograd engine
 * does. Every allocation and free goes to a ledger. */
#ifndef VP_SIM_H
#define VP_SIM_H

#include <stdbool.h>
#include <stdint.h>

#include "dtype.h"
#include "ledger.h"

typedef uint32_t vp_t; /* tensor handle; 0 is "no tensor" */

/* VP_NODE_MAX_OUT: a checkpointed chunk of up to eight mixture layers
 * returns its hidden states and each layer's router logits;
 * VP_NODE_MAX_SAVED: Liger's fused MoE Function saves eleven tensors */
enum { VP_NODE_MAX_IN = 4, VP_NODE_MAX_OUT = 9, VP_NODE_MAX_SAVED = 12 };

/* A set of a node's saved slots, bit i for saved[i]. */
typedef uint16_t vp_slots;

/* How PyTorch's engine combines a second gradient arriving for a tensor that
 * already has one buffered (torch/csrc/autograd/input_buffer.cpp). */
typedef enum {
    VP_ACCUMULATE_INPLACE,    /* 2.x: old.add_(new) when the buffer holds the last reference */
    VP_ACCUMULATE_OUT_OF_PLACE /* 1.13: old + new, a fresh tensor */
} vp_accumulate;

typedef struct {
    uint64_t numel;
    uint64_t bytes;      /* 0 for a view: it owns no storage */
    vp_t base;           /* the tensor whose storage a view shares */
    uint64_t offset;     /* where a view starts in that storage, in elements: only compared, as TRL's
                            OffloadActivations compares storage keys; a split's later parts are further in, as
                            are vp_slice_rows' and vp_slice_columns'; other views start where their base does */
    bool gaps;           /* a view whose elements have gaps between them (a part of a split of the last
                            dimension, a strided slice): not dense, so no copy of it keeps its strides */
    bool permuted;       /* dense but not contiguous: the attention heads' transposed view of a projection's
                            rows, and what element-wise ops make of it (TensorIterator lays an output out like
                            its first full-size input: vp_keep_layout) */
    uint32_t refs;
    uint8_t dtype;
    uint8_t category;
    bool requires_grad;
    bool leaf;           /* a parameter: its gradient goes to .grad */
    bool grad_drop;      /* its gradients are copied into a bucket and freed on arrival */
    bool expert;         /* an expert's parameter: its data-parallel group is dp / ep */
    uint64_t rows;       /* a matrix parameter's rows (0: a vector): factored optimizers need them */
    bool quantized;      /* stored 4-bit (QLoRA): dequantized to its dtype for every use */
    bool fp8;            /* a weight whose GEMMs run in FP8 (Transformer Engine, torchao) */
    bool conv1d;         /* a weight of transformers' Conv1D, (in, out): its GEMM takes it as it is, a Linear's
                            its transpose */
    uint8_t grad_category; /* for leaves: what a stolen gradient is charged as */
    bool post_accumulate; /* a leaf whose .grad sim->post_accumulate is told of after each AccumulateGrad */
    bool live;
    bool phantom;        /* made after a rerun's early stop: never allocated */
    vp_t grad;           /* gradient buffered for this tensor during backward */
    uint32_t pending;    /* leaves: edges to it from nodes of the running backward yet to run */
    vp_t param_grad;     /* for leaves: the .grad tensor */
    vp_t grad_stash;     /* for leaves: a sharded gradient held apart from .grad until the step's last
                            micro-batch (FSDP's: autograd fills another, unsharded tensor's .grad) */
    uint8_t grad_dtype;  /* dtype of this tensor's gradient (its own dtype) */
    uint8_t aten;        /* vp_aten_op: the ATen op that made it, where a policy or the partitioner tells it apart */
    const char *label;
} vp_tensor;

struct vp_sim;
struct vp_node;
/* A backward rule gets its node by index: a rule may record new nodes (a
 * checkpointed chunk recomputes its forward), which can move the array. */
typedef void (*vp_backward_fn)(struct vp_sim *sim, uint32_t node);

typedef struct vp_node {
    vp_backward_fn backward;
    const char *label;
    vp_t in[VP_NODE_MAX_IN];       /* inputs that receive a gradient (0: none) */
    vp_t out[VP_NODE_MAX_OUT];     /* outputs whose gradients this node takes */
    vp_t saved[VP_NODE_MAX_SAVED]; /* tensors kept for backward */
    vp_t grads[VP_NODE_MAX_IN];    /* scratch: gradients produced in backward */
    uint64_t aux[6];               /* rule parameters (counts, shapes) */
    uint8_t aux_dtype;
    uint8_t n_saved;               /* saved slots in use are below this one (the loops' bound) */
    int layer;                     /* layer at creation (-1: none), before layer_offset */
    void *context;                 /* rule context (a checkpointed chunk) */
    vp_slots packed;               /* saved slots packed to host memory (bit i: saved[i]) */
    vp_slots holders;              /* saved slots a checkpoint frame holds (bit i): empty until it recomputes */
    vp_slots handed;               /* saved slots whose unpacked tensor only the rule's locals hold (bit i) */
    vp_slots recomputed;           /* packed slots a compiled region recomputes in backward (bit i) */
    bool late_saves;               /* an autograd.Function's: what it saves is packed after it computes */
    struct vp_frame *frame;        /* that frame */
    uint32_t region;               /* the torch.compile region that recorded it (0: none) */
    bool fused;                    /* in a region, element-wise: Inductor fuses its backward with its neighbours' */
    bool done;
    bool counted;                  /* its edges to leaves are counted in their pending */
} vp_node;

/* The ATen ops a selective checkpoint's policy tells apart, as the
 * primitives that make them (F.linear without a bias is aten.mm, with one
 * addmm; a batched matmul bmm; SDPA's flash and memory-efficient kernels). */
typedef enum {
    VP_ATEN_OTHER,
    VP_ATEN_MM,
    VP_ATEN_ADDMM,
    VP_ATEN_BMM,
    VP_ATEN_SDPA_FLASH,
    VP_ATEN_SDPA_EFFICIENT,
    VP_ATEN_REDUCE_SCATTER, /* _c10d_functional.reduce_scatter_tensor (DTensor's Partial -> Shard) */
    VP_ATEN_NATIVE_DROPOUT, /* a random op: its output and mask */
    VP_ATEN_SCALED_MM,      /* torch._scaled_mm (torchao's float8 GEMMs) */
    VP_ATEN_MAX,            /* aten.max.default: the amax of float8's tensorwise scaling (torch.max(torch.abs(x))) */
    VP_ATEN_ALL_GATHER,     /* _c10d_functional.all_gather_into_tensor (DTensor's Shard -> Replicate, the CP ring's K/V) */
    VP_ATEN_SDPA_CUDNN,     /* SDPA's cuDNN attention kernel */
    VP_ATEN_COUNT
} vp_aten_op;

/* Selective activation checkpointing's policy
 * (torch.utils.checkpoint.create_selective_checkpoint_contexts): the ops
 * whose outputs are saved (MUST_SAVE), of which those that `alternate` are
 * saved only at odd counts within one call (1st, 3rd, ...) and recomputed
 * at even ones; every other op is recomputed. */
typedef struct {
    bool saved[VP_ATEN_COUNT];
    bool alternate[VP_ATEN_COUNT];
} vp_sac_rules;

enum { VP_SAC_CACHE_MAX = 64 };

/* A non-reentrant checkpoint's frame (torch.utils.checkpoint with
 * use_reentrant=False). While it is the sim's `saving` frame, what autograd
 * saves becomes a holder: the node keeps no reference. The first unpack of a
 * holder in backward calls `recompute`, which reruns the function with the
 * frame `refilling`: the k-th tensor the rerun saves fills the forward's
 * k-th holder if that one is still alive. The function's arguments stay on
 * the `keeper` node until the frame's last holder is released. */
typedef struct vp_frame {
    /* `running`: the index of the node whose unpack asked for it */
    void (*recompute)(struct vp_sim *sim, struct vp_frame *frame, uint32_t running);
    void *ctx;
    uint32_t keeper;        /* node index + 1 of the node keeping the arguments (0: none) */
    uint32_t first_holder;  /* its holders in the sim's holder list */
    uint32_t n_holders;
    uint32_t live;          /* holders not yet released */
    uint32_t refilled;      /* the rerun: tensors saved so far */
    uint32_t first_tensor;  /* the tensor count when the forward (then the rerun) began */
    uint32_t stop_offset;   /* early stop: rerun tensors from this offset on are never made */
    uint32_t last_pack_offset; /* tensors made before the last holder's pack */
    uint32_t last_node;     /* node index + 1 of the last pack */
    uint32_t op_floor;      /* tensors made before that node's op began */
    bool early_stop;        /* the rerun stops at the last holder's pack (PyTorch >= 2.1) */
    bool rerun_keeps;       /* 2.x: the rerun's own graph keeps what it saves until the rerun ends */
    bool recomputed;
    /* selective checkpointing (`selective`): the outputs the policy saved in
     * the forward, in order, until the rerun takes them (or the frame goes) */
    bool selective;
    vp_sac_rules sac;
    unsigned sac_count[2];  /* the alternating ops met: forward, rerun */
    vp_t sac_cache[VP_SAC_CACHE_MAX];
    uint32_t sac_cached, sac_taken;
} vp_frame;

typedef struct {
    uint32_t node;
    uint8_t slot;
} vp_holder;

typedef enum {
    VP_SIM_OK = 0,
    VP_SIM_OVERFLOW,   /* a size or a total left 64 bits */
    VP_SIM_NOMEM,
    VP_SIM_UNBALANCED, /* the step did not return to its resident state: a model bug */
    VP_SIM_LIMIT       /* one of the simulator's fixed tables ran out of room: an engine limit, not a size */
} vp_sim_status;

/* torchtune's OffloadActivations with use_streams (its default from
 * PyTorch 2.5; TRL's copy too): an offloaded tensor stays on the GPU until
 * `window` packs later (fwd_stash: its copy to the host runs on a stream of
 * its own), and is used as it is if backward asks for it before; a tensor
 * brought back in backward stays until the next node that brings some back
 * has run (bwd_tensor_stash), whose post-hook lets go of the earlier
 * node's and of what is left of the forward's; the end of backward of the
 * rest (_activation_offloading.py, torchtune 0.4-0.6). */
enum { VP_OFFLOAD_WINDOW_MAX = 8, VP_OFFLOAD_WINDOW = 5 /* its max_fwd_stash_size's default */ };
/* TRL's copy (trl/models/activation_offloading.py, TRL 1.8+) also keys
 * each offloaded tensor by its storage (_get_unique_tensor_key: the
 * storage's pointer plus the view's offset, and its dtype) while the
 * forward's stash keeps it: a later save of that storage stays on the GPU
 * and keeps the key tracked, until it is unpacked in backward. */
typedef struct {
    vp_t storage;
    uint64_t offset;
    uint8_t dtype;
    uint32_t pack;
} vp_storage_key;
/* What it allocates on its stream (self.s1): the tensors brought back in
 * backward, and a non-contiguous tensor's contiguous copy on its way to
 * the host; the last of vp_stream_ops' lists (ledger.h). */
extern const char *const vp_offload_stream_ops[];
typedef struct {
    unsigned window;             /* max_fwd_stash_size (5); 0: one stream, none of this */
    uint32_t packs;              /* tensor_id: every pack under the hooks, kept ones too */
    vp_t fwd[VP_OFFLOAD_WINDOW_MAX];
    uint32_t fwd_pack[VP_OFFLOAD_WINDOW_MAX];
    unsigned n_fwd;
    vp_t *back;                  /* brought back, oldest first */
    uint32_t n_back, cap_back;
    uint32_t earlier;            /* of those, the first `earlier` are earlier nodes' */
    uint32_t node;               /* index + 1 of the node that last brought one back */
    bool hook_due;               /* that node's post-hook has not run */
    /* what the forward's stash keeps for each: the tensor packed, or the
     * contiguous copy TRL made of it (fwd holds that one) */
    vp_t fwd_packed[VP_OFFLOAD_WINDOW_MAX];
    /* TRL's storage keys (storage, offset, dtype), each with the pack that
     * tracks it now: storage_to_tensor_id */
    vp_storage_key *keys;
    uint32_t n_keys, cap_keys;
} vp_offload_stash;

typedef struct vp_sim {
    vp_ledger *ledger;
    vp_tensor *tensors;
    uint32_t n_tensors, cap_tensors;
    vp_node *nodes;
    uint32_t n_nodes, cap_nodes;
    bool grad_mode;              /* torch.is_grad_enabled() */
    vp_category category;        /* charged for new tensors in the current phase */
    vp_accumulate accumulate;
    bool embedding_saves_weight; /* PyTorch 1.13's EmbeddingBackward0 keeps the weight (2.x: its row count) */
    int layer_offset;            /* added to node layers when placing backward events */
    /* torch.autograd.graph.save_on_cpu: while set, what autograd saves is
     * copied to host memory (pack is told the bytes) instead of kept */
    void (*pack)(void *ctx, uint64_t bytes);
    void *pack_ctx;
    /* what the hooks leave on the GPU: parameters, and tensors of fewer
     * bytes (torchtune's OffloadActivations: min_offload_size) */
    bool pack_skips_params;
    uint64_t pack_min_bytes;
    /* the host copy is torch.empty_like(tensor) (torchtune's
     * OffloadActivations, and TRL's before 1.4): a dense tensor's strides
     * are kept, so only one with a stride-0 dimension goes through a
     * contiguous GPU copy; save_on_cpu's torch.empty(size) is contiguous,
     * and a transposed view takes that copy too */
    bool pack_keeps_strides;
    /* TRL's OffloadActivations (trl/models/activation_offloading.py, TRL
     * 1.8+): a view of a parameter's storage stays (update_model_params
     * keeps the parameters' storages when the context is made: under
     * FSDP or ZeRO-3 the gathered weights are others and go); */
    bool pack_skips_param_views;
    /* a save of a storage key tracked stays (pack_tensor's deduplication;
     * with streams: keys are tracked while the stash keeps them); */
    bool pack_dedups;
    /* a non-contiguous view, or one at an offset, is copied .contiguous()
     * (a clone) on the GPU and that copy goes to the host and into the
     * stash; a broadcast view's storage goes as it is (as_strided back) */
    bool pack_copies_views;
    /* axolotl 0.18's patch of TRL's: such a view (a broadcast too), but a
     * parameter itself, is cloned contiguous on the compute stream before
     * the hook sees it; the hook packs the clone */
    bool pack_clones_views;
    vp_offload_stash stash;
    /* Tensor.register_post_accumulate_grad_hook (PyTorch 2.1+): called for a
     * leaf marked post_accumulate once its AccumulateGrad has put the
     * gradient into .grad, while that node still holds what it was given */
    void (*post_accumulate)(void *ctx, vp_t leaf);
    void *post_accumulate_ctx;
    /* non-reentrant checkpointing: the frame whose forward is running, the
     * frame whose rerun is running, and every frame's holders */
    vp_frame *saving, *refilling;
    vp_holder *holders;
    uint32_t n_holders, cap_holders;
    uint32_t phantom_from;       /* tensors from this handle on are never made (0: none) */
    /* inside a torch.compile region: Inductor fuses pointwise chains, so
     * torchao's float8 cast is an amax reduction and one kernel writing
     * the 1-byte data (no fp32 copies) */
    bool fused_casts;
    /* a fused node's backward is running: what it makes lives in the
     * kernel's registers unless it leaves the fused chain (vp_new_in makes
     * phantoms, run_node materializes those that leave) */
    bool fusing;
    uint32_t n_regions;          /* compile regions recorded (their numbers) */
    /* the largest symmetric-memory workspace a fused async-TP op asked for,
     * bytes (get_symm_mem_workspace's min_size; prims.c, funcol) */
    uint64_t symm_mem_request;
    vp_sim_status status;
} vp_sim;

void vp_sim_init(vp_sim *sim, vp_ledger *ledger);
/* Node `running` brings back what node `holder` packed to the host in
 * `slot` (a non-reentrant checkpoint's rerun takes its keeper's arguments
 * so): the tensor to use, with a reference the caller drops when done.
 * Under OffloadActivations' streams the forward's stash may still hold the
 * original (handed as it is), or the copy also stays in the backward's
 * stash beside `running` (_current_autograd_node when the hook runs) until
 * a later node's post-hook. The holder's slot is left as it is. */
vp_t vp_unpack_for(vp_sim *sim, uint32_t running, uint32_t holder, unsigned slot);
/* A save the packing hooks see and keep where it is, without a tensor of
 * the simulator's (a wrapped Python number): one of the packs
 * OffloadActivations' stash counts. */
void vp_pack_kept(vp_sim *sim);
/* The end of a backward graph task under OffloadActivations with streams:
 * what its stashes hold goes (its queued callback; the forward's is empty
 * by then unless nothing was brought back). */
void vp_offload_stash_flush(vp_sim *sim);
void vp_sim_free(vp_sim *sim);

/* The simulator's arrays kept by a caller between evaluations (a sweep's
 * thousands): the next simulation starts with their capacity instead of
 * growing its arrays again from nothing. Empty: all zero. */
typedef struct {
    vp_tensor *tensors;
    vp_node *nodes;
    vp_holder *holders;
    uint32_t cap_tensors, cap_nodes, cap_holders;
} vp_sim_arrays;
/* After vp_sim_init: the simulation takes the arrays (`arrays` is left empty). */
void vp_sim_adopt(vp_sim *sim, vp_sim_arrays *arrays);
/* Instead of vp_sim_free: the arrays go back to `arrays` for the next one. */
void vp_sim_keep(vp_sim *sim, vp_sim_arrays *arrays);
void vp_sim_arrays_free(vp_sim_arrays *arrays);

/* Checked element counts: the sim's status records an overflow. */
uint64_t vp_numel(vp_sim *sim, uint64_t a, uint64_t b);
uint64_t vp_numel3(vp_sim *sim, uint64_t a, uint64_t b, uint64_t c);
uint64_t vp_numel4(vp_sim *sim, uint64_t a, uint64_t b, uint64_t c, uint64_t d);

/* Tensor lifetimes. New tensors come with one reference, owned by the caller
 * (a Python local); vp_drop releases it. */
vp_t vp_new(vp_sim *sim, uint64_t numel, vp_dtype dtype, const char *label);
vp_t vp_new_in(vp_sim *sim, uint64_t numel, vp_dtype dtype, vp_category category, const char *label);
vp_t vp_view(vp_sim *sim, vp_t base, uint64_t numel, const char *label);
void vp_hold(vp_sim *sim, vp_t t);
/* tensor.requires_grad_(True) on a tensor made without grad: a leaf whose
 * gradient accumulates in its .grad (the owner drops that with it). */
void vp_requires_grad(vp_sim *sim, vp_t t);
void vp_drop(vp_sim *sim, vp_t t);
/* (inline: the simulation reads a tensor's record at almost every step) */
static inline vp_tensor *vp_at(vp_sim *sim, vp_t t) { return &sim->tensors[t]; }

/* A trainable (or frozen) resident tensor: parameters and buffers. */
vp_t vp_leaf(vp_sim *sim, uint64_t numel, vp_dtype dtype, vp_category category, bool trainable,
             const char *label);
/* The same with the bytes this device keeps of it: a shard, or nothing when
 * it lives in host memory. It computes (and gets gradients) at full size. */
vp_t vp_leaf_resident(vp_sim *sim, uint64_t numel, vp_dtype dtype, uint64_t resident_bytes, vp_category category,
                      bool trainable, const char *label);

/* Recording an autograd node for an op whose inputs `in` produced `out`.
 * Returns NULL (and records nothing) when no input requires grad or grad
 * mode is off; the output then does not require grad either. */
static inline vp_node *vp_node_at(vp_sim *sim, uint32_t node) { return &sim->nodes[node]; }
vp_node *vp_record(vp_sim *sim, vp_backward_fn backward, const char *label, const vp_t *in,
                   unsigned n_in, const vp_t *out, unsigned n_out);
void vp_save(vp_sim *sim, vp_node *node, vp_t t);
/* An output made after the node was recorded (and its inputs saved, as
 * autograd's generated code does before computing): vp_record with no
 * outputs, the saves, then the output, then this. A NULL node: nothing. */
void vp_record_output(vp_sim *sim, vp_node *node, unsigned slot, vp_t out);
/* The same, `strided` for a view autograd saves as it is, not contiguous
 * (mm's mat2, a Linear's weight.t()): save_on_cpu's pinned copy of it goes
 * through a contiguous copy on the GPU first, as an expanded view's does. */
void vp_save_view(vp_sim *sim, vp_node *node, vp_t t, bool strided);
/* vp_save of a contiguous view of t whatever t's layout (a permuted
 * tensor's rows as they are, q.transpose(1, 2) for FlashAttention-2), or
 * of the contiguous copy the caller's code makes first and the sim does
 * not (transformers' sdpa path before 4.56: query.contiguous()). */
void vp_save_contiguous(vp_sim *sim, vp_node *node, vp_t t);
/* An element-wise op's output y laid out like its first input of y's size
 * among a and b (b may be 0): permuted where that input is. */
void vp_keep_layout(vp_sim *sim, vp_t y, vp_t a, vp_t b);
/* The same into saved slot `slot`. Packed tensors come back in backward as
 * new copies, made before the rule runs and freed as it returns. */
void vp_save_at(vp_sim *sim, vp_node *node, unsigned slot, vp_t t);
/* A rule's return: the saved tensors whose unpack handed the rule the only
 * reference (a copy back from host memory, a 2.x checkpoint's recomputed
 * tensor) go with its locals, before validate_outputs fits its gradients;
 * the others stay until release_variables. */
void vp_drop_handed(vp_sim *sim, uint32_t node);
/* A reference the node keeps outside autograd's saved tensors (a Python
 * object on ctx): never packed. */
void vp_hold_at(vp_sim *sim, vp_node *node, unsigned slot, vp_t t);

/* A node that keeps references for a non-reentrant checkpoint frame: it
 * takes part in no backward (born done) and lets go when the frame's last
 * holder goes. Returns its index + 1 (0: out of memory). */
uint32_t vp_record_keeper(vp_sim *sim, const char *label);
/* Forward under the frame: begin, end. */
void vp_frame_begin(vp_sim *sim, vp_frame *frame, uint32_t keeper);
void vp_frame_end(vp_sim *sim, vp_frame *frame);
/* The rerun inside `recompute`: begin (early stop armed), end (the
 * phantom tail ends; checks that every holder still alive was filled). */
void vp_frame_rerun_begin(vp_sim *sim, vp_frame *frame);
void vp_frame_rerun_end(vp_sim *sim, vp_frame *frame);
/* The rerun's own nodes [first, n_nodes) go with the rerun. */
void vp_frame_drop_rerun_graph(vp_sim *sim, uint32_t first);

/* A new output of ATen op `op` (vp_new's arguments): inside a selective
 * checkpoint's forward, one the policy saves is also kept in the frame's
 * cache; in its rerun, such an output is not computed again but taken from
 * the cache (returned as a view of it). */
vp_t vp_sac_new(vp_sim *sim, vp_aten_op op, uint64_t numel, vp_dtype dtype, const char *label);

/* A compiled region's partitioner chose not to save what slot `slot` of
 * node `node` saved: the node lets go of it now, and backward recomputes
 * it (a new tensor of its size, made before the rule runs and freed as it
 * returns, as an unpacked copy is). */
void vp_recompute_saved(vp_sim *sim, uint32_t node, unsigned slot);

/* Backward helpers for the rule functions. */
vp_t vp_grad_like(vp_sim *sim, vp_t like, const char *label);
/* A phantom made while sim->fusing that a kernel writes to memory after
 * all (a fused chain's output, a value a compiled region saves): allocated
 * from now on. Nothing for a tensor that is not a phantom of fusing. */
void vp_materialize(vp_sim *sim, vp_t t);
vp_t vp_grad_sized(vp_sim *sim, uint64_t numel, vp_dtype dtype, const char *label);
void vp_give_grad(vp_sim *sim, vp_node *node, unsigned input, vp_t grad);
/* The gradient this node received for its output `i` (0 when none arrived). */
vp_t vp_grad_out(vp_sim *sim, const vp_node *node, unsigned i);
/* Whether input i of the node needs a gradient. */
bool vp_needs_grad(vp_sim *sim, const vp_node *node, unsigned i);
/* A workspace that lives only while the rule runs. */
void vp_scratch(vp_sim *sim, uint64_t bytes, const char *label);

/* Run backward over nodes [first, end) in reverse creation order; `end` is
 * usually sim->n_nodes. The seed gradient must already be buffered. A leaf's
 * gradients wait for every edge to it that vp_backward_task counted (one
 * graph task run range by range) or, failing that, that this range has. */
void vp_backward(vp_sim *sim, uint32_t first, uint32_t end);

/* The nodes recorded in [first, end) whose outputs are all gone and which
 * no later node takes input from died with them (a graph that only a
 * dropped local reached, which PyTorch frees then): their saved tensors go
 * now, and they never run. */
void vp_drop_dead_nodes(vp_sim *sim, uint32_t first, uint32_t end);
/* One loss.backward() run as several vp_backward ranges: count the leaves'
 * edges of nodes [first, end) once, before the first range. */
void vp_backward_task(vp_sim *sim, uint32_t first, uint32_t end);
/* After the task: leaves whose gradients still wait (an edge no range ran)
 * get them now. */
void vp_backward_task_end(vp_sim *sim);

/* Hand a gradient to a tensor as the autograd engine does: into .grad for a
 * parameter, else into the tensor's input buffer. Consumes the reference. */
void vp_deliver_grad(vp_sim *sim, vp_t to, vp_t grad);

#endif
