-- Cohere (models/c4ai-command-r-*.lua, models/aya-23-8b.lua,
-- models/arch/cohere.lua): its config.json read like the model script, the
-- parameters as CohereForCausalLM's modules hold them, LoRA on named
-- targets (PEFT has no default for cohere) and what the engine does not
-- model. (What CohereLayerNorm, the fp32 interleaved rotary, the q/k norms
-- and the residual's sums keep is checked against PyTorch in
-- tests/torch/compare.py, cases "cohere".)
local helper = require("tests.lua.helper")

describe("Cohere", function()
  it("reads CohereForAI/c4ai-command-r-v01's config.json like the model script it describes", function()
    helper.assert_same_model("tests/fixtures/c4ai-command-r-v01-config.json", "models/c4ai-command-r-v01.lua")
  end)

  it("has the parameters of CohereForCausalLM's modules, as the model cards round them", function()
    -- modeling_cohere.py (transformers 4.5x): per layer q/k/v/o_proj (no
    -- biases), gate/up/down_proj, one CohereLayerNorm (a weight, no bias),
    -- with use_qk_norm q_norm [heads, head_dim] and k_norm [kv heads,
    -- head_dim]; embed_tokens, norm, the head tied to the embeddings
    local function count(h, heads, kv, inter, layers, qk)
      local d = h // heads
      local block = h * (heads + 2 * kv) * d + heads * d * h + 3 * h * inter + h + (qk and (heads + kv) * d or 0)
      return layers * block + 256000 * h + h
    end
    local function params(name) return helper.estimate(name, "--set", "seq_len=128").model.params end
    local r = params("c4ai-command-r-v01")
    assert.are.equal(count(8192, 64, 64, 22528, 40, false), r)
    assert.are.equal(35, math.floor(r / 1e9 + 0.5)) -- "a 35 billion parameter" model
    local plus = params("c4ai-command-r-plus")
    assert.are.equal(count(12288, 96, 8, 33792, 64, true), plus)
    assert.are.equal(104, math.floor(plus / 1e9 + 0.5)) -- "a 104 billion parameter" model
    local aya = params("aya-23-8b")
    assert.are.equal(count(4096, 32, 8, 14336, 32, false), aya)
    assert.are.equal(8, math.floor(aya / 1e9 + 0.5))
  end)

  it("asks for LoRA targets (PEFT has no default for cohere) and takes Cohere's names", function()
    local err = helper.fails("aya-23-8b", "--set", "finetune=lora", "--set", "seq_len=128")
    assert.truthy(err:find("lora_targets", 1, true), err)
    local r = helper.estimate("aya-23-8b", "--set", "finetune=lora", "--set", "lora_rank=8",
      "--set", "lora_targets=q_proj,v_proj,down_proj", "--set", "seq_len=128")
    assert.are.equal(32 * 8 * ((4096 + 4096) + (4096 + 1024) + (14336 + 4096)), r.model.trainable_params)
  end)

  it("refuses what the engine does not model", function()
    local err = helper.fails("c4ai-command-r-plus", "--set", "seq_len=128", "--set", "framework=megatron",
      "--set", "tp=2")
    assert.truthy(err:find("Cohere", 1, true), err)
  end)
end)

