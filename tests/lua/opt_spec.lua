-- OPT (models/opt-*.lua, models/arch/opt.lua): config.json files read like
-- the model scripts, the parameter counts as published, LoRA's targets and
-- the position table's limit. (What its positions and its batch-sized mask
-- keep is checked against PyTorch in tests/torch/compare.py, cases "opt";
-- the counts also in reference_spec.)
local helper = require("tests.lua.helper")

describe("OPT", function()
  it("reads facebook/opt-1.3b's config.json like the model script it describes", function()
    helper.assert_same_model("tests/fixtures/opt-1.3b-config.json", "models/opt-1.3b.lua")
  end)

  it("has the published parameter counts", function()
    -- DeepSpeed-Chat's model-size helper: "[pre-lora] num params: 1315758080"
    assert.are.equal(1315758080, helper.estimate("opt-1.3b", "--set", "seq_len=128").model.params)
    -- PEFT's int8 OPT notebook: LoRA r 16 on q_proj and v_proj of
    -- facebook/opt-6.7b loaded in 8 bits, "trainable params: 8388608 ||
    -- all params: 6666862592"
    local r = helper.estimate("opt-6.7b", "--set", "finetune=qlora", "--set", "quant=int8", "--set", "lora_rank=16",
      "--set", "seq_len=128")
    assert.are.equal(8388608, r.model.trainable_params)
    assert.are.equal(6666862592 - 8388608, r.model.params)
  end)

  it("takes PEFT's default targets (q_proj, v_proj) and OPT's name out_proj", function()
    local default = helper.estimate("opt-1.3b", "--set", "finetune=lora", "--set", "lora_rank=8", "--set", "seq_len=128")
    assert.are.equal(24 * 2 * 8 * (2048 + 2048), default.model.trainable_params)
    local out = helper.estimate("opt-1.3b", "--set", "finetune=lora", "--set", "lora_rank=8",
      "--set", "lora_targets=out_proj", "--set", "seq_len=128")
    assert.are.equal(24 * 8 * (2048 + 2048), out.model.trainable_params)
  end)

  it("refuses OPT-350M's layout and random layer drop", function()
    local base = '{"model_type": "opt", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, ' ..
      '"ffn_dim": 128, "vocab_size": 256, "max_position_embeddings": 64, '
    helper.assert_config_rejected(base .. '"do_layer_norm_before": false}', "do_layer_norm_before")
    helper.assert_config_rejected(base .. '"word_embed_proj_dim": 32}', "word_embed_proj_dim")
    helper.assert_config_rejected(base .. '"layerdrop": 0.1}', "layerdrop")
  end)

  it("refuses a sequence past its position table", function()
    local err = helper.fails("opt-1.3b", "--set", "seq_len=2049")
    assert.truthy(err:find("seq_len: longer than the model's learned position table", 1, true), err)
    helper.estimate("opt-1.3b", "--set", "seq_len=2048")
  end)
end)
