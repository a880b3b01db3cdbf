-- The hardware catalog (hardware/gpus, nodes, instances) against published
-- figures, --gpu with a node or an instance, what a GPU cannot run, the host
-- memory verdict; and the small usability items of issue 19 (--recipe by
-- name, seq_len within the model's positions, every transformers activation).
local helper = require("tests.lua.helper")
local hardware = require("vramplan.hardware")
local json = require("dkjson")

local root = helper.root

-- Memory as nvidia-smi (rocm-smi) prints it, MiB, with where it was seen.
local published_memory = {
  ["a100-40gb"] = { 40960, "nvidia-smi, A100-SXM4-40GB (bottlerocket-core-kit#834)" },
  ["a100-80gb"] = { 81920, "nvidia-smi, A100-SXM4-80GB (modal-client#2797)" },
  ["a100-pcie-40gb"] = { 40960, "nvidia-smi, A100-PCIE-40GB at 250 W" },
  ["a100-pcie-80gb"] = { 81920, "nvidia-smi, A100 80GB PCIe at 300 W" },
  ["b200"] = { 183359, "nvidia-smi, B200 at 1000 W (TensorRT-LLM#10278)" },
  ["h100-80gb"] = { 81559, "nvidia-smi, H100 80GB HBM3 (nccl#1264)" },
  ["h100-nvl"] = { 95830, "nvidia-smi, H100 NVL (gpu-admin-tools#4)" },
  ["h20"] = { 97871, "nvidia-smi, H20 at 500 W" },
  ["h200"] = { 143771, "nvidia-smi, H200 at 700 W" },
  ["l20"] = { 46068, "nvidia-smi, L20 with ECC" },
  ["l40s"] = { 46068, "nvidia-smi, L40S with ECC (provider-configs#99)" },
  ["mi250x"] = { 65520, "one GCD: HSA pool 67092480 KB (rocm_smi_lib#160)" },
  ["mi300x"] = { 196592, "rocm-smi 206141652992 B (ROCm#4750)" },
  ["mi325x"] = { 262144, "datasheet 256 GB (no rocm-smi reading found)" },
  ["rtx4090"] = { 24564, "nvidia-smi (vllm#7553)" },
  ["rtx5090"] = { 32607, "nvidia-smi (club-3090#617)" },
  ["t4"] = { 15360, "nvidia-smi (modal-client#2797)" },
  ["v100-16gb"] = { 16384, "nvidia-smi, V100-SXM2-16GB, driver 570" },
}

-- Plausible on-demand USD per GPU-hour for each GPU (list prices of 2023-2026).
local price_band = {
  a10g = { 0.5, 3 }, l4 = { 0.4, 2 }, l40s = { 1, 4 }, ["a100-40gb"] = { 1, 6 }, ["a100-80gb"] = { 1, 7 },
  ["h100-80gb"] = { 1.5, 14 }, h200 = { 2, 16 }, b200 = { 3, 20 },
}

local function names(kind) return hardware.list(root, kind) end

describe("the GPU catalog", function()
  it("holds the GPUs issue 19 names", function()
    for _, n in ipairs({ "b200", "rtx5090", "a100-pcie-40gb", "a100-pcie-80gb", "h100-nvl", "h20", "l20", "mi250x",
      "mi325x" }) do
      assert.truthy(hardware.gpu(root, n), n)
    end
  end)

  it("gives each GPU the memory its tools print", function()
    for n, want in pairs(published_memory) do
      local g = hardware.gpu(root, n)
      assert.are.equal(want[1], g.memory_mib, n .. ": " .. want[2])
      assert.are.equal(want[1] * 1024 * 1024, g.memory_bytes, n)
    end
  end)

  it("gives every GPU a bandwidth and dense 16-bit rate, fp8 only where there are FP8 tensor cores", function()
    for _, n in ipairs(names("gpu")) do
      local g = hardware.gpu(root, n)
      assert.is_true(g.memory_bandwidth_gbps > 0, n)
      assert.is_true(g.fp16_tflops > 0, n)
      local caps = assert(hardware.capabilities(g), n)
      assert.are.equal(caps.fp8, g.fp8_tflops > 0, n)
      -- dense, not the sparse headline: FP8 twice the 16-bit rate at most
      -- (L40S's datasheet prints 733 against 362.05: a little over twice)
      if g.fp8_tflops > 0 then assert.is_true(g.fp8_tflops <= 2.05 * g.bf16_tflops, n) end
    end
  end)

  it("derives bf16, FlashAttention-2 and FP8 from the architecture", function()
    local function caps(n) return hardware.capabilities(hardware.gpu(root, n)) end
    assert.is_false(caps("v100-16gb").bf16)
    assert.is_false(caps("t4").flash_attention_2)
    assert.is_true(caps("a100-80gb").bf16)
    assert.is_false(caps("a100-80gb").fp8)
    assert.is_true(caps("l4").fp8)
    assert.is_true(caps("h100-80gb").fp8)
    assert.is_true(caps("b200").fp8)
    assert.is_false(caps("mi250x").fp8)
    assert.is_true(caps("mi250x").bf16)
    assert.is_true(caps("mi325x").fp8)
  end)
end)

describe("nodes and instances", function()
  it("each names a GPU of the catalog and loads", function()
    for _, kind in ipairs({ "node", "instance" }) do
      for _, n in ipairs(names(kind)) do
        local v = hardware[kind](root, n)
        assert.truthy(v.gpu_spec.memory_bytes > 0, n)
      end
    end
  end)

  it("has the nodes and instances issue 19 names", function()
    for _, n in ipairs({ "dgx-a100-320gb", "dgx-a100-640gb", "dgx-h100", "dgx-h200", "dgx-b200", "hgx-h100-8gpu",
      "rtx4090-8x", "rtx4090-2x", "a6000-8x" }) do
      assert.truthy(hardware.node(root, n), n)
    end
    for _, n in ipairs({ "p4d.24xlarge", "p4de.24xlarge", "p5.48xlarge", "p5e.48xlarge", "g5.48xlarge", "g6.48xlarge",
      "g6e.48xlarge", "standard_nd96asr_v4", "standard_nd96amsr_a100_v4", "standard_nd96isr_h100_v5", "a2-highgpu-8g",
      "a2-megagpu-16g", "a2-ultragpu-8g", "a3-highgpu-8g", "a3-megagpu-8g", "lambda-8x-h100-sxm" }) do
      assert.truthy(hardware.instance(root, n), n)
    end
  end)

  it("tells A2 Ultra (8x A100 80GB) from A2 Mega (16x A100 40GB)", function()
    local ultra, mega = hardware.instance(root, "a2-ultragpu-8g"), hardware.instance(root, "a2-megagpu-16g")
    assert.are.same({ "a100-80gb", 8 }, { ultra.gpu, ultra.gpus })
    assert.are.same({ "a100-40gb", 16 }, { mega.gpu, mega.gpus })
    local p4d = hardware.instance(root, "p4d.24xlarge")
    assert.are.same({ "a100-40gb", 8, 1152 }, { p4d.gpu, p4d.gpus, p4d.cpu_ram_gib })
    local nd = hardware.instance(root, "standard_nd96amsr_a100_v4")
    assert.are.same({ "a100-80gb", 8 }, { nd.gpu, nd.gpus })
  end)

  it("gives plausible prices with their region, date and source", function()
    local priced = 0
    for _, n in ipairs(names("instance")) do
      local v = hardware.instance(root, n)
      assert.truthy(v.source:match("^https://"), n)
      assert.truthy(v.region ~= "", n)
      if v.price_per_hour > 0 then
        priced = priced + 1
        assert.is_true(v.price_per_hour >= 0.1 and v.price_per_hour <= 200, n)
        assert.truthy(v.price_date:match("^%d%d%d%d"), n)
        -- re-checked on 2026-12-03 (docs/hardware.md): a price older than 2025 is stale
        assert.is_true(v.price_date >= "2025", n .. ": price_date " .. v.price_date)
        local band = price_band[v.gpu]
        if band then
          local per_gpu = v.price_per_hour / v.gpus
          assert.is_true(per_gpu >= band[1] and per_gpu <= band[2],
            string.format("%s: $%.2f per %s-hour", n, per_gpu, v.gpu))
        end
        if v.spot_price_per_hour > 0 then assert.is_true(v.spot_price_per_hour < v.price_per_hour, n) end
      end
    end
    assert.is_true(priced >= 10, "instances with a price: " .. priced)
  end)

  it("prices A2 Ultra and A3 Mega, and says in the file why an instance has no price", function()
    for _, n in ipairs({ "a2-ultragpu-8g", "a3-megagpu-8g", "a2-highgpu-8g", "a2-megagpu-16g" }) do
      local v = hardware.instance(root, n)
      assert.is_true(v.price_per_hour > 0 and v.spot_price_per_hour > 0, n)
      assert.are.equal("2026-07", v.price_date, n)
    end
    for _, n in ipairs(names("instance")) do
      if hardware.instance(root, n).price_per_hour == 0 then
        local f = assert(io.open(root .. "/hardware/instances/" .. n .. ".lua"))
        local text = f:read("a")
        f:close()
        assert.truthy(text:find("%-%- price_per_hour: none%. %S"), n .. ": an unpriced instance says why")
      end
    end
  end)

  it("refuses an unknown field, naming the file and line", function()
    local p = helper.write('return node {\n  name = "x", gpu = "h100-80gb", gpus = 8,\n  cpu_ram = 2048,\n}\n')
    local err = helper.fails("gpt2", "--gpu", p)
    assert.truthy(err:find(":3: unknown field 'cpu_ram' in node (did you mean 'cpu_ram_gib'?)", 1, true), err)
    p = helper.write('return node { name = "x", gpu = "h100", gpus = 8 }\n')
    err = helper.fails("gpt2", "--gpu", p)
    assert.truthy(err:find(":1: gpu: no GPU 'h100' (did you mean 'h100-80gb', ", 1, true), err)
  end)
end)

describe("vramplan hardware", function()
  it("lists GPUs, nodes and instances as tables", function()
    local out, err, code = helper.run("hardware")
    assert.are.equal(0, code, err)
    for _, s in ipairs({ "b200", "dgx-h100", "p4d.24xlarge", "$/GPU-hour", "CPU GiB" }) do
      assert.truthy(out:find(s, 1, true), s)
    end
    out = helper.run("hardware", "instances")
    assert.truthy(out:match("p4d%.24xlarge%s+AWS%s+8 x a100%-40gb%s+1152%s+400%s+21%.96%s+2%.74"), out)
    out = helper.run("hardware", "gpus")
    assert.falsy(out:find("dgx", 1, true))
    local _, _, bad = helper.run("hardware", "tpus")
    assert.are.equal(2, bad)
  end)

  it("keeps list gpus", function()
    local out, _, code = helper.run("list", "gpus")
    assert.are.equal(0, code)
    assert.truthy(out:find("\nb200\n", 1, true))
  end)
end)

describe("--gpu names", function()
  local function suggestion(name)
    local err = helper.fails("gpt2", "--gpu", name)
    return err:match("did you mean (.-)%?%)") or ""
  end

  it("suggests what the user meant", function()
    local s = suggestion("a100")
    assert.truthy(s:find("'a100-40gb'", 1, true) and s:find("'a100-80gb'", 1, true), s)
    assert.falsy(s:find("a10g", 1, true), s)
    assert.truthy(suggestion("H100"):find("^'h100%-80gb'"), suggestion("H100"))
    assert.truthy(suggestion("4090"):find("'rtx4090'", 1, true))
    assert.truthy(suggestion("dgx-h10"):find("'dgx-h100'", 1, true))
  end)

  it("takes a node: its GPU, its GPUs per node, its host memory", function()
    local r = helper.estimate("gpt2", "--gpu", "dgx-h100", "--gpus", "16")
    assert.are.equal("NVIDIA H100 80GB SXM", r.gpu.name)
    assert.are.equal(16, r.recipe.dp)
    assert.are.equal(8, r.recipe.gpus_per_node)
    assert.are.equal("node", r.node.kind)
    assert.are.equal(2048 * 1024 ^ 3, r.host.cpu_ram_bytes_per_node)
    -- a node with fewer ranks than GPUs: only those ranks use its memory
    r = helper.estimate("gpt2", "--gpu", "dgx-h100", "--gpus", "2")
    assert.are.equal(2, r.recipe.gpus_per_node)
  end)

  it("takes an instance, with its price in the JSON", function()
    local r = helper.estimate("gpt2", "--gpu", "p4d.24xlarge")
    assert.are.equal("NVIDIA A100 40GB", r.gpu.name)
    assert.are.equal("instance", r.node.kind)
    assert.are.equal(21.957642, r.node.price_per_hour)
    assert.are.equal(1, r.recipe.gpus_per_node)
    r = helper.estimate("gpt2", "--gpu", "Standard_ND96amsr_A100_v4")
    assert.are.equal(81920 * 1024 * 1024, r.gpu.memory_bytes)
  end)

  it("--gpus sets dp over tp x pp", function()
    local r = helper.estimate("gpt2", "--gpus", "8", "--set", "framework=megatron", "--set", "tp=2", "--set", "pp=2",
      "--set", "seq_len=128")
    assert.are.equal(2, r.recipe.dp)
    assert.truthy(helper.fails("gpt2", "--gpus", "6", "--set", "framework=megatron", "--set", "tp=4")
      :find("--gpus 6: not a multiple of tp x pp x cp (4)", 1, true))
    assert.truthy(helper.fails("gpt2", "--gpus", "8", "--set", "dp=2"):find("dp: 2, but --gpus 8 makes dp 8", 1, true))
  end)
end)

describe("what a GPU cannot run", function()
  it("refuses bf16 before Ampere, naming the GPU and the key", function()
    local err = helper.fails("gpt2", "--gpu", "v100-16gb", "--set", "precision=mixed-bf16")
    assert.truthy(err:find("--set precision=mixed-bf16: precision: mixed-bf16 needs bf16, which NVIDIA V100 16GB " ..
      "(Volta, compute capability 7.0) lacks", 1, true), err)
    assert.truthy(err:find("use mixed-fp16", 1, true), err)
    -- the Trainer's autocast over a bf16 model too
    err = helper.fails("gpt2", "--gpu", "t4", "--set", "precision=bf16-autocast", "--set", "finetune=lora")
    assert.truthy(err:find("precision: bf16-autocast needs bf16", 1, true), err)
    assert.truthy(err:find("use fp16-autocast", 1, true), err)
    -- the default precision is mixed-bf16: refused there too
    assert.truthy(helper.fails("gpt2", "--gpu", "t4"):find("the default recipe: precision: mixed-bf16", 1, true))
    -- QLoRA's compute dtype
    assert.truthy(helper.fails("gpt2", "--gpu", "t4", "--set", "finetune=qlora", "--set", "precision=mixed-fp16")
      :find("compute_dtype: bf16 needs bf16", 1, true))
  end)

  it("runs the same recipe on an A100", function()
    local r = helper.estimate("gpt2", "--gpu", "a100-80gb", "--set", "precision=mixed-bf16")
    assert.is_true(r.fits)
    r = helper.estimate("gpt2", "--gpu", "v100-16gb", "--set", "precision=mixed-fp16")
    assert.is_true(r.fits)
  end)

  it("refuses FlashAttention-2 before Ampere and FP8 before Ada/Hopper", function()
    assert.truthy(helper.fails("gpt2", "--gpu", "t4", "--set", "precision=mixed-fp16", "--set", "attention=flash")
      :find("attention: flash needs FlashAttention-2, which NVIDIA T4", 1, true))
    assert.truthy(helper.fails("llama2-7b", "--gpu", "a100-80gb", "--set", "precision=fp8")
      :find("precision: fp8 needs FP8 tensor cores, which NVIDIA A100 80GB", 1, true))
    assert.truthy(helper.fails("llama2-7b", "--gpu", "mi250x", "--set", "precision=fp8")
      :find("no GPU before CDNA 3 (MI300) has it", 1, true))
    assert.truthy(helper.fails("llama2-7b", "--gpu", "a100-80gb", "--set", "precision=fp8-torchao")
      :find("precision: fp8-torchao needs FP8 tensor cores, which NVIDIA A100 80GB", 1, true))
    local _, err, code = helper.run("estimate", "llama2-7b", "--gpu", "h100-80gb", "--set", "precision=fp8")
    assert.are.equal(0, code, err)
  end)
end)

describe("host memory per node", function()
  local offload = { "--set", "framework=deepspeed", "--set", "zero=3", "--set", "offload_optimizer=cpu", "--set",
    "offload_params=cpu", "--set", "checkpointing=full" }

  it("says when the offloaded state does not fit the node's memory", function()
    local args = { "estimate", "llama2-70b", "--gpu", "p4d.24xlarge", "--gpus", "8", table.unpack(offload) }
    local out, err, code = helper.run(table.unpack(args))
    assert.are.equal(0, code, err)
    assert.truthy(out:find("host memory does not fit on p4d.24xlarge: needs [%d.]+ GiB per node %(8 ranks%), " ..
      "has 1152.00 GiB"), out)
    local r = helper.estimate(table.unpack(args, 2))
    assert.is_false(r.host.fits)
    assert.are.equal(1152 * 1024 ^ 3, r.host.cpu_ram_bytes_per_node)
    assert.is_true(r.host.cpu_bytes_per_node > r.host.cpu_ram_bytes_per_node)
    -- the GPU verdict stays the GPU's
    assert.is_true(r.fits)
  end)

  it("says when it fits, and gives no verdict without a node", function()
    local out = helper.run("estimate", "llama2-7b", "--gpu", "dgx-h100", "--gpus", "8", table.unpack(offload))
    assert.truthy(out:find("host memory fits on NVIDIA DGX H100: [%d.]+ GiB offloaded per node of 2048.00 GiB"), out)
    -- null, not absent, without a node
    out = helper.run("estimate", "--json", "llama2-7b", "--gpu", "h100-80gb", "--gpus", "8", table.unpack(offload))
    local r = json.decode(out, 1, json.null)
    assert.are.equal(json.null, r.host.fits)
    assert.are.equal(json.null, r.host.cpu_ram_bytes_per_node)
    out = helper.run("estimate", "llama2-7b", "--gpu", "rtx4090-8x", "--gpus", "8", table.unpack(offload))
    assert.truthy(out:find("publishes no CPU memory figure: no verdict", 1, true), out)
  end)
end)

describe("issue 19's small items", function()
  it("finds a recipe by the name list recipes prints", function()
    local a = helper.estimate("gpt2", "--recipe", "qlora-all-linear-paged")
    local b = helper.estimate("gpt2", "--recipe", root .. "/scripts/recipes/qlora-all-linear-paged.lua")
    assert.are.equal("qlora", a.recipe.finetune)
    assert.are.equal(b.per_gpu.peak_total_bytes, a.per_gpu.peak_total_bytes)
    local err = helper.fails("gpt2", "--recipe", "qlora-all-linear")
    assert.truthy(err:find("no recipe 'qlora-all-linear': not a file, nor a name in ", 1, true), err)
    assert.truthy(err:find("/scripts/recipes (did you mean 'qlora-all-linear-paged'?)", 1, true), err)
  end)

  it("runs estimate gpt2 out of the box: seq_len within its 1024 positions", function()
    local out, err, code = helper.run("estimate", "gpt2")
    assert.are.equal(0, code, err)
    assert.truthy(out:find("seq_len 1024", 1, true), out)
    assert.are.equal(512, helper.estimate("bert-base-cased").recipe.seq_len)
    -- a model with a longer limit keeps 2048, a seq_len given is kept
    assert.are.equal(2048, helper.estimate("llama2-7b").recipe.seq_len)
    assert.are.equal(256, helper.estimate("gpt2", "--set", "seq_len=256").recipe.seq_len)
    assert.truthy(helper.fails("gpt2", "--set", "seq_len=2048")
      :find("longer than the model's learned position", 1, true))
  end)

  it("imports GPT-NeoX-20B's own config.json (gelu_fast)", function()
    local r = helper.estimate(root .. "/tests/fixtures/gpt-neox-20b-config.json", "--set", "seq_len=128")
    assert.are.equal(44, r.model.layers)
    assert.is_true(r.model.params > 20e9 and r.model.params < 21e9, tostring(r.model.params))
  end)

  -- A two-layer GPT-NeoX config.json with hidden_act `act`.
  local function tiny_neox(act)
    return helper.write('{"model_type": "gpt_neox", "hidden_size": 64, "num_hidden_layers": 2, ' ..
      '"num_attention_heads": 4, "intermediate_size": 256, "vocab_size": 100, "hidden_act": "' .. act .. '"}', ".json")
  end

  -- Its activations at the end of forward.
  local function activations(act)
    local p = tiny_neox(act)
    return helper.estimate(p, "--set", "seq_len=128", "--set", "precision=mixed-bf16").per_gpu.activations_bytes
  end

  it("counts each transformers activation as its ops keep tensors", function()
    local tensor = 128 * 256 * 2 -- one intermediate-sized bf16 tensor
    local gelu = activations("gelu")
    -- FastGELUActivation keeps six more than one-kernel gelu, QuickGELU one
    assert.are.equal(gelu + 2 * 6 * tensor, activations("gelu_fast"))
    assert.are.equal(gelu + 2 * 1 * tensor, activations("quick_gelu"))
    -- relu keeps its output, which down_proj keeps anyway: one fewer
    assert.are.equal(gelu - 2 * tensor, activations("relu"))
    -- names with the memory of an op the core has
    assert.are.equal(activations("silu"), activations("swish"))
    assert.are.equal(activations("silu"), activations("mish"))
    assert.are.equal(activations("silu"), activations("leaky_relu"))
    assert.are.equal(activations("silu"), activations("relu6"))
    assert.are.equal(activations("relu"), activations("tanh"))
    assert.are.equal(activations("relu"), activations("sigmoid"))
    assert.are.equal(activations("gelu_new"), activations("gelu_accurate"))
    assert.are.equal(gelu, activations("gelu_pytorch_tanh"))
    activations("relu2")
  end)

  it("refuses an activation whose memory the core cannot count, naming the key", function()
    for _, act in ipairs({ "gelu_10", "gelu_python", "linear", "prelu" }) do
      assert.truthy(helper.fails(tiny_neox(act)):find(": hidden_act: " .. act .. ": ", 1, true), act)
    end
  end)
end)
