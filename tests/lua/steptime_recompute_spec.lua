-- The step time's recomputation under checkpointing = op-selective
-- (torchtitan's policy: the outputs of its save list kept, every second
-- aten.mm recomputed, every other op rerun) and the casts of
-- precision = fp8-torchao (torchao's eager Float8Linear). The expected
-- seconds are worked out here, op by op, from the step-time model's
-- published rules (docs/step-time.md: a GEMM's time is the larger of its
-- FLOPs at the GPU's dense peak x the best-shape efficiency x the tile and
-- wave quantization, and its bytes at 80 % of the memory bandwidth;
-- memory-bound ops are their bytes), not read from the engine.
local helper = require("tests.lua.helper")

-- a Llama small enough to check by hand: hidden 256, 4 heads of 64, 2
-- key/value heads, intermediate 768, 3 layers, 2 x 128 tokens
local H, HEADS, KV, D, FFN, LAYERS, ROWS = 256, 4, 2, 64, 768, 3, 256
local SHAPE = { "--set", "hidden=" .. H, "--set", "heads=" .. HEADS, "--set", "kv_heads=" .. KV, "--set",
  "intermediate=" .. FFN, "--set", "vocab=1024", "--set", "layers=" .. LAYERS, "--set", "micro_batch=2", "--set",
  "seq_len=128", "--set", "precision=bf16", "--gpu", "h100-80gb", "--set", "attention=sdpa" }
local function time(...) return helper.estimate_on("llama2-7b", SHAPE, ...).time end

-- H100 SXM (hardware/gpus/h100-80gb.lua): 989.5 dense bf16 TFLOP/s, 132
-- SMs, 3,350 GB/s; the best-shape GEMM efficiency on Hopper 80.1 %
-- (Bekman's MAMF table); 80 % of the memory bandwidth
local PEAK, SMS, BW, CAP, E = 989.5e12, 132, 3350e9 * 0.80, 0.801, 2

local function wave_efficiency(m, n)
  local best = 0
  for _, tile in ipairs({ { 256, 128 }, { 128, 256 } }) do
    local tm, tn = math.min(tile[1], 16 * math.ceil(m / 16)), math.min(tile[2], 16 * math.ceil(n / 16))
    local count = math.ceil(m / tm) * math.ceil(n / tn)
    local waves = math.ceil(count / SMS)
    best = math.max(best, m * n / (waves * SMS * tm * tn))
  end
  return best
end
-- rows x in @ in x out
local function gemm(rows, inp, out)
  local compute = 2 * rows * inp * out / (PEAK * CAP * wave_efficiency(rows, out))
  local memory = E * (rows * inp + inp * out + rows * out) / BW
  return math.max(compute, memory)
end

local function close(a, b) return math.abs(a - b) <= 1e-9 * math.max(math.abs(a), math.abs(b)) end

describe("op-selective checkpointing's recompute time", function()
  local none, op, full = time("--set", "checkpointing=none"), time("--set", "checkpointing=op-selective"),
    time("--set", "checkpointing=full")

  it("lies strictly between none and full", function()
    assert.is_true(none.compute_s < op.compute_s and op.compute_s < full.compute_s,
      string.format("%.6g < %.6g < %.6g", none.compute_s, op.compute_s, full.compute_s))
  end)

  it("is the recomputed ops' forward, one by one", function()
    -- the block's mms in order: q, k, v, o, gate, up, down; the 1st, 3rd,
    -- 5th and 7th saved, k, o and up recomputed; SDPA's output saved
    local mms = gemm(ROWS, H, KV * D) + gemm(ROWS, HEADS * D, H) + gemm(ROWS, H, FFN)
    -- off the list, rerun: two RMSNorms, the rotary embedding of q and k,
    -- the MLP's activation and product (5 passes of the inner rows), the
    -- two residual adds (two reads, a write). Fused (kernels = fused) a
    -- norm and the rotary embedding read and write their rows once; eager
    -- (transformers' modules, the default outside Megatron-LM and compile)
    -- an RMSNorm runs its upcast (2 + 4 bytes an element), pow (4 + 4),
    -- mean (4), x * rsqrt (4 + 4), downcast (4 + 2) and weight (2 + 2): 36
    -- bytes; the rotary embedding q * cos, neg and cat of rotate_half,
    -- * sin and the sum: 10 passes
    local function memory(norm, rotary)
      return (2 * norm * ROWS * H + rotary * E * ROWS * (HEADS + KV) * D + 5 * E * ROWS * FFN
        + 2 * (3 * E * ROWS * H)) / BW
    end
    local want = LAYERS * (mms + memory(2 * E, 2))
    local fused_none, fused_op = time("--set", "checkpointing=none", "--set", "kernels=fused"),
      time("--set", "checkpointing=op-selective", "--set", "kernels=fused")
    assert.is_true(close(want, fused_op.compute_s - fused_none.compute_s),
      string.format("%.12g by hand, %.12g modelled", want, fused_op.compute_s - fused_none.compute_s))
    want = LAYERS * (mms + memory(36, 10))
    assert.is_true(close(want, op.compute_s - none.compute_s),
      string.format("%.12g by hand, %.12g modelled", want, op.compute_s - none.compute_s))
  end)

  it("counts the recomputed FLOPs in the hardware FLOPs", function()
    local flops = 2 * ROWS * (H * KV * D + HEADS * D * H + H * FFN) * 2 -- per step: the micro-batch's rows
    assert.is_true(close(LAYERS * flops / 2, op.hardware_flops_per_step - none.hardware_flops_per_step))
  end)
end)

describe("fp8-torchao's casts in the step time", function()
  -- one cast of n 16-bit elements (torchao 0.19's hp_tensor_to_float8_dynamic,
  -- eager): abs (read and write 2n bytes), amax (read 2n), upcast to fp32
  -- (2n + 4n), x * scale (4n + 4n), clamp (4n + 4n), to float8 (4n + n):
  -- 33 bytes an element
  local function cast(n) return 33 * n end
  -- the block's nn.Linear modules (in, out): q, k, v, o, gate, up, down,
  -- all dims multiples of 16; the head stays in bf16
  local LINEARS = { { H, HEADS * D }, { H, KV * D }, { H, KV * D }, { HEADS * D, H }, { H, FFN }, { H, FFN },
    { FFN, H } }
  local function fp8(...)
    return helper.estimate_on("llama2-7b", SHAPE, "--set", "precision=fp8-torchao", "--set", "framework=fsdp2",
      "--set", "dp=2", "--gpus", "2", ...).time
  end

  -- the seconds of `bytes(in, out)` over every swapped linear of the layers
  local function over_linears(bytes)
    local n = 0
    for _, l in ipairs(LINEARS) do n = n + bytes(l[1], l[2]) end
    return LAYERS * n / BW
  end
  -- the compute time `a` takes beyond `b` (fp8's --set pairs) is `want`
  local function assert_costs(want, a, b)
    local got = fp8("--set", a).compute_s - fp8("--set", b).compute_s
    assert.is_true(close(want, got), string.format("%.12g by hand, %.12g modelled", want, got))
  end

  it("cast each weight twice a step, unless FSDP2 gathers it in float8", function()
    -- Float8Linear casts the weight in forward and again for grad_input
    assert_costs(over_linears(function(i, o) return 2 * cast(i * o) end), "fp8_all_gather=false",
      "fp8_all_gather=true")
  end)

  it("fuse each cast into two kernels under torch.compile: 5 bytes an element", function()
    -- Inductor: abs and amax one reduction (read 2n), upcast, scale, clamp
    -- and cast one pointwise kernel (read 2n, write n)
    local function compiled(all_gather)
      return fp8("--set", "compile=true", "--set", "fp8_all_gather=" .. all_gather).compute_s
    end
    local want = over_linears(function(i, o) return 2 * 5 * i * o end)
    local got = compiled("false") - compiled("true")
    assert.is_true(close(want, got), string.format("%.12g by hand, %.12g modelled", want, got))
  end)

  it("cast grad_output and the input again for grad_weight, unless it stays in 16 bits", function()
    -- tensorwise: grad_output and the input cast for the grad_weight GEMM
    -- with both operands' one-byte copies (read, write); rowwise_with_gw_hp
    -- skips them, but its grad_input GEMM (rowwise scales, no fast
    -- accumulation) writes the scales' fp32 outer product [rows, in] and
    -- reads it as the 16-bit output is scaled in place (8 + 2 x 2 bytes)
    assert_costs(over_linears(function(i, o)
      local x, g = ROWS * i, ROWS * o
      return cast(g) + cast(x) + 2 * (g + x) - (8 + 2 * E) * ROWS * i
    end), "fp8_recipe=tensorwise", "fp8_recipe=rowwise_with_gw_hp")
  end)

  it("cast once per module under torchao's float8 TP styles (tensorwise, DTensor tp)", function()
    -- tp 2 with sequence parallelism, tensorwise (torchtitan's float8 TP
    -- plan) against rowwise_with_gw_hp (plain styles, each linear as
    -- above). Tensorwise: the module's input cast once on its shard (128
    -- rows) before the gather (PrepareFloat8ModuleInput) and reused by its
    -- column-parallel linears, in forward and for grad_weight; a
    -- row-parallel linear's input cast before it and saved in float8; each
    -- output gradient cast once (a column linear's whole, a row linear's on
    -- its 128-row shard) for both backward GEMMs.
    local function tp2(recipe)
      return helper.estimate_on("llama2-7b", SHAPE, "--set", "precision=fp8-torchao", "--set", "framework=fsdp2",
        "--set", "tp=2", "--set", "sequence_parallel=true", "--gpus", "2", "--set", "fp8_recipe=" .. recipe).time
    end
    local NR = ROWS / 2
    local columns = { { H, HEADS * D / 2 }, { H, KV * D / 2 }, { H, KV * D / 2 }, { H, FFN / 2 }, { H, FFN / 2 } }
    local rows = { { HEADS * D / 2, H }, { FFN / 2, H } }
    local bytes = 2 * cast(NR * H) -- the attention's and the MLP's inputs
    for _, l in ipairs(columns) do
      local x, g = ROWS * l[1], ROWS * l[2]
      bytes = bytes - cast(x) - (8 + 2 * E) * ROWS * l[1] + 2 * (g + x)
    end
    for _, l in ipairs(rows) do
      local x, g = ROWS * l[1], ROWS * l[2]
      bytes = bytes - cast(g) - (8 + 2 * E) * ROWS * l[1] + 2 * (g + x) + cast(NR * l[2])
    end
    local want = LAYERS * bytes / BW
    local got = tp2("tensorwise").compute_s - tp2("rowwise_with_gw_hp").compute_s
    assert.is_true(close(want, got), string.format("%.12g by hand, %.12g modelled", want, got))
  end)

  it("recast every weight in op-selective's rerun: the casts are not on torchtitan's list", function()
    -- the forward cast, the rerun's and grad_input's: three a step, none
    -- when FSDP2 gathers the weight in float8
    local function weight_casts(all_gather)
      return fp8("--set", "checkpointing=op-selective", "--set", "fp8_all_gather=" .. all_gather).compute_s
    end
    local want = over_linears(function(i, o) return 3 * cast(i * o) end)
    local got = weight_casts("false") - weight_casts("true")
    assert.is_true(close(want, got), string.format("%.12g by hand, %.12g modelled", want, got))
  end)

  it("recast every input and weight in a full checkpoint's rerun", function()
    -- full recompute reruns the forward: its GEMMs, attention and memory
    -- passes (as in bf16) and the forward casts, input and weight
    local bf16_rerun = time("--set", "checkpointing=full").compute_s - time("--set", "checkpointing=none").compute_s
    local fp8_rerun = fp8("--set", "checkpointing=full").compute_s - fp8("--set", "checkpointing=none").compute_s
    -- the rerun's GEMMs run at the float8 rate: recompute them by hand
    local FP8_PEAK = 1979e12 * 0.60 -- steptime.c fp8_cap: 60 % of the dense FP8 peak
    local function gemm8(rows, inp, out)
      local compute = 2 * rows * inp * out / (FP8_PEAK * wave_efficiency(rows, out))
      return math.max(compute, E * (rows * inp + inp * out + rows * out) / BW)
    end
    -- the bf16 rerun's GEMMs as the model lumps them (q, k, v as one; gate
    -- and up as one)
    local bf16_gemms = gemm(ROWS, H, (HEADS + 2 * KV) * D) + gemm(ROWS, HEADS * D, H) + gemm(ROWS, H, 2 * FFN) +
      gemm(ROWS, FFN, H)
    local fp8_gemms = gemm8(ROWS, H, (HEADS + 2 * KV) * D) + gemm8(ROWS, HEADS * D, H) + gemm8(ROWS, H, 2 * FFN) +
      gemm8(ROWS, FFN, H)
    local want = bf16_rerun + LAYERS * (fp8_gemms - bf16_gemms) +
      over_linears(function(i, o) return cast(ROWS * i) + cast(i * o) end)
    assert.is_true(close(want, fp8_rerun), string.format("%.12g by hand, %.12g modelled", want, fp8_rerun))
  end)
end)
