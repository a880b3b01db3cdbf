-- NCCL's buffers in the runtime's memory (engine/step/nccl.c,
-- per_gpu.nccl_bytes and per_gpu.nccl_groups), worked out here by hand from
-- NCCL 2.30.7's constants, not from the engine: each connection's FIFOs,
-- their 2 MiB granules, the channels a communicator opens, whom each group
-- connects to. Where NCCL's own logs show a figure, the arithmetic meets it.
local helper = require("tests.lua.helper")

local MIB = 2 ^ 20
local GRANULE = 2 * MIB -- CUDA_IPC_MIN (src/include/comm.h)
local function granules(bytes) return math.ceil(bytes / GRANULE) * GRANULE end

-- src/include/device.h and src/init.cc: LL = 8 lines per thread x 512
-- threads x NCCL_STEPS 8 x 16 bytes; LL128 = 120 elements x 640 threads x 8
-- steps x 8 bytes; SIMPLE = NCCL_BUFFSIZE 4 MiB; ncclSendMem and ncclRecvMem
-- padded to 4096 bytes (src/include/comm.h)
local LL, LL128, SIMPLE, MEM = 8 * 512 * 8 * 16, 120 * 640 * 8 * 8, 4 * MIB, 4096

-- src/transport/p2p.cc: without P2P read the receiver holds its FIFOs for
-- all three protocols, the sender only its ncclSendMem
local P2P_SEND, P2P_RECV = granules(MEM), granules(MEM + LL + LL128 + SIMPLE)
-- with P2P read (A100 over NVLink) the SIMPLE FIFO moves to the sender
local READ_SEND, READ_RECV = granules(MEM + SIMPLE), granules(MEM + LL + LL128)
-- src/transport/net.cc with GPUDirect RDMA: the sender's LL128 and SIMPLE
-- on the GPU (LL in host memory), the receiver's three
local NET_SEND, NET_RECV = granules(LL128 + SIMPLE), granules(LL + LL128 + SIMPLE)
-- src/transport/nvls.cc on compute capability 9.0: 16 channels x 2 x 8
-- steps x 128 KiB per head, plus 64-byte credits, each allocation in granules
local function nvls(heads) return granules(16 * 2 * 8 * 128 * 1024 * heads) + granules(16 * 2 * 64 * heads) end

local function per_gpu(model, ...)
  return helper.estimate(model, "--set", "seq_len=256", ...).per_gpu
end
local function nccl(...) return per_gpu("llama3.2-1b", ...) end
local function group(g, name)
  for _, x in ipairs(g.nccl_groups) do if x.name == name then return x end end
  error("no NCCL group " .. name)
end

