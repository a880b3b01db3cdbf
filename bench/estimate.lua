-- Benchmark, run on demand (`make bench`): estimates per second for real
-- models, with identical layers folded (the default) and evaluated one by
-- one, and the ratio between them. Prints figures; asserts nothing.
package.cpath = "build/?.so;" .. package.cpath
package.path = "scripts/lib/?.lua;" .. package.path
local vramplan = require("vramplan")
local arch = require("vramplan.arch")
local models = require("vramplan.models")

local home = os.getenv("VRAMPLAN_HOME") or "."

local function rate(model, recipe, fold, seconds)
  local n, t0 = 0, os.clock()
  repeat
    vramplan.estimate(model, recipe, nil, { fold = fold })
    n = n + 1
  until os.clock() - t0 >= seconds
  return n / (os.clock() - t0)
end

local recipes = {
  { name = "eager, no checkpointing", keys = { attention = "eager", seq_len = 4096 } },
  { name = "flash, full checkpointing", keys = { attention = "flash", seq_len = 4096, checkpointing = "full" } },
  { name = "flash, full, non-reentrant", keys = { attention = "flash", seq_len = 4096, checkpointing = "full",
                                                  use_reentrant = false } },
  { name = "qlora all-linear, full ckpt", keys = { finetune = "qlora", lora_targets = "all-linear", seq_len = 4096,
                                                   checkpointing = "full", precision = "amp-bf16" } },
}

-- GPT-2's learned position table holds 1024 tokens
local lengths = { gpt2 = 1024 }

print(string.format("%-12s %-28s %14s %14s %8s", "model", "recipe", "folded/s", "unfolded/s", "ratio"))
for _, name in ipairs({ "gpt2", "llama2-7b", "llama2-70b", "llama3-70b" }) do
  local model = arch.build(models.describe(home, name))
  for _, r in ipairs(recipes) do
    local keys = {}
    for k, v in pairs(r.keys) do keys[k] = v end
    keys.seq_len = lengths[name] or keys.seq_len
    if keys.finetune == "qlora" and name == "gpt2" then keys.lora_targets = "c_attn" end
    local folded = rate(model, keys, true, 0.5)
    local unfolded = rate(model, keys, false, 0.5)
    print(string.format("%-12s %-28s %14.0f %14.0f %7.1fx", name, r.name, folded, unfolded, folded / unfolded))
  end
end
