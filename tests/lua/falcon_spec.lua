-- Falcon (models/falcon-*.lua, models/arch/falcon.lua): its config.json read
-- like the model script, the parameters as transformers' modules hold them
-- and as a Falcon-7B fine-tune's were counted, PEFT's default target and
-- what the engine does not model. (What _split_heads copies, the in-place
-- scores and sums and SDPA's math backend keep is checked against PyTorch
-- in tests/torch/compare.py, cases "falcon".)
local helper = require("tests.lua.helper")

describe("Falcon", function()
  it("reads tiiuae/falcon-7b's config.json like the model script it describes", function()
    helper.assert_same_model("tests/fixtures/falcon-7b-config.json", "models/falcon-7b.lua")
  end)

  it("reads tiiuae/falcon-11B's config.json like the model script it describes", function()
    -- the fixture: tiiuae/falcon-11B's config.json (1.39 kB on the Hub) as
    -- huggingface.co/PrunaAI/tiiuae-falcon-11B-HQQ-4bit-smashed and
    -- thesven/falcon-11B-GPTQ-4bit (less its quantization_config) copy it,
    -- read 2026-12-03
    helper.assert_same_model("tests/fixtures/falcon-11b-config.json", "models/falcon-11b.lua")
  end)

  it("has the parameters of FalconForCausalLM's modules", function()
    -- modeling_falcon.py (transformers 4.5x): per layer query_key_value
    -- (hidden x (hidden + 2 head_dim) for multi_query, hidden x (heads + 2
    -- kv) head_dim for the new decoder architecture), dense, dense_h_to_4h,
    -- dense_4h_to_h (no biases), one LayerNorm (two for falcon-40b and
    -- -180b; one for Falcon2-11B's num_ln_in_parallel_attn 1); the word
    -- embeddings, ln_f, the head tied to them (Falcon2-11B: its own)
    local function count(h, heads, kv, layers, norms, ffn, untied)
      local d = h // heads
      local block = h * (heads + 2 * kv) * d + h * h + 2 * h * (ffn or 4 * h) + norms * 2 * h
      return layers * block + (untied and 2 or 1) * 65024 * h + 2 * h
    end
    local seven = helper.estimate("falcon-7b", "--set", "seq_len=128").model.params
    assert.are.equal(count(4544, 71, 1, 32, 1), seven)
    assert.are.equal(count(8192, 128, 8, 60, 2), helper.estimate("falcon-40b", "--set", "seq_len=128").model.params)
    local big = helper.estimate("falcon-180b", "--set", "seq_len=128").model.params
    assert.are.equal(count(14848, 232, 8, 80, 2), big)
    -- tiiuae/falcon-180B's safetensors total, 179,522,565,120
    -- (https://huggingface.co/api/models/tiiuae/falcon-180B, field
    -- safetensors.total at revision d2ea5531862d4fe907280234990e6380d2befd97,
    -- as a public record of it fetched 2026-10-01 gives it, read
    -- 2026-12-03; the Open LLM Leaderboard's request file for that
    -- revision: "params": 179.523): the checkpoint also stores
    -- lm_head.weight, which transformers ties to the word embeddings
    assert.are.equal(179522565120 - 65024 * 14848, big)
    local eleven = helper.estimate("falcon-11b", "--set", "seq_len=128").model.params
    assert.are.equal(count(4096, 32, 8, 60, 1, 16384, true), eleven)
    -- the Open LLM Leaderboard's request file for tiiuae/falcon-11B
    -- (huggingface.co/datasets/open-llm-leaderboard/requests, read
    -- 2026-12-03): "params": 11.103, the safetensors total in billions
    assert.are.equal(11103, math.floor(eleven / 1e6 + 0.5))
    -- a Falcon-7B fine-tune with one token added (vocab_size 65025) counted
    -- 6,921,725,248 parameters (discuss.huggingface.co/t/43192, "Less
    -- Trainable Parameters after quantization", print_trainable_parameters
    -- of ehartford/WizardLM-Uncensored-Falcon-7b)
    assert.are.equal(6921725248,
      helper.estimate("falcon-7b", "--set", "vocab=65025", "--set", "seq_len=128").model.params)
  end)

  it("takes PEFT's default target for falcon (query_key_value) and Falcon's other names", function()
    local r = helper.estimate("falcon-7b", "--set", "finetune=lora", "--set", "lora_rank=16", "--set", "seq_len=128")
    assert.are.equal(32 * 16 * (4544 + (4544 + 2 * 64)), r.model.trainable_params)
    local named = helper.estimate("falcon-40b", "--set", "finetune=lora", "--set", "lora_rank=8",
      "--set", "lora_targets=dense,dense_h_to_4h,dense_4h_to_h", "--set", "seq_len=128")
    assert.are.equal(60 * 8 * ((8192 + 8192) + 2 * (8192 + 4 * 8192)), named.model.trainable_params)
    -- Falcon2-11B's grouped query_key_value: 4096 in, (32 + 2 x 8) x 128 out
    local eleven = helper.estimate("falcon-11b", "--set", "finetune=lora", "--set", "lora_rank=16",
      "--set", "seq_len=128")
    assert.are.equal(60 * 16 * (4096 + (32 + 2 * 8) * 128), eleven.model.trainable_params)
  end)

  it("runs multi-query under SDPA on its math backend and grouped heads on the fused kernels", function()
    local eager = helper.estimate("falcon-7b", "--set", "seq_len=512", "--set", "attention=eager")
    local sdpa = helper.estimate("falcon-7b", "--set", "seq_len=512", "--set", "attention=sdpa")
    local flash = helper.estimate("falcon-7b", "--set", "seq_len=512", "--set", "attention=flash")
    -- the math backend keeps the scores' softmax like eager attention; flash keeps none
    assert.is_true(flash.per_gpu.activations_bytes < sdpa.per_gpu.activations_bytes)
    assert.is_true(math.abs(sdpa.per_gpu.activations_bytes - eager.per_gpu.activations_bytes) <
      eager.per_gpu.activations_bytes / 4)
    helper.estimate("falcon-40b", "--set", "seq_len=512", "--set", "attention=sdpa")
  end)

  it("refuses what transformers cannot run or the engine does not model", function()
    local err = helper.fails("falcon-7b", "--set", "seq_len=128", "--set", "attention=sdpa-mem-efficient")
    assert.truthy(err:find("memory-efficient kernel refuses Falcon's one key head", 1, true), err)
    err = helper.fails("falcon-7b", "--set", "seq_len=128", "--set", "finetune=prefix", "--set", "num_virtual_tokens=8")
    assert.truthy(err:find("prefix tuning of Falcon", 1, true), err)
    err = helper.fails("falcon-40b", "--set", "seq_len=128", "--set", "framework=megatron", "--set", "tp=2")
    assert.truthy(err:find("Falcon", 1, true), err)
    err = helper.fails("falcon-40b", "--set", "seq_len=128", "--set", "kv_heads=1")
    assert.truthy(err:find("kv_heads", 1, true), err)
    local base = '{"model_type": "falcon", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, ' ..
      '"vocab_size": 256, '
    helper.assert_config_rejected(base .. '"alibi": true}', "alibi")
    helper.assert_config_rejected(base .. '"bias": true}', "bias")
    helper.assert_config_rejected(base .. '"parallel_attn": false}', "parallel_attn")
  end)
end)
