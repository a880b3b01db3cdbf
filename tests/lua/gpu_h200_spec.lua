-- The GPU check's measurements on one NVIDIA H200 (tests/gpu/check.py, run
-- 2026-12-04 with torch 2.11 / CUDA 13.0; tests/reference/gpu_h200.json)
-- beside the engine's estimate of the same cases (tests/gpu/cases.json).
-- docs/gpu-check.md states every tolerance below and what is left.
local helper = require("tests.lua.helper")
local json = require("dkjson")

local measured = helper.read_json(helper.root .. "/tests/reference/gpu_h200.json")
local cases = {}
for _, c in ipairs(helper.read_json(helper.root .. "/tests/gpu/cases.json")) do cases[c.name] = c end

local function estimate(case, extra)
  local path = helper.write(json.encode(case.config), ".json")
  local sets = helper.sets_of(case.recipe)
  for _, kv in ipairs(extra or {}) do sets[#sets + 1] = kv end
  return helper.estimate(helper.with_sets(path, { "--gpu", "h200" }, sets)).per_gpu
end

-- Cases whose attention is SDPA without checkpointing: on this GPU SDPA runs
-- cuDNN's kernel, whose output is laid out [batch, heads, seq, head_dim]
-- like the query transformers made contiguous, so the head merge after it
-- (attn_output.transpose(1, 2).contiguous()) is a copy kept for o_proj's
-- backward: one [batch, seq, hidden] 16-bit tensor per layer.
local function cudnn_merge_copies(case)
  local r, c = case.recipe, case.config
  if r.attention ~= "sdpa" or r.checkpointing ~= "none" or r.finetune then return 0 end
  local layers = c.num_hidden_layers
  return layers * r.micro_batch * r.seq_len * c.hidden_size * 2 -- 16-bit
end

local function relative(estimated, actual) return estimated / actual - 1 end

describe("the GPU check on an H200", function()
  local default = measured.runs.default
  local expandable = measured.runs.expandable

  it("measured most cases (the three it could not run are named)", function()
    local ran, failed = 0, {}
    for _, m in ipairs(default.cases) do
      if m.error then failed[#failed + 1] = m.name else ran = ran + 1 end
    end
    assert.are.equal(15, ran)
    assert.are.equal(3, #failed)
  end)

  it("puts the allocated peak within 0.5 % (or 24 MiB) of max_memory_allocated(), cuBLAS's workspaces in it", function()
    for _, m in ipairs(default.cases) do
      local case = cases[m.name]
      if not m.error then
        local e = estimate(case)
        -- 0.5 %, or 24 MiB on a small step: the kernels' own scratch (BERT's
        -- 19.5 MiB, DoRA's 16.8 MiB at 1.6 GiB) is not modelled
        local err = relative(e.peak_allocated_bytes, m.peak_allocated_bytes)
        local short = math.abs(m.peak_allocated_bytes - e.peak_allocated_bytes)
        assert.is_true(math.abs(err) <= 0.005 or short <= 24 << 20, string.format("%s: %+.2f %%", m.name, 100 * err))
        assert.are.equal(64 << 20, e.peak_breakdown.workspace, m.name)
      end
    end
  end)

  it("finds SDPA running cuDNN's kernel on it: with the flash kernel's layout it would be short a copy a layer", function()
    local seen = 0
    for _, m in ipairs(default.cases) do
      local case = cases[m.name]
      local copies = cudnn_merge_copies(case)
      if not m.error and copies > 0 then
        seen = seen + 1
        local flash = estimate(case, { "sdpa_backend=flash" })
        local short = m.peak_allocated_bytes - flash.peak_allocated_bytes
        assert.is_true(math.abs(short - copies) <= 20 << 20,
          string.format("%s: short by %.1f MiB, the copies %.1f MiB", m.name, short / 2 ^ 20, copies / 2 ^ 20))
        -- torchtune's and torchtitan's query is a transposed view: no copy
        local torchtune = estimate(case, { "model_code=torchtune" })
        assert.is_true(math.abs(torchtune.peak_allocated_bytes - flash.peak_allocated_bytes) <= 1 << 20, m.name)
      end
    end
    assert.are.equal(4, seen)
    -- the kernel said: cuDNN's on the H200, the flash kernel on an A100 or
    -- when asked, the memory-efficient one for fp32 inputs
    local function kernel(...)
      return helper.estimate("llama3.2-1b", ...).sdpa_kernel
    end
    assert.are.equal("cudnn", kernel("--gpu", "h200"))
    assert.are.equal("flash", kernel("--gpu", "a100-80gb"))
    assert.are.equal("flash", kernel("--gpu", "h200", "--set", "sdpa_backend=flash"))
    assert.are.equal("efficient", kernel("--gpu", "h200", "--set", "precision=fp32"))
    assert.is_nil(kernel("--gpu", "h200", "--set", "attention=eager"))
  end)

  it("rejects an unknown SDPA backend, naming the key",
    helper.rejection({ "gpt2", "--set", "sdpa_backend=fa3" }, "sdpa_backend"))
  it("rejects an unknown model code, naming the key",
    helper.rejection({ "gpt2", "--set", "model_code=megatron" }, "model_code"))

  it("puts the simulated allocator's reservation within 15 % of max_memory_reserved() (DoRA's short step apart)", function()
    for _, run in ipairs({ { default, {} }, { expandable, { "alloc_conf=expandable_segments:True" } } }) do
      for _, m in ipairs(run[1].cases) do
        if not m.error and not m.name:find("dora", 1, true) then
          local sets = { "allocator=simulated" }
          for _, kv in ipairs(run[2]) do sets[#sets + 1] = kv end
          local e = estimate(cases[m.name], sets)
          local err = relative(e.peak_reserved_bytes, m.peak_reserved_bytes)
          assert.is_true(math.abs(err) <= 0.15, string.format("%s (%s): %+.1f %%", m.name,
            run[1].alloc_conf == "" and "default" or run[1].alloc_conf, 100 * err))
        end
      end
    end
  end)

  it("models torch.compile's compiled layers (the one case run compiled: the eager estimate 15 % above it)", function()
    local ran = 0
    for _, m in ipairs(measured.runs.compiled.cases) do
      if not m.error then
        ran = ran + 1
        local case = cases[m.name]
        local compiled = estimate(case, { "compile=true" })
        local err = relative(compiled.peak_allocated_bytes, m.peak_allocated_bytes)
        assert.is_true(math.abs(err) <= 0.005, string.format("%s compiled: %+.2f %%", m.name, 100 * err))
        -- the eager estimate would not do: the compiled layers keep less
        assert.is_true(relative(estimate(case).peak_allocated_bytes, m.peak_allocated_bytes) > 0.1)
      end
    end
    assert.are.equal(1, ran)
  end)

  it("takes the H200's CUDA context from the catalog: the measured one after the cases", function()
    local e = estimate(cases["llama-1b bf16 checkpointed"])
    local context = default.context_after_cases_bytes
    assert.is_true(math.abs(e.cuda_context_bytes - context) <= 1 << 20,
      string.format("%d against %d", e.cuda_context_bytes, context))
    -- the recipe's own figure wins
    local own = estimate(cases["llama-1b bf16 checkpointed"], { "cuda_context_mib=500" })
    assert.are.equal(500 << 20, own.cuda_context_bytes)
  end)

  it("reads cuDNN's SDPA workspaces as the engine counts them: an fp32 dQ accumulator and row sums", function()
    -- the flash rule (op_attention.c backward_flash) for these shapes: the
    -- gradients of q, k, v, dq_accum [b, s, h, d] and softmax_d [b, h, s] in fp32
    local shapes = { ["llama-1b 4 x 2048"] = { 4, 16, 2048, 128 }, ["llama-1b 8 x 4096"] = { 8, 16, 4096, 128 },
                     ["llama3-8b 2 x 4096"] = { 2, 32, 4096, 128 }, ["qwen2.5-0.5b 8 x 2048"] = { 8, 14, 2048, 64 } }
    local checked = 0
    for _, s in ipairs(measured.sdpa.shapes) do
      local shape = shapes[s.name]
      if shape then
        checked = checked + 1
        local b, h, n, d = table.unpack(shape)
        -- each allocation rounded to 512 bytes by the caching allocator
        local round = function(x) return (x + 511) // 512 * 512 end
        -- and cuDNN's own workspace beside them, by shape: 512 bytes, or at
        -- most one more row-sum-sized buffer (llama3-8b's shape)
        local extra = s.backward_peak_above_bytes - (s.grads_bytes + round(b * n * h * d * 4) + round(b * h * n * 4))
        assert.is_true(extra >= 0 and extra <= round(b * h * n * 4) + 512, s.name .. ": " .. extra)
        -- what forward keeps beside the output: the fp32 log-sum-exp and two 8-byte RNG scalars
        assert.are.equal(round(b * h * n * 4) + 2 * 512, s.forward_kept_bytes, s.name)
      end
    end
    assert.are.equal(4, checked)
  end)
end)