describe("NCCL's buffers", function()
  it("are the two allocations NCCL_DEBUG_SUBSYS=ALLOC logs per connection on H100 (NVIDIA/nccl#1685)", function()
    assert.are.equal(10485760, P2P_RECV)
    assert.are.equal(2097152, P2P_SEND)
    -- one channel of one ring: a send and a receive connection
    local g = nccl("--gpu", "h100-80gb", "--set", "dp=2", "--set", "nccl_channels=1", "--set", "nccl_nvls=false")
    assert.are.equal(P2P_SEND + P2P_RECV, g.nccl_bytes)
    assert.are.equal(12 * MIB, g.nccl_bytes)
  end)

  it("open 24 ring channels over NVLink, 2 over PCIe; P2P read moves bytes but not the sum", function()
    local h100 = nccl("--gpu", "h100-80gb", "--set", "dp=8")
    -- "24 coll channels" (NVIDIA/nccl#1781), and NVLS over the 8 GPUs' NVSwitch
    assert.are.equal(24 * (P2P_SEND + P2P_RECV) + nvls(8), h100.nccl_bytes)
    assert.are.equal(546 * MIB, h100.nccl_bytes)
    local d = group(h100, "dp")
    assert.are.same({ "collective", 8, 8, 1, 24 }, { d.pattern, d.ranks, d.local_ranks, d.nodes, d.channels })
    assert.are.equal(24 * 12 * MIB, d.ring_bytes)
    assert.are.equal(nvls(8), d.nvls_bytes)
    -- A100 (8.0): P2P read, no NVLS (compute capability below 9.0)
    assert.are.equal(24 * (READ_SEND + READ_RECV), nccl("--gpu", "a100-80gb", "--set", "dp=8").nccl_bytes)
    -- "2 coll channels" over PCIe (ParCIS/Chimera#2)
    assert.are.equal(2 * (P2P_SEND + P2P_RECV), nccl("--gpu", "l4", "--set", "dp=2").nccl_bytes)
  end)

  it("NVLS comes off with nccl_nvls = false (NCCL_NVLS_ENABLE=0)", function()
    local on = nccl("--gpu", "h100-80gb", "--set", "dp=4")
    local off = nccl("--gpu", "h100-80gb", "--set", "dp=4", "--set", "nccl_nvls=false")
    assert.are.equal(nvls(4), on.nccl_bytes - off.nccl_bytes)
    assert.are.equal(130 * MIB, nvls(4))
  end)

  it("count rings, trees and NVLS for a group over two and four nodes", function()
    -- dp 16 over nodes of 8: each of the 24 rings leaves the node at one
    -- rank and enters at another; the busiest rank does so on 24 / 8 = 3
    -- channels, its send and receive there over the network
    local two = group(nccl("--gpu", "h100-80gb", "--set", "dp=16", "--set", "gpus_per_node=8"), "dp")
    assert.are.same({ 8, 2 }, { two.local_ranks, two.nodes })
    local ring = 24 * (P2P_SEND + P2P_RECV) + 3 * (NET_SEND - P2P_SEND) + 3 * (NET_RECV - P2P_RECV)
    assert.are.equal(ring, two.ring_bytes)
    -- the tree's chain inside the node adds the reverse pair on each
    -- channel; over two nodes its one peer across is the ring's neighbour
    assert.are.equal(24 * (P2P_SEND + P2P_RECV), two.tree_bytes)
    assert.are.equal(nvls(8), two.nvls_bytes)
    -- over four nodes the head's parent and two children, both ways, on its 3 channels
    local four = group(nccl("--gpu", "h100-80gb", "--set", "dp=32", "--set", "gpus_per_node=8"), "dp")
    assert.are.equal(24 * (P2P_SEND + P2P_RECV) + 3 * 3 * (NET_SEND + NET_RECV), four.tree_bytes)
    assert.are.equal(four.ring_bytes + four.tree_bytes + four.nvls_bytes, four.bytes)
  end)

  it("connect an expert-parallel all-to-all to every peer on 32 channels each (NVIDIA/nccl#1685)", function()
    -- 8 x H100: "32 channels per pair of GPUs"; each rank sends to and
    -- receives from 7 peers: 7 x 32 x 12 MiB = 2.625 GiB (the issue saw
    -- nvidia-smi rise 3.28 GB after the first all_to_all_single)
    local g = per_gpu("mixtral-8x7b", "--gpu", "h100-80gb", "--set", "framework=megatron", "--set", "dp=8",
      "--set", "ep=8")
    local ep = group(g, "ep")
    assert.are.same({ "all-to-all", 7, 32 }, { ep.pattern, ep.peers, ep.channels })
    assert.are.equal(7 * 32 * (P2P_SEND + P2P_RECV), ep.p2p_bytes)
    assert.are.equal(2688 * MIB, ep.bytes)
    assert.are.equal(ep.bytes + group(g, "dp").bytes, g.nccl_bytes)
  end)

  it("give a pipeline's middle stages two neighbours, its ends one, and the network's pools across nodes", function()
    local r = helper.estimate("llama3.2-1b", "--set", "seq_len=256", "--gpu", "h100-80gb", "--set", "framework=megatron",
      "--set", "tp=2", "--set", "pp=4")
    local pp = {}
    for i, st in ipairs(r.per_rank) do pp[i] = group(st, "pp").p2p_bytes end
    local one = 32 * (P2P_SEND + P2P_RECV) -- a neighbour both ways, 32 channels
    assert.are.same({ one, 2 * one, 2 * one, one }, pp)
    -- tp 8 fills the node: the stages talk over the network, through one
    -- send and one receive pool of 32 p2p channels x 16 steps x 128 KiB
    local across = nccl("--gpu", "h100-80gb", "--set", "framework=megatron", "--set", "tp=8", "--set", "pp=2",
      "--set", "gpus_per_node=8")
    assert.are.equal(2 * granules(32 * 16 * 128 * 1024), group(across, "pp").p2p_bytes)
    assert.are.equal(128 * MIB, group(across, "pp").p2p_bytes)
  end)

  it("use 2 channels per peer without NVSwitch (V100's hybrid cube mesh, PCIe)", function()
    -- ncclTopoGetNchannels: 2 x the NVLinks of the pair with the fewest, 2 over PCIe
    for _, gpu in ipairs({ "v100-32gb", "l4" }) do
      local g = nccl("--gpu", gpu, "--set", "framework=megatron", "--set", "pp=2", "--set", "dp=2",
        "--set", "precision=mixed-fp16")
      assert.are.equal(2, group(g, "pp").channels, gpu)
      assert.are.equal(2 * (P2P_SEND + P2P_RECV), group(g, "pp").p2p_bytes, gpu)
    end
  end)

  it("context parallelism: Transformer Engine's p2p ring, PyTorch's all-gather", function()
    local te = group(nccl("--gpu", "h100-80gb", "--set", "framework=megatron", "--set", "cp=4"), "cp")
    -- send to the next rank, receive from the previous, 32 channels each
    assert.are.equal(32 * (P2P_SEND + P2P_RECV), te.p2p_bytes)
    local torch = group(nccl("--gpu", "h100-80gb", "--set", "framework=fsdp2", "--set", "cp=4"), "cp")
    assert.are.equal(24 * (P2P_SEND + P2P_RECV) + nvls(4), torch.bytes)
  end)

  it("move the verdict: a run that fits without NVLS's 258 MiB does not with them", function()
    local function run(nvls_on, context)
      local args = { "llama3.2-1b", "--set", "seq_len=256", "--gpu", "h100-80gb", "--set", "dp=8",
        "--set", "nccl_nvls=" .. tostring(nvls_on) }
      if context then args[#args + 1] = "--set"; args[#args + 1] = "cuda_context_mib=" .. context end
      return helper.estimate(table.unpack(args))
    end
    -- leave 100 MiB of headroom by the context's size, then turn NVLS on
    local context = 426 + (run(false).headroom_bytes - 100 * MIB) / MIB
    local off, on = run(false, context), run(true, context)
    assert.is_true(off.fits)
    assert.are.equal(100 * MIB, off.headroom_bytes)
    assert.is_false(on.fits)
    assert.are.equal(100 * MIB - nvls(8), on.headroom_bytes)
    -- and the rest of the estimate is the same
    assert.are.equal(off.per_gpu.peak_reserved_bytes, on.per_gpu.peak_reserved_bytes)
  end)

  it("come once per communicator and are part of the runtime's memory", function()
    local g = nccl("--gpu", "h100-80gb", "--set", "framework=megatron", "--set", "tp=2", "--set", "pp=2",
      "--set", "dp=2")
    local sum = 0
    for _, x in ipairs(g.nccl_groups) do sum = sum + x.bytes end
    assert.are.equal(3, #g.nccl_groups)
    assert.are.equal(sum, g.nccl_bytes)
    -- (cuBLAS's workspaces are the caching allocator's under PyTorch 2.x)
    assert.are.equal(g.cuda_context_bytes + g.nccl_bytes, g.runtime_bytes)
  end)

  it("list each group in the text report", function()
    local out = helper.run("estimate", "llama3.2-1b", "--set", "seq_len=256", "--gpu", "h100-80gb", "--set", "dp=8")
    assert.truthy(out:find("NCCL dp%s+546%.0 MiB%s+8 ranks on 1 node, collective, 24 channels: rings 288%.0 MiB, NVLS 258%.0 MiB"))
  end)

  it("are none on one GPU", function()
    local g = nccl("--gpu", "h100-80gb")
    assert.are.equal(0, g.nccl_bytes)
    assert.are.equal(0, #g.nccl_groups)
  end)

  it("rejects a channel count NCCL cannot open", helper.rejection({ "gpt2", "--set", "nccl_channels=65" },
    "nccl_channels"))
end)
