-- Libraries of block pieces (scripts/lib/vramplan/library.lua): `library
-- "name"` in an architecture, blocks or library script, found beside the
-- script, on --path, on $VRAMPLAN_PATH, then in the installation; run once
-- per process in the sandbox; read-only to its users; cycles and missing
-- files named; `vramplan show` says where each came from.
local helper = require("tests.lua.helper")
local json = require("dkjson")

local function put(root, files)
  for path, text in pairs(files) do
    local dir = (root .. "/" .. path):match("^(.*)/[^/]*$")
    assert(os.execute("mkdir -p " .. dir))
    assert(io.open(root .. "/" .. path, "w")):write(text):close()
  end
end

local function folder(files)
  local root = os.tmpname()
  os.remove(root)
  put(root, files)
  return root
end

-- `vramplan ARGS...` with $VRAMPLAN_PATH set to `path` (or unset): stdout,
-- stderr, exit code.
local function run_with(path, ...)
  local args = {}
  for i = 1, select("#", ...) do args[#args + 1] = "'" .. select(i, ...) .. "'" end
  local out, err = os.tmpname(), os.tmpname()
  local _, how, code = os.execute(string.format("%s timeout 60 %s %s >%s 2>%s",
    path and ("VRAMPLAN_PATH=" .. path) or "env -u VRAMPLAN_PATH", helper.bin, table.concat(args, " "), out, err))
  local function slurp(p)
    local s = assert(io.open(p)):read("a")
    os.remove(p)
    return s
  end
  return slurp(out), slurp(err), how == "exit" and code or 128 + code
end

-- A family whose block is an MLP of the library's width and activation
-- (line 1 names the library; `extra` goes on line 2), and its model.
local function family(extra, lib)
  return {
    ["arch/libfam.lua"] = (lib or 'local L = library "pieces"') .. "\n" .. (extra or "") .. "\n" .. [[
return architecture {
  name = "libfam",
  fields = { { "hidden", "int" }, { "lua_blocks", "string", default = "" } },
  build = function(c, lua)
    local b = lua and lua.mlp() or block { name = "mlp", width = c.hidden,
      params = { { "up", linear = { c.hidden, L.width } }, { "down", linear = { L.width, c.hidden } } },
      forward = function(x, p) return p.down(L.act(p.up(x))) end }
    return decoder { embed = { token_embedding { vocab = 10, hidden = c.hidden } }, layer = { residual { b } },
      layers = 1, final = { lm_head { vocab = 10, hidden = c.hidden }, cross_entropy {} } }
  end,
}
]],
    ["m.lua"] = "return libfam { hidden = 64 }\n",
  }
end
local function pieces(width) return "return { width = " .. width .. ", act = function(x) return F.silu(x) end }\n" end
-- the model's parameters with an MLP of that width: embedding and head
-- 10 x 64 each, up 64 x w, down w x 64 (no biases), no norm
local function params(width) return 10 * 64 * 2 + 64 * width * 2 end

local function show(root, path, ...)
  local out, err, code = run_with(path, "show", root .. "/m.lua", "--json", ...)
  assert.are.equal(0, code, err)
  return json.decode(out)
end

describe("a library of block pieces", function()
  it("gives its pieces to the script that names it: the same model as the pieces written in place", function()
    local root = folder(family())
    put(root, { ["arch/lib/pieces.lua"] = pieces(32) })
    local inline = folder(family(nil, "local L = { width = 32, act = function(x) return F.silu(x) end }"))
    local a, b = helper.estimate(root .. "/m.lua", "--timeline"), helper.estimate(inline .. "/m.lua", "--timeline")
    assert.are.equal(params(32), a.model.params)
    assert.are.same(b.timeline, a.timeline)
    assert.are.same(b.per_gpu, a.per_gpu)
    local s = show(root)
    assert.are.same({ { name = "pieces", source = root .. "/arch/lib/pieces.lua", used_by = root .. "/arch/libfam.lua" } },
      s.libraries)
    local text = run_with(nil, "show", root .. "/m.lua")
    assert.truthy(text:find("library: pieces (" .. root .. "/arch/lib/pieces.lua), used by " .. root
      .. "/arch/libfam.lua", 1, true), text)
    os.execute("rm -rf " .. root .. " " .. inline)
  end)

  it("is looked up beside the script (lib/, then the folder), then --path, $VRAMPLAN_PATH, the installation", function()
    local root, by_path, by_env = folder(family()), folder({}), folder({})
    local places = {
      { root .. "/arch/lib/pieces.lua", 8 },
      { root .. "/arch/pieces.lua", 16 },
      { by_path .. "/models/lib/pieces.lua", 24 },
      { by_env .. "/models/lib/pieces.lua", 40 },
    }
    for _, place in ipairs(places) do put("/", { [place[1]] = pieces(place[2]) }) end
    for _, place in ipairs(places) do
      local s = show(root, by_env, "--path", by_path)
      assert.are.equal(place[1], s.libraries[1].source)
      assert.are.equal(params(place[2]), s.params)
      os.remove(place[1])
    end
    -- none left but the installation's own models/lib
    put(root, family("L = { width = 32, act = function(x) return F.silu(x) end }", 'local L = library "llama_layers"'))
    local s = show(root, nil)
    assert.truthy(s.libraries[1].source:find("/models/lib/llama_layers%.lua$"), s.libraries[1].source)
    os.execute("rm -rf " .. root .. " " .. by_path .. " " .. by_env)
  end)

  it("that is missing is an error naming the requiring file and line", function()
    local root = folder(family(nil, 'local L = library "nosuch"'))
    local err = helper.fails(root .. "/m.lua")
    assert.truthy(err:find(root .. "/arch/libfam.lua:1: library 'nosuch': no such file (lib/nosuch.lua or "
      .. "nosuch.lua beside " .. root .. "/arch/libfam.lua, or models/lib/nosuch.lua on the search path)", 1, true), err)
    err = helper.fails(folder(family(nil, "local L = library(42)")) .. "/m.lua")
    assert.truthy(err:find("libfam.lua:1: library: takes a library's name (letters, digits, '_' and '-'), got number",
      1, true), err)
    err = helper.fails(folder(family(nil, 'local L = library "../../etc/passwd"')) .. "/m.lua")
    assert.truthy(err:find("library: takes a library's name", 1, true), err)
    os.execute("rm -rf " .. root)
  end)

  it("that needs itself again is an error naming the files of the cycle", function()
    local root = folder(family(nil, 'local L = library "a"'))
    put(root, { ["arch/lib/a.lua"] = 'local b = library "b"\nreturn {}\n',
                ["arch/lib/b.lua"] = '\nlocal a = library "a"\nreturn {}\n' })
    local err = helper.fails(root .. "/m.lua")
    local a, b = root .. "/arch/lib/a.lua", root .. "/arch/lib/b.lua"
    assert.truthy(err:find(b .. ":2: library 'a': a cycle of libraries: " .. a .. " -> " .. b .. " -> " .. a, 1, true),
      err)
    assert.truthy(err:find(root .. "/arch/libfam.lua:1: library 'a': " .. a .. ":1: library 'b': ", 1, true), err)
    os.execute("rm -rf " .. root)
  end)

  it("is read-only to its users: assignments fail at their line, rawset changes the user's own view", function()
    local root = folder(family("L.width = 1"))
    put(root, { ["arch/lib/pieces.lua"] = "return { width = 32, act = F.silu, sizes = { big = 4 } }\n" })
    local err = helper.fails(root .. "/m.lua")
    assert.truthy(err:find(root .. "/arch/libfam.lua:2: library 'pieces' (" .. root .. "/arch/lib/pieces.lua) is "
      .. "read-only (setting 'width')", 1, true), err)
    put(root, family("L.sizes.big = 1"))
    err = helper.fails(root .. "/m.lua")
    assert.truthy(err:find("libfam.lua:2: library 'pieces' (" .. root .. "/arch/lib/pieces.lua).sizes is read-only "
      .. "(setting 'big')", 1, true), err)
    -- the family changes its view of the library before its blocks script
    -- (a second user in the same process) reads it: the blocks see the
    -- library as it is
    put(root, family('rawset(L, "width", 999) assert(L.width == 999)'))
    assert(os.execute("mkdir -p " .. root .. "/models"))
    put(root, { ["m.lua"] = 'return libfam { hidden = 64, lua_blocks = "mine" }\n',
                ["blocks/mine.lua"] = [[
local L = library "pieces"
return { build = function(c)
  return { mlp = function() return block { name = "mlp", width = c.hidden,
    params = { { "up", linear = { c.hidden, L.width } }, { "down", linear = { L.width, c.hidden } } },
    forward = function(x, p) return p.down(L.act(p.up(x))) end } end }
end }
]] })
    -- the family's folder and the blocks' find it on --path (the family's
    -- script is loaded before the blocks script)
    os.rename(root .. "/arch/lib", root .. "/models/lib")
    local s = show(root, nil, "--path", root)
    assert.are.equal(params(32), s.params)
    assert.are.equal(1, #s.libraries) -- one library, named by both
    assert.are.equal(root .. "/arch/libfam.lua", s.libraries[1].used_by)
    assert.are.equal(root .. "/models/lib/pieces.lua", s.libraries[1].source)
    os.execute("rm -rf " .. root)
  end)

  it("runs in the sandbox, under its own budgets, with the vocabulary read-only", function()
    local root = folder(family())
    local lib = root .. "/arch/lib/pieces.lua"
    for _, case in ipairs({
      { 'local f = io.open("/etc/passwd")\nreturn {}', lib .. ":1: attempt to index a nil value (global 'io')" },
      { "local s = os.getenv('HOME')\nreturn {}", lib .. ":1: attempt to index a nil value (global 'os')" },
      { "local m = require('vramplan')\nreturn {}", lib .. ":1: attempt to call a nil value (global 'require')" },
      { "\nwhile true do end", lib .. ":2: script exceeded its instruction budget" },
      { "F.silu = function(x) return x end\nreturn {}", "F.silu: the vocabulary is read-only" },
      { "return 42", lib .. ": a library returns a table of its pieces" },
    }) do
      put("/", { [lib] = case[1] })
      local err = helper.fails(root .. "/m.lua")
      assert.truthy(err:find(root .. "/arch/libfam.lua:1: library 'pieces': ", 1, true), err)
      assert.truthy(err:find(case[2], 1, true), err)
    end
    os.execute("rm -rf " .. root)
  end)
end)

describe("library.use", function()
  local library = require("vramplan.library").new()
  local sandbox = require("vramplan.sandbox")
  -- a library's environment, counting how many times one is made (one per load)
  local made = 0
  local function make_env()
    made = made + 1
    return sandbox.env({})
  end

  it("runs each file once per process, a failing one too (pcall cannot make it run again)", function()
    local root = folder({ ["lib/once.lua"] = "return { n = 1, t = { 1, 2, 3 } }\n", ["lib/bad.lua"] = "return nil\n" })
    local user = root .. "/user.lua"
    made = 0
    local a = library.use(".", user, "user.lua:1", "once", make_env)
    local b = library.use(".", user, "user.lua:2", "once", make_env)
    assert.are.equal(1, made)
    assert.are.equal(1, a.n)
    assert.are_not.equal(a, b) -- each call its own view
    assert.are.equal(3, #a.t)
    local keys = {}
    for k in pairs(a) do keys[#keys + 1] = k end
    table.sort(keys)
    assert.are.same({ "n", "t" }, keys)
    made = 0
    for i = 1, 3 do
      local ok, err = pcall(library.use, ".", user, "user.lua:" .. i, "bad", make_env)
      assert.is_false(ok)
      assert.truthy(err:find("user.lua:" .. i .. ": library 'bad': " .. root .. "/lib/bad.lua: a library returns a "
        .. "table", 1, true), err)
    end
    assert.are.equal(1, made)
    os.execute("rm -rf " .. root)
  end)
end)
