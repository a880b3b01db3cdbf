-- LLaMA's attention with eager_attention_forward written out (transformers
-- 4.48-4.52 modeling_llama.py) and PaliGemma's prefix-LM mask in place of
-- the causal one (F.mask("prefix"): PaliGemmaModel._update_causal_mask in
-- training, transformers 4.50-4.52), for the llama family (lua_blocks =
-- "prefix_lm"): compare.py's prefix-LM cases, mirrored by
-- tests/torch/models/llama.py's prefix_lm_mask. The rest of the layer is
-- the core's.
local llama_layers = library "llama_layers"
return {
  build = function(c)
    local function attention()
      return llama_layers.attention(c, llama_layers.eager_attention(c, "prefix"))
    end
    return { attention = attention }
  end,
}
