-- vramplan.hardware — the hardware catalog: GPUs (hardware/gpus/), nodes of
-- several GPUs (hardware/nodes/) and cloud instances (hardware/instances/),
-- each found by its file name (a100-80gb, dgx-h100, p4d.24xlarge); what a
-- GPU can run (bf16, FlashAttention-2, FP8) and the recipes it cannot.
local files = require("vramplan.files")
local sandbox = require("vramplan.sandbox")
local schema = require("vramplan.schema")

local hardware = {}

local gpu_schema = schema.new("gpu", {
  { "name", "string", doc = "display name" },
  { "vendor", "string", default = "", doc = "NVIDIA, AMD" },
  { "architecture", "string", default = "", doc = "Ampere, Hopper, CDNA 3, ..." },
  { "compute_capability", "string", default = "", doc = "CUDA compute capability (NVIDIA)" },
  { "memory_mib", "number", min = 1, doc = "total device memory as nvidia-smi (rocm-smi) reports it, MiB" },
  { "memory_bandwidth_gbps", "number", default = 0, min = 0, doc = "GB/s" },
  { "fp32_tflops", "number", default = 0, min = 0, doc = "dense FP32" },
  { "tf32_tflops", "number", default = 0, min = 0, doc = "dense TF32 tensor core" },
  { "fp16_tflops", "number", default = 0, min = 0, doc = "dense FP16 tensor core" },
  { "bf16_tflops", "number", default = 0, min = 0, doc = "dense BF16 tensor core" },
  { "fp8_tflops", "number", default = 0, min = 0, doc = "dense FP8 tensor core" },
  { "interconnect", "string", default = "", doc = "NVLink generation or PCIe" },
  { "interconnect_gbps", "number", default = 0, min = 0, doc = "GPU-to-GPU GB/s" },
  { "network_gbps", "number", default = 0, min = 0, doc = "inter-node network per GPU, GB/s one way (0: the generation's DGX default)" },
  { "sms", "int", default = 0, min = 0, doc = "streaming multiprocessors (AMD: compute units) a GEMM's tiles spread over; 0: the generation's data-centre part" },
  { "tdp_watts", "number", default = 0, min = 0, doc = "board power" },
  { "cuda_context_mib", "number", default = 0, min = 0,
    doc = "the CUDA context with a training step's kernels loaded, measured on this GPU (MiB); 0: the recipe's default" },
})

-- 0 and "" stand for a figure no source gave: it is shown as "-".
local node_schema = schema.new("node", {
  { "name", "string", doc = "display name" },
  { "gpu", "string", doc = "the GPU, a name in hardware/gpus/" },
  { "gpus", "int", min = 1, max = 1024, doc = "GPUs in the node" },
  { "cpu_ram_gib", "number", default = 0, min = 0, doc = "host (CPU) memory, GiB; 0: not published" },
  { "nvme_tb", "number", default = 0, min = 0, doc = "local NVMe, TB" },
  { "gpu_link", "string", default = "", doc = "how the GPUs reach each other: NVLink generation, PCIe" },
  { "gpu_link_gbps", "number", default = 0, min = 0, doc = "GPU-to-GPU GB/s per GPU, both directions" },
  { "network_gbit_per_s", "number", default = 0, min = 0, doc = "node-to-node network, Gbit/s in all" },
  { "source", "string", default = "", doc = "where the figures come from" },
})

local instance_schema = schema.new("instance", {
  { "name", "string", doc = "display name (the provider's instance type)" },
  { "provider", "string", doc = "AWS, Azure, Google Cloud, Lambda, ..." },
  { "gpu", "string", doc = "the GPU, a name in hardware/gpus/" },
  { "gpus", "int", min = 1, max = 1024, doc = "GPUs in the instance" },
  { "cpu_ram_gib", "number", default = 0, min = 0, doc = "host (CPU) memory, GiB; 0: not published" },
  { "nvme_tb", "number", default = 0, min = 0, doc = "local NVMe, TB" },
  { "gpu_link", "string", default = "", doc = "NVLink generation, PCIe" },
  { "network_gbit_per_s", "number", default = 0, min = 0, doc = "network, Gbit/s in all" },
  { "price_per_hour", "number", default = 0, min = 0, doc = "on-demand USD per hour; 0: not published" },
  { "spot_price_per_hour", "number", default = 0, min = 0, doc = "spot / preemptible USD per hour; 0: not published" },
  { "region", "string", default = "", doc = "the region the price is for" },
  { "price_date", "string", default = "", doc = "when the price was read (YYYY-MM)" },
  { "source", "string", default = "", doc = "the pricing or specification page" },
})

