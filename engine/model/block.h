/* block.h — a block written in Lua (scripts/lib/vramplan/block.lua), as
 * the core holds it: its parameters and the program its forward traced to,
 * a straight list of primitive calls over numbered values with the frees
 * made explicit. One flat struct (no pointers), so that copying an op
 * copies it. op_block.c runs it; lua_block.c builds and checks it. */
#ifndef VP_BLOCK_H
#define VP_BLOCK_H

#include <stdbool.h>
#include <stdint.h>

#include "model.h"

enum {
    VP_BLOCK_PARAMS = VP_OP_MAX_LEAVES,
    VP_BLOCK_CODE = 512,
    VP_BLOCK_VALUES = 512,
    VP_BLOCK_PARTS = 8,
    VP_BLOCK_LABEL = 48,
    VP_BLOCK_ARGS = 8,       /* a kernel's inputs (kernel.h's VP_KERNEL_INPUTS) */
    VP_BLOCK_KERNELS = 8,
    VP_BLOCK_KEEPS = 2,
    VP_BLOCK_AUX_LABELS = 32, /* labels of the events inside MATMUL and SOFTMAX_FP32 */
    VP_BLOCK_INPUTS = 2,     /* tensors a block names beside its input (block { inputs = { ... } }) */
    VP_BLOCK_DIMS = 8,       /* an explicit output shape's dimensions */
    VP_BLOCK_TP_RULES = 4,   /* block { tp_divides = { ... } }: the script's conditions on tp */
    VP_BLOCK_TP_WHY = 320,
};

/* The tensors a block may take beside its input, by name: those a branch
 * (op_branch.c) makes for the ops it runs. docs/writing-blocks.md, "Blocks
 * with several inputs". */
typedef enum {
    VP_BLOCK_SHIFTED_EMBEDDINGS, /* "shifted_embeddings": the shared token embedding of the tokens k ahead */
    VP_BLOCK_BRANCH_INPUT,       /* "branch_input": the hidden states the branch took */
    VP_BLOCK_INPUT_IDS,          /* "input_ids": the batch's token ids [b, s] (int64), any block may name it */
    VP_BLOCK_STREAMS
} vp_block_stream;

