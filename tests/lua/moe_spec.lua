-- Mixtures of experts: Mixtral's and Qwen2-MoE's configurations, experts
-- split over expert-parallel ranks, their optimizer states sharded over
-- the data-parallel ranks that hold the same experts, and layouts that do
-- not hold together. (Activations are checked against PyTorch in
-- tests/torch/compare.py.)
local helper = require("tests.lua.helper")

-- Mixtral 8x7B: 32 layers of 8 experts, each three 4096 x 14336 matrices
local MIXTRAL_PARAMS = 46702792704
local MIXTRAL_EXPERTS = 32 * 8 * 3 * 4096 * 14336
local MIXTRAL_DENSE = MIXTRAL_PARAMS - MIXTRAL_EXPERTS

local function megatron(...)
  return helper.estimate("mixtral-8x7b", "--set", "framework=megatron", "--set", "seq_len=256", ...)
end

describe("mixture-of-experts models", function()
  it("reads the mixtures' config.json like the model scripts", function()
    helper.assert_same_model("tests/fixtures/mixtral-8x7b-config.json", "mixtral-8x7b")
    helper.assert_same_model("tests/fixtures/qwen1.5-moe-a2.7b-config.json", "qwen1.5-moe-a2.7b")
    helper.assert_same_model("tests/fixtures/deepseek-moe-16b-config.json", "deepseek-moe-16b")
    helper.assert_same_model("tests/fixtures/deepseek-v3-config.json", "deepseek-v3")
    helper.assert_same_model("tests/fixtures/qwen3-30b-a3b-config.json", "qwen3-30b-a3b")
  end)

  it("gives LoRA the experts' own names and PEFT's all-linear its nn.Linear routers", function()
    local function trainable(model, targets)
      return helper.estimate(model, "--set", "finetune=lora", "--set", "lora_targets=" .. targets,
        "--set", "seq_len=128", "--set", "precision=bf16").model.trainable_params
    end
    -- Qwen3-MoE's experts are Qwen3MoeMLP: gate_proj, up_proj, down_proj
    -- of 2048 -> 768 -> 2048, 128 a layer, 48 layers, r 8
    assert.are.equal(48 * 128 * 3 * 8 * (2048 + 768), trainable("qwen3-30b-a3b", "gate_proj,up_proj,down_proj"))
    -- all-linear adds q, k, v, o (4096 and 512 wide) and the router, an
    -- nn.Linear(2048, 128)
    local attention = 8 * ((2048 + 4096) * 2 + (2048 + 512) * 2)
    assert.are.equal(48 * (128 * 3 * 8 * (2048 + 768) + attention + 8 * (2048 + 128)),
      trainable("qwen3-30b-a3b", "all-linear"))
    -- Mixtral's experts are w1, w3, w2; DeepSeek's router is MoEGate, a
    -- bare weight that PEFT cannot adapt
    assert.truthy(helper.fails("mixtral-8x7b", "--set", "finetune=lora", "--set", "lora_targets=gate_proj",
      "--set", "seq_len=128"):find("no linear module gate_proj", 1, true))
    assert.truthy(helper.fails("deepseek-moe-16b", "--set", "finetune=lora", "--set", "lora_targets=gate",
      "--set", "seq_len=128"):find("no linear module gate", 1, true))
  end)

  -- DeepseekMoE's y[flat_topk_idx == i] = expert(...) under autocast puts
  -- 16-bit rows into fp32 ones: "Index put requires the source and
  -- destination dtypes match"; Mixtral's loop index_add_s a cast copy
  it("refuses DeepSeekMoE under autocast, which PyTorch cannot run", function()
    for _, precision in ipairs({ "amp-bf16", "amp-fp16", "bf16-autocast" }) do
      assert.truthy(helper.fails("deepseek-moe-16b", "--set", "precision=" .. precision, "--set", "seq_len=128")
        :find("precision: DeepseekMoE writes the experts' 16-bit outputs into fp32 rows", 1, true))
    end
    helper.estimate("deepseek-moe-16b", "--set", "precision=mixed-bf16", "--set", "seq_len=128")
    helper.estimate("mixtral-8x7b", "--set", "precision=amp-bf16", "--set", "seq_len=128")
  end)

  -- DeepseekV3MoE's final_hidden_states take the router weights' dtype (bf16
  -- under autocast); bitsandbytes' experts return their fp32 input's dtype:
  -- "index_add_(): self (BFloat16) and source (Float) must have the same
  -- scalar type" (the CPU harness meets it too)
  it("refuses DeepSeek-V3 under QLoRA with autocast over fp32 hidden states", function()
    local args = { "deepseek-v3", "--set", "finetune=qlora", "--set", "lora_targets=all-linear", "--set", "seq_len=128" }
    local function with(...)
      local all = { table.unpack(args) }
      for _, a in ipairs({ ... }) do all[#all + 1] = a end
      return table.unpack(all)
    end
    assert.truthy(helper.fails(with("--set", "precision=amp-bf16"))
      :find("precision: DeepseekV3MoE adds the quantized experts' fp32 outputs", 1, true))
    helper.estimate(with("--set", "precision=bf16"))
    helper.estimate("deepseek-v3", "--set", "finetune=lora", "--set", "lora_targets=all-linear", "--set",
      "precision=amp-bf16", "--set", "seq_len=128")
  end)

  it("keeps a whole expert per expert-parallel rank: 1/ep of the experts", function()
    for _, ep in ipairs({ 1, 2, 4, 8 }) do
      local r = megatron("--set", "dp=8", "--set", "ep=" .. ep)
      assert.are.equal(2 * (MIXTRAL_DENSE + MIXTRAL_EXPERTS // ep), r.per_gpu.params_bytes)  -- bf16
      assert.are.equal(4 * (MIXTRAL_DENSE + MIXTRAL_EXPERTS // ep), r.per_gpu.grads_bytes)   -- fp32 main_grad
      assert.are.equal(MIXTRAL_PARAMS, r.model.params)
    end
  end)

  it("splits each expert's width over etp ranks, which default to tp", function()
    local by_default = megatron("--set", "tp=2", "--set", "sequence_parallel=true", "--set", "dp=4", "--set", "ep=4")
    local explicit = megatron("--set", "tp=2", "--set", "sequence_parallel=true", "--set", "dp=4", "--set", "ep=4",
      "--set", "etp=2")
    local whole = megatron("--set", "tp=2", "--set", "sequence_parallel=true", "--set", "dp=4", "--set", "ep=4",
      "--set", "etp=1")
    assert.are.equal(explicit.per_gpu.params_bytes, by_default.per_gpu.params_bytes)
    -- the experts' bytes on a rank: 1/(ep x etp) of them, or 1/ep when whole
    assert.are.equal(2 * (MIXTRAL_EXPERTS // 4 - MIXTRAL_EXPERTS // 8),
      whole.per_gpu.params_bytes - explicit.per_gpu.params_bytes)
  end)

  it("shards experts' optimizer states over the dp / ep ranks that share them", function()
    local dp, ep = 8, 4
    local r = megatron("--set", "dp=" .. dp, "--set", "ep=" .. ep, "--set", "distributed_optimizer=true")
    -- each tensor's shard is rounded up: at most one element per tensor
    local master = 4 * (MIXTRAL_DENSE / dp + MIXTRAL_EXPERTS / ep / (dp / ep))
    assert.is_true(math.abs(r.per_gpu.master_bytes - master) < 4 * 2000)
    assert.is_true(math.abs(r.per_gpu.optimizer_bytes - 2 * master) < 8 * 2000)
  end)

  it("shards experts like any parameter under ZeRO-3 and FSDP, which know no expert parallelism", function()
    for _, layout in ipairs({ { "framework=deepspeed", "zero=3" }, { "framework=fsdp", "fsdp=full_shard" } }) do
      local r = helper.estimate("mixtral-8x7b", "--set", "seq_len=256", "--set", "precision=mixed-bf16",
        "--set", layout[1], "--set", layout[2], "--set", "dp=8")
      -- an eighth of every tensor, each rounded up to whole elements: Adam's
      -- two fp32 moments, and the parameters' shard (bf16 under ZeRO-3,
      -- FSDP's fp32 flat parameter)
      assert.is_true(math.abs(r.per_gpu.optimizer_bytes - 8 * MIXTRAL_PARAMS / 8) < 8 * 2000, layout[1])
      assert.is_true(r.per_gpu.params_bytes <= 4 * MIXTRAL_PARAMS / 8 + 4 * 2000, layout[1])
    end
  end)

  it("agrees with evaluating every layer (HF's expert loop, Megatron's grouped GEMMs)", function()
    local arch = require("vramplan.arch")
    local models = require("vramplan.models")
    for _, case in ipairs({
      { "mixtral-8x7b", { precision = "amp-bf16", checkpointing = "every-2" } },
      { "qwen1.5-moe-a2.7b", { precision = "mixed-bf16", attention = "eager", framework = "deepspeed", zero = 3,
                               dp = 4 } },
      { "mixtral-8x7b", { framework = "megatron", dp = 8, ep = 4, distributed_optimizer = true } },
      { "qwen1.5-moe-a2.7b", { framework = "megatron", tp = 2, dp = 4, ep = 2, sequence_parallel = true,
                               checkpointing = "selective" } },
      -- a dense first layer: chunks and pipeline stages on either side of it
      { "deepseek-moe-16b", { precision = "bf16", checkpointing = "every-2" } },
      { "deepseek-moe-16b", { framework = "megatron", dp = 4, ep = 4, pp = 2, distributed_optimizer = true } },
      -- three dense layers: every-K chunks that hold dense layers and mixtures together
      { "deepseek-v3", { precision = "bf16", checkpointing = "every-2" } },
      { "deepseek-v3", { precision = "bf16", checkpointing = "every-4", finetune = "lora", lora_targets = "all-linear" } },
      { "deepseek-moe-16b", { precision = "bf16", checkpointing = "every-3" } },
      -- chunks that return three and four layers' router logits, a shorter chunk left over
      { "mixtral-8x7b", { precision = "amp-bf16", checkpointing = "every-3" }, { layers = 11, router_aux_loss = true } },
      { "qwen3-30b-a3b", { precision = "bf16", checkpointing = "every-4" }, { layers = 14, router_aux_loss = true } },
      -- transformers 5's 3-D experts, by the loop and by grouped GEMMs
      { "qwen3-30b-a3b", { precision = "bf16", experts_implementation = "eager", checkpointing = "every-2" } },
      { "mixtral-8x7b", { precision = "amp-bf16", experts_implementation = "grouped_mm" },
        { layers = 5, router_aux_loss = true } },
      { "qwen3-30b-a3b", { precision = "mixed-bf16", experts_implementation = "grouped_mm", framework = "fsdp2",
                           model_code = "transformers", dp = 4 } },
    }) do
      local fields = case[3] or { layers = 5 }
      local origins = {}
      for k in pairs(fields) do origins[k] = "test" end
      local model = arch.build(models.describe(helper.root, case[1]), fields, origins)
      local recipe = case[2]
      recipe.seq_len = 128
      helper.assert_fold_agrees(model, recipe)
    end
  end)
end)

describe("expert-parallel layouts that do not hold together", function()
  local cases = {
    { { "mixtral-8x7b", "--set", "ep=2", "--set", "dp=2" }, "ep: expert parallelism needs framework" },
    { { "mixtral-8x7b", "--set", "framework=megatron", "--set", "ep=3", "--set", "dp=3" }, "ep: must divide the experts" },
    { { "mixtral-8x7b", "--set", "framework=megatron", "--set", "ep=8", "--set", "dp=4" }, "ep: ep x etp must divide dp x tp x cp" },
    { { "mixtral-8x7b", "--set", "framework=megatron", "--set", "etp=3", "--set", "dp=3" },
      "etp: must divide each expert's intermediate width" },
    { { "llama2-7b", "--set", "framework=megatron", "--set", "etp=2", "--set", "dp=2" }, "etp: expert tensor parallelism needs a model" },
    { { "llama2-7b", "--set", "framework=megatron", "--set", "ep=2", "--set", "dp=2" }, "needs a model with experts" },
    { { "mixtral-8x7b", "--set", "experts_per_token=9" }, "experts_per_token: cannot exceed experts %(8%)" },
    { { "mixtral-8x7b", "--set", "framework=megatron", "--set", "tp=2" }, "sequence_parallel: Megatron%-LM needs it" },
  }
  for _, case in ipairs(cases) do
    it("rejects " .. table.concat(case[1], " ", 2), function()
      local _, err, code = helper.run("estimate", table.unpack(case[1]))
      assert.are.equal(1, code)
      assert.truthy(err:find(case[2]), err)
    end)
  end

  it("counts DeepSeek's dense first layers apart from its sparse ones", function()
    -- DeepSeekMoE 16B: one dense SwiGLU layer of width 10944, 27 with 64
    -- routed experts of 1408, a router, and shared experts of 2 x 1408
    local h = 2048
    local attention_and_norms = 4 * h * h + 2 * h
    local dense = attention_and_norms + 3 * h * 10944
    local sparse = attention_and_norms + 64 * 3 * h * 1408 + 64 * h + 3 * h * 2816
    local outside = 2 * 102400 * h + h
    local r = helper.estimate("deepseek-moe-16b", "--set", "seq_len=256")
    assert.are.equal(outside + dense + 27 * sparse, r.model.params)
    local more = helper.estimate("deepseek-moe-16b", "--set", "seq_len=256", "--set", "dense_layers=3")
    assert.are.equal(outside + 3 * dense + 25 * sparse, more.model.params)
  end)

  it("rejects what the DeepSeek importer cannot describe", function()
    helper.assert_config_rejected('{"model_type": "deepseek", "n_routed_experts": 8, "moe_layer_freq": 2}', "moe_layer_freq")
    local _, err, code = helper.run("estimate", "deepseek-moe-16b", "--set", "moe_block=switch")
    assert.are.equal(1, code)
    assert.truthy(err:find("moe_block: must be mixtral, deepseek, deepseek_v3, deepseek_v2, deepseek_v2_hf or gpt_oss", 1, true), err)
  end)

  it("names the config.json keys the mixtures ask for that are not modelled", function()
    helper.assert_config_rejected('{"model_type": "qwen2_moe", "mlp_only_layers": [0, 1]}', "mlp_only_layers")
    helper.assert_config_rejected('{"model_type": "qwen3_moe", "decoder_sparse_step": 2}', "decoder_sparse_step")
  end)
end)

-- transformers 5 holds a mixture's experts as two 3-D parameters
-- (gate_up_proj [experts, 2 x intermediate, hidden], down_proj [experts,
-- hidden, intermediate]) of a module that is no nn.Linear, and its router
-- as a bare weight (MixtralTopKRouter, Qwen3MoeTopKRouter).
describe("transformers 5's experts (experts_implementation)", function()
  local function qwen3(...)
    return helper.estimate("qwen3-30b-a3b", "--set", "seq_len=128", "--set", "precision=bf16", ...)
  end

  it("holds the same parameters as 4.x's expert modules", function()
    local modules = qwen3()
    for _, impl in ipairs({ "eager", "grouped_mm" }) do
      local r = qwen3("--set", "experts_implementation=" .. impl)
      assert.are.equal(modules.model.params, r.model.params, impl)
      assert.are.equal(modules.per_gpu.params_bytes, r.per_gpu.params_bytes, impl)
      assert.are.equal(modules.per_gpu.optimizer_bytes, r.per_gpu.optimizer_bytes, impl)
    end
  end)

  it("keeps Qwen2-MoE's shared expert and its gate as the nn.Linear modules 4.x has", function()
    local function qwen2(...)
      return helper.estimate("qwen1.5-moe-a2.7b", "--set", "seq_len=128", "--set", "precision=bf16", ...)
    end
    local modules = qwen2()
    local fused = qwen2("--set", "experts_implementation=grouped_mm")
    assert.are.equal(modules.model.params, fused.model.params)
    -- all-linear takes q, k, v, o and the shared expert's gate, up and down projections and its
    -- [1, hidden] gate, not the 3-D experts or the bare router weight: Qwen1.5-MoE-A2.7B, 24 layers,
    -- hidden 2048, shared expert 5632, r 8
    local lora = qwen2("--set", "experts_implementation=grouped_mm", "--set", "finetune=lora",
      "--set", "lora_targets=all-linear")
    local per_layer = 4 * (2048 + 2048) * 8 + 3 * (2048 + 5632) * 8 + (2048 + 1) * 8
    assert.are.equal(24 * per_layer, lora.model.trainable_params)
  end)

  it("runs DeepSeek-V3's block with 3-D experts and leaves them to all-linear", function()
    local function v3(...)
      return helper.estimate("deepseek-v3", "--set", "seq_len=128", "--set", "precision=bf16", ...)
    end
    local modules = v3()
    local fused = v3("--set", "experts_implementation=grouped_mm")
    assert.are.equal(modules.model.params, fused.model.params)
    assert.are.equal(modules.per_gpu.params_bytes, fused.per_gpu.params_bytes)
    -- all-linear under 4.x takes every routed expert's gate_proj, up_proj and down_proj (nn.Linear
    -- modules); 5.x's DeepseekV3NaiveMoe holds them as two 3-D parameters, which it cannot take:
    -- 58 sparse layers x 256 experts x 3 projections of 7168 <-> 2048, r 8
    local function lora(...)
      return v3("--set", "finetune=lora", "--set", "lora_targets=all-linear", ...).model.trainable_params
    end
    local routed = 58 * 256 * 3 * 8 * (7168 + 2048)
    assert.are.equal(lora() - routed, lora("--set", "experts_implementation=eager"))
  end)

  it("runs DeepSeek-V2's block (transformers' own class) with 3-D experts and the same parameters", function()
    local function v2(...)
      return helper.estimate("deepseek-v2-lite-hf", "--set", "seq_len=128", "--set", "precision=bf16", ...)
    end
    local modules, fused = v2(), v2("--set", "experts_implementation=grouped_mm")
    assert.are.equal(modules.model.params, fused.model.params)
    assert.are.equal(modules.per_gpu.params_bytes, fused.per_gpu.params_bytes)
  end)

  it("leaves the experts and the router to PEFT's all-linear, which takes nn.Linear only", function()
    local r = qwen3("--set", "experts_implementation=grouped_mm", "--set", "finetune=lora",
      "--set", "lora_targets=all-linear")
    -- q, k, v, o of Qwen3-30B-A3B (2048 -> 4096, 512, 512; 4096 -> 2048), r 8, 48 layers
    assert.are.equal(48 * 8 * ((2048 + 4096) * 2 + (2048 + 512) * 2), r.model.trainable_params)
    assert.truthy(helper.fails("qwen3-30b-a3b", "--set", "seq_len=128", "--set", "experts_implementation=eager",
      "--set", "finetune=lora", "--set", "lora_targets=gate_proj"):find("no linear module gate_proj", 1, true))
  end)

  -- FSDP2 shards each parameter on dim 0, padded to whole rows on every rank
  -- (torch.chunk): 4.x's experts by their rows, 5.x's by the experts
  it("shards each 3-D parameter over FSDP2's ranks by its experts", function()
    local function params(impl)
      return qwen3("--set", "framework=fsdp2", "--set", "model_code=transformers", "--set", "dp=3",
        "--set", "experts_implementation=" .. impl).per_gpu.params_bytes
    end
    -- a layer's experts on one of 3 ranks, in elements: 4.x's gate_proj and
    -- up_proj [768, 2048] take 256 rows each, down_proj [2048, 768] 683;
    -- 5.x's gate_up_proj [128, 1536, 2048] and down_proj [128, 2048, 768]
    -- 43 experts each
    local old = 128 * (2 * 256 * 2048 + 683 * 768)
    local new = 43 * 1536 * 2048 + 43 * 2048 * 768
    assert.are.equal(48 * (new - old) * 2, params("eager") - params("modules"))
  end)

  it("costs the loop whole-parameter gradients per expert, which grouped GEMMs do not make", function()
    local function peak(impl)
      return qwen3("--set", "optimizer=none", "--set", "experts_implementation=" .. impl).per_gpu
    end
    -- the loop's peak is in the first layer's backward: its gradients
    -- buffered whole for gate_up_proj ([128, 1536, 2048] bf16) and
    -- down_proj ([128, 2048, 768]) until their AccumulateGrad runs, and the
    -- next select_backward's zero-filled gate_up_proj-sized one beside them
    -- (the harness measures this to the byte: tests/torch/compare.py, "v5")
    local gate_up, down = 128 * 1536 * 2048 * 2, 128 * 2048 * 768 * 2
    local eager = peak("eager")
    assert.are.equal(0, eager.peak_layer)
    assert.is_true(eager.peak_breakdown.transient >= 2 * gate_up + down, eager.peak_breakdown.transient)
    -- 4.x's modules and the grouped GEMMs make each gradient once, at its own size
    assert.is_true(peak("grouped_mm").peak_breakdown.transient < gate_up)
    assert.is_true(peak("modules").peak_breakdown.transient < gate_up)
  end)

  -- PreTrainedModel.get_correct_experts_implementation (transformers 5): grouped_mm when none is asked for
  it("takes auto as transformers 5's grouped_mm where it models the block, else as 4.x's modules", function()
    local function run(model, ...)
      local r = helper.estimate(model, "--set", "seq_len=128", ...)
      return r.recipe.experts_implementation, r.per_gpu.activations_bytes
    end
    -- a Trainer stack is transformers 5 unless the recipe says 4
    local impl, auto5 = run("qwen3-30b-a3b", "--set", "stack=hf-trainer")
    local _, grouped = run("qwen3-30b-a3b", "--set", "stack=hf-trainer", "--set", "experts_implementation=grouped_mm")
    local _, modules = run("qwen3-30b-a3b", "--set", "stack=hf-trainer", "--set", "experts_implementation=modules")
    assert.are.equal("grouped_mm", impl)
    assert.are.equal(grouped, auto5)
    assert.are_not.equal(modules, auto5)
    local impl4, auto4 = run("qwen3-30b-a3b", "--set", "stack=hf-trainer", "--set", "transformers_version=4.57.1")
    local _, modules4 = run("qwen3-30b-a3b", "--set", "stack=hf-trainer", "--set", "transformers_version=4.57.1",
      "--set", "experts_implementation=modules")
    assert.are.equal("auto", impl4)
    assert.are.equal(modules4, auto4)
    assert.are.equal("grouped_mm", (run("deepseek-v3", "--set", "transformers_version=5")))
    -- remote code (DeepSeekMoE's own modeling file) has no 3-D experts; a quantized base's are not modelled
    assert.are.equal("auto", (run("deepseek-moe-16b", "--set", "stack=hf-trainer")))
    assert.are.equal("auto", (run("mixtral-8x7b", "--set", "stack=hf-trainer", "--set", "finetune=qlora",
      "--set", "lora_targets=q_proj,v_proj")))
    -- the hidden key the stacks set takes 4 or 5 only
    local err = helper.fails("qwen3-30b-a3b", "--set", "transformers_major=3")
    assert.truthy(err:find("transformers_major: 4 or 5", 1, true), err)
  end)

  it("refuses what it does not model, naming the key", function()
    for _, case in ipairs({
      { "qwen3-30b-a3b", { "finetune=qlora", "lora_targets=q_proj,v_proj" }, "a quantized base" },
      { "qwen3-30b-a3b", { "optimizer=adafactor" }, "factored states" },
      { "qwen3-30b-a3b", { "framework=megatron" }, "Megatron-Core's MoE layer" },
      { "qwen3-30b-a3b", { "framework=fsdp2" }, "model_code transformers" },
      { "deepseek-moe-16b", {}, "any shared expert gated" },
      { "deepseek-v2-lite", {}, "DeepSeek-V3 (block deepseek_v3) blocks only" },
      { "deepseek-v2-lite-hf", { "finetune=lora", "lora_targets=all-linear" }, "never calls" },
    }) do
      local args = { "--set", "seq_len=128", "--set", "experts_implementation=grouped_mm" }
      for _, kv in ipairs(case[2]) do
        args[#args + 1] = "--set"
        args[#args + 1] = kv
      end
      local err = helper.fails(case[1], table.unpack(args))
      assert.truthy(err:find("experts_implementation", 1, true), err)
      assert.truthy(err:find(case[3], 1, true), err)
    end
  end)
end)

-- GPT-OSS (GptOssForCausalLM of transformers 5): its activations are
-- checked against the same modules in PyTorch (compare.py gpt-oss); here,
-- its parameters against the checkpoints' tensors and the recipes it
-- refuses or resolves.
describe("GPT-OSS", function()
  -- the checkpoint's tensors per layer (openai/gpt-oss-20b's
  -- model.safetensors.index.json shapes, the experts dequantized): q/k/v/o
  -- with biases, 64 sinks, two norms, the router (weight and bias), the
  -- experts' gate_up_proj [E, 2880, 5760] and down_proj [E, 2880, 2880]
  -- with their biases; then the embedding, the head and the final norm
  local function published(layers, experts)
    local attention = (2880 * 4096 + 4096) + 2 * (2880 * 512 + 512) + (4096 * 2880 + 2880) + 64
    local mlp = experts * 2880 + experts + experts * (2880 * 5760 + 5760 + 2880 * 2880 + 2880)
    return layers * (attention + 2 * 2880 + mlp) + 2 * 201088 * 2880 + 2880
  end

  it("has the model card's parameter counts", function()
    local small, large = helper.estimate("gpt-oss-20b"), helper.estimate("gpt-oss-120b")
    assert.are.equal(published(24, 32), small.model.params)
    assert.are.equal(published(36, 128), large.model.params)
    -- the model card: 20.91B and 116.83B in total
    assert.is_true(math.abs(small.model.params / 1e9 - 20.91) < 0.005)
    assert.is_true(math.abs(large.model.params / 1e9 - 116.83) < 0.005)
  end)

  it("gives PEFT's all-linear the attention's projections alone", function()
    -- the router is GptOssTopKRouter (a bare weight and bias) and the
    -- experts bare 3-D parameters: no nn.Linear among them
    local r = helper.estimate("gpt-oss-20b", "--set", "finetune=lora", "--set", "lora_targets=all-linear",
      "--set", "seq_len=128", "--set", "precision=bf16")
    local per_layer = 8 * ((2880 + 4096) + 2 * (2880 + 512) + (4096 + 2880))
    assert.are.equal(24 * per_layer, r.model.trainable_params)
  end)

  it("runs its experts as the transformers release does and refuses what it has no form of", function()
    local function impl(...)
      return helper.estimate("gpt-oss-20b", "--set", "seq_len=128", "--set", "precision=bf16", ...)
        .recipe.experts_implementation
    end
    assert.are.equal("eager", impl())
    assert.are.equal("grouped_mm", impl("--set", "transformers_version=5"))
    assert.are.equal("eager", impl("--set", "stack=hf-trainer", "--set", "transformers_version=4.57.1"))
    local fails = function(...) return helper.fails("gpt-oss-20b", "--set", "seq_len=128", ...) end
    assert.truthy(fails("--set", "experts_implementation=modules"):find("no modules form", 1, true))
    assert.truthy(fails("--set", "finetune=qlora", "--set", "lora_targets=all-linear")
      :find("quantized base of GPT-OSS", 1, true))
    assert.truthy(fails("--set", "attention=sdpa-mem-efficient"):find("attention sinks", 1, true))
    assert.truthy(fails("--set", "framework=megatron"):find("GPT-OSS's attention is modelled as transformers", 1, true))
    assert.truthy(fails("--set", "router_aux_loss=true"):find("router_aux_loss: is the load-balancing loss", 1, true))
  end)

  it("names the field when GPT-OSS's pieces are asked of a model they do not fit", function()
    assert.truthy(helper.fails("llama2-7b", "--set", "hybrid_masks=true")
      :find("hybrid_masks: needs masking_utils and a sliding_window", 1, true))
    assert.truthy(helper.fails("phi-3-mini-4k", "--set", "attention_sinks=true")
      :find("attention_sinks: is GPT-OSS's attention: no latent attention or fused projections", 1, true))
  end)

  describe("PEFT's target_parameters (lora.ParamWrapper on the 3-D experts)", function()
    local function lora(...)
      return helper.estimate("gpt-oss-20b", "--set", "finetune=lora", "--set", "seq_len=128",
        "--set", "precision=bf16", "--set", "optimizer=none", ...)
    end

    it("gives each named parameter lora_A [r x experts, in] and lora_B [out, r x experts]", function()
      -- update_layer: nn.Linear(in, r * num_experts) and nn.Linear(r * num_experts, out);
      -- gate_up_proj maps 2880 to 5760, down_proj 2880 to 2880, 32 experts, r 8
      local gate_up, down = 8 * 32 * (2880 + 5760), 8 * 32 * (2880 + 2880)
      local r = lora("--set", "lora_target_parameters=22.mlp.experts.gate_up_proj,23.mlp.experts.down_proj")
      assert.are.equal(gate_up + down, r.model.trainable_params)
      -- without a layer, every layer's: target_modules left out names no module (no PEFT defaults for gpt_oss)
      r = lora("--set", "lora_target_parameters=mlp.experts.gate_up_proj,mlp.experts.down_proj")
      assert.are.equal(24 * (gate_up + down), r.model.trainable_params)
      -- axolotl's checkpoint wrapper in the path changes nothing
      r = lora("--set", "lora_target_parameters=22._checkpoint_wrapped_module.mlp.experts.gate_up_proj")
      assert.are.equal(gate_up, r.model.trainable_params)
    end)

    it("makes each call's update and W + delta whole: an adapted layer peaks above a plain one", function()
      -- the layers adapted one by one are evaluated unfolded; all of them
      -- folded: the same figures either way
      local all = {}
      for i = 0, 23 do all[#all + 1] = i .. ".mlp.experts.down_proj" end
      local listed = lora("--set", "lora_target_parameters=" .. table.concat(all, ","))
      local every = lora("--set", "lora_target_parameters=mlp.experts.down_proj")
      assert.are.equal(every.per_gpu.peak_allocated_bytes, listed.per_gpu.peak_allocated_bytes)
      assert.are.equal(every.model.trainable_params, listed.model.trainable_params)
      -- bf16 weights, fp32 adapters without autocast: the update made in
      -- fp32 (32 x 2880 x 2880 x 4 bytes) and cast; in backward the
      -- gradient of W + delta cast up and scaled, in layer 5, above the
      -- plain run's peak (the loss's) by more than one fp32 update
      local plain = lora("--set", "lora_targets=q_proj")
      local one = lora("--set", "lora_targets=q_proj", "--set", "lora_target_parameters=5.mlp.experts.down_proj")
      assert.are.equal(5, one.per_gpu.peak_layer)
      assert.truthy(one.per_gpu.peak_op:find("lora.param", 1, true), one.per_gpu.peak_op)
      assert.is_true(one.per_gpu.peak_allocated_bytes - plain.per_gpu.peak_allocated_bytes > 32 * 2880 * 2880 * 4)
    end)

    it("refuses what PEFT would not match, naming the key", function()
      local fails = function(...) return helper.fails("gpt-oss-20b", "--set", "finetune=lora", ...) end
      assert.truthy(fails("--set", "lora_target_parameters=mlp.experts.w1")
        :find("lora_target_parameters: 'mlp.experts.w1' is not a mixture's experts parameter", 1, true))
      assert.truthy(fails("--set", "lora_target_parameters=24.mlp.experts.down_proj")
        :find("lora_target_parameters: names a layer the model does not have", 1, true))
      -- Mixtral's experts are nn.Linear modules under transformers 4.x: no 3-D parameter to name
      assert.truthy(helper.fails("mixtral-8x7b", "--set", "finetune=lora", "--set", "lora_targets=q_proj",
        "--set", "lora_target_parameters=mlp.experts.gate_up_proj")
        :find("lora_target_parameters: the model has no 3-D experts parameter of that name", 1, true))
      -- PEFT adds its defaults (q_proj, v_proj) where it has them for the model type
      assert.truthy(helper.fails("mixtral-8x7b", "--set", "finetune=lora", "--set", "experts_implementation=eager",
        "--set", "lora_target_parameters=mlp.experts.gate_up_proj")
        :find("name lora_targets too", 1, true))
    end)
  end)

  it("runs sdpa eagerly, as transformers does without an SDPA path", function()
    local function activations(attention)
      return helper.estimate("gpt-oss-20b", "--set", "seq_len=256", "--set", "precision=bf16",
        "--set", "attention=" .. attention).per_gpu.activations_bytes
    end
    assert.are.equal(activations("eager"), activations("sdpa"))
    -- FlashAttention-3 with sinks never makes the s x s scores
    assert.is_true(activations("flash") < activations("eager"))
  end)
end)
