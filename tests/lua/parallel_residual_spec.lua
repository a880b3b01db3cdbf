-- GPT-NeoX (models/pythia-*.lua) and Phi-2 (models/phi-2.lua): attention and
-- MLP side by side on the layer's input. config.json files read like the
-- model scripts, PEFT's LoRA sees the modules these models name, and what
-- the parallel layout changes from the sequential one, from transformers'
-- code (GPTNeoXLayer, PhiDecoderLayer, 4.50-4.52). The whole step is
-- checked against PyTorch in tests/torch/compare.py; the parameter counts
-- in reference_spec.
local helper = require("tests.lua.helper")

describe("GPT-NeoX and Phi", function()
  it("read their config.json files like the model scripts they describe", function()
    helper.assert_same_model("tests/fixtures/pythia-1b-config.json", "models/pythia-1b.lua")
    helper.assert_same_model("tests/fixtures/phi-2-config.json", "models/phi-2.lua")
  end)

  it("adapt PEFT's default targets: GPT-NeoX's fused query_key_value, Phi's q_proj and v_proj", function()
    -- LoRA's A and B: r x (in + out) per adapted weight and layer
    local r = 8
    local neox = helper.estimate("pythia-1b", "--set", "finetune=lora", "--set", "lora_rank=8").model
    assert.are.equal(16 * r * (2048 + 3 * 2048), neox.trainable_params)
    local phi = helper.estimate("phi-2", "--set", "finetune=lora", "--set", "lora_rank=8").model
    assert.are.equal(32 * 2 * r * (2560 + 2560), phi.trainable_params)
  end)

  it("know Phi's fc1 and fc2 and GPT-NeoX's embed_out by name", function()
    local phi = helper.estimate("phi-2", "--set", "finetune=lora", "--set", "lora_targets=fc1,fc2").model
    assert.are.equal(32 * 8 * ((2560 + 10240) + (10240 + 2560)), phi.trainable_params)
    local neox = helper.estimate("pythia-1b", "--set", "finetune=lora", "--set", "modules_to_save=embed_out").model
    -- the adapters on query_key_value and a trained copy of the 50304 x 2048 head
    assert.are.equal(16 * 8 * (2048 + 3 * 2048) + 50304 * 2048, neox.trainable_params)
  end)

  it("keep one residual-stream tensor a layer less than the sequential layout", function()
    -- parallel: both LayerNorms read the layer's input, which both keep (one
    -- tensor); sequential: the second one reads x + attn(ln1(x)) and keeps
    -- that sum too. bf16 rows of 2048, 1024 tokens, 16 layers.
    local function activations(parallel)
      return helper.estimate("pythia-1b", "--set", "seq_len=1024", "--set", "attention=flash",
        "--set", "use_cache=false", "--set", "parallel_residual=" .. tostring(parallel)).per_gpu.activations_bytes
    end
    assert.are.equal(16 * 1024 * 2048 * 2, activations(false) - activations(true))
  end)

  it("are refused under Megatron, whose layers run attention and MLP in sequence", function()
    for _, name in ipairs({ "pythia-1b", "phi-2" }) do
      local err = helper.fails(name, "--set", "framework=megatron")
      assert.truthy(err:find("framework: attention and MLP side by side", 1, true), err)
    end
  end)

  it("refuses Phi configs with q/k LayerNorms, naming the key", function()
    helper.assert_config_rejected('{"model_type": "phi", "hidden_size": 64, "num_hidden_layers": 2, '
      .. '"num_attention_heads": 4, "intermediate_size": 128, "qk_layernorm": true}', "qk_layernorm")
  end)
end)
