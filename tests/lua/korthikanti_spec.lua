-- Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
-- Transformer Models": the activation memory of a Megatron GPT layer
-- (Table 2) and of the paper's 22B, 175B, 530B and 1T configurations.
-- vramplan's figures come from its op-by-op timeline of a GPT layer (fp16,
-- GELU, dropout, a fused-softmax-like 16-bit softmax), not from the formulas.
local helper = require("tests.lua.helper")
local schemes = {
  ["TP only (baseline)"] = {},
  ["TP+SP, no recompute"] = { "sequence_parallel=true" },
  ["TP+selective"] = { "checkpointing=selective" },
  ["TP+SP+selective recompute"] = { "sequence_parallel=true", "checkpointing=selective" },
  ["full recompute (TP, no SP)"] = { "checkpointing=full" },
  none = {},
}

-- Activations of one layer: the difference between two layers and one.
local function per_layer(c, scheme)
  local function run(layers)
    local args = { "gpt2", "--set", "framework=megatron", "--set", "activation=gelu", "--set", "precision=mixed-fp16",
      "--set", "attention=eager", "--set", "hidden=" .. c.hidden, "--set", "heads=" .. c.heads,
      "--set", "seq_len=" .. c.seq_len, "--set", "max_positions=" .. c.seq_len, "--set", "micro_batch=" .. c.micro_batch,
      "--set", "vocab=" .. (c.vocab or 51200), "--set", "tp=" .. c.tp, "--set", "layers=" .. layers }
    for _, kv in ipairs(schemes[scheme]) do
      args[#args + 1] = "--set"
      args[#args + 1] = kv
    end
    return helper.estimate(table.unpack(args)).per_gpu.activations_bytes
  end
  return run(2) - run(1)
end

describe("Korthikanti et al. 2022, Table 2: activations per layer", function()
  -- s = 1024, b = 2, h = 2048, a = 16 (5as/h = 40), t = 4
  local c = { seq_len = 1024, micro_batch = 2, hidden = 2048, heads = 16, tp = 1 }
  local s, b, h, a = 1024, 2, 2048, 16
  local cases = {
    { "none", 1, 34 + 5 * a * s / h },
    { "TP only (baseline)", 4, 10 + 24 / 4 + 5 * a * s / (h * 4) },
    { "TP+SP, no recompute", 4, 34 / 4 + 5 * a * s / (h * 4) },
    { "TP+selective", 4, 10 + 24 / 4 },
    { "TP+SP+selective recompute", 4, 34 / 4 },
    { "full recompute (TP, no SP)", 4, 2 },
  }
  for _, case in ipairs(cases) do
    it(string.format("%s: sbh x %.4g", case[1], case[3]), function()
      c.tp = case[2]
      local got, want = per_layer(c, case[1]), s * b * h * case[3]
      -- beyond the formula: each LayerNorm's fp32 mean and rstd (16 bytes a row)
      assert.is_true(math.abs(got / want - 1) < 0.001, string.format("%d vs %.0f", got, want))
    end)
  end
end)

describe("Korthikanti et al. 2022: the paper's configurations", function()
  -- The reference multiplies the Table 2 formula by the layer count: the
  -- first pipeline stage holds L/p layers with p micro-batches in flight
  -- under 1F1B, which is L layers' worth.
  for _, ref in ipairs(helper.read_json("tests/reference/korthikanti.json")) do
    it(string.format("%s: %s, %s, %s", ref.id, ref.model, ref.scheme, ref.value_raw), function()
      local got = per_layer(ref, ref.scheme) * ref.layers
      assert.is_true(math.abs(got / ref.value_bytes - 1) < 0.005,
        string.format("%.4g GB vs %.4g GB", got / 1e9, ref.value_bytes / 1e9))
    end)
  end
end)
