/* op_embedding.c — token and learned position embeddings, rotary tables. */
#include <math.h>

#include "finetune.h"
#include "ops.h"

/* ---- token embedding ---- */

enum { TOKEN_VOCAB, TOKEN_HIDDEN, TOKEN_MODEL_LOCAL, TOKEN_SCALED, TOKEN_POSITION_IDS, TOKEN_FIELDS };

#define MODEL_LOCAL_DOC                                                                                        \
    "the output is a local of the model's forward (HF's inputs_embeds, position_embeds), alive until the model " \
    "body returns; false where a submodule makes it (BertEmbeddings)"

static const vp_field token_fields[TOKEN_FIELDS] = {
    [TOKEN_VOCAB] = {"vocab", VP_FIELD_INT, true, 0, 1, 1 << 24, NULL, "vocabulary size"},
    [TOKEN_HIDDEN] = {"hidden", VP_FIELD_INT, true, 0, 1, 1 << 20, NULL, "embedding width"},
    [TOKEN_MODEL_LOCAL] = {"model_local", VP_FIELD_BOOL, false, 1, 0, 1, NULL, MODEL_LOCAL_DOC},
    [TOKEN_SCALED] = {"scaled", VP_FIELD_BOOL, false, 0, 0, 1, NULL,
                      "the module scales its own rows by a constant (Gemma3TextScaledWordEmbedding: the lookup "
                      "times embed_scale, a new tensor), before anything joins them"},
    [TOKEN_POSITION_IDS] = {"position_ids", VP_FIELD_BOOL, false, 1, 0, 1, NULL,
                            "the model's forward makes position_ids = arange(s) (int64) for its layers (LlamaModel's "
                            "cache_position, GPT2Model's position_ids); false where it makes none (transformers' "
                            "Mamba2Model in training: use_cache is False, so no cache_position)"},
};

/* Megatron's VocabParallelEmbedding: each tensor-parallel rank holds a
 * slice of the padded vocabulary. */
static unsigned token_leaves(const vp_op *op, const vp_ranks *split, vp_leaf_spec *out) {
    unsigned tp = split->tp;
    uint64_t rows = vp_local_vocab(vp_op_u64(op, TOKEN_VOCAB), tp, split->exact_vocab);
    out[0] = vp_param(rows * vp_op_u64(op, TOKEN_HIDDEN), "embed_tokens.weight", VP_MODULE_EMBED_TOKENS, 0);
    out[0].rows = rows;
    return 1;
}

/* PeftModelForCausalLM gives the labels -100 for the virtual tokens
 * (torch.cat of torch.full and the batch's): the model's labels, a local
 * of PEFT's forward. A seq2seq model's labels are the decoder's and a
 * classifier's one per sequence: PEFT leaves them as they are. */
static bool prefixes_labels(const vp_step *step) {
    const vp_model_facts *facts = &step->model->facts;
    return !vp_model_encoder_decoder(step->model) && facts->loss && !facts->loss_per_sequence;
}

/* PeftModelForCausalLM.forward and PeftModelForSeq2SeqLM.forward with
 * prompt tuning: a seq2seq batch's attention mask gets ones for the
 * virtual tokens (torch.cat of fp32 ones and the int64 mask: fp32); the
 * prompt table is looked up for every sequence (PromptEmbedding; a
 * seq2seq table holds two sets, num_transformer_submodules, of which the
 * encoder gets the first), cast to the embeddings' dtype and put before
 * them (torch.cat, whose backward hands out views). `prompts` and the
 * mask are locals of PEFT's forward until the model returns. */
