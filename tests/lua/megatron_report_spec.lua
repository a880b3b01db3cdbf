-- Megatron-LM's theoretical memory report ("Theoretical memory footprints:
-- weight and optimizer=..., activation=...") for Megatron's own example
-- configurations, against vramplan's first pipeline stage. The report's
-- figures are in tests/reference/megatron_report.json, restated from
-- Megatron's formulas by tools/megatron_report.py; vramplan's come from its
-- op-by-op timeline of each stage.
local helper = require("tests.lua.helper")

local MIB = 1024 * 1024

local function first_stage(case)
  local args = { case.vramplan[1] }
  for i = 2, #case.vramplan do
    args[#args + 1] = "--set"
    args[#args + 1] = case.vramplan[i]
  end
  return helper.estimate(table.unpack(args)).per_rank[1]
end

-- Parameters of the first stage's tp shard that the report does not count
-- as they are: GPT's learned position embedding (whole on every tp rank),
-- the biases (q, k, v and fc1 split by tp; the row-parallel proj and fc2
-- whole), the norms' weights and biases (whole on every tp rank; the report
-- divides them by tp), and the final norm (on the last stage; the report
-- shares it over all stages).
local function unreported_params(m, layers)
  local h, tp, pp = m.hidden, m.tp or 1, m.pp or 1
  local norm = m.normalization == "RMSNorm" and 1 or 2
  local extra = layers * 2 * norm * h * (1 - 1 / tp)
  if m.learned_positions then extra = extra + m.max_positions * h end
  if not m.disable_bias then extra = extra + layers * (3 * h / tp + m.ffn / tp + 2 * h) end
  if pp > 1 then extra = extra - norm * h / (pp * tp) end
  return extra
end

local function bytes_per_param(m)
  if m.distributed_optimizer then return 6 + 12 / m.dp end -- bf16 model + fp32 grad, main weight and Adam / dp
  return 18 -- 2 (16-bit model) + 4 (fp32 main) + 4 (fp32 main_grad) + 8 (Adam)
end

describe("Megatron-LM's theoretical memory report", function()
  for _, case in ipairs(helper.read_json("tests/reference/megatron_report.json")) do
    local m = case.megatron
    local stage
    local function stage0()
      stage = stage or first_stage(case)
      return stage
    end

    it(case.id .. ": weights and optimizer of the most loaded shard, exactly once the report's omissions are added",
      function()
        local r = stage0()
        local got = r.params_bytes + r.grads_bytes + r.master_bytes + r.optimizer_bytes
        local per = bytes_per_param(m)
        local layers = m.layers / (m.pp or 1)
        local report = case.report_weight_and_optimizer_mib * MIB -- printed to 0.01 MiB
        local want = report + unreported_params(m, layers) * per
        assert.is_true(math.abs(got - want) <= 0.005 * MIB * 2,
          string.format("%.2f MiB vs %.2f MiB (report %.2f MiB)", got / MIB, want / MIB, report / MIB))
      end)

    if case.activations_comparable ~= false then
      it(case.id .. ": activations of the first stage, in flight included", function()
        local r = stage0()
        local got = r.in_flight * r.activations_bytes
        -- Without sequence parallelism and selective recompute the report
        -- adds a flat 5 % "for optimizer and miscellaneous temporaries";
        -- vramplan puts temporaries on the timeline, not in activations.
        local flat = (m.sequence_parallel and m.recompute == "selective") and 1 or 1.05
        local want = case.report_activation_mib * MIB / flat
        -- Beyond the report: each norm's fp32 mean and rstd (8 bytes a row)
        -- and flash attention's fp32 log-sum-exp (4 bytes a row and head).
        assert.is_true(math.abs(got / want - 1) < 0.001,
          string.format("%.1f MiB vs %.1f MiB", got / MIB, want / MIB))
      end)
    end
  end
end)
