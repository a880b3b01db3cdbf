-- vramplan show: a model as the engine resolved it, section by section and
-- op by op, with the parameters of each module, and where it came from.
local arch = require("vramplan.arch")
local models = require("vramplan.models")

local cmd = {
  usage = "show MODEL [--set FIELD=VALUE]... [--json]",
  help = "The resolved fields, then each section (embeddings, the layer repeated, the final ops) op by op with its\n" ..
    "parameters by module; the model script and the family script it came from.",
  flags = { set = "set", json = "flag" },
  examples = {
    "vramplan show llama3-8b",
    "vramplan show tests/fixtures/llama3.2-1b-config.json --json",
  },
}

-- 1234567 -> "1,234,567"
local function grouped(n)
  local s = tostring(math.tointeger(n) or n)
  local out = s:reverse():gsub("(%d%d%d)", "%1,"):reverse()
  return (out:gsub("^,", ""))
end

local function print_ops(ops, depth)
  for _, op in ipairs(ops) do
    local parts = {}
    for _, leaf in ipairs(op.leaves) do
      if leaf.numel > 0 then
        local n = leaf.numel * leaf.count
        parts[#parts + 1] = string.format("%s %s%s", leaf.label, grouped(n), leaf.buffer and " (buffer)" or "")
      end
    end
    local name = string.rep("  ", depth) .. op.kind .. (op.name and " " .. op.name or "")
    print(string.format("%-30s %15s  %s", name, op.params > 0 and grouped(op.params) or "", table.concat(parts, ", ")))
    if op.children then print_ops(op.children, depth + 1) end
  end
end

function cmd.run(opts, home)
  local cli = require("vramplan.cli")
  if not opts.target then cli.fail_usage("show needs a MODEL") end
  local description = models.describe(home, opts.target)
  local overrides, origins = {}, {}
  for _, s in ipairs(opts.sets) do
    if not description.family.schema.fields[s[1]] then
      error(string.format("%s: '%s' is not a field of %s (show takes model fields; recipe keys go to estimate)",
        s[3], s[1], description.family.name), 0)
    end
    overrides[s[1]], origins[s[1]] = s[2], s[3]
  end
  local model, config = arch.build(description, overrides, origins)
  local structure = model:structure()
  local family_file = description.family.source
  local blocks_file = type(config.lua_blocks) == "string" and config.lua_blocks ~= "" and arch.find_blocks(
    description.family.home, config.lua_blocks, description.source and require("vramplan.files").dirname(description.source))
  -- the libraries of block pieces these scripts use, each from its file
  local libraries = arch.libraries_used_by({ family_file, blocks_file or nil })
  if opts.json then
    local fields = {}
    for _, f in ipairs(description.family.schema.order) do fields[f] = config[f] end
    print(require("dkjson").encode({ name = config.name, family = description.family.name,
      source = description.source, family_source = family_file, params = model:params(), fields = fields,
      libraries = #libraries > 0 and libraries or nil, sections = structure.sections }, { indent = true }))
    return 0
  end
  print(string.format("%s: %s parameters", config.name, grouped(model:params())))
  print(string.format("model: %s", description.source))
  print(string.format("family: %s (%s)", description.family.name, family_file))
  if blocks_file then print(string.format("blocks: %s (%s)", config.lua_blocks, blocks_file)) end
  for _, lib in ipairs(libraries) do
    print(string.format("library: %s (%s), used by %s", lib.name, lib.source, lib.used_by))
  end
  -- the fields the model sets, and those that differ from the family's default
  local fields = {}
  for _, f in ipairs(description.family.schema.order) do
    local decl = description.family.schema.fields[f]
    local default = decl and decl.default
    if config[f] ~= nil and f ~= "name" and (type(default) == "function" or config[f] ~= default) then
      fields[#fields + 1] = f .. " = " .. tostring(config[f])
    end
  end
  print("fields: " .. table.concat(fields, ", "))
  for _, sec in ipairs(structure.sections) do
    print("")
    print(string.format("%s%s: %s parameters%s", sec.name, sec.repeats > 1 and (" x " .. sec.repeats) or "",
      grouped(sec.params), sec.repeats > 1 and " each" or ""))
    print_ops(sec.ops, 1)
  end
  return 0
end

return cmd
