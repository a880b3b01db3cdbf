-- vramplan.hardware — GPU descriptions in hardware/gpus/, found by short
-- name (the file name): a100-80gb, h100-80gb, rtx4090, ...
local files = require("vramplan.files")
local sandbox = require("vramplan.sandbox")
local schema = require("vramplan.schema")

local hardware = {}

local gpu_schema = schema.new("gpu", {
  { "name", "string", doc = "display name" },
  { "vendor", "string", default = "", doc = "NVIDIA, AMD" },
  { "architecture", "string", default = "", doc = "Ampere, Hopper, ..." },
  { "compute_capability", "string", default = "", doc = "CUDA compute capability" },
  { "memory_mib", "number", min = 1, doc = "total device memory as nvidia-smi reports it, MiB" },
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
})

local function gpu_env()
  return sandbox.located(sandbox.env(), {
    gpu = function(where, t)
      if type(t) ~= "table" then error(where .. ": gpu takes a table of fields", 0) end
      local origins = {}
      for k in pairs(t) do origins[k] = where end
      local g = schema.resolve(gpu_schema, t, origins, where)
      g.memory_bytes = math.floor(g.memory_mib * 1024 * 1024)
      return g
    end,
  })
end

function hardware.list(home) return files.script_names(home .. "/hardware/gpus") end

-- A GPU by short name or by path.
function hardware.gpu(home, spec)
  local path = spec
  if not files.is_file(path) then
    path = home .. "/hardware/gpus/" .. spec:lower() .. ".lua"
    if not files.is_file(path) then
      local names = hardware.list(home)
      local guess = schema.suggest(spec:lower(), names)
      error(string.format("no GPU '%s'%s; known: %s", spec, guess and (" (did you mean '" .. guess .. "'?)") or "",
        table.concat(names, ", ")), 0)
    end
  end
  local g = sandbox.run(path, gpu_env())
  if type(g) ~= "table" or not g.memory_bytes then error(path .. ": a GPU file must return gpu { ... }", 0) end
  g.short_name = path:match("([^/]+)%.lua$")
  return g
end

return hardware
