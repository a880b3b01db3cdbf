-- transformers' sdpa path by release (integrations/sdpa_attention.py):
-- from 4.54 (huggingface/transformers#39412) a model with fewer key/value
-- heads than query heads hands SDPA its key and value heads as they are
-- with enable_gqa=True when no mask is given (use_gqa_in_sdpa, PyTorch 2.5+)
-- instead of repeat_kv's copies to every query head; from 4.56 (#40315) the
-- query is no longer made contiguous, so cuDNN's output, laid out like the
-- query, needs no copy to merge the heads. The sizes below are worked out
-- from the shapes, not read from the engine.
local helper = require("tests.lua.helper")

-- llama3.2-1b: 16 layers, hidden 2048, 32 query heads of 64 over 8 key/value heads
local layers, hidden, heads, kv_heads, head_dim = 16, 2048, 32, 8, 64
local batch, seq = 2, 1024
local shape = { "--set", "seq_len=" .. seq, "--set", "micro_batch=" .. batch, "--set", "precision=bf16",
  "--set", "checkpointing=none" }

local function estimate(model, ...) return helper.estimate_on(model, shape, ...) end
local function activations(...) return estimate("llama3.2-1b", ...).per_gpu.activations_bytes end
local function enabled(...) return estimate("llama3.2-1b", ...).recipe.sdpa_enable_gqa end

-- one [batch, n heads, seq, head_dim] 16-bit tensor
local function heads_bytes(n) return batch * n * seq * head_dim * 2 end

-- the sizes of `phase`'s allocations named `op`, each counted (on `gpu`, a
-- GPU table as the catalog's, or none)
local function sizes_of(recipe, op, phase, gpu)
  local r = require("vramplan").estimate(helper.model("llama3.2-1b", layers), recipe, gpu, { timeline = true, fold = false })
  local count = {}
  for _, e in ipairs(r.timeline) do
    if e.op == op and e.phase == phase and e.delta > 0 then count[e.delta] = (count[e.delta] or 0) + 1 end
  end
  return count
end
local function backward_sizes(recipe, op, gpu) return sizes_of(recipe, op, "backward", gpu) end
local turing = { memory_bytes = 16 * 2 ^ 30, compute_capability = "7.5" } -- a T4's

describe("SDPA's enable_gqa in transformers' sdpa path", function()
  it("keeps the key and value heads SDPA saves instead of their copies to every query head", function()
    for _, gpu in ipairs({ "a100-80gb", "h100-80gb" }) do -- the flash backend; cuDNN's
      -- the cache (use_cache) keeps the key and value heads either way
      local repeated = activations("--gpu", gpu, "--set", "sdpa_enable_gqa=false")
      local native = activations("--gpu", gpu, "--set", "sdpa_enable_gqa=true")
      assert.are.equal(layers * 2 * heads_bytes(heads), repeated - native)
      -- without it, repeat_kv's copies replace them
      repeated = activations("--gpu", gpu, "--set", "sdpa_enable_gqa=false", "--set", "use_cache=false")
      native = activations("--gpu", gpu, "--set", "sdpa_enable_gqa=true", "--set", "use_cache=false")
      assert.are.equal(layers * 2 * (heads_bytes(heads) - heads_bytes(kv_heads)), repeated - native)
    end
  end)

  it("expands the key and value gradients to every head in the flash backward (mha_bwd's dk_expanded, dv_expanded)", function()
    local base = { seq_len = seq, micro_batch = batch, precision = "bf16", checkpointing = "none" }
    local function sizes(gqa)
      local recipe = { sdpa_enable_gqa = gqa }
      for k, v in pairs(base) do recipe[k] = v end
      return backward_sizes(recipe, "attention.flash_backward")
    end
    -- repeated: dq, dk and dv of every head; native: dq and the two expanded
    -- gradients of every head, then dk and dv of the key/value heads
    local repeated, native = sizes(false), sizes(true)
    assert.are.equal(3 * layers, repeated[heads_bytes(heads)])
    assert.is_nil(repeated[heads_bytes(kv_heads)])
    assert.are.equal(3 * layers, native[heads_bytes(heads)])
    assert.are.equal(2 * layers, native[heads_bytes(kv_heads)])
  end)

  it("runs SDPA's memory-efficient kernel on GPUs before Ampere, which have no flash kernel", function()
    local function kernel(gpu) return estimate("llama3.2-1b", "--gpu", gpu, "--set", "precision=fp16").sdpa_kernel end
    assert.are.equal("efficient", kernel("t4"))
    assert.are.equal("efficient", kernel("v100-32gb"))
    assert.are.equal("flash", kernel("a100-80gb"))
    assert.are.equal("cudnn", kernel("h100-80gb"))
  end)

  it("falls back to SDPA's math backend where the memory-efficient kernel gets the heads, before pytorch#191085", function()
    -- a T4 under autocast (fp16 inputs): no flash kernel, the memory-efficient one
    local function t4(...)
      return activations("--gpu", "t4", "--set", "precision=amp-fp16", "--set", "transformers_version=5",
        "--set", "finetune=lora", ...)
    end
    local repeated = t4("--set", "sdpa_enable_gqa=false")
    -- PyTorch 2.10: the math backend, which keeps each layer's [batch, heads, seq, seq] probabilities
    -- where the kernel kept its output and log-sum-exp (under two [batch, heads, seq, head_dim])
    local probabilities = batch * heads * seq * seq * 2
    assert.is_true(t4("--set", "torch_version=2.10") - repeated >= layers * (probabilities - 2 * heads_bytes(heads)))
    local recipe = { seq_len = seq, micro_batch = batch, precision = "amp-fp16", sdpa_enable_gqa = true,
      torch_version = "2.10" }
    assert.are.same({ [heads_bytes(heads)] = 2 * layers },
      sizes_of(recipe, "sdpa_math.repeat_interleave", "forward", turing))
    -- the newest: the memory-efficient kernel takes them, its backward
    -- expanding their gradients as flash's does
    recipe.torch_version = "2.x"
    local native = backward_sizes(recipe, "attention.flash_backward", turing)
    assert.are.equal(3 * layers, native[heads_bytes(heads)])
    assert.are.equal(2 * layers, native[heads_bytes(kv_heads)])
    assert.are.same({}, sizes_of(recipe, "sdpa_math.repeat_interleave", "forward", turing))
  end)

  it("changes nothing where the heads are as many, or SDPA gets a mask", function()
    -- GPT-2: no key/value heads of its own
    local function gpt2(gqa) return estimate("gpt2", "--set", "sdpa_enable_gqa=" .. gqa).per_gpu.peak_allocated_bytes end
    assert.are.equal(gpt2("false"), gpt2("true"))
    -- Gemma 2 hands SDPA its 4-D mask always: use_gqa_in_sdpa is false
    local function gemma2(gqa)
      return estimate("gemma-2-2b", "--set", "sdpa_enable_gqa=" .. gqa).per_gpu.peak_allocated_bytes
    end
    assert.are.equal(gemma2("false"), gemma2("true"))
    -- the eager path repeats them itself
    local function eager(gqa)
      return activations("--set", "attention=eager", "--set", "sdpa_enable_gqa=" .. gqa)
    end
    assert.are.equal(eager("false"), eager("true"))
  end)

  it("is transformers 4.54's and 5's with PyTorch 2.5 or later on a GPU", function()
    assert.is_false(enabled())
    assert.is_false(enabled("--set", "transformers_version=4.53.3"))
    assert.is_false(enabled("--set", "transformers_version=4"))
    assert.is_true(enabled("--set", "transformers_version=4.54"))
    assert.is_true(enabled("--set", "transformers_version=4.57.1"))
    assert.is_true(enabled("--set", "transformers_version=5"))
    assert.is_true(enabled("--set", "stack=hf-trainer"))
    -- axolotl runs transformers 5 from 0.14 (0.18 unless named)
    assert.is_true(enabled("--set", "stack=axolotl"))
    assert.is_true(enabled("--set", "stack=axolotl", "--set", "axolotl_version=0.14"))
    assert.is_false(enabled("--set", "stack=axolotl", "--set", "axolotl_version=0.12"))
    assert.is_false(enabled("--set", "stack=hf-trainer", "--set", "transformers_version=4.51"))
    assert.is_false(enabled("--set", "transformers_version=4.57.1", "--set", "torch_version=2.4"))
    assert.is_true(enabled("--set", "transformers_version=4.57.1", "--set", "torch_version=2.5"))
    assert.is_false(enabled("--set", "transformers_version=4.57.1", "--set", "device=cpu"))
    -- the recipe's own word wins
    assert.is_false(enabled("--set", "transformers_version=5", "--set", "sdpa_enable_gqa=false"))
  end)

  it("refuses enable_gqa before PyTorch 2.5, naming the key", function()
    local _, err, code = helper.run("estimate", "llama3.2-1b", "--set", "sdpa_enable_gqa=true", "--set", "torch_version=2.4")
    assert.are_not.equal(0, code)
    assert.truthy(err:find("sdpa_enable_gqa: SDPA's enable_gqa came with PyTorch 2.5", 1, true))
  end)

  it("hands SDPA the heads' transposed views from 4.56, which TRL's offloading hooks copy contiguous", function()
    -- from 4.56 q and SDPA's output [batch, heads, seq, head_dim], k and v
    -- of the key/value heads (enable_gqa); the stash keeps each copy (streams)
    local function copies(minor, attention)
      local recipe = { seq_len = seq, micro_batch = batch, precision = "bf16", finetune = "lora",
        transformers_major = 4, transformers_minor = minor, attention = attention,
        offload_activations = true, offload_torchtune = true, offload_trl = true }
      local r = require("vramplan").estimate(helper.model("llama3.2-1b", 2), recipe, nil,
        { timeline = true, fold = false })
      local count = {}
      for _, e in ipairs(r.timeline) do
        if e.op == "offload.stream_contiguous" and e.delta > 0 then count[e.delta] = (count[e.delta] or 0) + 1 end
      end
      return count
    end
    local views = copies(57, "sdpa")
    assert.are.equal(2 * 2, views[heads_bytes(heads)])
    assert.are.equal(2 * 2, views[heads_bytes(kv_heads)])
    -- 4.49-4.55 made q, k and v contiguous: SDPA's output alone, [batch,
    -- seq, heads, head_dim] seen as [batch, heads, seq, head_dim]
    assert.are.same({ [heads_bytes(heads)] = 2 }, copies(55, "sdpa"))
    -- FlashAttention-2 gets q.transpose(1, 2), the projections' rows, and
    -- returns [batch, seq, heads, head_dim]
    assert.are.same({}, copies(57, "flash"))
  end)

  it("merges cuDNN's heads without a copy from 4.56, the query a transposed view", function()
    local function on(gpu, version) return activations("--gpu", gpu, "--set", "transformers_version=" .. version) end
    -- one [batch, seq, hidden] 16-bit copy a layer, kept for o_proj's backward, before
    assert.are.equal(layers * batch * seq * hidden * 2, on("h100-80gb", "4.55") - on("h100-80gb", "4.56"))
    -- the flash backend's output is [batch, seq, heads, head_dim] whatever the query
    assert.are.equal(on("a100-80gb", "4.55"), on("a100-80gb", "4.56"))
  end)
end)
