-- vramplan.cli — the command line: parses arguments for the command named
-- first (each command is a module in vramplan/cmd/ declaring its usage and
-- flags), runs it; user errors become one message and a non-zero exit.
local vramplan = require("vramplan")

local cli = {}

-- The commands, in the order the usage lists them: each module returns
-- { usage = "...", flags = { name = kind, ... }, short = { letter = name }?,
-- run = function(opts, home) }.
local command_names = { "estimate", "fit", "advise", "plan", "sweep", "merge", "report", "list", "keys", "show", "hardware", "recommend", "export" }

local footer = [[
       vramplan --version

MODEL is a model script, a name in models/ (llama2-7b, gpt2, ...) or a Hugging
Face config.json (one saved with a bitsandbytes quantization_config makes
the recipe QLoRA over that format). --set sets a recipe key (micro_batch=4)
or a model field (hidden=1024); it may be repeated. --gpu names a GPU, a node
or a cloud instance (vramplan hardware lists them); --gpus N sets dp.]]

local function command(name)
  for _, n in ipairs(command_names) do
    if n == name then return require("vramplan.cmd." .. name) end
  end
end

-- A command's usage lines, each after "vramplan "; a line that starts with
-- spaces continues the one before it.
local function usage_lines(cmd, lines)
  for line in cmd.usage:gmatch("[^\n]+") do
    local lead = #lines == 0 and "usage: " or "       "
    lines[#lines + 1] = lead .. (line:match("^%s") and "        " or "vramplan ") .. line
  end
  return lines
end

local function usage()
  local lines = {}
  for _, name in ipairs(command_names) do usage_lines(command(name), lines) end
  return table.concat(lines, "\n") .. "\n" .. footer
end

local UsageError = {}

local function fail_usage(msg) error(setmetatable({ msg = msg }, UsageError), 0) end
cli.fail_usage = fail_usage

-- Flag kinds: "flag" (a boolean), "value" (the next argument), "list" (the
-- next argument, repeatable: a list of values), "set" (KEY=VALUE,
-- repeatable: a list of { key, value, origin }). `short` maps a one-letter
-- flag (-o) to the long name it stands for (--out).
local function parse(args, flags, short)
  local opts = { sets = {}, positional = {} }
  local i = 1
  local function value(flag)
    i = i + 1
    if args[i] == nil then fail_usage(flag .. " needs a value") end
    return args[i]
  end
  while i <= #args do
    local a = args[i]
    local name = a:match("^%-%-([%w%-]+)$") or short and short[a:match("^%-(%a)$") or ""]
    local kind = name and flags[name]
    if kind == "flag" then opts[name:gsub("%-", "_")] = true
    elseif kind == "value" then opts[name:gsub("%-", "_")] = value(a)
    elseif kind == "list" then
      local key = name:gsub("%-", "_")
      opts[key] = opts[key] or {}
      opts[key][#opts[key] + 1] = value(a)
    elseif kind == "set" then
      local kv = value(a)
      local k, v = kv:match("^([%w_]+)=(.*)$")
      if not k then fail_usage(a .. " takes KEY=VALUE (got '" .. kv .. "')") end
      opts.sets[#opts.sets + 1] = { k, v, a .. " " .. kv }
    elseif a:sub(1, 2) == "--" or a:match("^%-%a$") then fail_usage("unknown option " .. a)
    else opts.positional[#opts.positional + 1] = a end
    i = i + 1
  end
  opts.target = opts.positional[1]
  return opts
end

function cli.run(args, home)
  vramplan.home = home
  local name = args[1]
  if name == nil or name == "help" then print(usage()) return name and 0 or 2 end
  if name == "--version" or name == "version" then print("vramplan " .. vramplan.version) return 0 end
  local cmd = command(name)
  if not cmd then
    if name:sub(1, 2) == "--" then fail_usage("unknown option " .. name) end
    fail_usage("unknown command " .. name)
  end
  local rest = table.move(args, 2, #args, 1, {})
  return cmd.run(parse(rest, cmd.flags, cmd.short), home)
end

-- Returns the exit status: 0, 1 for bad input, 2 for bad usage.
function cli.main(args, home)
  for _, a in ipairs(args) do
    if a == "--help" or a == "-h" then
      local cmd = command(args[1])
      print(cmd and (table.concat(usage_lines(cmd, {}), "\n") .. (cmd.help and ("\n\n" .. cmd.help) or "")) or usage())
      return 0
    end
    if a == "--version" then print("vramplan " .. vramplan.version) return 0 end
  end
  local ok, err = pcall(cli.run, args, home)
  if ok then return err end
  if getmetatable(err) == UsageError then
    io.stderr:write("vramplan: ", err.msg, "\n", usage(), "\n")
    return 2
  end
  io.stderr:write("vramplan: ", tostring(err), "\n")
  return 1
end

return cli