static vp_t with_prompt(vp_step *step, const vp_op *op, vp_t inputs_embeds) {
    vp_sim *sim = &step->sim;
    unsigned sets = vp_prompt_submodules(step->model);
    uint64_t hidden = vp_op_u64(op, TOKEN_HIDDEN);
    if (vp_model_encoder_decoder(step->model)) { /* the batch's attention_mask (seq2seq batches carry one) */
        vp_t ones = vp_new(sim, vp_numel(sim, step->batch, step->virtual_tokens), VP_FP32, "prompt.mask_ones");
        vp_t mask = vp_new(sim, step->tokens, VP_FP32, "prompt.attention_mask");
        vp_drop(sim, ones);
        vp_step_keep_local(step, mask, VP_LOCAL_OF_WRAPPER);
        vp_step_put_tensor(step, VP_TENSOR_PROMPT_MASK, mask);
    }
    if (step->stage.final && prefixes_labels(step)) { /* the batch has labels */
        vp_t prefix = vp_new(sim, vp_numel(sim, step->batch, step->virtual_tokens), VP_INT64, "prompt.prefix_labels");
        vp_step_put_tensor(step, VP_TENSOR_PROMPT_LABELS, 0);
        vp_step_put_tensor(step, VP_TENSOR_PROMPT_LABELS, vp_new(sim, step->tokens, VP_INT64, "prompt.labels"));
        vp_drop(sim, prefix);
    }
    /* prompt_tokens: an arange kept on the CPU, expanded to the batch; the
     * .to(device) copies every row */
    uint64_t tokens = vp_numel(sim, step->batch, (uint64_t)step->virtual_tokens * sets);
    vp_t ids = vp_new(sim, tokens, VP_INT64, "prompt.tokens");
    vp_t looked_up = vp_embedding(sim, ids, step->prompt, tokens, hidden,
                                  step->recipe->device, "prompt_encoder");
    vp_drop(sim, ids);
    vp_t prompts = vp_to(sim, looked_up, (vp_dtype)vp_at(sim, inputs_embeds)->dtype, "prompt.cast");
    vp_drop(sim, looked_up);
    vp_step_keep_local(step, prompts, VP_LOCAL_OF_WRAPPER);
    /* prompts[:, :num_virtual_tokens]: a view of the first set */
    vp_t first = sets > 1 ? vp_slice(sim, prompts, vp_numel3(sim, step->batch, step->virtual_tokens, hidden),
                                     "prompt.encoder_part")
                          : (vp_hold(sim, prompts), prompts);
    vp_drop(sim, prompts);
    vp_t joined = vp_cat(sim, first, inputs_embeds, "prompt.cat");
    vp_drop(sim, first);
    return joined;
}

/* x is the batch's input ids. The embedding runs in the parameters' dtype:
 * it is on no autocast list. Split over tensor-parallel ranks, the ids
 * outside the rank's slice are masked (a bool mask, and shifted ids that
 * the lookup keeps for backward) and the partial embeddings all-reduced in
 * place (VocabParallelEmbedding.forward). */
static vp_t token_forward(vp_step *step, const vp_op *op, const vp_t *leaves, vp_t x) {
    vp_sim *sim = &step->sim;
    step->tied_weight = leaves[0];
    if (step->tp == 1) {
        vp_t y = vp_embedding(sim, x, leaves[0], step->input_tokens, vp_op_u64(op, TOKEN_HIDDEN),
                              step->recipe->device, "embed_tokens");
        if (vp_op_flag(op, TOKEN_SCALED)) {
            vp_t scaled = vp_scale(sim, y, "embed_tokens.scale");
            vp_drop(sim, y);
            y = scaled;
        }
        vp_step_embedding_output(step, y);
        if (!step->virtual_tokens) {
            if (vp_op_flag(op, TOKEN_MODEL_LOCAL)) vp_step_keep_local(step, y, VP_LOCAL_OF_BODY);
            return y;
        }
        /* PEFT's forward makes the embeddings and keeps the joined ones
         * until the model it calls returns its outputs */
        vp_t joined = with_prompt(step, op, y);
        vp_drop(sim, y);
        vp_step_keep_local(step, joined, VP_LOCAL_OF_WRAPPER);
        return joined;
    }
    vp_t mask = vp_new(sim, step->tokens, VP_BOOL, "embed_tokens.mask");
    vp_t shifted = vp_new(sim, step->tokens, VP_INT64, "embed_tokens.masked_input");
    vp_t y = vp_embedding(sim, shifted, leaves[0], step->tokens, vp_op_u64(op, TOKEN_HIDDEN), step->recipe->device,
                          "embed_tokens");
    vp_drop(sim, shifted);
    vp_drop(sim, mask);
    vp_step_embedding_output(step, y);
    return y;
}

static void token_facts(const vp_op *op, vp_section_id section, vp_model_facts *facts) {
    if (section != VP_SECTION_EMBED) return;
    facts->hidden = vp_op_u64(op, TOKEN_HIDDEN);
    facts->no_position_ids = !vp_op_flag(op, TOKEN_POSITION_IDS);
}

