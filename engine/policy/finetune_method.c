/* finetune_method.c — the fine-tuning methods, one entry each: full
 * fine-tuning, PEFT's LoRA, QLoRA (LoRA over a bitsandbytes base), prefix
 * and prompt tuning, and freezing the first layers. Adding a method is
 * one entry here (and its name in vp_finetune, recipe.h). */
#include "finetune_method.h"

#include "framework.h"
#include "prefix_table.h"

unsigned vp_prompt_submodules(const vp_model *model) { return vp_model_encoder_decoder(model) ? 2 : 1; }

/* PromptEmbedding: num_virtual_tokens x submodules x hidden */
static uint64_t prompt_table(const vp_model *model, const vp_recipe *recipe) {
    return (uint64_t)recipe->virtual_tokens * vp_prompt_submodules(model) * model->facts.hidden;
}

/* PrefixEncoder: num_virtual_tokens x 2 x layers x kv width */
static uint64_t prefix_table(const vp_model *model, const vp_recipe *recipe) {
    return (uint64_t)recipe->virtual_tokens * vp_prefix_table_width(model);
}

static const char *prefix_problem(const vp_model *model, const vp_recipe *recipe) {
    if (!recipe->virtual_tokens) return "num_virtual_tokens: prefix tuning needs at least one virtual token";
    /* PeftModel._setup_prompt_encoder refuses it: the cache and
     * recomputation do not mix */
    if (recipe->checkpoint_every || recipe->selective)
        return "checkpointing: PEFT's prefix tuning does not work with gradient checkpointing";
    if (recipe->cp > 1 || recipe->tp > 1 || recipe->pp > 1 || !vp_framework_of(recipe)->hf_modeling)
        return "finetune: prefix tuning runs as PEFT does, without tp, pp or cp";
    if (model && !model->facts.lm_head)
        return "finetune: prefix tuning is modelled for causal language models (PeftModelForCausalLM)";
    return NULL;
}

static const char *prompt_problem(const vp_model *model, const vp_recipe *recipe) {
    (void)model;
    if (!recipe->virtual_tokens) return "num_virtual_tokens: prompt tuning needs at least one virtual token";
    if (recipe->cp > 1 || recipe->tp > 1) return "finetune: prompt tuning runs as PEFT does, without tp or cp";
    return NULL;
}

static const char *qlora_problem(const vp_model *model, const vp_recipe *recipe) {
    (void)model;
    /* FSDP and ZeRO-3 shard float storage: bitsandbytes' 4-bit weights
     * get it with bnb_4bit_quant_storage; Int8Params have none */
    const vp_framework_kind *framework = vp_framework_of(recipe);
    bool sharded = framework->shards_params && framework->shards_params(recipe);
    if (sharded && recipe->quant == VP_QUANT_INT8)
        return "quant: int8 weights cannot be sharded by FSDP or ZeRO-3 (bnb_4bit_quant_storage is for 4-bit weights)";
    if (recipe->offload_params && !sharded)
        return "offload_params: a quantized base is offloaded by FSDP or ZeRO-3 (framework fsdp, or zero = 3)";
    return NULL;
}

/* Hugging Face PEFT's methods (peft/tuners: lora, prefix_tuning,
 * prompt_tuning); QLoRA as Dettmers et al. 2023 run it (LoRA over
 * bitsandbytes' quantized base); freeze trains the last trainable_layers
 * layers with the final norm and head. */
static const vp_finetune_method methods[VP_FINETUNE_COUNT] = {
    [VP_FINETUNE_FULL] = {.name = "full"},
    [VP_FINETUNE_LORA] = {.name = "lora", .peft = true, .frozen_base = true, .adapts_linear = true},
    [VP_FINETUNE_QLORA] = {.name = "qlora", .peft = true, .frozen_base = true, .adapts_linear = true,
                           .quantizes_base = true, .problem = qlora_problem},
    [VP_FINETUNE_PREFIX] = {.name = "prefix", .peft = true, .frozen_base = true,
                            .virtual_tokens = VP_VIRTUAL_PREFIX, .leaves = prefix_table, .problem = prefix_problem,
                            .encoder_decoder_problem = vp_prefix_recipe_problem},
    [VP_FINETUNE_PROMPT] = {.name = "prompt", .peft = true, .frozen_base = true,
                            .virtual_tokens = VP_VIRTUAL_PROMPT, .leaves = prompt_table, .problem = prompt_problem},
    [VP_FINETUNE_FREEZE] = {.name = "freeze", .frozen_base = true, .trains_last_layers = true},
};

const vp_finetune_method *vp_finetune_method_at(unsigned index) {
    return index < VP_FINETUNE_COUNT ? &methods[index] : NULL;
}

const vp_finetune_method *vp_finetune_method_of(const vp_recipe *recipe) { return &methods[recipe->finetune]; }
