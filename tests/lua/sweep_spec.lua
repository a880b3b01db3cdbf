-- vramplan sweep and merge: rows equal to separate `estimate --json` runs,
-- shards, --resume, --jobs, bad sweep scripts; the grid's LIST syntax; the
-- Lua module's sweep API.
local helper = require("tests.lua.helper")
local json = require("dkjson")

-- Runs `vramplan ARGS...` (any command), returns stdout, stderr, exit code;
-- a list first stands for its arguments (Lua expands only a call's last).
local function run(first, ...)
  if type(first) ~= "table" then return helper.run(first, ...) end
  local t = table.move(first, 1, #first, 1, {})
  for i = 1, select("#", ...) do t[#t + 1] = select(i, ...) end
  return helper.run(table.unpack(t))
end

local function read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("a")
  f:close()
  return s
end

local function write(path, text)
  local f = assert(io.open(path, "wb"))
  f:write(text)
  f:close()
end

-- A temporary path that helper.write's cleanup removes.
local function temp(suffix) return helper.write("", suffix) end

-- A plain CSV reader written here, not the sweep's: header and rows as
-- tables of name -> text. Handles RFC 4180 quoting within one line.
local function parse_csv(text)
  local lines = {}
  for line in text:gmatch("([^\n]*)\n") do lines[#lines + 1] = line end
  local function fields(line)
    local out, field, quoted, i = {}, {}, false, 1
    while i <= #line do
      local c = line:sub(i, i)
      if quoted then
        if c == '"' and line:sub(i + 1, i + 1) == '"' then field[#field + 1] = '"'; i = i + 1
        elseif c == '"' then quoted = false
        else field[#field + 1] = c end
      elseif c == '"' then quoted = true
      elseif c == "," then out[#out + 1] = table.concat(field); field = {}
      else field[#field + 1] = c end
      i = i + 1
    end
    out[#out + 1] = table.concat(field)
    return out
  end
  local header = fields(lines[1])
  local rows = {}
  for i = 2, #lines do
    local row = {}
    for j, v in ipairs(fields(lines[i])) do row[header[j]] = v end
    rows[#rows + 1] = row
  end
  return header, rows
end

-- estimate --json's object flattened with dots, values as CSV text.
local function flat_estimate(args)
  local o = helper.estimate(table.unpack(args))
  local flat = {}
  local function walk(t, prefix)
    for k, v in pairs(t) do
      local name = prefix and (prefix .. "." .. k) or k
      if type(v) == "table" then walk(v, name)
      elseif v == nil or v == json.null then flat[name] = ""
      else flat[name] = math.type(v) == "integer" and string.format("%d", v) or tostring(v) end
    end
  end
  walk(o, nil)
  return flat
end

local compared = {
  "model.name", "model.params", "model.trainable_params", "gpu.short_name", "per_gpu.params_bytes",
  "per_gpu.grads_bytes", "per_gpu.master_bytes", "per_gpu.optimizer_bytes", "per_gpu.activations_bytes",
  "per_gpu.peak_allocated_bytes", "per_gpu.peak_reserved_bytes", "per_gpu.peak_total_bytes", "per_gpu.peak_phase",
  "fits", "headroom_bytes",
}

-- Fails unless `row` holds estimate --json's figures for `args`.
local function assert_row_is_estimate(row, args)
  if row.error ~= "" then
    -- a variant the engine refuses (V100 and bf16, say): estimate refuses it too, saying the same
    local _, err, code = helper.run("estimate", table.unpack(args))
    assert.are.equal(1, code, "variant " .. row.variant .. ": estimate ran where the row says " .. row.error)
    assert.truthy(err:find(row.error:match("[^:]+: (.*)$") or row.error, 1, true),
      string.format("variant %s: row error %q, estimate %q", row.variant, row.error, err))
    return
  end
  local e = flat_estimate(args)
  for _, f in ipairs(compared) do
    assert.are.equal(e[f] or "", row[f], string.format("variant %s, %s (estimate %s)", row.variant, f,
      table.concat(args, " ")))
  end
end

-- A few rows picked at random (the seed is in the message of a failure).
local function sample(rows, n)
  local seed = os.time()
  math.randomseed(seed)
  local picked = {}
  for _ = 1, n do picked[#picked + 1] = rows[math.random(#rows)] end
  return picked, seed
end

local grid_args = { "sweep", "gpt2", "--gpu", "a100-40gb", "--set", "precision=amp-bf16",
  "--vary", "micro_batch=1:4:*2", "--vary", "seq_len=128,256", "--vary", "checkpointing=none,full" }

describe("vramplan sweep", function()
  it("enumerates the grid with the first --vary slowest, variants numbered from 0", function()
    local out, err, code = run(grid_args, "--jobs", "1")
    assert.are.equal(0, code, err)
    assert.are.equal("", err) -- stderr is not a terminal: no progress bar
    local header, rows = parse_csv(out)
    assert.are.same({ "variant", "micro_batch", "seq_len", "checkpointing", "model.name" },
      { table.unpack(header, 1, 5) })
    assert.are.equal("error", header[#header])
    assert.are.equal(12, #rows)
    local expected, i = {}, 0
    for _, b in ipairs({ "1", "2", "4" }) do
      for _, s in ipairs({ "128", "256" }) do
        for _, c in ipairs({ "none", "full" }) do
          expected[#expected + 1] = { tostring(i), b, s, c }
          i = i + 1
        end
      end
    end
    for n, row in ipairs(rows) do
      assert.are.same(expected[n], { row.variant, row.micro_batch, row.seq_len, row.checkpointing })
    end
  end)

  it("writes for a sample of variants what estimate --json gives for them", function()
    local out = run(grid_args)
    local _, rows = parse_csv(out)
    local picked, seed = sample(rows, 3)
    for _, row in ipairs(picked) do
      assert_row_is_estimate(row, { "gpt2", "--gpu", "a100-40gb", "--set", "precision=amp-bf16", "--set",
        "micro_batch=" .. row.micro_batch, "--set", "seq_len=" .. row.seq_len, "--set",
        "checkpointing=" .. row.checkpointing }, seed)
    end
  end)

  -- Each example script with what `estimate` needs besides the row's keys.
  local scripts = {
    ["scaling"] = { model = "llama2-7b", args = { "--gpu", "h100-80gb", "--set", "precision=amp-bf16", "--set",
      "optimizer=adamw", "--set", "seq_len=2048", "--set", "checkpointing=full" },
      keys = { "hidden", "layers", "heads", "kv_heads", "intermediate" } },
    ["hardware"] = { model = "llama2-7b", args = { "--recipe", "scripts/recipes/lora-q-v-checkpointed.lua" },
      keys = { "micro_batch" }, gpu_column = "gpu" },
    ["lora-batch-by-length"] = { model = "llama3-8b", args = { "--gpu", "rtx4090", "--recipe",
      "scripts/recipes/lora-q-v-checkpointed.lua" }, keys = { "micro_batch", "seq_len" } },
  }

  for name, s in pairs(scripts) do
    it("runs scripts/sweeps/" .. name .. ".lua, a sample of its rows equal to estimate --json", function()
      local out, err, code = run("sweep", "scripts/sweeps/" .. name .. ".lua")
      assert.are.equal(0, code, err)
      local _, rows = parse_csv(out)
      assert.is_true(#rows >= 10, name .. ": " .. #rows .. " rows")
      local picked = sample(rows, 2)
      for _, row in ipairs(picked) do
        local args = { s.model, table.unpack(s.args) }
        for _, k in ipairs(s.keys) do
          args[#args + 1] = "--set"
          args[#args + 1] = k .. "=" .. row[k]
        end
        if s.gpu_column then
          args[#args + 1] = "--gpu"
          args[#args + 1] = row[s.gpu_column]
        end
        assert_row_is_estimate(row, args)
      end
    end)
  end

  it("keeps only the variants a where filter accepts, numbered without gaps", function()
    local _, rows = parse_csv((run("sweep", "scripts/sweeps/lora-batch-by-length.lua")))
    for i, row in ipairs(rows) do
      assert.are.equal(tostring(i - 1), row.variant)
      assert.is_true(tonumber(row.micro_batch) * tonumber(row.seq_len) <= 65536)
    end
  end)

  it("gives identical output with --jobs 1 and --jobs 2", function()
    for _, args in ipairs({ grid_args, { "sweep", "scripts/sweeps/lora-batch-by-length.lua", "--format", "jsonl" },
                             { "sweep", "scripts/sweeps/scaling.lua", "--shard", "1/3" } }) do
      local one, err1, c1 = run(args, "--jobs", "1")
      local two, err2, c2 = run(args, "--jobs", "2")
      assert.are.equal(0, c1, err1)
      assert.are.equal(0, c2, err2)
      assert.are.equal(one, two)
      local three = run(args, "--jobs", "3")
      assert.are.equal(one, three)
    end
  end)

  it("gives workers the same random variants a generator draws", function()
    local path = helper.write([[
return sweep {
  model = "gpt2",
  set = { seq_len = 128 },
  generate = function(emit)
    for _ = 1, 8 do emit { micro_batch = math.random(1, 16) } end
  end,
}
]], ".lua")
    local one, err, code = run("sweep", path, "--jobs", "1")
    assert.are.equal(0, code, err)
    assert.are.equal(one, (run("sweep", path, "--jobs", "2")))
  end)

  it("puts a variant's one-line message in error and goes on", function()
    local out, err, code = run("sweep", "llama2-7b", "--vary", "heads=32,30,64", "--vary", "micro_batch=1,2",
      "--fields", "variant,heads,micro_batch,per_gpu.peak_total_bytes,error")
    assert.are.equal(0, code, err)
    local _, rows = parse_csv(out)
    assert.are.equal(6, #rows)
    assert.are.equal("", rows[1].error)
    assert.truthy(rows[3].error:find("heads: must divide hidden (4096)", 1, true), rows[3].error)
    assert.are.equal("", rows[3]["per_gpu.peak_total_bytes"])
    assert.are.equal("", rows[5].error)
    -- the message's quotes and commas are quoted as RFC 4180 says
    local raw = out:match("\n(2,30,1,[^\n]*)")
    assert.truthy(raw:find(',"[^"]*heads: must divide hidden %(4096%)', 1), raw)
  end)

  it("writes JSON lines, one object per row, with --fields' columns in order and null verdicts without a GPU",
    function()
      local out, err, code = run("sweep", "gpt2", "--set", "seq_len=256", "--vary", "micro_batch=1,2", "--format", "jsonl", "--fields",
        "per_gpu.peak_total_bytes,variant,fits,gpu.short_name,recipe.micro_batch")
      assert.are.equal(0, code, err)
      local lines = {}
      for line in out:gmatch("[^\n]+") do lines[#lines + 1] = line end
      assert.are.equal(2, #lines)
      assert.truthy(lines[2]:find('^{"per_gpu.peak_total_bytes":%d+,"variant":1,"fits":null,"gpu.short_name":null,' ..
        '"recipe.micro_batch":2}$'), lines[2])
      local e = helper.estimate("gpt2", "--set", "seq_len=256", "--set", "micro_batch=2")
      assert.are.equal(e.per_gpu.peak_total_bytes, json.decode(lines[2])["per_gpu.peak_total_bytes"])
    end)

  it("refuses as estimate does what a GPU cannot run: precision, compute_dtype, attention", function()
    -- (a sweep's estimates echo only the recipe keys read: these are the GPU check's)
    local out, err, code = run("sweep", "llama2-7b", "--set", "finetune=qlora", "--vary", "gpu=v100-32gb,a100-40gb",
      "--vary", "precision=amp-bf16,amp-fp16", "--vary", "attention=flash,sdpa", "--vary", "compute_dtype=bf16,fp16")
    assert.are.equal(0, code, err)
    local _, rows = parse_csv(out)
    assert.are.equal(16, #rows)
    local refused = {}
    for _, row in ipairs(rows) do
      if row.error ~= "" then refused[row.error:match("^[^:]+: ([%w_]+):")] = true end
      assert_row_is_estimate(row, { "llama2-7b", "--set", "finetune=qlora", "--gpu", row.gpu, "--set",
        "precision=" .. row.precision, "--set", "attention=" .. row.attention, "--set",
        "compute_dtype=" .. row.compute_dtype })
    end
    assert.are.same({ precision = true, compute_dtype = true, attention = true }, refused)
  end)

  -- Each case: the sweep's arguments before --vary, the --vary, estimate's arguments for a row (its key's value
  -- added as --set, or as --gpu for gpu), and the fields besides the compared ones that must agree too.
  local completed = {
    -- no seq_len: GPT-2's position table (1024), not the core's 2048
    { "gpt2" }, "micro_batch=1,2", { "gpt2" }, { "recipe.seq_len" },
    -- a recipe by the name `list recipes` prints
    { "llama3-8b", "--recipe", "qlora-all-linear-paged", "--gpu", "rtx4090" }, "micro_batch=1,2",
      { "llama3-8b", "--recipe", "qlora-all-linear-paged", "--gpu", "rtx4090" }, { "recipe.seq_len" },
    -- another tool's key names and the stack they imply
    { "llama3-8b", "--gpu", "a100-80gb", "--set", "stack=hf-trainer", "--set", "bf16=true" },
      "gradient_checkpointing=true,false",
      { "llama3-8b", "--gpu", "a100-80gb", "--set", "stack=hf-trainer", "--set", "bf16=true" },
      { "recipe.checkpointing", "assumed.stack", "recipe.precision" },
    -- a cloud instance and a node as the GPU: their GPU, gpus_per_node and host memory
    { "llama3-8b", "--gpu", "p4d.24xlarge" }, "dp=1,8", { "llama3-8b", "--gpu", "p4d.24xlarge" },
      { "recipe.gpus_per_node", "host.cpu_ram_bytes_per_node" },
    { "llama3-8b", "--set", "dp=8" }, "gpu=a100-80gb,dgx-h100", { "llama3-8b", "--set", "dp=8" },
      { "recipe.gpus_per_node", "host.cpu_ram_bytes_per_node" },
    -- an axolotl config naming its model (base_model), no MODEL given
    { "--recipe", "tests/fixtures/configs/axolotl/examples/llama-3/qlora.yml", "--gpu", "rtx4090" }, "seq_len=1024,4096",
      { "--recipe", "tests/fixtures/configs/axolotl/examples/llama-3/qlora.yml", "--gpu", "rtx4090" },
      { "recipe.micro_batch", "recipe.finetune" },
    -- the models varied, no MODEL given: each with its own position limit as seq_len
    {}, "model=gpt2,bert-base-cased", {}, { "recipe.seq_len" },
  }
  for i = 1, #completed, 4 do
    local base, vary, args, extra = completed[i], completed[i + 1], completed[i + 2], completed[i + 3]
    it("completes each variant's recipe as estimate does: sweep " .. table.concat(base, " ") .. " --vary " .. vary,
      function()
        local key = vary:match("^([%w_]+)=")
        local fields = { "variant", key }
        for _, f in ipairs(compared) do fields[#fields + 1] = f end
        for _, f in ipairs(extra) do fields[#fields + 1] = f end
        fields[#fields + 1] = "error"
        local out, err, code = run({ "sweep", table.unpack(base) }, "--vary", vary, "--fields",
          table.concat(fields, ","))
        assert.are.equal(0, code, err)
        local _, rows = parse_csv(out)
        assert.are.equal(2, #rows)
        for _, row in ipairs(rows) do
          assert.are.equal("", row.error, "variant " .. row.variant)
          local a = table.move(args, 1, #args, 1, {})
          if key == "gpu" then a[#a + 1], a[#a + 2] = "--gpu", row.gpu
          elseif key == "model" then table.insert(a, 1, row.model)
          else a[#a + 1], a[#a + 2] = "--set", key .. "=" .. row[key] end
          assert_row_is_estimate(row, a)
          local e = flat_estimate(a)
          for _, f in ipairs(extra) do
            assert.are.equal(e[f] or "", row[f], string.format("variant %s, %s", row.variant, f))
          end
        end
      end)
  end

  it("reads every top-level part of estimate --json: time.*, per_rank.N.*, host.* as estimate has them", function()
    local fields = { "time.step_s", "time.mfu", "per_rank.1.layers", "per_rank.2.peak_total_bytes",
                     "host.gpus_per_node", "recipe.pp", "model.arch" }
    local out, err, code = run("sweep", "gpt2", "--gpu", "a100-40gb", "--set", "seq_len=256", "--set", "framework=megatron",
      "--set", "pp=2", "--vary", "micro_batch=1,2", "--format", "jsonl", "--fields", table.concat(fields, ","))
    assert.are.equal(0, code, err)
    local lines = {}
    for line in out:gmatch("[^\n]+") do lines[#lines + 1] = line end
    assert.are.equal(2, #lines)
    local row = json.decode(lines[2])
    local e = helper.estimate("gpt2", "--gpu", "a100-40gb", "--set", "seq_len=256", "--set", "framework=megatron",
      "--set", "pp=2", "--set", "micro_batch=2")
    local expected = { e.time.step_s, e.time.mfu, e.per_rank[1].layers, e.per_rank[2].peak_total_bytes,
                       e.host.gpus_per_node, e.recipe.pp, e.model.arch }
    for i, f in ipairs(fields) do
      assert.is_not_nil(row[f], f)
      assert.are.equal(expected[i], row[f], f)
    end
  end)

  it("refuses an unknown field, an unknown key and a bad LIST, naming them", function()
    local _, err, code = run("sweep", "gpt2", "--vary", "micro_batch=1,2", "--fields", "variant,peak_total")
    assert.are.equal(1, code)
    assert.truthy(err:find("unknown field 'peak_total'", 1, true), err)
    _, err, code = run("sweep", "gpt2", "--vary", "micro_bach=1,2")
    assert.are.equal(1, code)
    assert.truthy(err:find("^vramplan: %-%-vary micro_bach=1,2: unknown key 'micro_bach'.*did you mean 'micro_batch'"),
      err)
    _, err, code = run("sweep", "gpt2", "--vary", "micro_batch=4:1")
    assert.are.equal(1, code)
    assert.truthy(err:find("--vary micro_batch=4:1: '4:1': the range is empty", 1, true), err)
    assert.falsy(err:find("traceback"))
    -- a --jobs that is not a count is refused, not taken for the default; no fields is no row to write
    for _, jobs in ipairs({ "x", "0", "1.5" }) do
      local out
      out, err, code = run("sweep", "gpt2", "--vary", "micro_batch=1,2", "--jobs", jobs)
      assert.are.equal(2, code, jobs .. ": " .. err)
      assert.truthy(err:find("--jobs takes a positive integer (got '" .. jobs .. "')", 1, true), err)
      assert.are.equal("", out)
    end
    _, err, code = run("sweep", "gpt2", "--vary", "micro_batch=1,2", "--fields", "")
    assert.are.equal(1, code)
    assert.truthy(err:find("--fields: name one field or more", 1, true), err)
    -- a recipe's misspelt key stops the sweep naming the recipe's line, as estimate does (it was every row's
    -- error, blamed on the model's file)
    local recipe = helper.write("-- a recipe\nreturn recipe {\n  checkpoint = \"full\",\n}\n", ".lua")
    local out
    out, err, code = run("sweep", "gpt2", "--recipe", recipe, "--vary", "micro_batch=1,2")
    assert.are.equal(1, code)
    assert.are.equal("", out)
    assert.truthy(err:find(recipe .. ":3: unknown recipe key 'checkpoint'", 1, true), err)
    local _, estimate_err = run("estimate", "gpt2", "--recipe", recipe)
    assert.truthy(estimate_err:find(recipe .. ":3: unknown recipe key 'checkpoint'", 1, true), estimate_err)
  end)

  it("joins shards with merge into the unsharded output", function()
    for _, format in ipairs({ "csv", "jsonl" }) do
      local whole = run(grid_args, "--format", format)
      local parts = {}
      for k = 0, 2 do
        parts[#parts + 1] = temp("." .. format)
        local _, err, code = run(grid_args, "--format", format, "--shard", k .. "/3",
          "--out", parts[#parts])
        assert.are.equal(0, code, err)
      end
      local merged = temp("." .. format)
      local _, err, code = run("merge", parts[3], parts[1], parts[2], "--out", merged)
      assert.are.equal(0, code, err)
      assert.are.equal(whole, read(merged))
      local out = run("merge", parts[1], parts[2], parts[3])
      assert.are.equal(whole, out)
    end
  end)

  it("has merge report missing and duplicated variants and exit 1", function()
    local a, b = temp(".csv"), temp(".csv")
    run(grid_args, "--shard", "0/3", "--out", a)
    run(grid_args, "--shard", "2/3", "--out", b)
    local _, err, code = run("merge", a, b, a)
    assert.are.equal(1, code)
    assert.truthy(err:find("missing variants 1, 4, 7, 10", 1, true), err)
    assert.truthy(err:find("duplicated variants 0, 3, 6, 9", 1, true), err)
  end)

  it("resumes a sweep cut in the middle of a row to the file of an uninterrupted run", function()
    local whole = temp(".csv")
    assert.are.equal(0, select(3, run(grid_args, "--out", whole)))
    local text = read(whole)
    -- the header, five rows and half the sixth, as a kill while writing leaves it
    local cut = 0
    for _ = 1, 6 do cut = text:find("\n", cut + 1, true) end
    local partial = temp(".csv")
    write(partial, text:sub(1, cut + 20))
    for _, jobs in ipairs({ "1", "2" }) do
      local file = temp(".csv")
      write(file, text:sub(1, cut + 20))
      local _, err, code = run(grid_args, "--out", file, "--resume", "--jobs", jobs)
      assert.are.equal(0, code, err)
      assert.are.equal(text, read(file))
    end
    -- resuming a complete file changes nothing
    run(grid_args, "--out", whole, "--resume")
    assert.are.equal(text, read(whole))
  end)

  it("resumes after a kill mid-sweep to the file of an uninterrupted run", function()
    -- some thousands of variants: a few seconds, long enough to be killed
    local args = { "sweep", "llama2-7b", "--vary", "micro_batch=1:32", "--vary", "seq_len=128:8192:128", "--vary",
      "checkpointing=none,full", "--format", "jsonl", "--jobs", "1" }
    local whole = temp(".jsonl")
    assert.are.equal(0, select(3, run(args, "--out", whole)))
    local file = temp(".jsonl")
    local quoted = {}
    for i, a in ipairs(args) do quoted[i] = "'" .. a .. "'" end
    -- SIGKILL once it has written 50 rows: no chance to finish a line
    os.execute(string.format("%s %s --out %s >/dev/null 2>&1 & pid=$!; " ..
      "while [ \"$(wc -l < %s 2>/dev/null || echo 0)\" -lt 50 ]; do sleep 0.01; done; { kill -9 $pid; wait $pid; } 2>/dev/null",
      helper.bin, table.concat(quoted, " "), file, file))
    local interrupted = read(file)
    assert.is_true(#interrupted < #read(whole), "the sweep ended before it was killed")
    local _, err, code = run(args, "--out", file, "--resume", "--jobs", "2")
    assert.are.equal(0, code, err)
    assert.are.equal(read(whole), read(file))
  end)

  it("draws a progress line on stderr only when it is a terminal", function()
    -- script(1) gives the command a terminal; without it there is nothing to check
    if not os.execute("command -v script >/dev/null 2>&1") then return end
    local log = temp(".txt")
    local args = {}
    for i, a in ipairs(grid_args) do args[i] = "'" .. a .. "'" end
    os.execute(string.format("script -qc \"%s %s --out /dev/null\" %s >/dev/null 2>&1", helper.bin,
      table.concat(args, " "):gsub('"', '\\"'), log))
    local text = read(log)
    assert.truthy(text:find("12/12 variants, [%d.]+/s"), text)
    local _, err = run(grid_args, "--out", temp(".csv"))
    assert.are.equal("", err)
  end)

  it("refuses merging files of different columns or cut short, and --resume without --out", function()
    local a, b = temp(".csv"), temp(".csv")
    run(grid_args, "--out", a)
    run(grid_args, "--out", b, "--fields", "variant,error")
    local _, err, code = run("merge", a, b)
    assert.are.equal(1, code)
    assert.truthy(err:find(b .. ": its columns differ from " .. a .. "'s", 1, true), err)
    -- a shard's file cut in the middle of a row, as a kill leaves it
    local cut = temp(".csv")
    local text = read(a)
    write(cut, text:sub(1, #text - 5))
    _, err, code = run("merge", cut)
    assert.are.equal(1, code)
    assert.truthy(err:find(":13: the last line is cut short", 1, true), err)
    _, err, code = run(grid_args, "--resume")
    assert.are.equal(2, code)
    assert.truthy(err:find("--resume needs --out FILE", 1, true), err)
  end)

  it("refuses --resume into a file of other columns", function()
    local file = temp(".csv")
    write(file, "variant,hidden\n0,1024\n")
    local _, err, code = run(grid_args, "--out", file, "--resume")
    assert.are.equal(1, code)
    assert.truthy(err:find(file .. ": its columns are not this sweep's", 1, true), err)
  end)
end)

describe("bad sweep scripts", function()
  local function sweep_script(text) return helper.write(text, ".lua") end

  it("report a syntax error at its line", function()
    local path = sweep_script('return sweep {\n  model = "gpt2",\n  vary = { micro_batch = { 1, 2 3 } },\n}\n')
    local out, err, code = run("sweep", path)
    assert.are.equal(1, code)
    assert.are.equal("", out)
    assert.truthy(err:find("^vramplan: " .. path:gsub("%p", "%%%0") .. ":3: "), err)
  end)

  it("report an error in the tenth variant with the script's line, keeping the nine rows written", function()
    local path = sweep_script([[
return sweep {
  model = "gpt2",
  vary = {
    micro_batch = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12 },
    seq_len = function(v)
      if v.micro_batch == 10 then error("no tenth") end
      return 128
    end,
  },
}
]])
    for _, jobs in ipairs({ "1", "2" }) do
      local out = temp(".csv")
      local _, err, code = run("sweep", path, "--out", out, "--jobs", jobs)
      assert.are.equal(1, code)
      assert.truthy(err:find("^vramplan: variant 9: " .. path:gsub("%p", "%%%0") .. ":6: no tenth\n$"), err)
      local _, rows = parse_csv(read(out))
      assert.are.equal(9, #rows)
      assert.are.equal("8", rows[9].variant)
    end
  end)

  it("stop a generator that never ends", function()
    local path = sweep_script([[
return sweep {
  model = "gpt2",
  generate = function(emit)
    local b = 1
    while true do emit { micro_batch = b }; b = b + 1 end
  end,
}
]])
    local _, err, code = run("sweep", path)
    assert.are.equal(1, code)
    assert.truthy(err:find(path .. ":5: ", 1, true), err)
    assert.truthy(err:find("does it never end?", 1, true), err)
  end)

  it("name an unknown key in vary, and a misspelt field of sweep", function()
    local path = sweep_script('return sweep {\n  model = "gpt2",\n  vary = { micro_bach = { 1, 2 } },\n}\n')
    local _, err, code = run("sweep", path)
    assert.are.equal(1, code)
    -- the line of the field (it was that of `sweep {`)
    assert.truthy(err:find(path .. ":3: vary.micro_bach: unknown key 'micro_bach'", 1, true), err)
    assert.truthy(err:find("did you mean 'micro_batch'", 1, true), err)
    path = sweep_script('return sweep {\n  model = "gpt2",\n  vary = { micro_batch = { 1, 2 } },\n  wher = 1,\n}\n')
    _, err, code = run("sweep", path)
    assert.are.equal(1, code)
    assert.truthy(err:find(path .. ":4: sweep: unknown field 'wher' (did you mean 'where'?)", 1, true), err)
    -- a misspelt GPU or recipe names the script's line (it named nothing)
    path = sweep_script('return sweep {\n  model = "gpt2",\n  gpu = "a100",\n  vary = { micro_batch = { 1, 2 } },\n}\n')
    _, err, code = run("sweep", path)
    assert.are.equal(1, code)
    assert.truthy(err:find(path .. ":3: gpu: no GPU 'a100'", 1, true), err)
    path = sweep_script('return sweep {\n  model = "gpt2",\n  vary = { micro_batch = { 1, 2 } },\n  recipe = "lora",\n}\n')
    _, err, code = run("sweep", path)
    assert.are.equal(1, code)
    assert.truthy(err:find(path .. ":4: recipe: no recipe 'lora'", 1, true), err)
    path = sweep_script('return sweep {\n  vary = { micro_batch = { 1, 2 } },\n  model = "gtp2",\n}\n')
    _, err, code = run("sweep", path)
    assert.are.equal(1, code)
    assert.truthy(err:find(path .. ":3: model: no model 'gtp2'", 1, true), err)
    -- as a misspelt GPU in --vary gpu=... is blamed on its --vary
    _, err, code = run("sweep", "gpt2", "--vary", "model=gpt2,gtp2")
    assert.are.equal(1, code)
    assert.truthy(err:find("--vary model=gpt2,gtp2: no model 'gtp2'", 1, true), err)
  end)

  it("run a generator's variants in the order it emits them", function()
    local path = sweep_script([[
return sweep {
  model = "gpt2",
  set = { seq_len = 128 },
  generate = function(emit)
    for b = 3, 1, -1 do emit { micro_batch = b } end
  end,
}
]])
    local out, err, code = run("sweep", path, "--fields", "variant,micro_batch,per_gpu.peak_total_bytes")
    assert.are.equal(0, code, err)
    local _, rows = parse_csv(out)
    assert.are.same({ "3", "2", "1" }, { rows[1].micro_batch, rows[2].micro_batch, rows[3].micro_batch })
    local e = helper.estimate("gpt2", "--set", "seq_len=128", "--set", "micro_batch=2")
    assert.are.equal(string.format("%d", e.per_gpu.peak_total_bytes), rows[2]["per_gpu.peak_total_bytes"])
  end)
end)

describe("the grid's LIST syntax", function()
  local grid = require("vramplan.grid")

  it("reads lists, ranges and geometric ranges", function()
    assert.are.same({ 1, 2, 4 }, grid.parse_list("1,2,4"))
    assert.are.same({ "flash", "sdpa" }, grid.parse_list("flash,sdpa"))
    assert.are.same({ 128, 384, 640 }, grid.parse_list("128:640:256"))
    assert.are.same({ 1, 2, 3 }, grid.parse_list("1:3"))
    assert.are.same({ 512, 1024, 2048, 4096 }, grid.parse_list("512:5000:*2"))
    assert.are.same({ true, false, 0.05 }, grid.parse_list("true,false,0.05"))
  end)

  it("refuses empty values, empty ranges and bad steps", function()
    assert.has_error(function() grid.parse_list("1,,2") end, "'1,,2': an empty value in the list")
    assert.has_error(function() grid.parse_list("8:1") end, "'8:1': the range is empty (8 > 1)")
    assert.has_error(function() grid.parse_list("1:8:0") end, "'1:8:0': a range's step is a whole number >= 1")
    assert.has_error(function() grid.parse_list("1:8:*1") end,
      "'1:8:*1': a geometric range a:b:*k needs a >= 1 and a whole k >= 2")
  end)

  it("deals variants to shards round-robin", function()
    local owned = {}
    for i = 0, 9 do if grid.owns({ 1, 3 }, i) then owned[#owned + 1] = i end end
    assert.are.same({ 1, 4, 7 }, owned)
    assert.has_error(function() grid.parse_shard("3/3") end, "--shard takes K/N with 0 <= K < N (got '3/3')")
  end)
end)

describe("the Lua module", function()
  local vramplan = require("vramplan")
  vramplan.home = helper.root

  it("builds a model once and estimates many recipes against it, as estimate does", function()
    local model, config = vramplan.load_model("gpt2", { layers = 4 })
    local gpu = vramplan.load_gpu("a100-40gb")
    for _, b in ipairs({ 1, 2 }) do
      local r = vramplan.estimate(model, { micro_batch = b, seq_len = 256 }, gpu)
      local o = vramplan.report(r, config, gpu)
      local e = helper.estimate("gpt2", "--set", "layers=4", "--set", "micro_batch=" .. b, "--set", "seq_len=256",
        "--gpu", "a100-40gb")
      assert.are.equal(e.per_gpu.peak_total_bytes, o.per_gpu.peak_total_bytes)
      assert.are.equal(e.headroom_bytes, o.headroom_bytes)
      assert.are.equal(e.model.name, o.model.name)
    end
  end)

  it("sweeps in-process, rows as the command writes them", function()
    local rows = {}
    local n = vramplan.sweep({ model = "gpt2", gpu = "a100-40gb", vary = { micro_batch = { 1, 2 }, seq_len = { 128 } },
      fields = { "variant", "micro_batch", "per_gpu.peak_total_bytes", "fits" } }, function(row) rows[#rows + 1] = row end)
    assert.are.equal(2, n)
    local _, csv_rows = parse_csv((run("sweep", "gpt2", "--gpu", "a100-40gb", "--vary", "micro_batch=1,2", "--vary",
      "seq_len=128")))
    for i = 1, 2 do
      assert.are.equal(i - 1, rows[i].variant)
      assert.are.equal(csv_rows[i]["per_gpu.peak_total_bytes"], string.format("%d", rows[i]["per_gpu.peak_total_bytes"]))
      assert.are.equal(true, rows[i].fits)
    end
  end)

  it("names a bad argument instead of failing on a nil index", function()
    assert.has_error(function() vramplan.load_model(nil) end,
      "vramplan.load_model: argument 1 (model) must be a model name or path (got nil)")
    assert.has_error(function() vramplan.load_model("gpt2", 4) end,
      "vramplan.load_model: argument 2 (fields) must be a table of field = value (got number)")
    assert.has_error(function() vramplan.sweep({ model = "gpt2" }) end,
      "vramplan.sweep: argument 2 (on_row) must be a function(row) (got nil)")
    assert.has_error(function() vramplan.load_gpu(80) end,
      "vramplan.load_gpu: argument 1 (name) must be a GPU name such as h100-80gb (got number)")
    -- a shard out of range wrote no row, a shard or a field that is not a number or name failed on a nil index
    local spec = { model = "gpt2", set = { seq_len = 128 }, vary = { micro_batch = { 1, 2, 3 } } }
    local function on_row() error("no row expected") end
    for _, bad in ipairs({ { 5, 2 }, { "a" }, { 1.5, 2 } }) do
      spec.shard = bad
      assert.has_error(function() vramplan.sweep(spec, on_row) end)
      local _, err = pcall(vramplan.sweep, spec, on_row)
      assert.truthy(err:find("^vramplan.sweep: argument 1 %(spec.shard%) must be { k, n } with whole 0 <= k < n %(got {"),
        err)
    end
    spec.shard, spec.fields = nil, { "variant", 3 }
    assert.has_error(function() vramplan.sweep(spec, on_row) end,
      'vramplan.sweep: argument 1 (spec.fields) must be a list of names (got { "variant", 3 })')
  end)

  it("reads a row's fields from the object as flattening it names them", function()
    local sweep = require("vramplan.sweep")
    local model, config = vramplan.load_model("gpt2", { layers = 4 })
    local cases = {
      { { micro_batch = 2, seq_len = 256 }, vramplan.load_gpu("a100-40gb") },
      { { seq_len = 128, pp = 2, num_microbatches = 2 }, vramplan.load_gpu("h100-80gb") },
      { { seq_len = 128 }, nil }, -- no GPU: null verdicts
    }
    for _, c in ipairs(cases) do
      local o = vramplan.report(vramplan.estimate(model, c[1], c[2]), config, c[2])
      local flat, n = sweep.flatten(o), 0
      for name, v in pairs(flat) do
        assert.are.equal(v, sweep.lookup(o, name), name)
        n = n + 1
      end
      assert.is_true(n > 100, n .. " names")
      assert.is_truthy(flat["per_rank.1.stage"])
      -- what flattening names not: objects, parts it never writes
      for _, name in ipairs({ "per_gpu", "per_rank.1", "per_rank.01.stage", "per_rank.1e0.stage", "per_gpu..params_bytes",
        ".per_gpu.params_bytes", "per_gpu.params_bytes.", "", "nothing.here", "per_gpu.params_bytes.more" }) do
        assert.is_nil(flat[name], name)
        assert.is_nil(sweep.lookup(o, name), name)
      end
    end
  end)

  it("makes in C the rows the estimate's object gives, CSV and JSON lines, error rows, pipelines and time included",
    function()
    local sweep, report = require("vramplan.sweep"), require("vramplan.report")
    -- every column C fills: the static fields, every per_gpu figure of the
    -- object that C knows (the default ones at least), the step time
    local fields = { "variant", "gpu", "precision", "pp", "tp", "allocator", "lora_dropout", "model.name", "model.arch",
      "model.layers", "model.source", "gpu.name", "gpu.short_name", "gpu.memory_bytes", "model.params",
      "model.trainable_params", "per_gpu.peak_layer", "per_gpu.peak_op", "fits", "headroom_bytes", "error" }
    local known = 0
    local names = {}
    for name in pairs(report.rank_field_names) do names[#names + 1] = name end
    table.sort(names)
    for _, name in ipairs(names) do
      if vramplan.row_spec({ "per_gpu." .. name }) then fields[#fields + 1] = "per_gpu." .. name; known = known + 1 end
    end
    for _, f in ipairs(sweep.default_fields) do
      if f:find("^per_gpu%.") then assert.truthy(vramplan.row_spec({ f }), f) end
    end
    assert.is_true(known >= 20, known .. " per_gpu figures")
    for name in pairs(report.time_field_names) do fields[#fields + 1] = "time." .. name end
    -- a bad spec is refused, naming what is wrong
    assert.has_error(function() vramplan.row_spec({}) end)
    local ok, err = pcall(vramplan.row_spec, { "variant", 3 })
    assert.is_false(ok)
    assert.truthy(tostring(err):find("column 2 is not a string", 1, true), err)
    ok, err = pcall(vramplan.row_spec, { "variant" }, "xml")
    assert.is_false(ok)
    assert.truthy(tostring(err):find("invalid option 'xml'", 1, true), err)
    -- what C does not fill: tables, other parts, unknown names
    for _, f in ipairs({ "per_gpu.peak_breakdown", "per_gpu.nccl_groups", "recipe.zero", "per_rank.1.stage", "nothing" }) do
      assert.is_nil(vramplan.row_spec({ f }), f)
    end

    local plan = sweep.from_args(helper.root, { target = "gpt2", sets = { { "layers", 4, "--set layers=4" },
      { "seq_len", 128, "--set seq_len=128" }, { "num_microbatches", 2, "--set num_microbatches=2" } },
      vary = { "gpu=v100-32gb,a100-40gb", "precision=amp-bf16,fp32", "pp=1,2", "tp=1,5", "allocator=constant,simulated",
               "lora_dropout=0,0.05" } })
    fields = sweep.fields(plan, fields)
    local csv_row, jsonl_row = sweep.row_maker(plan, fields, "csv"), sweep.row_maker(plan, fields, "jsonl")
    assert.truthy(csv_row and jsonl_row)
    assert.is_nil(sweep.row_maker(plan, { "variant", "recipe.zero" }, "csv"))
    assert.is_nil(sweep.row_maker(plan, { "variant", "recipe.zero" }, "jsonl"))
    local evaluate, varied = sweep.evaluator(plan, fields), {}
    for _, k in ipairs(plan.columns) do varied[k] = true end
    local seen = { errors = 0, gpu = 0, pipelined = 0, simulated = 0 }
    require("vramplan.grid").each(plan, function(index, values)
      local object, message = evaluate(values)
      local list = sweep.row_values(fields, varied, index, values, object, sweep.one_line(message))
      assert.are.equal(sweep.format("csv").row(fields, list), csv_row(index, values))
      assert.are.equal(sweep.format("jsonl").row(fields, list), jsonl_row(index, values))
      if message then seen.errors = seen.errors + 1 end
      if object and object.fits ~= json.null then seen.gpu = seen.gpu + 1 end
      if object and object.per_gpu.peak_reserved_simulated_bytes then seen.simulated = seen.simulated + 1 end
      if values.pp == 2 and object then seen.pipelined = seen.pipelined + 1 end
    end)
    -- the grid reached each kind of row: errors (tp 5, bf16 on a V100), verdicts, pipelines, the simulated allocator
    for what, n in pairs(seen) do assert.is_true(n > 0, what) end
  end)

  it("builds a model with overrides and no origins (arch.build's third argument is optional)", function()
    local arch, models = require("vramplan.arch"), require("vramplan.models")
    local model, config = arch.build(models.describe(helper.root, "gpt2"), { layers = 2 })
    assert.are.equal(2, config.layers)
    assert.truthy(model)
    local ok, err = pcall(arch.build, models.describe(helper.root, "gpt2"), { heads = 5 })
    assert.is_false(ok)
    assert.truthy(tostring(err):find("^overrides: heads: "), err)
  end)
end)
