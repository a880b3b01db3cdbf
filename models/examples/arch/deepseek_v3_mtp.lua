-- DeepSeek-V3 (DeepSeek-AI 2024, arXiv 2412.19437) with its multi-token
-- prediction (MTP) modules, section 2.2: for depth k,
--   h'_i = M_k [RMSNorm(h_i^{k-1}); RMSNorm(Emb(t_{i+k}))]   (eq. 21)
--   h_i^k = TRM_k(h'_i)                                       (eq. 22)
--   P^k = OutHead(h_i^k), L^k_MTP = CrossEntropy(P^k, t_{i+k+1})
--   L = L_Main + lambda / D * sum_k L^k_MTP                   (eqs. 24-25)
-- with the embedding and the output head shared with the main model. The
-- main model is transformers' DeepseekV3ForCausalLM (the built-in
-- deepseek_v3: the same ops, models/arch/llama.lua's layer with
-- moe_block deepseek_v3; tests/lua/mtp_spec.lua holds the two byte for
-- byte); the MTP module is a branch { } at the head of the final ops, on
-- the last layer's output before the final norm. Its combining step is a
-- Lua block that names a second input: the shared embedding of the tokens
-- k ahead (inputs = { "shifted_embeddings" }), which the branch makes.
-- The module's parts and names are the checkpoint's (model.layers.61.*:
-- enorm, hnorm, eh_proj, a decoder layer with routed experts, and
-- shared_head.norm; shared_head.head and embed_tokens repeat the main
-- model's weights and are shared here, as in training). Not a published
-- training implementation (DeepSeek's is not public): the embeddings
-- first in the concatenation and the tokens rolled (the sequence keeps its
-- length) as Megatron-LM's MTP does it (megatron/core/transformer/
-- multi_token_prediction.py: _get_embeddings rolls input_ids by -1,
-- _concat_embeddings cats (enorm(decoder_input), hnorm(hidden_states));
-- its recompute of the MTP layer is not modelled: the layer is not
-- checkpointed here); which hidden states it takes (the last layer's,
-- before the final norm) is this model's choice, as the report's eq. 21
-- does not say. The same module is written plainly in PyTorch in
-- tests/torch/models/mtp.py and compared (compare.py "deepseek-v3 mtp").
local llama_layers = library "llama_layers"
return architecture {
  name = "deepseek_v3_mtp",
  doc = "DeepSeek-V3 (transformers' DeepseekV3ForCausalLM) with its multi-token prediction modules as a branch",
  fields = {
    { "hidden", "int", doc = "hidden_size" },
    { "layers", "int", max = 10000, doc = "num_hidden_layers (the main model's)" },
    { "heads", "int", doc = "num_attention_heads" },
    { "intermediate", "int", doc = "intermediate_size of the dense layers' MLP" },
    { "vocab", "int", doc = "vocab_size" },
    { "max_positions", "int", default = 163840, doc = "max_position_embeddings (no memory of its own)" },
    { "rope_theta", "number", default = 10000.0, min = 1, doc = "rope_theta" },
    { "norm_eps", "number", default = 1e-6, min = 0, doc = "rms_norm_eps" },
    { "experts", "int", doc = "n_routed_experts" },
    { "experts_per_token", "int", doc = "num_experts_per_tok" },
    { "moe_intermediate", "int", doc = "moe_intermediate_size" },
    { "shared_intermediate", "int", default = 0, min = 0, doc = "n_shared_experts x moe_intermediate_size" },
    { "dense_layers", "int", default = 0, min = 0, doc = "first_k_dense_replace" },
    { "expert_groups", "int", default = 1, min = 1, doc = "n_group" },
    { "topk_groups", "int", default = 1, min = 1, doc = "topk_group" },
    { "q_lora_rank", "int", default = 0, min = 0, doc = "q_lora_rank (0: a plain q_proj)" },
    { "kv_lora_rank", "int", doc = "kv_lora_rank" },
    { "qk_nope_head_dim", "int", doc = "qk_nope_head_dim" },
    { "qk_rope_head_dim", "int", doc = "qk_rope_head_dim" },
    { "v_head_dim", "int", doc = "v_head_dim" },
    { "rope_interleave", "bool", default = true, doc = "rope_interleave" },
    { "mtp_depth", "int", default = 1, min = 0, max = 8,
      doc = "num_nextn_predict_layers: MTP modules, D (DeepSeek-V3 trains and publishes one; the report's "
        .. "section 2.2 allows D sequential ones; 0: the main model alone)" },
    { "mtp_lambda", "number", default = 0.3, min = 0,
      doc = "the MTP loss weight lambda (0.3 for the first 10T tokens, then 0.1: arXiv 2412.19437 section 4.2)" },
  },
  build = function(c)
    local function norm() return rmsnorm { hidden = c.hidden, eps = c.norm_eps, style = "llama" } end
    local function attention_op(caches)
      return attention {
        hidden = c.hidden, heads = c.heads, kv_heads = c.heads, head_dim = c.hidden // c.heads, rotary = true,
        upcast_softmax = true, caches = caches, keeps_weights = true, mask = "additive",
        q_lora_rank = c.q_lora_rank, kv_lora_rank = c.kv_lora_rank, qk_nope_head_dim = c.qk_nope_head_dim,
        qk_rope_head_dim = c.qk_rope_head_dim, v_head_dim = c.v_head_dim, rope_interleave = c.rope_interleave,
        peft_defaults = false,
      }
    end
    local function experts()
      return moe { hidden = c.hidden, intermediate = c.moe_intermediate, experts = c.experts,
                   top_k = c.experts_per_token, shared_intermediate = c.shared_intermediate, shared_gate = false,
                   norm_topk = true, block = "deepseek_v3", groups = c.expert_groups, topk_groups = c.topk_groups,
                   expert_names = "proj" }
    end
    local function dense()
      return mlp { hidden = c.hidden, intermediate = c.intermediate, activation = "silu", gated = true }
    end
    -- DeepseekV3DecoderLayer: pre-norm attention and feed-forward
    local function layer(feed_forward, caches)
      return { residual { norm(), attention_op(caches) }, residual { norm(), feed_forward } }
    end
    -- LlamaRMSNorm.forward written with the vocabulary (models/lib/llama_layers.lua, as
    -- models/blocks/llama.lua's rmsnorm labels it), a frame of its own (F.call)
    local function rms(x, weight)
      return llama_layers.rms_norm(x, weight, c.norm_eps, llama_layers.rms_norm_labels)
    end
    -- eq. 21: h' = eh_proj(cat(enorm(Emb(t_{i+k})), hnorm(h^{k-1}))); the branch lends the shifted
    -- embeddings, the block takes them as its second input
    local function combine(k) return block {
      name = k == 1 and "mtp" or "mtp" .. k,
      width = c.hidden,
      inputs = { "shifted_embeddings" },
      params = {
        { "enorm", size = c.hidden, module = "norm" },
        { "hnorm", size = c.hidden, module = "norm" },
        { "eh_proj", linear = { 2 * c.hidden, c.hidden } },
      },
      forward = function(h, p, embeds)
        local e = F.call(rms, embeds, p.enorm)
        local hn = F.call(rms, h, p.hnorm)
        return p.eh_proj(F.cat({ e, hn }, -1))
      end,
    } end
    local final = {}
    -- depth k: the module's decoder layer has routed experts (the checkpoint's
    -- model.layers.61.mlp.experts) and, in training, no key/value cache; then its own norm
    -- (shared_head.norm) before the shared head. Depth k > 1 takes depth k - 1's output
    -- after that norm (chain) and the tokens k ahead; the losses are summed and added
    -- times lambda / D (eq. 25; Megatron-LM's mtp_loss_scaling_factor / mtp_num_layers)
    for k = 1, c.mtp_depth do
      local ops = { combine(k) }
      for _, op in ipairs(layer(experts(), false)) do ops[#ops + 1] = op end
      ops[#ops + 1] = norm()
      ops.shift, ops.loss_weight, ops.layer_first, ops.layer_ops = k, c.mtp_lambda / c.mtp_depth, 2, 2
      ops.chain = k > 1
      final[k] = branch(ops)
    end
    final[#final + 1] = norm()
    final[#final + 1] = lm_head { vocab = c.vocab, hidden = c.hidden }
    final[#final + 1] = cross_entropy {}
    return decoder {
      norms_registered = "last",
      embed = {
        token_embedding { vocab = c.vocab, hidden = c.hidden, model_local = true },
        rotary_embedding { head_dim = c.qk_rope_head_dim, theta = c.rope_theta, tables = true },
      },
      first_layer = c.dense_layers > 0 and layer(dense(), true) or nil,
      first_layers = c.dense_layers,
      layer = layer(experts(), true),
      layers = c.layers,
      final = final,
    }
  end,
}
