/* op_router_loss.c — the mixtures' load-balancing loss as transformers
 * 4.46-4.52 adds it when output_router_logits is on (MixtralForCausalLM,
 * Qwen2MoeForCausalLM, Qwen3MoeForCausalLM: load_balancing_loss_func, then
 * `loss += router_aux_loss_coef * aux_loss`). */
#include "framework.h"
#include "ops.h"

enum { AUX_EXPERTS, AUX_TOP_K, AUX_FIELDS };

static const vp_field aux_fields[AUX_FIELDS] = {
    [AUX_EXPERTS] = {"experts", VP_FIELD_INT, true, 0, 1, 1 << 14, NULL, "routed experts (num_experts)"},
    [AUX_TOP_K] = {"top_k", VP_FIELD_INT, true, 0, 1, 1 << 10, NULL, "experts per token (num_experts_per_tok)"},
};

static const char *aux_check(const vp_op *op) {
    if (vp_op_u64(op, AUX_TOP_K) > vp_op_u64(op, AUX_EXPERTS)) return "top_k cannot exceed experts";
    return NULL;
}

/* load_balancing_loss_func without an attention mask, over the n rows of
 * every layer's router logits together (n = layers x tokens):
 *   concatenated = torch.cat(gate_logits, dim=0)                [n, E]
 *   routing_weights = softmax(concatenated, dim=-1)             fp32 under autocast, kept
 *   _, selected = torch.topk(routing_weights, k)                [n, k] values and int64 indices
 *   expert_mask = one_hot(selected, E)                          int64 [n, k, E]
 *   tokens_per_expert = mean(expert_mask.float(), dim=0)        an fp32 copy, then [k, E]
 *   router_prob = mean(routing_weights, dim=0)                  [E]
 *   loss = sum(tokens_per_expert * router_prob.unsqueeze(0)) * E
 * Every name is a local until the function returns; topk's node dies with
 * its values (nothing reaches them), so the indices it saved go then too
 * (save_on_cpu has packed them meanwhile). The
 * caller adds coef * loss to the language-model loss in place. Takes x
 * (that loss) and returns the sum, a view of it. */
static vp_t aux_forward(vp_step *step, const vp_op *op, const vp_t *leaves, vp_t x) {
    (void)leaves;
    vp_sim *sim = &step->sim;
    const vp_router_logits *r = &step->router_logits;
    if (!r->n) {
        vp_hold(sim, x);
        return x;
    }
    uint64_t experts = vp_op_u64(op, AUX_EXPERTS), k = vp_op_u64(op, AUX_TOP_K);
    vp_t cat = vp_cat_many(sim, r->tensors, r->n, "router_aux.cat");
    uint64_t rows = vp_at(sim, cat)->numel / experts;
    /* softmax is on autocast's fp32 list */
    vp_t up = vp_autocast_fp32(step, cat, "router_aux.softmax");
    vp_t weights = vp_unary(sim, up, VP_SAVES_OUTPUT, 0, (vp_dtype)vp_at(sim, up)->dtype, "router_aux.softmax");
    vp_drop(sim, up);
    uint32_t topk_node = sim->n_nodes;
    vp_t selected;
    vp_t values = vp_topk(sim, weights, vp_numel(sim, rows, k), &selected, "router_aux.topk");
    bool topk_recorded = sim->n_nodes > topk_node;
    vp_t mask = vp_new(sim, vp_numel3(sim, rows, k, experts), VP_INT64, "router_aux.one_hot");
    vp_t mask32 = vp_new(sim, vp_numel3(sim, rows, k, experts), VP_FP32, "router_aux.mask_float");
    vp_t tokens_per_expert = vp_new(sim, vp_numel(sim, k, experts), VP_FP32, "router_aux.tokens_per_expert");
    vp_drop(sim, mask32);
    vp_t prob = vp_reduce(sim, weights, experts, "router_aux.router_prob");
    vp_t product = vp_mul(sim, tokens_per_expert, prob, vp_numel(sim, k, experts), "router_aux.product");
    vp_t sum = vp_sum(sim, product, 1, "router_aux.sum");
    vp_drop(sim, product); /* a temporary of the expression */
    vp_t aux = vp_scale(sim, sum, "router_aux.num_experts");
    vp_t locals[] = {cat, weights, values, selected, mask, tokens_per_expert, prob, sum};
    for (unsigned i = 0; i < sizeof locals / sizeof *locals; i++) vp_drop(sim, locals[i]);
    if (topk_recorded) vp_drop_dead_nodes(sim, topk_node, topk_node + 1); /* with the indices it saved (and packed) */
    /* loss += self.router_aux_loss_coef * aux_loss.to(loss.device) */
    vp_t scaled = vp_scale(sim, aux, "router_aux.coef");
    vp_drop(sim, aux);
    vp_t loss = vp_add_(sim, x, scaled, "router_aux.add");
    vp_drop(sim, scaled);
    return loss;
}

static const char *aux_recipe_problem(const vp_model *model, const vp_recipe *recipe) {
    (void)model; /* asked only of a model that has the loss */
    if (!vp_framework_of(recipe)->hf_modeling || recipe->pp > 1)
        return "framework: the router's load-balancing loss (output_router_logits) is modelled as transformers "
               "computes it (no megatron, no pp)";
    /* a checkpointed chunk returns its layers' router logits beside the
     * hidden states, one output each */
    if (recipe->checkpoint_every > VP_CHUNK_ROUTER_MAX || recipe->selective)
        return "checkpointing: with output_router_logits, full or every-K up to every-8 (a checkpointed chunk "
               "returns each layer's router logits)";
    return NULL;
}

static void aux_facts(const vp_op *op, vp_section_id section, vp_model_facts *facts) {
    (void)op;
    if (section == VP_SECTION_FINAL) facts->router_aux_loss = true;
}

const vp_op_kind vp_op_router_aux_loss = {
    .name = "router_aux_loss",
    .doc = "the mixtures' load-balancing loss over every layer's router logits (output_router_logits), added to "
           "the language-model loss",
    .fields = aux_fields,
    .n_fields = AUX_FIELDS,
    .roles = VP_ROLE_HEAD | VP_ROLE_LOSS,
    .facts = aux_facts,
    .recipe_problem = aux_recipe_problem,
    .check = aux_check,
    .forward = aux_forward,
};
