-- DeepSeek-V3's multi-token prediction module as a branch whose combining
-- step is a Lua block with a second input (models/examples/deepseek-v3-mtp.lua,
-- models/examples/arch/deepseek_v3_mtp.lua, engine/ops/op_branch.c): its
-- parameters summed here from the checkpoint's module shapes, apart from the
-- engine, against the published figures; the main model byte for byte the
-- built-in deepseek_v3; what a branch is not modelled under; bad uses of
-- named inputs. Its memory is checked against PyTorch by compare.py
-- (tests/torch/models/mtp.py: thirteen "deepseek-v3 mtp" cases, depths 1 to 3, LoRA).
local helper = require("tests.lua.helper")
local json = require("dkjson")

local model = "models/examples/deepseek-v3-mtp.lua"

describe("DeepSeek-V3 with its MTP module", function()
  -- deepseek-ai/DeepSeek-V3 config.json
  local h, vocab, heads, q_rank, kv_rank, nope, rope, v = 7168, 129280, 128, 1536, 512, 128, 64, 128
  local experts, moe_inter = 256, 2048
  -- DeepseekV3Attention: q_a_proj, q_a_layernorm, q_b_proj, kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj
  local mla = h * q_rank + q_rank + q_rank * heads * (nope + rope) + h * (kv_rank + rope) + kv_rank
    + kv_rank * heads * (nope + v) + heads * v * h
  -- DeepseekV3MoE: the routed experts and one shared (gate, up, down), the router's weight (its
  -- e_score_correction_bias is a buffer); the layer's two norms
  local moe_layer = mla + experts * 3 * h * moe_inter + 3 * h * moe_inter + experts * h + 2 * h
  -- model.layers.61: enorm, hnorm, eh_proj, the layer, shared_head.norm
  local mtp = 2 * h + 2 * h * h + moe_layer + h
  local shared = vocab * h -- embed_tokens; shared_head.head is as large

  it("adds the MTP module's own parameters to the main model's, about the published 11.5B and 685B", function()
    local with = helper.estimate(model, "--set", "micro_batch=1", "--set", "seq_len=16").model.params
    local main = helper.estimate("deepseek-v3", "--set", "micro_batch=1", "--set", "seq_len=16").model.params
    assert.are.equal(mtp, with - main)
    assert.are.equal(11610067968, mtp)
    -- README_WEIGHTS.md: "MTP Modules: 11.5B unique parameters, excluding the shared 0.9B Embedding and 0.9B
    -- output Head" (eh_proj's 0.1B apart: 11,507,307,520)
    assert.is_true(math.abs(mtp - 11.5e9) / 11.5e9 < 0.01)
    assert.are.equal(926679040, shared)
    -- README.md: 685B on Hugging Face, 671B main model and 14B MTP module (with its own copies of the
    -- embedding and head, which the checkpoint stores and training shares)
    assert.is_true(math.abs(main - 671e9) / 671e9 < 0.001)
    assert.is_true(math.abs(main + mtp + 2 * shared - 685e9) / 685e9 < 0.001)
  end)

  -- arXiv 2412.19437 section 2.2: D sequential modules, each with its own projection, layer and norms
  -- (the embedding and head shared): D times the module's own parameters
  it("counts D modules of their own with mtp_depth = D", function()
    local one = helper.estimate(model, "--set", "micro_batch=1", "--set", "seq_len=16").model.params
    for _, d in ipairs({ 2, 3 }) do
      local deeper = helper.estimate(model, "--set", "micro_batch=1", "--set", "seq_len=16", "--set",
        "mtp_depth=" .. d).model.params
      assert.are.equal((d - 1) * mtp, deeper - one)
    end
  end)

  -- DeepSpeed ZeRO-1 and 2 over dp ranks (deepspeed/runtime/zero/stage_1_and_2.py): the bf16 parameters
  -- whole on every rank, the fp32 master weights and Adam's two fp32 moments split dp ways, the bf16
  -- gradients too under ZeRO-2; the MTP modules' parameters with the main model's (the published
  -- main model, 671,026,404,352, and the modules counted above from their shapes)
  it("shards the modules' states with the main model's under ZeRO-1 and ZeRO-2", function()
    local dp = 8
    for _, d in ipairs({ 1, 2 }) do
      local n = 671026404352 + d * mtp
      for _, zero in ipairs({ 1, 2 }) do
        local o = helper.estimate(model, "--set", "framework=deepspeed", "--set", "zero=" .. zero, "--set",
          "dp=" .. dp, "--set", "precision=mixed-bf16", "--set", "micro_batch=1", "--set", "seq_len=16", "--set",
          "mtp_depth=" .. d)
        assert.are.equal(n, o.model.params)
        assert.are.equal(2 * n, o.per_gpu.params_bytes)
        assert.are.equal(4 * n // dp, o.per_gpu.master_bytes)
        assert.are.equal(8 * n // dp, o.per_gpu.optimizer_bytes)
        assert.are.equal(zero == 2 and 2 * n // dp or 2 * n, o.per_gpu.grads_bytes)
      end
    end
  end)

  -- ZeRO-3 and FSDP over dp ranks: every state split dp ways (ZeRO-3: bf16 parameters, gradients, fp32
  -- master weights and moments; the parameters under stage3_param_persistence_threshold stay whole on
  -- every rank; FSDP with MixedPrecision: fp32 parameter and gradient shards, Adam's moments)
  it("shards the modules' states with the main model's under ZeRO-3 and FSDP", function()
    local dp = 64
    for _, d in ipairs({ 1, 2 }) do
      local n = 671026404352 + d * mtp
      local function run(...)
        return helper.estimate(model, "--set", "dp=" .. dp, "--set", "precision=mixed-bf16", "--set", "micro_batch=1",
          "--set", "seq_len=16", "--set", "mtp_depth=" .. d, ...)
      end
      local z = run("--set", "framework=deepspeed", "--set", "zero=3")
      assert.are.equal(2 * n // dp, z.per_gpu.grads_bytes)
      assert.are.equal(4 * n // dp, z.per_gpu.master_bytes)
      assert.are.equal(8 * n // dp, z.per_gpu.optimizer_bytes)
      assert.is_true(z.per_gpu.params_bytes >= 2 * n // dp and z.per_gpu.params_bytes < 2 * n // dp * 1.001)
      local f = run("--set", "framework=fsdp")
      assert.are.equal(4 * n // dp, f.per_gpu.params_bytes)
      assert.are.equal(4 * n // dp, f.per_gpu.grads_bytes)
      assert.are.equal(8 * n // dp, f.per_gpu.optimizer_bytes)
    end
  end)

  -- a small V3 (compare.py's deepseek_v3()), as the example family and as the built-in family
  local small = { "hidden=64", "layers=3", "heads=4", "intermediate=128", "vocab=256", "experts=8",
                  "experts_per_token=2", "moe_intermediate=32", "shared_intermediate=32", "dense_layers=1",
                  "expert_groups=4", "topk_groups=2", "q_lora_rank=32", "kv_lora_rank=16", "qk_nope_head_dim=16",
                  "qk_rope_head_dim=8", "v_head_dim=16" }
  local config = helper.write(json.encode({ model_type = "deepseek_v3", hidden_size = 64, num_hidden_layers = 3,
    num_attention_heads = 4, num_key_value_heads = 4, intermediate_size = 128, vocab_size = 256, q_lora_rank = 32,
    kv_lora_rank = 16, qk_nope_head_dim = 16, qk_rope_head_dim = 8, v_head_dim = 16, n_routed_experts = 8,
    num_experts_per_tok = 2, n_group = 4, topk_group = 2, moe_intermediate_size = 32, n_shared_experts = 1,
    first_k_dense_replace = 1, norm_topk_prob = true, routed_scaling_factor = 2.5, rope_interleave = true,
    tie_word_embeddings = false }), ".json")
  local function run(path, sets, extra)
    local args = { path, "--json", "--timeline", "--set", "device=cpu", "--set", "torch_version=1.13" }
    for _, list in ipairs({ sets, extra }) do
      for _, kv in ipairs(list) do args[#args + 1] = "--set"; args[#args + 1] = kv end
    end
    return helper.estimate(table.unpack(args))
  end
  for _, recipe in ipairs({ { "precision=fp32" }, { "precision=bf16", "attention=eager" },
                            { "precision=amp-bf16", "checkpointing=full" } }) do
    it("without the module, is the built-in DeepSeek-V3 byte for byte: " .. table.concat(recipe, " "), function()
      local sets = { "mtp_depth=0" }
      for _, kv in ipairs(small) do sets[#sets + 1] = kv end
      local a, b = run(model, sets, recipe), run(config, {}, recipe)
      assert.are.same(b.per_gpu, a.per_gpu)
      assert.are.same(b.timeline, a.timeline)
    end)
  end

  -- FSDP's auto-wrap policy wraps the module's decoder layer as the model's layers (the same class), a
  -- unit gathered before it runs and again for its backward; the rest of the module (enorm, hnorm,
  -- eh_proj, its norm) is the root's with the embedding, the final norm and the head
  it("gathers the module's layer as a unit of its own under FSDP, the rest with the root", function()
    local hs, v, hd, q, kv, nope, rp, vd, e, mi = 64, 256, 4, 32, 16, 16, 8, 16, 8, 32
    local layer = hs * q + q + q * hd * (nope + rp) + hs * (kv + rp) + kv + kv * hd * (nope + vd) + hd * vd * hs
      + e * 3 * hs * mi + 3 * hs * mi + e * hs + 2 * hs
    -- (the ledger counts the caching allocator's 512-byte blocks; bf16 gathers)
    local function blocks(bytes) return (bytes + 511) // 512 * 512 end
    for _, d in ipairs({ 1, 2 }) do
      local args = { model, "--json", "--timeline" }
      for _, kv in ipairs(small) do args[#args + 1] = "--set"; args[#args + 1] = kv end
      for _, kv in ipairs({ "framework=fsdp", "dp=4", "precision=mixed-bf16", "mtp_depth=" .. d }) do
        args[#args + 1] = "--set"; args[#args + 1] = kv
      end
      local out = helper.estimate(table.unpack(args))
      local gathers, root = {}, nil
      for _, ev in ipairs(out.timeline) do
        if ev.op == "all_gather" and ev.phase == "forward" then gathers[ev.layer] = ev.delta end
        if ev.op == "all_gather.root" and ev.delta > 0 then root = ev.delta end
      end
      for k = 1, d do assert.are.equal(blocks(2 * layer), gathers[3 + k - 1], "depth " .. k) end
      -- embed_tokens and lm_head (untied), d x (eh_proj, enorm, hnorm, shared_head.norm), the final norm
      assert.are.equal(blocks(2 * (2 * v * hs + d * (2 * hs * hs + 3 * hs) + hs)), root)
    end
  end)

  it("runs the module before the final norm, beside the main loss", function()
    local out = run(model, small, { "precision=bf16" })
    local labels = {}
    for _, e in ipairs(out.timeline) do labels[e.label or e.op or ""] = true end
    local ok = false
    for k in pairs(labels) do if k:find("mtp", 1, true) then ok = true end end
    assert.is_true(ok)
  end)

  for name, test in helper.refusals(model, { "micro_batch=1", "seq_len=64" }, {
    { { "framework=fsdp2", "dp=2" }, "framework: a branch (multi-token prediction) is not modelled under FSDP2" },
    { { "framework=megatron", "pp=2", "dp=1" },
      "framework: a branch (multi-token prediction) is modelled as PyTorch modules run it" },
    { { "loss=chunked" }, "loss: a branch (multi-token prediction) is modelled with the plain cross-entropy loss" },
    { { "finetune=freeze", "trainable_layers=1" },
      "finetune: a branch (multi-token prediction) is modelled for full training and LoRA / QLoRA / DoRA" },
  }) do
    it(name, test)
  end
end)

-- A family beside its model script: a block naming `inputs`, in a branch or not.
local function family(inputs, in_branch)
  local dir = os.tmpname()
  os.remove(dir)
  assert(os.execute("mkdir -p " .. dir .. "/arch"))
  local f = assert(io.open(dir .. "/arch/twoinputs.lua", "w"))
  f:write(string.format([[
return architecture {
  name = "twoinputs",
  fields = { { "hidden", "int" } },
  build = function(c)
    local b = block { name = "join", width = c.hidden, inputs = %s,
      params = { { "proj", linear = { 2 * c.hidden, c.hidden } } },
      forward = function(x, p, e) return p.proj(F.cat({ x, e }, -1)) end }
    local final = { lm_head { vocab = 10, hidden = c.hidden }, cross_entropy {} }
    if %s then table.insert(final, 1, branch { b }) end
    return decoder { embed = { token_embedding { vocab = 10, hidden = c.hidden } },
      layer = %s, layers = 1, final = final }
  end,
}
]], inputs, tostring(in_branch), in_branch and "{ dropout { p = 0 } }" or "{ residual { b } }"))
  f:close()
  f = assert(io.open(dir .. "/m.lua", "w"))
  f:write("return twoinputs { hidden = 16 }\n")
  f:close()
  return dir
end

describe("a block with named inputs", function()
  it("names an unknown input with the script's line", function()
    local dir = family('{ "next_tokens" }', true)
    local err = helper.fails(dir .. "/m.lua")
    os.execute("rm -rf " .. dir)
    assert.truthy(err:find("arch/twoinputs.lua:5: block: unknown input 'next_tokens'", 1, true), err)
  end)
  it("runs inside a branch, which makes its inputs", function()
    local dir = family('{ "shifted_embeddings" }', false)
    local err = helper.fails(dir .. "/m.lua")
    os.execute("rm -rf " .. dir)
    assert.truthy(err:find("model: a block that names inputs", 1, true), err)
  end)
  it("takes the shifted tokens' embedding in a branch: its projection's input is twice the hidden width", function()
    local dir = family('{ "shifted_embeddings" }', true)
    local out = helper.estimate(dir .. "/m.lua", "--set", "micro_batch=1", "--set", "seq_len=8", "--set",
      "precision=fp32")
    os.execute("rm -rf " .. dir)
    -- token embedding 10 x 16, the layer's nothing, join.proj 32 x 16, lm_head 10 x 16
    assert.are.equal(10 * 16 + 32 * 16 + 10 * 16, out.model.params)
  end)
end)
