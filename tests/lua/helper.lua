-- Test helpers: run the vramplan binary and capture what it prints, and load
-- the Lua module straight from the build.
local helper = {}

helper.root = os.getenv("VRAMPLAN_ROOT") or "."
helper.bin = helper.root .. "/build/vramplan"
package.cpath = helper.root .. "/build/?.so;" .. package.cpath
package.path = helper.root .. "/scripts/lib/?.lua;" .. package.path

local function slurp(path)
  local f = io.open(path, "r")
  local s = f and f:read("a") or ""
  if f then f:close() end
  os.remove(path)
  return s
end

local function quote(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

-- run("estimate", "gpt2", "--json") -> stdout, stderr, exit code
function helper.run(...)
  local args = {}
  for i = 1, select("#", ...) do args[#args + 1] = quote(select(i, ...)) end
  local out, err = os.tmpname(), os.tmpname()
  local ok, how, code = os.execute(string.format("timeout 60 %s %s >%s 2>%s", helper.bin, table.concat(args, " "),
    out, err))
  return slurp(out), slurp(err), how == "exit" and code or 128 + (code or 0)
end

-- The arguments of `estimate MODEL ARGS... --set K=V ...`: `model`, then
-- the list `base` as it is, then a `--set` before each "K=V" of `sets`.
function helper.with_sets(model, base, sets)
  local out = { model }
  for _, a in ipairs(base) do out[#out + 1] = a end
  for _, kv in ipairs(sets) do
    out[#out + 1] = "--set"
    out[#out + 1] = kv
  end
  return table.unpack(out)
end

-- A recipe table's keys as "key=value" items, in the keys' order (for
-- with_sets): the rows of tests/reference/*.json.
function helper.sets_of(recipe)
  local names, sets = {}, {}
  for k in pairs(recipe) do names[#names + 1] = k end
  table.sort(names)
  for i, k in ipairs(names) do sets[i] = k .. "=" .. tostring(recipe[k]) end
  return sets
end

-- The JSON object of an estimate, failing the test if it does not succeed.
function helper.estimate(...)
  local out, err, code = helper.run("estimate", "--json", ...)
  assert(code == 0, "vramplan failed: " .. err)
  return require("dkjson").decode(out)
end

-- helper.estimate of `model`, the arguments in the list `shape`, then the rest.
function helper.estimate_on(model, shape, ...)
  local args = { model }
  for _, a in ipairs(shape) do args[#args + 1] = a end
  for _, a in ipairs({ ... }) do args[#args + 1] = a end
  return helper.estimate(table.unpack(args))
end

-- A test's name and body per case { {KEY=VALUE, ...}, message }: that
-- `estimate MODEL` with --set each of base, then of the case's, fails with
-- the message (plain text). for name, test in helper.refusals(...) do it(name, test) end
function helper.refusals(model, base, cases)
  local i = 0
  return function()
    i = i + 1
    local case = cases[i]
    if not case then return nil end
    return "refuses " .. table.concat(case[1], " "), function()
      local args = { model }
      for _, list in ipairs({ base, case[1] }) do
        for _, a in ipairs(list) do args[#args + 1] = "--set"; args[#args + 1] = a end
      end
      local err = helper.fails(table.unpack(args))
      assert(err:find(case[2], 1, true), err)
    end
  end
end

-- Runs `vramplan estimate <args>` expecting a clean failure: exit code 1, a
-- message that starts "vramplan: " and no traceback. Returns stderr.
function helper.fails(...)
  local out, err, code = helper.run("estimate", ...)
  assert(code == 1, "expected a clean failure, got exit " .. code .. ": " .. err .. out)
  assert(err:find("^vramplan: "), err)
  assert(not err:find("stack traceback"), "a user error must not print a traceback: " .. err)
  return err
end

-- The temporary files of helper.write, removed when the test run's Lua state
-- closes (busted exits with os.exit(code, true), which runs finalizers).
local written = setmetatable({}, { __gc = function(paths)
  for _, path in ipairs(paths) do os.remove(path) end
end })

-- Writes `text` to a temporary file with the given suffix; returns its path.
-- os.tmpname's own empty file keeps the name unique until the run ends.
function helper.write(text, suffix)
  local reserved = os.tmpname()
  local path = reserved .. (suffix or ".lua")
  written[#written + 1] = reserved
  written[#written + 1] = path
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
  return path
end

-- The body of a test that `vramplan estimate ARGS...` exits 1 with
-- `message` (plain text) in its error.
function helper.rejection(args, message)
  return function()
    local _, err, code = helper.run("estimate", table.unpack(args))
    assert(code == 1, "exit code " .. tostring(code))
    assert(err:find(message, 1, true), err)
  end
end

-- Evaluates every recipe of the list (seq_len 128) folded and unfolded.
function helper.assert_folds_agree(model, recipes)
  for _, recipe in ipairs(recipes) do
    recipe.seq_len = recipe.seq_len or 128
    helper.assert_fold_agrees(model, recipe)
  end
end

-- The decoded contents of a JSON file (the reference tables).
function helper.read_json(path)
  local f = assert(io.open(path, "r"))
  local v = require("dkjson").decode(f:read("a"))
  f:close()
  return v
end

-- Fails unless a Hugging Face config.json and a model script describe the
-- same model: the same parameters and the same peak.
function helper.assert_same_model(config_path, model)
  local a = helper.estimate(config_path, "--set", "seq_len=256")
  local b = helper.estimate(model, "--set", "seq_len=256")
  local function same(what, x, y)
    assert(x == y, string.format("%s: %s %s vs %s", config_path, what, tostring(x), tostring(y)))
  end
  same("params", a.model.params, b.model.params)
  same("peak_allocated_bytes", a.per_gpu.peak_allocated_bytes, b.per_gpu.peak_allocated_bytes)
end

-- Fails unless `estimate` refuses a config.json with exit 1 and an error
-- that names the file and the config key it cannot describe.
function helper.assert_config_rejected(json, key)
  local path = helper.write(json, ".json")
  local _, err, code = helper.run("estimate", path)
  os.remove(path)
  assert(code == 1, string.format("%s: exit %s, want 1", json, tostring(code)))
  assert(err:find(path .. ": " .. key .. ": ", 1, true), err)
end

-- A model of models/ with a few layers, for evaluations that run every one
-- (and the family's fields of the table `fields` changed, if given).
function helper.model(name, layers, fields)
  local arch = require("vramplan.arch")
  local values, origins = { layers = layers }, { layers = "test" }
  for k, v in pairs(fields or {}) do values[k], origins[k] = v, "test" end
  return (arch.build(require("vramplan.models").describe(helper.root, name), values, origins))
end

-- The most bytes alive in `phase` of a layer-by-layer timeline of `recipe`.
function helper.phase_high_water(model, recipe, phase)
  local r = require("vramplan").estimate(model, recipe, nil, { timeline = true, fold = false })
  local high = 0
  for _, e in ipairs(r.timeline) do
    if e.phase == phase and e.live > high then high = e.live end
  end
  return high
end

-- The sizes of the forward's allocations named `op` in a layer-by-layer
-- timeline of `recipe`, smallest first.
function helper.forward_sizes(model, recipe, op)
  local r = require("vramplan").estimate(model, recipe, nil, { timeline = true, fold = false })
  local sizes = {}
  for _, e in ipairs(r.timeline) do
    if e.op == op and e.phase == "forward" and e.delta > 0 then sizes[#sizes + 1] = e.delta end
  end
  table.sort(sizes)
  return sizes
end

-- Evaluates a recipe with identical layers folded and layer by layer and
-- fails unless the two agree (folding must change nothing but speed).
function helper.assert_fold_agrees(model, recipe)
  local vramplan = require("vramplan")
  local a = vramplan.estimate(model, recipe, nil, { fold = true })
  local b = vramplan.estimate(model, recipe, nil, { fold = false })
  for _, k in ipairs({ "peak_allocated_bytes", "activations_bytes", "master_bytes", "optimizer_bytes", "host_bytes" }) do
    assert(a[k] == b[k], string.format("%s: folded %s, unfolded %s", k, tostring(a[k]), tostring(b[k])))
  end
end

return helper
