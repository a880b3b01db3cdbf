-- The field kit: tools/measure.py around a real PyTorch step (on CPU here),
-- and `vramplan compare` putting it beside the estimate.
local helper = require("tests.lua.helper")
local json = require("dkjson")

local function tempdir()
  local dir = os.tmpname()
  os.remove(dir)
  assert(os.execute("mkdir " .. dir))
  return dir
end

-- A measurement of Llama 3.2 1B on an A100 80GB, written to a file.
local function measurement_file(recipe, measured, environment)
  return helper.write(json.encode({
    vramplan = { model = "llama3.2-1b", gpu = "a100-80gb", recipe = recipe },
    measured = measured,
    environment = environment,
  }), ".json")
end

local function compare(path)
  local out, err, code = helper.run("compare", "--json", path)
  assert(code == 0, err)
  return json.decode(out).compare
end

describe("vramplan compare", function()
  for _, liger in ipairs({ "", "liger" }) do
    it("agrees to the byte with a real step's resident tensors, measured by tools/measure.py"
        .. (liger ~= "" and ", and finds Liger's modules" or ""), function()
      local dir = tempdir()
      local ok = os.execute(string.format("/usr/bin/python3 %s/tests/torch/measure_example.py %s %s 2>/dev/null",
        helper.root, dir, liger))
      assert(ok, "tests/torch/measure_example.py failed")
      local recorded = helper.read_json(dir .. "/measured.json").environment.liger
      assert.are.same({ rms_norm = liger ~= "", swiglu = liger ~= "" }, recorded)
      local out, err, code = helper.run("compare", "--json", dir .. "/measured.json")
      assert(code == 0, err)
      local o = json.decode(out)
      assert.are.equal(liger ~= "", o.recipe.liger_rms_norm)
      assert.are.equal(liger ~= "", o.recipe.liger_swiglu)
      local c = o.compare
      local seen = {}
      for _, row in ipairs(c.rows) do
        seen[row.quantity] = true
        assert.are.equal(row.measured, row.estimated, row.quantity)
      end
      for _, q in ipairs({ "params_bytes", "buffers_bytes", "grads_bytes", "optimizer_bytes" }) do
        assert.is_true(seen[q], q)
      end
      assert.is_nil(c.largest)
      os.execute("rm -rf " .. dir)
    end)
  end

  it("reads whether Liger's class or the Trainer's patch made the q and k norms", function()
    for _, qk in ipairs({ true, false }) do
      local path = helper.write(json.encode({
        vramplan = { model = "qwen3-4b", gpu = "a100-80gb", recipe = { seq_len = 256 } },
        measured = { peak_allocated_bytes = 1 << 34 },
        environment = { liger = { rms_norm = true, swiglu = false, qk_norms = qk } },
      }), ".json")
      local out, err, code = helper.run("compare", "--json", path)
      assert(code == 0, err)
      local recipe = json.decode(out).recipe
      assert.are.equal(true, recipe.liger_rms_norm)
      assert.are.equal(qk, recipe.liger_before_load)
    end
  end)

  it("reads accelerate's fp32 outputs from the measured model's forward", function()
    -- measure.py finds the wrapper accelerate's prepare_model puts on the forward
    local probe = [[
import sys; sys.path.insert(0, "tools")
import torch
from measure import accelerate_converts_outputs
class ConvertOutputsToFp32:  # accelerate/utils/operations.py's, by name
    def __init__(self, f): self.model_forward = f
    def __call__(self, *a): return self.model_forward(*a)
def convert_outputs_to_fp32(f):
    wrapped = ConvertOutputsToFp32(f)
    def forward(*a): return wrapped(*a)
    forward.__wrapped__ = wrapped
    return forward
m = torch.nn.Linear(2, 2)
plain = accelerate_converts_outputs(m)
m.forward = convert_outputs_to_fp32(m.forward)
print(plain, accelerate_converts_outputs(m), accelerate_converts_outputs(torch.nn.Sequential(m)))
]]
    local script = helper.write(probe, ".py")
    local p = io.popen("cd " .. helper.root .. " && /usr/bin/python3 " .. script .. " 2>&1")
    local out = p:read("a")
    p:close()
    assert.are.equal("False True False\n", out)
    for _, on in ipairs({ true, false }) do
      local path = helper.write(json.encode({
        vramplan = { model = "llama3.2-1b", gpu = "a100-80gb", recipe = { seq_len = 256, precision = "amp-bf16" } },
        measured = { peak_allocated_bytes = 1 << 34 },
        environment = { outputs_fp32 = on },
      }), ".json")
      local o, err, code = helper.run("compare", "--json", path)
      assert(code == 0, err)
      assert.are.equal(on, json.decode(o).recipe.outputs_fp32)
    end
  end)

  it("agrees with every measurement of the calibration set (tests/reference/measured/)", function()
    local p = io.popen("ls " .. helper.root .. "/tests/reference/measured/*/measured.json")
    local n = 0
    for path in p:lines() do
      n = n + 1
      local c = compare(path)
      assert.is_nil(c.largest, path .. " differs in " .. tostring(c.largest))
    end
    p:close()
    assert.is_true(n >= 1)
  end)

  it("names the quantity that differs most, and what usually explains it", function()
    local e = helper.estimate("llama3.2-1b", "--gpu", "a100-80gb", "--set", "seq_len=512")
    local dir = tempdir()
    local path = dir .. "/m.json"
    local f = assert(io.open(path, "w"))
    f:write(json.encode({
      vramplan = { model = "llama3.2-1b", gpu = "a100-80gb", recipe = { seq_len = 512 } },
      measured = { params_bytes = e.per_gpu.params_bytes,
                   peak_allocated_bytes = e.per_gpu.peak_allocated_bytes,
                   peak_reserved_bytes = math.floor(e.per_gpu.peak_reserved_bytes * 1.10),
                   nvidia_smi_used_bytes = e.per_gpu.peak_total_bytes + (1 << 20) },
    }))
    f:close()
    local c = compare(path)
    assert.are.equal("peak_reserved_bytes", c.largest)
    local out = helper.run("compare", path)
    assert.truthy(out:find("largest difference: peak_reserved_bytes, vramplan low", 1, true), out)
    assert.truthy(out:find("caching allocator", 1, true), out)
    os.execute("rm -rf " .. dir)
  end)

  it("estimates with the allocator options the measured process ran with", function()
    local function measurement(recipe, conf)
      return measurement_file(recipe, { peak_reserved_bytes = 1 }, { device = "cuda:0", alloc_conf = conf })
    end
    local simulated = { seq_len = 512, allocator = "simulated" }
    local out, err, code = helper.run("compare", "--json", measurement(simulated, "expandable_segments:True"))
    assert(code == 0, err)
    local r = json.decode(out)
    assert.are.equal("expandable_segments:True", r.recipe.alloc_conf)
    local want = helper.estimate("llama3.2-1b", "--gpu", "a100-80gb", "--set", "seq_len=512", "--set",
      "allocator=simulated", "--set", "alloc_conf=expandable_segments:True").per_gpu.peak_reserved_bytes
    assert.are.equal(want, r.compare.rows[1].estimated)
    -- the recipe's own option wins; one the simulation cannot take is left out, said
    out = helper.run("compare", "--json", measurement(
      { seq_len = 512, allocator = "simulated", alloc_conf = "max_split_size_mb:128" }, "expandable_segments:True"))
    assert.are.equal("max_split_size_mb:128", json.decode(out).recipe.alloc_conf)
    out, err, code = helper.run("compare", "--json", measurement(simulated, "backend:cudaMallocAsync"))
    assert.are.equal(0, code)
    assert.truthy(err:find("environment.alloc_conf backend:cudaMallocAsync not applied", 1, true), err)
    assert.are.equal("", json.decode(out).recipe.alloc_conf or "")
  end)

  it("estimates with the Liger-Kernel modules the measured model ran", function()
    local function measurement(recipe, liger)
      return measurement_file(recipe, { peak_allocated_bytes = 1 }, { device = "cuda:0", liger = liger })
    end
    local out, err, code = helper.run("compare", "--json", measurement({ seq_len = 512 },
      { rms_norm = true, swiglu = false }))
    assert(code == 0, err)
    local r = json.decode(out)
    assert.are.equal(true, r.recipe.liger_rms_norm)
    assert.are.equal(false, r.recipe.liger_swiglu)
    local want = helper.estimate("llama3.2-1b", "--gpu", "a100-80gb", "--set", "seq_len=512", "--set",
      "liger_rms_norm=true").per_gpu.peak_allocated_bytes
    assert.are.equal(want, r.compare.rows[1].estimated)
    -- the recipe's own keys win
    out = helper.run("compare", "--json", measurement({ seq_len = 512, liger_rms_norm = false },
      { rms_norm = true, swiglu = true }))
    r = json.decode(out)
    assert.are.equal(false, r.recipe.liger_rms_norm)
    assert.are.equal(false, r.recipe.liger_swiglu)
  end)

  it("refuses a file that is not a measurement, naming it", function()
    local path = helper.write('{"measured": {}}', ".json")
    local _, err, code = helper.run("compare", path)
    assert.are.equal(1, code)
    assert.truthy(err:find(path .. ": not a measurement", 1, true), err)
  end)
end)