-- Cohere2 (models/command-r7b.lua; the cohere family with sliding_pattern):
-- Cohere2ForCausalLM of transformers 015bfeb, models/cohere2/modeling_cohere2.py.
-- (What a sliding layer's mask narrowing keeps is checked against PyTorch in
-- tests/torch/compare.py, cases "cohere2".)
describe("Cohere2", function()
  local TINY = '"model_type": "cohere2", "hidden_size": 64, "num_hidden_layers": 8, "num_attention_heads": 4, ' ..
    '"num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 256'
  local function config(extra)
    local path = helper.write("{" .. TINY .. (extra or "") .. "}", ".json")
    return helper.estimate(path, "--set", "seq_len=64", "--set", "device=cpu", "--set", "attention=eager",
      "--timeline")
  end
  -- the layers whose forward rotates (Cohere2Attention: apply_rotary_pos_emb
  -- only where sliding_window is set) and narrows the mask (Cohere2DecoderLayer)
  local function layers_with(out, prefix)
    local seen, list = {}, {}
    for _, e in ipairs(out.timeline) do
      if e.phase == "forward" and (e.layer or -1) >= 0 and e.op:sub(1, #prefix) == prefix and not seen[e.layer] then
        seen[e.layer] = true
        list[#list + 1] = e.layer
      end
    end
    table.sort(list)
    return table.concat(list, ",")
  end

  it("has the parameters of Cohere2ForCausalLM's modules (Command R7B)", function()
    -- the module printout of CohereForAI/c4ai-command-r7b-12-2024: Embedding(256000,
    -- 4096), 32 Cohere2DecoderLayers of q_proj 4096 -> 4096, k_proj and v_proj
    -- 4096 -> 1024, o_proj 4096 -> 4096, gate/up 4096 -> 14336, down 14336 ->
    -- 4096, one bias-free LayerNorm; the final norm; the head tied
    local h, kv, inter = 4096, 1024, 14336
    local block = h * h + 2 * h * kv + h * h + 3 * h * inter + h
    local r = helper.estimate("command-r7b", "--set", "seq_len=128").model.params
    assert.are.equal(32 * block + 256000 * h + h, r)
    assert.are.equal(8, math.floor(r / 1e9 + 0.5))
  end)

  it("reads sliding_window_pattern, or the pattern layer_types follow, with Cohere2Config's defaults", function()
    -- Cohere2Config: sliding_window 4096, sliding_window_pattern 4: layers 3 and 7 global
    local out = config()
    assert.are.equal("0,1,2,4,5,6", layers_with(out, "cohere_rotary."))
    assert.are.equal("0,1,2,4,5,6", layers_with(out, "sliding_mask."))
    assert.are.equal("0,2,4,6", layers_with(config(', "sliding_window": 16, "sliding_window_pattern": 2'),
      "sliding_mask."))
    local types = {}
    for i = 1, 8 do types[i] = i % 4 == 0 and '"full_attention"' or '"sliding_attention"' end
    out = config(', "sliding_window": 16, "layer_types": [' .. table.concat(types, ",") .. "]")
    assert.are.equal("0,1,2,4,5,6", layers_with(out, "cohere_rotary."))
    -- every layer sliding: no global one
    for i = 1, 8 do types[i] = '"sliding_attention"' end
    assert.are.equal("0,1,2,3,4,5,6,7",
      layers_with(config(', "layer_types": [' .. table.concat(types, ",") .. "]"), "cohere_rotary."))
    -- the same model from its config and from its script
    local script = helper.write("return cohere { name = 'tiny', hidden = 64, layers = 8, heads = 4, kv_heads = 2, " ..
      "intermediate = 128, vocab = 256, max_positions = 8192, sliding_window = 4096, sliding_pattern = 4 }")
    local from_script = helper.estimate(script, "--set", "seq_len=64", "--set", "device=cpu", "--set",
      "attention=eager")
    assert.are.equal(from_script.per_gpu.peak_allocated_bytes, config().per_gpu.peak_allocated_bytes)
  end)

  it("gives the same peak folded and unfolded (the layers repeat by the pattern's period)", function()
    helper.assert_folds_agree(helper.model("command-r7b", 8, { hidden = 256, heads = 4, kv_heads = 2,
      intermediate = 512, vocab = 512, sliding_window = 64 }), {
      { seq_len = 256, attention = "eager" },
      { seq_len = 256, checkpointing = "full" },
      { seq_len = 256, checkpointing = "every-3", precision = "amp-bf16" },
      { seq_len = 256, finetune = "lora", lora_targets = "q_proj,v_proj", attention = "eager" },
    })
  end)

  it("refuses layer types it does not model, a pattern without a window, and q/k norms", function()
    local types = {}
    for i = 1, 8 do types[i] = i == 1 and '"full_attention"' or '"sliding_attention"' end
    helper.assert_config_rejected("{" .. TINY .. ', "layer_types": [' .. table.concat(types, ",") .. "]}",
      "layer_types")
    helper.assert_config_rejected("{" .. TINY .. ', "use_qk_norm": true}', "use_qk_norm")
    local err = helper.fails("command-r7b", "--set", "sliding_window=0", "--set", "seq_len=128")
    assert.truthy(err:find("sliding_pattern", 1, true), err)
  end)
end)
