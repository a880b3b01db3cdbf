-- The command carries the architecture scripts compiled (engine/lua/
-- embedded.c, VP_PRECOMPILED_SCRIPTS): a script is run from that bytecode
-- only when its text is exactly the one compiled in. An edited copy, here a
-- team's llama family with one line changed, must run as edited, and its
-- errors must name the copy's own file and line.
local helper = require("tests.lua.helper")

local function put(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
end

local function read(path)
  local f = assert(io.open(path))
  local text = f:read("a")
  f:close()
  return text
end

-- A folder holding models/arch/llama.lua (`text`) and a small model of it.
local function folder_with_llama(text)
  local root = os.tmpname()
  os.remove(root)
  assert(os.execute("mkdir -p " .. root .. "/models/arch"))
  put(root .. "/models/arch/llama.lua", text)
  put(root .. "/models/small.lua", "return llama { hidden = 256, layers = 2, heads = 4, intermediate = 512, vocab = 1000 }\n")
  return root
end

describe("architecture scripts compiled into the command", function()
  local original = read(helper.root .. "/models/arch/llama.lua")

  it("are compiled from their text when the text is not the one carried", function()
    local line = 0
    for l in (original .. "\n"):gmatch("([^\n]*)\n") do
      line = line + 1
      if l:find("^  check = function%(c%)$") then break end
    end
    local edited = original:gsub("\n  check = function%(c%)\n", '\n  check = function(c) error("edited check")\n', 1)
    assert.are_not.equal(original, edited)
    local root = folder_with_llama(edited)
    local _, err, code = helper.run("estimate", "--path", root, "small")
    assert.are.equal(1, code)
    assert.truthy(err:find(root .. "/models/arch/llama.lua:" .. line .. ": edited check", 1, true), err)
    os.execute("rm -rf " .. root)
  end)

  it("give the same estimate from a copy with the carried text", function()
    local root = folder_with_llama(original)
    local copy = helper.estimate("--path", root, "small")
    local installed = helper.estimate("llama2-7b", "--set", "hidden=256", "--set", "layers=2", "--set", "heads=4",
      "--set", "kv_heads=4", "--set", "intermediate=512", "--set", "vocab=1000")
    assert.are.equal(installed.per_gpu.peak_allocated_bytes, copy.per_gpu.peak_allocated_bytes)
    assert.are.equal(installed.model.params, copy.model.params)
    os.execute("rm -rf " .. root)
  end)
end)
