-- vramplan.hub_ids — Hugging Face model ids of the models in models/, so a
-- config that names its model by id (axolotl's base_model, LLaMA-Factory's
-- model_name_or_path) finds the script. Each id is the checkpoint the
-- model script's header names as its config's source.
local hub_ids = {}

hub_ids.ids = {
  ["google-bert/bert-base-cased"] = "bert-base-cased",
  ["google-bert/bert-large-uncased"] = "bert-large-uncased",
  ["bigscience/bloom-560m"] = "bloom-560m",
  ["bigscience/bloomz-7b1"] = "bloomz-7b1",
  ["deepseek-ai/deepseek-moe-16b-base"] = "deepseek-moe-16b",
  ["deepseek-ai/DeepSeek-V2"] = "deepseek-v2",
  ["deepseek-ai/DeepSeek-V2-Chat"] = "deepseek-v2",
  ["deepseek-ai/DeepSeek-V2-Lite"] = "deepseek-v2-lite",
  ["deepseek-ai/DeepSeek-V2-Lite-Chat"] = "deepseek-v2-lite",
  ["deepseek-ai/DeepSeek-V2.5"] = "deepseek-v2.5",
  ["deepseek-ai/DeepSeek-V3"] = "deepseek-v3",
  ["google/gemma-2-2b"] = "gemma-2-2b",
  ["google/gemma-2-9b"] = "gemma-2-9b",
  ["google/gemma-2-27b"] = "gemma-2-27b",
  ["google/gemma-2b"] = "gemma-2b",
  ["google/gemma-7b"] = "gemma-7b",
  ["google/gemma-3-1b-pt"] = "gemma-3-1b",
  -- the multimodal checkpoints: their language model is what models/ holds
  ["google/gemma-3-4b-pt"] = "gemma-3-4b",
  ["google/gemma-3-12b-pt"] = "gemma-3-12b",
  ["google/gemma-3-27b-pt"] = "gemma-3-27b",
  ["openai-community/gpt2"] = "gpt2",
  ["openai-community/gpt2-medium"] = "gpt2-medium",
  ["openai-community/gpt2-large"] = "gpt2-large",
  ["openai-community/gpt2-xl"] = "gpt2-xl",
  ["ibm-granite/granite-3.1-8b-instruct"] = "granite-3.1-8b",
  ["huggyllama/llama-65b"] = "llama-65b",
  ["meta-llama/Llama-2-7b-hf"] = "llama2-7b",
  ["meta-llama/Llama-2-13b-hf"] = "llama2-13b",
  ["meta-llama/Llama-2-70b-hf"] = "llama2-70b",
  ["meta-llama/Meta-Llama-3-8B"] = "llama3-8b",
  ["meta-llama/Meta-Llama-3-70B"] = "llama3-70b",
  ["meta-llama/Llama-3.1-405B"] = "llama3.1-405b",
  ["meta-llama/Llama-3.2-1B"] = "llama3.2-1b",
  ["meta-llama/Llama-3.2-3B"] = "llama3.2-3b",
  ["mistralai/Mistral-7B-v0.1"] = "mistral-7b",
  ["mistralai/Mistral-7B-v0.3"] = "mistral-7b-v0.3",
  ["mistralai/Mistral-Nemo-Instruct-2407"] = "mistral-nemo-12b",
  ["mistralai/Mistral-Small-24B-Base-2501"] = "mistral-small-24b",
  ["mistralai/Mixtral-8x7B-v0.1"] = "mixtral-8x7b",
  ["bigscience/mt0-xxl"] = "mt0-xxl",
  ["allenai/OLMo-2-1124-7B"] = "olmo-2-7b",
  ["microsoft/phi-2"] = "phi-2",
  ["microsoft/Phi-3-mini-4k-instruct"] = "phi-3-mini-4k",
  ["microsoft/Phi-3-medium-4k-instruct"] = "phi-3-medium-4k",
  ["microsoft/phi-4"] = "phi-4",
  ["microsoft/Phi-4-mini-instruct"] = "phi-4-mini",
  ["EleutherAI/gpt-j-6b"] = "gpt-j-6b",
  ["openai/gpt-oss-20b"] = "gpt-oss-20b",
  ["openai/gpt-oss-120b"] = "gpt-oss-120b",
  -- axolotl's bf16 copy of it, which its 120B example trains (the
  -- architecture's config without the mxfp4 quantization_config)
  ["axolotl-ai-co/gpt-oss-120b-dequantized"] = "gpt-oss-120b",
  ["EleutherAI/pythia-1b"] = "pythia-1b",
  ["EleutherAI/pythia-6.9b"] = "pythia-6.9b",
  ["facebook/opt-1.3b"] = "opt-1.3b",
  ["facebook/opt-6.7b"] = "opt-6.7b",
  ["mosaicml/mpt-7b"] = "mpt-7b",
  ["mosaicml/mpt-30b"] = "mpt-30b",
  ["tiiuae/falcon-7b"] = "falcon-7b",
  ["tiiuae/falcon-40b"] = "falcon-40b",
  ["tiiuae/falcon-180B"] = "falcon-180b",
  ["tiiuae/falcon-11B"] = "falcon-11b",
  ["CohereForAI/c4ai-command-r-v01"] = "c4ai-command-r-v01",
  ["CohereForAI/c4ai-command-r-plus"] = "c4ai-command-r-plus",
  ["CohereForAI/aya-23-8B"] = "aya-23-8b",
  ["CohereForAI/c4ai-command-r7b-12-2024"] = "command-r7b",
  ["CohereLabs/c4ai-command-r7b-12-2024"] = "command-r7b",
  ["bigcode/starcoder2-3b"] = "starcoder2-3b",
  ["bigcode/starcoder2-7b"] = "starcoder2-7b",
  ["Qwen/Qwen1.5-MoE-A2.7B"] = "qwen1.5-moe-a2.7b",
  ["Qwen/Qwen2.5-0.5B"] = "qwen2.5-0.5b",
  ["Qwen/Qwen2.5-1.5B"] = "qwen2.5-1.5b",
  ["Qwen/Qwen2.5-3B"] = "qwen2.5-3b",
  ["Qwen/Qwen2.5-7B"] = "qwen2.5-7b",
  ["Qwen/Qwen2.5-14B"] = "qwen2.5-14b",
  ["Qwen/Qwen2.5-32B"] = "qwen2.5-32b",
  ["Qwen/Qwen2.5-72B"] = "qwen2.5-72b",
  ["Qwen/Qwen3-4B"] = "qwen3-4b",
  ["Qwen/Qwen3-8B"] = "qwen3-8b",
  ["Qwen/Qwen3-14B"] = "qwen3-14b",
  ["Qwen/Qwen3-32B"] = "qwen3-32b",
  ["Qwen/Qwen3-30B-A3B"] = "qwen3-30b-a3b",
  ["Qwen/Qwen3-235B-A22B"] = "qwen3-235b-a22b",
  ["HuggingFaceTB/SmolLM2-135M"] = "smollm2-135m",
  ["HuggingFaceTB/SmolLM2-360M"] = "smollm2-360m",
  ["HuggingFaceTB/SmolLM2-1.7B"] = "smollm2-1.7b",
  ["bigscience/T0_3B"] = "t0-3b",
  ["t5-3b"] = "t5-3b",
  ["t5-large"] = "t5-large",
  ["TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T"] = "tinyllama-1.1b",
}