const vp_op_kind vp_op_token_embedding = {
    .name = "token_embedding",
    .doc = "nn.Embedding over the vocabulary; its weight is the one a tied head reuses",
    .fields = token_fields,
    .n_fields = TOKEN_FIELDS,
    .roles = VP_ROLE_EMBEDDING,
    .cost = VP_COST_TOKEN_EMBEDDING,
    .facts = token_facts,
    .leaves = token_leaves,
    .forward = token_forward,
};

/* ---- learned position embedding ---- */

enum {
    POSITION_POSITIONS,
    POSITION_HIDDEN,
    POSITION_IN_PLACE,
    POSITION_MODEL_LOCAL,
    POSITION_IDS_BUFFER,
    POSITION_OFFSET,
    POSITION_FROM_MASK,
    POSITION_FIELDS
};

static const vp_field position_fields[POSITION_FIELDS] = {
    [POSITION_POSITIONS] = {"positions", VP_FIELD_INT, true, 0, 1, 1 << 24, NULL, "maximum sequence length"},
    [POSITION_HIDDEN] = {"hidden", VP_FIELD_INT, true, 0, 1, 1 << 20, NULL, "embedding width"},
    [POSITION_IN_PLACE] = {"in_place", VP_FIELD_BOOL, false, 0, 0, 1, NULL,
                           "added in place (BERT's embeddings += position_embeddings), not into a new tensor"},
    [POSITION_MODEL_LOCAL] = {"model_local", VP_FIELD_BOOL, false, 1, 0, 1, NULL, MODEL_LOCAL_DOC},
    [POSITION_IDS_BUFFER] = {"ids_buffer", VP_FIELD_BOOL, false, 0, 0, 1, NULL,
                             "the positions are a registered int64 buffer of `positions` ids, sliced per step "
                             "(BertEmbeddings' position_ids): a buffer, and no ids made per step"},
    [POSITION_OFFSET] = {"offset", VP_FIELD_INT, false, 0, 0, 1 << 16, NULL,
                         "rows of the table before the first position (OPT's 2): positions + offset rows"},
    [POSITION_FROM_MASK] = {"from_mask", VP_FIELD_BOOL, false, 0, 0, 1, NULL,
                            "the positions counted from the model's own all-ones attention mask for every "
                            "sequence (OPTDecoder: torch.cumsum of fp32 ones, times them, minus one, as int64): "
                            "[b, s] ids and a [b, s, hidden] lookup, not one row broadcast"},
};

static unsigned position_leaves(const vp_op *op, const vp_ranks *split, vp_leaf_spec *out) {
    (void)split; /* replicated */
    uint64_t rows = vp_op_u64(op, POSITION_POSITIONS) + vp_op_u64(op, POSITION_OFFSET);
    out[0] = vp_param(rows * vp_op_u64(op, POSITION_HIDDEN), "wpe.weight", VP_MODULE_EMBED_POSITIONS, 0);
    out[0].rows = rows;
    /* torch.arange(max_position_embeddings).expand((1, -1)) */
    out[1] = (vp_leaf_spec){.numel = vp_op_flag(op, POSITION_IDS_BUFFER) ? vp_op_u64(op, POSITION_POSITIONS) : 0,
                            .dtype = VP_INT64, .buffer = true, .label = "embeddings.position_ids", .count = 1};
    return 2;
}

/* OPTDecoder.forward (transformers 4.50-4.52) without an attention mask:
 * attention_mask = torch.ones(b, past + s) in fp32 and position_ids =
 * (cumsum(mask) * mask - 1).long() sliced to the sequence, both locals until
 * it returns; OPTLearnedPositionalEmbedding looks up position_ids + offset
 * (a new int64 tensor, which the embedding saves) for every sequence. */
