-- vramplan keys: every recipe key, op field and model family field, with
-- its meaning.
local vramplan = require("vramplan")

local keys = {
  usage = "keys            recipe keys, op fields and model families' fields, with their meaning",
  flags = {},
}

-- A field's documentation, led by the names it accepts when it lists them.
local function with_options(options, doc)
  return options and (table.concat(options, " | ") .. ": " .. doc) or doc
end

-- Every family's fields: what a model script sets, and --set overrides.
local function family_fields(home)
  local arch = require("vramplan.arch")
  print("model families and their fields (in a model script, or --set FIELD=VALUE over one):")
  for _, name in ipairs(require("vramplan.files").script_names(home .. "/models/arch")) do
    local family = arch.load(home, name)
    print(string.format("  %s — %s", family.name, family.doc))
    for _, f in ipairs(family.fields) do
      local default = type(f.default) == "function" and "derived" or f.default == nil and "required"
        or ("default " .. tostring(f.default))
      print(string.format("      %-20s %-6s %-16s %s", f[1], f[2], default, with_options(f.options, f.doc or "")))
    end
  end
end

function keys.run(_, home)
  print("recipe keys (--set KEY=VALUE or in a recipe script):")
  for _, k in ipairs(vramplan.recipe_keys()) do
    print(string.format("  %-18s %s", k.name, with_options(k.choices, k.doc)))
  end
  print("")
  print("op kinds and their fields (for architecture scripts):")
  for _, kind in ipairs(vramplan.op_kinds()) do
    print(string.format("  %s — %s", kind.name, kind.doc))
    for _, f in ipairs(kind.fields) do
      local d = f.required and "required" or ("default " .. tostring(f.default))
      print(string.format("      %-16s %-6s %-14s %s", f.name, f.type, d, with_options(f.options, f.doc)))
    end
  end
  print("")
  family_fields(home)
  return 0
end

return keys
