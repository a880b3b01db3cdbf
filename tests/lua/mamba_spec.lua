-- Mamba-2 as Lua blocks (models/examples/mamba2-130m.lua, its family
-- models/examples/arch/mamba2.lua): the parameter count against the module
-- shapes of mamba_ssm 2.2.4 added up here, apart from the engine, and
-- the fused kernel's eight gradient-receiving inputs (more than an autograd
-- node's four slots: engine/ops/kernel.c chains nodes) getting their
-- gradients as one autograd.Function's backward makes them.
local helper = require("tests.lua.helper")
local json = require("dkjson")

local model = "models/examples/mamba2-130m.lua"

-- state-spaces/mamba2-130m's config.json and Mamba2's defaults
local d_model, n_layer, vocab, d_state, d_conv, expand, headdim, ngroups = 768, 24, 50288, 128, 4, 2, 64, 1
local d_inner = expand * d_model
local nheads = d_inner // headdim
local conv_dim = d_inner + 2 * ngroups * d_state
local d_in_proj = 2 * d_inner + 2 * ngroups * d_state + nheads

describe("Mamba-2 130M as Lua blocks", function()
  -- mamba_ssm/modules/mamba2.py (v2.2.4), bias=False, conv_bias=True, and
  -- MixerModel: the embedding (the head tied to it), a RMSNorm per layer, norm_f
  local function params(hidden, layers)
    local inner = expand * hidden
    local heads = inner // headdim
    local conv = inner + 2 * ngroups * d_state
    local mixer = hidden * (2 * inner + 2 * ngroups * d_state + heads) -- in_proj
      + conv * 1 * d_conv + conv -- conv1d: (conv_dim, 1, d_conv) and its bias
      + 3 * heads -- dt_bias, A_log, D
      + inner -- norm (RMSNormGated)
      + inner * hidden -- out_proj
    return vocab * hidden + layers * (mixer + hidden) + hidden
  end

  it("has the parameters of mamba_ssm's modules, about the published 130M and 2.7B", function()
    local total = params(d_model, n_layer)
    assert.are.equal(total, helper.estimate(model).model.params)
    assert.are.equal(128989632, total)
    assert.is_true(math.abs(total - 130e6) / 130e6 < 0.01)
    -- state-spaces/mamba2-2.7b: d_model 2560, n_layer 64
    local big = params(2560, 64)
    assert.are.equal(big, helper.estimate("models/examples/mamba2-2.7b.lua").model.params)
    assert.is_true(math.abs(big - 2.7e9) / 2.7e9 < 0.01)
  end)

  it("has the same parameters with the reference SSD (reference = true), and refuses its scan under cp", function()
    assert.are.equal(params(d_model, n_layer), helper.estimate(model, "--set", "reference=true").model.params)
    local err = helper.fails(model, "--set", "reference=true", "--set", "framework=megatron", "--set", "cp=2")
    assert.truthy(err:find("cp: block mixer: mixer.pad cuts the sequence into chunks (F.chunks, F.chunk_padding); "
      .. "a chunked scan split over context-parallel ranks", 1, true), err)
  end)

  -- Megatron-LM's MambaMixer.__init__ (megatron/core/ssm/mamba_mixer.py at 00bebb45):
  -- assert self.ngroups % tp_size == 0, assert self.nheads % tp_size == 0; the
  -- checkpoints' ngroups is 1 (state-spaces/mamba2-130m config.json: ngroups absent, Mamba2's default 1)
  it("refuses tp > 1 as Megatron-LM does (ngroups, nheads), and its split where Megatron would run it", function()
    for _, extra in ipairs({ {}, { "--set", "reference=true" } }) do
      local function fails(...)
        local args = { model, "--set", "framework=megatron" }
        for _, a in ipairs(extra) do args[#args + 1] = a end
        for _, a in ipairs({ ... }) do args[#args + 1] = a end
        return helper.fails(table.unpack(args))
      end
      local err = fails("--set", "tp=2")
      assert.truthy(err:find("tp: block mixer: must divide ngroups (1): Megatron-LM's MambaMixer asserts ngroups "
        .. "% tp_size == 0", 1, true), err)
      -- (Megatron's nheads % tp_size follows from ngroups % tp_size and its
      -- nheads % ngroups == 0: no model reaches it alone)
      -- tp = 1 (and ngroups 2) still runs
      local args = { model, "--set", "framework=megatron", "--set", "groups=2" }
      for _, a in ipairs(extra) do args[#args + 1] = a end
      assert.is_true(helper.estimate(table.unpack(args)).model.params > 0)
    end
    -- where Megatron would run it, the reference path (transformers' module) is not split
    local err = helper.fails(model, "--set", "framework=megatron", "--set", "reference=true", "--set", "tp=2", "--set",
      "groups=2")
    assert.truthy(err:find("tp: block mixer: more than 1 with reference = true is not modelled", 1, true), err)
  end)

  it("gives the same figures folded and layer by layer with the reference SSD", function()
    helper.assert_folds_agree(helper.model(model, 2, { reference = true }), {
      { seq_len = 300 },
      { precision = "amp-bf16", checkpointing = "full", seq_len = 512 },
      { use_reentrant = false, checkpointing = "every-2", precision = "bf16", seq_len = 100 },
      -- under Megatron the first layer takes the 16-bit embedding and hands
      -- on its fp32 residual stream (residual_in_fp32): unlike the others,
      -- so the step is evaluated layer by layer (it failed as a "sizes
      -- overflow" when folded: the fold repeated the first layer's
      -- narrowing gradient)
      { framework = "megatron", seq_len = 256 },
      { framework = "megatron", seq_len = 256, checkpointing = "full" },
    })
    local r = helper.estimate(model, "--set", "reference=true", "--set", "framework=megatron", "--set", "seq_len=256")
    assert.is_true(r.per_gpu.peak_allocated_bytes > 0)
  end)

  it("makes all eight input gradients of the fused kernel before its workspace, as one Function does", function()
    local out, err, code = helper.run("estimate", model, "--json", "--timeline", "--set", "layers=1", "--set",
      "seq_len=256", "--set", "precision=amp-bf16")
    assert(code == 0, err)
    local timeline = json.decode(out).timeline
    -- MambaSplitConv1dScanCombinedFn.backward returns dzxbcdt (bf16: in_proj's
    -- output under autocast), then the fp32 parameters' gradients
    local tokens = 256
    -- (the timeline counts the caching allocator's 512-byte blocks)
    local function blocks(bytes) return (bytes + 511) // 512 * 512 end
    local grads = {}
    for i, bytes in ipairs({ tokens * d_in_proj * 2, conv_dim * d_conv * 4, conv_dim * 4, nheads * 4, nheads * 4,
                             nheads * 4, d_inner * 4, d_model * d_inner * 4 }) do
      grads[i] = blocks(bytes)
    end
    local first
    for i, e in ipairs(timeline) do
      if e.phase == "backward" and e.op == "mixer" and e.delta > 0 then
        first = i
        break
      end
    end
    assert.truthy(first, "the kernel's backward")
    local seen = {}
    for j = 1, #grads do seen[j] = timeline[first + j - 1].delta end
    -- in input order: zxbcdt, conv1d weight and bias, dt_bias, A (fp32:
    -- -exp(A_log.float())), D, the norm's weight, out_proj's weight
    assert.are.same(grads, seen)
    -- then the workspace, beside every one of them
    local ws = timeline[first + #grads]
    assert.are.equal("mixer", ws.op)
    assert.is_true(ws.delta > 0 and timeline[first + #grads + 1].delta == -ws.delta)
  end)

  it("keeps what the kernel's ctx.save_for_backward keeps: the cast out_proj weight under autocast", function()
    local function kept(precision)
      local out, err, code = helper.run("estimate", model, "--json", "--timeline", "--set", "layers=1", "--set",
        "seq_len=256", "--set", "precision=" .. precision)
      assert(code == 0, err)
      local sum = 0
      for _, e in ipairs(json.decode(out).timeline) do
        if e.phase == "forward" and e.op == "mixer" then sum = sum + e.delta end
      end
      return sum
    end
    local tokens = 256
    -- out (the layer's output, freed later by the residual), out_x, rstd;
    -- under autocast with fp32 weights also outproj_weight.to(bfloat16)
    local pure = tokens * d_model * 2 + tokens * d_inner * 2 + tokens * 4
    assert.are.equal(pure, kept("bf16") + tokens * d_model * 2) -- the output went with the residual add
    assert.are.equal(pure + d_model * d_inner * 2, kept("amp-bf16") + tokens * d_model * 2)
  end)

  it("lets LoRA target the mixer's projections by their own names", function()
    -- PEFT's LoRA Linear: lora_A (r x in_features) and lora_B (out_features x r)
    local r = 16
    local function trainable(targets)
      return helper.estimate(model, "--set", "finetune=lora", "--set", "lora_rank=" .. r, "--set",
        "lora_targets=" .. targets).model.trainable_params
    end
    assert.are.equal(n_layer * r * (d_model + d_in_proj), trainable("in_proj"))
    assert.are.equal(n_layer * r * (d_inner + d_model), trainable("out_proj"))
    assert.are.equal(n_layer * r * (d_model + d_in_proj + d_inner + d_model), trainable("in_proj,out_proj"))
  end)

  it("gives the same figures folded and layer by layer (the kernel's node chain under every recipe)", function()
    helper.assert_folds_agree(helper.model(model, 4), {
      {},
      { precision = "amp-bf16", checkpointing = "full" },
      { finetune = "lora", lora_targets = "in_proj", precision = "amp-bf16", offload_activations = true },
      { use_reentrant = false, checkpointing = "every-2", precision = "amp-bf16" },
    })
  end)
end)

-- Megatron-LM's tensor-parallel MambaMixer (megatron/core/ssm/mamba_mixer.py at 00bebb45) on
-- Codestral Mamba 7B (models/examples/mamba-codestral-7b.lua: ngroups 8), each rank's
-- parameters and one layer's activations worked out here from Megatron's shapes.
describe("Mamba-2 under Megatron-LM's tensor parallelism (ngroups 8)", function()
  local codestral = "models/examples/mamba-codestral-7b.lua"
  -- mistralai/Mamba-Codestral-7B-v0.1 params.json, mamba_ssm's Mamba2 defaults
  local hidden, layers, vocab, groups = 4096, 64, 32768, 8
  local inner = expand * hidden
  local heads = inner // headdim

  it("has the published 7,285,403,648 parameters (mistral.ai/news/codestral-mamba)", function()
    local mixer = hidden * (2 * inner + 2 * groups * d_state + heads) + (inner + 2 * groups * d_state) * (d_conv + 1)
      + 3 * heads + inner + inner * hidden
    local total = layers * (mixer + hidden) + 2 * vocab * hidden + hidden -- untied embedding and head, norm_f
    assert.are.equal(7285403648, total)
    assert.are.equal(total, helper.estimate(codestral).model.params)
  end)

  -- one layer's parameters on one rank: two layers' bytes less one layer's (fp32: 4 bytes each)
  local function layer_bytes(tp)
    local function bytes(n)
      return helper.estimate(codestral, "--set", "framework=megatron", "--set", "precision=fp32", "--set", "tp=" .. tp,
        "--set", "layers=" .. n).per_gpu.params_bytes
    end
    return bytes(2) - bytes(1)
  end

  it("gives each rank Megatron's shares of in_proj, conv1d, A_log, D, dt_bias, the norm and out_proj", function()
    for _, tp in ipairs({ 1, 2, 4, 8 }) do
      -- MambaMixer.__init__: in_proj ColumnParallelLinear(d_model, 2 d_inner + 2 ngroups d_state + nheads),
      -- conv1d_weight [conv_dim local, 1, d_conv] and its bias, dt_bias, A_log, D [nheads local],
      -- norm [d_inner local], out_proj RowParallelLinear(d_inner, d_model); the layer's own
      -- norm (d_model) on every rank
      local d_inner_l, groups_l, heads_l = inner // tp, groups // tp, heads // tp
      local per_rank = (2 * d_inner_l + 2 * groups_l * d_state + heads_l) * hidden
        + (d_inner_l + 2 * groups_l * d_state) * d_conv + (d_inner_l + 2 * groups_l * d_state)
        + 3 * heads_l + d_inner_l + hidden * d_inner_l + hidden
      assert.are.equal(4 * per_rank, layer_bytes(tp), "tp " .. tp)
    end
  end)

  it("refuses a tp that does not divide ngroups, with Megatron's reason, and DTensor's tp", function()
    local err = helper.fails(codestral, "--set", "framework=megatron", "--set", "tp=16")
    assert.truthy(err:find("tp: block mixer: must divide ngroups (8): Megatron-LM's MambaMixer asserts", 1, true), err)
    -- no DTensor plan splits mamba_ssm's Mamba2 (torchtitan has none): Megatron's split only
    err = helper.fails(codestral, "--set", "framework=fsdp2", "--set", "tp=2")
    assert.truthy(err:find("tp: a Lua block's fused kernel (F.kernel) on a column-parallel tensor is modelled under "
      .. "Megatron-LM's tensor parallelism, not DTensor's (framework = fsdp2)", 1, true), err)
  end)

  -- One layer's forward on one rank, event by event (mixed-bf16: Megatron's params and
  -- activations in bf16), from MambaMixer._ssm_training and the sources its kernels cite.
  local function mixer_events(tp, micro_batch, sp)
    local out, err, code = helper.run("estimate", codestral, "--json", "--timeline", "--set", "framework=megatron",
      "--set", "tp=" .. tp, "--set", "layers=1", "--set", "seq_len=512", "--set", "micro_batch=" .. micro_batch,
      "--set", "sequence_parallel=" .. tostring(sp))
    assert(code == 0, err)
    local seen = {}
    for _, e in ipairs(json.decode(out).timeline) do
      if e.phase == "forward" and e.layer == 0 and (e.op:find("^mixer") or e.op == "all_gather.input"
          or e.op == "reduce_scatter") then
        seen[#seen + 1] = e.op .. " " .. e.delta
      end
    end
    return seen
  end

  local function expected(tp, micro_batch, sp)
    local tokens = micro_batch * 512
    local function blocks(bytes) return (bytes + 511) // 512 * 512 end
    local d_inner_l, groups_l, heads_l = inner // tp, groups // tp, heads // tp
    local conv_l = d_inner_l + 2 * groups_l * d_state
    local zxbcdt = tokens * (2 * d_inner_l + 2 * groups_l * d_state + heads_l) * 2 -- in_proj's output, bf16
    local y = tokens * d_inner_l * 2
    -- the kernel's forward locals: xBC_conv (conv_dim, bf16), dt_out and dA_cumsum
    -- (b, h, nchunks, chunk) fp32, states (b, nchunks, h, p, n) fp32 and in C's dtype,
    -- CB (b, nchunks, g, chunk, chunk) fp32 (chunk 256: two chunks of 512)
    local states = tokens // 256 * heads_l * headdim * d_state
    local workspace = tokens * conv_l * 2 + 2 * tokens * heads_l * 4 + states * 4 + states * 2
      + tokens // 256 * groups_l * 256 * 256 * 4
    local small = blocks(heads_l * 4) -- A_log.float(), exp, -, dt_bias.float(): nheads local fp32
    local e = {}
    local function add(op, delta) e[#e + 1] = op .. " " .. delta end
    if sp then add("all_gather.input", tokens * hidden * 2) end -- the norm's output gathered, bf16
    add("mixer.in_proj", zxbcdt)
    if sp then add("all_gather.input", -tokens * hidden * 2) end
    -- rearrange(zxBCdt, "l b d -> b l d").contiguous(): a copy unless b = 1
    if micro_batch > 1 then
      add("mixer.rearrange", zxbcdt)
      add("mixer.in_proj", -zxbcdt)
    end
    add("mixer.to", small)
    add("mixer.exp", small)
    add("mixer.to", -small)
    add("mixer.neg", small)
    add("mixer.to", small)
    add("mixer", y) -- the scan's gated out
    add("mixer", y) -- out_x, kept
    add("mixer", workspace)
    add("mixer", -workspace)
    if micro_batch > 1 then
      add("mixer.rearrange", y) -- rearrange(y, "b l d -> l b d").contiguous()
      add("mixer", -y)
    end
    add("mixer.norm", y) -- rmsnorm_fn's out
    add("mixer.norm", blocks(tokens * groups_l * 4)) -- rstd, ngroups local per row
    add("mixer.out_proj", tokens * hidden * 2) -- the partial sums, then all-reduced or reduce-scattered
    if sp then add("reduce_scatter", tokens // tp * hidden * 2) end
    add("mixer.out_proj", -tokens * hidden * 2)
    -- (the mixer's output, freed by the residual add after it)
    if sp then add("reduce_scatter", -tokens // tp * hidden * 2) end
    return e
  end

  it("keeps one layer's activations on each rank as Megatron's shapes give, with and without sequence parallelism",
    function()
      for _, case in ipairs({ { 8, 2, false }, { 8, 2, true }, { 2, 2, false }, { 8, 1, true }, { 1, 2, false } }) do
        assert.are.same(expected(table.unpack(case)), mixer_events(table.unpack(case)),
          string.format("tp %d, micro_batch %d, sequence_parallel %s", case[1], case[2], tostring(case[3])))
      end
    end)

  it("gives the kernel's backward each rank's gradients and workspace", function()
    local out, err, code = helper.run("estimate", codestral, "--json", "--timeline", "--set", "framework=megatron",
      "--set", "tp=8", "--set", "layers=1", "--set", "seq_len=512", "--set", "micro_batch=2")
    assert(code == 0, err)
    local tokens, tp = 1024, 8
    local d_inner_l, groups_l, heads_l = inner // tp, groups // tp, heads // tp
    local conv_l = d_inner_l + 2 * groups_l * d_state
    local states = tokens // 256 * heads_l * headdim * d_state
    -- MambaSplitConv1dScanCombinedFn.backward: dzxbcdt (bf16), dweight and dbias of
    -- conv1d, ddt_bias, dA, dD (fp32, 512-byte blocks); then its locals: xBC_conv and
    -- dxBC (conv_dim local, bf16), dout_x (d_inner local, bf16), the states in C's dtype;
    -- dt, dA_cumsum, ddt, ddA_cumsum (b, h, nchunks, chunk) fp32, states and dstates fp32,
    -- CB (g local x chunk per row) fp32
    local want = { "mixer " .. tokens * (2 * d_inner_l + 2 * groups_l * d_state + heads_l) * 2,
                   "mixer " .. conv_l * d_conv * 2, "mixer " .. conv_l * 2, "mixer 512", "mixer 512", "mixer 512",
                   "mixer " .. (tokens * (2 * conv_l + d_inner_l) * 2 + states * 2 + 4 * tokens * heads_l * 4
                                + 2 * states * 4 + tokens * groups_l * 256 * 4) }
    local seen = {}
    for _, e in ipairs(json.decode(out).timeline) do
      if e.phase == "backward" and e.layer == 0 and e.op == "mixer" and e.delta > 0 and #seen < #want then
        seen[#seen + 1] = e.op .. " " .. e.delta
      end
    end
    assert.are.same(want, seen)
  end)

  it("gives the same figures folded and layer by layer under tp and sequence parallelism", function()
    helper.assert_folds_agree(helper.model(codestral, 3), {
      { framework = "megatron", tp = 8, sequence_parallel = true },
      { framework = "megatron", tp = 4, checkpointing = "full", micro_batch = 2 },
    })
  end)
end)
