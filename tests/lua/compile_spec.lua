-- compile = true: torchtitan's torch.compile of each TransformerBlock, the
-- block's saved tensors chosen by AOTAutograd's min-cut partitioner
-- (engine/step/compile_partition.c, checked on hand-made graphs in
-- tests/c/test_compile_partition.c; engine/step/compile_region.c reads the
-- block's graph; docs/compile.md). The published compiled runs are in
-- float8_compile_spec.lua.
local helper = require("tests.lua.helper")

local GIB = 2 ^ 30

describe("compile = true", function()
  it("saves the min cut's choice in Llama 3 8B's blocks, worked out by hand from the partitioner's rules", function()
    -- Per block, eager autograd saves and the cut does not: each RMSNorm's
    -- fp32 upcast (T x d x 4: read only by the norm's pointwise backward,
    -- not materialized, weight 2 x 1.1 x its size, recomputed from the
    -- block's input and the saved rsqrt) and its 16-bit normalized value
    -- before the weight (T x d x 2, likewise), and SiLU's output (T x i x 2,
    -- recomputed from the saved gate projection). The cut saves what
    -- eager does not: the block's input (T x d x 2, the cheapest source of
    -- the first norm) and o_proj's output (T x d x 2: a matmul's,
    -- materialized, cheaper than the residual sum it feeds, which is not
    -- materialized, x2). Everything else (matmul inputs and outputs
    -- backward reads unfusibly, q and the repeated k, v, SDPA's output and
    -- logsumexp, the rsqrts) is saved both ways. Net per block:
    -- -(2 T d 4 + T i 2); T = 2 x 8192 tokens, d = 4096, i = 14336.
    local sets = { "stack=torchtitan", "gpus=8", "micro_batch=2", "seq_len=8192", "checkpointing=none" }
    local function run(compile)
      local list = { "compile=" .. compile }
      for _, s in ipairs(sets) do list[#list + 1] = s end
      return helper.estimate(helper.with_sets("llama3-8b", {}, list)).per_gpu
    end
    local eager, compiled = run("false"), run("true")
    assert.equal(eager.peak_op, compiled.peak_op)
    local T, d, i = 2 * 8192, 4096, 14336
    assert.equal(-32 * (2 * T * d * 4 + T * i * 2), compiled.activations_bytes - eager.activations_bytes)
  end)

  it("compiles a block whose SDPA runs cuDNN's kernel with a mask (Phi-3 past its window on an H200)", function()
    -- the masked cuDNN call reads q, k, v, the mask, its log-sum-exp and two
    -- RNG scalars: seven values, one node (it was refused as an overflow);
    -- the min cut can only save less than eager attention keeps
    local config = helper.write('{"model_type": "phi3", "hidden_size": 512, "num_hidden_layers": 2, ' ..
      '"num_attention_heads": 8, "num_key_value_heads": 8, "intermediate_size": 1024, "vocab_size": 1024, ' ..
      '"sliding_window": 255}', ".json")
    local function run(compile)
      local out = helper.estimate(config, "--gpu", "h200", "--set", "precision=bf16", "--set", "seq_len=512",
        "--set", "attention=sdpa", "--set", "compile=" .. compile)
      assert.are.equal("cudnn", out.sdpa_kernel)
      return out.per_gpu.activations_bytes
    end
    local compiled, eager = run("true"), run("false")
    assert.is_true(compiled < eager, string.format("%d compiled, %d eager", compiled, eager))
  end)

  it("keeps what a checkpoint keeps under full and op-selective checkpointing", function()
    -- the partitioner honours the selective policy's tags: MUST_SAVE ops
    -- are saved, every other op is tagged PREFER_RECOMPUTE and recomputed,
    -- so the cut saves the policy's outputs and the block's input, as the
    -- eager checkpoint does (tests/c/test_compile_partition.c); a full
    -- checkpoint tags every op inside
    for _, ckpt in ipairs({ "full", "op-selective" }) do
      local function run(compile)
        return helper.estimate("llama3.2-1b", "--set", "stack=torchtitan", "--set", "gpus=2", "--set", "seq_len=512",
          "--set", "checkpointing=" .. ckpt, "--set", "compile=" .. compile).per_gpu
      end
      assert.equal(run("false").activations_bytes, run("true").activations_bytes)
    end
  end)

  it("fuses torchao's float8 casts inside the blocks: an amax and the 1-byte data, no full-size fp32 copies", function()
    -- docs/compile.md: Inductor makes abs, amax, to(float32), * scale,
    -- clamp, to(float8) one reduction and one kernel; the eager cast's
    -- float8.abs, .upcast, .scaled and .clamp tensors are gone in the
    -- blocks' forward and backward (the head stays eager: filter_fqns
    -- keeps it out of Float8 anyway)
    local function ops(compile)
      local r = helper.estimate("llama3.2-1b", "--set", "framework=fsdp2", "--set", "gpus=2", "--set", "seq_len=512",
        "--set", "precision=fp8-torchao", "--set", "compile=" .. compile, "--timeline")
      local seen = {}
      for _, e in ipairs(r.timeline) do
        if e.delta > 0 then seen[e.op] = (seen[e.op] or 0) + 1 end
      end
      return seen
    end
    local eager, compiled = ops("false"), ops("true")
    for _, op in ipairs({ "float8.abs", "float8.upcast", "float8.scaled", "float8.clamp" }) do
      assert.is_true((eager[op] or 0) > 0, op)
      assert.equal(nil, compiled[op], op)
    end
    assert.equal(eager["float8.data"], compiled["float8.data"])
    assert.equal(eager["float8.amax"], compiled["float8.amax"])
  end)

  it("keeps the ring's K/V all-gather under context parallelism, worked out by hand", function()
    -- torchtitan compiles each block with fullgraph=True, so context
    -- parallelism's ring (SDPA dispatched to _templated_ring_attention) is
    -- in the block's graph. CSE merges the backward's K/V all-gather with
    -- the forward's, and the partitioner bans the collective from
    -- recomputation (not in its allowlist): the cut keeps, beside what it
    -- keeps without cp (the first test's -(2 t d 4 + t i 2) a block), the
    -- gathered K and V of every rank, cp x 2 x t x heads x head_dim x 2
    -- bytes (K and V repeated to the 32 query heads before SDPA). Llama 3
    -- 8B, 16,384 tokens over cp 2: t = 8,192 a rank.
    local function run(cp, compile)
      return helper.estimate("llama3-8b", "--set", "stack=torchtitan", "--set", "gpus=8", "--set", "cp=" .. cp,
        "--set", "micro_batch=1", "--set", "seq_len=16384", "--set", "checkpointing=none", "--set",
        "compile=" .. compile).per_gpu.activations_bytes
    end
    local L, d, i = 32, 4096, 14336
    for _, cp in ipairs({ 1, 2 }) do
      local t = 16384 // cp
      local gathered = cp > 1 and cp * 2 * (t * 32 * 128) * 2 or 0
      assert.equal(-L * (2 * t * d * 4 + t * i * 2) + L * gathered, run(cp, "true") - run(cp, "false"))
    end
  end)

  it("keeps the recompute's K/V all-gather to the ring's backward under a full checkpoint", function()
    -- the block's input is all a fully checkpointed compiled block saves;
    -- its backward recomputes the forward, and the recompute's all-gather,
    -- merged with the backward's, lives until the ring's backward: through
    -- the MLP's backward, where eager's checkpoint rerun has let it go.
    -- Llama 3.2 1B, 1,024 tokens over cp 2: 2 x 2 x 512 x 32 x 64 x 2 bytes.
    local function mlp_backward_live(compile)
      local r = helper.estimate("llama3.2-1b", "--set", "framework=fsdp2", "--set", "gpus=2", "--set", "cp=2",
        "--set", "seq_len=1024", "--set", "checkpointing=full", "--set", "compile=" .. compile, "--timeline")
      local most = 0
      for _, e in ipairs(r.timeline) do
        if e.layer == 5 and e.phase == "backward" and e.op:sub(1, 4) == "mlp." then most = math.max(most, e.live) end
      end
      return most
    end
    assert.equal(2 * 2 * 512 * 32 * 64 * 2, mlp_backward_live("true") - mlp_backward_live("false"))
  end)

  it("with tensor parallelism under a checkpoint keeps what the eager checkpoint keeps", function()
    -- the partitioner honours full checkpointing's and the op-level
    -- policy's tags, and DTensor's functional collectives
    -- (all_gather_into_tensor, reduce_scatter_tensor) are outside its
    -- recomputable allowlist: the compiled step is the eager one, bf16 or
    -- float8 (whose casts, fused, make no full-size temporaries that
    -- outlive an op)
    for _, ck in ipairs({ "full", "op-selective" }) do
      for _, p in ipairs({ "mixed-bf16", "fp8-torchao" }) do
        local function run(compile)
          return helper.estimate("llama3.2-1b", "--set", "framework=fsdp2", "--set", "gpus=4", "--set", "tp=2",
            "--set", "sequence_parallel=true", "--set", "seq_len=1024", "--set", "micro_batch=2", "--set",
            "checkpointing=" .. ck, "--set", "precision=" .. p, "--set", "compile=" .. compile).per_gpu
        end
        local eager, compiled = run("false"), run("true")
        assert.equal(eager.activations_bytes, compiled.activations_bytes, ck .. " " .. p)
        if p == "mixed-bf16" then assert.equal(eager.peak_allocated_bytes, compiled.peak_allocated_bytes) end
      end
    end
  end)

  for _, case in ipairs({
    { { "framework=fsdp2", "cp=2", "checkpointing=op-selective" },
      "compile: context parallelism with selective checkpointing inside a compiled block" },
    { { "framework=fsdp2", "use_reentrant=true", "checkpointing=every-2" }, "compile: torchtitan checkpoints and compiles block by block" },
    { { "framework=megatron", "tp=2", "dp=1" }, "compile: modelled as torchtitan and torchtune compile each block" },
    { { "framework=deepspeed", "zero=3" }, "compile: modelled as torchtitan and torchtune compile each block" },
  }) do
    it("refuses compile with " .. table.concat(case[1], " "), function()
      local err = helper.fails(helper.with_sets("llama3.2-1b", { "--set", "gpus=2", "--set", "compile=true" }, case[1]))
      assert.truthy(err:find(case[2], 1, true), err)
    end)
  end

  it("compiles torchtune's blocks under framework torch the same way, and refuses the Trainer's whole-model compile", function()
    -- torchtune's compile_model compiles each decoder layer as torchtitan's
    -- apply_compile does: the same cut, worked out as above (Llama 3.2 1B:
    -- 16 blocks, d = 2048, i = 8192; T = 2 x 256 tokens)
    local function run(compile)
      return helper.estimate("llama3.2-1b", "--set", "stack=torchtune", "--set", "micro_batch=2", "--set",
        "seq_len=256", "--set", "checkpointing=none", "--set", "compile=" .. compile, "--set", "compile_loss=false").per_gpu
    end
    local T, d, i = 2 * 256, 2048, 8192
    assert.equal(-16 * (2 * T * d * 4 + T * i * 2), run("true").activations_bytes - run("false").activations_bytes)
    local err = helper.fails("llama3.2-1b", "--set", "stack=hf-trainer", "--set", "compile=true")
    assert.truthy(err:find("whole model", 1, true), err)
  end)

  it("keeps each chunk's 16-bit logits, not its fp32 log-probabilities, with torchtune's compile_loss", function()
    -- CEWithChunkedOutputLoss.compute_cross_entropy compiled: the upcast,
    -- log-softmax and nll fuse; the cut saves the chunk's bf16 logits (the
    -- region's input, 2 bytes an element) where eager autograd saved the
    -- fp32 log-softmax output (4): 2 bytes less for each of the 512 tokens
    -- x 128,256 logits
    local function run(compile_loss)
      return helper.estimate("llama3.2-1b", "--set", "stack=torchtune", "--set", "micro_batch=2", "--set",
        "seq_len=256", "--set", "checkpointing=full", "--set", "compile=true", "--set", "compile_loss=" .. compile_loss)
    end
    local compiled, eager = run("true"), run("false")
    assert.equal(true, run("true").recipe.compile_loss)
    assert.equal(-512 * 128256 * 2, compiled.per_gpu.activations_bytes - eager.per_gpu.activations_bytes)
    -- torchtune's stack compiles the loss with the model
    assert.equal(true, helper.estimate("llama3.2-1b", "--set", "stack=torchtune", "--set", "seq_len=256", "--set",
      "compile=true").recipe.compile_loss)
    local err = helper.fails("llama3.2-1b", "--set", "compile_loss=true")
    assert.truthy(err:find("needs compile = true", 1, true), err)
    err = helper.fails("llama3.2-1b", "--set", "compile=true", "--set", "compile_loss=true", "--set", "loss=fused")
    assert.truthy(err:find("compile_loss: modelled for the chunked loss", 1, true), err)
  end)

  it("runs the compiled loss as Inductor's fused kernels: no chunk of fp32 logits in memory, only its 16-bit gradient", function()
    -- 2 x 256 tokens in 8 chunks of 64; a chunk's logits 64 x 128,256: eagerly the
    -- loss allocates them in fp32 (the upcast, the log-probabilities, their
    -- gradients in backward); compiled, nothing of that size is ever
    -- allocated, and backward writes each chunk's bf16 gradient (it leaves
    -- the fused chain for lm_head's matmul)
    local fp32_chunk, bf16_chunk = 64 * 128256 * 4, 64 * 128256 * 2
    local function allocations(compile_loss, size, phase)
      local r = helper.estimate("llama3.2-1b", "--set", "stack=torchtune", "--set", "micro_batch=2", "--set",
        "seq_len=256", "--set", "checkpointing=full", "--set", "compile=true", "--set", "compile_loss=" .. compile_loss,
        "--timeline")
      local n = 0
      for _, e in ipairs(r.timeline) do
        if e.delta == size and (phase == nil and e.phase ~= "setup" or e.phase == phase) then n = n + 1 end
      end
      return n
    end
    -- eagerly, a chunk's upcast and log-probabilities in the loss, two fp32
    -- gradients in backward
    assert.equal(2 * 8, allocations("false", fp32_chunk, "loss"))
    assert.equal(2 * 8, allocations("false", fp32_chunk, "backward"))
    assert.equal(0, allocations("true", fp32_chunk))
    -- lm_head's chunks in the loss, their gradients in backward
    assert.equal(8, allocations("true", bf16_chunk, "loss"))
    assert.equal(8, allocations("true", bf16_chunk, "backward"))
  end)

  it("runs a compiled block's backward as fused kernels: no RMSNorm temporary of its own reaches memory", function()
    -- Llama 3.2 1B in bf16, 2 x 256 tokens: each RMSNorm's eager backward
    -- allocates fp32 [T, d] temporaries; 33 norms (2 a block, the final one).
    -- Compiled, only the final norm's, outside the blocks, remain; SDPA's
    -- fp32 dQ accumulator is an extern kernel's and stays
    local T, d = 2 * 256, 2048
    local function counts(compile)
      local r = helper.estimate("llama3.2-1b", "--set", "stack=torchtune", "--set", "micro_batch=2", "--set",
        "seq_len=256", "--set", "checkpointing=none", "--set", "compile=" .. compile, "--set", "compile_loss=false",
        "--set", "loss=cross-entropy", "--timeline")
      local n = {}
      for _, e in ipairs(r.timeline) do
        if e.phase == "backward" and e.delta == T * d * 4 then n[e.op] = (n[e.op] or 0) + 1 end
      end
      return n
    end
    local compiled, eager = counts("true"), counts("false")
    local norm_ops = 0
    for op, n in pairs(eager) do
      if op:find("^rmsnorm") then
        norm_ops = norm_ops + 1
        assert.equal(n, 33 * (compiled[op] or 0), op)
      end
    end
    assert.is_true(norm_ops >= 3)
    assert.equal(16, compiled["attention.flash_backward"])
  end)

  it("refuses mixtures of experts", function()
    local err = helper.fails("mixtral-8x7b", "--set", "framework=fsdp2", "--set", "gpus=8", "--set", "compile=true")
    assert.truthy(err:find("compile: mixtures of experts", 1, true), err)
  end)
end)

