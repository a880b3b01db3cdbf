-- vramplan.json_out writes what dkjson writes, byte for byte: over real
-- estimate objects (every model in models/, a pipeline, no GPU, a node, the
-- timeline's arrays) and over values it hands to dkjson.
local helper = require("tests.lua.helper")
local dkjson = require("dkjson")
local json_out = require("vramplan.json_out")

local function same(value, order)
  for _, indent in ipairs({ true, false }) do
    local want = dkjson.encode(value, { indent = indent, keyorder = order })
    assert.are.equal(want, json_out.encode(value, order, indent))
  end
end

describe("json_out", function()
  local vramplan = require("vramplan")
  vramplan.home = helper.root
  local report = require("vramplan.report")

  it("writes estimate --json's objects as dkjson does", function()
    local n = 0
    for _, name in ipairs(require("vramplan.models").list(helper.root)) do
      local ok, model, config = pcall(vramplan.load_model, name)
      if ok then
        local gpu = vramplan.load_gpu("h100-80gb")
        local recipe = { seq_len = 128 }
        -- DeepSeek-V2's own modeling code trains in fp32 only: its default recipe is refused
        local fine, err = pcall(vramplan.estimate, model, recipe, gpu)
        if not fine then
          assert(tostring(err):find("precision: ", 1, true), name .. ": " .. tostring(err))
          recipe.precision = "fp32"
        end
        local o = vramplan.report(vramplan.estimate(model, recipe, gpu), config, gpu)
        same(o, report.key_order())
        same(o, nil)
        n = n + 1
      end
    end
    assert.is_true(n > 30, n .. " models")
    -- a pipeline (per_rank of two stages), no GPU (null verdicts), the
    -- timeline's array of events
    local model, config = vramplan.load_model("gpt2", { layers = 2 })
    same(vramplan.report(vramplan.estimate(model, { seq_len = 128, pp = 2, num_microbatches = 2 }), config),
      report.key_order())
    local r = vramplan.estimate(model, { seq_len = 64 }, nil, { timeline = true })
    local o = vramplan.report(r, config)
    o.timeline = r.timeline
    assert.is_true(#o.timeline > 50)
    same(o, report.key_order())
  end)

  it("hands dkjson what it does not take the short way", function()
    local tricky = {
      quote = 'say "hi"', newline = "a\nb", tab = "\t", nul = "a\0b", del = "\127", sep = "\226\128\168",
      bom = "\239\187\191", accent = "caf\195\169", soft = "\194\173", ["key \"quoted\""] = 1, ["new\nline"] = 2,
      floats = { 0.1, 1e300, -0.0, 2.0, 1 / 0, -1 / 0, 0 / 0, 2 ^ 63, -5, math.maxinteger, math.mininteger },
      empty = {}, sparse = { [1] = 1, [3] = 3 }, holes = { [1] = 1, [20] = 2 }, n_key = { n = 3 },
      mixed = { 1, 2, x = 3 }, zero = { [0] = "z" }, float_key = { [1.5] = "f" }, bools = { true, false },
      null = dkjson.null, nested = { { a = { b = { dkjson.null, {} } } } },
      ordered = setmetatable({ b = 1, a = 2 }, { __jsonorder = { "a", "b" } }),
      as_object = setmetatable({}, { __jsontype = "object" }),
    }
    same(tricky, { "zero", "quote", "nested", "b", "missing" })
    same(tricky, nil)
    same({ 1, "two", { three = 3 } }, nil)
    same("plain", nil)
    same(42, nil)
  end)

  it("fails on a cycle as dkjson does", function()
    local t = { a = 1 }
    t.self = t
    assert.is_false(pcall(dkjson.encode, t))
    local ok, err = pcall(json_out.encode, t)
    assert.is_false(ok)
    assert.truthy(tostring(err):find("reference cycle", 1, true), err)
    -- and encodes the next value cleanly
    same({ a = 1 }, nil)
  end)
end)
