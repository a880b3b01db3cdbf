-- PEFT's published GPU memory for LoRA against full fine-tuning (the
-- README's Use Cases table): BLOOMZ-7b1 in fp32 with AdamW, batch 8 of 64
-- tokens. vramplan's allocated peak is what the example scripts measure
-- (torch.cuda.max_memory_allocated), modelled as transformers 4.26-4.27
-- ran BLOOM.
local helper = require("tests.lua.helper")

local MIB = 2 ^ 20
local reference = helper.read_json("tests/reference/peft_memory.json")

local function args_for(model, recipe)
  local args = { model }
  for _, key in ipairs({ "precision", "optimizer", "micro_batch", "seq_len", "finetune", "lora_rank", "lora_alpha",
    "lora_dropout" }) do
    if recipe[key] ~= nil then
      args[#args + 1] = "--set"
      args[#args + 1] = key .. "=" .. tostring(recipe[key])
    end
  end
  return args
end

describe("PEFT's published LoRA memory (" .. reference.source .. ")", function()
  for _, run in ipairs(reference.runs) do
    it(string.format("%s: %s LoRA, published %s", run.id, run.model, run.published), function()
      local args = args_for(run.model, run.recipe)
      local peak = helper.estimate(table.unpack(args)).per_gpu.peak_allocated_bytes / MIB
      -- The table rounds to whole "GB" of an unstated unit: vramplan must
      -- land in the range that rounding allows, give or take 3 %.
      assert.is_true(peak >= run.low_mib * 0.97 and peak <= run.high_mib * 1.03,
        string.format("vramplan %.0f MiB, published range %d-%d MiB", peak, run.low_mib, run.high_mib))
    end)
  end

  it("full fine-tuning of the same run does not fit on an A100 80GB, as the table reports", function()
    local oom = reference.full_finetuning_oom
    local args = args_for("bloomz-7b1", oom.recipe)
    args[#args + 1] = "--gpu"
    args[#args + 1] = "a100-80gb"
    local r = helper.estimate(table.unpack(args))
    assert.is_false(r.fits)
  end)
end)
