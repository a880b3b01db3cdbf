-- The text report quotes how close vramplan has been to the GPU
-- measurements in tests/reference/ (scripts/lib/vramplan/accuracy.lua,
-- written by tools/accuracy.lua), and warns when the headroom is smaller.
local helper = require("tests.lua.helper")

describe("accuracy notes", function()
  it("quote a summary that is current with tests/reference/", function()
    local ok = os.execute(string.format("cd %s && lua5.4 tools/accuracy.lua --check >/dev/null", helper.root))
    assert.is_true(ok == true or ok == 0, "run lua5.4 tools/accuracy.lua --write")
  end)

  it("say how close vramplan has been on runs of the same kind", function()
    local out = helper.run("estimate", "llama3.2-1b", "--gpu", "a100-80gb", "--set", "seq_len=512")
    local a = require("vramplan.accuracy").full
    assert.truthy(out:find(string.format("on %d published GPU measurements of full-parameter training", a.runs), 1, true), out)
  end)

  it("warn when the headroom is smaller than the largest under-estimate", function()
    local e = helper.estimate("llama3.2-1b", "--set", "seq_len=512")
    local a = require("vramplan.accuracy").full
    -- a GPU with room for the estimate and half the error
    local mib = e.per_gpu.peak_total_bytes * (1 - a.most_low / 2) / 2 ^ 20
    local gpu = helper.write(string.format('return gpu { name = "tight", memory_mib = %.3f }', mib))
    local out = helper.run("estimate", "llama3.2-1b", "--gpu", gpu, "--set", "seq_len=512")
    assert.truthy(out:find("fits on tight", 1, true), out)
    assert.truthy(out:find("warning: ", 1, true), out)
    local roomy = helper.write('return gpu { name = "roomy", memory_mib = 1000000 }')
    assert.is_nil((helper.run("estimate", "llama3.2-1b", "--gpu", roomy, "--set", "seq_len=512")):find("warning: ", 1, true))
  end)
end)
