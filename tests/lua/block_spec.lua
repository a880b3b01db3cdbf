-- Blocks written in Lua (vramplan.block): LLaMA with its attention, MLP and
-- RMSNorms as Lua blocks (models/blocks/llama.lua), and GPT-2 with its MLP
-- (models/blocks/gpt2.lua), are the llama and gpt2 families' built-in models
-- byte for byte: every event of every rank's timeline, under the recipes
-- that change what a block's primitives do. And bad blocks fail at their
-- script's line.
local helper = require("tests.lua.helper")
local json = require("dkjson")

local function pair(family, config)
  return helper.write("return " .. family .. ' { name = "tiny", lua_blocks = "' .. family .. '", ' .. config .. " }\n"),
    helper.write("return " .. family .. ' { name = "tiny", ' .. config .. " }\n")
end

local function estimate(model, sets)
  local args = { "--json", "--timeline", model }
  for _, s in ipairs(sets) do
    args[#args + 1] = "--set"
    args[#args + 1] = s
  end
  local out, err, code = helper.run("estimate", table.unpack(args))
  assert(code == 0, err)
  local o = json.decode(out)
  o.time = nil -- the step-time model prices the core's op kinds only
  o.model.arch, o.model.source = nil, nil
  return o
end

local recipes = {
  {},
  { "precision=amp-bf16" },
  { "checkpointing=full", "precision=amp-bf16" },
  { "finetune=lora", "lora_targets=all-linear", "checkpointing=full", "precision=amp-bf16" },
  { "finetune=qlora", "lora_targets=all-linear", "precision=amp-bf16" },
  { "framework=deepspeed", "zero=3", "dp=4", "precision=mixed-bf16" },
  { "framework=megatron", "tp=2", "sequence_parallel=true", "precision=mixed-bf16" },
  { "framework=megatron", "precision=fp8" },
  { "attention=eager", "precision=amp-fp16", "finetune=freeze" },
}

local function same_timelines(lua_blocks, built_in, sets)
  return function()
    local a, b = estimate(lua_blocks, sets), estimate(built_in, sets)
    assert.are.equal(#b.timeline, #a.timeline)
    for i = 1, #b.timeline do assert.are.same(b.timeline[i], a.timeline[i], "event " .. i) end
    assert.are.same(b, a)
  end
end

local function named(sets) return #sets > 0 and table.concat(sets, " ") or "defaults" end

-- What F.sdpa, F.rotary and F.cache change with: the kernel (eager, SDPA's
-- two, FlashAttention-2), the eager core checkpointed alone, context
-- parallelism's ring, LoRA on the four projections, the cache kept or not.
local attention_recipes = {
  { "framework=megatron", "checkpointing=selective", "attention=eager", "precision=mixed-bf16" },
  { "framework=megatron", "checkpointing=selective", "attention=eager", "tp=2", "sequence_parallel=true",
    "precision=mixed-fp16" },
  { "attention=flash", "precision=amp-bf16", "finetune=lora", "lora_targets=q_proj,k_proj,v_proj,o_proj" },
  { "attention=sdpa-mem-efficient", "precision=fp32" },
  { "attention=eager", "precision=amp-bf16", "micro_batch=3", "offload_activations=true" },
  { "attention=eager", "finetune=qlora", "lora_targets=all-linear", "precision=amp-bf16" },
  { "framework=megatron", "cp=2", "precision=mixed-bf16" },
  { "framework=megatron", "tp=2", "attention=eager", "precision=mixed-bf16" },
  { "checkpointing=op-selective", "precision=amp-bf16" },
  { "use_cache=false", "attention=eager" },
}

-- Under DTensor's tensor parallelism (framework = fsdp2, torchtitan's
-- plan): the attention and MLP blocks read their input with
-- column-parallel linears, so each is given it all-gathered at its entry
-- (PrepareModuleInput), the RMSNorm blocks run on the sequence's share
-- (SequenceParallel), the row-parallel linears reduce-scatter back to it;
-- loss_parallel and torchao's float8 styles as the built-in model has them.
-- Before the blocks had a plan, their column linears read the share as
-- it was (a timeline with no all_gather.module_input: not the built-in's).
local dtensor_recipes = {
  { "framework=fsdp2", "dp=2", "tp=2", "sequence_parallel=true", "precision=mixed-bf16" },
  { "framework=fsdp2", "dp=2", "tp=2", "sequence_parallel=true", "precision=mixed-bf16", "checkpointing=full" },
  { "framework=fsdp2", "dp=2", "tp=2", "sequence_parallel=true", "precision=mixed-bf16", "checkpointing=op-selective" },
  { "framework=fsdp2", "dp=2", "tp=2", "cp=2", "sequence_parallel=true", "precision=mixed-bf16",
    "checkpointing=full", "micro_batch=2" },
  { "framework=fsdp2", "dp=2", "tp=2", "cp=2", "sequence_parallel=true", "precision=fp8-torchao",
    "checkpointing=op-selective" },
  { "framework=fsdp2", "dp=2", "tp=2", "sequence_parallel=true", "precision=fp8-torchao", "checkpointing=full" },
  { "framework=fsdp2", "dp=2", "tp=2", "sequence_parallel=true", "precision=fp8-torchao", "fp8_recipe=rowwise" },
  { "framework=fsdp2", "dp=2", "tp=2", "precision=fp8-torchao" },
  { "framework=fsdp2", "dp=2", "tp=2", "precision=mixed-bf16", "attention=eager" },
  { "framework=fsdp2", "dp=2", "tp=2", "sequence_parallel=true", "precision=mixed-bf16", "compile=true" },
  { "framework=fsdp2", "dp=2", "tp=2", "pp=2", "pp_schedule=1F1B", "sequence_parallel=true", "precision=mixed-bf16" },
  { "framework=fsdp2", "dp=2", "tp=2", "sequence_parallel=true", "precision=mixed-bf16", "checkpointing=every-2" },
  { "framework=fsdp2", "dp=2", "tp=2", "sequence_parallel=true", "precision=mixed-bf16", "compile=true",
    "async_tp=true" },
}

describe("a LLaMA whose attention, MLP and RMSNorms are Lua blocks", function()
  local lua_blocks, built_in = pair("llama", "hidden = 64, layers = 2, heads = 4, kv_heads = 2, intermediate = 96, "
    .. "vocab = 100")
  for _, list in ipairs({ recipes, attention_recipes, dtensor_recipes }) do
    for _, sets in ipairs(list) do
      it("has the built-in LLaMA's timeline byte for byte: " .. named(sets), same_timelines(lua_blocks, built_in, sets))
    end
  end
  it("with multi-query attention (one key/value head: expanded, not copied)", function()
    local mqa_blocks, mqa = pair("llama", "hidden = 64, layers = 2, heads = 4, kv_heads = 1, intermediate = 96, "
      .. "vocab = 100")
    for _, sets in ipairs({ recipes[9], attention_recipes[1] }) do same_timelines(mqa_blocks, mqa, sets)() end
  end)
  it("refuses by name what it does not model: prefix tuning, fewer key/value heads than tp ranks", function()
    local _, err = helper.run("estimate", lua_blocks, "--set", "finetune=prefix", "--set", "num_virtual_tokens=4")
    assert.truthy(err:find("finetune: prefix tuning of a Lua block's attention is not modelled", 1, true), err)
    _, err = helper.run("estimate", lua_blocks, "--set", "framework=megatron", "--set", "tp=4")
    assert.truthy(err:find("tp: must divide a Lua block's key/value heads", 1, true), err)
  end)
end)

-- models/blocks/llama.lua with its attention's forward changed (`from`
-- replaced by `to`, or each { from, to } of a list `from`, in llama.lua or
-- else in the library it uses, models/lib/llama_layers.lua, whose changed
-- copy goes beside it in blocks/lib/), beside a model of it: the
-- estimate's JSON.
local function mutated(from, to, sets, config)
  local changes = type(from) == "table" and from or { { from, to } }
  config = config or "hidden = 64, layers = 2, heads = 4, kv_heads = 2, intermediate = 96, vocab = 100"
  local dir = os.tmpname()
  os.remove(dir)
  assert(os.execute("mkdir -p " .. dir .. "/blocks/lib"))
  local a = assert(io.open("models/blocks/llama.lua")):read("a")
  local lib = assert(io.open("models/lib/llama_layers.lua")):read("a")
  local lib_changed = false
  for _, change in ipairs(changes) do
    local m
    a, m = a:gsub(change[1], change[2])
    if m == 0 then
      lib, m = lib:gsub(change[1], change[2])
      lib_changed = true
    end
    assert(m == 1, "the pattern " .. change[1] .. " is not in models/blocks/llama.lua or models/lib/llama_layers.lua once")
  end
  assert(io.open(dir .. "/blocks/llama_mutant.lua", "w")):write(a):close()
  if lib_changed then assert(io.open(dir .. "/blocks/lib/llama_layers.lua", "w")):write(lib):close() end
  local model = dir .. "/mutant.lua"
  assert(io.open(model, "w")):write('return llama { name = "tiny", lua_blocks = "llama_mutant", ' .. config
    .. " }\n"):close()
  local o = estimate(model, sets)
  os.execute("rm -rf " .. dir)
  return o
end

describe("a family's lua_blocks", function()
  it("names a blocks script it cannot find, and a field its blocks do not model", function()
    local config = "hidden = 64, layers = 2, heads = 4, intermediate = 96, vocab = 100"
    local err = helper.fails(helper.write('return llama { name = "tiny", lua_blocks = "nosuch", ' .. config .. " }\n"))
    assert.truthy(err:find("lua_blocks: no blocks script 'nosuch'", 1, true), err)
    err = helper.fails(helper.write('return llama { name = "tiny", lua_blocks = "llama", norm_style = "gemma", '
      .. config .. " }\n"))
    assert.truthy(err:find("norm_style: is not what the llama Lua blocks model", 1, true), err)
  end)
end)

describe("the test of the Lua attention", function()
  local _, built_in = pair("llama", "hidden = 64, layers = 2, heads = 4, kv_heads = 2, intermediate = 96, vocab = 100")
  -- each change alters what is alive when, and the comparison sees it
  local changes = {
    { "is_causal = true, keeps_weights = true", "is_causal = true", { "attention=eager", "checkpointing=full" } },
    { "is_causal = true, keeps_weights = true", "is_causal = true, keeps_weights = true, upcast_softmax = false",
      { "attention=eager", "precision=amp-bf16" } },
    { 'q, k = F.keep%(q_rotated, "query_states"%), F.keep%(k_rotated, "key_states"%)',
      'q, k = F.keep(q_rotated, "q_rotated"), F.keep(k_rotated, "k_rotated")', {} },
    { 'local k_cached, v_cached = F.cache%(k, v%)', "local k_cached, v_cached = k, v", {} },
  }
  for _, change in ipairs(changes) do
    it("fails when its saves or lifetimes change: " .. change[2], function()
      local a, b = mutated(change[1], change[2], change[3]), estimate(built_in, change[3])
      assert.are_not.same(b.timeline, a.timeline)
    end)
  end
end)

-- PEFT matches target_modules against each module's own name (peft
-- tuners_utils.py check_target_module_exists: the key or its last part);
-- a Lua block's linear of a name no core module has is adapted as the
-- core's are. The MLP's projections renamed my_up, my_gate, my_down (their
-- labels kept): adapted by those names, or by all-linear, the model is the
-- built-in LLaMA adapted on up_proj, gate_proj, down_proj byte for byte.
describe("LoRA on a Lua block's own parameter names", function()
  local _, built_in = pair("llama", "hidden = 64, layers = 2, heads = 4, kv_heads = 2, intermediate = 96, vocab = 100")
  -- (Phi-3's MLP declares a down_proj too: the one after gate_proj)
  local renamed = {
    { '({ "up_proj", linear = %b{}, split = "column", bias = c.mlp_bias)', '%1, module = "my_up"' },
    { '({ "gate_proj", linear = %b{}, split = "column", bias = c.mlp_bias)( },%s*{ "down_proj", linear = %b{}, '
      .. 'split = "row", bias = c.mlp_bias)', '%1, module = "my_gate"%2, module = "my_down"' },
  }
  local lora = { "finetune=lora", "precision=amp-bf16", "checkpointing=full" }
  local function with(sets, more)
    local all = { table.unpack(sets) }
    for _, s in ipairs(more) do all[#all + 1] = s end
    return all
  end
  it("adapts them by name as the core's modules", function()
    local a = mutated(renamed, nil, with(lora, { "lora_targets=q_proj,my_up,my_gate,my_down" }))
    local b = estimate(built_in, with(lora, { "lora_targets=q_proj,up_proj,gate_proj,down_proj" }))
    assert.are.equal("q_proj,my_up,my_gate,my_down", a.recipe.lora_targets)
    assert.are.equal("q_proj,my_up,my_gate,my_down", a.model.lora_modules)
    a.recipe.lora_targets, b.recipe.lora_targets, a.model.lora_modules, b.model.lora_modules = nil, nil, nil, nil
    assert.are.same(b, a)
  end)
  it("adapts them under all-linear, every linear but the head", function()
    local sets = with(lora, { "lora_targets=all-linear" })
    local a, b = mutated(renamed, nil, sets), estimate(built_in, sets)
    assert.are.equal("q_proj,k_proj,v_proj,o_proj,my_up,my_gate,my_down", a.model.lora_modules)
    a.model.lora_modules, b.model.lora_modules = nil, nil
    assert.are.same(b, a)
  end)
  it("names a target that matches nothing", function()
    local _, err = helper.run("estimate", built_in, "--set", "finetune=lora", "--set", "lora_targets=q_proj,my_proj")
    assert.truthy(err:find("lora_targets: no linear module of the model is called my_proj", 1, true), err)
    _, err = helper.run("estimate", built_in, "--set", "finetune=lora", "--set", "lora_targets=mlp.up_proj")
    assert.truthy(err:find("lora_targets: 'mlp.up_proj' is not a module's name", 1, true), err)
  end)
  -- modules_to_save (PEFT's _set_trainable: every module whose path ends
  -- with a name given gets a ModulesToSaveWrapper, the original frozen
  -- beside a trained copy) by a Lua block's own names: the built-in model
  -- saving up_proj and gate_proj, byte for byte
  it("saves them by name as the core's modules (modules_to_save)", function()
    local sets = { "finetune=lora", "precision=amp-bf16", "lora_targets=q_proj,my_down" }
    local a = mutated(renamed, nil, with(sets, { "modules_to_save=my_up,my_gate" }))
    local b = estimate(built_in, { "finetune=lora", "precision=amp-bf16", "lora_targets=q_proj,down_proj",
      "modules_to_save=up_proj,gate_proj" })
    assert.are.equal("my_up,my_gate", a.recipe.modules_to_save)
    assert.are.equal("my_up,my_gate", a.model.saved_modules)
    for _, r in ipairs({ a, b }) do
      r.recipe.lora_targets, r.recipe.modules_to_save, r.model.lora_modules, r.model.saved_modules = nil, nil, nil, nil
    end
    assert.are.same(b, a)
    local _, err = helper.run("estimate", built_in, "--set", "finetune=lora", "--set", "modules_to_save=my_proj")
    assert.truthy(err:find("modules_to_save: no module of the model is called my_proj", 1, true), err)
    _, err = helper.run("estimate", built_in, "--set", "finetune=qlora", "--set", "lora_targets=q_proj",
      "--set", "modules_to_save=norm,my_up")
    assert.truthy(err:find("modules_to_save: no module of the model is called my_up", 1, true), err)
  end)
end)

-- LlamaAttention with eager_attention_forward written out (transformers
-- 4.48-4.52 modeling_llama.py) in place of F.sdpa: repeat_kv, q @ k^T
-- (scores whose last dimension is the sequence), * scaling, + the causal
-- mask, softmax in fp32 cast back, dropout, @ v, the heads merged by a
-- copy; the decoder layer keeps the probabilities. The same bytes as the
-- built-in eager attention, event for event (transformers' modelling code:
-- under Megatron-LM its own attention core runs, which a block's
-- `megatron` forward would write).
local sdpa_call = "local out = F%.sdpa%(q, k, v, { is_causal = true, keeps_weights = true }%)"
local function eager_attention(softmax, keep)
  return [[local out = F.call(function(query, key, value)
            local n_rep = c.heads // c.kv_heads
            local key_states = F.keep(F.repeat_kv(key, n_rep), "key_states")
            local value_states = F.keep(F.repeat_kv(value, n_rep), "value_states")
            local attn_weights = F.keep(F.mul(F.matmul(query, key_states:transpose(2, 3),
              { label = "scores", operands = { "q", "k" } }), c.head_dim ^ -0.5, { label = "scale" }), "attn_weights")
            attn_weights = F.keep(F.add(attn_weights, F.mask("causal"), { label = "mask" }), "attn_weights")
            attn_weights = F.keep(]] .. softmax .. [[:to(query.dtype,
              { label = "softmax_downcast" }), "attn_weights")
            attn_weights = ]] .. keep .. [[(F.keep(F.dropout(attn_weights, 0.0, { label = "dropout" }), "attn_weights"))
            local attn_output = F.keep(F.matmul(attn_weights, value_states,
              { label = "context", operands = { "probs", "v" } }), "attn_output")
            attn_output = F.keep(attn_output:transpose(1, 2):contiguous({ label = "merge_heads" }), "attn_output")
            return attn_output
          end, q, k, v)]]
end
local written_out = eager_attention('F.softmax(attn_weights, -1, { dtype = "float32" })', "F.keep_in_layer")

describe("eager attention written out with F.matmul, F.mask and F.repeat_kv", function()
  local eager_recipes = {
    { "attention=eager" },
    { "attention=eager", "precision=amp-bf16", "micro_batch=3", "offload_activations=true" },
    { "attention=eager", "precision=bf16", "checkpointing=full" },
    { "attention=eager", "finetune=qlora", "lora_targets=all-linear", "precision=amp-bf16" },
    { "attention=eager", "precision=amp-fp16", "finetune=freeze" },
    { "attention=eager", "framework=deepspeed", "zero=3", "dp=4", "precision=mixed-bf16" },
    { "attention=eager", "use_cache=false", "seq_len=100" },
  }
  for _, shape in ipairs({ { "GQA", 2 }, { "MQA", 1 }, { "MHA", 4 } }) do
    local config = "hidden = 64, layers = 2, heads = 4, kv_heads = " .. shape[2] .. ", intermediate = 96, vocab = 100"
    local _, built_in = pair("llama", config)
    it("has the built-in eager attention's timeline byte for byte (" .. shape[1] .. ")", function()
      for _, sets in ipairs(eager_recipes) do
        local a, b = mutated(sdpa_call, written_out, sets, config), estimate(built_in, sets)
        assert.are.equal(#b.timeline, #a.timeline, named(sets))
        for i = 1, #b.timeline do assert.are.same(b.timeline[i], a.timeline[i], named(sets) .. ": event " .. i) end
        assert.are.same(b, a)
      end
    end)
  end
  it("with Mistral's sliding-window mask (F.mask(\"sliding\")) has the built-in's timeline byte for byte", function()
    local config = "hidden = 64, layers = 2, heads = 4, kv_heads = 2, intermediate = 96, vocab = 100, sliding_window = 24"
    local _, built_in = pair("llama", config)
    local sliding = written_out:gsub('F%.mask%("causal"%)', 'F.mask("sliding", { window = c.sliding_window })')
    local changes = { { sdpa_call, sliding }, { "sliding_window = 0,", "sliding_window = c.sliding_window," } }
    for _, sets in ipairs({ { "attention=eager", "seq_len=64" }, { "attention=eager", "precision=amp-bf16", "seq_len=16" },
                            { "attention=eager", "precision=bf16", "checkpointing=full", "seq_len=64" } }) do
      local a, b = mutated(changes, nil, sets, config), estimate(built_in, sets)
      assert.are.same(b.timeline, a.timeline, named(sets))
      assert.are.same(b, a)
    end
    -- the causal mask in its place differs (LlamaModel's triu copy)
    local causal = mutated({ { sdpa_call, written_out }, changes[2] }, nil, { "attention=eager", "seq_len=64" }, config)
    assert.are_not.same(estimate(built_in, { "attention=eager", "seq_len=64" }).timeline, causal.timeline)
  end)
  it("fails when what it keeps changes: the probabilities not kept by the layer, softmax without its dtype", function()
    local _, built_in = pair("llama", "hidden = 64, layers = 2, heads = 4, kv_heads = 2, intermediate = 96, vocab = 100")
    -- (checkpointed: the first forward saves nothing, what the layer keeps shows)
    local sets = { "attention=eager", "precision=bf16", "checkpointing=full" }
    local b = estimate(built_in, sets)
    assert.are.same(b.timeline, mutated(sdpa_call, written_out, sets).timeline)
    local not_kept = eager_attention('F.softmax(attn_weights, -1, { dtype = "float32" })', "")
    assert.are_not.same(b.timeline, mutated(sdpa_call, not_kept, sets).timeline)
    local no_dtype = eager_attention("F.softmax(attn_weights, -1)", "F.keep_in_layer")
    assert.are_not.same(b.timeline, mutated(sdpa_call, no_dtype, sets).timeline)
  end)
end)

describe("the example model models/examples/llama2-7b-blocks.lua", function()
  it("gives Llama-2-7B's published parameter count and the built-in model's peaks on an A100", function()
    local a = helper.estimate("models/examples/llama2-7b-blocks.lua", "--gpu", "a100-80gb", "--set", "checkpointing=full")
    local b = helper.estimate("llama2-7b", "--gpu", "a100-80gb", "--set", "checkpointing=full")
    assert.are.equal(6738415616, a.model.params) -- HF meta-llama/Llama-2-7b-hf
    assert.are.same(b.per_gpu, a.per_gpu)
  end)
end)

describe("the DIFF Transformer example models/examples/diff-transformer-7b.lua", function()
  it("has the parameters of its reference module's shapes, summed here", function()
    local o = helper.estimate("models/examples/diff-transformer-7b.lua")
    -- MultiheadFlashDiff2(embed_dim = 4096, num_heads = 16) (microsoft/unilm
    -- Diff-Transformer/multihead_flashdiff_2.py): head_dim = 4096 // 16 // 2
    local hidden, layers, inter, vocab, heads = 4096, 32, 11008, 32000, 16
    local head_dim = hidden // heads // 2
    local attention = 4 * hidden * hidden -- q_proj, k_proj, v_proj (n_rep 1), out_proj
      + 4 * head_dim -- lambda_q1, lambda_k1, lambda_q2, lambda_k2
      + 2 * head_dim -- subln: RMSNorm(2 * head_dim)
    local layer = attention + 3 * hidden * inter + 2 * hidden -- LlamaMLP, two RMSNorms
    assert.are.equal(layers * layer + 2 * vocab * hidden + hidden, o.model.params)
    assert.are.equal(6738440192, o.model.params)
  end)
end)

describe("a Phi-3 whose MLP (one gate_up_proj chunked in two views) is a Lua block", function()
  local lua_blocks, built_in = pair("llama", "hidden = 64, layers = 2, heads = 4, intermediate = 96, vocab = 100, "
    .. "fused_projections = true")
  -- the local `gate` keeps the projection's storage until Phi3MLP returns:
  -- without F.keep the timelines part under checkpointing, freeze, offload
  local more = { { "finetune=freeze" }, { "offload_activations=true", "finetune=lora", "lora_targets=all-linear" } }
  for _, sets in ipairs({ recipes[1], recipes[3], recipes[4], recipes[6], recipes[7], more[1], more[2],
                          dtensor_recipes[2], dtensor_recipes[6] }) do
    it("has the built-in Phi-3's timeline byte for byte: " .. named(sets), same_timelines(lua_blocks, built_in, sets))
  end
end)

describe("a GPT-2 whose MLP is a Lua block", function()
  local lua_blocks, built_in = pair("gpt2", "hidden = 64, layers = 2, heads = 4, vocab = 100, max_positions = 256")
  for i, sets in ipairs(recipes) do
    if i ~= 5 and i ~= 8 then -- QLoRA and FP8 as LLaMA's; the rest
      it("has the built-in GPT-2's timeline byte for byte: " .. named(sets), same_timelines(lua_blocks, built_in, sets))
    end
  end
  for _, sets in ipairs({ dtensor_recipes[2], dtensor_recipes[6] }) do
    it("has the built-in GPT-2's timeline byte for byte: " .. named(sets), same_timelines(lua_blocks, built_in, sets))
  end
end)

-- An encoder's attention: BertAttention (self-attention, dense, dropout,
-- LayerNorm of the sum) as one Lua block with BertModel's bidirectional
-- mask (models/blocks/bert.lua). compare.py's bert-blocks cases hold it to
-- PyTorch; here it has the built-in BERT's figures (which compare.py holds
-- too): only the order of three frees after the LayerNorm differs, as the
-- block frees them in Python's order (the sum, the dropout's output, then
-- the context when BertAttention returns).
describe("a BERT whose attention is a Lua block (an encoder's: F.mask(\"bidirectional\"))", function()
  local lua_blocks, built_in = pair("bert", "hidden = 64, layers = 2, heads = 4, intermediate = 128, vocab = 256, "
    .. "max_positions = 64")
  -- every event's phase, layer and size, in order within each but the
  -- three frees' (sorted)
  local function events(o)
    local list = {}
    for _, e in ipairs(o.timeline) do list[#list + 1] = string.format("%s %s %d", e.phase, e.layer, e.delta) end
    table.sort(list)
    return list
  end
  for _, sets in ipairs({
    { "attention=eager", "seq_len=64" },
    { "attention=eager", "seq_len=64", "precision=amp-bf16", "checkpointing=full" },
    { "attention=eager", "seq_len=48", "precision=bf16", "finetune=lora", "lora_targets=query,value" },
    { "attention=eager", "seq_len=32", "micro_batch=3", "checkpointing=every-2", "offload_activations=true" },
  }) do
    it("has the built-in BERT's per-GPU figures: " .. named(sets), function()
      local a, b = estimate(lua_blocks, sets), estimate(built_in, sets)
      assert.are.same(b.per_gpu, a.per_gpu)
      assert.are.same(events(b), events(a))
    end)
  end
  it("fails with a causal mask in its place", function()
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p " .. dir .. "/blocks"))
    local text = assert(io.open("models/blocks/bert.lua")):read("a"):gsub('F%.mask%("bidirectional"%)', 'F.mask("causal")')
    assert(io.open(dir .. "/blocks/bert_causal.lua", "w")):write(text):close()
    assert(io.open(dir .. "/m.lua", "w")):write('return bert { name = "tiny", lua_blocks = "bert_causal", hidden = 64, '
      .. "layers = 2, heads = 4, intermediate = 128, vocab = 256, max_positions = 64 }\n"):close()
    local sets = { "attention=eager", "seq_len=64" }
    assert.are_not.same(events(estimate(built_in, sets)), events(estimate(dir .. "/m.lua", sets)))
    os.execute("rm -rf " .. dir)
  end)
end)

-- A family beside its model script whose block's forward is `body` (on
-- line 8 of arch/badfam.lua), with `fields` more of the block's (on line
-- 6), estimated with `...` (--set ...): `run`'s result (helper.fails by
-- default: vramplan's error).
local function with_block(run, body, params, fields, ...)
  local dir = os.tmpname()
  os.remove(dir)
  assert(os.execute("mkdir -p " .. dir .. "/arch"))
  local f = assert(io.open(dir .. "/arch/badfam.lua", "w"))
  f:write(string.format([[
return architecture {
  name = "badfam",
  fields = { { "hidden", "int" } },
  build = function(c)
    local b = block { name = "mlp", width = c.hidden,
      params = { %s },%s
      forward = function(x, p, ids)
        %s
      end }
    return decoder { embed = { token_embedding { vocab = 10, hidden = c.hidden } }, layer = { residual { b } },
      layers = 1, final = { lm_head { vocab = 10, hidden = c.hidden }, cross_entropy {} } }
  end,
}
]], params or '{ "up", linear = { c.hidden, 32 } }', fields or "", body))
  f:close()
  f = assert(io.open(dir .. "/bad.lua", "w"))
  f:write("return badfam { hidden = 64 }\n")
  f:close()
  local result = run(dir .. "/bad.lua", ...)
  os.execute("rm -rf " .. dir)
  return result
end

local function bad_block(...) return with_block(helper.fails, ...) end

-- The timeline of such a family's model.
local function block_timeline(...)
  return with_block(function(path, ...)
    local out, err, code = helper.run("estimate", path, "--json", "--timeline", ...)
    assert(code == 0, err)
    return json.decode(out).timeline
  end, ...)
end

-- block { tp_divides = { { n, why } } }: the module's own conditions on
-- tensor parallelism (Megatron-LM's MambaMixer asserts ngroups % tp_size == 0:
-- models/examples/arch/mamba2.lua, tests/lua/mamba_spec.lua)
describe("a block's tp_divides", function()
  local square = '{ "up", linear = { c.hidden, c.hidden } }'
  local rule = ' tp_divides = { { 6, "must divide the six things (a test)" } },'
  local function run(path, tp)
    local _, err, code = helper.run("estimate", path, "--set", "framework=megatron", "--set", "tp=" .. tp)
    return { code, err }
  end
  it("refuses a degree that does not divide a count with the block's reason, and runs one that does", function()
    for tp, refused in pairs({ [1] = false, [2] = false, [3] = false, [4] = true, [6] = false }) do
      local code, err = table.unpack(with_block(function(path) return run(path, tp) end, "local y = p.up(x) return y",
        square, rule))
      if refused then
        assert.are.equal(1, code)
        assert.truthy(err:find("--set tp=4: tp: block mlp: must divide the six things (a test)", 1, true), err)
      else
        assert.are.equal(0, code, err)
      end
    end
  end)
  -- a kernel on a column-parallel tensor runs on each rank's share (Megatron-LM's
  -- MambaMixer runs mamba_split_conv1d_scan_combined on nheads / tp heads): its keeps
  -- and workspaces, declared for the whole model, divided by tp
  it("gives a kernel on a split tensor its share of what it keeps, and refuses a tp that does not divide it", function()
    local split = '{ "up", linear = { c.hidden, c.hidden }, split = "column" }, '
      .. '{ "down", linear = { c.hidden, c.hidden }, split = "row" }'
    local body = 'local k = F.kernel { name = "scan", inputs = 1, source = "a test: file.py", '
      .. 'keeps = { { width = 6, dtype = "float32" } }, workspace = { forward = 24 } } '
      .. 'local y = p.down(k(p.up(x))) return y'
    local function kernel_events(tp)
      return with_block(function(path)
        local out, err, code = helper.run("estimate", path, "--json", "--timeline", "--set", "framework=megatron",
          "--set", "tp=" .. tp, "--set", "seq_len=512", "--set", "micro_batch=1", "--set", "precision=fp32")
        assert(code == 0, err)
        local seen = {}
        for _, e in ipairs(json.decode(out).timeline) do
          if e.phase == "forward" and e.op == "mlp.scan" then seen[#seen + 1] = e.delta end
        end
        return seen
      end, body, split)
    end
    -- 512 rows: the output (64 / tp fp32), the kept tensor (6 / tp fp32), the workspace (24 / tp bytes)
    for _, tp in ipairs({ 1, 2 }) do
      assert.are.same({ 512 * 64 // tp * 4, 512 * 6 // tp * 4, 512 * 24 // tp, -(512 * 24 // tp) }, kernel_events(tp))
    end
    local code, err = table.unpack(with_block(function(path) return run(path, 4) end, body, split))
    assert.are.equal(1, code)
    assert.truthy(err:find("tp: must divide a split kernel's kept tensors and workspaces", 1, true), err)
  end)
  it("names a declaration it cannot read", function()
    for _, bad in ipairs({ ' tp_divides = { { 0, "x" } },', ' tp_divides = { { 2 } },', ' tp_divides = 2,' }) do
      local err = bad_block("local y = p.up(x) return y", square, bad)
      assert.truthy(err:find("block mlp: 'tp_divides' must list at most 4 { count, \"why tp must divide it\" }", 1, true),
        err)
    end
  end)
end)

-- DTensor's plan of a block (framework = fsdp2, tp > 1; dtensor_recipes
-- above hold the LLaMA blocks to the built-in's timeline)
describe("a LLaMA of Lua blocks under DTensor's tensor parallelism (framework = fsdp2)", function()
  local lua_blocks = pair("llama", "hidden = 64, layers = 2, heads = 4, kv_heads = 2, intermediate = 96, vocab = 100")
  it("gathers each attention's and MLP's input once, holding it until the block returns", function()
    -- 2 x 64 tokens of 64 bf16 features, all of them gathered: 16,384
    -- bytes; under full checkpointing nothing keeps the gathered input,
    -- so it goes when the block returns, after the row-parallel output
    -- (o_proj, down_proj) is made and reduce-scattered
    local o = estimate(lua_blocks, { "framework=fsdp2", "dp=2", "tp=2", "sequence_parallel=true",
      "precision=mixed-bf16", "checkpointing=full", "micro_batch=2", "seq_len=64" })
    local seen = {}
    for _, e in ipairs(o.timeline) do
      if e.phase == "forward" and e.layer == 0 and (e.op == "all_gather.module_input" or
          (e.op == "reduce_scatter" and e.delta > 0)) then
        seen[#seen + 1] = e.op .. " " .. e.delta
      end
    end
    assert.are.same({ "all_gather.module_input 16384", "reduce_scatter 8192", "all_gather.module_input -16384",
                      "all_gather.module_input 16384", "reduce_scatter 8192", "all_gather.module_input -16384" }, seen)
  end)
  it("refuses by block, op and layout what no DTensor plan of the block expresses", function()
    local params = '{ "up", linear = { c.hidden, 32 }, split = "column" }, { "down", linear = { 32, c.hidden }, '
      .. 'split = "row" }'
    local sp = { "--set", "framework=fsdp2", "--set", "dp=2", "--set", "tp=2", "--set", "sequence_parallel=true" }
    local function refused(body, message, ...)
      local sets = { table.unpack(sp) }
      for _, s in ipairs({ ... }) do sets[#sets + 1], sets[#sets + 2] = "--set", s end
      local err = bad_block(body, params, nil, table.unpack(sets))
      assert.truthy(err:find(message, 1, true), err)
    end
    -- a residual inside the block: Megatron-LM's sequence parallelism adds
    -- two shares; DTensor's plan gathered the input (Replicate) and
    -- reduce-scattered the output (Shard(1))
    local residual = "local y = F.add(x, p.down(F.silu(p.up(x)))) return y"
    refused(residual, "tp: block mlp: mlp.add joins a row-parallel output (Shard(1), the sequence's share) with the "
      .. "gathered input (Replicate), under DTensor's tensor parallelism with sequence parallelism (framework = fsdp2")
    assert.truthy(#block_timeline(residual, params, nil, "--set", "framework=megatron", "--set", "tp=2", "--set",
      "sequence_parallel=true") > 0)
    -- attention over the input with no row-parallel linear to scatter it back
    refused("local q = x:view(-1, 16):transpose(1, 2) local y = F.sdpa(q, q, q, { is_causal = true }):reshape(-1) "
      .. "return y", "tp: block mlp: its output returns the whole sequence (Replicate) where the stream is the "
      .. "sequence's share (Shard(1))")
    refused("local g = F.all_gather(x) local y = p.down(F.silu(p.up(x))) return F.add(y, F.reduce_scatter(g))",
      "tp: block mlp: mlp.all_gather is one of Megatron-LM's sequence-parallel collectives in a block whose input "
      .. "the plan gathers already")
    -- torchao's float8 module input is for the column-parallel linears alone
    local dropped = "local h = F.dropout(x, 0.1) return p.down(F.silu(p.up(h)))"
    refused(dropped, "precision: block mlp: mlp.dropout reads the block's input, which torchao's "
      .. "PrepareFloat8ModuleInput casts to float8", "precision=fp8-torchao")
    assert.truthy(#block_timeline(dropped, params, nil, table.unpack(sp)) > 0)
  end)
end)

describe("a bad block", function()
  local function check(body, message, params, fields)
    local err = bad_block(body, params, fields)
    assert.truthy(err:find("arch/badfam.lua:8: ", 1, true), err)
    assert.truthy(err:find(message, 1, true), err)
  end

  it("names a shape that does not match", function()
    check("local y = p.up(p.up(x)) return y",
      "linear up: takes 64 input features, got a tensor whose last dimension is 32")
  end)
  it("names the forward when a tail call hides the line", function()
    local err = bad_block("return p.up(p.up(x))")
    assert.truthy(err:find("arch/badfam.lua:7: block mlp's forward: linear up: takes 64 input features", 1, true), err)
  end)
  it("names a broadcast that does not match", function()
    check("return x * p.up(x)", "mul: shapes do not match: last dimension 64 against 32")
  end)
  it("refuses what it would get wrong: a number minus a tensor", function()
    check("local y = 1 - x return y", "sub: a number minus a tensor is not in the vocabulary yet")
  end)
  it("names an unknown primitive", function()
    check("local y = F.softmaxx(x) return y", "F.softmaxx: unknown primitive")
  end)
  it("names an unknown tensor method", function()
    check("return x:softmaxx()", "tensor: unknown method or field 'softmaxx'")
  end)
  it("names a parameter used but not declared", function()
    check("local y = p.down(x) return y", "block mlp: parameter 'down' is used but not declared (declared: up)")
  end)
  it("stops an endless loop", function()
    check("while true do end", "instruction budget")
  end)
  it("names a forward too long for the core's program", function()
    check("for _ = 1, 300 do x = F.silu(x) end return x", "block mlp: more than 250 primitive calls in one forward")
  end)
  it("keeps the sandbox shut", function()
    check('local f = io.open("/etc/passwd") return f', "global 'io'")
    check('local m = getmetatable(x) return m', "global 'getmetatable'")
    check('local r = require("os") return r', "global 'require'")
    check('local f = load("return 1") return f', "global 'load'")
    check('local d = string.dump(function() end) return d', "field 'dump'")
    check('local c = coroutine.wrap(function() while true do end end) return c()', "global 'coroutine'")
    check('local s = string.rep("x", 1 << 40) return s', "string too large")
    check('local t = {} for i = 1, 1e9 do t[i] = i end return t', "memory budget")
    -- the vocabulary is shared by every script the process runs: a script
    -- that changed a primitive would change it for the next one
    check('F.silu = function(t) return t end return F.silu(x)', "F.silu: the vocabulary is read-only")
    check('F.linear = nil return x', "F.linear: the vocabulary is read-only")
  end)
  it("declares a kernel with the source of its saving rules", function()
    check('local k = F.kernel { name = "scan", inputs = 1 } local y = k(x) return y',
      "kernel scan: needs the source its saving rules come from")
    check('local k = F.kernel { name = "scan", inputs = 2, source = "mamba_ssm selective_scan_interface.py" } '
      .. "local y = k(x) return y", "kernel scan: takes 2 inputs, got 1")
    check('local k = F.kernel { name = "scan", inputs = 9, source = "mamba_ssm selective_scan_interface.py" } '
      .. "local y = k(x) return y", "kernel scan: inputs must be 1 to 8")
    check('local k = F.kernel { name = "scan", inputs = 2, copies = { 3 }, source = "mamba_ssm selective_scan" } '
      .. "local y = k(x, x) return y", "kernel scan: copies lists input numbers (1 to 2)")
    check('local k = F.kernel { name = "scan", inputs = 1, workspace = { forward = { byte = 4 } }, '
      .. 'source = "mamba_ssm selective_scan" } local y = k(x) return y',
      "kernel scan: workspace.forward = { bytes = n, input = m } per row")
    check('local k = F.kernel { name = "scan", inputs = 1, keeps = { { width = 1, dtype = "float8" } }, '
      .. 'source = "mamba_ssm selective_scan" } local y = k(x) return y',
      "kernel scan: a kept tensor's dtype must be named")
  end)
  it("names shapes that do not fit (tensors of any shape: block_shapes.lua)", function()
    check("local b, s = x:size(0), x:size(1) local y = x:reshape(b, s, 5, -1) return y",
      "reshape: [batch, seq, 64] does not fit into [batch, seq, 5, -1]")
    check("local y = x:unsqueeze(-1) * x:unsqueeze(1):expand(-1, 3, -1, -1) return y",
      "mul: shapes [batch, seq, 64, 1] and [batch, 3, seq, 64] do not broadcast")
    check("local y = F.conv1d(x:transpose(1, 2), x, nil, { groups = 32 }) return y",
      "conv1d: only depthwise (groups = channels = 64) yet")
    check("local y = F.pad(x, { 0, 0, 1, F.chunk_padding(x:size(1), 16) }) return y",
      "pad: symbolic padding only of the sequence to whole chunks")
    check("local y = x:unsqueeze(-1):masked_fill(x, 0) return y", "masked_fill: the mask must be a bool mask (F.tril_ones)")
    check("local y = F.tril_ones(x, 0) return y", "tril_ones: x's last two dimensions must be square ([batch, seq, 64])")
    check("local y = x:permute(0, 1) return y", "permute: 2 dimensions for a tensor of 3")
  end)
  it("must return a tensor it computed", function()
    local err = bad_block("return 1")
    assert.truthy(err:find("arch/badfam.lua:5: block mlp: forward must return a tensor it computed", 1, true), err)
  end)
  it("names a tensor not split into heads where attention needs one", function()
    check("local y = F.sdpa(x, x, x, { is_causal = true }) return y",
      "sdpa: expects a tensor split into heads (x:view(-1, head_dim))")
    local err = bad_block("local q = x:view(-1, 16) local y = F.rotary(q):reshape(-1) return y")
    assert.truthy(err:find("model: a Lua block's F.rotary needs the model's rotary_embedding { }", 1, true), err)
    check("local q = x:view(-1, 24) return q", "view: the last dimension (64) does not split into heads of 24")
  end)
  it("names heads that do not match", function()
    check("local q = x:view(-1, 16):transpose(1, 2) local k = p.up(x):view(-1, 8):transpose(1, 2) "
      .. "local y = F.sdpa(q, k, k, { is_causal = true }) return y",
      "sdpa: q, k and v must have one head width (16, 8, 8)")
    check("local q = x:view(-1, 16):transpose(1, 2) local k = p.up(x):view(-1, 16):transpose(1, 2) "
      .. "local y = F.sdpa(k, q, q, { is_causal = true }) return y",
      "sdpa: k and v need one number of heads that divides q's (2, 4, 4)")
    check("local q = x:view(-1, 16):transpose(1, 2) local y = F.sdpa(q, q, q) return y",
      "sdpa: only causal attention (is_causal = true) is in the vocabulary yet")
  end)
  it("names matmuls and masks it cannot model", function()
    check("local q = x:view(-1, 16):transpose(1, 2) local y = F.matmul(q, q) return y",
      "matmul: of q and k:transpose(2, 3), or of the scores and v")
    check("local q = x:view(-1, 16):transpose(1, 2) local k = p.up(x):view(-1, 16):transpose(1, 2) "
      .. "local y = F.matmul(q, k:transpose(2, 3)) return y", "matmul: the operands have 4 and 2 heads (F.repeat_kv first)")
    check('local m = F.mask("diagonal") return x', "mask: kind must be causal, sliding, padded, bool, prefix or bidirectional (got diagonal)")
    check("local q = x:view(-1, 16):transpose(1, 2) local w = F.matmul(q, q:transpose(2, 3)) "
      .. 'local y = F.masked_fill(w, F.mask("causal")) return y', "masked_fill: takes a bool mask")
  end)
  it("names tables and indices misused (block_index.lua)", function()
    local ids, tbl = ' inputs = { "input_ids" },', '{ "t", embedding = { 10, 64 } }, { "w", size = 32 }'
    check("local y = F.embedding(x, p.t) return y",
      "embedding: the index must be integer indices (input_ids, topk's indices), got a floating-point tensor", tbl)
    check("local y = F.embedding(ids, p.w) return y", "embedding: the second argument must be a declared table", tbl, ids)
    check("local y = F.embedding(ids, p.t, { sparse = true }) return y",
      "embedding: sparse gradients are not in the vocabulary", tbl, ids)
    check("local v, i = F.topk(x, 2, -1) local y = v * i return y", "mul: takes a floating-point tensor, got integer indices")
    check("local y = F.silu(ids) return y", "silu: takes a floating-point tensor, got integer indices", nil, ids)
    check("local v, i = F.topk(x, 65, -1) return v",
      "topk: k must be a whole number from 1 to the last dimension's size (64), got 65")
    check("local v, i = F.topk(x, 2, -1) local y = F.gather(x, 1, i) return y",
      "gather: only along the last dimension (dim = -1) yet")
    check("local v, i = F.topk(x, 2, -1) local y = F.scatter_add(x, -1, i, x) return y",
      "scatter_add: the source's last dimension (64) must be the index's (2)")
    check("local v, i = F.topk(x, 2, -1) local y = F.index(p.w, i) return y", "index: of a table", tbl)
    check("local y = F.layer_norm(x, p.w) return y", "layer_norm: the weight has 32 elements, the rows 64", tbl)
    check("local y = p.up(x):logsumexp(-1) return y",
      "logsumexp: of rows of tokens whole on every tensor-parallel rank only yet",
      '{ "up", linear = { c.hidden, 32 }, split = "column" }')
    check("local y = x:std(0) return y", "std: only over the last dimension (dim = -1) yet")
    local err = bad_block("return x", '{ "t", embedding = 10 }')
    assert.truthy(err:find("arch/badfam.lua:5: block mlp: parameter 't': embedding = { num_embeddings, embedding_dim }",
      1, true), err)
    err = bad_block("return x", '{ "t", embedding = { 10, 64 }, split = "row" }')
    assert.truthy(err:find("parameter 't': a table splits its columns", 1, true), err)
  end)
  it("names one-dimensional indices misused (index_select, index_add, flatten)", function()
    local ids, tbl = ' inputs = { "input_ids" },', '{ "t", embedding = { 10, 64 } }, { "u", embedding = { 10, 32 } }'
    local flat = "local v, i = F.topk(x, 2, -1) local f = i:view(-1) "
    check("local v, i = F.topk(x, 2, -1) local y = F.index_select(p.t, 0, i) return y",
      "index_select: the index must be one-dimensional (idx:view(-1) or idx:flatten()), got [batch, seq, 2]", tbl)
    check("local y = F.index_select(p.t, 0, x) return y",
      "index_select: the index must be integer indices (input_ids, topk's indices), got a floating-point tensor", tbl)
    check("local y = F.index_select(ids, 0, ids:view(-1)) return y",
      "index_select: takes a floating-point tensor, got integer indices", tbl, ids)
    check(flat .. "local y = F.index_select(p.t, 2, f) return y", "index_select: dimension 2 out of range for 2 dimensions",
      tbl)
    check(flat .. "local y = F.index_add(p.t, 0, f, F.index_select(p.t, 0, ids:flatten())) return y",
      "index_add: the source has batch*seq elements along dimension 0, the index batch*seq*2", tbl, ids)
    check(flat .. "local y = F.index_add(p.t, 0, f, F.index_select(p.u, 0, f)) return y",
      "index_add: the source [batch*seq*2, 32] must be shaped as x [10, 64] but along dimension 0", tbl)
    check(flat .. "local y = F.index_add(p.t, 0, f, x) return y",
      "index_add: the source [batch, seq, 64] and x [10, 64] must have as many dimensions", tbl)
    check(flat .. "local y = F.index_add(p.t, 0, f, 1.0) return y", "index_add: the source must be a tensor", tbl)
    check(flat .. "local y = F.index_add(p.t, 0, f, f) return y",
      "index_add: takes a floating-point tensor, got integer indices", tbl)
    check("local y = F.index_select(p.t, 0, ids:view(-1)) return y",
      "index_select: of a table split over tensor-parallel ranks: not in the vocabulary yet",
      '{ "t", embedding = { 10, 64 }, split = "column" }', ids)
    check("local y = x:flatten(2, 1) return y", "flatten: start_dim 2 comes after end_dim 1")
    check("local y = p.up(x):amax(-1) return y",
      "amax: of rows of tokens whole on every tensor-parallel rank only yet",
      '{ "up", linear = { c.hidden, 32 }, split = "column" }')
    check("local y = x * x:amin(0) return y", "amin: only over the last dimension (dim = -1) yet")
  end)
  it("refuses an in-place write PyTorch would raise on, or that may write another tensor, naming why", function()
    -- PyTorch 1.13: a leaf that requires grad raises in the forward; a
    -- tensor a node saved raises at backward (its version moved)
    local topk = "local v, i = F.topk(x, 2, -1) "
    local at_backward = '(PyTorch raises at backward: "one of the variables needed for gradient computation has been '
      .. 'modified by an inplace operation")'
    check(topk .. "local f = i:view(-1) p.t:index_add_(0, f, F.index_select(p.t, 0, f)) return x",
      'index_add_: x is a parameter of the block (PyTorch raises in the forward: "a leaf Variable that requires grad '
      .. 'is being used in an in-place operation")', '{ "t", embedding = { 10, 64 } }')
    check(topk .. "x:scatter_(-1, i, v) return x",
      "scatter_: x is the block's input, which the ops before the block may have saved for backward " .. at_backward)
    check(topk .. "ids:scatter_(-1, i, v) return x", "scatter_: x is a named input of the block", nil,
      ' inputs = { "input_ids" },')
    check("local h = p.up(x):view(x:size(0), x:size(1), 2, 4, 4) h:masked_fill_(F.tril_ones(h, 0), 0.0) return x",
      "masked_fill_: x is a view of another tensor")
    check(topk .. "local h = p.up(x):to(\"float32\") h:scatter_(-1, i, v) return x",
      "scatter_: x is mlp.to's output, which may be a view of its input or the input itself")
    check(topk .. "local h = p.up(x) local y = h * h h:scatter_(-1, i, v) return x",
      "scatter_: x was read by mlp.mul before, which may have saved it for backward " .. at_backward)
    check(topk .. "local h = F.sigmoid(p.up(x)) h:scatter_add_(-1, i, v) return x",
      "scatter_add_: x is the output of mlp.sigmoid, whose backward keeps it " .. at_backward)
    check(topk .. "local h = F.softmax(p.up(x), -1) h:scatter_(-1, i, 1.0) return x",
      "scatter_: x is the output of mlp.softmax, whose backward keeps it")
    check(topk .. "local f = i:view(-1) local acc = F.zeros_like(p.t) acc:index_copy_(0, f, x) return x",
      "index_copy_: the source [batch, seq, 64] and x [10, 64] must have as many dimensions",
      '{ "t", embedding = { 10, 64 } }')
    check("local q = x:view(-1, 16):transpose(1, 2) local w = F.matmul(q, q:transpose(2, 3)) "
      .. 'w:masked_fill_(F.mask("bool"), "min") return x', "masked_fill_: the value must be a number")
  end)
  it("writes in place what the forward made and no op read, and returns it", function()
    -- silu keeps its input, not its output (silu_backward(grad, self)):
    -- its output may be written; each call returns x itself
    local timeline = block_timeline("local v, i = F.topk(x, 2, -1) local h = F.silu(p.up(x)) "
      .. "local y = h:scatter_(-1, i, v):scatter_add_(-1, i, v) assert(rawequal(y, h)) return p.down(y)",
      '{ "up", linear = { c.hidden, 32 } }, { "down", linear = { 32, c.hidden } }')
    assert.truthy(#timeline > 0)
    -- eager attention's scores (matmul keeps its operands) filled in place
    -- with a bool mask, as attn_weights.masked_fill_(mask, min)
    timeline = block_timeline("local q = x:view(-1, 16):transpose(1, 2) local w = F.matmul(q, q:transpose(2, 3)) "
      .. 'w:masked_fill_(F.mask("bool"), -1e9) local o = F.matmul(F.softmax(w, -1), q) '
      .. "local y = o:transpose(1, 2):contiguous():reshape(-1) return y", nil, nil, "--set", "attention=eager")
    assert.truthy(#timeline > 0)
  end)
  it("refuses input_ids where the stream is not the batch's rows", function()
    local ids, tbl = ' inputs = { "input_ids" },', '{ "t", embedding = { 10, 64 } }'
    local body = "local y = F.embedding(ids, p.t) return y"
    for _, case in ipairs({
      { "sequence_parallel: a Lua block's input_ids are the whole sequence", "framework=megatron", "tp=2",
        "sequence_parallel=true" },
      { "finetune: a Lua block's input_ids have no virtual tokens", "finetune=prompt", "num_virtual_tokens=4" },
    }) do
      local sets = {}
      for i = 2, #case do sets[#sets + 1], sets[#sets + 2] = "--set", case[i] end
      local err = bad_block(body, tbl, ids, table.unpack(sets))
      assert.truthy(err:find(case[1], 1, true), err)
    end
  end)
  it("refuses a primitive mixing positions over the rank's share under Megatron's sequence parallelism", function()
    -- the block's input is the share (s / tp rows); a cumsum along the
    -- sequence would sum only this rank's positions (block_plan.c)
    local sp = { "--set", "framework=megatron", "--set", "tp=2", "--set", "sequence_parallel=true" }
    local err = bad_block("local y = F.cumsum(x, 1) return y", nil, nil, table.unpack(sp))
    assert.truthy(err:find("sequence_parallel: block mlp: mlp.cumsum reads the rank's share of the sequence under "
      .. "Megatron-LM's sequence parallelism", 1, true), err)
    -- through a column-parallel linear (its input gathered inside) it runs
    local ok = with_block(function(path, ...)
      local _, e, code = helper.run("estimate", path, ...)
      return { code, e }
    end, "local h = p.up(x) local y = F.cumsum(h, 1) local out = p.down(y) return out",
      '{ "up", linear = { c.hidden, 32 }, split = "column" }, { "down", linear = { 32, c.hidden }, split = "row" }',
      nil, table.unpack(sp))
    assert.are.equal(0, ok[1], ok[2])
  end)
  it("names a declaration it cannot read", function()
    local err = bad_block("return x", '{ "up", linear = 64 }')
    assert.truthy(err:find("arch/badfam.lua:5: block mlp: parameter 'up': linear = { in_features, out_features }", 1,
      true), err)
  end)
end)

describe("one-dimensional indices, index_select, index_add, amax (block_index.lua)", function()
  local ids, tbl = ' inputs = { "input_ids" },', '{ "t", embedding = { 10, 64 } }'
  local function events(body, phase, ...)
    local timeline = block_timeline(body, tbl, ids, "--set", "precision=fp32", "--set", "micro_batch=1", "--set",
      "seq_len=64", ...)
    local found = {}
    for _, e in ipairs(timeline) do
      if e.phase == phase and e.op:match("^mlp%.") then found[#found + 1] = e.op .. " " .. e.delta end
    end
    return found
  end
  it("make tensors of the index's length", function()
    -- 64 tokens, top 2: the flat index has 128 elements; index_select of
    -- the [10, 64] fp32 table 128 x 64 x 4 = 32768 bytes, kept (index_add
    -- keeps its source); index_add a new [10, 64] table, 2560 bytes, gone
    -- after the lookup by i ([1, 64, 2, 64]: 32768), summed to 64 x 64 x 4
    local got = events("local v, i = F.topk(x, 2, -1) local f = i:view(-1) "
      .. "local y = F.index_add(p.t, 0, f, F.index_select(p.t, 0, f)) return F.index(y, i):sum(-2) * x", "forward")
    assert.are.same({ "mlp.index_select 32768", "mlp.index_add 2560", "mlp.index 32768", "mlp.index_add -2560",
                      "mlp.sum 16384", "mlp.index -32768" }, { table.unpack(got, #got - 7, #got - 2) })
  end)
  it("split ties in amax's backward, with the CPU's dtype copies only on the CPU", function()
    -- x [1, 64, 64] fp32 (n = 4096 elements, 64 rows): the bool mask n
    -- bytes, the int64 count 64 x 8, the sum's int64 copy of the mask
    -- n x 8 (gone after it), the quotient 64 x 4 (512 on CUDA: its
    -- allocator's blocks), the gradient n x 4; on the CPU TensorIterator
    -- first copies the count (64 x 4) and the mask (n x 4) into fp32;
    -- after the rule the saved result and the gradient (added into x's)
    local body = "local y = x * x:amax(-1) return y"
    local function amax(dev)
      local out = {}
      for _, e in ipairs(events(body, "backward", "--set", "device=" .. dev)) do
        if e:match("^mlp%.amax ") then out[#out + 1] = tonumber(e:match(" (%-?%d+)$")) end
      end
      return out
    end
    assert.are.same({ 4096, 512, 32768, -32768, 512, 16384, -512, -512, -4096, -512, -16384 }, amax("cuda"))
    assert.are.same({ 4096, 512, 32768, -32768, 256, 256, -256, 16384, 16384, -16384, -256, -512, -4096, -256, -16384 },
      amax("cpu"))
  end)
end)

describe("a block's own collectives (F.all_gather, F.reduce_scatter)", function()
  -- a replicated op on the whole sequence between them: the stream is the
  -- rank's share of the sequence under sequence parallelism
  local body = "local full = F.all_gather(x) local y = F.reduce_scatter(F.silu(full)) return y"
  local function events(...)
    local timeline = block_timeline(body, nil, nil, "--set", "framework=megatron", "--set", "tp=2", "--set",
      "precision=mixed-bf16", "--set", "micro_batch=1", "--set", "seq_len=64", ...)
    local found = {}
    for _, e in ipairs(timeline) do
      if e.phase == "forward" and e.op:match("^mlp%.") then found[#found + 1] = e.op .. " " .. e.delta end
    end
    return found
  end
  it("gathers and scatters the sequence over the tensor-parallel ranks under sequence parallelism", function()
    -- 64 tokens of 64 bf16 features: the rank's 32 rows are 4096 bytes,
    -- all 64 of them 8192; silu keeps the gathered rows (its input), its
    -- output goes once scattered, the block's output after the residual add
    assert.are.same({ "mlp.all_gather 8192", "mlp.silu 8192", "mlp.reduce_scatter 4096", "mlp.silu -8192",
                      "mlp.reduce_scatter -4096" }, events("--set", "sequence_parallel=true"))
  end)
  it("are the tensor itself without it", function()
    assert.are.same({ "mlp.silu 8192", "mlp.silu -8192" }, events())
  end)
end)

describe("a table split over tensor-parallel ranks (embedding, split = \"column\")", function()
  it("gives each rank its share of every row", function()
    local function lookup(...)
      local timeline = block_timeline("local y = p.down(F.embedding(ids, p.t)) return y",
        '{ "t", embedding = { 10, 64 }, split = "column" }, { "down", linear = { 64, c.hidden }, split = "row" }',
        ' inputs = { "input_ids" },', "--set", "framework=megatron", "--set", "precision=mixed-bf16", "--set",
        "micro_batch=1", "--set", "seq_len=64", ...)
      for _, e in ipairs(timeline) do
        if e.phase == "forward" and e.op == "mlp.embedding" then return e.delta end
      end
    end
    -- 64 tokens looked up in 64 bf16 columns: 8192 bytes, half of them on each of two ranks
    assert.are.equal(8192, lookup())
    assert.are.equal(4096, lookup("--set", "tp=2"))
  end)
end)

describe("the vocabulary's blocks of compare.py (tests/torch/blocks/)", function()
  -- LLaMA with the indexing, reductions or index_ops MLP, its blocks script found beside the model script
  local function peaks(name, sets)
    local dir = os.tmpname()
    os.remove(dir)
    local root = helper.root:sub(1, 1) == "/" and helper.root or os.getenv("PWD") .. "/" .. helper.root
    assert(os.execute("mkdir -p " .. dir .. " && ln -s " .. root .. "/tests/torch/blocks " .. dir .. "/blocks"))
    local f = assert(io.open(dir .. "/m.lua", "w"))
    f:write('return llama { name = "tiny", hidden = 64, layers = 3, heads = 4, kv_heads = 2, intermediate = 128, '
      .. 'vocab = 256, lua_blocks = "' .. name .. '" }\n')
    f:close()
    local got = {}
    for _, timeline in ipairs({ false, true }) do
      local args = { "--json", dir .. "/m.lua", table.unpack(sets) }
      if timeline then args[#args + 1] = "--timeline" end
      local out, err, code = helper.run("estimate", table.unpack(args))
      assert(code == 0, err)
      got[#got + 1] = json.decode(out).per_gpu.peak_allocated_bytes
    end
    os.execute("rm -rf " .. dir)
    return got
  end
  for _, case in ipairs({
    { "indexing", {} },
    { "indexing", { "--set", "checkpointing=full", "--set", "precision=amp-bf16", "--set", "micro_batch=3" } },
    { "indexing", { "--set", "framework=deepspeed", "--set", "zero=3", "--set", "dp=4", "--set", "precision=mixed-bf16" } },
    { "reductions", { "--set", "framework=megatron", "--set", "tp=2", "--set", "precision=mixed-bf16" } },
    { "reductions", { "--set", "checkpointing=op-selective", "--set", "precision=amp-bf16" } },
    { "index_ops", {} },
    { "index_ops", { "--set", "checkpointing=full", "--set", "precision=amp-bf16", "--set", "micro_batch=3" } },
    { "index_ops", { "--set", "framework=megatron", "--set", "tp=2", "--set", "precision=mixed-bf16" } },
  }) do
    it("folds as it runs layer by layer: " .. case[1] .. " " .. table.concat(case[2], " "), function()
      local folded_and_not = peaks(case[1], case[2])
      assert.are.equal(folded_and_not[2], folded_and_not[1])
    end)
  end
end)

describe("the step-time model", function()
  it("prices a Lua block's projections as the built-in ops' (FLOPs equal, step time within 10 %, 5 % under DTensor)",
    function()
    local lua_blocks, built_in = pair("llama", "hidden = 4096, layers = 32, heads = 32, intermediate = 11008, "
      .. "vocab = 32000, norm_eps = 1e-5")
    -- under DTensor's sequence parallelism the norms run on the share of
    -- the rows (the RMSNorm blocks' elementwise passes: 9 % slower when
    -- priced on every row)
    for _, case in ipairs({ { {}, 0.10 }, { { "--set", "framework=megatron", "--set", "tp=2", "--set",
      "precision=mixed-bf16" }, 0.10 }, { { "--set", "framework=fsdp2", "--set", "tp=2", "--set",
      "sequence_parallel=true" }, 0.05 } }) do
      local sets, within = case[1], case[2]
      local a = helper.estimate(lua_blocks, "--gpu", "h100-80gb", "--gpus", "2", table.unpack(sets)).time
      local b = helper.estimate(built_in, "--gpu", "h100-80gb", "--gpus", "2", table.unpack(sets)).time
      assert.are.equal(b.model_flops_per_step, a.model_flops_per_step)
      assert.is_true(math.abs(a.step_s / b.step_s - 1) < within, a.step_s .. " against " .. b.step_s)
    end
  end)
end)

describe("show", function()
  it("names each block by its module", function()
    local lua_blocks = pair("llama", "hidden = 64, layers = 2, heads = 4, intermediate = 96, vocab = 100")
    local out, err, code = helper.run("show", lua_blocks)
    assert.are.equal(0, code, err)
    -- 3 x 64 x 96 = 18,432
    assert.truthy(out:find("block mlp%s+18,432%s+mlp.up_proj.weight 6,144"), out)
    assert.truthy(out:find("block rmsnorm%s+64%s+rmsnorm.weight 64"), out)
  end)
end)

-- Tensors of explicit shape (x:size(), view / reshape to dims,
-- scripts/lib/vramplan/block_shapes.lua) follow the parallel layout as
-- the core's ops do: a column-parallel linear's output has its features
-- (and the heads they are viewed as) divided over tp ranks, its sequence
-- the whole one (gathered under sequence parallelism); the block input's
-- sequence is this rank's rows (seq / tp under sequence parallelism,
-- seq / cp under context parallelism: Megatron-LM's
-- scatter_to_sequence_parallel_region and get_batch_on_this_cp_rank).
describe("a Lua block's tensors of explicit shape under tp, sequence and context parallelism", function()
  -- Megatron-LM's MLP with its two column-parallel outputs viewed as
  -- [b, s, intermediate / tp] (g:size() read off the output) and joined by
  -- a cat of shaped tensors: the built-in LLaMA's MLP byte for byte
  local shaped_mlp = {
    { "return p%.down_proj%(swiglu%(F%.cat%({ p%.gate_proj%(x, fc1%), p%.up_proj%(x, fc1%) }, %-1, fc1%)%)%)",
      "local g, u = p.gate_proj(x, fc1), p.up_proj(x, fc1) local b, s = g:size(0), g:size(1) "
        .. "return p.down_proj(swiglu(F.cat({ g:view(b, s, -1), u:view(b, s, -1) }, -1, fc1)))" },
  }
  local _, built_in = pair("llama", "hidden = 64, layers = 2, heads = 4, kv_heads = 2, intermediate = 96, vocab = 100")
  for _, sets in ipairs({
    { "framework=megatron", "tp=2", "precision=mixed-bf16" },
    { "framework=megatron", "tp=2", "sequence_parallel=true", "precision=mixed-bf16" },
    { "framework=megatron", "cp=2", "precision=mixed-bf16" },
    { "framework=megatron", "tp=2", "cp=2", "sequence_parallel=true", "checkpointing=selective", "precision=mixed-bf16" },
  }) do
    it("the shaped MLP has the built-in LLaMA's timeline byte for byte: " .. named(sets), function()
      local a, b = mutated(shaped_mlp, nil, sets), estimate(built_in, sets)
      assert.are.same(b, a)
    end)
  end

  -- A block whose shapes count each layout's share, checked event by event
  -- against sizes worked out here: the input viewed as [b, s, 4, 16] and
  -- summed over the last dimension (the block input's rows), a
  -- column-parallel output viewed as 4 heads of 24 ([b, s, 4 / tp, 24],
  -- the whole sequence), its sum and their product.
  local function layout_model()
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p " .. dir .. "/arch"))
    assert(io.open(dir .. "/arch/shapefam.lua", "w")):write([[
return architecture {
  name = "shapefam",
  fields = { { "hidden", "int" } },
  build = function(c)
    local b = block { name = "mix", width = c.hidden,
      params = { { "up", linear = { c.hidden, 96 }, split = "column" }, { "down", linear = { 96, c.hidden }, split = "row" } },
      forward = function(x, p)
        local g = F.keep(x:view(x:size(0), x:size(1), 4, 16):sum(-1, { keepdim = true, label = "g" }), "g")
        local h = F.keep(p.up(x), "h")
        local b, s = h:size(0), h:size(1)
        local w = F.keep(h:view(b, s, 4, 24):sum(-1, { keepdim = true, label = "w" }), "w")
        local y = F.keep(F.mul(h:view(b, s, -1, 24), w, { label = "y" }), "y")
        return p.down(y:reshape(b, s, -1))
      end }
    return decoder { embed = { token_embedding { vocab = 16, hidden = c.hidden } }, layer = { residual { b } },
      layers = 1, final = { lm_head { vocab = 16, hidden = c.hidden }, cross_entropy {} } }
  end,
}
]]):close()
    assert(io.open(dir .. "/m.lua", "w")):write("return shapefam { hidden = 64 }\n"):close()
    return dir
  end
  local function forward_bytes(model, sets)
    local o = estimate(model, sets)
    local bytes = {}
    for _, e in ipairs(o.timeline) do
      if e.phase == "forward" and e.delta > 0 and bytes[e.op] == nil then bytes[e.op] = e.delta end
    end
    return bytes
  end
  it("divides heads and features over tp, the block input's rows under sequence parallelism, the sequence over cp",
    function()
      local dir = layout_model()
      local batch, seq = 2, 256
      for _, case in ipairs({
        -- sets, the block input's sequence, the gathered sequence, heads per rank
        { {}, seq, seq, 4 },
        { { "tp=2" }, seq, seq, 2 },
        { { "tp=2", "sequence_parallel=true" }, seq // 2, seq, 2 },
        { { "tp=4", "sequence_parallel=true" }, seq // 4, seq, 1 },
        { { "cp=2" }, seq // 2, seq // 2, 4 },
        { { "tp=2", "cp=2", "sequence_parallel=true" }, seq // 4, seq // 2, 2 },
      }) do
        local sets = { "framework=megatron", "precision=fp32", "micro_batch=" .. batch, "seq_len=" .. seq }
        for _, s in ipairs(case[1]) do sets[#sets + 1] = s end
        local own, whole, heads = case[2], case[3], case[4]
        local bytes = forward_bytes(dir .. "/m.lua", sets)
        local what = table.concat(case[1], " ")
        assert.are.equal(batch * own * 4 * 4, bytes["mix.g"], "g: " .. what)
        assert.are.equal(batch * whole * heads * 4, bytes["mix.w"], "w: " .. what)
        assert.are.equal(batch * whole * heads * 24 * 4, bytes["mix.y"], "y: " .. what)
      end
      local _, err = helper.run("estimate", dir .. "/m.lua", "--set", "framework=megatron", "--set", "tp=8")
      assert.truthy(err:find("tp: must divide every split dimension of a Lua block's shapes", 1, true), err)
      os.execute("rm -rf " .. dir)
    end)

  it("counts the whole sequence where DTensor's plan gathers the block's input (framework = fsdp2)", function()
    -- the block reads its input with a column-parallel linear: torchtitan's
    -- PrepareModuleInput gathers it at the block's entry, so g (of the
    -- input) counts the whole sequence too, as does the gather itself
    local dir = layout_model()
    local batch, seq = 2, 256
    local bytes = forward_bytes(dir .. "/m.lua", { "framework=fsdp2", "dp=2", "tp=2", "sequence_parallel=true",
      "precision=fp32", "micro_batch=" .. batch, "seq_len=" .. seq })
    assert.are.equal(batch * seq * 64 * 4, bytes["all_gather.module_input"])
    assert.are.equal(batch * seq * 4 * 4, bytes["mix.g"])
    assert.are.equal(batch * seq * 2 * 4, bytes["mix.w"])
    assert.are.equal(batch * seq * 2 * 24 * 4, bytes["mix.y"])
    os.execute("rm -rf " .. dir)
  end)

  it("names what a split dimension cannot do", function()
    local params = '{ "up", linear = { c.hidden, 32 }, split = "column" }, { "down", linear = { 32, c.hidden }, split = "row" }'
    local function check(body, message)
      local err = bad_block(body, params)
      assert.truthy(err:find(message, 1, true), err)
    end
    local h = "local h = p.up(x) local b, s = h:size(0), h:size(1) "
    check(h .. "local y = h:view(b, s, 32):narrow(-1, 0, 8) return x",
      "narrow: of a dimension split over tensor-parallel ranks (32/tp)")
    check(h .. "local y = h:view(b, s, 32):repeat_interleave(2, -1) return x",
      "repeat_interleave: of a dimension split over tensor-parallel ranks (32/tp) is not in the vocabulary yet")
    check(h .. "local v = h:view(b, s, 32) local y = F.cat({ v, v:sum(-1, { keepdim = true }) }, -1) return x",
      "cat: along dimension -1 of sizes 32/tp and 1")
    check(h .. "local y = h:view(b, s, 32) * x:view(x:size(0), x:size(1), 64) return x",
      "mul: shapes [batch, seq(gathered), 32/tp] and [batch, seq, 64] do not broadcast")
  end)
end)