static vp_t positions_from_mask(vp_step *step, const vp_op *op, const vp_t *leaves) {
    vp_sim *sim = &step->sim;
    bool grad_mode = sim->grad_mode;
    uint64_t all = vp_numel(sim, step->batch, step->seq + step->past_tokens);
    uint64_t rows = vp_numel(sim, step->batch, step->seq);
    sim->grad_mode = false;
    vp_t ones = vp_new(sim, all, VP_FP32, "attention_mask.ones");
    vp_t cumsum = vp_new(sim, all, VP_FP32, "position_ids.cumsum");
    vp_t product = vp_new(sim, all, VP_FP32, "position_ids.mul");
    vp_drop(sim, cumsum);
    vp_t shifted = vp_new(sim, all, VP_FP32, "position_ids.sub");
    vp_drop(sim, product);
    vp_t ids = vp_new(sim, all, VP_INT64, "position_ids.long");
    vp_drop(sim, shifted);
    vp_t offset = vp_new(sim, rows, VP_INT64, "position_ids.offset");
    sim->grad_mode = grad_mode;
    vp_step_keep_local(step, ones, VP_LOCAL_OF_BODY);
    vp_step_keep_local(step, ids, VP_LOCAL_OF_BODY);
    vp_drop(sim, ones);
    vp_drop(sim, ids);
    vp_t pe = vp_embedding(sim, offset, leaves[0], rows, vp_op_u64(op, POSITION_HIDDEN), step->recipe->device,
                           "embed_positions");
    vp_drop(sim, offset);
    return pe;
}

/* GPT2Model: position_embeds = self.wpe(position_ids) for one row of
 * positions, broadcast-added to the token embeddings. */
static vp_t position_forward(vp_step *step, const vp_op *op, const vp_t *leaves, vp_t x) {
    vp_sim *sim = &step->sim;
    if (vp_op_flag(op, POSITION_FROM_MASK)) {
        vp_t pe = positions_from_mask(step, op, leaves);
        vp_t y = vp_add(sim, x, pe, vp_at(sim, x)->numel, "embeddings.add");
        if (vp_op_flag(op, POSITION_MODEL_LOCAL)) vp_step_keep_local(step, pe, VP_LOCAL_OF_BODY);
        vp_drop(sim, pe);
        return y;
    }
    if (vp_op_flag(op, POSITION_IDS_BUFFER)) { /* self.position_ids[:, :seq_length]: a view, in place of made ids */
        vp_step_put_tensor(step, VP_TENSOR_POSITION_IDS, 0);
        vp_step_put_tensor(step, VP_TENSOR_POSITION_IDS,
                           vp_view(sim, leaves[1], step->seq, "position_ids (a view of the buffer)"));
    }
    vp_t pe = vp_embedding(sim, vp_step_tensor(step, VP_TENSOR_POSITION_IDS), leaves[0], step->seq,
                           vp_op_u64(op, POSITION_HIDDEN), step->recipe->device, "wpe");
    vp_t y = vp_op_flag(op, POSITION_IN_PLACE) ? vp_attach(sim, x, pe, "embeddings.add_")
                                                : vp_add(sim, x, pe, vp_at(sim, x)->numel, "embeddings.add");
    if (vp_op_flag(op, POSITION_MODEL_LOCAL)) vp_step_keep_local(step, pe, VP_LOCAL_OF_BODY);
    vp_drop(sim, pe);
    return y;
}

/* ---- token types (BERT's segment embedding) ---- */

enum { TYPE_TYPES, TYPE_HIDDEN, TYPE_IDS_BUFFER, TYPE_FIELDS };

static const vp_field type_fields[TYPE_FIELDS] = {
    [TYPE_TYPES] = {"types", VP_FIELD_INT, false, 2, 1, 1 << 16, NULL, "type_vocab_size"},
    [TYPE_HIDDEN] = {"hidden", VP_FIELD_INT, true, 0, 1, 1 << 20, NULL, "embedding width"},
    [TYPE_IDS_BUFFER] = {"ids_buffer", VP_FIELD_INT, false, 0, 0, 1 << 24, NULL,
                         "the token types are a registered int64 buffer of this many zeros, sliced and expanded per "
                         "step (BertEmbeddings' token_type_ids, [1, max_position_embeddings]); 0: none"},
};

static unsigned type_leaves(const vp_op *op, const vp_ranks *split, vp_leaf_spec *out) {
    (void)split; /* replicated */
    out[0] = vp_param(vp_op_u64(op, TYPE_TYPES) * vp_op_u64(op, TYPE_HIDDEN), "token_type_embeddings.weight",
                      VP_MODULE_NONE, 0);
    out[0].rows = vp_op_u64(op, TYPE_TYPES);
    /* torch.zeros(position_ids.size(), dtype=torch.long) */
    out[1] = (vp_leaf_spec){.numel = vp_op_u64(op, TYPE_IDS_BUFFER), .dtype = VP_INT64, .buffer = true,
                            .label = "embeddings.token_type_ids", .count = 1};
    return 2;
}

