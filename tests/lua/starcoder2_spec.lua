-- StarCoder2 (models/starcoder2-*.lua, models/arch/starcoder2.lua):
-- config.json files read like the model scripts, the parameter counts, and
-- what sets the family apart from Mistral's decoder. (The activations are
-- checked against PyTorch in tests/torch/compare.py, cases "starcoder2".)
local helper = require("tests.lua.helper")

-- model.num_parameters() of Starcoder2ForCausalLM, from a config's shapes:
-- q/k/v/o, c_fc and c_proj with biases, two LayerNorms with biases a layer,
-- the final norm, and the embeddings (the head tied to them)
local function starcoder2_params(hidden, layers, heads, kv_heads, intermediate, vocab)
  local head_dim = hidden // heads
  local q, kv = hidden, kv_heads * head_dim
  local attention = (hidden * q + q) + 2 * (hidden * kv + kv) + (q * hidden + hidden)
  local mlp = (hidden * intermediate + intermediate) + (intermediate * hidden + hidden)
  return layers * (attention + mlp + 4 * hidden) + 2 * hidden + vocab * hidden
end

describe("StarCoder2", function()
  it("reads bigcode/starcoder2-3b's config.json like the model script it describes", function()
    -- tests/fixtures/starcoder2-3b-config.json: the published config's keys
    -- (no tie_word_embeddings key: PretrainedConfig's default ties the head)
    helper.assert_same_model("tests/fixtures/starcoder2-3b-config.json", "models/starcoder2-3b.lua")
  end)

  it("has the parameters of its configs, 3.03B and 7.17B as the Hub rounds them", function()
    local three = helper.estimate("starcoder2-3b", "--set", "seq_len=128").model.params
    local seven = helper.estimate("starcoder2-7b", "--set", "seq_len=128").model.params
    assert.are.equal(3030371328, three)
    assert.are.equal(starcoder2_params(3072, 30, 24, 2, 12288, 49152), three)
    assert.are.equal(7173923840, seven)
    assert.are.equal(starcoder2_params(4608, 32, 36, 4, 18432, 49152), seven)
    -- the model pages' figures (huggingface.co/bigcode/starcoder2-3b, -7b)
    assert.are.equal(303, math.floor(three / 1e7 + 0.5))
    assert.are.equal(717, math.floor(seven / 1e7 + 0.5))
  end)

  it("takes Starcoder2Config's defaults for the keys a config leaves out", function()
    local path = helper.write('{"model_type": "starcoder2", "hidden_size": 64, "num_hidden_layers": 2, ' ..
      '"num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 256}', ".json")
    local r = helper.estimate(path, "--set", "seq_len=32")
    os.remove(path)
    -- biases on, head tied, no window or dropout
    assert.are.equal(starcoder2_params(64, 2, 4, 2, 128, 256), r.model.params)
  end)

  it("refuses the norm and MLP kinds transformers does not build", function()
    helper.assert_config_rejected('{"model_type": "starcoder2", "hidden_size": 64, "num_hidden_layers": 2, ' ..
      '"num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 256, "norm_type": "rms_norm"}',
      "norm_type")
    helper.assert_config_rejected('{"model_type": "starcoder2", "hidden_size": 64, "num_hidden_layers": 2, ' ..
      '"num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 256, "mlp_type": "gated"}', "mlp_type")
  end)

  it("asks for LoRA targets, as PEFT has no default for starcoder2, and names c_fc and c_proj", function()
    assert.truthy(helper.fails("starcoder2-3b", "--set", "finetune=lora", "--set", "seq_len=256")
      :find("lora_targets: PEFT has no default LoRA targets for this model type", 1, true))
    local r = helper.estimate("starcoder2-3b", "--set", "finetune=lora", "--set", "lora_rank=8",
      "--set", "lora_targets=c_fc,c_proj", "--set", "seq_len=256")
    -- r x (3072 + 12288) for each of the two, 30 layers
    assert.are.equal(30 * 2 * 8 * (3072 + 12288), r.model.trainable_params)
  end)

  it("keeps a one-byte mask for each of its three dropouts while training", function()
    -- the embeddings' and, every layer, the attention's and the MLP's
    -- residual_dropout: one byte per element of the hidden states each
    local function activations(p)
      return helper.estimate("starcoder2-3b", "--set", "precision=bf16", "--set", "seq_len=1024",
        "--set", "use_cache=false", "--set", "attention=flash", "--set", "attn_dropout=0",
        "--set", "resid_dropout=" .. p, "--set", "embed_dropout=" .. p).per_gpu.activations_bytes
    end
    assert.are.equal((1 + 2 * 30) * 1024 * 3072, activations(0.1) - activations(0))
  end)
end)