/* The primitives a program calls (op_block.c: what each runs). */
typedef enum {
    VP_BP_DROP,      /* the value's last reference goes (a Python temporary or a local that goes) */
    VP_BP_RETURN,    /* the value is the block's output */
    VP_BP_LINEAR,    /* x, weight[, bias]: a projection as F.linear under the step (vp_project*) */
    VP_BP_UNARY,     /* an elementwise function of one tensor; mode: vp_block_unary */
    VP_BP_MUL,       /* a * b, broadcast */
    VP_BP_ADD,       /* a + b (or a - b), broadcast */
    VP_BP_SCALE,     /* a times or over a Python number */
    VP_BP_SHIFT,     /* a plus or minus a Python number */
    VP_BP_NEG,       /* -a */
    VP_BP_MEAN,      /* mean over the last dimension (width), keepdim */
    VP_BP_SUM,       /* sum over the last dimension (width), keepdim */
    VP_BP_TO,        /* a.to(dtype): mode a vp_dtype, or VP_BLOCK_LIKE with b the value whose dtype */
    VP_BP_DROPOUT,   /* nn.Dropout(number) while training */
    VP_BP_CAT,       /* torch.cat((a, b), dim=-1) */
    VP_BP_SWIGLU,    /* Megatron's fused bias_swiglu: silu(first half) * second half, keeps its input */
    VP_BP_RMS_NORM,  /* a fused RMSNorm kernel (apex FusedRMSNorm, Transformer Engine): x, weight */
    VP_BP_KERNEL,    /* a fused kernel the script declared (F.kernel): mode is its index in `kernel` */
    VP_BP_SPLIT,     /* torch.split / chunk along the last dimension (width) into mode views of part[i] */
    VP_BP_ROTARY,    /* apply_rotary_pos_emb of q or k with the step's cos and sin tables */
    VP_BP_CACHE,     /* past_key_value.update(k, v): the keys and values in values out, out + 1 */
    VP_BP_SDPA,      /* q, k, v: the attention op's core (sdpa.h); heads, kv_heads, width = head_dim, mode: VP_SDPA_* */
    VP_BP_SUB,       /* a - b, broadcast, both tensors */
    VP_BP_SELECT,    /* a view of one of each mode consecutive heads (q.reshape(b, s, h, mode, d)[:, :, :, i]) */
    /* eager attention written out (sdpa.h's helpers): */
    VP_BP_REPEAT_KV, /* repeat_kv(x, mode) of x [b, kv_heads, s, d]: a copy, or one key/value head expanded */
    VP_BP_MATMUL,    /* torch.matmul(a, b) of [b, heads, s, .] tensors; mode: VP_MATMUL_*; width: d */
    VP_BP_MASK,      /* the step's mask of kind mode (vp_attention_mask_kind), width: a sliding window */
    VP_BP_MASK_ADD,  /* scores + an additive mask: the sum in their promoted dtype */
    VP_BP_MASKED_FILL, /* scores.masked_fill(a bool mask, min) */
    VP_BP_SOFTMAX_FP32, /* softmax(x, -1, dtype=torch.float32): ATen converts x first (not fp16 on CUDA) */
    VP_BP_COPY,      /* x.contiguous() of a transposed view: a copy */
    VP_BP_LAYER_KEEP, /* the decoder layer keeps the value until it returns (defines nothing) */
    /* the chunked-scan vocabulary (Mamba-2's reference SSD): each output's
     * size is the instruction's shape (dim, dim_add) */
    VP_BP_CONV1D,    /* x, weight, bias: F.conv1d depthwise (groups = channels); mode VP_BLOCK_STRIDED: x a transposed view */
    VP_BP_CUMSUM,    /* torch.cumsum along one dimension */
    VP_BP_TRIL,      /* torch.tril(torch.ones(n, n, dtype=torch.bool), k): a bool tensor of the shape */
    VP_BP_NOT,       /* ~mask: a new bool tensor */
    VP_BP_CLAMP,     /* torch.clamp(x, min, max) with Python numbers */
    VP_BP_PAD,       /* F.pad(x, ...) with zeros: a new tensor (no padding at all: a copy, constant_pad_nd's clone) */
    VP_BP_SLICE,     /* x[..., a:b] or x[..., i]: a view */
    VP_BP_EXPAND,    /* x.expand(...): a view */
    VP_BP_ZEROS,     /* torch.zeros_like(x-shaped): a new tensor that needs no gradient, of x's dtype */
    VP_BP_REPEAT,    /* x.repeat_interleave(n, dim): index_select with a saved int64 index of `number` elements */
    /* tables, indices and collectives (each output's size from its operands') */
    VP_BP_EMBEDDING, /* ids, table: F.embedding(ids, table), the table's rows `width` wide */
    VP_BP_TOPK,      /* torch.topk(x, part[0]) along the last dimension (width): values in out, int64 indices in out + 1 */
    VP_BP_GATHER,    /* x, index: x.gather(-1, index), the index's size */
    VP_BP_INDEX,     /* table, index: table[index] (advanced indexing of dimension 0), rows `width` wide */
    VP_BP_SCATTER,   /* x, index, src: x.scatter(-1, index, src), a new tensor like x */
    VP_BP_SCATTER_ADD, /* x, index, src: x.scatter_add(-1, index, src), a new tensor like x */
    VP_BP_LAYER_NORM, /* x, weight[, bias]: F.layer_norm over the last dimension */
    VP_BP_ALL_GATHER, /* Megatron's gather_from_sequence_parallel_region: tp times the rows under sequence parallelism */
    VP_BP_REDUCE_SCATTER, /* reduce_scatter_to_sequence_parallel_region: 1/tp of the rows under sequence parallelism */
    VP_BP_LOGSUMEXP, /* torch.logsumexp over the last dimension (width), keepdim */
    VP_BP_VAR,       /* x.var(-1) over the last dimension (width), keepdim */
    VP_BP_STD,       /* x.std(-1) over the last dimension (width), keepdim */
    VP_BP_AMAX,      /* x.amax(-1) over the last dimension (width), keepdim */
    VP_BP_AMIN,      /* x.amin(-1) over the last dimension (width), keepdim */
    VP_BP_INDEX_SELECT, /* x, index: x.index_select(dim, index) of a 1-D index, its explicit shape */
    VP_BP_INDEX_ADD, /* x, index, src: x.index_add(dim, index, src) of a 1-D index, a new tensor like x */
    /* in place (vp_block_in_place): out is arg[0], x's new version (a view
     * of its storage: no new tensor) */
    VP_BP_SCATTER_,     /* x, index[, src]: x.scatter_(dim, index, src or a number) */
    VP_BP_SCATTER_ADD_, /* x, index, src: x.scatter_add_(dim, index, src) */
    VP_BP_INDEX_ADD_,   /* x, index, src: x.index_add_(dim, index, src) of a 1-D index */
    VP_BP_INDEX_COPY_,  /* x, index, src: x.index_copy_(dim, index, src) of a 1-D index */
    VP_BP_MASKED_FILL_, /* x, mask: x.masked_fill_(mask, value) */
    VP_BP_COUNT
} vp_block_prim;