/* BertEmbeddings: token_type_ids default to the zeros of a registered
 * buffer, expanded to the batch (a view); their embeddings are looked up
 * for every token and added to the word embeddings into a new tensor. */
static vp_t type_forward(vp_step *step, const vp_op *op, const vp_t *leaves, vp_t x) {
    vp_sim *sim = &step->sim;
    /* the ids are a view of a buffer: no memory; the batch's ids stand in */
    vp_t te = vp_embedding(sim, vp_step_input_ids(step), leaves[0], step->input_tokens, vp_op_u64(op, TYPE_HIDDEN),
                           step->recipe->device, "token_type_embeddings");
    vp_t y = vp_add(sim, x, te, vp_at(sim, x)->numel, "embeddings.add");
    vp_drop(sim, te);
    return y;
}

const vp_op_kind vp_op_token_type_embedding = {
    .name = "token_type_embedding",
    .doc = "BERT's token-type (segment) embeddings, looked up for every token and added",
    .fields = type_fields,
    .n_fields = TYPE_FIELDS,
    .leaves = type_leaves,
    .forward = type_forward,
};

/* wpe(position_ids) indexes a table of `positions` rows: a sequence past it
 * (its virtual tokens or prefix included, which shift the positions) makes
 * transformers fail (index out of range), so no estimate stands for it. */
static const char *position_recipe_problem(const vp_model *model, const vp_recipe *recipe) {
    const vp_op *op = vp_section_find(&model->section[VP_SECTION_EMBED], &vp_op_position_embedding);
    if (!op) return NULL;
    uint64_t positions = recipe->seq_len + recipe->virtual_tokens;
    if (positions <= vp_op_u64(op, POSITION_POSITIONS)) return NULL;
    return recipe->virtual_tokens
               ? "seq_len: the tokens and the virtual tokens before them need more positions than the model's "
                 "learned table has (max_positions): transformers cannot run it"
               : "seq_len: longer than the model's learned position table (max_positions): transformers cannot run it";
}

const vp_op_kind vp_op_position_embedding = {
    .name = "position_embedding",
    .doc = "learned absolute positions (GPT-2's wpe), added to the token embeddings",
    .fields = position_fields,
    .n_fields = POSITION_FIELDS,
    .roles = VP_ROLE_EMBEDDING,
    .cost = VP_COST_POSITION_EMBEDDING,
    .leaves = position_leaves,
    .recipe_problem = position_recipe_problem,
    .forward = position_forward,
};

/* ---- rotary tables ---- */

enum { ROTARY_HEAD_DIM, ROTARY_THETA, ROTARY_LOCAL, ROTARY_TABLES, ROTARY_COMPLEX, ROTARY_HALF_TABLES, ROTARY_FIELDS };

static const vp_field rotary_fields[ROTARY_FIELDS] = {
    [ROTARY_HEAD_DIM] = {"head_dim", VP_FIELD_INT, true, 0, 2, 1 << 16, NULL, "rotated dimensions per head"},
    [ROTARY_THETA] = {"theta", VP_FIELD_NUMBER, false, 10000.0, 1.0, HUGE_VAL, NULL, "rope_theta base"},
    [ROTARY_LOCAL] = {"sliding", VP_FIELD_BOOL, false, 0, 0, 1, NULL,
                      "a second pair of tables, kept beside the first for the sliding layers (Gemma 3's "
                      "rotary_emb_local, rope_local_base_freq)"},
    [ROTARY_TABLES] = {"tables", VP_FIELD_BOOL, false, 1, 0, 1, NULL,
                       "the model makes the tables; false: its layers make their own (DeepSeek-V2's modeling code) "
                       "and the model only passes the positions on"},
    [ROTARY_COMPLEX] = {"complex", VP_FIELD_BOOL, false, 0, 0, 1, NULL,
                        "one complex64 table, freqs_cis [1, s, head_dim / 2] (transformers' "
                        "DeepseekV2RotaryEmbedding, 4.54+), instead of cos and sin"},
    [ROTARY_HALF_TABLES] = {"half_tables", VP_FIELD_BOOL, false, 0, 0, 1, NULL,
                            "cos and sin of the frequencies themselves, [s, head_dim / 2] (GptOssRotaryEmbedding, "
                            "transformers 5: emb = freqs, no cat), for rotary_style chunked"},
};

