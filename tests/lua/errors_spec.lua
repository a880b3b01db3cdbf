-- Bad input: every case gets a message naming the file, the line and the
-- field, and a non-zero exit; never a crash, a hang or a silent number.
local helper = require("tests.lua.helper")

local fails = helper.fails

local function model(text) return helper.write(text, ".lua") end

local function base_name(path) return path:match("([^/]+)$") end

local GOOD = "hidden = 64, layers = 2, heads = 4, intermediate = 128, vocab = 100"

describe("bad model scripts", function()
  it("names an unknown field, with a suggestion", function()
    local p = model("return llama {\n  hiden = 64, layers = 2, heads = 4, intermediate = 128, vocab = 100,\n}\n")
    local err = fails(p)
    -- the line of the field, not of `llama {`
    assert.truthy(err:find(base_name(p) .. ":2: unknown field 'hiden' in llama (did you mean 'hidden'?)", 1, true), err)
  end)

  it("names an unknown field of any length at once", function()
    -- found by profiling the fuzz corpus (tests/fuzz/regressions/): the
    -- suggestion's edit distance cost #name * #field steps per field, so a
    -- 2,000-letter name took 9 s and one of 100,000 minutes
    local long = string.rep("h", 100000)
    local p = model("return llama {\n  " .. long .. " = 64, layers = 2, heads = 4, intermediate = 128, vocab = 100,\n}\n")
    local start = os.time()
    local err = fails(p)
    assert.truthy(err:find(":1: unknown field '" .. long .. "' in llama", 1, true), err:sub(1, 200))
    assert.is_true(os.time() - start < 30, "seconds: " .. (os.time() - start))
  end)

  it("refuses more layers than it evaluates, naming the config's field, and evaluates the most it takes", function()
    -- found by the fuzzer (tests/fuzz/regressions/t5-92150-unfolded-layers):
    -- an mT5 config with 92,150 decoder layers, which an encoder-decoder
    -- evaluates one by one; each layer looked up its plan entry by a linear
    -- scan, so the step was quadratic in the layers (minutes under the
    -- sanitizers). The lookup is a binary search now, and a model has at
    -- most 10,000 layers (the deepest published, DeepNet's, has 1,000).
    local config = helper.write('{"model_type": "mt5", "num_decoder_layers": 92150}', ".json")
    local err = helper.fails(config)
    assert.truthy(err:find(config .. ": num_decoder_layers: decoder_layers: must be between 1 and 5000 (got 92150)", 1,
      true), err)
    config = helper.write('{"model_type": "llama", "num_hidden_layers": 10001}', ".json")
    err = helper.fails(config)
    assert.truthy(err:find(config .. ": num_hidden_layers: layers: must be between 1 and 10000 (got 10001)", 1, true), err)
    -- the most an encoder-decoder takes runs
    config = helper.write('{"model_type": "t5", "d_model": 64, "d_ff": 128, "d_kv": 16, "num_heads": 4, "vocab_size": 100, ' ..
      '"num_layers": 5000, "num_decoder_layers": 5000}', ".json")
    local r = helper.estimate(config, "--set", "seq_len=8", "--set", "micro_batch=1")
    assert.is_true(r.per_gpu.peak_allocated_bytes > 0)
  end)

  it("rejects wrong types", function()
    local err = fails(model("return llama { hidden = 'big', layers = 2, heads = 4, intermediate = 128, vocab = 100 }"))
    assert.truthy(err:find(":1: hidden: must be a whole number (got big)", 1, true), err)
    err = fails(model("return llama { " .. GOOD .. ", tie_embeddings = 'yes' }"))
    assert.truthy(err:find("tie_embeddings: must be true or false", 1, true), err)
  end)

  it("rejects negative and zero sizes", function()
    assert.truthy(fails(model("return llama { hidden = -64, layers = 2, heads = 4, intermediate = 128, vocab = 100 }"))
      :find("hidden: must be between 1 and", 1, true))
    assert.truthy(fails(model("return llama { hidden = 64, layers = 0, heads = 4, intermediate = 128, vocab = 100 }"))
      :find("layers: must be between 1 and", 1, true))
    assert.truthy(fails(model("return llama { hidden = 64, layers = 2.5, heads = 4, intermediate = 128, vocab = 100 }"))
      :find("layers: must be a whole number", 1, true))
  end)

  it("requires heads to divide hidden and kv_heads to divide heads", function()
    local p = model("return llama {\n hidden = 64, layers = 2, heads = 5, intermediate = 128, vocab = 100 }")
    assert.truthy(fails(p):find(base_name(p) .. ":2: heads: must divide hidden (64)", 1, true))
    p = model("return llama { hidden = 64, layers = 2, heads = 4, kv_heads = 3, intermediate = 128, vocab = 100 }")
    assert.truthy(fails(p):find("kv_heads: must divide heads (4)", 1, true))
    p = model("return gpt2 { hidden = 64, layers = 2, heads = 5 }")
    assert.truthy(fails(p):find("heads: must divide hidden (64)", 1, true))
  end)

  it("names a missing field", function()
    local err = fails(model("return llama { hidden = 64, layers = 2, heads = 4, vocab = 100 }"))
    assert.truthy(err:find("llama needs field 'intermediate'", 1, true), err)
  end)

  it("reports a syntax error with its line", function()
    local p = model("return llama {\n  hidden = 64,,\n}\n")
    assert.truthy(fails(p):find(base_name(p) .. ":2: unexpected symbol near ','", 1, true))
  end)

  it("stops a script that loops forever", function()
    local p = model("local n = 0\nwhile true do n = n + 1 end\n")
    assert.truthy(fails(p):find(base_name(p) .. ":2: script exceeded its instruction budget", 1, true))
  end)

  it("stops a script that allocates without bound", function()
    local p = model("local t = {}\nfor i = 1, 1e12 do t[i] = { i, i, i } end\n")
    assert.truthy(fails(p):find(base_name(p) .. ":2: script exceeded its memory budget", 1, true))
    p = model("local s = string.rep('x', 1 << 40)\n")
    assert.truthy(fails(p):find(base_name(p) .. ":1:", 1, true))
  end)

  it("stops a script that catches its budget's error and goes on", function()
    -- found while writing the fuzz target (tests/fuzz/regressions/): the
    -- hook used to remove itself when it raised, so a pcall that caught
    -- the error left the script running without a budget
    local p = model("while true do\n  pcall(function() while true do end end)\nend\n")
    assert.truthy(fails(p):find(base_name(p) .. ":2: script exceeded its instruction budget", 1, true))
    p = model("while true do\n  xpcall(function() while true do end end, function(e) return e end)\nend\n")
    assert.truthy(fails(p):find(base_name(p) .. ":2: script exceeded its instruction budget", 1, true))
    p = model("local t = {}\nwhile true do pcall(function() t[#t + 1] = string.rep('x', 1e6) end) end\n")
    assert.truthy(fails(p):find(base_name(p) .. ":2: script exceeded its memory budget", 1, true))
    -- an ordinary error is still caught
    p = model("local ok, e = pcall(error, 'boom')\nassert(not ok and e:find('boom'))\n" ..
      "return llama { hidden = 64, layers = 2, heads = 4, intermediate = 128, vocab = 100 }\n")
    local _, err, code = helper.run("estimate", p)
    assert.equal(0, code, err)
  end)

  it("refuses a pattern whose matching could run for hours", function()
    -- the matcher backtracks inside one C call, where the instruction
    -- hook never runs: method calls and string.* are both bounded
    local p = model("local s = string.rep('a', 40)\nreturn s:find(string.rep('a*', 20) .. 'b')\n")
    assert.truthy(fails(p):find(base_name(p) .. ":2: pattern too costly to match: 20 repetitions over 40 bytes", 1, true))
    p = model("local s = string.rep('a', 4e4)\nreturn string.gsub(s, 'a-b', '')\n")
    assert.truthy(fails(p):find(base_name(p) .. ":2: pattern too costly to match", 1, true))
    -- plain searches and short subjects are not
    p = model("local s = string.rep('a*', 4e4)\nassert(s:find('a*a*b', 1, true) == nil)\n" ..
      "local name = ('llama-x'):gsub('[%w]+%-(%w*)', '%1')\n" ..
      "return llama { name = name, hidden = 64, layers = 2, heads = 4, intermediate = 128, vocab = 100 }\n")
    local _, err, code = helper.run("estimate", p)
    assert.equal(0, code, err)
  end)

  it("runs scripts sandboxed", function()
    local marker = os.tmpname()
    os.remove(marker)
    for _, code in ipairs({
      "os.execute('touch " .. marker .. "')",
      "io.open('" .. marker .. "', 'w')",
      "io.popen('touch " .. marker .. "')",
      "load('return 1')()",
      "dofile('" .. marker .. "')",
      "require('os')",
      "string.dump(print)",
      "setmetatable({}, {})",
      "debug.getinfo(1)",
      "collectgarbage()",
    }) do
      local err = fails(model(code .. "\n"))
      assert.truthy(err:find(":1: attempt to ", 1, true), code .. " -> " .. err)
    end
    assert.is_nil(io.open(marker, "r"), "a sandboxed script wrote a file")
  end)

  it("refuses bytecode", function()
    local p = helper.write("\27Lua\84\0\25\147\13\10\26\10", ".lua")
    assert.truthy(fails(p):find("attempt to load a binary chunk", 1, true))
  end)

  it("says so when the file does not exist", function()
    assert.truthy(fails("no/such/model.lua"):find("no model 'no/such/model.lua'", 1, true))
    assert.truthy(fails("models/llama2-7b.lua", "--recipe", "no/such/recipe.lua"):find("cannot open recipe", 1, true))
    assert.truthy(fails("models/llama2-7b.lua", "--gpu", "a100"):find("no GPU 'a100'", 1, true))
  end)

  it("catches sizes that would overflow", function()
    local err = fails("models/llama2-7b.lua", "--set", "micro_batch=1000000", "--set", "seq_len=60000000",
      "--set", "attention=eager")
    assert.truthy(err:find("sizes overflow", 1, true), err)
    err = fails(model("return llama { hidden = 1 << 50, layers = 2, heads = 4, intermediate = 128, vocab = 100 }"))
    assert.truthy(err:find("hidden: must be between", 1, true), err)
  end)

  it("names a family script's container that cannot run, at the model script's line (not as an overflow)", function()
    -- a residual whose branches are added one by one needs a parallel block
    -- last (CohereDecoderLayer's shape): was reported as "sizes overflow"
    local dir = helper.write("", ""):gsub("[^/]+$", "")
    local family = dir .. "vp_badres.lua"
    local f = assert(io.open(family, "w"))
    f:write([[
return architecture {
  name = "vp_badres", doc = "a residual adding branches without a parallel block",
  fields = { { "hidden", "int", default = 64 } },
  build = function(c)
    return decoder {
      embed = { token_embedding { vocab = 256, hidden = c.hidden } },
      layer = { residual { adds_branches = true, rmsnorm { hidden = c.hidden } } },
      layers = 2,
      final = { rmsnorm { hidden = c.hidden }, lm_head { vocab = 256, hidden = c.hidden }, cross_entropy {} },
    }
  end,
}
]])
    f:close()
    local script = model('return vp_badres { name = "b" }')
    local err = fails(script, "--path", dir)
    os.remove(family)
    assert.truthy(err:find(base_name(script) .. ":1: residual: adds_branches", 1, true), err)
    assert.falsy(err:find("overflow", 1, true), err)
  end)
end)

describe("bad recipes", function()
  it("refuses a sequence longer than a learned position table, counting virtual tokens", function()
    -- GPT-2's wpe has 1024 rows, BERT's 512: transformers fails (index out of range) past them
    local err = fails("models/gpt2.lua", "--set", "seq_len=1025")
    assert.truthy(err:find("seq_len: longer than the model's learned position table", 1, true), err)
    err = fails("models/gpt2.lua", "--set", "seq_len=1020", "--set", "finetune=prompt", "--set", "num_virtual_tokens=8")
    assert.truthy(err:find("seq_len: the tokens and the virtual tokens before them", 1, true), err)
    assert.truthy(fails("models/bert-large-uncased.lua", "--set", "seq_len=513"):find("seq_len:", 1, true))
    helper.estimate("gpt2", "--set", "seq_len=1024")
    helper.estimate("llama2-7b", "--set", "seq_len=8192") -- rotary positions have no table
  end)

  it("states a range's bounds and the value outside it as numbers", function()
    -- lua_pushfstring knows %f and %I, not %g: a bound once came out as a format error
    local err = fails("models/llama2-7b.lua", "--set", "finetune=lora", "--set", "lora_dropout=3")
    assert.truthy(err:find("lora_dropout: must be between 0.0 and 0.999 (got 3.0)", 1, true), err)
    err = fails("models/llama2-7b.lua", "--set", "micro_batch=99999999999")
    assert.truthy(err:find("micro_batch: must be between 1 and 16777216 (got 99999999999)", 1, true), err)
    err = fails("models/llama2-7b.lua", "--set", "norm_eps=3.5") -- the rmsnorm op's own range
    assert.truthy(err:find("rmsnorm: field 'eps' must be between 0.0 and 1.0 (got 3.5)", 1, true), err)
  end)

  it("shows a table given for a recipe key by its kind, not its address", function()
    local function given(key)
      return fails("models/llama2-7b.lua", "--recipe", helper.write("return recipe { " .. key .. " }\n"))
    end
    local err = given("precision = {}")
    assert.truthy(err:find("precision: must be one of fp32, bf16", 1, true) and err:find("(got a table)", 1, true), err)
    err = given("micro_batch = { 2 }")
    assert.truthy(err:find("micro_batch: must be a whole number (got a table)", 1, true), err)
  end)

  it("names the line that writes the key, past comments and longer names holding it", function()
    local p = helper.write("return recipe {\n  -- seq_len = 128 was tried\n  micro_batch = 2, -- seq_len = 64\n" ..
      "  seq_len = 'long',\n}\n")
    local err = fails("models/llama2-7b.lua", "--recipe", p)
    assert.truthy(err:find(base_name(p) .. ":4: seq_len: must be a whole number (got long)", 1, true), err)
    p = model("return llama {\n  hidden = 64, kv_heads = 1,\n  heads = 5, layers = 2, intermediate = 128, vocab = 100 }")
    err = fails(p)
    assert.truthy(err:find(base_name(p) .. ":3: heads: must divide hidden (64)", 1, true), err)
  end)

  it("names an unknown recipe key with its origin", function()
    local p = helper.write("return recipe {\n  precision = 'bf16',\n  micro_bach = 2,\n}\n")
    local err = fails("models/llama2-7b.lua", "--recipe", p)
    assert.truthy(err:find(base_name(p) .. ":3: unknown recipe key 'micro_bach' (did you mean 'micro_batch'?)", 1, true), err)
  end)

  it("rejects wrong values and says where they came from", function()
    assert.truthy(fails("models/llama2-7b.lua", "--set", "precision=bf17")
      :find("--set precision=bf17: precision: 'bf17' is not one of", 1, true))
    assert.truthy(fails("models/llama2-7b.lua", "--set", "micro_batch=0")
      :find("--set micro_batch=0: micro_batch: must be between 1 and", 1, true))
    assert.truthy(fails("models/llama2-7b.lua", "--set", "seq_len=-5")
      :find("seq_len: must be between 1 and", 1, true))
    assert.truthy(fails("models/llama2-7b.lua", "--set", "checkpointing=every-0")
      :find("checkpointing: must be none, full, selective, op-selective, every-K or layers-K", 1, true))
    assert.truthy(fails("models/llama2-7b.lua", "--set", "optimizer=adamm")
      :find("did you mean 'adam", 1, true))
    -- far from every choice: the message lists them all and the value given
    assert.truthy(fails("models/llama2-7b.lua", "--set", "precision=bf16-mixed")
      :find("precision: must be one of fp32, bf16, fp16, amp-bf16, amp-fp16, mixed-bf16, mixed-fp16, fp8, " ..
        "fp8-torchao, bf16-autocast, fp16-autocast (got bf16-mixed)", 1, true))
    local p = helper.write("return recipe { micro_batch = 'four' }\n")
    assert.truthy(fails("models/llama2-7b.lua", "--recipe", p):find(":1: micro_batch: must be a whole number", 1, true))
  end)

  it("names a family field's value that is not one of its choices", function()
    for _, case in ipairs({
      { "norm_style=rms", "norm_style: must be llama, gemma or olmo2" },
      { "norm_position=middle", "norm_position: must be pre, post or sandwich" },
      { "sliding_pattern=2", "sliding_pattern: needs a sliding_window" },
      { "local_rope=true", "local_rope: is the sliding layers' rotary tables" },
      { "qk_norm_style=row", "qk_norm_style: must be head, olmo2 or gemma" },
      { "expert_names=x", "expert_names: must be w or proj" },
      { "partial_rotary_factor=0.5", "partial_rotary_factor: is Phi-3's" },
    }) do
      local err = fails("models/llama2-7b.lua", "--set", case[1], "--set", "seq_len=128")
      assert.truthy(err:find("--set " .. case[1] .. ": " .. case[2], 1, true), err)
    end
  end)

  it("names the new families' fields that do not hold together", function()
    for _, case in ipairs({
      { "gemma-2b", "scaled_embedding=true", "scaled_embedding: scales the embeddings itself" },
      { "pythia-1b", "rotary_pct=0.001", "rotary_pct: must leave an even, nonzero rotated width" },
      { "phi-2", "partial_rotary_factor=0.0125", "partial_rotary_factor: must leave an even, nonzero rotated width" },
    }) do
      local err = fails(case[1], "--set", case[2], "--set", "seq_len=128")
      assert.truthy(err:find("--set " .. case[2] .. ": " .. case[3], 1, true), err)
    end
  end)

  it("names a key that is neither a recipe key nor a model field", function()
    assert.truthy(fails("models/llama2-7b.lua", "--set", "hiden=1024")
      :find("--set hiden=1024: unknown key 'hiden': not a recipe key nor a field of llama (did you mean 'hidden'?)", 1, true))
  end)
end)

describe("bad Hugging Face configs", function()
  it("reports invalid JSON with its line and column", function()
    local p = helper.write('{\n  "model_type": "llama",\n  "hidden_size": \n}\n', ".json")
    assert.truthy(fails(p):find("invalid JSON: .*line 4", 1, false))
  end)

  it("names an unsupported model_type", function()
    local p = helper.write('{"model_type": "whisper"}', ".json")
    assert.truthy(fails(p):find("model_type: whisper is not supported", 1, true))
  end)

  it("names the config key behind a bad value", function()
    local p = helper.write('{"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, '
      .. '"num_attention_heads": 3, "intermediate_size": 128, "vocab_size": 100}', ".json")
    assert.truthy(fails(p):find(base_name(p) .. ": num_attention_heads: heads: must divide hidden (64)", 1, true))
  end)

  local LLAMA = '"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, '
    .. '"intermediate_size": 128, "vocab_size": 100'

  it("names hidden_act when the core counts no such activation", function()
    local err = fails(helper.write("{" .. LLAMA .. ', "hidden_act": "swiss"}', ".json"))
    assert.truthy(err:find(": hidden_act: swiss is not an activation transformers names (modelled: gelu,", 1, true), err)
    -- a name transformers has whose memory the core cannot count
    err = fails(helper.write("{" .. LLAMA .. ', "hidden_act": "gelu_10"}', ".json"))
    assert.truthy(err:find(": hidden_act: gelu_10: ClippedGELUActivation clips", 1, true), err)
    assert.truthy(fails(helper.write("{" .. LLAMA .. ', "hidden_act": 7}', ".json"))
      :find(": hidden_act: activation: must be a string (got 7)", 1, true))
  end)

  it("shows a list or an object by its kind, a blank string quoted", function()
    local function with(key, value)
      return fails(helper.write("{" .. LLAMA .. ', "' .. key .. '": ' .. value .. "}", ".json"))
    end
    local err = with("num_key_value_heads", "[1, 2]")
    assert.truthy(err:find("num_key_value_heads: kv_heads: must be a whole number (got a list)", 1, true), err)
    err = with("tie_word_embeddings", '{"a": 1}')
    assert.truthy(err:find("tie_word_embeddings: tie_embeddings: must be true or false (got an object)", 1, true), err)
    err = with("rms_norm_eps", '""')
    assert.truthy(err:find('rms_norm_eps: norm_eps: must be a number (got "")', 1, true), err)
    err = fails(helper.write('{"model_type": ["llama"]}', ".json"))
    assert.truthy(err:find("model_type: a list is not supported", 1, true), err)
  end)
end)

describe("bad architecture scripts", function()
  -- a home of its own holding one family, loaded through the library
  -- (which keeps a family by name: each test names its own)
  local function write_family(name, text)
    local home = os.tmpname()
    os.remove(home)
    assert(os.execute("mkdir -p " .. home .. "/models/arch"))
    local f = assert(io.open(home .. "/models/arch/" .. name .. ".lua", "w"))
    f:write(text)
    f:close()
    return home
  end
  local function family(name, text)
    local home = write_family(name, text)
    return home, require("vramplan.arch").load(home, name)
  end

  it("reports an op the core refuses at the script's line that built it", function()
    local home, tiny = family("tiny", [[
return architecture {
  name = "tiny",
  fields = { { "hidden", "int" } },
  build = function(c)
    return decoder {
      layer = {
        mlp { hidden = c.hidden, intermediate = 4, activation = "swish" },
      },
    }
  end,
}
]])
    local ok, err = pcall(require("vramplan.arch").build, tiny { hidden = 8 })
    os.execute("rm -r " .. home)
    assert.is_false(ok)
    assert.truthy(err:find("models/arch/tiny.lua:7: mlp: field 'activation' must be one of", 1, true), err)
  end)

  it("names a malformed field declaration by its place in the list", function()
    local home = write_family("tiny_decl", [[
return architecture {
  name = "tiny_decl",
  fields = { { "hidden", "int" }, { "eps", "float" } },
  build = function(c) return decoder {} end,
}
]])
    local ok, err = pcall(require("vramplan.arch").load, home, "tiny_decl")
    os.execute("rm -r " .. home)
    assert.is_false(ok)
    assert.truthy(err:find("models/arch/tiny_decl.lua:1: tiny_decl: fields[2]: eps: type must be int, number, bool "
      .. "or string (got float)", 1, true), err)
  end)

  it("refuses an embedding registration order that is not one of the embedding ops", function()
    local function built(order)
      local name = "tiny_order_" .. (#order > 0 and table.concat(order, "_") or "none")
      local home, fam = family(name, string.format([[
return architecture {
  name = %q,
  fields = { { "hidden", "int", default = 8 } },
  build = function(c)
    return decoder {
      layers = 1,
      embed = { token_embedding { vocab = 10, hidden = 8 }, dropout { p = 0 } },
      layer = { mlp { hidden = 8, intermediate = 4 } },
      final = { lm_head { vocab = 10, hidden = 8 }, cross_entropy {} },
      embed_registered = { %s },
    }
  end,
}
]], name, table.concat(order, ", ")))
      local ok, err = pcall(require("vramplan.arch").build, fam {})
      os.execute("rm -r " .. home)
      return ok, err
    end
    assert.is_true((built({ 2, 1 })))
    for _, bad in ipairs({ { 1, 1 }, { 1 }, { 1, 3 }, {} }) do
      local ok, err = built(bad)
      assert.is_false(ok, table.concat(bad, ","))
      assert.truthy(tostring(err):find("embed_registered", 1, true), err)
    end
  end)

  it("gives a family's fields the core's options for an op's enum field", function()
    local home, tiny = family("tiny_act", [[
return architecture {
  name = "tiny_act",
  fields = { { "act", "string", default = "silu", options = op_options("mlp", "activation") } },
  build = function(c)
    return decoder {
      layers = 1,
      embed = { token_embedding { vocab = 10, hidden = 8 } },
      layer = { mlp { hidden = 8, intermediate = 4, activation = c.act } },
      final = { lm_head { vocab = 10, hidden = 8 }, cross_entropy {} },
    }
  end,
}
]])
    local arch = require("vramplan.arch")
    local ok, err = pcall(arch.build, tiny { act = "swish" })
    local built = arch.build(tiny { act = "relu" })
    os.execute("rm -r " .. home)
    assert.is_false(ok)
    assert.truthy(err:find("act: must be one of gelu, gelu_pytorch_tanh, gelu_new, relu, silu", 1, true), err)
    assert.truthy(built)
  end)
end)

describe("usage errors", function()
  it("exits 2 with the usage for a wrong command line", function()
    local _, err, code = helper.run("estimate", "models/llama2-7b.lua", "--bogus")
    assert.are.equal(2, code)
    assert.truthy(err:find("unknown option --bogus", 1, true))
    _, err, code = helper.run("estimate", "models/llama2-7b.lua", "--set", "nokey")
    assert.are.equal(2, code)
    assert.truthy(err:find("--set takes KEY=VALUE", 1, true))
  end)
end)
