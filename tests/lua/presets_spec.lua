-- Each model type's preset is written once (vramplan.presets): the
-- config.json importer and the model scripts that call it resolve to the
-- same fields.
local helper = require("tests.lua.helper")
local json = require("dkjson")

local function fields(model)
  local out, err, code = helper.run("show", "--json", model)
  assert(code == 0, err)
  return json.decode(out).fields
end

describe("model type presets", function()
  local pairs_ = {
    { "tests/fixtures/gemma-7b-config.json", "gemma-7b" },
    { "tests/fixtures/gemma-2-9b-config.json", "gemma-2-9b" },
    { "tests/fixtures/gemma-3-1b-config.json", "gemma-3-1b" },
    { "tests/fixtures/qwen2.5-7b-config.json", "qwen2.5-7b" },
    { "tests/fixtures/qwen3-8b-config.json", "qwen3-8b" },
    { "tests/fixtures/olmo-2-7b-config.json", "olmo-2-7b" },
    { "tests/fixtures/granite-3.1-8b-config.json", "granite-3.1-8b" },
    { "tests/fixtures/phi-3-mini-4k-config.json", "phi-3-mini-4k" },
    { "tests/fixtures/mixtral-8x7b-config.json", "mixtral-8x7b" },
    { "tests/fixtures/qwen3-30b-a3b-config.json", "qwen3-30b-a3b" },
    { "tests/fixtures/deepseek-v3-config.json", "deepseek-v3" },
  }
  for _, p in ipairs(pairs_) do
    it(p[2] .. ": the model script and its config.json resolve to the same fields", function()
      local a, b = fields(p[1]), fields(p[2])
      a.name, b.name = nil, nil
      for k, v in pairs(a) do assert.are.equal(v, b[k], p[2] .. ": " .. k) end
      for k, v in pairs(b) do assert.are.equal(v, a[k], p[2] .. ": " .. k) end
    end)
  end

  it("lets a model script's own value win over its preset's", function()
    -- gemma-3-1b slides over 512 keys where the preset says 4096
    assert.are.equal(512, fields("gemma-3-1b").sliding_window)
  end)
end)
