-- vramplan.cli — the command line: parses arguments for the command named
-- first (each command is a module in vramplan/cmd/ declaring its usage and
-- flags; lua-argparse reads them), runs it; user errors become one message
-- and a non-zero exit.
local vramplan = require("vramplan")

local cli = {}

-- The commands, in the order the usage lists them: each module returns
-- { usage = "...", flags = { name = kind, ... }, short = { letter = name }?,
-- run = function(opts, home) }.
local command_names = { "estimate", "fit", "advise", "plan", "sweep", "merge", "report", "list", "keys", "show", "hardware", "recommend", "compare", "export" }

local footer = [[
       vramplan --version

MODEL is a model script, a name in models/ (llama2-7b, gpt2, ...) or a Hugging
Face config.json (one saved with a bitsandbytes quantization_config makes
the recipe QLoRA over that format). --set sets a recipe key (micro_batch=4)
or a model field (hidden=1024); it may be repeated. --gpu names a GPU, a node
or a cloud instance (vramplan hardware lists them); --gpus N sets dp.
--path DIR (any command, repeatable; also $VRAMPLAN_PATH, colon-separated)
looks for models, families, recipes and hardware in DIR's models/,
models/arch/, scripts/recipes/ or recipes/, and hardware/ first.]]

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

-- A flag's value as a positive number (a whole one with `integer`), or
-- `default` when the flag is absent; anything else is a usage error.
function cli.positive(opts, name, integer, default)
  local v = opts[name]
  if v == nil then return default end
  local n = tonumber(v)
  if integer then n = math.tointeger(n) end
  if not n or n <= 0 then
    fail_usage(string.format("--%s takes a positive %s (got '%s')", name:gsub("_", "-"), integer and "integer" or "number",
      v))
  end
  return n
end

