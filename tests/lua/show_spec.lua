-- `vramplan show` and `vramplan list models`: the resolved model, module by
-- module, and the catalog of models, against the published counts and
-- what `estimate` counts.
local helper = require("tests.lua.helper")
local json = require("dkjson")

local function show(...)
  local out, err, code = helper.run("show", "--json", ...)
  assert(code == 0, err)
  return json.decode(out)
end

-- Parameters of ops and their children, from their leaves.
local function leaf_params(ops)
  local total = 0
  for _, op in ipairs(ops) do
    local own = 0
    for _, leaf in ipairs(op.leaves) do if not leaf.buffer then own = own + leaf.numel * leaf.count end end
    local children = op.children and leaf_params(op.children) or 0
    assert.are.equal(op.params, own + children, op.kind)
    total = total + op.params
  end
  return total
end

describe("vramplan show", function()
  it("adds up, module by module, to Llama-2-7B's published 6,738,415,616 parameters", function()
    local o = show("llama2-7b")
    local total = 0
    for _, sec in ipairs(o.sections) do
      assert.are.equal(sec.params, leaf_params(sec.ops), sec.name)
      total = total + sec.params * sec.repeats
    end
    assert.are.equal(6738415616, total)
    assert.are.equal(6738415616, o.params)
    assert.truthy(o.family_source:find("models/arch/llama.lua", 1, true))
  end)

  it("shows T5's encoder and decoder layers apart, as estimate counts them", function()
    local o = show("t5-large")
    local total = 0
    for _, sec in ipairs(o.sections) do total = total + sec.params * sec.repeats end
    assert.are.equal(helper.estimate("t5-large", "--set", "seq_len=128").model.params, total)
  end)

  it("takes field overrides, and refuses recipe keys there", function()
    local o = show("llama2-7b", "--set", "layers=2")
    for _, sec in ipairs(o.sections) do if sec.name == "layer" then assert.are.equal(2, sec.repeats) end end
    local _, err, code = helper.run("show", "llama2-7b", "--set", "micro_batch=2")
    assert.are.equal(1, code)
    assert.truthy(err:find("'micro_batch' is not a field of llama", 1, true), err)
  end)
end)

describe("vramplan list models", function()
  local out, err, code = helper.run("list", "models", "--json")
  local rows = code == 0 and json.decode(out) or {}

  it("lists every model script with its family, shape and parameters", function()
    assert.are.equal(0, code, err)
    local names = {}
    for _, r in ipairs(rows) do names[r.name] = r end
    assert.is_not_nil(names["llama2-7b"])
    assert.are.equal(6738415616, names["llama2-7b"].params)
    assert.are.equal(32, names["llama2-7b"].layers)
    assert.are.equal(8, names["llama3-8b"].kv_heads)
    -- falcon-7b is multi-query (config.json: multi_query true): one key/value head
    assert.are.equal(1, names["falcon-7b"].kv_heads)
    assert.are.equal(8, names["falcon-40b"].kv_heads)
    assert.are.equal(helper.estimate("qwen2.5-0.5b", "--set", "seq_len=128").model.params, names["qwen2.5-0.5b"].params)
  end)

  it("prints a table with a row per model", function()
    local text = helper.run("list", "models")
    local lines = 0
    for _ in text:gmatch("[^\n]+") do lines = lines + 1 end
    assert.are.equal(#rows + 1, lines)
    assert.truthy(text:find("heads / KV", 1, true))
    -- the count as estimate's header writes it: Gemma 3 1B's 999,885,952 are not "1000 M"
    local header = helper.run("estimate", "gemma-3-1b", "--set", "seq_len=128")
    local count = header:match("%((.-) parameters")
    assert.are.equal("999.9 M", count)
    assert.truthy(text:find("\ngemma%-3%-1b%s+llama%s+" .. count:gsub("%.", "%%.") .. " "), text)
  end)
end)
