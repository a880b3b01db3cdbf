/* step_tensors.h — the tensors a model's forward makes once and its ops
 * share: rotary tables, masks, ALiBi, T5's stack state, PEFT's prompt mask
 * and labels, the outputs. One slot each, declared here once: the op that
 * makes one puts it in its slot (vp_step_put_tensor, op_context.h), the ops
 * that read it find it there, and the step drops it when its frame returns
 * (vp_lifetime), in the order of this list, so the driver names none of
 * them.
 *
 * X(SLOT, lifetime, call role, argument, passes):
 *  - lifetime: the frame whose return drops it (op_context.h's vp_lifetime);
 *  - call role and argument: what a checkpointed chunk's layer call does
 *    with it (vp_call_role) and its place among the call's arguments, which
 *    orders them: BloomBlock(hidden_states, alibi, attention_mask, ...),
 *    LlamaDecoderLayer(hidden_states, attention_mask, position_ids, ...,
 *    cache_position, position_embeddings) and T5Block(hidden_states,
 *    attention_mask, position_bias, encoder_hidden_states,
 *    encoder_attention_mask, encoder_decoder_position_bias, ...,
 *    cache_position) in transformers 4.46-4.52;
 *  - passes: how many of the call's arguments it is, unless the op that
 *    makes the call's convention says otherwise (vp_step_pass_tensor). */
#ifndef VP_STEP_TENSORS_H
#define VP_STEP_TENSORS_H

/* The slots, in the order they go:
 *  - POSITION_IDS: made by the step, or a view of the position buffer
 *    (GPT-2, BERT); LLaMA's layer call passes it twice, as position_ids and
 *    cache_position (a view and its base), T5's once (cache_position);
 *  - COS, SIN (and Gemma 3's sliding layers' COS_LOCAL, SIN_LOCAL): the
 *    rotary tables, the position_embeddings tuple the call's ctx holds as
 *    it is;
 *  - CAUSAL_MASK: the model's 4-D mask, with its row length
 *    (vp_step_tensor_columns); SLIDING_MASK: the second one of a model
 *    that makes both (GPT-OSS's causal_mask_mapping: a layer is passed one
 *    of the two, of one size, so CAUSAL_MASK's role speaks for it); ALIBI:
 *    BLOOM's [b x heads, 1, s] bias;
 *  - MEMORY: T5's encoder output, which cross-attention reads;
 *  - PROMPT_MASK: PEFT's attention mask with the virtual tokens' ones;
 *  - POSITION_BIAS, CROSS_BIAS, SELF_MASK, CROSS_MASK: T5Stack's loop
 *    variables and masks; each block takes the biases and returns them;
 *  - LAYER_MASK, LAYER_COS, LAYER_SIN: the running layer's own, lent (its
 *    locals keep them): Gemma 2's sliding-window mask, Gemma 3's sliding
 *    layers' rotary tables;
 *  - PROMPT_LABELS: PEFT's labels with -100 for the virtual tokens;
 *  - LOGITS, ENCODER_OUTPUT: what the model's outputs keep (T5's
 *    encoder_last_hidden_state) until `out = model(batch)` rebinds;
 *  - ENCODER_POSITION_TABLE, DECODER_POSITION_TABLE: T5's relative position
 *    tables, lent leaves (the encoder's buckets are bidirectional);
 *  - BRANCH_INPUT, SHIFTED_EMBEDDINGS, BRANCH_LABELS: what a branch
 *    (op_branch.c: a multi-token prediction module) lends its ops while it
 *    runs: the hidden states it took, the shared embedding of the tokens k
 *    ahead, the labels k ahead that its loss reads; it empties them
 *    itself;
 *  - BRANCH_OUTPUT: a branch's last hidden states, which the next branch
 *    (chain = true: the next MTP depth) takes in place of the stream;
 *  - BRANCH_LOSS: the branches' loss (their sum with several), until the
 *    step adds it to the main loss (vp_branch_join_loss). */
#define VP_STEP_TENSORS(X)                      \
    X(POSITION_IDS, BODY, SAVED, 7, 0)          \
    X(COS, BODY, HELD, 8, 1)                    \
    X(SIN, BODY, HELD, 8, 1)                    \
    X(COS_LOCAL, BODY, HELD, 8, 1)              \
    X(SIN_LOCAL, BODY, HELD, 8, 1)              \
    X(CAUSAL_MASK, BODY, SAVED, 2, 1)           \
    X(SLIDING_MASK, BODY, NONE, 0, 0)           \
    X(ALIBI, BODY, SAVED, 1, 1)                 \
    X(MEMORY, BODY, INPUT, 4, 1)                \
    X(PROMPT_MASK, BODY, NONE, 0, 0)            \
    X(POSITION_BIAS, STACK, RETURNED, 3, 0)     \
    X(CROSS_BIAS, STACK, RETURNED, 6, 0)        \
    X(SELF_MASK, STACK, SAVED, 2, 1)            \
    X(CROSS_MASK, STACK, SAVED, 5, 1)           \
    X(LAYER_MASK, LAYER, NONE, 0, 0)            \
    X(LAYER_COS, LAYER, NONE, 0, 0)             \
    X(LAYER_SIN, LAYER, NONE, 0, 0)             \
    X(PROMPT_LABELS, WRAPPER, NONE, 0, 0)       \
    X(LOGITS, OUTPUTS, NONE, 0, 0)              \
    X(ENCODER_OUTPUT, OUTPUTS, NONE, 0, 0)      \
    X(ENCODER_POSITION_TABLE, STEP, NONE, 0, 0) \
    X(DECODER_POSITION_TABLE, STEP, NONE, 0, 0) \
    X(BRANCH_INPUT, BODY, NONE, 0, 0)           \
    X(SHIFTED_EMBEDDINGS, BODY, NONE, 0, 0)     \
    X(BRANCH_LABELS, BODY, NONE, 0, 0)          \
    X(BRANCH_OUTPUT, BODY, NONE, 0, 0)          \
    X(BRANCH_LOSS, WRAPPER, NONE, 0, 0)

#endif
