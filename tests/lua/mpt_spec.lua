-- MPT (models/mpt-*.lua, models/arch/mpt.lua): config.json files read like
-- the model scripts, the parameter counts as published, PEFT's default
-- target and what transformers cannot run. (What its ALiBi table, its bool
-- mask and its blocks' locals keep is checked against PyTorch in
-- tests/torch/compare.py, cases "mpt".)
local helper = require("tests.lua.helper")

describe("MPT", function()
  it("reads mosaicml/mpt-7b's config.json like the model script it describes", function()
    helper.assert_same_model("tests/fixtures/mpt-7b-config.json", "models/mpt-7b.lua")
  end)

  it("has the published parameter counts", function()
    -- the model cards' tables: n_parameters 6.7B (MPT-7B: 6,649,286,656,
    -- rounded up) and 29.95B (MPT-30B)
    local seven = helper.estimate("mpt-7b", "--set", "seq_len=128").model.params
    assert.are.equal(67, math.ceil(seven / 1e8))
    local thirty = helper.estimate("mpt-30b", "--set", "seq_len=128").model.params
    assert.are.equal(29.95, math.floor(thirty / 1e7) / 100)
  end)

  it("takes PEFT's default target for mpt (Wqkv)", function()
    local r = helper.estimate("mpt-7b", "--set", "finetune=lora", "--set", "lora_rank=8", "--set", "seq_len=128")
    assert.are.equal(32 * 8 * (4096 + 3 * 4096), r.model.trainable_params)
    local out = helper.estimate("mpt-7b", "--set", "finetune=lora", "--set", "lora_rank=8",
      "--set", "lora_targets=out_proj,up_proj", "--set", "seq_len=128")
    assert.are.equal(32 * 8 * ((4096 + 4096) + (4096 + 4 * 4096)), out.model.trainable_params)
  end)

  it("refuses what transformers cannot run or the engine does not model", function()
    local err = helper.fails("mpt-7b", "--set", "seq_len=2049")
    assert.truthy(err:find("seq_len: longer than MPT's ALiBi table (max_seq_len)", 1, true), err)
    helper.estimate("mpt-7b", "--set", "seq_len=2048")
    err = helper.fails("mpt-7b", "--set", "seq_len=128", "--set", "attention=flash")
    assert.truthy(err:find("ALiBi attention runs eagerly", 1, true), err)
    err = helper.fails("mpt-7b", "--set", "seq_len=128", "--set", "finetune=prefix",
      "--set", "num_virtual_tokens=8")
    assert.truthy(err:find("prefix tuning of MPT", 1, true), err)
    helper.assert_config_rejected('{"model_type": "mpt", "d_model": 64, "n_layers": 2, "n_heads": 4, ' ..
      '"vocab_size": 256, "max_seq_len": 64, "attn_config": {"clip_qkv": 6}}', "attn_config.clip_qkv")
  end)
end)
