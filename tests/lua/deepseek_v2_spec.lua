-- DeepSeek-V2 and V2-Lite (model_type deepseek_v2, DeepSeek's own
-- modeling_deepseek.py): parameter counts against the published figures and
-- against the configurations' module shapes summed here by hand, config.json
-- import, and what that modeling code cannot run. (Activations and the
-- per-layer rotary caches are checked against PyTorch in
-- tests/torch/compare.py.)
local helper = require("tests.lua.helper")

local function estimate(model, ...)
  return helper.estimate(model, "--set", "precision=fp32", "--set", "seq_len=128", ...)
end

-- The module shapes of DeepseekV2ForCausalLM for a config: embeddings and
-- head, per layer the latent attention (q_a_proj, q_a_layernorm, q_b_proj
-- or one q_proj; kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj) and
-- two RMSNorms, the dense MLPs, per MoE layer `active` experts of three
-- matrices, the shared experts' MLP and the gate's weight, the final norm.
local function shape_sum(c, active)
  local qk = c.nope + c.rope
  local q = c.q_lora > 0 and (c.hidden * c.q_lora + c.q_lora + c.q_lora * c.heads * qk) or c.hidden * c.heads * qk
  local attention = q + c.hidden * (c.kv_lora + c.rope) + c.kv_lora + c.kv_lora * c.heads * (c.nope + c.v)
    + c.heads * c.v * c.hidden
  local per_layer = attention + 2 * c.hidden
  local dense = 3 * c.hidden * c.intermediate
  local moe = active * 3 * c.hidden * c.moe + 3 * c.hidden * c.shared + c.experts * c.hidden
  return 2 * c.vocab * c.hidden + c.layers * per_layer + c.dense_layers * dense + (c.layers - c.dense_layers) * moe
    + c.hidden
end

local V2 = { hidden = 5120, layers = 60, heads = 128, intermediate = 12288, vocab = 102400, q_lora = 1536,
             kv_lora = 512, nope = 128, rope = 64, v = 128, experts = 160, moe = 1536, shared = 3072, dense_layers = 1 }
local LITE = { hidden = 2048, layers = 27, heads = 16, intermediate = 10944, vocab = 102400, q_lora = 0,
               kv_lora = 512, nope = 128, rope = 64, v = 128, experts = 64, moe = 1408, shared = 2816, dense_layers = 1 }

-- the parameters a token uses: the same model with only 6 routed experts,
-- plus the gate's rows of the others (the gate scores every expert)
local function activated(model, c)
  return estimate(model, "--set", "experts=6", "--set", "expert_groups=1", "--set", "topk_groups=1",
    "--set", "group_limited=false").model.params + (c.experts - 6) * c.hidden * (c.layers - c.dense_layers)
end

describe("DeepSeek-V2", function()
  it("has the parameters its configuration's shapes sum to: 236B, as published", function()
    -- the paper's abstract (arXiv:2405.04434): "236B total parameters"
    local params = estimate("deepseek-v2").model.params
    assert.are.equal(shape_sum(V2, V2.experts), params)
    assert.are.equal(235741434880, params)
    assert.are.equal(236, math.floor(params / 1e9 + 0.5))
  end)

  it("activates 21B of them for each token, as published", function()
    -- "of which 21B are activated for each token": 6 of 160 routed experts
    -- a layer; the published figure is the sum with the head and without
    -- the input embedding (20.85B; with it 21.38B, without both 20.33B)
    local params = activated("deepseek-v2", V2)
    assert.are.equal(shape_sum(V2, 6), params)
    assert.are.equal(21375800320, params)
    assert.are.equal(21, math.floor((params - V2.vocab * V2.hidden) / 1e9 + 0.5))
  end)

  it("reads DeepSeek-V2's config.json like the model script", function()
    local a = estimate("tests/fixtures/deepseek-v2-config.json")
    local b = estimate("deepseek-v2")
    assert.are.equal(b.model.params, a.model.params)
    assert.are.equal(b.per_gpu.peak_allocated_bytes, a.per_gpu.peak_allocated_bytes)
  end)
end)

