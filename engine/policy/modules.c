/* modules.c — module names for fine-tuning recipes. */
#include "modules.h"

#include <stdio.h>
#include <string.h>

const char *const vp_module_names[VP_MODULE_COUNT + 1] = {
    [VP_MODULE_NONE] = "none",
    [VP_MODULE_Q_PROJ] = "q_proj",
    [VP_MODULE_K_PROJ] = "k_proj",
    [VP_MODULE_V_PROJ] = "v_proj",
    [VP_MODULE_O_PROJ] = "o_proj",
    [VP_MODULE_C_ATTN] = "c_attn",
    [VP_MODULE_C_PROJ] = "c_proj",
    [VP_MODULE_C_FC] = "c_fc",
    [VP_MODULE_GATE_PROJ] = "gate_proj",
    [VP_MODULE_UP_PROJ] = "up_proj",
    [VP_MODULE_DOWN_PROJ] = "down_proj",
    [VP_MODULE_W1] = "w1",
    [VP_MODULE_W2] = "w2",
    [VP_MODULE_W3] = "w3",
    [VP_MODULE_GATE] = "gate",
    [VP_MODULE_Q_A_PROJ] = "q_a_proj",
    [VP_MODULE_Q_B_PROJ] = "q_b_proj",
    [VP_MODULE_KV_A_PROJ] = "kv_a_proj_with_mqa",
    [VP_MODULE_KV_B_PROJ] = "kv_b_proj",
    [VP_MODULE_QUERY_KEY_VALUE] = "query_key_value",
    [VP_MODULE_DENSE] = "dense",
    [VP_MODULE_DENSE_H_TO_4H] = "dense_h_to_4h",
    [VP_MODULE_DENSE_4H_TO_H] = "dense_4h_to_h",
    [VP_MODULE_Q] = "q",
    [VP_MODULE_K] = "k",
    [VP_MODULE_V] = "v",
    [VP_MODULE_O] = "o",
    [VP_MODULE_WI] = "wi",
    [VP_MODULE_WO] = "wo",
    [VP_MODULE_WI_0] = "wi_0",
    [VP_MODULE_WI_1] = "wi_1",
    [VP_MODULE_QKV_PROJ] = "qkv_proj",
    [VP_MODULE_GATE_UP_PROJ] = "gate_up_proj",
    [VP_MODULE_FC1] = "fc1",
    [VP_MODULE_FC2] = "fc2",
    [VP_MODULE_QUERY] = "query",
    [VP_MODULE_KEY] = "key",
    [VP_MODULE_VALUE] = "value",
    [VP_MODULE_WQKV] = "Wqkv",
    [VP_MODULE_IN_PROJ] = "in_proj",
    [VP_MODULE_X_PROJ] = "x_proj",
    [VP_MODULE_DT_PROJ] = "dt_proj",
    [VP_MODULE_SHARED_EXPERT_GATE] = "shared_expert_gate",
    [VP_MODULE_LM_HEAD] = "lm_head",
    [VP_MODULE_CLASSIFIER] = "classifier",
    [VP_MODULE_EMBED_TOKENS] = "embed_tokens",
    [VP_MODULE_EMBED_POSITIONS] = "embed_positions",
    [VP_MODULE_NORM] = "norm",
    [VP_MODULE_COUNT] = NULL,
};

vp_module_set vp_module_all_linear(void) {
    vp_module_set set = 0;
    for (int m = VP_MODULE_Q_PROJ; m <= VP_MODULE_LAST_LINEAR; m++) set |= vp_module_bit((vp_module)m);
    return set | vp_module_bit(VP_MODULE_NONE);
}

/* GPT-2's and GPT-NeoX's own names for their embeddings and head, and
 * OPT's for its attention's output projection, accepted beside the generic
 * ones */
static vp_module alias(const char *name, size_t len) {
    if (len == 8 && strncmp(name, "out_proj", 8) == 0) return VP_MODULE_O_PROJ;
    if (len == 3 && strncmp(name, "wte", 3) == 0) return VP_MODULE_EMBED_TOKENS;
    if (len == 3 && strncmp(name, "wpe", 3) == 0) return VP_MODULE_EMBED_POSITIONS;
    /* GPT-J's MLP */
    if (len == 5 && strncmp(name, "fc_in", 5) == 0) return VP_MODULE_FC1;
    if (len == 6 && strncmp(name, "fc_out", 6) == 0) return VP_MODULE_FC2;
    if (len == 8 && strncmp(name, "embed_in", 8) == 0) return VP_MODULE_EMBED_TOKENS;
    if (len == 9 && strncmp(name, "embed_out", 9) == 0) return VP_MODULE_LM_HEAD;
    for (int m = VP_MODULE_Q_PROJ; m < VP_MODULE_COUNT; m++)
        if (strlen(vp_module_names[m]) == len && strncmp(vp_module_names[m], name, len) == 0) return (vp_module)m;
    return VP_MODULE_NONE;
}

vp_module vp_module_find(const char *name) { return alias(name, strlen(name)); }

bool vp_module_parse(const char *text, vp_module_set *out, const char **bad, unsigned *bad_len) {
    return vp_module_parse_open(text, out, bad, bad_len, NULL, NULL);
}

bool vp_module_parse_open(const char *text, vp_module_set *out, const char **bad, unsigned *bad_len,
                          bool (*other)(void *ctx, const char *name, unsigned len), void *ctx) {
    vp_module_set set = 0;
    const char *p = text;
    while (*p) {
        while (*p == ' ' || *p == ',') p++;
        const char *start = p;
        while (*p && *p != ',' && *p != ' ') p++;
        size_t len = (size_t)(p - start);
        if (!len) continue;
        if (len == 10 && strncmp(start, "all-linear", len) == 0) {
            set |= vp_module_all_linear();
            continue;
        }
        vp_module m = alias(start, len);
        if (m == VP_MODULE_NONE && other && other(ctx, start, (unsigned)len)) continue;
        if (m == VP_MODULE_NONE) {
            *bad = start;
            *bad_len = (unsigned)len;
            return false;
        }
        set |= vp_module_bit(m);
    }
    *out = set;
    return true;
}

void vp_module_format(vp_module_set set, char *out, unsigned size) {
    unsigned used = 0;
    if (size) out[0] = '\0';
    for (int m = VP_MODULE_Q_PROJ; m < VP_MODULE_COUNT && size; m++) {
        if (!vp_module_in(set, (vp_module)m)) continue;
        int n = snprintf(out + used, size - used, "%s%s", used ? "," : "", vp_module_names[m]);
        if (n < 0 || (unsigned)n >= size - used) return;
        used += (unsigned)n;
    }
}
