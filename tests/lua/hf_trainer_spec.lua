-- Hugging Face's measured single-GPU training of BERT-large (transformers'
-- perf_train_gpu_one, v4.26): nvidia-smi's used memory after training, for
-- batch size, gradient accumulation, checkpointing, fp16 AMP, Adafactor
-- and 8-bit Adam. vramplan's total is the CUDA context (as measured there)
-- plus the caching allocator's reservation at the peak; the Trainer of
-- that version keeps gradients between steps (model.zero_grad() under
-- PyTorch 1.x zeroes them in place).
local helper = require("tests.lua.helper")
local json = require("dkjson")

local f = assert(io.open(helper.root .. "/tests/reference/hf_trainer.json", "r"))
local reference = json.decode(f:read("a"))
f:close()

describe("Hugging Face's BERT-large measurements (" .. reference.source .. ")", function()
  for _, run in ipairs(reference.runs) do
    local r = run.recipe
    local args = { "bert-large-uncased", "--set", "seq_len=512", "--set", "attention=eager", "--set", "torch_version=1.13",
      "--set", "cuda_context_mib=" .. reference.cuda_context_mib, "--set", "precision=" .. r.precision,
      "--set", "optimizer=" .. r.optimizer, "--set", "micro_batch=" .. r.micro_batch,
      "--set", "grad_accum=" .. r.grad_accum, "--set", "checkpointing=" .. r.checkpointing,
      "--set", "grads_set_to_none=" .. tostring(r.grads_set_to_none) }
    if run.comparison == "within 5%" then
      it(string.format("%s: %s, measured %d MiB", run.id, run.notes, run.measured_mib), function()
        local total = helper.estimate(table.unpack(args)).per_gpu.peak_total_bytes / 2 ^ 20
        assert.is_true(math.abs(total / run.measured_mib - 1) < 0.05,
          string.format("vramplan %.0f MiB, measured %d MiB", total, run.measured_mib))
      end)
    end
  end
end)