describe("DeepSeek-V2.5", function()
  it("has DeepSeek-V2's shape and its parameters: 236B, as published", function()
    -- deepseek-ai/DeepSeek-V2.5's config.json has V2's shapes (vocab_size
    -- 102400 included); the Hugging Face collection deepseek-ai/deepseek-v25
    -- (read 2026-12-03) lists the checkpoint as 236B
    local params = estimate("deepseek-v2.5").model.params
    assert.are.equal(shape_sum(V2, V2.experts), params)
    assert.are.equal(236, math.floor(params / 1e9 + 0.5))
    local b = estimate("deepseek-v2")
    assert.are.equal(b.per_gpu.peak_allocated_bytes, estimate("deepseek-v2.5").per_gpu.peak_allocated_bytes)
  end)
end)

describe("DeepSeek-V2-Lite", function()
  it("has the parameters its configuration's shapes sum to: 15.7B, as published", function()
    -- DeepSeek-V2's README and the model card: "15.7B" total
    local params = estimate("deepseek-v2-lite").model.params
    assert.are.equal(shape_sum(LITE, LITE.experts), params)
    assert.are.equal(15706484224, params)
    assert.are.equal(157, math.floor(params / 1e8 + 0.5))
  end)

  it("activates 2.4B of them for each token, as published (without the input embedding)", function()
    -- "2.4B activated": 6 of 64 routed experts a layer; the shapes give
    -- 2,451,435,008 with the head and without the input embedding (2.66B
    -- with it, 2.24B without both): the published figure, truncated
    local params = activated("deepseek-v2-lite", LITE)
    assert.are.equal(shape_sum(LITE, 6), params)
    assert.are.equal(2451435008, params - LITE.vocab * LITE.hidden)
    assert.are.equal(24, math.floor((params - LITE.vocab * LITE.hidden) / 1e8))
  end)

  it("reads DeepSeek-V2-Lite's config.json like the model script (q_lora_rank null: one q_proj)", function()
    local a = estimate("tests/fixtures/deepseek-v2-lite-config.json")
    local b = estimate("deepseek-v2-lite")
    assert.are.equal(b.model.params, a.model.params)
    assert.are.equal(b.per_gpu.peak_allocated_bytes, a.per_gpu.peak_allocated_bytes)
  end)
end)

describe("DeepSeek-V2's own modeling code", function()
  -- bf16: the fp32 gate's weights promote the experts' sum to fp32 and the
  -- next 16-bit linear refuses it (deepseek-ai/DeepSeek-Coder-V2 issue 6);
  -- autocast: y[mask] = 16-bit rows into fp32 ones (hiyouga/LlamaFactory
  -- issue 3886). tests/torch's mirror fails both ways too.
  it("trains in fp32 only", function()
    for _, precision in ipairs({ "bf16", "fp16", "amp-bf16", "mixed-bf16" }) do
      assert.truthy(helper.fails("deepseek-v2-lite", "--set", "precision=" .. precision, "--set", "seq_len=128")
        :find("precision: DeepSeek-V2's own modeling code trains only in fp32", 1, true))
    end
  end)

  it("runs attention eagerly (no SDPA class) and refuses flash and prefix tuning", function()
    local eager = estimate("deepseek-v2-lite", "--set", "attention=eager").per_gpu.peak_allocated_bytes
    assert.are.equal(eager, estimate("deepseek-v2-lite", "--set", "attention=sdpa").per_gpu.peak_allocated_bytes)
    assert.truthy(helper.fails("deepseek-v2-lite", "--set", "precision=fp32", "--set", "attention=flash")
      :find("attention: DeepSeek-V2's own attention is modelled eagerly", 1, true))
    assert.truthy(helper.fails("deepseek-v2-lite", "--set", "precision=fp32", "--set", "finetune=prefix",
      "--set", "num_virtual_tokens=4")
      :find("finetune: prefix tuning of DeepSeek-V2 is not modelled", 1, true))
  end)

  it("refuses configurations its training path cannot run or vramplan does not model", function()
    local base = '{"model_type": "deepseek_v2", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, '
      .. '"intermediate_size": 128, "vocab_size": 256, "kv_lora_rank": 16, "qk_nope_head_dim": 16, '
      .. '"qk_rope_head_dim": 8, "v_head_dim": 16, "n_routed_experts": 4, "moe_intermediate_size": 32, '
      .. '"num_experts_per_tok": 2, "n_shared_experts": 1, "first_k_dense_replace": 1, '
      .. '"auto_map": {"AutoModelForCausalLM": "modeling_deepseek.DeepseekV2ForCausalLM"}'
    helper.assert_config_rejected(base .. ', "aux_loss_alpha": 0.0}', "aux_loss_alpha")
    helper.assert_config_rejected(base .. ', "seq_aux": false}', "seq_aux")
    helper.assert_config_rejected(base .. ', "topk_method": "noaux_tc"}', "topk_method")
    helper.assert_config_rejected(base .. ', "moe_layer_freq": 2}', "moe_layer_freq")
    helper.assert_config_rejected(base .. ', "scoring_func": "sigmoid"}', "scoring_func")
  end)
end)

