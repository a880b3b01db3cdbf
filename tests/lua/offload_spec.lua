-- Activation offload (offload_activations): the forward under PyTorch's
-- torch.autograd.graph.save_on_cpu(pin_memory=True). What the engine packs
-- is checked tensor by tensor against PyTorch in tests/torch/compare.py;
-- these are the consequences a user plans with.
local helper = require("tests.lua.helper")
local vramplan = require("vramplan")

local function offload(...)
  return helper.estimate("llama2-7b", "--set", "precision=bf16", "--set", "micro_batch=1", "--set", "seq_len=512",
    "--set", "offload_activations=true", ...)
end

describe("activation offload", function()
  it("leaves on the GPU only what no node saves: the outputs and the batch", function()
    local r = offload()
    local logits = 512 * 32000 * 2       -- bf16, kept by the outputs
    local cache = 32 * 2 * 512 * 4096 * 2 -- every layer's keys and values (use_cache)
    local batch = 2 * 512 * 8            -- input_ids and labels
    local loss = 512                     -- one fp32 scalar in a 512-byte block
    assert.are.equal(logits + cache + batch + loss, r.per_gpu.activations_bytes)
    local uncached = offload("--set", "use_cache=false")
    assert.are.equal(logits + batch + loss, uncached.per_gpu.activations_bytes)
  end)

  it("copies the weights each matmul saves to the host as well", function()
    -- save_on_cpu packs every saved tensor, parameters included: each linear
    -- weight once (mm keeps it for its input's gradient)
    local r = offload()
    local embeddings = 32000 * 4096 * 2
    assert.is_true(r.host.cpu_bytes_per_rank > r.per_gpu.params_bytes - embeddings)
  end)

  it("packs a checkpointed layer's input and tensor arguments, a power of two each", function()
    local function host(layers, attention)
      return vramplan.estimate(helper.model("llama2-7b", layers), {
        precision = "bf16", micro_batch = 1, seq_len = 512, checkpointing = "full",
        offload_activations = true, attention = attention,
      }).host_bytes
    end
    -- per layer: hidden_states (512 x 4096 bf16, 4 MiB), position_ids and
    -- cache_position (512 int64 each); the (cos, sin) tuple stays with ctx
    local layer = 4 * 2 ^ 20 + 2 * 4096
    assert.are.equal(2 * layer, host(4, "sdpa") - host(2, "sdpa"))
    -- eager attention adds the causal mask, expanded to the batch: 512 x 513
    -- bf16 (LlamaModel's target_length is s + 1 without an attention mask),
    -- 525,312 bytes in a 1 MiB pinned block
    assert.are.equal(2 * (layer + 2 ^ 20), host(4, "eager") - host(2, "eager"))
  end)

  it("agrees with evaluating every layer", function()
    helper.assert_folds_agree(helper.model("llama2-7b", 5), {
      { offload_activations = true, precision = "bf16" },
      { offload_activations = true, precision = "amp-bf16", checkpointing = "full", attention = "eager" },
      { offload_activations = true, finetune = "lora", framework = "deepspeed", zero = 3, dp = 2,
        precision = "mixed-bf16" },
      { offload_activations = true, offload_torchtune = true, offload_trl = true, offload_streams = false,
        finetune = "lora", precision = "bf16" },
    })
  end)

  it("rejects Megatron's forward", helper.rejection(
    { "llama2-7b", "--set", "framework=megatron", "--set", "offload_activations=true" },
    "offload_activations: modelled as PyTorch's save_on_cpu around a whole forward"))

  -- TRL's OffloadActivations spans backward, where a reentrant checkpoint
  -- reruns the forward under its hooks; torchao's float8 tensors it keeps
  local trl = { "llama2-7b", "--set", "offload_activations=true", "--set", "offload_torchtune=true", "--set",
    "offload_trl=true" }
  local function with(extra)
    local args = { table.unpack(trl) }
    for _, a in ipairs(extra) do args[#args + 1] = a end
    return args
  end
  it("rejects TRL's offloading over reentrant checkpoints", helper.rejection(
    with({ "--set", "checkpointing=full", "--set", "use_reentrant=true" }),
    "offload_trl: TRL's offloading spans backward"))
  it("rejects TRL's offloading with torchao's float8", helper.rejection(
    with({ "--set", "precision=fp8-torchao", "--set", "framework=fsdp2", "--set", "dp=2" }),
    "offload_trl: not modelled with precision fp8-torchao"))
  it("rejects axolotl's clones without TRL's hooks", helper.rejection(
    { "llama2-7b", "--set", "offload_activations=true", "--set", "offload_torchtune=true", "--set",
      "offload_clone_views=true" },
    "offload_clone_views: is axolotl's patch of TRL's OffloadActivations: give offload_trl too"))
  it("rejects offload_trl without OffloadActivations", helper.rejection(
    { "llama2-7b", "--set", "offload_activations=true", "--set", "offload_trl=true" },
    "offload_trl: is how TRL runs OffloadActivations"))

  -- OffloadActivations.__enter__ at each training_step empties the cache
  -- when bitsandbytes is imported (trl/models/activation_offloading.py);
  -- the simulated allocator replays it (tests/c/test_allocator.c)
  it("empties the cache at each micro-batch under TRL's hooks where bitsandbytes is in use", function()
    local function empties(...)
      local r = helper.estimate("llama3.2-1b", "--set", "precision=amp-bf16", "--set", "seq_len=256",
        "--set", "micro_batch=1", "--set", "grad_accum=2", "--set", "offload_activations=true",
        "--set", "offload_torchtune=true", "--set", "offload_trl=true", "--timeline", ...)
      local n = 0
      for _, e in ipairs(r.timeline) do if e.op == "offload.empty_cache" then n = n + 1 end end
      return n
    end
    assert.are.equal(2, empties("--set", "finetune=qlora"))
    assert.are.equal(2, empties("--set", "finetune=lora", "--set", "optimizer=adamw-8bit"))
    assert.are.equal(0, empties("--set", "finetune=lora"))
  end)
end)
