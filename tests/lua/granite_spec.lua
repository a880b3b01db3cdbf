-- Granite (models/granite-3.1-8b.lua: the llama family with multipliers):
-- config.json files read like the model scripts, and the products the
-- multipliers make. (The activations are checked against PyTorch in
-- tests/torch/compare.py.)
local helper = require("tests.lua.helper")

describe("Granite", function()
  it("reads a Granite config.json like the model script it describes", function()
    helper.assert_same_model("tests/fixtures/granite-3.1-8b-config.json", "models/granite-3.1-8b.lua")
  end)

  it("asks for LoRA targets, as PEFT has no default for granite", function()
    local err = helper.fails("granite-3.1-8b", "--set", "finetune=lora", "--set", "seq_len=64")
    assert.truthy(err:find("lora_targets: PEFT has no default LoRA targets for this model type", 1, true), err)
    -- and reads it from a config.json as well
    err = helper.fails("tests/fixtures/granite-3.1-8b-config.json", "--set", "finetune=qlora", "--set", "seq_len=64")
    assert.truthy(err:find("PEFT has no default LoRA targets", 1, true), err)
  end)

  it("multiplies the embeddings, every block's output and the logits into new tensors", function()
    local r = helper.estimate("granite-3.1-8b", "--set", "seq_len=256", "--set", "precision=bf16",
      "--set", "finetune=lora", "--set", "lora_targets=q_proj,v_proj", "--timeline")
    local count, bytes = {}, {}
    for _, e in ipairs(r.timeline) do
      if e.delta > 0 and (e.phase == "forward" or e.phase == "loss") then
        count[e.op] = (count[e.op] or 0) + 1
        bytes[e.op] = e.delta
      end
    end
    local hidden_states = 256 * 4096 * 2 -- bf16
    -- residual + hidden_states * residual_multiplier: twice a layer, 40 layers
    assert.are.equal(80, count["residual.scale"])
    assert.are.equal(hidden_states, bytes["residual.scale"])
    -- inputs_embeds * embedding_multiplier, once
    assert.are.equal(1, count["scale"])
    assert.are.equal(hidden_states, bytes["scale"])
    -- logits / logits_scaling: a second copy of the 49155-wide logits
    assert.are.equal(1, count["lm_head.logits_scaling"])
    assert.are.equal(256 * 49155 * 2, bytes["lm_head.logits_scaling"])
  end)
end)
