-- The command's start-up shortcuts: the plain command-line reader reads
-- every line it accepts as lua-argparse does, and the Lua library compiled
-- into the binary is used only while the files hold the text compiled.
local helper = require("tests.lua.helper")
local cli = require("vramplan.cli")

local command_names = { "estimate", "fit", "advise", "plan", "sweep", "merge", "report", "list", "keys", "show",
                        "hardware", "recommend", "compare", "export" }

-- argparse's table as cli.plain_parse gives it: flags true, values strings,
-- repeated options lists, the positional arguments a list.
local function normalized(parsed, cmd)
  local out = { positional = parsed.positional or {} }
  for flag in pairs(cmd.flags) do
    local key = flag:gsub("%-", "_")
    local v = parsed[key]
    if type(v) == "table" and #v == 0 then v = nil end
    out[key] = v or nil
  end
  return out
end

-- One random command line over `cmd`'s flags: words, known flags with or
-- without '=', short letters, unknown or repeated flags, missing values,
-- values that start with a minus.
local function random_line(cmd)
  local flags = {}
  for flag in pairs(cmd.flags) do flags[#flags + 1] = flag end
  table.sort(flags)
  local letters = {}
  for letter in pairs(cmd.short or {}) do letters[#letters + 1] = letter end
  table.sort(letters)
  local words = { "llama2-7b", "a=b", "x", "", "-", "--", "-3", "--bogus", "-q", "models/gpt2.lua", "=", "--=x" }
  local args = {}
  for _ = 1, math.random(0, 6) do
    local r = math.random(10)
    if r <= 3 then
      args[#args + 1] = words[math.random(#words)]
    elseif r <= 8 and #flags > 0 then
      local flag = flags[math.random(#flags)]
      local value = words[math.random(#words)]
      if math.random(3) == 1 then args[#args + 1] = "--" .. flag .. "=" .. value
      else
        args[#args + 1] = "--" .. flag
        if math.random(4) > 1 then args[#args + 1] = value end
      end
    elseif #letters > 0 then
      args[#args + 1] = "-" .. letters[math.random(#letters)]
      args[#args + 1] = words[math.random(#words)]
    end
  end
  return args
end

describe("the plain command-line reader", function()
  it("reads each line it accepts as argparse does, over every command's flags", function()
    math.randomseed(18)
    local accepted, declined = 0, 0
    for _, name in ipairs(command_names) do
      local cmd = require("vramplan.cmd." .. name)
      for _ = 1, 400 do
        local args = random_line(cmd)
        local plain = cli.plain_parse(cmd, args)
        if plain then
          accepted = accepted + 1
          local ok, parsed = cli.argparse_parse(name, cmd, args)
          assert.is_true(ok, name .. " " .. table.concat(args, " ") .. ": " .. tostring(parsed))
          assert.are.same(normalized(parsed, cmd), normalized(plain, cmd), name .. " " .. table.concat(args, " "))
        else
          declined = declined + 1
        end
      end
    end
    -- both kinds of line were drawn
    assert.is_true(accepted > 1000 and declined > 1000, accepted .. " accepted, " .. declined .. " declined")
  end)

  it("leaves the errors to argparse's words", function()
    local _, err, code = helper.run("estimate", "llama2-7b", "--gpu")
    assert.are.equal(2, code)
    assert.truthy(err:find("requires an argument", 1, true), err)
    _, err, code = helper.run("estimate", "llama2-7b", "--gpu", "a100-80gb", "--bogus")
    assert.are.equal(2, code)
    assert.truthy(err:find("unknown option --bogus", 1, true), err)
  end)
end)

describe("the library compiled into the command", function()
  local home

  before_each(function()
    home = os.tmpname()
    os.remove(home)
    assert(os.execute(string.format("mkdir -p %s && cp -r scripts models hardware %s/", home, home)))
  end)

  after_each(function() os.execute("rm -rf " .. home) end)

  -- runs the built command over the copied installation
  local function run_in(...)
    local saved = helper.bin
    helper.bin = "env VRAMPLAN_HOME=" .. home .. " " .. saved
    local out, err, code = helper.run(...)
    helper.bin = saved
    return out, err, code
  end

  it("runs the copied files as the build's when they are alike", function()
    local out, err, code = run_in("estimate", "llama2-7b", "--gpu", "a100-80gb")
    assert.are.equal(0, code, err)
    assert.truthy(out:find(home .. "/models/llama2-7b.lua", 1, true), out)
  end)

  it("runs the files as they are when they differ from it", function()
    local path = home .. "/scripts/lib/vramplan/cli.lua"
    local f = assert(io.open(path, "a"))
    f:write("\ncli.main = function() print('edited after the build') return 0 end\nreturn cli\n")
    f:close()
    -- the appended lines come after the file's own `return cli`: move it
    local text = assert(io.open(path)):read("a")
    text = text:gsub("\nreturn cli\n\ncli.main", "\n\ncli.main", 1)
    f = assert(io.open(path, "w"))
    f:write(text)
    f:close()
    local out, err, code = run_in("--version")
    assert.are.equal(0, code, err)
    assert.are.equal("edited after the build\n", out)
  end)
end)
