-- Architecture, model, recipe and GPU files that live in a team's own
-- folder: --path DIR, $VRAMPLAN_PATH, and families beside the model script
-- that names them.
local helper = require("tests.lua.helper")
local json = require("dkjson")

local function mkdirs(root, ...)
  for _, d in ipairs({ ... }) do assert(os.execute("mkdir -p " .. root .. "/" .. d)) end
end

local function put(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
end

-- A team's folder laid out as the installation: a family of its own (the
-- llama family's script under another name), a model, a recipe, a GPU.
local function team_folder()
  local root = os.tmpname()
  os.remove(root)
  mkdirs(root, "models/arch", "scripts/recipes", "hardware/gpus")
  local f = assert(io.open(helper.root .. "/models/arch/llama.lua"))
  local family = f:read("a"):gsub('name = "llama"', 'name = "teamfam"')
  f:close()
  put(root .. "/models/arch/teamfam.lua", family)
  put(root .. "/models/team-1b.lua", [[
return teamfam { name = "team-1b", hidden = 2048, layers = 4, heads = 16, kv_heads = 8, intermediate = 8192,
                 vocab = 32000, max_positions = 4096 }
]])
  put(root .. "/scripts/recipes/team-recipe.lua", 'return recipe { micro_batch = 3, seq_len = 1024 }\n')
  put(root .. "/hardware/gpus/team-gpu.lua", 'return gpu { name = "Team GPU", memory_mib = 30000 }\n')
  return root
end

describe("the search path", function()
  local root = team_folder()
  local args = { "team-1b", "--recipe", "team-recipe", "--gpu", "team-gpu" }

  it("finds a team's models, families, recipes and GPUs with --path", function()
    local out, err, code = helper.run("estimate", "--json", "--path", root, table.unpack(args))
    assert.are.equal(0, code, err)
    local o = json.decode(out)
    assert.are.equal("team-1b", o.model.name)
    assert.are.equal("teamfam", o.model.arch)
    assert.are.equal(3, o.recipe.micro_batch)
    assert.are.equal("Team GPU", o.gpu.name)
    -- the same model written with the installation's llama family
    local same = helper.estimate("llama2-7b", "--set", "hidden=2048", "--set", "layers=4", "--set", "heads=16",
      "--set", "kv_heads=8", "--set", "intermediate=8192", "--set", "vocab=32000", "--set", "micro_batch=3",
      "--set", "seq_len=1024")
    assert.are.equal(same.per_gpu.peak_allocated_bytes, o.per_gpu.peak_allocated_bytes)
  end)

  it("finds them through $VRAMPLAN_PATH too", function()
    local out = os.tmpname()
    local ok = os.execute(string.format("VRAMPLAN_PATH=%s %s estimate team-1b --recipe team-recipe --gpu team-gpu >%s",
      root, helper.bin, out))
    assert.is_true(ok == true or ok == 0)
    os.remove(out)
  end)

  it("finds a family beside the model script that names it", function()
    local dir = os.tmpname()
    os.remove(dir)
    mkdirs(dir, "arch")
    os.execute(string.format("cp %s/models/arch/teamfam.lua %s/arch/", root, dir))
    os.execute(string.format("cp %s/models/team-1b.lua %s/", root, dir))
    local out, err, code = helper.run("show", "--json", dir .. "/team-1b.lua")
    assert.are.equal(0, code, err)
    assert.are.equal(dir .. "/arch/teamfam.lua", json.decode(out).family_source)
    os.execute("rm -rf " .. dir)
  end)

  it("says where it looked when a name is in none of the folders", function()
    local _, err, code = helper.run("estimate", "--path", root, "no-such-model")
    assert.are.equal(1, code)
    assert.truthy(err:find(root .. "/models", 1, true), err)
  end)

  it("keeps a team's scripts sandboxed", function()
    put(root .. "/models/escape.lua", 'os.execute("touch /tmp/vramplan-escaped")\nreturn teamfam {}\n')
    local _, err, code = helper.run("estimate", "--path", root, "escape")
    assert.are.equal(1, code)
    assert.truthy(err:find("escape.lua", 1, true), err)
    assert.is_nil(io.open("/tmp/vramplan-escaped"))
  end)

  it("needs a folder after --path", function()
    local _, err, code = helper.run("estimate", "gpt2", "--path")
    assert.are.equal(2, code)
    assert.truthy(err:find("--path needs a folder", 1, true), err)
  end)
end)