-- A command's parser (lua-argparse), built from its declaration. Flag
-- kinds: "flag" (a boolean), "value" (the next argument), "list" (the next
-- argument, repeatable: a list of values), "set" (KEY=VALUE, repeatable: a
-- list of { key, value, origin }). `short` maps a one-letter flag (-o) to
-- the long name it stands for (--out). Help is printed by cli.main, not by
-- the parser (it would exit the process).
local function parser_for(name, cmd)
  local argparse = require("argparse")
  local p = argparse("vramplan " .. name):add_help(false)
  p:argument("positional"):args("*")
  local letter_of = {}
  for letter, long in pairs(cmd.short or {}) do letter_of[long] = letter end
  local names = {}
  for flag in pairs(cmd.flags) do names[#names + 1] = flag end
  table.sort(names)
  for _, flag in ipairs(names) do
    local kind = cmd.flags[flag]
    local spelled = (letter_of[flag] and ("-" .. letter_of[flag] .. " ") or "") .. "--" .. flag
    if kind == "flag" then p:flag(spelled)
    elseif kind == "value" then p:option(spelled):args(1)
    elseif kind == "list" or kind == "set" then p:option(spelled):args(1):count("*")
    else error("command " .. name .. ": flag --" .. flag .. " has no kind '" .. tostring(kind) .. "'") end
  end
  return p
end

-- The plain command lines (a known flag once, its value after it or after
-- '=', a list or set flag as often as wanted, positional arguments not
-- starting with a minus) as argparse would read them, without loading it:
-- most of a command's start-up was argparse's. nil for anything else
-- (an unknown or repeated flag, a missing value, ...): argparse reads those
-- and words the error (tests/lua/cli_parse_spec.lua holds the two alike).
function cli.plain_parse(cmd, args)
  local parsed, positional = {}, {}
  local i = 1
  while i <= #args do
    local a = args[i]
    if a:sub(1, 1) ~= "-" then
      positional[#positional + 1] = a
    else
      local name, value = a:match("^%-%-([%w][%w%-]*)=(.*)$")
      if not name then
        name = a:match("^%-%-([%w][%w%-]*)$")
        local letter = a:match("^%-(%a)$")
        if letter then name = cmd.short and cmd.short[letter] end
      end
      local kind = name and cmd.flags[name]
      if not kind then return nil end
      local key = name:gsub("%-", "_")
      if kind == "flag" then
        if value or parsed[key] then return nil end
        parsed[key] = true
      else
        if not value then
          value = args[i + 1]
          if value == nil or value:sub(1, 1) == "-" then return nil end
          i = i + 1
        end
        if kind == "value" then
          if parsed[key] ~= nil then return nil end
          parsed[key] = value
        else
          parsed[key] = parsed[key] or {}
          parsed[key][#parsed[key] + 1] = value
        end
      end
    end
    i = i + 1
  end
  parsed.positional = positional
  return parsed
end

-- argparse's reading of `args` (as pparse: ok, parsed or message).
function cli.argparse_parse(name, cmd, args)
  return parser_for(name, cmd):pparse(args)
end

local function parse(name, cmd, args)
  -- a value that starts with a minus (--tokens -3) is the flag's value, not
  -- another flag: argparse reads it so as --tokens=-3
  local joined = {}
  for i = 1, #args do
    local prev = joined[#joined]
    local flag = prev and prev:match("^%-%-([%w%-]+)$")
    if flag and cmd.flags[flag] and cmd.flags[flag] ~= "flag" and args[i]:match("^%-[%d.]") then
      joined[#joined] = prev .. "=" .. args[i]
    else
      joined[#joined + 1] = args[i]
    end
  end
  local parsed = cli.plain_parse(cmd, joined)
  local ok = parsed ~= nil
  if not ok then ok, parsed = cli.argparse_parse(name, cmd, joined) end
  -- argparse quotes the option it does not know; our messages name it bare
  if not ok then fail_usage((parsed:gsub("^unknown option '([^']*)'", "unknown option %1"))) end
  local opts = { sets = {}, positional = parsed.positional or {} }
  for flag, kind in pairs(cmd.flags) do
    local key = flag:gsub("%-", "_")
    local v = parsed[key]
    if kind == "set" then
      for _, kv in ipairs(v or {}) do
        local k, value = kv:match("^([%w_][%w_.]*)=(.*)$")
        if not k then fail_usage("--" .. flag .. " takes KEY=VALUE (got '" .. kv .. "')") end
        opts.sets[#opts.sets + 1] = { k, value, "--" .. flag .. " " .. kv }
      end
    elseif kind == "flag" then
      opts[key] = v or nil
    elseif kind == "list" then
      opts[key] = v and #v > 0 and v or nil
    else
      opts[key] = v
    end
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
  return cmd.run(parse(name, cmd, rest), home)
end

-- Takes the global `--path DIR` options out of args (any command): the
-- folders looked in before the installation's (vramplan.files.roots).
local function take_paths(args)
  local rest, paths = {}, {}
  local i = 1
  while i <= #args do
    if args[i] == "--path" then
      if args[i + 1] == nil then fail_usage("--path needs a folder") end
      paths[#paths + 1] = args[i + 1]
      i = i + 2
    else
      local dir = args[i]:match("^%-%-path=(.+)$")
      if dir then paths[#paths + 1] = dir else rest[#rest + 1] = args[i] end
      i = i + 1
    end
  end
  return rest, paths
end

-- Returns the exit status: 0, 1 for bad input, 2 for bad usage.
function cli.main(args, home)
  local ok_paths, rest, paths = pcall(take_paths, args)
  if not ok_paths then
    io.stderr:write("vramplan: ", rest.msg, "\n", usage(), "\n")
    return 2
  end
  args = rest
  vramplan.search_path = paths
  for _, a in ipairs(args) do
    if a == "--help" or a == "-h" then
      local cmd = command(args[1])
      print(cmd and (table.concat(usage_lines(cmd, {}), "\n") .. (cmd.help and ("\n\n" .. cmd.help) or "") ..
        (cmd.examples and ("\n\nexamples:\n  " .. table.concat(cmd.examples, "\n  ")) or "")) or usage())
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
