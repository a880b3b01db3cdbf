-- axolotl's published GPT-OSS runs (tests/reference/axolotl_gpt_oss.json):
-- the reservation over the run, as its logs report max_memory_reserved(),
-- against vramplan reading the same config files. Only the rows whose
-- every technique vramplan models are held to the tolerance; the others
-- say why not.
local helper = require("tests.lua.helper")

local GIB = 2 ^ 30
local reference = helper.read_json(helper.root .. "/tests/reference/axolotl_gpt_oss.json")
local configs = helper.root .. "/tests/fixtures/configs/axolotl/examples/gpt-oss/"

local function reserved_over_run(row)
  local args = { "--recipe", configs .. row.config, "--gpu", reference.gpu, "--gpus", tostring(row.gpus),
                 "--set", "allocator=simulated" }
  for k, v in pairs(row.set or {}) do
    args[#args + 1] = "--set"
    args[#args + 1] = k .. "=" .. tostring(v)
  end
  local g = helper.estimate(table.unpack(args)).per_gpu
  return (g.peak_reserved_run_bytes or g.peak_reserved_bytes) / GIB
end

describe("axolotl's GPT-OSS examples", function()
  for _, row in ipairs(reference.rows) do
    if row.modelled then
      -- Tolerance: 30 % below, 8 % above the published figure (today -22.3,
      -- -6.0, -28.0 and -1.8 %, with axolotl's expandable segments: the
      -- figures are whole GiB from one run each, and two of them disagree
      -- with each other, the json's notes say how; the FSDP2 rows fell by
      -- 3-6 GiB when backward's prefetched all-gather outputs moved to the
      -- all-gather stream's pool, where foreach_all_gather makes them, and
      -- what is left is not explained: docs/validation.md)
      it(row.id .. " is within " .. 100 * reference.tolerance_low .. " % below / " .. 100 * reference.tolerance_high
        .. " % above the published reservation", function()
        local estimated = reserved_over_run(row)
        local err = estimated / row.value_gib - 1
        assert.is_true(err > -reference.tolerance_low and err < reference.tolerance_high,
          string.format("%s: %.2f GiB, published ~%.0f GiB (%+.1f %%)", row.id, estimated, row.value_gib, 100 * err))
      end)
    else
      it(row.id .. " says why it is not held to the figure", function()
        assert.is_string(row.why)
        assert.is_true(#row.why > 40)
      end)
    end
  end

  it("reads the configs' keys the runs depend on", function()
    local r = helper.estimate("--recipe", configs .. "gpt-oss-20b-fft-fsdp2.yaml", "--gpus", "8").recipe
    -- the CCE plugin named: cut_cross_entropy defaults to true
    assert.are.equal("cut", r.loss)
    -- adamw_torch_8bit: transformers' name for torchao's AdamW8bit
    assert.are.equal("adamw-8bit-torchao", r.optimizer)
    -- activation_offloading: checkpoint_wrapper (non-reentrant) and TRL's offloading
    assert.are.equal("full", r.checkpointing)
    assert.is_false(r.use_reentrant)
    assert.is_true(r.offload_activations)
    assert.is_true(r.offload_torchtune)
    -- axolotl's own fsdp2_prepare_model keeps the bf16 it loaded; accelerate
    -- autocasts the forward under FSDP too
    assert.are.equal("fsdp2", r.framework)
    assert.are.equal("bf16-autocast", r.precision)
  end)
end)
