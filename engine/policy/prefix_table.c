/* prefix_table.c — the size of PEFT's prefix table and the models prefix
 * tuning cannot run on (peft/tuners/prefix_tuning, PEFT 0.14+). */
#include "prefix_table.h"

/* The layers that get a prefix: every layer, or an encoder-decoder's
 * decoder layers (num_layers of T5's config, its encoder's count, which
 * vp_prefix_recipe_problem makes the decoder's too). */
static unsigned prefixed_layers(const vp_model *model) {
    return vp_model_encoder_decoder(model) ? model->layers - model->first_layers : model->layers;
}

/* PrefixTuningConfig after _prepare_prompt_learning_config: token_dim is
 * the hidden size, cut to the key/value heads for grouped-query attention
 * (PEFT #1901), T5's d_model; the table is num_layers * 2 * token_dim wide. */
uint64_t vp_prefix_table_width(const vp_model *model) {
    return model->facts.attention ? 2 * (uint64_t)prefixed_layers(model) * model->facts.kv_width : 0;
}

const char *vp_prefix_recipe_problem(const vp_model *model) {
    if (!vp_model_encoder_decoder(model)) return NULL;
    /* get_prompt views each token's d_model values as num_heads rows of
     * d_model / num_heads, which torch.cat joins to keys d_kv wide */
    if (!model->facts.attention || !model->facts.splits_hidden)
        return "finetune: PEFT's prefix splits d_model over the heads, which must give T5's d_kv (d_model = "
               "num_heads x d_kv, which t5-3b and t5-11b are not)";
    if (model->first_layers * 2 != model->layers)
        return "finetune: PEFT's prefix has num_layers (the encoder's) layers, which must be the decoder's too";
    return NULL;
}