/* The elementwise functions and what autograd keeps of each. */
typedef enum {
    VP_BU_SILU,
    VP_BU_GELU,
    VP_BU_GELU_TANH,
    VP_BU_RELU,
    VP_BU_SIGMOID,
    VP_BU_TANH,
    VP_BU_EXP,
    VP_BU_RSQRT,
    VP_BU_POW, /* pow(x, n) for a number n */
    VP_BU_SOFTMAX,     /* over the last dimension */
    VP_BU_LOG_SOFTMAX, /* over the last dimension */
    VP_BU_SOFTPLUS,
    VP_BU_COUNT
} vp_block_unary;

enum { VP_BLOCK_LIKE = 255 };

/* CONV1D's mode: its input is a transposed view (not contiguous); SLICE's:
 * only when the sequence was padded (transformers' `if pad_size > 0: y =
 * y[:, :seq_len]`), else the tensor itself; COPY's: only when the batch is
 * more than 1 (the contiguous() of a view that moved the batch dimension
 * alone: PyTorch's is_contiguous skips dimensions of size 1) */
enum { VP_BLOCK_STRIDED = 1, VP_BLOCK_IF_PADDED = 1, VP_BLOCK_IF_BATCHED = 1 };

/* What an explicit shape's dimension counts: its size is that plus
 * dim_add (VP_DIM_CONST: dim_add alone). CHUNKS is ceil(seq / chunk),
 * PADDED the sequence padded to whole chunks (CHUNKS x chunk); the
 * sequence is the block input's (this rank's share under sequence
 * parallelism) unless the dimension's dim_gathered bit says it is the
 * whole one a column-parallel linear gathered. SPLIT is dim_add divided
 * over the tensor-parallel ranks (heads, a column-parallel output). */
typedef enum { VP_DIM_CONST, VP_DIM_BATCH, VP_DIM_SEQ, VP_DIM_CHUNKS, VP_DIM_PADDED, VP_DIM_SPLIT, VP_DIM_COUNT } vp_block_dim;

/* MUL's mode: one operand is 0-dim (torch.sum of a vector), the result
 * takes the other's dtype */
enum { VP_BLOCK_ZERO_DIM_A = 1, VP_BLOCK_ZERO_DIM_B = 2 };

/* SDPA's options (an instruction's mode bits) */
enum {
    VP_SDPA_UPCAST = 1u << 0,        /* softmax(dtype=torch.float32).to(query.dtype) */
    VP_SDPA_KEEPS_WEIGHTS = 1u << 1, /* the layer keeps the eager path's probabilities */
    VP_SDPA_Q_CONTIGUOUS = 1u << 2,  /* q, k, v as they lie: contiguous, or transposed views */
    VP_SDPA_K_CONTIGUOUS = 1u << 3,
    VP_SDPA_V_CONTIGUOUS = 1u << 4,
    VP_SDPA_Q_GAPS = 1u << 5,        /* views with gaps (F.select) */
    VP_SDPA_K_GAPS = 1u << 6,
    VP_SDPA_V_GAPS = 1u << 7,
};

/* MATMUL's mode bits: how each operand lies (sdpa.h's vp_attention_operand),
 * and whether b is the keys transposed: the output's last dimension is then
 * the keys' length (the step's sequence and any cached prefix), else b's
 * width. */
