-- T5 encoder-decoders (models/arch/t5.lua): config.json files read like the
-- model scripts, what the decoder's caches keep, the decoder's own length,
-- and what is refused. (The activations are checked against PyTorch in
-- tests/torch/compare.py; DeepSpeed's ZeRO-3 estimator in parallel_spec,
-- PEFT's measured runs in peft_memory_spec.)
local helper = require("tests.lua.helper")

local fails = helper.fails

describe("T5", function()
  it("reads T5, T5 v1.1 and mT5 config.json files like the model scripts they describe", function()
    helper.assert_same_model("tests/fixtures/t5-large-config.json", "models/t5-large.lua")
    helper.assert_same_model("tests/fixtures/t0_3b-config.json", "models/t0-3b.lua")
    helper.assert_same_model("tests/fixtures/mt0-xxl-config.json", "models/mt0-xxl.lua")
  end)

  it("refuses a config of the encoder alone", function()
    helper.assert_config_rejected('{"model_type": "t5", "is_encoder_decoder": false}', "is_encoder_decoder")
  end)

  it("keeps the decoder's self- and cross-attention keys and values in the outputs with use_cache", function()
    -- EncoderDecoderCache: per decoder layer the self-attention's keys and
    -- values (target length) and the cross-attention's (input length),
    -- heads x d_kv wide, in fp32 here
    local b, s, t, layers, inner = 2, 64, 32, 24, 16 * 64
    local function forward_bytes(cache)
      return helper.estimate("t5-large", "--set", "precision=fp32", "--set", "micro_batch=" .. b, "--set",
        "seq_len=" .. s, "--set", "target_len=" .. t, "--set", "use_cache=" .. cache).per_gpu.activations_bytes
    end
    assert.are.equal(layers * 2 * b * (t + s) * inner * 4, forward_bytes("true") - forward_bytes("false"))
  end)

  it("runs the decoder on target_len and the encoder on seq_len", function()
    local function logits_side(s, t)
      local target = t and { "--set", "target_len=" .. t } or {}
      return helper.estimate("t5-large", "--set", "precision=fp32", "--set", "micro_batch=1", "--set",
        "seq_len=" .. s, "--set", "use_cache=false", table.unpack(target))
    end
    local base = logits_side(128, 16)
    assert.are.equal(16, base.recipe.target_len)
    -- a longer target grows the vocabulary-wide logits; a longer input does not
    local longer_target, longer_input = logits_side(128, 32), logits_side(144, 16)
    local vocab_rows = 16 * 32128 * 4 -- 16 more rows of fp32 logits
    assert.is_true(longer_target.per_gpu.activations_bytes - base.per_gpu.activations_bytes > vocab_rows)
    assert.is_true(longer_input.per_gpu.activations_bytes - base.per_gpu.activations_bytes
      < longer_target.per_gpu.activations_bytes - base.per_gpu.activations_bytes)
    -- without target_len the decoder runs on seq_len
    assert.are.equal(128, logits_side(128).recipe.target_len)
  end)

  it("turns use_cache off under gradient checkpointing and keeps one hidden state per checkpointed layer", function()
    -- T5Stack's checkpointed call saves each block's inputs: the hidden
    -- states, and the position biases and the encoder's output, which are
    -- tensors every block shares; every 2 layers halves the hidden states
    local function forward_bytes(...)
      return helper.estimate("t5-large", "--set", "precision=fp32", "--set", "micro_batch=2", "--set", "seq_len=64",
        "--set", "target_len=64", ...).per_gpu.activations_bytes
    end
    local every1, every2 = forward_bytes("--set", "checkpointing=full"), forward_bytes("--set", "checkpointing=every-2")
    local hidden = 2 * 64 * 1024 * 4 -- one [b, s, d] fp32 tensor
    assert.are.equal(48 / 2 * hidden, every1 - every2)
    assert.are.equal(forward_bytes("--set", "checkpointing=full"),
      forward_bytes("--set", "checkpointing=full", "--set", "use_cache=true"))
  end)

  it("puts prompt tuning's virtual tokens before the encoder's inputs, from a table of two sets", function()
    -- PeftModelForSeq2SeqLM: num_transformer_submodules = 2, so the table
    -- holds 2 x num_virtual_tokens rows, of which the encoder gets the
    -- first set; the encoder runs on seq_len + num_virtual_tokens, the
    -- decoder on the labels as they are
    local function run(tokens)
      return helper.estimate("t5-large", "--set", "finetune=prompt", "--set", "num_virtual_tokens=" .. tokens,
        "--set", "precision=fp32", "--set", "micro_batch=1", "--set", "seq_len=64", "--set", "target_len=16")
    end
    local r = run(20)
    assert.are.equal(2 * 20 * 1024, r.model.trainable_params)
    assert.are.equal(4 * 2 * 20 * 1024, r.per_gpu.grads_bytes)
    assert.is_true(run(20).per_gpu.activations_bytes > run(10).per_gpu.activations_bytes)
  end)

  it("keeps wo in fp32, unquantized, when the model is loaded quantized (_keep_in_fp32_modules)", function()
    -- LLM.int8 against LoRA on the same bf16 model: every other linear goes
    -- from 2 bytes an element to 1 plus an fp32 scale per output row (SCB),
    -- wo from 2 bytes to 4. t5-large: 24 encoder blocks (q, k, v, o and wi),
    -- 24 decoder blocks (two attentions and wi), d_model 1024, d_ff 4096.
    local function params(...)
      return helper.estimate("t5-large", "--set", "precision=bf16", ...).per_gpu.params_bytes
    end
    local square, wi, layers = 1024 * 1024, 1024 * 4096, 24
    local quantized = layers * (4 * square + wi) + layers * (8 * square + wi)
    local rows = layers * (4 * 1024 + 4096) + layers * (8 * 1024 + 4096)
    local wo = 2 * layers * 4096 * 1024
    local want = -quantized + 4 * rows + 2 * wo
    assert.are.equal(want, params("--set", "finetune=qlora", "--set", "quant=int8") - params("--set", "finetune=lora"))
  end)

  it("clamps fp16 hidden states after every layer of every block, keeping each clamp's input", function()
    -- mixed-fp16 (the model itself in fp16, DeepSpeed's): T5Block's clamp
    -- after each layer keeps its input and two 0-dim fp32 bounds (512
    -- bytes each on CUDA); the clamped copy is what the next norm keeps.
    -- bf16 has no clamps and the same sizes. t5-large: 24 encoder blocks
    -- (2 layers) over 512 tokens, 24 decoder blocks (3) over 128, d_model 1024.
    local function activations(precision)
      return helper.estimate("t5-large", "--set", "precision=" .. precision, "--set", "seq_len=512",
        "--set", "target_len=128").per_gpu.activations_bytes
    end
    local want = 24 * 2 * (512 * 1024 * 2 + 2 * 512) + 24 * 3 * (128 * 1024 * 2 + 2 * 512)
    assert.are.equal(want, activations("mixed-fp16") - activations("mixed-bf16"))
  end)

  it("keeps wo in fp32 when the model is loaded in fp16", function()
    local function params(precision)
      return helper.estimate("t5-large", "--set", "precision=" .. precision).per_gpu.params_bytes
    end
    assert.are.equal(2 * 24 * 4096 * 1024 * 2, params("fp16") - params("bf16"))
  end)

  it("names what it does not model", function()
    assert.truthy(fails("t5-large", "--set", "attention=flash"):find("attention: T5's position-biased attention", 1, true))
    assert.truthy(fails("t5-large", "--set", "checkpointing=selective")
      :find("checkpointing: selective recompute is Megatron-LM's", 1, true))
    assert.truthy(fails("t5-large", "--set", "precision=fp8"):find("precision: fp8 is not modelled for T5", 1, true))
    -- PEFT views d_model as num_heads rows for T5's d_kv-wide keys; t5-3b
    -- has 32 heads of 128 over d_model 1024
    assert.truthy(fails("t5-3b", "--set", "finetune=prefix", "--set", "num_virtual_tokens=8")
      :find("finetune: PEFT's prefix splits d_model over the heads", 1, true))
    assert.truthy(fails("t5-large", "--set", "decoder_layers=12", "--set", "finetune=prefix", "--set",
      "num_virtual_tokens=8"):find("finetune: PEFT's prefix has num_layers (the encoder's) layers", 1, true))
    assert.truthy(fails("t5-large", "--set", "framework=megatron", "--set", "tp=2")
      :find("framework: encoder-decoder models are modelled as transformers runs them", 1, true))
    assert.truthy(fails("llama2-7b", "--set", "target_len=64")
      :find("target_len: the decoder's length of an encoder-decoder model", 1, true))
    assert.truthy(fails("t5-large", "--set", "feed_forward=gated-swish"):find("feed_forward: unknown activation", 1, true))
  end)
end)

describe("T5 prefix tuning", function()
  -- PEFT 0.14+ with transformers 4.47+: get_prompt's EncoderDecoderCache
  -- has its cross-attention cache replaced by an empty one, and the encoder
  -- gets no cache: only the decoder's self-attention joins the prefix.
  it("joins the prefix to the decoder's self-attention keys alone", function()
    local r = helper.estimate("t5-large", "--set", "finetune=prefix", "--set", "num_virtual_tokens=20", "--set",
      "precision=bf16", "--set", "micro_batch=1", "--set", "seq_len=256", "--set", "target_len=64", "--timeline")
    local joined = { keys = 0, values = 0 }
    for _, e in ipairs(r.timeline) do
      assert.is_nil(e.op:find("cache.cross_", 1, true), "a cross-attention cache joined something")
      local kind = e.op:match("^cache%.(%a+)_cat$")
      if kind and e.delta > 0 then
        joined[kind] = joined[kind] + 1
        assert.is_true(e.layer >= 24, "an encoder layer joined a prefix") -- layers 24-47 are the decoder's
        -- [1, 16 heads, 20 + 64 positions, 64] in bf16
        assert.are.equal(16 * (20 + 64) * 64 * 2, e.delta)
      end
    end
    assert.are.same({ keys = 24, values = 24 }, joined)
  end)

  it("trains num_virtual_tokens rows of 2 x num_layers x d_model, not doubled for the two stacks", function()
    local r = helper.estimate("mt0-xxl", "--set", "finetune=prefix", "--set", "num_virtual_tokens=10", "--set",
      "precision=bf16")
    assert.are.equal(10 * 2 * 24 * 4096, r.model.trainable_params)
    assert.are.equal(4 * r.model.trainable_params, r.per_gpu.grads_bytes) -- fp32 beside the bf16 model
  end)
end)