static const char *rotary_check(const vp_op *op) {
    if (vp_op_u64(op, ROTARY_HEAD_DIM) % 2) return "head_dim must be even for rotary embeddings";
    if (vp_op_flag(op, ROTARY_COMPLEX) && (vp_op_flag(op, ROTARY_LOCAL) || !vp_op_flag(op, ROTARY_TABLES)))
        return "complex tables are the model's one pair: not with sliding or tables = false";
    if (vp_op_flag(op, ROTARY_HALF_TABLES) &&
        (vp_op_flag(op, ROTARY_COMPLEX) || vp_op_flag(op, ROTARY_LOCAL) || !vp_op_flag(op, ROTARY_TABLES)))
        return "half_tables are GPT-OSS's one pair: not with complex, sliding or tables = false";
    return NULL;
}

/* inv_freq is a non-persistent fp32 buffer of head_dim/2 entries. */
static unsigned rotary_leaves(const vp_op *op, const vp_ranks *split, vp_leaf_spec *out) {
    unsigned tp = split->tp;
    (void)tp;
    if (!vp_op_flag(op, ROTARY_TABLES)) return 0;
    out[0] = (vp_leaf_spec){.numel = vp_op_u64(op, ROTARY_HEAD_DIM) / 2, .dtype = VP_FP32, .buffer = true,
                            .label = "rotary_emb.inv_freq", .count = 1};
    return 1;
}

/* DeepseekV2RotaryEmbedding.forward of transformers 4.56-4.57
 * (modeling_deepseek_v2.py at commit 03eac6f6d2af7e8562113f0b78d3d2d59a7d843d),
 * without grad and autocast: the positions made fp32 ([1, 1, s]), inv_freq
 * times them (freqs, fp32 [1, d/2, s], transposed: a view),
 * torch.polar(torch.ones_like(freqs), freqs) (complex64 [1, s, d/2]: the
 * bytes of s x d fp32; the ones go), times attention_scaling (a new tensor
 * the name is rebound to); the locals go as it returns. Every layer gets
 * freqs_cis as its position_embeddings. */
static void complex_tables(vp_step *step, const vp_op *op) {
    vp_sim *sim = &step->sim;
    uint64_t d = vp_op_u64(op, ROTARY_HEAD_DIM);
    uint64_t half = vp_numel(sim, step->seq, d / 2), full = vp_numel(sim, step->seq, d);
    vp_t positions = vp_new(sim, step->seq, VP_FP32, "rotary.positions");
    vp_t freqs = vp_new(sim, half, VP_FP32, "rotary.freqs");
    vp_t ones = vp_new(sim, half, VP_FP32, "rotary.ones_like");
    vp_t polar = vp_new(sim, full, VP_FP32, "rotary.freqs_cis");
    vp_drop(sim, ones);
    vp_t freqs_cis = vp_scale(sim, polar, "rotary.freqs_cis");
    vp_drop(sim, polar);
    vp_drop(sim, freqs);
    vp_drop(sim, positions);
    vp_step_put_tensor(step, VP_TENSOR_COS, freqs_cis);
}

/* LlamaRotaryEmbedding.forward runs without grad and with autocast off:
 * freqs = inv_freq @ positions (fp32, s x d/2), emb = cat(freqs, freqs),
 * cos = emb.cos() * scaling, sin likewise, both cast to the activations'
 * dtype. The model keeps cos and sin for every layer's apply_rotary_pos_emb. */