enum {
    VP_MATMUL_B_TRANSPOSED = 1u << 0,
    VP_MATMUL_A_CONTIGUOUS = 1u << 1,
    VP_MATMUL_B_CONTIGUOUS = 1u << 2,
    VP_MATMUL_A_GAPS = 1u << 3,
    VP_MATMUL_B_GAPS = 1u << 4,
};

/* Which of a parameter's two dimensions tensor parallelism divides. */
typedef enum { VP_BLOCK_WHOLE, VP_BLOCK_SPLIT_ROWS, VP_BLOCK_SPLIT_COLUMNS } vp_block_split;

typedef struct {
    char label[VP_BLOCK_LABEL];  /* "mlp.up_proj.weight" */
    uint64_t rows, columns;      /* a linear weight: out x in; a vector: 1 x n */
    uint8_t split;               /* vp_block_split */
    uint8_t module;              /* vp_module: what LoRA targets and modules_to_save name */
    char module_name[VP_BLOCK_LABEL]; /* the module's own name ("my_proj"): what lora_targets names when no core
                                         module has it (module VP_MODULE_NONE) */
    bool linear;                 /* a linear layer's weight (LoRA may adapt it; rows are its outputs) */
    bool trainable, buffer, keep_fp32, conv1d;
} vp_block_param;

/* A fused kernel as F.kernel declared it, per row of its first input
 * (rows = its elements over in_width): the output's width and dtype, the
 * inputs (bit i) and output (bit VP_BLOCK_ARGS) autograd keeps, the inputs
 * its forward casts to autocast's dtype (bit i: the cast is what it keeps)
 * or copies (x.contiguous() of a transposed view: the copy is kept),
 * tensors it makes only to keep for backward, and its workspaces: bytes
 * plus elements of the first input's dtype. A dtype VP_BLOCK_LIKE is the
 * first input's. */
typedef struct {
    uint8_t n_inputs;
    uint16_t saves, casts, copies;
    uint8_t out_dtype;           /* VP_DTYPE_NONE: the first input's */
    bool in_split, out_split;
    uint64_t in_width, out_width;
    uint64_t keep_width[VP_BLOCK_KEEPS]; /* 0: none */
    uint8_t keep_dtype[VP_BLOCK_KEEPS];
    uint64_t forward_workspace, backward_workspace; /* bytes per row */
    uint64_t forward_workspace_like, backward_workspace_like; /* elements of the first input's dtype per row */
} vp_block_kernel;

/* Value 0 is the block's input, values 1..n_params its parameters (leaf k
 * is value k + 1), then its named inputs (vp_block_borrowed: all of these
 * the program borrows); each instruction but DROP and RETURN defines value
 * `out`. */
typedef struct {
    uint8_t prim;                /* vp_block_prim */
    uint8_t mode;
    uint16_t out;
    int16_t arg[VP_BLOCK_ARGS];  /* value ids, -1: none */
    uint64_t width;              /* MEAN, SUM, TOPK, LOGSUMEXP, VAR, STD: the reduced dimension; SPLIT: the split one; EMBEDDING,
                                    INDEX: the width of the table's rows */
    bool width_split;            /* it is divided over tensor-parallel ranks */
    double number;               /* DROPOUT, SDPA: p */
    uint32_t heads, kv_heads;    /* SDPA, MATMUL: the whole model's query and key/value heads; another
                                    primitive whose output is scores-shaped (out_width 0): its heads */
    uint64_t part[VP_BLOCK_PARTS]; /* SPLIT: each view's width (defining values out, out + 1, ...) */
    uint64_t out_width;          /* the output's last dimension, as traced (0: unknown): the time model's */
    uint8_t n_dims;              /* an explicit output shape (0: none): its size the product of the dimensions */
    uint8_t dim[VP_BLOCK_DIMS];  /* vp_block_dim */
    int32_t dim_add[VP_BLOCK_DIMS];
    uint8_t dim_gathered;        /* bit d: dimension d counts the gathered sequence (vp_block_dim) */
    uint32_t chunk;              /* VP_DIM_CHUNKS and VP_DIM_PADDED: the chunk's length */
    bool out_split;
    char label[VP_BLOCK_LABEL];
    /* MATMUL: its operands' cast and batch-fold copies' labels (a, b);
     * SOFTMAX_FP32: the upcast's; in `aux_labels` from this index */
    uint16_t aux;
} vp_block_instr;

