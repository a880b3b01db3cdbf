-- NCCL's buffers in the runtime's memory (engine/step/estimate.c,
-- per_gpu.nccl_bytes): against what NCCL's own logs show (the buffer each
-- connection allocates, the channels a communicator opens) and its source's
-- defaults; nothing for a single GPU.
local helper = require("tests.lua.helper")

local MIB = 2 ^ 20

local function nccl(...)
  return helper.estimate("llama3.2-1b", "--set", "seq_len=256", ...).per_gpu
end

describe("NCCL's buffers", function()
  it("are one 10 MiB allocation per connection, as NCCL_DEBUG_SUBSYS=ALLOC shows (NVIDIA/nccl#1685)", function()
    -- one communicator (dp 2) of one channel: LL 512 KiB + LL128 4.6875 MiB
    -- + SIMPLE 4 MiB, in 2 MiB granules: the logged 10485760 bytes
    assert.are.equal(10485760, nccl("--gpu", "h100-80gb", "--set", "dp=2", "--set", "nccl_channels=1").nccl_bytes)
  end)

  it("open 24 channels over NVLink and 2 over PCIe, as NCCL's init logs say", function()
    -- "24 coll channels" (NVIDIA/nccl#1781), "2 coll channels" (ParCIS/Chimera#2)
    assert.are.equal(24 * 10 * MIB, nccl("--gpu", "h100-80gb", "--set", "dp=8").nccl_bytes)
    assert.are.equal(2 * 10 * MIB, nccl("--gpu", "l4", "--set", "dp=2").nccl_bytes)
  end)

  it("come once per communicator: data, tensor and pipeline parallel groups", function()
    local g = nccl("--gpu", "h100-80gb", "--set", "framework=megatron", "--set", "tp=2", "--set", "pp=2",
      "--set", "dp=2")
    assert.are.equal(3 * 24 * 10 * MIB, g.nccl_bytes)
    -- and they are part of the runtime's memory, in the total
    assert.are.equal(g.cuda_context_bytes + g.cublas_workspace_bytes + g.nccl_bytes, g.runtime_bytes)
  end)

  it("are none on one GPU", function()
    assert.are.equal(0, nccl("--gpu", "h100-80gb").nccl_bytes)
  end)

  it("rejects a channel count NCCL cannot open", helper.rejection({ "gpt2", "--set", "nccl_channels=65" },
    "nccl_channels"))
end)
