/* op_list.h — every op kind the core knows, once, in the registry's order
 * (the order `vramplan keys` lists them). An X-macro list: a file that
 * includes it defines VP_OP(name) first, for the kind object vp_op_<name>
 * that the kind's own file defines. Adding a plain op is its file plus one
 * line here; the Makefile picks the file up by its wildcard. */
VP_OP(token_embedding)
VP_OP(position_embedding)
VP_OP(rotary_embedding)
VP_OP(token_type_embedding)
VP_OP(dropout)
VP_OP(scale)
VP_OP(layernorm)
VP_OP(rmsnorm)
VP_OP(attention)
VP_OP(mlp)
VP_OP(moe)
VP_OP(residual)
VP_OP(lm_head)
VP_OP(cross_entropy)
VP_OP(pooler)
VP_OP(classifier)
VP_OP(position_bias)
VP_OP(decoder_start)
VP_OP(sliding_mask)
VP_OP(sequence)
VP_OP(parallel)
VP_OP(router_aux_loss)
VP_OP(fp16_clamp)
VP_OP(block)
