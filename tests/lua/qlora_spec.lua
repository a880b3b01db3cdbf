-- QLoRA (Dettmers et al. 2023, with bitsandbytes' Linear4bit): the base's
-- linear weights in 4-bit blocks with their scales, the dequantized weight
-- a transient of every use, and the paper's headline.
local helper = require("tests.lua.helper")

-- NF4 with double quantization: 4 bits per element, a uint8 absmax per 64
-- elements and an fp32 scale per 256 of those (the paper's section 3:
-- 4 + 8/64 + 32/(64 x 256) bits per parameter); bitsandbytes' quant_state
-- adds an fp32 offset and the 16-value fp32 code table of each weight
-- (quantize_4bit: absmax.mean(), get_4bit_type)
local CODE, OFFSET = 16 * 4, 4
local function nf4_dq_bytes(numel)
  local blocks = math.ceil(numel / 64)
  return math.ceil(numel / 2) + blocks + 4 * math.ceil(blocks / 256) + OFFSET + CODE
end
-- the second level's 256-value fp32 map, one per process (name2qmap["dynamic"])
local DYNAMIC_MAP = 256 * 4

local function qlora(model, ...)
  return helper.estimate(model, "--set", "seq_len=256", "--set", "finetune=qlora", ...)
end

describe("QLoRA", function()
  it("stores every linear weight but the head in NF4 with double quantization", function()
    local r = qlora("llama2-7b", "--set", "precision=bf16", "--set", "lora_targets=q_proj,v_proj")
    local h, f, layers, vocab = 4096, 11008, 32, 32000
    local quantized = layers * (4 * nf4_dq_bytes(h * h) + 3 * nf4_dq_bytes(h * f))
    local sixteen_bit = 2 * (2 * vocab * h + layers * 2 * h + h) -- embeddings, head, norms in bf16
    local adapters = 4 * layers * 2 * 8 * (h + h)                   -- fp32 (PEFT's autocast_adapter_dtype)
    assert.are.equal(quantized + sixteen_bit + adapters + DYNAMIC_MAP, r.per_gpu.params_bytes)
    assert.are.equal(layers * 2 * 8 * (h + h), r.model.trainable_params)
  end)

  it("keeps 4-bit blocks with fp32 scales without double quantization, and FP4 like NF4", function()
    local plain = qlora("llama2-7b", "--set", "double_quant=false")
    local fp4 = qlora("llama2-7b", "--set", "quant=fp4")
    local nf4 = qlora("llama2-7b")
    local h, f = 4096, 11008
    local per_layer_nf4 = 4 * nf4_dq_bytes(h * h) + 3 * nf4_dq_bytes(h * f)
    -- an fp32 absmax per block and the code table, no offset, no map
    local per_layer_plain = 4 * (h * h / 2 + 4 * h * h / 64 + CODE) + 3 * (h * f / 2 + 4 * h * f / 64 + CODE)
    assert.are.equal(32 * (per_layer_plain - per_layer_nf4) - DYNAMIC_MAP,
      plain.per_gpu.params_bytes - nf4.per_gpu.params_bytes)
    assert.are.equal(nf4.per_gpu.params_bytes, fp4.per_gpu.params_bytes)
  end)

  it("dequantizes a weight for its product and drops it", function()
    local vramplan = require("vramplan")
    local model = helper.model("llama2-7b", 2)
    local r = vramplan.estimate(model, { finetune = "qlora", seq_len = 64 }, nil, { timeline = true, fold = false })
    local sizes = {}
    for _, e in ipairs(r.timeline) do
      if e.op == "dequantize_4bit" and e.phase == "forward" and e.delta > 0 then sizes[e.delta] = true end
    end
    assert.is_true(sizes[2 * 4096 * 4096])   -- q, k, v, o in bf16
    assert.is_true(sizes[2 * 4096 * 11008])  -- gate, up, down
    -- dequantize_4bit first makes a double-quantized weight's block absmax
    -- fp32 again (dequantize_blockwise): one per 64 elements
    local attention, mlp = 4 * 4096 * 4096 / 64, 4 * 4096 * 11008 / 64 -- q, k, v, o; gate, up, down
    assert.are.same({ attention, attention, attention, attention, mlp, mlp, mlp },
      helper.forward_sizes(helper.model("llama2-7b", 1), { finetune = "qlora", seq_len = 64 }, "dequantize_4bit.absmax"))
    assert.are.same({}, helper.forward_sizes(helper.model("llama2-7b", 1),
      { finetune = "qlora", seq_len = 64, double_quant = false }, "dequantize_4bit.absmax"))
  end)

  it("runs the adapters as PEFT's bnb layers do: a 4-bit result cloned, the output cast back before the add", function()
    -- peft/tuners/lora/bnb.py: Linear4bit.forward clones the base output;
    -- without autocast the adapters' fp32 output is cast to the result's
    -- dtype first, so the sum is a bf16 tensor (the plain lora.Linear adds
    -- in fp32 and casts the sum)
    local model = helper.model("llama2-7b", 1)
    local function forward_sizes(recipe, op) return helper.forward_sizes(model, recipe, op) end
    local tokens = 64
    local q = { finetune = "qlora", precision = "bf16", seq_len = tokens, lora_targets = "q_proj" }
    assert.are.same({ 2 * tokens * 4096 }, forward_sizes(q, "lora.clone"))
    assert.are.same({ 2 * tokens * 4096 }, forward_sizes(q, "lora.cast_output"))
    q.quant = "int8" -- Linear8bitLt: no clone
    assert.are.same({}, forward_sizes(q, "lora.clone"))
    -- under autocast the adapters run in bf16 already: nothing to cast back
    q.quant, q.precision = "nf4", "amp-bf16"
    assert.are.same({}, forward_sizes(q, "lora.cast_output"))
  end)

  it("fine-tunes LLaMA-65B on one 48 GB GPU, where 16-bit full fine-tuning needs over 780 GB", function()
    -- Dettmers et al. 2023, section 1: "finetune a 65B parameter model on a
    -- single 48GB GPU"; "more than 780 GB of GPU memory" for regular 16-bit
    -- finetuning (shared/reference qlora-03, qlora-04)
    local r = helper.estimate("llama-65b", "--recipe", helper.root .. "/scripts/recipes/qlora-all-linear-paged.lua",
      "--gpu", "a6000")
    assert.is_true(r.fits)
    assert.is_true(r.per_gpu.peak_total_bytes < 48e9)
    local full = helper.estimate("llama-65b", "--set", "seq_len=528", "--set", "precision=mixed-bf16")
    local states = full.per_gpu.params_bytes + full.per_gpu.grads_bytes + full.per_gpu.master_bytes +
                   full.per_gpu.optimizer_bytes
    assert.is_true(states > 780e9)
  end)

  -- bitsandbytes' Linear4bit.forward: `if self.bias.dtype != x.dtype:
  -- self.bias.data = self.bias.data.to(x.dtype)`. Under autocast Phi-2's
  -- attention output reaches `dense` in bf16, so its fp32 bias is bf16 from
  -- the first forward on; without autocast (fp32) it stays fp32
  it("keeps a bias recast to its input's dtype, as Linear4bit leaves it after the first forward", function()
    local function params(precision)
      return helper.estimate("phi-2", "--set", "finetune=qlora", "--set", "precision=" .. precision).per_gpu.params_bytes
    end
    local layers, hidden = 32, 2560
    assert.are.equal(params("fp32") - layers * hidden * (4 - 2), params("amp-bf16"))
    -- folded layers are recast as every layer is
    helper.assert_folds_agree(helper.model("phi-2", 5), {
      { finetune = "qlora", precision = "amp-bf16", lora_targets = "all-linear" },
      { finetune = "qlora", quant = "int8", precision = "amp-bf16", checkpointing = "full" },
    })
  end)

  it("agrees with evaluating every layer", function()
    local model = helper.model("llama2-7b", 5)
    helper.assert_folds_agree(model, {
      { finetune = "qlora", precision = "bf16", lora_targets = "all-linear" },
      { finetune = "qlora", precision = "amp-bf16", checkpointing = "full", optimizer = "paged-adamw-8bit" },
      { finetune = "qlora", quant = "int8", precision = "fp16", lora_targets = "all-linear" },
      -- the 8-bit inputs held until the graph goes stand for every folded layer's
      { finetune = "qlora", quant = "int8", precision = "amp-bf16", grad_accum = 2 },
      { finetune = "qlora", quant = "int8", precision = "bf16", checkpointing = "every-2", keep_logits = false },
    })
  end)

  -- LLM.int8 (Dettmers et al. 2022; bitsandbytes 0.45+ Linear8bitLt):
  -- Int8Params hold one int8 per weight and an fp32 absmax per output row
  -- (SCB); MatMul8bitLt saves its input for backward, where MatMul4Bit
  -- keeps none of it
  it("stores LLM.int8 weights as int8 with an fp32 scale per output row", function()
    local h, f, layers, vocab = 4096, 11008, 32, 32000
    local r = qlora("llama2-7b", "--set", "quant=int8", "--set", "precision=bf16")
    local quantized = layers * (4 * h * h + 3 * h * f)
    local rows = layers * (4 * h + 2 * f + h)
    local rest = 2 * vocab * h + (2 * layers + 1) * h -- embeddings, head, norms in bf16
    local adapters = layers * 2 * 8 * (h + h) -- q and v, r 8, fp32
    assert.are.equal(quantized + 4 * rows + 2 * rest + 4 * adapters, r.per_gpu.params_bytes)
  end)

  it("keeps every int8 linear's input for backward, where 4-bit keeps none", function()
    -- one more layer adds, under int8 beyond NF4: the attention's input
    -- (LoRA keeps its own fp32 copy), the MLP's input and the down
    -- projection's input, in bf16 (o_proj's input is the attention's
    -- output, which flash attention keeps anyway)
    local b, s, h, f = 2, 512, 4096, 11008
    local function forward(quant, layers)
      return qlora("llama2-7b", "--set", "quant=" .. quant, "--set", "layers=" .. layers, "--set", "precision=bf16",
        "--set", "seq_len=" .. s, "--set", "micro_batch=" .. b).per_gpu.activations_bytes
    end
    local per_layer = function(quant) return forward(quant, 3) - forward(quant, 2) end
    assert.are.equal(2 * (2 * b * s * h + b * s * f), per_layer("int8") - per_layer("nf4"))
  end)

  -- FSDP-QLoRA (answer.ai and Hugging Face, bnb_4bit_quant_storage): FSDP
  -- shards the packed 4-bit bytes like any float storage; the quant_state
  -- (uint8 absmax per 64 weights, an fp32 scale per 256 of those, the
  -- offset and the code table) is no parameter and stays whole on every rank
  it("shards the packed 4-bit weights under FSDP and keeps their scales whole", function()
    local h, f, layers, vocab, dp = 4096, 11008, 32, 32000, 2
    local function ceil(x) return math.ceil(x) end
    local function quantized(n)
      local blocks = ceil(n / 64)
      return ceil(n / 2 / dp) + blocks + 4 * ceil(blocks / 256) + OFFSET + CODE
    end
    local weights = layers * (4 * quantized(h * h) + 3 * quantized(h * f))
    local rest = 2 * 2 * ceil(vocab * h / dp) + (2 * layers + 1) * 2 * ceil(h / dp) -- bf16 shards
    local adapters = layers * 2 * 2 * 4 * ceil(8 * h / dp) -- q and v: A and B, fp32 shards
    local r = qlora("llama2-7b", "--set", "precision=bf16", "--set", "framework=fsdp", "--set", "dp=" .. dp)
    assert.are.equal(weights + rest + adapters + DYNAMIC_MAP, r.per_gpu.params_bytes)
  end)

  -- Answer.AI's FSDP+QLoRA release (https://www.answer.ai/posts/2024-03-06-fsdp-qlora):
  -- a 70B model fine-tuned on two 24 GB gaming GPUs, with gradient
  -- checkpointing, CPU offloading and FlashAttention-2. Their train.py's
  -- LoRA (r 64 on every linear layer) at 2 x 512 tokens: it fits with the
  -- parameters offloaded to the CPU, and not without (the 4-bit shards,
  -- the quant_state and the adapters' fp32 states alone take 19 GiB).
  it("fine-tunes a 70B model on two 24 GB GPUs with FSDP, checkpointing and CPU offload", function()
    local function fits(offload)
      return helper.estimate("llama2-70b", "--set", "finetune=qlora", "--set", "lora_targets=all-linear", "--set",
        "lora_rank=64", "--set", "precision=bf16", "--set", "framework=fsdp", "--set", "dp=2", "--set",
        "checkpointing=full", "--set", "attention=flash", "--set", "micro_batch=2", "--set", "seq_len=512",
        "--set", "offload_params=" .. offload, "--gpu", "rtx4090").fits
    end
    assert.is_true(fits("cpu"))
    assert.is_false(fits("none"))
  end)

  -- int8_vectorwise_quant's outlier search (A.abs() >= threshold): an fp16
  -- and a bool tensor of the input's size, skipped at llm_int8_threshold 0
  it("searches an int8 layer's input for outliers unless llm_int8_threshold is 0", function()
    local model = helper.model("llama2-7b", 1)
    local recipe = { finetune = "qlora", quant = "int8", precision = "bf16", seq_len = 64 }
    local tokens, h, f = 64, 4096, 11008
    local sizes = helper.forward_sizes(model, recipe, "int8.outliers")
    -- each projection quantizes its input itself: an fp16 and a bool tensor apiece
    local expected = {}
    for _, width in ipairs({ h, h, h, h, h, h, f }) do -- q, k, v, o, gate, up read h; down reads f
      expected[#expected + 1] = tokens * width
      expected[#expected + 1] = 2 * tokens * width
    end
    table.sort(expected)
    assert.are.same(expected, sizes)
    recipe.llm_int8_threshold = 0
    assert.are.same({}, helper.forward_sizes(model, recipe, "int8.outliers"))
  end)

  local bad = {
    { { "--set", "finetune=qlora", "--set", "llm_int8_threshold=0" },
      "llm_int8_threshold: LLM.int8's outlier threshold needs finetune = qlora and quant = int8" },
    { { "--set", "finetune=lora", "--set", "quant=nf4" }, "quant: a quantized base needs finetune = qlora" },
    { { "--set", "finetune=qlora", "--set", "quant=int8", "--set", "framework=fsdp", "--set", "dp=2" },
      "quant: int8 weights cannot be sharded by FSDP or ZeRO-3" },
    { { "--set", "finetune=qlora", "--set", "framework=deepspeed", "--set", "zero=2", "--set", "dp=2", "--set",
        "offload_params=cpu" }, "offload_params: parameter offload needs zero = 3" },
    { { "--set", "finetune=qlora", "--set", "compute_dtype=fp8" }, "compute_dtype: 'fp8' is not one of" },
  }
  for _, case in ipairs(bad) do
    local args = { "llama2-7b", table.unpack(case[1]) }
    it("rejects " .. table.concat(args, " "), helper.rejection(args, case[2]))
  end
end)