describe("offload_torchtune", function()
  -- torchtune's OffloadActivations (torchtune/training/_activation_offloading.py):
  -- saved tensors of 1,024 bytes or more that are not parameters; the head
  -- and the loss outside it (NoOpManager around the output projection)
  -- one stream (offload_streams false): the forward's stash would keep
  -- the last packs' tensors on the GPU beside what these tests count
  local function run(torchtune, ...)
    return helper.estimate("llama3.2-1b", "--set", "stack=torchtune", "--set", "micro_batch=2", "--set",
      "seq_len=256", "--set", "checkpointing=full", "--set", "offload_activations=true", "--set",
      "offload_torchtune=" .. torchtune, "--set", "offload_streams=false", ...)
  end

  it("keeps the head's and the loss's saved tensors and the parameters on the GPU, unlike save_on_cpu", function()
    local tune, plain = run("true"), run("false")
    -- the chunked loss's fp32 log-probabilities (512 tokens x 128,256 x 4)
    -- and the head's eight input chunks (2 x 32 x 2,048 x 2) stay
    local kept = tune.per_gpu.activations_bytes - plain.per_gpu.activations_bytes
    assert.is_true(kept >= 512 * 128256 * 4 + 8 * 2 * 32 * 2048 * 2, kept)
    assert.is_true(kept < 512 * 128256 * 4 + 8 * 2 * 32 * 2048 * 2 + 2 ^ 20, kept)
    -- save_on_cpu copies the tied head's weight for each chunk's matmul (8
    -- x 128,256 x 2,048 x 2 bytes); torchtune's hooks leave parameters
    assert.is_true(plain.host.cpu_bytes_per_rank - tune.host.cpu_bytes_per_rank >= 8 * 128256 * 2048 * 2)
    -- the 16 checkpointed layers' inputs (2 MiB each) go to the host
    assert.is_true(tune.host.cpu_bytes_per_rank >= 16 * 2 ^ 21)
  end)

  it("runs with use_streams from PyTorch 2.5 on, keeping the last layers' packs on the GPU into backward",
    function()
      -- OffloadActivations(use_streams=None): torch.__version__ >= "2.5.0.dev20240907"
      local function streams(version)
        return helper.estimate("llama3.2-1b", "--set", "stack=torchtune", "--set", "seq_len=256", "--set",
          "checkpointing=full", "--set", "offload_activations=true", "--set", "torch_version=" .. version)
          .recipe.offload_streams
      end
      assert.is_true(streams("2.x"))
      assert.is_true(streams("2.5"))
      assert.is_false(streams("2.4"))
      assert.is_false(streams("1.13"))
      -- the forward's stash keeps the last offloaded tensors of the forward
      -- (the final norm's fp32 input among them: 512 tokens x 2,048 x 4)
      -- into backward: more held at the end of forward than with one stream
      local on = run("true", "--set", "offload_streams=true").per_gpu.activations_bytes
      local off = run("true").per_gpu.activations_bytes
      assert.is_true(on - off >= 512 * 2048 * 4, on - off)
    end)

  it("composes with compile when every block is checkpointed, as torchtune runs it", function()
    assert.equal(true, run("true", "--set", "compile=true").recipe.compile)
    local err = helper.fails("llama3.2-1b", "--set", "stack=torchtune", "--set", "seq_len=256", "--set",
      "checkpointing=none", "--set", "offload_activations=true", "--set", "compile=true")
    assert.truthy(err:find("every block checkpointed", 1, true), err)
  end)
end)
