-- vramplan.import.common — what the config importers share: reading a file,
-- byte offsets as line and column, the line a nested key is written on,
-- and a recipe under construction (keys, where each was set, what the
-- file holds that vramplan does not model).
local common = {}

function common.read(path)
  local f = io.open(path, "r")
  if not f then error("cannot open recipe " .. path, 0) end
  local text = f:read("a")
  f:close()
  return text
end

-- The line and column (both from 1) of byte `offset` of `text`.
function common.position(text, offset)
  local line, start = 1, 1
  for nl in text:sub(1, math.max(offset - 1, 0)):gmatch("()\n") do
    line, start = line + 1, nl + 1
  end
  return line, offset - start + 1
end

local function escape(s) return (s:gsub("[%^%$%(%)%%%.%[%]%*%+%-%?]", "%%%0")) end

-- The line where the key path { "zero_optimization", "stage" } is written:
-- each name looked for (as a quoted JSON key or a YAML key) after the one
-- before it; nil when not found.
function common.line_of(text, path)
  local from = 1
  for _, name in ipairs(path) do
    local n = escape(tostring(name))
    local at = text:find('"' .. n .. '"%s*:', from) or text:find("'" .. n .. "'%s*:", from)
      or text:find("%f[%w_%-]" .. n .. "%s*:", from)
    if not at then return nil end
    from = at + 1
  end
  return (common.position(text, from - 1))
end

