-- A Hugging Face config.json saved from a bitsandbytes-quantized model
-- (quantization_config, as the "-bnb-4bit" checkpoints on the Hub carry
-- it): the weights are stored 4-bit or 8-bit, so the recipe is QLoRA over
-- that format, not a fine-tuning of 16-bit weights.
local helper = require("tests.lua.helper")
local json = require("dkjson")

local function checkpoint(quantization)
  local f = assert(io.open(helper.root .. "/tests/fixtures/llama2-7b-config.json"))
  local config = json.decode(f:read("a"))
  f:close()
  config.quantization_config = quantization
  return helper.write(json.encode(config), ".json")
end

-- BitsAndBytesConfig.to_dict() of a typical QLoRA checkpoint
local NF4 = { quant_method = "bitsandbytes", load_in_4bit = true, load_in_8bit = false,
              bnb_4bit_quant_type = "nf4", bnb_4bit_use_double_quant = true, bnb_4bit_compute_dtype = "bfloat16",
              llm_int8_threshold = 6.0 }

describe("a bitsandbytes-quantized checkpoint", function()
  it("is QLoRA over the stored format: as the model script with those QLoRA keys", function()
    local r = helper.estimate(checkpoint(NF4))
    assert.are.equal("qlora", r.recipe.finetune)
    assert.are.equal("nf4", r.recipe.quant)
    assert.is_true(r.recipe.double_quant)
    local same = helper.estimate("llama2-7b", "--set", "finetune=qlora", "--set", "quant=nf4",
      "--set", "double_quant=true")
    assert.are.equal(same.per_gpu.params_bytes, r.per_gpu.params_bytes)
    assert.are.equal(same.per_gpu.peak_allocated_bytes, r.per_gpu.peak_allocated_bytes)
  end)

  it("takes BitsAndBytesConfig's defaults where the config is silent (fp4, no double quantization)", function()
    local r = helper.estimate(checkpoint({ quant_method = "bitsandbytes", load_in_4bit = true }))
    assert.are.equal("fp4", r.recipe.quant)
    assert.is_false(r.recipe.double_quant)
  end)

  it("stores LLM.int8 weights for load_in_8bit, with the checkpoint's outlier threshold", function()
    local r = helper.estimate(checkpoint({ quant_method = "bitsandbytes", load_in_8bit = true }))
    assert.are.equal("int8", r.recipe.quant)
    assert.are.equal(6.0, r.recipe.llm_int8_threshold)
    local off = helper.estimate(checkpoint({ quant_method = "bitsandbytes", load_in_8bit = true, llm_int8_threshold = 0 }))
    assert.are.equal(0, off.recipe.llm_int8_threshold)
  end)

  it("lets the recipe choose the compute dtype, which from_pretrained may override", function()
    local r = helper.estimate(checkpoint(NF4), "--set", "compute_dtype=fp16")
    assert.are.equal("fp16", r.recipe.compute_dtype)
  end)

  it("refuses full fine-tuning (transformers trains only adapters over quantized weights)", function()
    local err = helper.fails(checkpoint(NF4), "--set", "finetune=full")
    assert.truthy(err:find("--set finetune=full: finetune: full is not possible over a checkpoint quantized by " ..
      "bitsandbytes", 1, true), err)
    assert.truthy(err:find("quantization_config.bnb_4bit_quant_type", 1, true), err)
  end)

  it("refuses a recipe that contradicts the stored format, naming both", function()
    local err = helper.fails(checkpoint(NF4), "--set", "quant=fp4")
    assert.truthy(err:find("quant: the checkpoint stores nf4", 1, true), err)
    err = helper.fails(checkpoint(NF4), "--set", "double_quant=false")
    assert.truthy(err:find("double_quant: the checkpoint stores true", 1, true), err)
  end)

  it("refuses other quantization methods rather than estimate the weights in torch_dtype", function()
    local err = helper.fails(checkpoint({ quant_method = "gptq", bits = 4 }))
    assert.truthy(err:find("quantization_config.quant_method: gptq is not modelled", 1, true), err)
    err = helper.fails(checkpoint({ quant_method = "bitsandbytes", load_in_4bit = true, bnb_4bit_quant_type = "int4" }))
    assert.truthy(err:find("quantization_config.bnb_4bit_quant_type: int4 is not nf4 or fp4", 1, true), err)
    -- MXFP4 is read as dequantized for gpt-oss's experts alone (cli_spec reads its config.json)
    err = helper.fails(checkpoint({ quant_method = "mxfp4" }))
    assert.truthy(err:find("quantization_config.quant_method: mxfp4 is not modelled", 1, true), err)
  end)

  it("reads gpt-oss's MXFP4 checkpoint as dequantized while loading, a default the recipe may change", function()
    local path = helper.root .. "/tests/fixtures/gpt-oss-20b-config.json"
    local args = { path, "--set", "seq_len=256", "--set", "allocator=simulated", "--set", "load=device-map" }
    local r = helper.estimate(table.unpack(args))
    assert.are.equal("mxfp4", r.recipe.checkpoint_quant)
    assert.are.equal("full", r.recipe.finetune) -- trained in torch_dtype, not as QLoRA
    local copy = helper.estimate(path, "--set", "checkpoint_quant=none", table.unpack(args, 2))
    assert.are.equal("none", copy.recipe.checkpoint_quant)
    assert.is_true(r.per_gpu.reserved_at_start_bytes > copy.per_gpu.reserved_at_start_bytes)
  end)

  it("refuses a bitsandbytes config it cannot read, naming the field", function()
    local cases = {
      { { quant_method = "bitsandbytes" }, "quantization_config: a bitsandbytes config loads in 4 or 8 bits" },
      { { quant_method = "bitsandbytes", load_in_4bit = true, bnb_4bit_compute_dtype = "float8" },
        "quantization_config.bnb_4bit_compute_dtype: float8 is not bfloat16, float16 or float32" },
      { { quant_method = "bitsandbytes", load_in_8bit = true, llm_int8_threshold = -1 },
        "quantization_config.llm_int8_threshold: a number of 0 or more" },
      { "nf4", "quantization_config: a JSON object" },
    }
    for _, case in ipairs(cases) do
      local err = helper.fails(checkpoint(case[1]))
      assert.truthy(err:find(case[2], 1, true), err)
    end
  end)
end)
