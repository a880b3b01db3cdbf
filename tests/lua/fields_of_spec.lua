-- fields_of "name" in a model script: another model script's own fields
-- (not those its family's preset filled in), so a variant writes only what
-- differs (models/deepseek-v2.5.lua, deepseek-v2-hf.lua).
local helper = require("tests.lua.helper")

local function folder(files)
  local root = os.tmpname()
  os.remove(root)
  assert(os.execute("mkdir -p " .. root .. "/models"))
  for name, text in pairs(files) do
    local f = assert(io.open(root .. "/models/" .. name .. ".lua", "w"))
    f:write(text)
    f:close()
  end
  return root
end

describe("fields_of in a model script", function()
  it("gives another model's fields, which the variant may change", function()
    local root = folder({
      base = 'return llama { name = "base", hidden = 256, layers = 2, heads = 4, intermediate = 512, vocab = 1000 }\n',
      deeper = 'local f = fields_of "base"\nf.name = "deeper"\nf.layers = 4\nreturn llama(f)\n',
      direct = 'return llama { name = "direct", hidden = 256, layers = 4, heads = 4, intermediate = 512, vocab = 1000 }\n',
    })
    local deeper = helper.estimate("--path", root, "deeper")
    local direct = helper.estimate("--path", root, "direct")
    assert.are.equal("deeper", deeper.model.name)
    assert.are.equal(direct.model.params, deeper.model.params)
    assert.are.equal(direct.per_gpu.peak_allocated_bytes, deeper.per_gpu.peak_allocated_bytes)
    os.execute("rm -rf " .. root)
  end)

  it("leaves out what the other model's preset filled in", function()
    -- deepseek-v2 is DeepSeek's own file (its preset: moe_block deepseek_v2,
    -- fp32 only); deepseek-v2-hf takes its fields under transformers' preset
    -- and must train in bf16, which the own file refuses
    local _, err, code = helper.run("estimate", "deepseek-v2", "--set", "precision=bf16", "--set", "seq_len=128")
    assert.are.equal(1, code, err)
    local out, err2, code2 = helper.run("estimate", "deepseek-v2-hf", "--set", "precision=bf16", "--set", "seq_len=128")
    assert.are.equal(0, code2, err2)
    assert.truthy(out:find("DeepSeek-V2 (transformers)", 1, true))
  end)

  it("names a missing model and a cycle", function()
    local root = folder({
      lost = 'return llama(fields_of "nowhere")\n',
      a = 'return llama(fields_of "b")\n',
      b = 'return llama(fields_of "a")\n',
    })
    local _, err, code = helper.run("estimate", "--path", root, "lost")
    assert.are.equal(1, code)
    assert.truthy(err:find("lost.lua:1: fields_of: no model script 'nowhere'", 1, true), err)
    _, err, code = helper.run("estimate", "--path", root, "a")
    assert.are.equal(1, code)
    assert.truthy(err:find("fields_of: 'a' takes its fields from itself", 1, true), err)
    os.execute("rm -rf " .. root)
  end)
end)
