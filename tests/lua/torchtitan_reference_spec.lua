-- torchtitan's published memory (tests/reference/torchtitan.json: the
-- benchmark table of Dec 2024, reserved_bytes.all.peak, the maximum over
-- ranks) against vramplan's estimate of the same run with the caching
-- allocator simulated (allocator = simulated: FSDP2's all-gather and
-- reduce-scatter streams keep pools of their own, which the constant
-- fragmentation share cannot show; docs/torchtitan.md explains each
-- difference). A row vramplan cannot reproduce would be listed there with
-- the reason and pending here; the compile and Float8 rows of Tables 1 and
-- 3 and tt-04 are checked in float8_compile_spec.lua, Table 2's CP rows
-- (compile, Float8, context parallelism), Table 4 with and without async TP
-- (compile, Float8, tensor parallelism), Table 5 (the same with pp) and
-- Table 6 (with pp and cp) here.
local helper = require("tests.lua.helper")

local GIB = 2 ^ 30
local reference = helper.read_json(helper.root .. "/tests/reference/torchtitan.json")

-- Tolerance: within 5 % below or above the measurement (today 0.6 % below
-- and 0.2 % above). A row may state its own (`tolerance`, with its
-- `difference`): Table 2's CP rows take float8_compile.json's 10 % for the
-- same table's compiled Float8 rows (today 5.8, 4.8 and 2.9 % below; tt-04,
-- CP 1, 4.5 %), and so do Table 4 (FSDP 32 x TP 8, compile, Float8: 4.0 %
-- below, with async TP 3.8 % below)
-- and Table 5's Interleaved 1F1B (4.6 % above), with `tolerance_constant`
-- for the constant allocator beside them. The 1F1B runs of 405B (Table 5's
-- 1F1B row and Table 6) are held to 20 % (today 9.1 to 18.1 % below): their
-- gap is not explained (the rows' `difference`).
local TOLERANCE = 0.05

-- The default allocator (allocator = constant) counts FSDP2's stream pools
-- too (the default stream's peak plus each side stream's high-water): within
-- 11 % below (today 9.6 % and 10.2 %; 14.1 % for tt-01 without the pools;
-- Table 2's CP rows 10.4, 10.2 and 10.7 %).
-- The rest is the default stream's fragmentation beyond the constant share,
-- which the simulation finds (docs/reserved.md, Streams).
local TOLERANCE_CONSTANT = 0.11

local function args_of(row, allocator)
  local sets = helper.sets_of(row.recipe)
  sets[#sets + 1] = "allocator=" .. (allocator or "simulated")
  return { helper.with_sets(row.model, {}, sets) }
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
        assert.is_true(math.abs(error) <= (row.tolerance or TOLERANCE),
          string.format("%s: %.2f GiB estimated, %.1f GiB measured (%+.1f %%)", row.id, estimated, row.value_gib,
            100 * error))
      end)
      it(name .. ", with the default constant allocator", function()
        local g = helper.estimate(table.unpack(args_of(row, "constant"))).per_gpu
        local error = g.peak_reserved_bytes / GIB / row.value_gib - 1
        assert.is_true(error <= (row.tolerance or TOLERANCE) and error >= -(row.tolerance_constant or TOLERANCE_CONSTANT),
          string.format("%s: %.2f GiB estimated, %.1f GiB measured (%+.1f %%)", row.id, g.peak_reserved_bytes / GIB,
            row.value_gib, 100 * error))
      end)
    end
  end
end)
