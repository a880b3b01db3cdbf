-- Phi-3 (models/phi-3-mini-4k.lua, models/phi-4.lua: the llama family with
-- fused_projections): config.json files read like the model scripts, the
-- fused modules' names for LoRA, what the fused projection keeps, and the
-- sliding window. (The activations are checked against PyTorch in
-- tests/torch/compare.py; the parameter count in reference_spec.)
local helper = require("tests.lua.helper")

local fails = helper.fails

describe("Phi-3", function()
  it("reads a Phi-3 config.json like the model script it describes", function()
    helper.assert_same_model("tests/fixtures/phi-3-mini-4k-config.json", "models/phi-3-mini-4k.lua")
  end)

  it("counts LoRA on the fused modules as PEFT prints it", function()
    -- A public fine-tuning run's print_trainable_parameters() for
    -- microsoft/phi-3-mini-4k-instruct with r 16 on qkv_proj, o_proj,
    -- gate_up_proj and down_proj: "trainable params: 25,165,824 || all
    -- params: 3,846,245,376" (python-docstring-generator's README).
    local r = helper.estimate("phi-3-mini-4k", "--set", "finetune=lora", "--set", "lora_rank=16",
      "--set", "lora_targets=qkv_proj,o_proj,gate_up_proj,down_proj", "--set", "seq_len=256")
    assert.are.equal(25165824, r.model.trainable_params)
    assert.are.equal(3846245376 - 25165824, r.model.params)
    -- all-linear is the same four modules
    local all = helper.estimate("phi-3-mini-4k", "--set", "finetune=lora", "--set", "lora_rank=16",
      "--set", "lora_targets=all-linear", "--set", "seq_len=256")
    assert.are.equal(25165824, all.model.trainable_params)
  end)

  it("asks for LoRA targets, as PEFT has no default for phi3", function()
    assert.truthy(fails("phi-3-mini-4k", "--set", "finetune=lora", "--set", "seq_len=256")
      :find("lora_targets: PEFT has no default LoRA targets for this model type", 1, true))
    assert.truthy(fails("phi-3-mini-4k", "--set", "finetune=lora", "--set", "lora_targets=q_proj,v_proj",
      "--set", "seq_len=256"):find("lora_targets: the model has no linear module q_proj", 1, true))
  end)

  it("keeps the whole fused q/k/v output while the attention keeps the values' view", function()
    -- SDPA's flash kernel saves q and k after the rotary embedding and v:
    -- with one qkv_proj, v is a view that keeps the queries' and keys'
    -- columns of the projection alive too. Per layer that is
    -- (3072 + 3072) x tokens bf16 elements more than separate projections.
    local function activations(fused)
      return helper.estimate("phi-3-mini-4k", "--set", "precision=bf16", "--set", "seq_len=1024",
        "--set", "fused_projections=" .. tostring(fused), "--set", "use_cache=false").per_gpu.activations_bytes
    end
    assert.are.equal(32 * (3072 + 3072) * 1024 * 2, activations(true) - activations(false))
  end)

  it("hands SDPA the 4-D mask once the keys reach the sliding window", function()
    local function activations(window, seq, attention)
      return helper.estimate("phi-3-mini-4k", "--set", "precision=bf16", "--set", "use_cache=false",
        "--set", "sliding_window=" .. window, "--set", "seq_len=" .. seq, "--set", "attention=" .. attention)
        .per_gpu.activations_bytes
    end
    -- below the window (2047 keys) the mask is dropped, as without one
    assert.are.equal(activations(0, 2046, "sdpa"), activations(2047, 2046, "sdpa"))
    -- from there on MistralModel builds a [s, s + 1] mask (no attention
    -- mask passed: target_length is s + 1), SDPA runs its memory-efficient
    -- kernel on the keys' columns, and preprocess_mask pads their rows
    -- (stride 2049, not a multiple of 8) into a copy that every layer's
    -- kernel saves: 32 layers x 2048 x (2048 + 8) bf16
    assert.are.equal(32 * 2048 * 2056 * 2, activations(2047, 2048, "sdpa") - activations(0, 2048, "sdpa"))
    -- FlashAttention-2 takes the window as an argument; eager builds the
    -- windowed mask, the size of a causal one, and keeps nothing more
    assert.are.equal(activations(0, 4096, "flash"), activations(2047, 4096, "flash"))
    assert.are.equal(activations(0, 1024, "eager"), activations(2047, 1024, "eager"))
    -- no window: Phi-4
    helper.estimate("phi-4", "--set", "seq_len=8192", "--set", "precision=bf16")
  end)

  it("rotates a part of each head when the config asks for a partial rotary embedding", function()
    -- Phi-4-mini: 96 of 128 dimensions rotated; the unrotated 32 come back
    -- through torch.cat, a copy of the whole head either way, so the layers
    -- keep what they kept; only the rotary tables (cos and sin, bf16) shrink
    local function run(factor)
      return helper.estimate("phi-4-mini", "--set", "precision=bf16", "--set", "seq_len=512", "--set", "use_cache=false",
        "--set", "partial_rotary_factor=" .. factor, "--timeline")
    end
    local partial, whole = run(0.75), run(1)
    assert.are.equal(2 * 512 * (128 - 96) * 2, whole.per_gpu.activations_bytes - partial.per_gpu.activations_bytes)
    local function first_alloc(r, op)
      for _, e in ipairs(r.timeline) do
        if e.op == op and e.delta > 0 then return e.delta end
      end
    end
    -- the mul by cos takes the rotated slice only: 512 x 24 x 96 bf16
    assert.are.equal(512 * 24 * 96 * 2, first_alloc(partial, "attention.rotary_q"))
    assert.are.equal(512 * 24 * 128 * 2, first_alloc(whole, "attention.rotary_q"))
    local err = helper.fails("llama2-7b", "--set", "partial_rotary_factor=0.5", "--set", "seq_len=128")
    assert.truthy(err:find("partial_rotary_factor", 1, true), err)
  end)

  it("refuses what a Phi-3 config asks for that is not modelled", function()
    helper.assert_config_rejected('{"model_type": "phi3", "resid_pdrop": 0.1}', "resid_pdrop")
  end)
end)