/* The code runs from 0 to megatron_start (or n_code when 0); under
 * Megatron-LM, when the block gave a forward of its own for it, from
 * megatron_start to n_code instead. */
typedef struct {
    unsigned n_params, n_code, n_values, megatron_start, n_kernels;
    unsigned n_inputs;           /* named inputs (values n_params + 1 ...) */
    uint8_t input[VP_BLOCK_INPUTS]; /* vp_block_stream of each */
    bool norm;                   /* a norm: registered with the norms, ends a post-norm block's frame */
    uint64_t width;              /* the input's last dimension (block { width = ... }); 0: not given */
    char name[VP_BLOCK_LABEL];   /* the module's name (block { name = ... }) */
    /* why context parallelism cannot run the program (naming the block and
     * its op), or "": its chunked scan over the sequence */
    char cp_problem[384];
    /* the conditions the script puts on tensor parallelism (block {
     * tp_divides = { { n, why }, ... } }): tp must divide tp_count[i], else
     * the layout is refused with tp_why[i] (the module's own rule, cited) */
    unsigned n_tp_rules;
    uint64_t tp_count[VP_BLOCK_TP_RULES];
    char tp_why[VP_BLOCK_TP_RULES][VP_BLOCK_TP_WHY];
    /* its DTensor tensor-parallel plan (block_plan.c): whether its input is
     * gathered at its entry (PrepareModuleInput), the first column-parallel
     * weight that reads it (value id, 0: none) and how many column-parallel
     * linears read it (async TP's fused gather), and why sequence
     * parallelism, or torchao's float8 input (an input read otherwise than
     * by column-parallel linears), cannot run it so (naming the block and
     * its op), or "" */
    bool dtensor_gathers;
    int16_t dtensor_weight;
    uint16_t dtensor_linears;
    char dtensor_problem[384];
    char dtensor_float8_problem[384];
    /* why Megatron-LM's sequence parallelism cannot run it (a primitive
     * that mixes positions reads the rank's share of the sequence), or "" */
    char megatron_sp_problem[384];
    vp_block_param param[VP_BLOCK_PARAMS];
    vp_block_kernel kernel[VP_BLOCK_KERNELS];
    vp_block_instr code[VP_BLOCK_CODE];
    unsigned n_aux;
    char aux_labels[VP_BLOCK_AUX_LABELS][VP_BLOCK_LABEL];
} vp_block_program;

/* The last value the program borrows (the input, the parameters, the named
 * inputs): it never frees those. */
static inline unsigned vp_block_borrowed(const vp_block_program *p) { return p->n_params + p->n_inputs; }

/* Whether a primitive writes its first operand in place (its output is
 * that value, x's new version). */
static inline bool vp_block_in_place(unsigned prim) { return prim >= VP_BP_SCATTER_ && prim <= VP_BP_MASKED_FILL_; }

/* What an in-place op after a primitive must know of it (op_block.c runs
 * the primitive, and answers): its node keeps its own output for backward
 * (sigmoid's, softmax's, ...: writing that output in place is what PyTorch
 * refuses at backward), or its output may be its input's storage (a view,
 * or the input itself: writing it would write the input). */
enum { VP_BLOCK_SAVES_OUTPUT = 1u << 0, VP_BLOCK_ALIASES_INPUT = 1u << 1 };
unsigned vp_block_prim_facts(unsigned prim, unsigned mode);

/* The program's problem (a message naming the instruction), or NULL:
 * values defined before use, each dropped once, one RETURN, nothing left
 * alive. */
const char *vp_block_check(const vp_block_program *program, char *message, unsigned size);

/* Writes the layouts' problems the program carries (cp_problem, and its
 * DTensor plan: vp_block_note_dtensor_plan). */
void vp_block_note_problems(vp_block_program *program);

/* Reads the block's DTensor tensor-parallel plan off its program
 * (dtensor_gathers, dtensor_weight, dtensor_problem, dtensor_float8_problem). */
void vp_block_note_dtensor_plan(vp_block_program *program);

/* Reads off the program Megatron-LM's forward (from megatron_start)
 * whether a primitive mixing positions along the sequence reads the rank's
 * share under sequence parallelism (megatron_sp_problem). */
void vp_block_note_megatron_plan(vp_block_program *program);

#endif
