-- The recipe keys are declared once (engine/policy/recipe_keys.c): the key
-- listing, the JSON echo and the docs' reference all come from it.
local helper = require("tests.lua.helper")
local vramplan = require("vramplan")

local function read(path)
  local f = assert(io.open(path, "r"))
  local s = f:read("a")
  f:close()
  return s
end

describe("recipe keys", function()
  local declared, position = vramplan.recipe_keys(), {}
  for i, k in ipairs(declared) do position[k.name] = i end

  it("docs/recipe-keys.md is what `vramplan keys --markdown` prints (run `make docs` after changing a key)", function()
    local out, err, code = helper.run("keys", "--markdown")
    assert.are.equal(0, code, err)
    assert.are.equal(out, read(helper.root .. "/docs/recipe-keys.md"))
    for _, k in ipairs(declared) do assert.truthy(out:find("| `" .. k.name .. "` |", 1, true), k.name) end
  end)

  it("`vramplan keys` lists every declared key with its choices", function()
    local out = helper.run("keys")
    for _, k in ipairs(declared) do
      assert.truthy(out:find("\n  " .. k.name .. " ", 1, true), k.name)
      if k.choices then assert.truthy(out:find(table.concat(k.choices, " | "), 1, true), k.name) end
    end
  end)

  it("echoes only declared keys, in the declared order, the same text on every run", function()
    local args = { "llama3.2-1b", "--set", "layers=2", "--set", "finetune=qlora", "--set", "precision=amp-bf16",
                   "--set", "quant=int8", "--set", "seq_len=256" }
    local a = helper.run("estimate", "--json", table.unpack(args))
    local b = helper.run("estimate", "--json", table.unpack(args))
    assert.are.equal(a, b)
    local recipe = a:match('"recipe":(%b{})')
    local last = 0
    for name in recipe:gmatch('"([%w_]+)":') do
      assert.is_not_nil(position[name], "echoed but not declared: " .. name)
      assert.is_true(position[name] > last, name .. " out of the declared order")
      last = position[name]
    end
    -- the keys of the method it runs, and element counts as whole numbers
    assert.truthy(recipe:find('"llm_int8_threshold":', 1, true))
    assert.truthy(recipe:find('"reduce_bucket_size":500000000,', 1, true))
  end)

  it("gives each key its documented default", function()
    local defaults = {}
    for _, k in ipairs(declared) do defaults[k.name] = k.default end
    local r = vramplan.check_recipe({})
    for name, v in pairs(r) do
      assert.are.equal(defaults[name], v, name)
    end
  end)
end)