static void rotary_prepare(vp_step *step, const vp_op *op) {
    vp_sim *sim = &step->sim;
    /* LlamaDecoderLayer's call passes position_ids and cache_position: a
     * view and its base, one storage, two saved tensors */
    if (!vp_op_flag(op, ROTARY_TABLES)) {
        vp_step_pass_tensor(step, VP_TENSOR_POSITION_IDS, 2);
        return;
    }
    bool grad_mode = sim->grad_mode;
    sim->grad_mode = false;
    if (vp_op_flag(op, ROTARY_COMPLEX)) {
        complex_tables(step, op);
        vp_step_pass_tensor(step, VP_TENSOR_POSITION_IDS, 2);
        sim->grad_mode = grad_mode;
        return;
    }
    uint64_t d = vp_op_u64(op, ROTARY_HEAD_DIM);
    uint64_t half = vp_numel(sim, step->seq, d / 2), full = vp_numel(sim, step->seq, d);
    vp_t positions = vp_new(sim, step->seq, VP_FP32, "rotary.positions");
    vp_t freqs = vp_new(sim, half, VP_FP32, "rotary.freqs");
    vp_drop(sim, positions);
    /* GPT-OSS: emb = freqs, the same tensor */
    bool halved = vp_op_flag(op, ROTARY_HALF_TABLES);
    vp_t emb = halved ? freqs : vp_new(sim, full, VP_FP32, "rotary.emb");
    if (halved) full = half;
    else vp_drop(sim, freqs);
    vp_t scaled[2], tables[2];
    for (int i = 0; i < 2; i++) {
        vp_t raw = vp_new(sim, full, VP_FP32, "rotary.cos_sin");
        scaled[i] = vp_scale(sim, raw, "rotary.cos_sin");
        vp_drop(sim, raw);
    }
    vp_drop(sim, emb);
    for (int i = 0; i < 2; i++) {
        tables[i] = vp_to(sim, scaled[i], step->activation, "rotary.cos_sin");
        vp_drop(sim, scaled[i]);
    }
    bool local = vp_op_flag(op, ROTARY_LOCAL);
    vp_step_put_tensor(step, local ? VP_TENSOR_COS_LOCAL : VP_TENSOR_COS, tables[0]);
    vp_step_put_tensor(step, local ? VP_TENSOR_SIN_LOCAL : VP_TENSOR_SIN, tables[1]);
    /* LlamaDecoderLayer's call passes position_ids and cache_position: a
     * view and its base, one storage, two saved tensors */
    if (!local) vp_step_pass_tensor(step, VP_TENSOR_POSITION_IDS, 2);
    sim->grad_mode = grad_mode;
}

/* apply_rotary_pos_emb for one of q, k: (x * cos) + (rotate_half(x) * sin),
 * rotate_half(x) = cat((-x2, x1)) of two slices whose backward each
 * allocates a zero-filled full-size gradient (slice_backward). */
vp_t vp_apply_rotary(vp_step *step, vp_t x, const char *label) {
    /* Gemma 3's sliding layers rotate with their own tables (op_sliding_mask.c) */
    bool local = vp_step_tensor(step, VP_TENSOR_LAYER_COS) != 0;
    vp_t cos = vp_step_tensor(step, local ? VP_TENSOR_LAYER_COS : VP_TENSOR_COS);
    vp_t sin = vp_step_tensor(step, local ? VP_TENSOR_LAYER_SIN : VP_TENSOR_SIN);
    return vp_rotate_with(&step->sim, x, cos, sin, label);
}

/* GPT-J's rotate_every_two (torch.stack((-x2, x1), dim=-1).flatten(-2) of
 * strided slices) allocates as rotate_half does: the same ops here. */
vp_t vp_rotate_with(vp_sim *sim, vp_t x, vp_t cos, vp_t sin, const char *label) {
    uint64_t n = vp_at(sim, x)->numel;
    vp_t xc = vp_mul(sim, x, cos, n, label);
    vp_t x1 = vp_slice(sim, x, n / 2, label);
    vp_t x2 = vp_slice(sim, x, n / 2, label);
    vp_t neg = vp_neg(sim, x2, label);
    vp_t rotated = vp_cat(sim, neg, x1, label);
    vp_drop(sim, neg);
    vp_drop(sim, x1);
    vp_drop(sim, x2);
    vp_t rs = vp_mul(sim, rotated, sin, n, label);
    vp_drop(sim, rotated);
    vp_t y = vp_add(sim, xc, rs, n, label);
    vp_drop(sim, xc);
    vp_drop(sim, rs);
    return y;
}

static vp_t rotary_forward(vp_step *step, const vp_op *op, const vp_t *leaves, vp_t x) {
    (void)op;
    (void)leaves;
    vp_hold(&step->sim, x);
    return x;
}

const vp_op_kind vp_op_rotary_embedding = {
    .name = "rotary_embedding",
    .doc = "rotary position tables (cos, sin) computed once per step and used by every attention layer",
    .fields = rotary_fields,
    .n_fields = ROTARY_FIELDS,
    .check = rotary_check,
    .leaves = rotary_leaves,
    .prepare = rotary_prepare,
    .forward = rotary_forward,
};
