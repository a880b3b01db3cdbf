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
    helper.assert_config_rejected('{"model_type": "cohere2", "hidden_size": 64, "num_hidden_layers": 2, ' ..
      '"num_attention_heads": 4, "vocab_size": 256}', "model_type")
  end)
end)
