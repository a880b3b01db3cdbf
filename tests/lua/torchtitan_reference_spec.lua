-- torchtitan's published memory (tests/reference/torchtitan.json: the
-- benchmark table of Dec 2024, reserved_bytes.all.peak, the maximum over
-- ranks) against vramplan's estimate of the same run with the caching
-- allocator simulated (allocator = simulated: FSDP2's all-gather and
-- reduce-scatter streams keep pools of their own, which the constant
-- fragmentation share cannot show; docs/torchtitan.md explains each
-- difference). Rows that need what is not modelled (compile with TP or CP,
-- Float8 under TP, async TP) are listed there with the reason and pending
-- here; the compile and Float8 rows of Tables 1-3 are checked in
-- float8_compile_spec.lua.
local helper = require("tests.lua.helper")

local GIB = 2 ^ 30
local reference = helper.read_json(helper.root .. "/tests/reference/torchtitan.json")

-- Tolerance: within 5 % below or above the measurement (today 3.0 % and
-- 2.7 % below). What is not modelled (the root's flat all-gather output on
-- the all-gather stream, about 1.5 GiB for Llama 3.1 8B) lies below.
local TOLERANCE = 0.05

local function args_of(row)
  local args = { row.model }
  local names = {}
  for k in pairs(row.recipe) do names[#names + 1] = k end
  table.sort(names)
  for _, k in ipairs(names) do
    args[#args + 1] = "--set"
    args[#args + 1] = k .. "=" .. tostring(row.recipe[k])
  end
  args[#args + 1] = "--set"
  args[#args + 1] = "allocator=simulated"
  return args
end

describe("torchtitan's published runs", function()
  for _, row in ipairs(reference.rows) do
    local name = string.format("%s (%s, %s): %.1f GiB", row.id, row.table, row.setup, row.value_gib)
    if not row.modelled then
      pending(name .. " -- not modelled: " .. row.why)
    else
      it(name, function()
        local g = helper.estimate(table.unpack(args_of(row))).per_gpu
        local estimated = g.peak_reserved_bytes / GIB
        local error = estimated / row.value_gib - 1
        assert.is_true(math.abs(error) <= TOLERANCE,
          string.format("%s: %.2f GiB estimated, %.1f GiB measured (%+.1f %%)", row.id, estimated, row.value_gib,
            100 * error))
      end)
    end
  end
end)