-- Models of models/ that run another's checkpoint with other modeling code
-- (transformers' own class instead of the checkpoint's trust_remote_code
-- file): they share that model's id, which finds the checkpoint's own.
hub_ids.implementations = {
  ["deepseek-v2-hf"] = "deepseek-v2",
  ["deepseek-v2-lite-hf"] = "deepseek-v2-lite",
}

-- Also found: the same repository under another owner (mirrors such as
-- NousResearch/Meta-Llama-3-8B, unsloth/...), and the chat or instruct
-- variant of a base checkpoint (its config has the same architecture):
-- names compared in lower case, with these suffixes taken off (Gemma's
-- pretrained checkpoints end in -pt, their instruction-tuned ones in -it:
-- google/gemma-3-1b-pt and google/gemma-3-1b-it share one config; Qwen's
-- July 2025 refresh, Qwen/Qwen3-4B-Instruct-2507 and -Thinking-2507, keeps
-- its base's layers, widths, heads and vocabulary, only rope_theta 5e6
-- and 262,144 positions differ, which hold no memory in a rotary model:
-- its config.json on the Hub).
local suffixes = { "%-instruct%-2507$", "%-thinking%-2507$", "%-instruct$", "%-chat%-hf$", "%-chat$", "%-it$", "%-pt$",
                   "%-hf$" }

local function repo_name(id) return (id:match("([^/]+)$") or id):lower() end

-- Checkpoints of another release with a known model's shapes (names as
-- stems, below): Llama 3.1 8B and 70B keep Llama 3's layers, widths, heads
-- and vocabulary; their rope_scaling and 131,072 positions hold no memory
-- in a rotary model (meta-llama/Llama-3.1-8B and -70B config.json).
local same_shapes = { ["llama-3.1-8b"] = "meta-llama-3-8b", ["meta-llama-3.1-8b"] = "meta-llama-3-8b",
                      ["llama-3.1-70b"] = "meta-llama-3-70b", ["meta-llama-3.1-70b"] = "meta-llama-3-70b" }

local function stem(name)
  for _, s in ipairs(suffixes) do name = name:gsub(s, "") end
  return name
end

-- The models/ name for a Hugging Face id, and how it matched ("exact",
-- "mirror" or "variant"); nil when none does.
function hub_ids.lookup(id)
  if type(id) ~= "string" then return nil end
  if hub_ids.ids[id] then return hub_ids.ids[id], "exact" end
  local want = repo_name(id)
  for known, name in pairs(hub_ids.ids) do
    if repo_name(known) == want then return name, "mirror" end
  end
  local s = stem(want)
  s = same_shapes[s] or s
  local found
  for known, name in pairs(hub_ids.ids) do
    if stem(repo_name(known)) == s then
      if found and found ~= name then return nil end -- ambiguous
      found = name
    end
  end
  if found then return found, "variant" end
  return nil
end

return hub_ids
