-- GPT-J (models/gpt-j-6b.lua, models/arch/gptj.lua): its config.json read
-- like the model script, the parameters as transformers' modules hold them,
-- LoRA on GPT-J's own module names and what the engine does not model.
-- (What its per-layer tables, fp32 rotations and fp32 logits keep is
-- checked against PyTorch in tests/torch/compare.py, cases "gptj".)
local helper = require("tests.lua.helper")

describe("GPT-J", function()
  it("reads EleutherAI/gpt-j-6b's config.json like the model script it describes", function()
    helper.assert_same_model("tests/fixtures/gpt-j-6b-config.json", "models/gpt-j-6b.lua")
  end)

  it("has the parameters of GPTJForCausalLM's modules", function()
    -- each module's shapes from modeling_gptj.py (transformers 4.5x): per
    -- block ln_1 (weight, bias), q/k/v/out_proj without biases, fc_in and
    -- fc_out with biases; wte, ln_f and lm_head with a bias
    local h, inner, vocab, layers = 4096, 4 * 4096, 50400, 28
    local block = 2 * h + 4 * h * h + (h * inner + inner) + (inner * h + h)
    local total = layers * block + vocab * h + 2 * h + (h * vocab + vocab)
    assert.are.equal(6050882784, total)
    assert.are.equal(total, helper.estimate("gpt-j-6b", "--set", "seq_len=128").model.params)
    -- The model card's 6,053,381,344 counts mesh-transformer-jax's 8 model-
    -- parallel shards (kingoflolz/mesh-transformer-jax, layers.py and
    -- transformer_shard.py at commit 02850c46, configs/6B_roto_256.json):
    -- each shard holds its own copy of every ReplicatedLayerNorm (28 ln_1,
    -- ln_f), of fc_out's full-width bias and of the EmbeddingShard's bias,
    -- which the HF conversion (to_hf_weights.py) folds into wte
    local shards = 8
    local copies = (shards - 1) * (2 * h * (layers + 1) + h * layers) + shards * h
    assert.are.equal(2498560, copies)
    assert.are.equal(6053381344, total + copies)
  end)

  it("puts LoRA on GPT-J's names (out_proj, fc_in, fc_out)", function()
    local r = helper.estimate("gpt-j-6b", "--set", "finetune=lora", "--set", "lora_rank=8", "--set", "seq_len=128")
    assert.are.equal(28 * 8 * 2 * (4096 + 4096), r.model.trainable_params) -- q_proj, v_proj
    local named = helper.estimate("gpt-j-6b", "--set", "finetune=lora", "--set", "lora_rank=8",
      "--set", "lora_targets=out_proj,fc_in,fc_out", "--set", "seq_len=128")
    assert.are.equal(28 * 8 * ((4096 + 4096) + 2 * (4096 + 4 * 4096)), named.model.trainable_params)
  end)

  it("refuses what transformers cannot run or the engine does not model", function()
    local err = helper.fails("gpt-j-6b", "--set", "seq_len=2049")
    assert.truthy(err:find("seq_len: longer than GPT-J's position table (n_positions)", 1, true), err)
    helper.estimate("gpt-j-6b", "--set", "seq_len=2048")
    err = helper.fails("gpt-j-6b", "--set", "seq_len=128", "--set", "attention=flash")
    assert.truthy(err:find("GPT-J's attention is modelled eagerly", 1, true), err)
    err = helper.fails("gpt-j-6b", "--set", "seq_len=128", "--set", "finetune=prefix",
      "--set", "num_virtual_tokens=8")
    assert.truthy(err:find("prefix tuning of GPT-J", 1, true), err)
    helper.assert_config_rejected('{"model_type": "gptj", "n_embd": 64, "n_layer": 2, "n_head": 4, ' ..
      '"vocab_size": 256, "n_positions": 64, "rotary_dim": null}', "rotary_dim")
    helper.assert_config_rejected('{"model_type": "gptj", "n_embd": 64, "n_layer": 2, "n_head": 4, ' ..
      '"vocab_size": 256, "n_positions": 64, "rotary_dim": 32}', "rotary_dim")
  end)
end)
