-- `vramplan recommend`: each row is what `estimate` gives on that hardware,
-- the fewest that fit (one fewer does not), and the rows cheapest first.
local helper = require("tests.lua.helper")
local json = require("dkjson")

local base = { "llama3.2-1b", "--set", "seq_len=2048", "--set", "checkpointing=full" }

local function args_for(row)
  local args = { "llama3.2-1b", "--gpu", row.name }
  for k, v in pairs(row.changes) do
    args[#args + 1] = "--set"
    args[#args + 1] = k .. "=" .. tostring(v)
  end
  return args
end

describe("vramplan recommend", function()
  local out, err, code = helper.run("recommend", "--json", "--tokens", "2e8", table.unpack(base))
  local o = code == 0 and json.decode(out) or { recommend = {} }

  it("gives every catalog entry a row", function()
    assert.are.equal(0, code, err)
    local gpus = select(1, helper.run("list", "gpus"))
    local n = 0
    for _ in gpus:gmatch("[^\n]+") do n = n + 1 end
    local seen = 0
    for _, r in ipairs(o.recommend) do if r.kind == "gpu" then seen = seen + 1 end end
    assert.are.equal(n, seen)
  end)

  it("puts the cheapest first, then the ones without a price, then what cannot run", function()
    local state, last = 1, -1
    for _, r in ipairs(o.recommend) do
      local s = r.cost and 1 or r.gpus and 2 or 3
      assert.is_true(s >= state, r.name .. " out of order")
      if s > state then state, last = s, -1 end
      if s == 1 then
        assert.is_true(r.cost >= last, r.name)
        last = r.cost
      end
    end
  end)

  it("rows estimate as they say, on the hardware they name", function()
    local checked = 0
    for _, r in ipairs(o.recommend) do
      if r.gpus and checked < 6 and (r.kind == "gpu" or checked % 2 == 0) then
        local e = helper.estimate(table.unpack(args_for(r)))
        assert.are.equal(e.per_gpu.peak_total_bytes, r.peak_total_bytes, r.name)
        assert.is_true(e.fits, r.name)
        assert.are.equal(r.gpus, e.recipe.dp * e.recipe.tp * e.recipe.pp * e.recipe.cp, r.name)
        -- the time to train is the tokens at the estimate's throughput
        assert.is_true(math.abs(r.hours - 2e8 / e.time.tokens_per_s / 3600) < 1e-6 * r.hours, r.name)
        checked = checked + 1
      end
    end
    assert.is_true(checked >= 3)
  end)

  it("uses the fewest GPUs: one fewer does not fit", function()
    -- a model that needs several of the smaller GPUs
    local o3 = json.decode((helper.run("recommend", "--json", "llama3.2-3b", "--set", "seq_len=2048",
      "--set", "checkpointing=full")))
    local checked = 0
    for _, r in ipairs(o3.recommend) do
      if r.kind == "gpu" and r.gpus and r.gpus > 1 then
        checked = checked + 1
        r.changes.seq_len = nil
        local args = args_for(r)
        args[1] = "llama3.2-3b"
        args[#args + 1] = "--set"
        args[#args + 1] = "seq_len=2048"
        for i = 1, #args do if args[i]:match("^dp=") then args[i] = "dp=" .. (r.gpus - 1) end end
        local e = helper.estimate(table.unpack(args))
        assert.is_false(e.fits, r.name)
      end
    end
    assert.is_true(checked >= 2, checked .. " GPUs needed more than one")
  end)

  it("prices whole instances at their published price", function()
    local priced = 0
    for _, r in ipairs(o.recommend) do
      if r.kind == "instance" and r.cost then
        priced = priced + 1
        assert.is_true(r.price_per_hour > 0)
        assert.is_true(math.abs(r.cost - r.hours * r.price_per_hour * r.units) < 1e-6 * r.cost, r.name)
      end
    end
    assert.is_true(priced >= 5)
  end)

  it("says why a GPU cannot run the recipe", function()
    local v100
    for _, r in ipairs(o.recommend) do if r.name == "v100-16gb" then v100 = r end end
    assert.truthy(v100.reason:find("bf16", 1, true))
  end)

  it("says the token count in words a reader reads, not in exponent notation", function()
    local out = helper.run("recommend", "--tokens", "2.5e9", table.unpack(base))
    assert.truthy(out:find("the fewest of each that fit, and 2.50 B training tokens on them\n", 1, true), out)
  end)

  it("keeps plain data parallelism where it fits and sharding is not clearly faster", function()
    -- LoRA on Llama-3-8B: a whole replica fits a B200 (about 30 GiB of 180);
    -- ZeRO-3 only shards a frozen base the optimizer never touches
    local o8 = json.decode((helper.run("recommend", "--json", "llama3-8b", "--set", "finetune=lora")))
    local row
    for _, r in ipairs(o8.recommend) do if r.name == "lambda-8x-b200-sxm" then row = r end end
    assert.is_table(row)
    assert.are.equal("ddp", row.sharding)
  end)

  it("keeps a global_batch: whole units whose ranks divide it, and says so where none do", function()
    -- global_batch 12: the fewest GPUs that fit may not divide it (estimate refuses micro_batch x dp that does
    -- not); an 8-GPU node never does. Before, every node and instance said "nothing up to 4096 GPUs fits".
    local args = { "llama3.2-1b", "--set", "seq_len=2048", "--set", "checkpointing=full", "--set", "global_batch=12" }
    local og = json.decode((helper.run("recommend", "--json", table.unpack(args))))
    local fitting, refused = 0, 0
    for _, r in ipairs(og.recommend) do
      if r.gpus then
        local e = helper.estimate(table.unpack(args_for(r)))
        assert.is_true(e.fits, r.name)
        assert.are.equal(0, 12 % (e.recipe.micro_batch * e.recipe.dp), r.name)
        assert.are.equal(e.per_gpu.peak_total_bytes, r.peak_total_bytes, r.name)
        fitting = fitting + 1
      elseif r.name == "dgx-h100" then
        assert.truthy(r.reason:find("global_batch 12: no count of whole nodes of 8 GPUs", 1, true), r.reason)
        refused = refused + 1
      end
    end
    assert.is_true(fitting >= 10, fitting .. " rows fit")
    assert.are.equal(1, refused)
  end)

  it("refuses a token count that is not a positive number", function()
    local _, e, c = helper.run("recommend", "gpt2", "--tokens", "-3")
    assert.are.equal(2, c)
    assert.truthy(e:find("--tokens takes a positive number", 1, true), e)
  end)
end)
