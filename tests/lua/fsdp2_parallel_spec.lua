-- framework = fsdp2 composed with the other parallel axes, as torchtitan runs
-- them. Expectations are worked out here from the libraries' rules (cited
-- at each test), on dims that do not divide the ranks, not read from the
-- engine. No PyTorch run checks FSDP2 here (the CPU harness's torch is 1.13).
local helper = require("tests.lua.helper")

local function ceil_div(a, b) return (a + b - 1) // b end

-- a Llama whose every dim 0 leaves a remainder over 8 ranks: hidden 100, 5
-- heads of 20, one key/value head, intermediate 270, vocabulary 1003
local H, HEAD_DIM, KV, FFN, VOCAB = 100, 20, 1, 270, 1003
local SHAPE = { "--set", "hidden=" .. H, "--set", "heads=5", "--set", "kv_heads=" .. KV, "--set",
  "intermediate=" .. FFN, "--set", "vocab=" .. VOCAB, "--set", "framework=fsdp2", "--set", "device=cpu" }
local function estimate(...) return helper.estimate_on("llama2-7b", SHAPE, ...) end

-- each parameter as (dim 0, the rest)
local BLOCK = {
  { H, 1 }, { 5 * HEAD_DIM, H }, { KV * HEAD_DIM, H }, { KV * HEAD_DIM, H }, { H, 5 * HEAD_DIM },
  { H, 1 }, { FFN, H }, { FFN, H }, { H, FFN },
}
local EMBED = { { VOCAB, H } }
local HEAD = { { H, 1 }, { VOCAB, H } } -- the final norm and lm_head

local function sum(params, f, times)
  local n = 0
  for _, p in ipairs(params) do n = n + f(p) end
  return n * (times or 1)
end
local function numel(p) return p[1] * p[2] end

describe("fsdp2 with pp (torch.distributed.pipelining)", function()
  local DP = 8
  local function shard(p) return ceil_div(p[1], DP) * p[2] end      -- FSDP2's dim-0 shard
  local function gathered(p) return ceil_div(p[1], DP) * DP * p[2] end -- its padded all-gather output

  -- 5 layers over pp 2 under 1F1B: (5 + 2) / 2 = 3, one more for stage 0:
  -- stage 0 4 - 1 = 3 blocks and the embeddings, stage 1 3 - 1 = 2 blocks
  -- and the head (torchtitan's split)
  local stage0 = { blocks = 3, root = EMBED }
  local stage1 = { blocks = 2, root = HEAD }
  local function of(stage, f) return sum(BLOCK, f, stage.blocks) + sum(stage.root, f) end

  it("keeps the stage gathered and its gradients unsharded in fp32 until the last micro-batch", function()
    -- torchtitan (apply_fsdp, pp): reshard_after_forward=False; PipelineStage
    -- backward_maybe_with_nosync: no gradient sync, no reshard after
    -- backward; FSDPParam.to_accumulated_grad_if_needed: the unsharded
    -- gradient in reduce_dtype (fp32). At the peak (backward) the rank holds
    -- its fp32 shards, every parameter gathered in bf16 (padded) and every
    -- gradient accumulated in fp32 (unpadded, the unsharded parameter's size)
    local r = estimate("--set", "layers=5", "--set", "dp=" .. DP, "--set", "pp=2", "--set", "pp_schedule=1F1B",
      "--set", "num_microbatches=4")
    for i, stage in ipairs({ stage0, stage1 }) do
      local rank = r.per_rank[i]
      assert.are.equal(4 * of(stage, shard), rank.params_bytes)
      assert.are.equal(4 * of(stage, shard) + 2 * of(stage, gathered), rank.peak_breakdown.params)
      local accumulated = 4 * of(stage, numel)
      -- and the bf16 gradients of the last micro-batch made so far (at
      -- most one block's)
      local grads = rank.peak_breakdown.grads
      assert.is_true(grads >= accumulated and grads <= accumulated + 2 * sum(BLOCK, numel),
        string.format("stage %d: %d gradient bytes at the peak, %d accumulated", i - 1, grads, accumulated))
    end
    -- the last stage peaks at the loss, before any gradient of the last
    -- micro-batch: exactly the accumulated ones
    assert.are.equal(4 * of(stage1, numel), r.per_rank[2].peak_breakdown.grads)
  end)

  it("repeats for the micro-batches in flight their activations, not the stage's gathered parameters", function()
    -- the gathered blocks (padded to dp) and the accumulated gradients are
    -- the stage's, held once: a micro-batch's activations do not depend on
    -- dp, where the padding of the gathered parameters does (8 and 3 pad
    -- these dims differently)
    local function activations(dp)
      local r = estimate("--set", "layers=5", "--set", "dp=" .. dp, "--set", "pp=2", "--set", "pp_schedule=1F1B",
        "--set", "num_microbatches=4")
      return { r.per_rank[1].activations_bytes, r.per_rank[2].activations_bytes }
    end
    assert.are.same(activations(8), activations(3))
  end)

  it("gives the same peak folded and unfolded", function()
    helper.assert_folds_agree(helper.model("llama2-7b", 6), {
      { framework = "fsdp2", dp = 8, pp = 2, pp_schedule = "1F1B", num_microbatches = 4 },
      { framework = "fsdp2", dp = 8, pp = 2, pp_schedule = "Interleaved1F1B", num_microbatches = 4 },
      { framework = "fsdp2", dp = 8, pp = 2, pp_schedule = "GPipe", num_microbatches = 2, checkpointing = "full" },
    })
  end)

  it("refuses Megatron-LM's schedules, naming the key", function()
    local err = helper.fails("llama2-7b", "--set", "framework=fsdp2", "--set", "dp=8", "--set", "pp=2")
    assert.truthy(err:find("pp_schedule: framework = fsdp2 runs torch.distributed.pipelining's schedules", 1, true),
      err)
  end)
end)

describe("fsdp2 with tp (DTensor's plans, as torchtitan's apply_tp)", function()
  -- tp 5 over 5 heads of 20 (5 key/value heads), intermediate 270 (54 a
  -- rank), vocabulary 1003; dp 3, which divides none of the local dim 0s
  local DP, TP = 3, 5
  local function shard(p) return ceil_div(p[1], DP) * p[2] end
  -- the tp-local shapes: ColwiseParallel splits wq, wk, wv, w1, w3 and the
  -- head on their outputs (dim 0), RowwiseParallel wo, w2 and the embedding
  -- (nn.Embedding's dim 0, the vocabulary) on their inputs; norms whole
  -- (SequenceParallel). DTensor's Shard(0) of the vocabulary is unpadded:
  -- ceil(1003 / 5) = 201 rows, where Megatron-LM pads to 1280 (256 a rank)
  local V = ceil_div(VOCAB, TP)
  local LOCAL_BLOCK = {
    { H, 1 }, { 100 / TP, H }, { 100 / TP, H }, { 100 / TP, H }, { H, 100 / TP },
    { H, 1 }, { FFN / TP, H }, { FFN / TP, H }, { H, FFN / TP },
  }
  local LOCAL_ROOT = { { V, H }, { H, 1 }, { V, H } }

  it("shards each parameter's tp-local tensor on dim 0 over dp, the vocabulary unpadded", function()
    -- FSDP2 over the dp mesh of TP's DTensors (FSDPParam._init_sharded_param):
    -- ceil(local dim 0 / dp) rows; fp32 shards, fp32 gradients, two AdamW states
    local r = estimate("--set", "layers=3", "--set", "kv_heads=5", "--set", "dp=" .. DP, "--set", "tp=" .. TP,
      "--set", "sequence_parallel=true", "--set", "seq_len=250")
    local elements = sum(LOCAL_BLOCK, shard, 3) + sum(LOCAL_ROOT, shard)
    assert.are.equal(4 * elements, r.per_gpu.params_bytes)
    assert.are.equal(4 * elements, r.per_gpu.grads_bytes)
    assert.are.equal(8 * elements, r.per_gpu.optimizer_bytes)
  end)

  it("gathers each module's input once (PrepareModuleInput), saved by its column-parallel linears", function()
    -- torchtitan's layer plan: attention and feed_forward take Shard(1) and
    -- want Replicate(): one all-gather of the 16-bit hidden states
    -- (tokens x hidden) each, and the head's ColwiseParallel(input_layouts=
    -- Shard(1)) one more (in the loss phase): 2 layers x 2 in the forward,
    -- each 1 x 128 tokens x 4096 x 2 bytes. Megatron-LM gathers in each
    -- linear instead (and saves the shard).
    local model = helper.model("llama2-7b", 2)
    local sizes = helper.forward_sizes(model, { framework = "fsdp2", dp = 2, tp = 2, sequence_parallel = true,
      seq_len = 128, micro_batch = 1 }, "all_gather.module_input")
    assert.are.same({ 128 * 4096 * 2, 128 * 4096 * 2, 128 * 4096 * 2, 128 * 4096 * 2 }, sizes)
    assert.are.same({}, helper.forward_sizes(model, { framework = "megatron", tp = 2, sequence_parallel = true,
      seq_len = 128, micro_batch = 1 }, "all_gather.module_input"))
  end)

  it("gives the same peak folded and unfolded", function()
    helper.assert_folds_agree(helper.model("llama2-7b", 6), {
      { framework = "fsdp2", dp = 2, tp = 2, sequence_parallel = true },
      { framework = "fsdp2", dp = 2, tp = 2 },
      { framework = "fsdp2", dp = 2, tp = 2, sequence_parallel = true, checkpointing = "full" },
    })
  end)

  for name, test in helper.refusals("llama2-7b", { "framework=fsdp2", "dp=2" }, {
    { { "tp=2", "sequence_parallel=true", "async_tp=true" }, "async_tp: needs compile = true" },
    { { "tp=2", "kv_heads=1" }, "tp: must divide the key/value heads under DTensor's tensor parallelism" },
    { { "tp=2", "finetune=lora" }, "finetune: PEFT's adapters under DTensor's tensor parallelism" },
    { { "tp=2", "precision=fp8" }, "precision: Transformer Engine's fp8 under DTensor's tensor parallelism" },
  }) do it(name, test) end
end)

describe("fsdp2 with cp (PyTorch's context_parallel, SDPA's ring)", function()
  it("shards the parameters over dp x cp ranks (torchtitan's dp_shard_cp mesh)", function()
    -- dp 3 x cp 2 = 6 ranks: ceil(dim 0 / 6) rows each
    local function shard(p) return ceil_div(p[1], 6) * p[2] end
    local r = estimate("--set", "layers=3", "--set", "dp=3", "--set", "cp=2", "--set", "seq_len=256")
    assert.are.equal(4 * (sum(BLOCK, shard, 3) + sum(EMBED, shard) + sum(HEAD, shard)), r.per_gpu.params_bytes)
  end)

  it("keeps what SDPA keeps on s / cp tokens: the activations of a cp-fold shorter sequence", function()
    -- context_parallel shards the inputs, labels and rotary buffers on the
    -- sequence; the ring's autograd node is SDPA's (q, k, v, output and
    -- log-sum-exp of the local tokens). Both shard over 8 ranks, so that
    -- the gathered blocks kept through forward are padded alike.
    local long = estimate("--set", "layers=3", "--set", "dp=2", "--set", "cp=4", "--set", "seq_len=1024")
    local short = estimate("--set", "layers=3", "--set", "dp=8", "--set", "seq_len=256")
    assert.are.equal(short.per_gpu.activations_bytes, long.per_gpu.activations_bytes)
  end)

  it("all-gathers every rank's keys and values once a layer (rotate_method allgather)", function()
    -- torch.cat of this rank's K and V (b x t x heads x head_dim each, 16-bit),
    -- gathered from cp ranks: cp x 2 x 1 x 128 x 32 x 128 x 2 bytes for
    -- Llama-2-7B (32 heads, no repeat) at seq_len 256 over cp 2
    local sizes = helper.forward_sizes(helper.model("llama2-7b", 2), { framework = "fsdp2", dp = 2, cp = 2,
      seq_len = 256, micro_batch = 1 }, "attention.cp_kv_all_gather")
    assert.are.same({ 2 * 2 * 128 * 32 * 128 * 2, 2 * 2 * 128 * 32 * 128 * 2 }, sizes)
  end)

  it("gives the same peak folded and unfolded", function()
    helper.assert_folds_agree(helper.model("llama2-7b", 6), {
      { framework = "fsdp2", dp = 2, cp = 2, seq_len = 256 },
      { framework = "fsdp2", dp = 2, cp = 2, tp = 2, sequence_parallel = true, seq_len = 256 },
      { framework = "fsdp2", dp = 2, cp = 2, pp = 2, pp_schedule = "1F1B", seq_len = 256, checkpointing = "full" },
    })
  end)

  for name, test in helper.refusals("llama2-7b", { "framework=fsdp2", "dp=2" }, {
    { { "cp=2", "attention=flash" }, "cp: PyTorch's context parallelism rings SDPA's kernels" },
  }) do it(name, test) end
end)

describe("op-selective checkpointing over fsdp2", function()
  it("gives the same peak folded and unfolded with each axis", function()
    -- torchtitan's policy saves DTensor's reduce-scatter outputs under
    -- sequence parallelism and the ring's SDPA outputs under cp: the
    -- rerun must take back from the cache exactly what the forward put in
    helper.assert_folds_agree(helper.model("llama2-7b", 6), {
      { framework = "fsdp2", dp = 2, checkpointing = "op-selective" },
      { framework = "fsdp2", dp = 2, tp = 2, sequence_parallel = true, checkpointing = "op-selective" },
      { framework = "fsdp2", dp = 2, cp = 2, seq_len = 256, checkpointing = "op-selective" },
      { framework = "fsdp2", dp = 2, pp = 2, pp_schedule = "1F1B", checkpointing = "op-selective" },
    })
  end)
end)

describe("loss_parallel under DTensor's tensor parallelism", function()
  it("makes the full-size fp32 tensors loss.py's handlers make, in their order", function()
    -- torch/distributed/tensor/parallel/loss.py: _log_softmax makes
    -- shifted = x - max and exp(shifted) (freed once summed), then the
    -- result (shifted goes as it returns; the fp32 logits, which
    -- LogSoftmaxBackward does not save, after nll_loss);
    -- _nll_loss_and_log_softmax_backward makes a zero-filled grad_input,
    -- exp(x), grad_input + exp(x) (exp freed), the product with
    -- grad_output, then lets go of the sum and grad_input; the log-softmax
    -- backward hands the product on as it is. F: 2 x 1024 rows x 64,128
    -- (128,256 / 2) fp32 values; the bf16 logits are F / 2.
    local r = helper.estimate("llama3.2-1b", "--set", "framework=fsdp2", "--set", "gpus=4", "--set", "tp=2", "--set",
      "sequence_parallel=true", "--set", "seq_len=1024", "--set", "micro_batch=2", "--set", "keep_logits=false",
      "--set", "optimizer=none", "--timeline")
    local F = 2048 * 64128 * 4
    local seen = {}
    for _, e in ipairs(r.timeline) do
      if (e.phase == "loss" or e.phase == "backward") and math.abs(e.delta) == F then
        seen[#seen + 1] = (e.delta > 0 and "+" or "-") .. e.op
        if #seen == 16 then break end
      end
    end
    assert.same({ "+loss.logits_float", "+loss_parallel.shifted", "+loss_parallel.exp", "-loss_parallel.exp",
      "+loss.log_softmax", "-loss_parallel.shifted", "-loss.logits_float",
      "+loss_parallel.grad_input", "+loss_parallel.exp", "+loss_parallel.grad_input_plus_exp",
      "-loss_parallel.exp", "+loss.nll_loss", "-loss_parallel.grad_input_plus_exp", "-loss_parallel.grad_input",
      "-loss.log_softmax", "-loss.nll_loss" }, seen)
  end)
end)

describe("fp8-torchao and compile under DTensor's tensor parallelism", function()
  it("give the same peak folded and unfolded", function()
    helper.assert_folds_agree(helper.model("llama2-7b", 6), {
      { framework = "fsdp2", dp = 2, tp = 2, sequence_parallel = true, precision = "fp8-torchao" },
      { framework = "fsdp2", dp = 2, tp = 2, precision = "fp8-torchao", checkpointing = "op-selective" },
      { framework = "fsdp2", dp = 2, tp = 2, sequence_parallel = true, precision = "fp8-torchao", compile = true },
      { framework = "fsdp2", dp = 2, tp = 2, sequence_parallel = true, compile = true, checkpointing = "full" },
      { framework = "fsdp2", dp = 2, tp = 2, pp = 2, pp_schedule = "1F1B", sequence_parallel = true,
        precision = "fp8-torchao", fp8_all_gather = true, compile = true, checkpointing = "full" },
    })
  end)
end)
