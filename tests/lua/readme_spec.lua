-- Every command the README's cookbook shows runs as written, from a folder
-- that looks like the tree (its folders linked in) so that the files the
-- commands write land there and not in the tree.
local helper = require("tests.lua.helper")

local function readme_commands()
  local f = assert(io.open(helper.root .. "/README.md", "r"))
  local commands = {}
  for line in f:lines() do
    local command = line:match("^%$ (build/vramplan .*)$")
    if command then commands[#commands + 1] = command end
  end
  f:close()
  return commands
end

-- A folder that looks like the tree (its folders linked in), for commands
-- that write files.
local function tree_like()
  local dir = os.tmpname()
  os.remove(dir)
  assert(os.execute("mkdir " .. dir))
  local root = helper.root:sub(1, 1) == "/" and helper.root or (os.getenv("PWD") .. "/" .. helper.root)
  for _, folder in ipairs({ "build", "scripts", "tests", "models", "hardware", "docs" }) do
    assert(os.execute(string.format("ln -s %s/%s %s/%s", root, folder, dir, folder)))
  end
  return dir
end

local function run_in(dir, command)
  local ok, _, code = os.execute(string.format("cd %s && timeout 120 %s >out.txt 2>err.txt", dir, command))
  local f = io.open(dir .. "/err.txt")
  local err = f and f:read("a") or ""
  if f then f:close() end
  assert(ok, string.format("`%s` exited %s: %s", command, tostring(code), err))
end

describe("every command's --help", function()
  it("shows its usage, and each example it gives runs as written", function()
    local out = helper.run("--help")
    local dir = tree_like()
    local names = {}
    for name in out:gmatch("vramplan (%l+) ") do names[name] = true end
    local examples = 0
    for name in pairs(names) do
      local help, err, code = helper.run(name, "--help")
      assert.are.equal(0, code, name .. ": " .. err)
      assert.truthy(help:find("usage: vramplan " .. name, 1, true), help)
      for example in (help:match("examples:\n(.*)$") or ""):gmatch("  vramplan ([^\n]+)") do
        run_in(dir, "build/vramplan " .. example)
        examples = examples + 1
      end
    end
    os.execute("rm -rf " .. dir)
    assert.is_true(examples >= 8, examples .. " examples")
  end)
end)

describe("the README's cookbook", function()
  local commands = readme_commands()

  it("shows commands (at least the questions it promises)", function()
    assert.is_true(#commands >= 8, #commands .. " commands")
  end)

  it("runs each command as written", function()
    local dir = tree_like()
    for _, command in ipairs(commands) do run_in(dir, command) end
    os.execute("rm -rf " .. dir)
  end)
end)

-- The figure a cookbook question quotes as its answer ("(21.)") and the
-- command under it.
local function quoted_answer(question)
  local f = assert(io.open(helper.root .. "/README.md", "r"))
  local text = f:read("a")
  f:close()
  local at = assert(text:find(question, 1, true), "README: no question " .. question)
  local figure = text:match("%((%d+)%.%)", at)
  local command = text:match("\n%$ build/vramplan ([^\n]+)", at)
  return assert(math.tointeger(tonumber(figure))), command
end

describe("the README's cookbook answers", function()
  local function fit_answer(question, field)
    local figure, command = quoted_answer(question)
    local args = {}
    for word in command:gmatch("%S+") do args[#args + 1] = word end
    args[#args + 1] = "--json"
    local out, err, code = helper.run(table.unpack(args))
    assert.are.equal(0, code, err)
    assert.are.equal(figure, require("dkjson").decode(out).fit[field].value, question)
  end

  it("quote what fit answers: the largest micro-batch, the fewest GPUs", function()
    fit_answer("What is the largest micro-batch", "micro_batch")
    fit_answer("How many H100s", "gpus")
  end)
end)
