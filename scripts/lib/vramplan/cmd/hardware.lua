-- vramplan hardware: the catalog of GPUs, nodes and cloud instances as
-- tables (memory, links, prices), each row a name --gpu accepts.
local hardware = require("vramplan.hardware")

local cmd = {
  usage = "hardware [gpus|nodes|instances]",
  flags = {},
  help = "Lists the GPUs, nodes and cloud instances that --gpu accepts (all three without an argument).\n" ..
    "A dash stands for a figure no source published; docs/hardware.md gives the sources.",
}

local GiB = 1024 ^ 3

local function number(v, fmt) return (v and v > 0) and string.format(fmt or "%g", v) or "-" end

-- Rows of strings under a header, each column as wide as its widest cell;
-- a column of figures (numbers or "-") is aligned right, header included.
local function table_text(header, rows)
  local widths, figures = {}, {}
  for i in ipairs(header) do figures[i] = true end
  for r, row in ipairs({ header, table.unpack(rows) }) do
    for i, cell in ipairs(row) do
      widths[i] = math.max(widths[i] or 0, #cell)
      if r > 1 and not cell:match("^[%d.%-]+$") then figures[i] = false end
    end
  end
  local out = {}
  for _, row in ipairs({ header, table.unpack(rows) }) do
    local cells = {}
    for i, cell in ipairs(row) do
      local pad = string.rep(" ", widths[i] - #cell)
      cells[i] = figures[i] and (pad .. cell) or (cell .. pad)
    end
    out[#out + 1] = (table.concat(cells, "  "):gsub("%s+$", ""))
  end
  return table.concat(out, "\n")
end

local function gpus(home)
  local rows = {}
  for _, n in ipairs(hardware.list(home, "gpu")) do
    local g = hardware.gpu(home, n)
    local caps = hardware.capabilities(g) or {}
    local flags = {}
    if caps.bf16 then flags[#flags + 1] = "bf16" end
    if caps.flash_attention_2 then flags[#flags + 1] = "fa2" end
    if caps.fp8 then flags[#flags + 1] = "fp8" end
    rows[#rows + 1] = { n, g.name, string.format("%.1f", g.memory_bytes / GiB), number(g.memory_bandwidth_gbps),
      number(g.bf16_tflops > 0 and g.bf16_tflops or g.fp16_tflops), number(g.fp8_tflops),
      g.compute_capability ~= "" and g.compute_capability or g.architecture, table.concat(flags, ",") }
  end
  return table_text({ "gpu", "name", "GiB", "GB/s", "bf16/fp16 TFLOPS", "fp8 TFLOPS", "arch", "runs" }, rows)
end

local function nodes(home)
  local rows = {}
  for _, n in ipairs(hardware.list(home, "node")) do
    local v = hardware.node(home, n)
    local gpu_gib = string.format("%.0f", v.gpus * v.gpu_spec.memory_bytes / GiB)
    rows[#rows + 1] = { n, v.name, v.gpus .. " x " .. v.gpu, gpu_gib,
      number(v.cpu_ram_gib), number(v.nvme_tb), v.gpu_link ~= "" and v.gpu_link or "-", number(v.gpu_link_gbps),
      number(v.network_gbit_per_s) }
  end
  return table_text({ "node", "name", "GPUs", "GPU GiB", "CPU GiB", "NVMe TB", "GPU link", "GB/s", "network Gbit/s" },
    rows)
end

local function instances(home)
  local rows = {}
  for _, n in ipairs(hardware.list(home, "instance")) do
    local v = hardware.instance(home, n)
    local per_gpu = v.price_per_hour > 0 and string.format("%.2f", v.price_per_hour / v.gpus) or "-"
    rows[#rows + 1] = { n, v.provider, v.gpus .. " x " .. v.gpu, number(v.cpu_ram_gib), number(v.network_gbit_per_s),
      number(v.price_per_hour, "%.2f"), per_gpu, number(v.spot_price_per_hour, "%.2f"),
      v.region ~= "" and v.region or "-", v.price_date ~= "" and v.price_date or "-" }
  end
  return table_text({ "instance", "provider", "GPUs", "CPU GiB", "network Gbit/s", "$/hour", "$/GPU-hour",
    "spot $/hour", "region", "price date" }, rows)
end

local listings = { gpus = gpus, nodes = nodes, instances = instances }

function cmd.run(opts, home)
  local what = opts.target
  if opts.positional[2] then require("vramplan.cli").fail_usage("unexpected argument " .. opts.positional[2]) end
  if what and not listings[what] then require("vramplan.cli").fail_usage("hardware what? gpus, nodes or instances") end
  local parts = {}
  for _, kind in ipairs({ "gpus", "nodes", "instances" }) do
    if what == nil or what == kind then parts[#parts + 1] = listings[kind](home) end
  end
  print(table.concat(parts, "\n\n"))
  return 0
end

return cmd