-- A recipe under construction from the file at `path` (its text `text`).
function common.recipe(path, text)
  local r = { path = path, text = text, keys = {}, origins = {}, unmodelled = {}, deferred = {} }

  -- "file:line" of a key path, or the file's name alone
  function r.where(keypath)
    local line = keypath and common.line_of(text, keypath)
    return line and (path .. ":" .. line) or path
  end

  -- Sets a recipe key from the key path where the file holds it; a key
  -- already set is kept unless `override`.
  function r.set(key, value, keypath, override, note)
    if r.keys[key] ~= nil and not override then return end
    r.keys[key] = value
    r.origins[key] = r.where(keypath) .. (note and (" (" .. note .. ")") or "")
  end

  -- A key the file sets that vramplan does not model, named as a dotted path.
  function r.skip(keypath)
    r.unmodelled[#r.unmodelled + 1] = table.concat(keypath, ".")
  end

  return r
end

-- Prints one warning listing the keys of a file that were not modelled,
-- then those of the DeepSpeed file it names, each under its own file's name.
function common.warn(r, tool)
  local parts = {}
  if #r.unmodelled > 0 then
    table.sort(r.unmodelled)
    parts[1] = table.concat(r.unmodelled, ", ")
  end
  for _, named in ipairs(r.named_files or {}) do
    table.sort(named.unmodelled)
    parts[#parts + 1] = "in " .. named.path .. ": " .. table.concat(named.unmodelled, ", ")
  end
  if #parts == 0 then return end
  io.stderr:write(string.format("vramplan: warning: %s: %s keys vramplan does not model (the estimate ignores them): %s\n",
    r.path, tool, table.concat(parts, "; ")))
end

-- True when `value` is the string "auto" (resolved from the rest of the run).
function common.is_auto(value) return type(value) == "string" and value:lower() == "auto" end

-- A JSON or YAML number as a Lua number (5e8 is an integer count of elements).
function common.count(value)
  local n = tonumber(value)
  if n and n == math.floor(n) and math.abs(n) < 2 ^ 53 then return math.tointeger(n) end
  return n
end

-- The folder of a path ("." for a bare name).
local function folder(path) return path:match("^(.*)/[^/]*$") or "." end

local function exists(path)
  local f = io.open(path, "r")
  if f then f:close() end
  return f ~= nil
end

-- The file a config names (`deepspeed: FILE`): relative to the config's
-- folder, then to each folder above it (LLaMA-Factory's examples name
-- files from the repository's root), then as given (the working folder).
function common.find_beside(config_path, name)
  if name:sub(1, 1) == "/" then return exists(name) and name or nil end
  local dir = folder(config_path)
  while true do
    local candidate = dir .. "/" .. name
    if exists(candidate) then return candidate end
    local up = folder(dir)
    if up == dir or dir == "." or dir == "" then break end
    dir = up
  end
  -- a relative path ends at the working folder: on through the folders
  -- above it (a config given from inside its repository)
  if dir == "." then
    local prefix = ""
    for _ in (os.getenv("PWD") or ""):gmatch("[^/]+") do
      prefix = prefix .. "../"
      if exists(prefix .. name) then return prefix .. name end
    end
  end
  return exists(name) and name or nil
end

-- Two values of a recipe key agree: the same once each tool's spelling is
-- ours (adamw_torch and adamw).
local function same(key, a, b)
  local aliases = require("vramplan.aliases")
  return tostring(aliases.value(key, a)) == tostring(aliases.value(key, b))
end

-- Reads the DeepSpeed config a YAML config names (at `keypath` of r's
-- file) into `r`: its keys fill those the YAML left unset; an explicit
-- value that disagrees with the YAML's is refused.
function common.merge_deepspeed(r, name, keypath)
  local where = r.where(keypath)
  local path = common.find_beside(r.path, name)
  if not path then
    error(string.format("%s: cannot find the DeepSpeed config %s (looked beside the file and in the folders above it)",
      where, name), 0)
  end
  local ds = require("vramplan.import.deepspeed").load(path)
  -- transformers' deepspeed_optim_sched (integrations/deepspeed.py): a
  -- DeepSpeed config with an optimizer section runs that optimizer
  -- (DummyOptim) and the Trainer creates none of its own
  if ds.keys.optimizer ~= nil and r.keys.optimizer ~= nil then
    if not same("optimizer", r.keys.optimizer, ds.keys.optimizer) and not r.origins.optimizer:find("default", 1, true) then
      r.skip({ "optimizer=" .. tostring(r.keys.optimizer) .. " (the DeepSpeed config's optimizer section runs instead)" })
    end
    r.keys.optimizer, r.origins.optimizer = nil, nil
  end
  -- transformers' trainer_config_process: fp16.enabled / bf16.enabled set
  -- in the file must match the Trainer's fp16 / bf16 (fill_match), or it
  -- refuses the pair
  local flags = { ["mixed-fp16"] = "bf16", ["mixed-bf16"] = "fp16" }
  local other = flags[ds.keys.precision]
  if other and r.keys[other] == true then
    error(string.format("%s: precision = %s disagrees with %s: true (%s): transformers refuses a DeepSpeed config "
      .. "whose 16-bit type is not the Trainer's", ds.origins.precision, ds.keys.precision, other, r.origins[other]), 0)
  end
  for key, value in pairs(ds.keys) do
    local origin = ds.origins[key]
    if r.keys[key] == nil then
      r.keys[key], r.origins[key] = value, origin
    elseif not same(key, r.keys[key], value) and not origin:find("default", 1, true)
      and not origin:find("a DeepSpeed config", 1, true) then
      error(string.format("%s: %s = %s disagrees with %s = %s (%s)", origin, key, tostring(value), key,
        tostring(r.keys[key]), r.origins[key]), 0)
    end
  end
  for _, d in ipairs(ds.deferred) do r.deferred[#r.deferred + 1] = d end
  if #ds.unmodelled > 0 then
    r.named_files = r.named_files or {}
    r.named_files[#r.named_files + 1] = { path = path, unmodelled = ds.unmodelled }
  end
  if ds.auto_precision then r.auto_precision = true end
end

-- FSDP's prefetch and rate-limit keys of an accelerate-style fsdp_config
-- (`name` without its fsdp_ prefix): true when `name` is one, after
-- listing it unless it is what vramplan models. vramplan's FSDP gathers
-- the next unit ahead in backward only, FSDP1's BACKWARD_PRE
-- (engine/step/layout.c, prepare_gather), which FSDP2 does by itself
-- (accelerate ignores backward_prefetch under fsdp_version 2:
-- FullyShardedDataParallelPlugin.__post_init__, utils/dataclasses.py);
-- forward prefetch is not modelled; limit_all_gathers true is FSDP1's
-- and accelerate's default (two all-gathers in flight at most).
function common.fsdp_prefetch_key(r, keypath, name, value, fsdp_version)
  local s = common.show(value):upper()
  if name == "backward_prefetch" then
    if s ~= "BACKWARD_PRE" and tostring(fsdp_version) ~= "2" then r.skip(keypath) end
  elseif name == "forward_prefetch" then
    if s ~= "FALSE" then r.skip(keypath) end
  elseif name == "limit_all_gathers" then
    if s ~= "TRUE" then r.skip(keypath) end
  else
    return false
  end
  return true
end

-- A config value in a message: tables as what they are, not addresses.
function common.show(value)
  if type(value) ~= "table" then return tostring(value) end
  return value[1] ~= nil and "a list" or "a mapping"
end

-- The models/ name that runs checkpoint `name` as the loader does: a
-- checkpoint whose config.json has an auto_map (its own modeling file) and
-- that transformers also implements runs transformers' class unless the
-- config sets trust_remote_code (transformers' resolve_trust_remote_code:
-- remote code only when trusted; both tools pass false by default:
-- LLaMA-Factory's BaseModelArguments.trust_remote_code = False,
-- hparams/model_args.py at 00577a85; axolotl's loader passes
-- `cfg.trust_remote_code or False`, loaders/model.py at 002a637c).
local function loaded_as(name, trust_remote_code)
  if trust_remote_code == true or (type(trust_remote_code) == "string" and trust_remote_code:lower() == "true") then
    return name
  end
  for implementation, checkpoint in pairs(require("vramplan.hub_ids").implementations) do
    if checkpoint == name then return implementation end
  end
  return name
end

-- Sets the model from a Hugging Face id when it names a model in models/;
-- `trust_remote_code` is the config's own setting (nil: the tool's default).
function common.set_model(r, id, keypath, trust_remote_code)
  if id == nil then return end
  if type(id) ~= "string" then
    r.model_note = string.format("%s: %s: a Hugging Face id is a string (got %s)", r.where(keypath), keypath[1],
      common.show(id))
    return
  end
  local name, how = require("vramplan.hub_ids").lookup(id)
  if name then
    r.model, r.model_how = loaded_as(name, trust_remote_code), how
  else
    r.model_note = string.format("%s: %s is not a model vramplan knows by its Hugging Face id: give MODEL " ..
      "(a name in models/ or the checkpoint's config.json, --model FILE)", r.where(keypath), id)
  end
end

-- A YAML list or comma-separated string as "a,b,c".
function common.list(value)
  if type(value) == "table" then
    local parts = {}
    for _, v in ipairs(value) do parts[#parts + 1] = tostring(v) end
    return table.concat(parts, ",")
  end
  return value
end

return common
