-- Jamba as a hybrid of the core's attention, MLP and MoE with Mamba-1 Lua
-- blocks (models/examples/jamba-v0.1.lua, models/examples/arch/jamba.lua):
-- the parameter count against the module shapes of transformers'
-- JambaForCausalLM added up here, apart from the engine, and the selective
-- scan kernel's allocations against its source.
local helper = require("tests.lua.helper")
local json = require("dkjson")

local model = "models/examples/jamba-v0.1.lua"

-- ai21labs/Jamba-v0.1 config.json
local hidden, layers, heads, kv_heads, intermediate, vocab = 4096, 32, 32, 8, 14336, 65536
local experts, d_state, d_conv, expand, dt_rank = 16, 16, 4, 2, 256
local d_inner = expand * hidden

describe("Jamba v0.1 as a hybrid with Mamba Lua blocks", function()
  it("has the parameters of JambaForCausalLM's modules, about the published 52B", function()
    local head_dim = hidden // heads
    local mamba = hidden * 2 * d_inner -- in_proj
      + d_inner * d_conv + d_inner -- conv1d
      + d_inner * (dt_rank + 2 * d_state) -- x_proj
      + dt_rank * d_inner + d_inner -- dt_proj with its bias
      + d_inner * d_state + d_inner -- A_log, D
      + d_inner * hidden -- out_proj
      + dt_rank + 2 * d_state -- dt_layernorm, b_layernorm, c_layernorm
    local attention = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim
    local mlp = 3 * hidden * intermediate
    local moe = hidden * experts + experts * mlp -- router and experts
    local attention_layers, moe_layers = layers // 8, layers // 2 -- period 8 offset 4; period 2 offset 1
    local total = 2 * vocab * hidden -- embed_tokens and the untied lm_head
      + attention_layers * attention + (layers - attention_layers) * mamba
      + moe_layers * moe + (layers - moe_layers) * mlp
      + layers * 2 * hidden + hidden -- two RMSNorms a layer, final_layernorm
    local o = helper.estimate(model)
    assert.are.equal(total, o.model.params)
    assert.is_true(math.abs(total - 52e9) / 52e9 < 0.01)
  end)

  it("runs attention, Mamba and MoE layers, the scan allocating what selective_scan_cuda.fwd does", function()
    local tokens = 2048
    local out, err, code = helper.run("estimate", model, "--json", "--timeline", "--set", "layers=8", "--set",
      "seq_len=" .. tokens, "--set", "precision=amp-bf16")
    assert(code == 0, err)
    local scans, seen = {}, {}
    for _, e in ipairs(json.decode(out).timeline) do
      if e.phase == "forward" then
        seen[e.op:match("^[^.]+")] = true
        if e.op == "mamba.selective_scan" and e.delta > 0 then scans[#scans + 1] = e.delta end
      end
    end
    assert.truthy(seen.mamba and seen.moe and (seen.attention or seen.self_attn), json.encode(seen))
    -- SelectiveScanFn.forward per call: the contiguous copies of delta and z
    -- (bf16), of B and C (fp32: JambaRMSNorm's fp32 weight times its bf16
    -- output), out_z, out (bf16) and x, (batch, dim, seqlen / 2048, 2 * dstate) fp32
    local expected = { tokens * d_inner * 2, tokens * d_state * 4, tokens * d_state * 4, tokens * d_inner * 2,
                       tokens * d_inner * 2, d_inner * 2 * d_state * 4, tokens * d_inner * 2 }
    table.sort(expected)
    assert.are.equal(7 * #expected, #scans) -- seven Mamba layers in a period of eight
    local first = { table.unpack(scans, 1, #expected) }
    table.sort(first)
    assert.are.same(expected, first)
  end)

  it("gives the same figures folded and layer by layer", function()
    helper.assert_folds_agree(helper.model(model, 16), {
      { precision = "amp-bf16", checkpointing = "full" },
      { finetune = "qlora", lora_targets = "all-linear", precision = "amp-bf16" },
    })
  end)
end)
