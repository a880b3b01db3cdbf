-- vramplan.import.yaml — YAML configs (accelerate, axolotl, LLaMA-Factory)
-- read with libyaml (Debian's lua-yaml: the C module `yaml` and `lyaml`),
-- a malformed file blamed at libyaml's line and column; the tool is told
-- by the keys it requires.
local common = require("vramplan.import.common")

local yaml = {}

-- libyaml's own report of the first problem, as "LINE:COL: problem (context)".
local function problem(text)
  local events = require("yaml").parser(text)
  local ok, err = pcall(function()
    repeat local e = events() until e == nil or e.type == "STREAM_END"
  end)
  if ok then return nil end
  err = tostring(err)
  local what, line, col = err:match("^(.-) at document: %d+, line: (%d+), column: (%d+)")
  if not what then
    what = err:match("^(.-) at document:") or err:gsub("\n.*", "")
    line, col = "1", "1"
  end
  local context, cline, ccol = err:match("\n(.-) at line: (%d+), column: (%d+)")
  return string.format("%s:%s: %s%s", line, col, what,
    context and string.format(" (%s that starts at %s:%s)", context, cline, ccol) or "")
end

-- lyaml's null (an empty value such as `lora_model_dir:`) as nil, throughout.
-- An alias (*name) is the anchored table itself, shared: each table is
-- copied once (`copies`), or ten levels of nine aliases each (a "billion
-- laughs") would be copied 9^10 times.
local function strip_nulls(v, null, copies)
  if type(v) ~= "table" then return v end
  if v == null then return nil end
  if copies[v] then return copies[v] end
  local out = {}
  copies[v] = out
  for k, x in pairs(v) do out[k] = strip_nulls(x, null, copies) end
  return out
end

-- Parses YAML text into a table (a mapping), or raises FILE:LINE:COL: ...
function yaml.decode(text, path)
  local p = problem(text)
  if p then error(path .. ":" .. p, 0) end
  local lyaml = require("lyaml")
  local ok, value = pcall(lyaml.load, text)
  if not ok then error(string.format("%s:%s", path, tostring(value)), 0) end
  value = strip_nulls(value, lyaml.null, {})
  if type(value) ~= "table" or (value[1] ~= nil) then
    error(string.format("%s:1:1: a training config is a YAML mapping of keys", path), 0)
  end
  return value
end

-- Which tool wrote it: the keys each one requires or always writes.
local tools = {
  { module = "accelerate", name = "accelerate", keys = { "distributed_type", "compute_environment" } },
  { module = "llamafactory", name = "LLaMA-Factory", keys = { "model_name_or_path", "finetuning_type", "stage" } },
  { module = "axolotl", name = "axolotl", keys = { "base_model", "adapter", "micro_batch_size", "sequence_len" } },
}

-- LLaMA-Factory's v1 trainer (src/llamafactory/v1/config/model_args.py and
-- training_args.py: `model`, `model_class`, plugin sections such as
-- dist_config) shares axolotl's micro_batch_size but not its meaning; its
-- own loop is not read: refused by name rather than taken for axolotl.
local function refuse_llamafactory_v1(config, path)
  if config.model == nil or config.base_model ~= nil then return end
  for _, k in ipairs({ "model_class", "dist_config", "peft_config", "kernel_config", "quant_config" }) do
    if config[k] ~= nil then
      error(string.format("%s: a LLaMA-Factory v1 config (model, %s): vramplan reads LLaMA-Factory's configs " ..
        "with model_name_or_path, not v1's; give MODEL and the recipe with --set", path, k), 0)
    end
  end
end

-- Loads a YAML config: its recipe and the tool's name.
function yaml.load(path)
  local text = common.read(path)
  local config = yaml.decode(text, path)
  refuse_llamafactory_v1(config, path)
  for _, tool in ipairs(tools) do
    for _, k in ipairs(tool.keys) do
      if config[k] ~= nil then
        local r = common.recipe(path, text)
        require("vramplan.import." .. tool.module).read(r, config)
        return r, tool.name
      end
    end
  end
  error(string.format("%s: not a config vramplan reads: none of accelerate's (distributed_type), " ..
    "axolotl's (base_model) or LLaMA-Factory's (model_name_or_path) keys", path), 0)
end

return yaml