local kinds = {
  gpu = { dir = "gpus", schema = gpu_schema },
  node = { dir = "nodes", schema = node_schema },
  instance = { dir = "instances", schema = instance_schema },
}

-- The environment of a hardware file: gpu { }, node { } and instance { },
-- each checked against its schema (unknown keys name the file and line).
local function hardware_env()
  local constructors = {}
  for kind, k in pairs(kinds) do
    constructors[kind] = function(where, t)
      if type(t) ~= "table" then error(where .. ": " .. kind .. " takes a table of fields", 0) end
      local v = schema.resolve(k.schema, t, sandbox.field_origins(where, t), where)
      v.kind, v.where = kind, where
      return v
    end
  end
  return sandbox.located(sandbox.env(), constructors)
end

local function names_of(home, kind) return files.names(home, "hardware/" .. kinds[kind].dir) end

function hardware.list(home, kind) return names_of(home, kind or "gpu") end

-- A hardware file: gpu { }, node { } or instance { } (`kind`, or any when nil).
local function load(path, kind)
  local v = sandbox.run(path, hardware_env())
  if type(v) ~= "table" or not kinds[v.kind] or (kind and v.kind ~= kind) then
    error(path .. ": a " .. (kind or "hardware") .. " file must return " ..
      (kind and (kind .. " { ... }") or "gpu { ... }, node { ... } or instance { ... }"), 0)
  end
  v.short_name = path:match("([^/]+)%.lua$")
  if v.kind == "gpu" then v.memory_bytes = math.floor(v.memory_mib * 1024 * 1024) end
  return v
end

