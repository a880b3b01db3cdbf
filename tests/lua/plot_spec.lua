-- The drawings: estimate --plot / --report and report SWEEP.csv write files
-- that an XML parser reads, whose marks agree with estimate --json, and a
-- page that a browser renders.
local helper = require("tests.lua.helper")
local json = require("dkjson")

local PYTHON = "/usr/bin/python3"
local CHECK = helper.root .. "/tests/lua/plot_check.py"

local function quote(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

-- A fresh path for an output file; the test removes it.
local function out_path(suffix)
  local reserved = os.tmpname()
  os.remove(reserved)
  return reserved .. suffix
end

-- The elements of an XML file that carry a class or data-*, each
-- { tag, attrs }; fails the test unless the file parses.
local function elements(path)
  local p = io.popen(string.format("%s %s xml %s 2>&1", PYTHON, quote(CHECK), quote(path)))
  local text = p:read("a")
  local ok = p:close()
  assert(ok, path .. " does not parse as XML: " .. text)
  return json.decode(text)
end

local function with_class(els, class)
  local out = {}
  for _, e in ipairs(els) do
    for c in (e.attrs.class or ""):gmatch("%S+") do if c == class then out[#out + 1] = e.attrs end end
  end
  return out
end

local function read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("a")
  f:close()
  return s
end

-- The runs of one phase in a timeline.
local function phase_runs(timeline)
  local runs, seen = {}, {}
  for _, e in ipairs(timeline) do
    if runs[#runs] ~= e.phase or #runs == 0 then runs[#runs + 1] = e.phase end
    seen[e.phase] = true
  end
  return runs, seen
end

-- The list with more arguments after it (table.unpack gives all its
-- values only as the last argument of a call).
local function with(list, ...)
  local out = { table.unpack(list) }
  for i = 1, select("#", ...) do out[#out + 1] = select(i, ...) end
  return table.unpack(out)
end

local small = { "llama2-7b", "--set", "layers=4", "--set", "seq_len=512", "--gpu", "a100-80gb" }

describe("estimate --plot", function()
  local svg_path = out_path(".svg")
  local args = { table.unpack(small) }
  local _, err, code = helper.run("estimate", with(args, "--plot", svg_path))
  local r = helper.estimate(table.unpack(args))
  local t = helper.estimate(with(args, "--timeline"))
  local ok, els = pcall(elements, svg_path)
  os.remove(svg_path)

  it("writes an SVG that parses", function()
    assert.are.equal(0, code, err)
    assert.is_true(ok, els)
  end)

  it("marks the peak at the JSON's peak event", function()
    local peak = with_class(els, "peak")
    assert.are.equal(1, #peak)
    assert.are.equal(r.per_gpu.peak_allocated_bytes, tonumber(peak[1]["data-peak-bytes"]))
    assert.are.equal(r.per_gpu.peak_phase, peak[1]["data-phase"])
    assert.are.equal(tostring(r.per_gpu.peak_layer or ""), peak[1]["data-layer"]) -- JSON's null decodes as nil
    assert.are.equal(r.per_gpu.peak_op, peak[1]["data-op"])
    local event = t.timeline[tonumber(peak[1]["data-event"])]
    assert.are.equal(r.per_gpu.peak_allocated_bytes, event.live)
  end)

  it("stacks areas that add up to the peak, category by category", function()
    local sum = 0
    for _, area in ipairs(with_class(els, "area")) do
      local bytes = tonumber(area["data-bytes-at-peak"])
      assert.are.equal(r.per_gpu.peak_breakdown[area["data-category"]], bytes, area["data-category"])
      sum = sum + bytes
    end
    assert.are.equal(r.per_gpu.peak_allocated_bytes, sum)
  end)

  it("draws a band for each run of a phase, and the capacity", function()
    local runs, seen = phase_runs(t.timeline)
    local bands = with_class(els, "band")
    assert.are.equal(#runs, #bands)
    for i, b in ipairs(bands) do assert.are.equal(runs[i], b["data-phase"]) end
    for phase in pairs(seen) do assert.truthy(#runs > 0, phase) end
    local capacity = with_class(els, "capacity")
    assert.are.equal(1, #capacity)
    assert.are.equal(r.gpu.memory_bytes, tonumber(capacity[1]["data-bytes"]))
  end)

  it("draws every layer, folded or not, and stays small for 80 layers", function()
    assert.are.equal(2 * 4, #with_class(els, "layer-tick")) -- forward and backward of 4 layers
    local path = out_path(".svg")
    local _, e, c = helper.run("estimate", "llama2-70b", "--set", "seq_len=512", "--plot", path)
    assert.are.equal(0, c, e)
    local size = #read(path)
    local ticks = #with_class(elements(path), "layer-tick")
    os.remove(path)
    assert.is_true(size < 200 * 1024, "SVG of " .. size .. " bytes")
    assert.are.equal(2 * 80, ticks)
  end)

  it("prints the usual report, without the timeline unless asked", function()
    local path = out_path(".svg")
    local out, e, c = helper.run("estimate", "--json", with(small, "--plot", path))
    os.remove(path)
    assert.are.equal(0, c, e)
    assert.is_nil(json.decode(out).timeline)
  end)
end)

describe("estimate --plot with pipeline stages", function()
  local path = out_path(".svg")
  local args = { "llama2-7b", "--set", "framework=megatron", "--set", "pp=4", "--set", "dp=1", "--set", "seq_len=512",
    "--gpu", "a100-80gb" }
  local _, err, code = helper.run("estimate", with(args, "--plot", path))
  local r = helper.estimate(table.unpack(args))
  local t = helper.estimate("--timeline", table.unpack(args))

  it("draws a timeline panel per stage, each marking the peak of that stage's own events", function()
    assert.are.equal(0, code, err)
    local els = elements(path)
    local panels = {}
    for _, p in ipairs(with_class(els, "panel")) do if p["data-stage"] then panels[#panels + 1] = p end end
    assert.are.equal(#t.per_rank, #panels)
    local peaks = with_class(els, "peak")
    assert.are.equal(#t.per_rank, #peaks)
    for i, stage in ipairs(t.per_rank) do
      assert.are.equal(tostring(i - 1), panels[i]["data-stage"])
      local top = 0
      for _, e in ipairs(stage.timeline) do top = math.max(top, e.live) end
      assert.are.equal(top, tonumber(peaks[i]["data-peak-bytes"]), "stage " .. (i - 1))
      assert.are.equal(stage.timeline[tonumber(peaks[i]["data-event"])].live, top)
    end
    -- the stages hold different layers: their logs differ
    assert.are_not.equal(#t.per_rank[1].timeline, #t.per_rank[#t.per_rank].timeline)
  end)

  it("draws a bar per stage at its peak", function()
    assert.are.equal(0, code, err)
    local els = elements(path)
    os.remove(path)
    local stages = {}
    for _, e in ipairs(els) do if e.attrs.class == "stage" then stages[#stages + 1] = e.attrs end end
    assert.are.equal(#r.per_rank, #stages)
    for i, st in ipairs(stages) do
      assert.are.equal(r.per_rank[i].peak_allocated_bytes, tonumber(st["data-peak-bytes"]))
    end
    local parts = with_class(els, "stage-part")
    local sum = 0
    for _, p in ipairs(parts) do sum = sum + tonumber(p["data-bytes"]) end
    local want = 0
    for _, st in ipairs(r.per_rank) do want = want + st.peak_allocated_bytes end
    assert.are.equal(want, sum)
  end)
end)

describe("estimate --report", function()
  local path = out_path(".html")
  local _, err, code = helper.run("estimate", with(small, "--report", path))
  local page = code == 0 and read(path) or ""

  it("writes one self-contained page that parses", function()
    assert.are.equal(0, code, err)
    local els = elements(path)
    assert.are.equal(1, #with_class(els, "peak"))
    assert.truthy(#with_class(els, "area") > 0)
    -- nothing fetched: no script, no external resource
    for _, bad in ipairs({ "<script", "src=", "href=", "url(", "@import", "<link" }) do
      assert.is_nil(page:find(bad, 1, true), bad)
    end
  end)

  it("holds the verdict, the breakdown and the full recipe", function()
    assert.truthy(page:find("fits on NVIDIA A100 80GB", 1, true))
    assert.truthy(page:find("optimizer states", 1, true))
    assert.truthy(page:find("micro_batch</span> = 1", 1, true))
    assert.truthy(page:find("seq_len</span> = 512", 1, true))
  end)

  local chromium = "/usr/bin/chromium"
  local has_chromium = io.open(chromium, "r")
  if has_chromium then has_chromium:close() end

  it("renders in headless Chromium: not blank, nothing logged", function()
    if not has_chromium then
      pending("chromium is not installed here (apt-get install chromium); CI installs it")
      return
    end
    local png, profile, log = out_path(".png"), out_path(".profile"), out_path(".log")
    local ok = os.execute(string.format(
      "timeout 120 %s --headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir=%s " ..
      "--enable-logging=stderr --v=0 --window-size=1000,800 --screenshot=%s file://%s >%s 2>&1",
      chromium, quote(profile), quote(png), quote(path), quote(log)))
    local logged = read(log)
    os.remove(log)
    os.execute("rm -rf " .. quote(profile))
    assert.is_true(ok == true, "chromium failed: " .. logged)
    assert.is_nil(logged:find("CONSOLE", 1, true), "the page logged: " .. logged)
    local p = io.popen(string.format("%s %s png %s 2>&1", PYTHON, quote(CHECK), quote(png)))
    local w, h, colours = p:read("a"):match("(%d+) (%d+) (%d+)")
    p:close()
    os.remove(png)
    assert.are.equal("1000", w)
    assert.are.equal("800", h)
    assert.is_true(tonumber(colours) > 20, "a blank page: " .. tostring(colours) .. " colours")
  end)

  teardown(function() os.remove(path) end)
end)

describe("the drawings refuse bad input in one line", function()
  local function clean_failure(...)
    local out, err, code = helper.run(...)
    assert.are.equal(1, code, err .. out)
    assert.truthy(err:find("^vramplan: "), err)
    assert.is_nil(err:find("traceback"), err)
    assert.are.equal(1, select(2, err:gsub("\n", "")), err)
    return err
  end

  it("an unwritable path", function()
    local err = clean_failure("estimate", "gpt2", "--set", "seq_len=64", "--plot", "/nonexistent/dir/x.svg")
    assert.truthy(err:find("cannot write /nonexistent/dir/x.svg", 1, true), err)
    err = clean_failure("estimate", "gpt2", "--set", "seq_len=64", "--report", "/nonexistent/dir/x.html")
    assert.truthy(err:find("cannot write", 1, true), err)
  end)

  it("a CSV without the columns, an unknown --x or --y, a missing file", function()
    local csv = helper.write("variant,micro_batch\n1,2\n", ".csv")
    local out = out_path(".html")
    local err = clean_failure("report", csv, "--x", "micro_batch", "-o", out)
    assert.truthy(err:find("no column 'model.name'", 1, true), err)
    local sweep = helper.write(table.concat({
      "variant,micro_batch,model.name,gpu.short_name,per_gpu.peak_total_bytes,fits,headroom_bytes,error",
      "1,1,M,a100-80gb,100,true,5,", "" }, "\n"), ".csv")
    err = clean_failure("report", sweep, "--x", "micro_batchx", "-o", out)
    assert.truthy(err:find("--x micro_batchx: not a column of", 1, true), err)
    assert.truthy(err:find("(the varied keys: micro_batch)", 1, true), err)
    err = clean_failure("report", sweep, "--x", "micro_batch", "--y", "nope", "-o", out)
    assert.truthy(err:find("--y nope: not a column", 1, true), err)
    err = clean_failure("report", "/nonexistent.csv", "--x", "micro_batch", "-o", out)
    assert.truthy(err:find("cannot read /nonexistent.csv", 1, true), err)
    assert.is_nil(io.open(out, "r"), "wrote a page after an error")
    local no_gpu = helper.write(table.concat({
      "variant,micro_batch,seq_len,model.name,gpu.short_name,per_gpu.peak_total_bytes,fits,headroom_bytes,error",
      "1,1,128,M,,100,,,", "2,2,128,M,,200,,,", "" }, "\n"), ".csv")
    err = clean_failure("report", no_gpu, "--x", "micro_batch", "--y", "seq_len", "-o", out)
    assert.truthy(err:find("a heat map of the room left needs a GPU", 1, true), err)
    local _, e, c = helper.run("report", no_gpu, "--x", "micro_batch", "-o", out)
    assert.are.equal(0, c, e) -- lines need no GPU: no capacity then
    assert.are.equal(0, #with_class(elements(out), "capacity"))
    assert.are.equal(2, #with_class(elements(out), "point"))
    os.remove(out)
    local broken = helper.write('variant,x\n1,"open\n', ".csv")
    err = clean_failure("report", broken, "--x", "x", "-o", out)
    assert.truthy(err:find("a quoted field is not closed", 1, true), err)
  end)

  it("a report without -o or --x is a usage error", function()
    local sweep = helper.write("variant\n", ".csv")
    local _, err, code = helper.run("report", sweep, "--x", "micro_batch")
    assert.are.equal(2, code)
    assert.truthy(err:find("report needs -o FILE.html", 1, true), err)
    _, err, code = helper.run("report", sweep, "-o", "x.html")
    assert.are.equal(2, code)
    assert.truthy(err:find("report needs --x KEY", 1, true), err)
    _, err, code = helper.run("report", sweep, "-q", "x")
    assert.are.equal(2, code)
    assert.truthy(err:find("unknown option -q", 1, true), err)
  end)
end)

-- A sweep's CSV as vramplan sweep writes it: micro_batch and seq_len
-- varied, one variant failed (its error quoted: a comma, quotes, a line
-- break), on two GPUs.
local columns = "variant,micro_batch,seq_len,gpu,model.name,model.params,model.trainable_params,gpu.short_name," ..
  "per_gpu.params_bytes,per_gpu.grads_bytes,per_gpu.master_bytes,per_gpu.optimizer_bytes," ..
  "per_gpu.activations_bytes,per_gpu.peak_allocated_bytes,per_gpu.peak_reserved_bytes,per_gpu.peak_total_bytes," ..
  "per_gpu.peak_phase,fits,headroom_bytes,error"
local GiB = 1024 ^ 3

local function sweep_csv(gpus, extra_column)
  local lines = { columns .. (extra_column and ("," .. extra_column) or "") }
  local n = 0
  for _, gpu in ipairs(gpus) do
    for _, seq in ipairs({ 1024, 2048 }) do
      for _, mb in ipairs({ 1, 2, 4, 8 }) do
        n = n + 1
        local peak = math.tointeger((40 + mb * seq / 128) * GiB)
        local headroom = gpu.bytes - peak
        local row = { n, mb, seq, gpu.short, "Llama-2-7B", 6738415616, 6738415616, gpu.short, 1, 2, 3, 4, 5,
          peak - 9, peak - 5, peak, "optimizer", tostring(headroom >= 0), headroom, "" }
        if mb == 8 and seq == 2048 then
          for k = 9, 19 do row[k] = "" end
          row[20] = '"micro_batch 8, seq_len 2048: ""too big""\nfor this test"'
        end
        if extra_column then row[#row + 1] = gpu.bytes end
        lines[#lines + 1] = table.concat(row, ",")
      end
    end
  end
  return table.concat(lines, "\r\n") .. "\r\n"
end

describe("vramplan report SWEEP.csv", function()
  local a100, h100 = 81920 * 1024 * 1024, 81559 * 1024 * 1024
  local gpus = { { short = "a100-80gb", bytes = a100 }, { short = "h100-80gb", bytes = h100 } }

  it("draws the peak per GPU against one key: a line per GPU and seq_len, each capacity", function()
    local csv = helper.write(sweep_csv(gpus), ".csv")
    local out = out_path(".html")
    local _, err, code = helper.run("report", csv, "--x", "micro_batch", "-o", out)
    assert.are.equal(0, code, err)
    local els = elements(out)
    os.remove(out)
    local points = with_class(els, "point")
    assert.are.equal(2 * 2 * 4 - 2, #points) -- the failed variants are not drawn
    for _, p in ipairs(points) do
      local mb, seq = tonumber(p["data-x"]), tonumber(p["data-series"]:match("seq_len (%d+)"))
      assert.are.equal(math.tointeger((40 + mb * seq / 128) * GiB), tonumber(p["data-bytes"]))
    end
    assert.are.equal(4, #with_class(els, "series"))
    local capacity = with_class(els, "capacity")
    assert.are.equal(2, #capacity)
    local hardware = require("vramplan.hardware")
    assert.are.equal(hardware.gpu(helper.root, "a100-80gb").memory_bytes, tonumber(capacity[1]["data-bytes"]))
    assert.are.equal(hardware.gpu(helper.root, "h100-80gb").memory_bytes, tonumber(capacity[2]["data-bytes"]))
  end)

  it("draws a sweep written as JSON lines (--format jsonl) as it draws the same sweep's CSV", function()
    local pages = {}
    for _, format in ipairs({ "csv", "jsonl" }) do
      local rows = out_path("." .. format)
      local _, err, code = helper.run("sweep", "gpt2", "--gpu", "a100-40gb", "--vary", "micro_batch=1,2",
        "--vary", "seq_len=512,2048", "--out", rows)
      assert.are.equal(0, code, err)
      local out = out_path(".html")
      _, err, code = helper.run("report", rows, "--x", "micro_batch", "--y", "seq_len", "-o", out)
      assert.are.equal(0, code, format .. ": " .. err)
      local f = assert(io.open(out, "r"))
      -- the page names its file: the rest is the same
      pages[format] = f:read("a"):gsub(rows:match("[^/]*$"):gsub("%p", "%%%0"), "SWEEP")
      f:close()
      os.remove(out)
      os.remove(rows)
    end
    assert.are.equal(pages.csv, pages.jsonl)
  end)

  it("takes the capacity from a gpu.memory_bytes column when there is one", function()
    local csv = helper.write(sweep_csv({ { short = "a100-80gb", bytes = 123 * GiB } }, "gpu.memory_bytes"), ".csv")
    local out = out_path(".html")
    local _, err, code = helper.run("report", csv, "--out", out, "--x", "seq_len")
    assert.are.equal(0, code, err)
    local capacity = with_class(elements(out), "capacity")
    os.remove(out)
    assert.are.equal(123 * GiB, tonumber(capacity[1]["data-bytes"]))
  end)

  it("draws a heat map of the room left over two keys, a map per GPU", function()
    local csv = helper.write(sweep_csv(gpus), ".csv")
    local out = out_path(".html")
    local _, err, code = helper.run("report", csv, "--x", "micro_batch", "--y", "seq_len", "-o", out)
    assert.are.equal(0, code, err)
    local page = read(out)
    local cells = with_class(elements(out), "cell")
    os.remove(out)
    assert.are.equal(2 * 4 * 2, #cells)
    local fits, short = 0, 0
    for _, c in ipairs(cells) do
      local mb, seq = tonumber(c["data-x"]), tonumber(c["data-y"])
      if mb == 8 and seq == 2048 then
        assert.is_nil(c["data-headroom-bytes"])
      else
        local headroom = tonumber(c["data-headroom-bytes"])
        assert.is_true(headroom == a100 - math.tointeger((40 + mb * seq / 128) * GiB)
          or headroom == h100 - math.tointeger((40 + mb * seq / 128) * GiB))
        assert.are.equal(tostring(headroom >= 0), c["data-fits"])
        if headroom >= 0 then fits = fits + 1 else short = short + 1 end
      end
    end
    assert.is_true(fits > 0 and short > 0)
    assert.truthy(page:find("too big&quot;\nfor this test", 1, true))
  end)
end)

describe("vramplan.csv", function()
  local csv = require("vramplan.csv")

  it("reads RFC 4180: quotes, doubled quotes, commas and line breaks inside, CRLF", function()
    local rows = csv.parse('a,b,c\r\n1,"x, ""y""\r\nz",\r\n"",2,3', "t.csv")
    assert.are.same({ { "a", "b", "c" }, { "1", 'x, "y"\r\nz', "" }, { "", "2", "3" } }, rows)
  end)

  it("refuses what it cannot read, naming the row", function()
    assert.has_error(function() csv.parse('a\n"b\n', "t.csv") end, "t.csv: row 2: a quoted field is not closed")
    assert.has_error(function() csv.parse('a\nb"c\n', "t.csv") end, "t.csv: row 2: a quote inside an unquoted field")
    assert.has_error(function() csv.parse('a\n"b"c\n', "t.csv") end, "t.csv: row 2: text after a closing quote")
  end)
end)
