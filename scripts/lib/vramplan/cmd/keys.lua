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
  -- read in Lua before the core (vramplan.stacks, vramplan.aliases; docs/configs.md)
  print("")
  print("keys read before the core (stacks and precision flags):")
  local names = {}
  for name in pairs(require("vramplan.stacks").profiles) do names[#names + 1] = name end
  table.sort(names)
  print(string.format("  %-18s %s", "stack", table.concat(names, " | ") ..
    ": the training stack, whose defaults fill unset keys and whose rules turn the flags into a precision"))
  print(string.format("  %-18s %s", "bf16, fp16", "the stack's mixed-precision flags (TrainingArguments', accelerate's)"))
  print(string.format("  %-18s %s", "pure_bf16", "LLaMA-Factory's: weights, gradients and states all in bf16"))
  print(string.format("  %-18s %s", "torch_dtype", "bfloat16 | float16 | float32: the dtype the model is loaded in"))
  print("other tools' names for recipe keys:")
  local aliases = {}
  for name, a in pairs(require("vramplan.aliases").keys) do aliases[#aliases + 1] = { name, a.key } end
  table.sort(aliases, function(x, y) return x[1] < y[1] end)
  for _, a in ipairs(aliases) do print(string.format("  %-18s %s", a[1], a[2])) end
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
