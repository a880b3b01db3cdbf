-- PYTORCH_CUDA_ALLOC_CONF's options in the simulated caching allocator
-- (recipe key alloc_conf; engine/core/alloc_conf.c and allocator.c) against
-- tools/allocator_replay.py, which implements the same rules apart: exactly
-- on random malloc/free sequences (tests/allocator/differential.py), and on
-- a step's timeline within the two replays' known difference in pairing
-- frees with their allocations (tests/lua/allocator_spec.lua).
local helper = require("tests.lua.helper")

local PYTHON = "/usr/bin/python3"
local MIB = 2 ^ 20

local function quote(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

local function sh(cmd)
  local p = io.popen(cmd .. " 2>&1")
  local text = p:read("a")
  local ok = p:close()
  return ok, text
end

describe("the allocator's configuration (alloc_conf)", function()
  it("agrees with tools/allocator_replay.py after every call of random sequences, under each option", function()
    local driver = helper.write("", ".bin")
    local ok, text = sh(string.format("cc -std=c11 -O1 -I%s/engine/core -o %s %s/tests/allocator/driver.c " ..
      "%s/build/obj/allocator.o %s/build/obj/alloc_pool.o %s/build/obj/alloc_conf.o %s/build/obj/ledger.o",
      helper.root, quote(driver), helper.root, helper.root, helper.root, helper.root, helper.root))
    assert(ok, text)
    ok, text = sh(string.format("%s %s/tests/allocator/differential.py %s 20", PYTHON, helper.root, quote(driver)))
    assert.is_true(ok, text)
    assert.is_truthy(text:find("expandable_segments:True': 20 sequences agree", 1, true), text)
  end)

  -- the same timeline through both replays: within 1.5 % (their pairing of
  -- frees differs, 0.3 % apart with no option; expandable_segments 1.0 %
  -- since SDPA runs cuDNN's kernel on the H100, whose head-merge copies are
  -- the same size as the kernel's outputs (0.5 % with sdpa_backend = flash);
  -- expandable_segments with max_split_size_mb together is left out: there
  -- the pairing's small differences move whole segments, 16 % apart on
  -- this model)
  local timeline
  for _, conf in ipairs({ "expandable_segments:True", "max_split_size_mb:128", "roundup_power2_divisions:4",
    "roundup_power2_divisions:2,max_split_size_mb:64" }) do
    it("reserves as tools/allocator_replay.py does on a step's timeline within 1.5 %: " .. conf, function()
      if not timeline then
        local out, err, code = helper.run("estimate", "llama3.2-1b", "--gpu", "h100-80gb", "--json", "--timeline")
        assert(code == 0, err)
        timeline = helper.write(out, ".json")
      end
      local ok, text = sh(string.format("%s %s/tools/allocator_replay.py %s --alloc-conf %s", PYTHON, helper.root,
        quote(timeline), quote(conf)))
      assert(ok, text)
      local last = text:match("reserved after each step [%d, ]-(%d+) MiB")
      assert(last, text)
      local tool = tonumber(last)
      local g = helper.estimate("llama3.2-1b", "--gpu", "h100-80gb", "--set", "allocator=simulated",
        "--set", "alloc_conf=" .. conf).per_gpu
      local engine = g.peak_reserved_simulated_bytes / MIB
      assert.is_true(math.abs(engine / tool - 1) < 0.015, string.format("engine %.0f MiB, tool %d MiB", engine, tool))
    end)
  end

  it("is echoed as PyTorch's text, in a fixed order", function()
    local r = helper.estimate("gpt2", "--gpu", "h100-80gb", "--set", "allocator=simulated",
      "--set", "alloc_conf=max_split_size_mb:256, expandable_segments:True")
    assert.are.equal("expandable_segments:True,max_split_size_mb:256", r.recipe.alloc_conf)
  end)

  it("rejects a value out of range, naming the option",
    helper.rejection({ "gpt2", "--set", "alloc_conf=max_split_size_mb:10" }, "max_split_size_mb"))
  it("rejects expandable_segments other than True or False",
    helper.rejection({ "gpt2", "--set", "alloc_conf=expandable_segments:true" }, "expandable_segments"))
  it("rejects divisions that are no power of 2",
    helper.rejection({ "gpt2", "--set", "alloc_conf=roundup_power2_divisions:3" }, "roundup_power2_divisions"))
  it("refuses an option it does not simulate, by name",
    helper.rejection({ "gpt2", "--set", "alloc_conf=garbage_collection_threshold:0.8" },
      "garbage_collection_threshold"))
  it("rejects an unknown option by name", helper.rejection({ "gpt2", "--set", "alloc_conf=max_splt_size_mb:128" },
    "max_splt_size_mb"))
end)
