-- Liger-Kernel's RMSNorm and SwiGLU (liger_rms_norm, liger_swiglu). The
-- bytes are checked against PyTorch by tests/torch/compare.py ("liger": the
-- autograd Functions written out as they allocate, 26 configurations);
-- these tests hold what the libraries' source fixes in closed form, the
-- stacks' and config files' names for the kernels, and what is refused.
local helper = require("tests.lua.helper")

-- Llama 3.2 1B: 16 layers, h = 2048, intermediate 8192; one sequence of
-- 512 tokens in pure bf16 keeps every tensor a multiple of the
-- allocator's 512-byte blocks
local LAYERS, H, F, TOKENS = 16, 2048, 8192, 512

local function activations(...)
  return helper.estimate("llama3.2-1b", "--set", "precision=bf16", "--set", "micro_batch=1", "--set", "seq_len=512",
    ...).per_gpu.activations_bytes
end

describe("Liger-Kernel's kernels", function()
  it("keep what the libraries' source says at the end of forward", function()
    local base = activations()
    -- LlamaRMSNorm saves its input's fp32 copy (pow, the multiply), the
    -- per-row rsqrt and the bf16 normalized rows (the weight's multiply);
    -- LigerRMSNormFunction saves the bf16 input and a per-row fp32 rstd:
    -- 4 bytes an element less, for two norms a layer and the final one
    local norms = (2 * LAYERS + 1) * TOKENS * H * 4
    assert.are.equal(norms, base - activations("--set", "liger_rms_norm=true"))
    -- act_fn(gate) * up keeps gate (SiLU's input), the activation and up
    -- (the multiply's operands); LigerSiLUMulFunction keeps gate and up
    local swiglu = LAYERS * TOKENS * F * 2
    assert.are.equal(swiglu, base - activations("--set", "liger_swiglu=true"))
    assert.are.equal(norms + swiglu,
      base - activations("--set", "liger_rms_norm=true", "--set", "liger_swiglu=true"))
  end)

  it("fold a step whose first layer takes a gradient made in forward as the layer by layer run does", function()
    -- the fused linear cross-entropy makes the hidden states' gradient in
    -- forward, and the in-place RMSNorm hands that very tensor to the last
    -- layer: its backward is unlike the others' (step.c unfolds it)
    helper.assert_folds_agree(helper.model("llama3.2-1b", 6, { hidden = 256, heads = 4, kv_heads = 2, intermediate = 512 }), {
      { finetune = "lora", checkpointing = "full", loss = "fused-linear", keep_logits = "false",
        liger_rms_norm = "true", liger_swiglu = "true" },
      { checkpointing = "full", loss = "fused-linear", keep_logits = "false", liger_rms_norm = "true" },
      { precision = "bf16", liger_rms_norm = "true", liger_swiglu = "true" },
    })
  end)

  it("are what transformers' use_liger_kernel and LLaMA-Factory's enable_liger_kernel turn on", function()
    local recipe = helper.estimate("llama3.2-1b", "--set", "seq_len=256", "--set", "use_liger_kernel=true").recipe
    assert.are.equal(true, recipe.liger_rms_norm)
    assert.are.equal(true, recipe.liger_swiglu)
    -- TrainingArguments.liger_kernel_config: the kernels' switches, as the
    -- Trainer's command line takes them (JSON)
    recipe = helper.estimate("llama3.2-1b", "--set", "seq_len=256", "--set", "use_liger_kernel=true", "--set",
      'liger_kernel_config={"rms_norm": false, "fused_linear_cross_entropy": false, "cross_entropy": true}').recipe
    assert.are.equal(false, recipe.liger_rms_norm)
    assert.are.equal(true, recipe.liger_swiglu)
    assert.are.equal("liger-ce", recipe.loss)
    local bad = helper.fails("llama3.2-1b", "--set", "use_liger_kernel=true", "--set", "liger_kernel_config=rope")
    assert.truthy(bad:find("liger_kernel_config: not a JSON object", 1, true), bad)
    local factory = helper.write("model_name_or_path: meta-llama/Meta-Llama-3-8B\nstage: sft\nfinetuning_type: lora\n"
      .. "lora_target: all\nenable_liger_kernel: true\ncutoff_len: 256\nbf16: true\n", ".yaml")
    local out, err, code = helper.run("export", "--format", "llama-factory", factory)
    assert.are.equal(0, code, err)
    assert.truthy(out:find("enable_liger_kernel: true", 1, true), out)
    assert.falsy(err:find("not expressible", 1, true), err)
  end)

  it("round-trip through axolotl's Liger plugin keys", function()
    local out, err, code = helper.run("export", "--format", "axolotl", "--model", "llama3-8b", "--set",
      "liger_rms_norm=true", "--set", "liger_swiglu=true", "--set", "seq_len=256")
    assert.are.equal(0, code, err)
    assert.truthy(out:find("liger_rms_norm: true", 1, true), out)
    assert.truthy(out:find("liger_glu_activation: true", 1, true), out)
    assert.truthy(out:find("axolotl.integrations.liger.LigerPlugin", 1, true), out)
    local recipe = helper.estimate("llama3-8b", "--recipe", helper.write(out, ".yml")).recipe
    assert.are.equal(true, recipe.liger_rms_norm)
    assert.are.equal(true, recipe.liger_swiglu)
  end)

  it("run their cross-entropy in transformers' loss with the gradient in the upcast logits (loss = liger-ce)", function()
    local function peak(loss)
      return helper.estimate("llama3.2-1b", "--set", "precision=bf16", "--set", "micro_batch=1", "--set",
        "seq_len=2048", "--set", "loss=" .. loss).per_gpu.peak_allocated_bytes
    end
    -- at the loss's backward transformers' cross_entropy holds the bf16
    -- logits, the fp32 log-probabilities log_softmax saved, nll_loss's
    -- zero-filled gradient and log_softmax's: 14 bytes a logit; Liger's
    -- kernel wrote the gradient into the fp32 copy it saved, which
    -- .float()'s backward casts to bf16: 8
    assert.are.equal(2048 * 128256 * 6, peak("cross-entropy") - peak("liger-ce"))
    local yml = helper.write("base_model: meta-llama/Llama-3.2-1B\nplugins:\n"
      .. "  - axolotl.integrations.liger.LigerPlugin\nliger_cross_entropy: true\nsequence_len: 256\n", ".yml")
    local out, err, code = helper.run("estimate", "--recipe", yml, "--json")
    assert.are.equal(0, code, err)
    assert.are.equal("liger-ce", require("dkjson").decode(out).recipe.loss)
    out = helper.run("export", "--format", "axolotl", "--model", "llama3.2-1b", "--set", "loss=liger-ce")
    assert.truthy(out:find("liger_cross_entropy: true", 1, true), out)
    local err2 = helper.fails("bloom-560m", "--set", "loss=liger-ce")
    assert.truthy(err2:find("loss: liger-ce is modelled in transformers' ForCausalLMLoss", 1, true), err2)
  end)

  it("are among advise's fixes, each one estimated", function()
    local json = require("dkjson")
    local args = { "llama3.2-1b", "--gpu", "rtx4090", "--set", "precision=bf16", "--set", "micro_batch=4",
                   "--set", "seq_len=4096" }
    local out, err, code = helper.run("advise", "--json", table.unpack(args))
    assert.are.equal(0, code, err)
    local fixes = json.decode(out).advice.fixes
    local seen = {}
    for _, f in ipairs(fixes) do
      if f.changes.liger_rms_norm or f.changes.liger_swiglu then
        local keys = {}
        for k, v in pairs(f.changes) do keys[#keys + 1] = k .. "=" .. tostring(v) end
        table.sort(keys)
        seen[table.concat(keys, " ")] = f
      end
    end
    local both = seen["liger_rms_norm=true liger_swiglu=true loss=fused-linear"]
    assert.truthy(both, "use_liger_kernel's three keys offered together")
    local sets = { table.unpack(args) }
    for _, kv in ipairs({ "liger_rms_norm=true", "liger_swiglu=true", "loss=fused-linear" }) do
      sets[#sets + 1] = "--set"
      sets[#sets + 1] = kv
    end
    assert.are.equal(helper.estimate(table.unpack(sets)).per_gpu.peak_total_bytes, both.peak_total_bytes)
    assert.truthy(seen["liger_rms_norm=true"] and seen["liger_swiglu=true"])
  end)

  it("reach the attention's q and k norms where the class swap or Liger's instance patch does", function()
    local function qk(model, ...)
      return helper.estimate(model, "--set", "precision=bf16", "--set", "micro_batch=1", "--set", "seq_len=512",
        "--set", "liger_rms_norm=true", ...).per_gpu.activations_bytes
    end
    -- Qwen3-4B (36 layers, 32 query and 8 key heads of 128): swapped in
    -- before the model is built, Liger's class is q_norm and k_norm too,
    -- 4 bytes an element less than Qwen3RMSNorm (as the layers' norms)
    local elements = 36 * (32 + 8) * 128 * 512
    assert.are.equal(elements * 4, qk("qwen3-4b", "--set", "liger_before_load=false") - qk("qwen3-4b"))
    -- the Trainer's use_liger_kernel patches the built model: not them
    local trainer = helper.estimate("qwen3-4b", "--set", "seq_len=256", "--set", "use_liger_kernel=true").recipe
    assert.are.equal(false, trainer.liger_before_load)
    -- Gemma 3's are patched either way (monkey_patch.py's instance path names them)
    assert.are.equal(qk("gemma-3-4b"), qk("gemma-3-4b", "--set", "liger_before_load=false"))
    assert.is_true(qk("gemma-3-4b") < qk("gemma-3-4b", "--set", "liger_rms_norm=false"))
  end)

  it("follow Liger's patch for the model type, and are refused where it is not modelled", function()
    -- DeepSeek's and Qwen2-MoE's model types have no apply function: nothing changes
    for _, model in ipairs({ "deepseek-v2-lite-hf", "qwen1.5-moe-a2.7b" }) do
      local args = { model, "--set", "seq_len=256", "--set", "micro_batch=1", "--set", "use_liger_kernel=true" }
      local patched = helper.estimate(table.unpack(args))
      assert.are.equal(true, patched.recipe.liger_rms_norm)
      args[#args + 1] = "--set"
      args[#args + 1] = "liger_rms_norm=false"
      args[#args + 1] = "--set"
      args[#args + 1] = "liger_swiglu=false"
      assert.are.equal(helper.estimate(table.unpack(args)).per_gpu.activations_bytes,
        patched.per_gpu.activations_bytes, model)
    end
    -- Mixtral's patch swaps its experts (transformers 4.x: LigerBlockSparseTop2MLP): one
    -- [tokens, intermediate] tensor less for each of the top-2 experts' rows, 32 layers
    local mixtral = function(...)
      return helper.estimate("mixtral-8x7b", "--set", "precision=bf16", "--set", "seq_len=512", "--set",
        "micro_batch=1", ...).per_gpu.activations_bytes
    end
    assert.are.equal(32 * 2 * 512 * 14336 * 2, mixtral() - mixtral("--set", "liger_swiglu=true"))
    -- transformers 5's experts (LigerExperts: LigerFusedMoEFunction keeps
    -- pre_act [tokens x 2, 2 x 14336] and int32 routing tables, not each
    -- expert's rows, activations and outputs)
    local v5 = function(...) return mixtral("--set", "transformers_version=5", ...) end
    assert.is_true(v5("--set", "liger_swiglu=true") < v5())
    for _, case in ipairs({
      { { "mixtral-8x7b", "--set", "liger_swiglu=true", "--set", "experts_implementation=grouped_mm", "--set",
          "finetune=lora", "--set", "lora_targets=q_proj", "--set", "lora_target_parameters=mlp.experts.gate_up_proj" },
        "liger_swiglu: Liger's LigerExperts reads the experts' 3-D weights itself" },
      { { "llama3.2-1b", "--set", "framework=megatron", "--set", "liger_rms_norm=true" },
        "Liger-Kernel patches transformers' modules" },
      { { "llama3.2-1b", "--set", "model_code=torchtitan", "--set", "liger_swiglu=true" },
        "Liger-Kernel patches transformers' modules" },
    }) do
      local err = helper.fails(table.unpack(case[1]))
      assert.truthy(err:find(case[2], 1, true), err)
    end
  end)
end)