-- The same checkpoints under transformers' own DeepseekV2ForCausalLM (4.54+,
-- modelled as 4.56-4.57 run it): what it allocates is checked against
-- PyTorch in tests/torch/compare.py (the deepseek-v2-hf cases: fp32, bf16,
-- amp-bf16, checkpointed, LoRA); here the switch and what it accepts.
describe("DeepSeek-V2 under transformers' DeepseekV2ForCausalLM", function()
  local TINY = '{"model_type": "deepseek_v2", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, '
    .. '"intermediate_size": 128, "vocab_size": 256, "kv_lora_rank": 16, "qk_nope_head_dim": 16, '
    .. '"qk_rope_head_dim": 8, "v_head_dim": 16, "n_routed_experts": 4, "moe_intermediate_size": 32, '
    .. '"num_experts_per_tok": 2, "n_shared_experts": 1, "first_k_dense_replace": 1, "q_lora_rank": null'

  it("has the same parameters as DeepSeek's own code", function()
    assert.are.equal(15706484224, estimate("deepseek-v2-lite-hf").model.params)
    assert.are.equal(235741434880, estimate("deepseek-v2-hf").model.params)
  end)

  it("trains in 16-bit and under autocast, where DeepSeek's own code cannot", function()
    for _, precision in ipairs({ "bf16", "fp16", "amp-bf16", "amp-fp16", "mixed-bf16" }) do
      local peak = helper.estimate("deepseek-v2-lite-hf", "--set", "precision=" .. precision, "--set", "seq_len=128")
        .per_gpu.peak_allocated_bytes
      assert.truthy(peak > 0)
    end
    assert.truthy(helper.fails("deepseek-v2-lite", "--set", "precision=bf16", "--set", "seq_len=128")
      :find("or transformers' own DeepseekV2ForCausalLM, which trains in 16-bit (models deepseek-v2-hf", 1, true))
  end)

  it("is what a config.json without auto_map loads; with auto_map DeepSeek's own file", function()
    local fixture = helper.read_json("tests/fixtures/deepseek-v2-lite-config.json")
    fixture.auto_map = nil
    local path = helper.write(require("dkjson").encode(fixture), ".json")
    helper.assert_same_model(path, "deepseek-v2-lite-hf")
    -- (with auto_map: "reads DeepSeek-V2-Lite's config.json like the model script", above)
    -- the two codes differ in what they allocate
    local own = estimate("deepseek-v2-lite").per_gpu.peak_allocated_bytes
    assert.are_not.equal(own, estimate("deepseek-v2-lite-hf").per_gpu.peak_allocated_bytes)
  end)

  it("reads neither aux_loss_alpha nor seq_aux (DeepseekV2MoEGate has no auxiliary loss)", function()
    for _, extra in ipairs({ ', "aux_loss_alpha": 0.0}', ', "seq_aux": false}' }) do
      local path = helper.write(TINY .. extra, ".json")
      local _, err, code = helper.run("estimate", path, "--set", "precision=bf16")
      assert(code == 0, err)
    end
  end)
end)