-- AMD GPUs by architecture (NVIDIA's follow from the compute capability):
-- bf16 since CDNA 2 (MI200), FP8 since CDNA 3 (MI300); FlashAttention-2's
-- ROCm port runs on both (ROCm/flash-attention: MI200 and MI300).
local amd_capabilities = {
  ["CDNA 2"] = { bf16 = true, flash_attention_2 = true, fp8 = false },
  ["CDNA 3"] = { bf16 = true, flash_attention_2 = true, fp8 = true },
}

-- What a GPU can run: { bf16, flash_attention_2, fp8, why = {cap -> text} },
-- or nil when its file says too little to tell (no check then).
-- NVIDIA: bf16 tensor cores and FlashAttention-2 from Ampere (compute
-- capability 8.0; FlashAttention-2's README: Ampere, Ada, Hopper), FP8 from
-- Ada and Hopper (8.9; Transformer Engine's requirement).
function hardware.capabilities(g)
  local major, minor = g.compute_capability:match("^(%d+)%.(%d+)$")
  if major then
    local cc = tonumber(major) + tonumber(minor) / 10
    return { bf16 = cc >= 8.0, flash_attention_2 = cc >= 8.0, fp8 = cc >= 8.9,
             why = { bf16 = "Ampere (compute capability 8.0)", flash_attention_2 = "Ampere (compute capability 8.0)",
                     fp8 = "Ada and Hopper (compute capability 8.9)" },
             what = g.architecture .. ", compute capability " .. g.compute_capability }
  end
  local amd = amd_capabilities[g.architecture]
  if amd then
    return { bf16 = amd.bf16, flash_attention_2 = amd.flash_attention_2, fp8 = amd.fp8,
             why = { fp8 = "CDNA 3 (MI300)" }, what = g.architecture }
  end
end

-- The recipe keys hardware.unsupported reads (a sweep's estimates echo only
-- the keys their readers name).
hardware.unsupported_keys = { "precision", "finetune", "compute_dtype", "attention" }

-- The first thing in a resolved recipe the GPU cannot run: key, message;
-- nil when it can run all of it.
function hardware.unsupported(g, recipe)
  local caps = hardware.capabilities(g)
  if not caps then return nil end
  local function lacks(cap, label, key, value)
    return key, string.format("%s: %s needs %s, which %s (%s) lacks: no GPU before %s has it", key, value, label,
      g.name, caps.what, caps.why[cap] or "?")
  end
  local p = recipe.precision
  if p and p:find("bf16", 1, true) and not caps.bf16 then -- bf16, amp-bf16, bf16-autocast, mixed-bf16
    local key, msg = lacks("bf16", "bf16", "precision", p)
    return key, msg .. "; use " .. p:gsub("bf16", "fp16")
  end
  -- torchtitan's float8 converter likewise wants SM 8.9+ or MI300 (has_cuda_capability(8, 9))
  if (p == "fp8" or p == "fp8-torchao") and not caps.fp8 then return lacks("fp8", "FP8 tensor cores", "precision", p) end
  if recipe.finetune == "qlora" and recipe.compute_dtype == "bf16" and not caps.bf16 then
    local key, msg = lacks("bf16", "bf16", "compute_dtype", "bf16")
    return key, msg .. "; use compute_dtype=fp16"
  end
  if recipe.attention == "flash" and not caps.flash_attention_2 then
    local key, msg = lacks("flash_attention_2", "FlashAttention-2", "attention", "flash")
    return key, msg .. "; use attention=sdpa"
  end
end

local function find(home, kind, spec)
  local path = files.find(home, "hardware/" .. kinds[kind].dir, spec:lower())
  if path then return load(path, kind) end
end

-- A GPU by short name or path.
function hardware.gpu(home, spec)
  if files.is_file(spec) then return load(spec, "gpu") end
  local g = find(home, "gpu", spec)
  if g then return g end
  error(string.format("no GPU '%s'%s; known: %s", spec,
    schema.did_you_mean(schema.suggest_names(spec, names_of(home, "gpu"))),
    table.concat(names_of(home, "gpu"), ", ")), 0)
end

-- A node or an instance with its GPU loaded (and checked to exist).
local function with_gpu(home, v)
  local ok, g = pcall(hardware.gpu, home, v.gpu)
  if not ok then error(v.where .. ": gpu: " .. tostring(g), 0) end
  v.gpu_spec = g
  return v
end

local function named(home, kind, spec)
  local v = find(home, kind, spec)
  if not v then
    local guesses = schema.suggest_names(spec, names_of(home, kind))
    error(string.format("no %s '%s'%s", kind, spec, schema.did_you_mean(guesses)), 0)
  end
  return with_gpu(home, v)
end

function hardware.node(home, spec) return named(home, "node", spec) end
function hardware.instance(home, spec) return named(home, "instance", spec) end

-- What --gpu names: a GPU, a node or an instance (a file path or a name).
-- Returns { gpu = the GPU, host = the node or instance or nil }.
function hardware.resolve(home, spec)
  if files.is_file(spec) then
    local v = load(spec)
    if v.kind == "gpu" then return { gpu = v } end
    with_gpu(home, v)
    return { gpu = v.gpu_spec, host = v }
  end
  local g = find(home, "gpu", spec)
  if g then return { gpu = g } end
  for _, kind in ipairs({ "node", "instance" }) do
    local v = find(home, kind, spec)
    if v then
      with_gpu(home, v)
      return { gpu = v.gpu_spec, host = v }
    end
  end
  local all = {}
  for _, kind in ipairs({ "gpu", "node", "instance" }) do
    for _, n in ipairs(names_of(home, kind)) do all[#all + 1] = n end
  end
  error(string.format("no GPU '%s' in hardware/gpus, nor a node or instance of that name%s; " ..
    "`vramplan hardware` lists them", spec, schema.did_you_mean(schema.suggest_names(spec, all))), 0)
end

return hardware
