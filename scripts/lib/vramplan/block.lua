-- vramplan.block — new kinds of block written in an architecture script the
-- way their PyTorch forward reads:
--
--   block { name = "mlp", width = c.hidden,
--           params = { { "gate_proj", linear = { c.hidden, c.intermediate }, split = "column" }, ... },
--           forward = function(x, p) return p.down_proj(F.silu(p.gate_proj(x)) * p.up_proj(x)) end }
--
-- The forward runs once, when the block is built, on symbolic tensors: each
-- F call records one of the core's primitives (engine/ops/op_block.c runs
-- them at every step, in C). A value's last reference goes after its last
-- use, as a Python temporary's does; F.keep(t, "name") makes it a local of
-- the forward instead, alive until the name is bound again or the forward
-- returns (then in the order the names were first bound, as CPython clears
-- a frame). docs/writing-blocks.md builds a block step by step.
local vramplan = require("vramplan")
local shapes = require("vramplan.block_shapes")
local indexing = require("vramplan.block_index")
local inplace = require("vramplan.block_inplace")

local block = {}

-- (full sources, not short_src: Lua cuts a long path to its last 60
-- characters, differently for each file name, and the names would not match)
local SELF = debug.getinfo(1, "S").source
local SHAPES = SELF:gsub("block%.lua$", "block_shapes.lua") -- its vocabulary of shapes
local INDEX = SELF:gsub("block%.lua$", "block_index.lua") -- and of tables and indices
local INPLACE = SELF:gsub("block%.lua$", "block_inplace.lua") -- and of in-place writes

local tracing -- the trace running now (one at a time: block() sets it around the forward)

-- "file:line" of the script line that called into this file. A tail call
-- (`return F.silu(x)`) leaves no frame of its caller to read the line
-- from: then the forward's own first line, and its block's name. (This
-- file makes no tail calls of its own: `return (f(x))`.)
local function where()
  local tail = false
  for level = 2, 60 do
    local info = debug.getinfo(level, "Slt")
    if not info then break end
    if info.source ~= SELF and info.source ~= SHAPES and info.source ~= INDEX and info.source ~= INPLACE
        and info.what ~= "C" and (info.currentline or 0) > 0 then
      if tail and tracing then return tracing.forward_at .. ": block " .. tracing.name .. "'s forward" end
      return info.short_src .. ":" .. info.currentline
    end
    tail = info.istailcall
  end
  return "?"
end

local function fail(fmt, ...) error(where() .. ": " .. string.format(fmt, ...), 0) end

local tensor_meta, module_meta, dtype_meta = {}, {}, {}

local function is_tensor(v) return getmetatable(v) == tensor_meta end

local function check_tensor(v, what)
  if not is_tensor(v) then fail("%s: expected a tensor, got %s", what, type(v)) end
  if v.trace ~= tracing then fail("%s: a tensor of another block's forward", what) end
  return v
end

-- A tensor split into heads ([b, s, heads, d], or [b, heads, s, d] after
-- transpose(1, 2)) carries `heads` (the whole model's: tensor parallelism
-- divides them), `heads_first` (its shape puts the heads before the
-- sequence) and `stored_heads_first` (its storage does): it is contiguous
-- when the two agree. `width` is then the head's width.
local head_fields = { "heads", "heads_first", "stored_heads_first" }

local function new_value(trace, width, split, like)
  local id = trace.n_values
  if id >= 512 then fail("block %s: more than 512 tensors in one forward", trace.name) end
  trace.n_values = id + 1
  local t = setmetatable({ id = id, width = width, split = split or false, trace = trace }, tensor_meta)
  if like then
    t.vector, t.zero_dim, t.gathered = rawget(like, "vector"), rawget(like, "zero_dim"), rawget(like, "gathered")
  end
  if like and rawget(like, "heads") then
    for _, k in ipairs(head_fields) do t[k] = like[k] end
  end
  trace.values[id] = t
  return t
end

-- Another view of t's value: the same storage (the same value to the
-- program), another shape.
local function view_of(t, width, fields)
  local v = setmetatable({ id = t.id, width = width, split = t.split, trace = t.trace, index = rawget(t, "index") },
    tensor_meta)
  for k, x in pairs(fields or {}) do v[k] = x end
  return v
end

-- The width of a last dimension that is the keys' length (attention
-- scores [b, heads, s, keys]: the step's sequence and any cached prefix),
-- known only when the step runs.
local SEQ = "seq"

-- The primitives that take integer indices (block_index.lua checks where).
local takes_indices = { embedding = true, index = true, gather = true, scatter = true, scatter_add = true,
                        index_select = true, index_add = true, scatter_ = true, scatter_add_ = true,
                        index_add_ = true, index_copy_ = true }

-- Records one primitive; returns its output tensor (split into heads as
-- `like` is, if given: elementwise results keep their input's layout).
local function record(prim, args, fields, width, split, label, like)
  local trace = tracing
  if not trace then fail("%s: tensors exist only inside a block's forward", prim) end
  -- the core's program holds 512 instructions, frees included (block.h)
  trace.calls = (trace.calls or 0) + 1
  if trace.calls > 250 then fail("block %s: more than 250 primitive calls in one forward", trace.name) end
  for _, a in ipairs(args) do
    if rawget(a, "index") and not takes_indices[prim] then
      fail("%s: takes a floating-point tensor, got integer indices", label ~= "" and label or prim)
    end
  end
  local out = new_value(trace, width, split, like)
  -- "" names the op by the block's name alone
  local instr = { prim = prim, args = {}, out = out.id, label = trace.name .. (label ~= "" and "." .. label or ""),
                  out_width = width ~= SEQ and width or nil, out_split = split or false,
                  scores_heads = width == SEQ and like and rawget(like, "heads") or nil }
  for k, v in pairs(fields or {}) do instr[k] = v end
  for i, a in ipairs(args) do instr.args[i] = a.id end
  trace.entries[#trace.entries + 1] = { instr = instr }
  return out
end

local function label_of(opts, default)
  if opts == nil then return default end
  if type(opts) ~= "table" or (opts.label ~= nil and type(opts.label) ~= "string") then
    fail("options: expected { label = \"...\" }")
  end
  return opts.label or default
end

-- Whether t's last dimension is divided over tensor-parallel ranks (a
-- tensor split into heads has its heads divided, not their width; a
-- tensor of explicit shape says so of each dimension: block_shapes.lua).
local function last_split(t)
  local dims = rawget(t, "dims")
  if dims then return type(dims[#dims]) == "table" and dims[#dims].sym == "split" end
  return t.split and not t.heads
end

-- Whether t's rows are the whole sequence a column-parallel linear
-- gathered under sequence parallelism (not the block input's share).
local function gathered(t)
  if t.split or rawget(t, "gathered") then return true end
  for _, d in ipairs(rawget(t, "dims") or {}) do
    if type(d) == "table" and d.gathered then return true end
  end
  return nil
end

-- Broadcasting of two last dimensions: equal, or one of them 1.
local function broadcast(a, b, what)
  if a.width and b.width and a.width ~= b.width and a.width ~= 1 and b.width ~= 1 then
    fail("%s: shapes do not match: last dimension %d against %d", what, a.width, b.width)
  end
  if a.width ~= 1 and b.width ~= 1 and last_split(a) ~= last_split(b) and not (a.heads or b.heads) then
    fail("%s: one operand is split over tensor-parallel ranks and the other is not", what)
  end
  if a.width == 1 then return b end
  return a
end

local F = {}

local dtype_names = { float32 = "fp32", fp32 = "fp32", float = "fp32", bfloat16 = "bf16", bf16 = "bf16",
                      float16 = "fp16", fp16 = "fp16", half = "fp16" }

local function binary(prim, scalar_prim, label)
  return function(a, b, opts)
    if type(a) == "number" then a, b = b, a end
    check_tensor(a, label)
    if type(b) == "number" then return (record(scalar_prim, { a }, nil, a.width, a.split, label_of(opts, label), a)) end
    check_tensor(b, label)
    local shape = broadcast(a, b, label)
    -- a 0-dim operand does not promote a dimensioned one (mul only yet)
    local zero_dim = (a.zero_dim and not b.zero_dim) and 1 or (b.zero_dim and not a.zero_dim) and 2 or nil
    if zero_dim and prim ~= "mul" then fail("%s: of a 0-dim tensor and another is not in the vocabulary yet", label) end
    local out = record(prim, { a, b }, { zero_dim = zero_dim }, shape.width, shape.split, label_of(opts, label), shape)
    out.vector = a.vector and b.vector or nil
    out.zero_dim = a.zero_dim and b.zero_dim or nil
    return out
  end
end

F.mul = binary("mul", "scale", "mul")
local plain_add = binary("add", "shift", "add")

local function is_mask(t) return is_tensor(t) and rawget(t, "mask") ~= nil end

-- scores + mask: eager attention's additive mask (F.mask), broadcast over
-- the heads; the sum in the promoted dtype.
local function mask_add(scores, mask, opts)
  check_tensor(scores, "add")
  if mask.mask == "bool" then fail("add: a bool mask is applied with F.masked_fill(scores, mask)") end
  if scores.width ~= SEQ then fail("add: a mask is added to attention scores [b, heads, s, keys] (F.matmul's)") end
  return (record("mask_add", { scores, mask }, nil, SEQ, scores.split, label_of(opts, "add"), scores))
end

F.add = function(a, b, opts)
  if is_mask(b) then return (mask_add(a, b, opts)) end
  if is_mask(a) then return (mask_add(b, a, opts)) end
  return (plain_add(a, b, opts))
end
-- t - number passes the gradient through as t + number does; number - t
-- and t - u give the subtrahend -grad, a tensor of its own: not yet
local minus_number = binary("add", "shift", "sub")
local minus_tensor = binary("sub", "shift", "sub")
F.sub = function(a, b, opts)
  if type(a) == "number" then fail("sub: a number minus a tensor is not in the vocabulary yet") end
  if type(b) == "number" then return (minus_number(a, b, opts)) end
  return (minus_tensor(a, b, opts))
end
F.div = function(a, b, opts)
  check_tensor(a, "div")
  if type(b) ~= "number" then fail("div: a tensor over a tensor is not in the vocabulary yet; over a number it is") end
  return (record("scale", { a }, nil, a.width, a.split, label_of(opts, "div"), a))
end
F.neg = function(a, opts)
  check_tensor(a, "neg")
  return (record("neg", { a }, nil, a.width, a.split, label_of(opts, "neg")))
end

-- Elementwise functions (op_block.c lists what autograd keeps of each).
for _, fn in ipairs({ "silu", "gelu", "gelu_tanh", "relu", "sigmoid", "tanh", "exp", "rsqrt" }) do
  F[fn] = function(a, opts)
    check_tensor(a, fn)
    return (record("unary", { a }, { fn = fn }, a.width, a.split, label_of(opts, fn), a))
  end
end

-- F.softmax(x, -1), F.log_softmax(x, -1): over the last dimension, in fp32
-- under autocast (its fp32 list), keeping their output. (softmax's dtype
-- argument: x:float() first.)
-- F.softmax(x, -1, { dtype = "float32" }): softmax's dtype argument, which
-- autocast leaves alone: x converted to fp32 first (not fp16 on CUDA).
for _, fn in ipairs({ "softmax", "log_softmax" }) do
  F[fn] = function(a, dim, opts)
    check_tensor(a, fn)
    if dim ~= -1 then fail("%s: only over the last dimension (dim = -1) yet", fn) end
    local dtype = type(opts) == "table" and opts.dtype or nil
    if dtype ~= nil then
      if fn ~= "softmax" or dtype_names[dtype] ~= "fp32" then fail("%s: a dtype argument of float32 only yet", fn) end
      local label = label_of({ label = opts.label }, fn)
      return (record("softmax_fp32", { a }, { aux = { tracing.name .. "." .. label .. "_upcast" } }, a.width, a.split,
        label, a))
    end
    return (record("unary", { a }, { fn = fn }, a.width, a.split, label_of(opts, fn), a))
  end
end

-- pow(x, n) for a number n: pow_backward keeps x and builds
-- grad * (n * x.pow(n - 1)), as for n = 2.
function F.pow(a, exponent, opts)
  check_tensor(a, "pow")
  if type(exponent) ~= "number" then fail("pow: the exponent must be a number (got %s)", type(exponent)) end
  return (record("unary", { a }, { fn = "pow" }, a.width, a.split, label_of(opts, "pow")))
end

-- x:sum(-1), x:mean(-1): keepdim, unless { keepdim = false }: of a vector
-- (a parameter declared with size, or products of them) a 0-dim tensor
-- then, which does not promote what it multiplies.
local function reduction(prim)
  return function(a, dim, opts)
    check_tensor(a, prim)
    if dim ~= -1 then fail("%s: only over the last dimension (dim = -1) yet", prim) end
    if not a.width then fail("%s: the last dimension's size is unknown (give the block a width)", prim) end
    if prim ~= "mean" and prim ~= "sum" and (last_split(a) or rawget(a, "dims")) then
      fail("%s: of rows of tokens whole on every tensor-parallel rank only yet", prim)
    end
    local keepdim = true
    if type(opts) == "table" and opts.keepdim ~= nil then
      keepdim = opts.keepdim
      opts = opts.label and { label = opts.label } or nil
    end
    local out = record(prim, { a }, { width = a.width, width_split = last_split(a) }, 1, false, label_of(opts, prim))
    out.zero_dim = (not keepdim and a.vector) or nil
    out.gathered = gathered(a)
    return out
  end
end
F.mean = reduction("mean")
F.sum = reduction("sum")
-- x:logsumexp(-1) (in fp32 under autocast: its fp32 list), x:var(-1),
-- x:std(-1) (any correction: the sizes are the same): prims.h
-- vp_logsumexp, vp_var cite what each keeps and makes.
F.logsumexp = reduction("logsumexp")
F.var = reduction("var")
F.std = reduction("std")
-- x:amax(-1), x:amin(-1) (keepdim, as the others here; PyTorch's default
-- drops the dimension, which changes no size): prims.h vp_amax.
F.amax = reduction("amax")
F.amin = reduction("amin")


-- x.to(dtype): dtype a name ("float32", "bf16", ...) or another tensor's
-- x.dtype (known only when the step runs).
function F.to(a, dtype, opts)
  check_tensor(a, "to")
  if getmetatable(dtype) == dtype_meta then
    check_tensor(dtype.of, "to")
    return (record("to", { a, dtype.of }, nil, a.width, a.split, label_of(opts, "to"), a))
  end
  local name = dtype_names[dtype]
  if not name then fail("to: unknown dtype %s (float32, bfloat16, float16 or a tensor's .dtype)", tostring(dtype)) end
  return (record("to", { a }, { dtype = name }, a.width, a.split, label_of(opts, "to"), a))
end
function F.float(a, opts) return (F.to(a, "float32", opts)) end

function F.dropout(a, p, opts)
  check_tensor(a, "dropout")
  if type(p) ~= "number" or p < 0 or p >= 1 then fail("dropout: p must be a number in [0, 1)") end
  return (record("dropout", { a }, { number = p }, a.width, a.split, label_of(opts, "dropout"), a))
end

-- torch.split(t, sizes, dim=-1): views of the given widths.
function F.split(t, sizes, dim, opts)
  check_tensor(t, "split")
  if dim ~= -1 then fail("split: only along the last dimension (dim = -1) yet") end
  if not t.width then fail("split: the last dimension's size is unknown (give the block a width)") end
  if type(sizes) ~= "table" or #sizes < 1 or #sizes > 8 then fail("split: sizes must list 1 to 8 widths") end
  local total = 0
  for _, w in ipairs(sizes) do
    if math.type(w) ~= "integer" or w < 1 then fail("split: sizes must be whole numbers") end
    total = total + w
  end
  if total ~= t.width then fail("split: the sizes add up to %d, the last dimension is %d", total, t.width) end
  local trace = tracing
  local outs, ids = {}, {}
  -- a tensor of explicit shape says which of its dimensions are split
  local split_width = t.split
  if rawget(t, "dims") then split_width = last_split(t) end
  for i, w in ipairs(sizes) do
    outs[i] = new_value(trace, w, t.split)
    ids[i] = outs[i].id
  end
  local label = label_of(opts, "split")
  trace.entries[#trace.entries + 1] = { instr = { prim = "split", args = { t.id }, out = ids[1], outs = ids,
    parts = sizes, width = t.width, width_split = split_width, label = trace.name .. (label ~= "" and "." .. label or "") } }
  return table.unpack(outs)
end

-- t.chunk(n, dim=-1): n equal views.
function F.chunk(t, n, dim, opts)
  check_tensor(t, "chunk")
  if math.type(n) ~= "integer" or n < 1 or n > 8 then fail("chunk: into 1 to 8 parts") end
  if not t.width or t.width % n ~= 0 then fail("chunk: the last dimension (%s) must divide into %d", tostring(t.width), n) end
  local sizes = {}
  for i = 1, n do sizes[i] = t.width // n end
  return F.split(t, sizes, dim, { label = label_of(opts, "chunk") })
end

-- torch.cat((a, b), dim=-1).
function F.cat(parts, dim, opts)
  if type(parts) ~= "table" or is_tensor(parts) or #parts ~= 2 then fail("cat: takes a list of two tensors: F.cat({ a, b }, -1)") end
  local a, b = check_tensor(parts[1], "cat"), check_tensor(parts[2], "cat")
  if dim ~= -1 then fail("cat: only along the last dimension (dim = -1) yet") end
  if a.split ~= b.split then fail("cat: one part is split over tensor-parallel ranks and the other is not") end
  if a.heads ~= b.heads then fail("cat: the parts have %s and %s heads", tostring(a.heads), tostring(b.heads)) end
  local width = a.width and b.width and a.width + b.width or nil
  local out = record("cat", { a, b }, nil, width, a.split, label_of(opts, "cat"), a)
  if out.heads then out.stored_heads_first = out.heads_first end -- a new tensor, contiguous
  return out
end

-- Kernels with their own saving rules (engine/core/prims.h cites each):
-- Megatron's fused bias_swiglu (megatron/core/fusions/fused_bias_swiglu.py:
-- silu of the first half times the second, keeping its input) and a fused
-- RMSNorm (apex FusedRMSNorm, Transformer Engine's RMSNorm: keeps the input,
-- the weight and one fp32 rstd per row).
function F.swiglu(a, opts)
  check_tensor(a, "swiglu")
  if a.width and a.width % 2 ~= 0 then fail("swiglu: the last dimension (%d) must be even", a.width) end
  return (record("swiglu", { a }, nil, a.width and a.width // 2, a.split, label_of(opts, "swiglu")))
end

function F.rms_norm(a, weight, opts)
  check_tensor(a, "rms_norm")
  check_tensor(weight, "rms_norm")
  if a.width and weight.width and a.width ~= weight.width then
    fail("rms_norm: the weight has %d elements, the rows %d", weight.width, a.width)
  end
  return (record("rms_norm", { a, weight }, nil, a.width, a.split, label_of(opts, "rms_norm")))
end

-- F.kernel { ... }: a fused kernel whose memory is not its PyTorch
-- reference's, declared from its source (which `source` cites): inputs
-- (1-8 tensors), the output's last dimension and dtype, what its autograd
-- Function keeps (`saves`: input numbers and "output"), the inputs its
-- forward casts to autocast's dtype and keeps as cast (`casts`) or copies
-- (`copies`: x.contiguous() of a transposed view) and keeps as copied, tensors it
-- makes only to keep (`keeps`: per row of the first input, a width and
-- dtype), and its workspaces per row (bytes, or { bytes = n, input = m }:
-- m more elements of the first input's dtype). Widths are numbers or
-- functions of the call's input tensors; the dtype "input" is the first
-- input's. Returns the kernel, called as a function.
local kernel_meta = {}
local kernel_fields = { name = true, source = true, inputs = true, output = true, saves = true, keeps = true,
                        workspace = true, casts = true, copies = true }
local KERNEL_INPUTS = 8 -- block.h's VP_BLOCK_ARGS
local kernel_dtypes = setmetatable({ input = "input" }, { __index = dtype_names })

local function width_of(spec, args, what)
  local w = spec
  if type(spec) == "function" then w = spec(table.unpack(args)) end
  if math.type(w) ~= "integer" or w < 1 then fail("%s: a width must be a whole number (got %s)", what, tostring(w)) end
  return w
end

function F.kernel(decl)
  if type(decl) ~= "table" then fail("kernel: takes a declaration table") end
  for k in pairs(decl) do
    if not kernel_fields[k] then fail("kernel: unknown field '%s'", tostring(k)) end
  end
  if type(decl.name) ~= "string" then fail("kernel: needs a name") end
  if type(decl.source) ~= "string" or #decl.source < 10 then
    fail("kernel %s: needs the source its saving rules come from (source = \"repository file: the lines\")", decl.name)
  end
  if math.type(decl.inputs) ~= "integer" or decl.inputs < 1 or decl.inputs > KERNEL_INPUTS then
    fail("kernel %s: inputs must be 1 to %d", decl.name, KERNEL_INPUTS)
  end
  local saves, masks = 0, { casts = 0, copies = 0 }
  for _, s in ipairs(decl.saves or {}) do
    if s == "output" then
      saves = saves | (1 << KERNEL_INPUTS)
    elseif math.type(s) == "integer" and s >= 1 and s <= decl.inputs then
      saves = saves | (1 << (s - 1))
    else
      fail("kernel %s: saves lists input numbers (1 to %d) and \"output\"", decl.name, decl.inputs)
    end
  end
  for field in pairs(masks) do
    if decl[field] ~= nil and type(decl[field]) ~= "table" then fail("kernel %s: %s lists input numbers", decl.name, field) end
    for _, c in ipairs(decl[field] or {}) do
      if math.type(c) ~= "integer" or c < 1 or c > decl.inputs then
        fail("kernel %s: %s lists input numbers (1 to %d)", decl.name, field, decl.inputs)
      end
      masks[field] = masks[field] | (1 << (c - 1))
    end
  end
  if decl.keeps ~= nil and (type(decl.keeps) ~= "table" or #decl.keeps > 2) then
    fail("kernel %s: keeps lists at most two { width = ..., dtype = ... }", decl.name)
  end
  for _, k in ipairs(decl.keeps or {}) do
    if not kernel_dtypes[k.dtype] then
      fail("kernel %s: a kept tensor's dtype must be named (float32, ..., or \"input\": the first input's)", decl.name)
    end
  end
  if decl.output ~= nil and type(decl.output) ~= "table" then fail("kernel %s: output = { width = ..., dtype = ... }", decl.name) end
  if decl.output and decl.output.dtype and not kernel_dtypes[decl.output.dtype] then
    fail("kernel %s: unknown output dtype %s", decl.name, tostring(decl.output.dtype))
  end
  local w = decl.workspace or {}
  for _, phase in ipairs({ "forward", "backward" }) do
    local v = w[phase]
    if type(v) == "table" then
      for key, n in pairs(v) do
        if (key ~= "bytes" and key ~= "input") or (math.type(n) ~= "integer" and type(n) ~= "function") then
          fail("kernel %s: workspace.%s = { bytes = n, input = m } per row", decl.name, phase)
        end
      end
    elseif v ~= nil and math.type(v) ~= "integer" and type(v) ~= "function" then
      fail("kernel %s: workspace.%s must be bytes per row (or { bytes = n, input = m })", decl.name, phase)
    end
  end
  local k = {}
  for key, v in pairs(decl) do k[key] = v end
  k.saves_mask, k.casts_mask, k.copies_mask = saves, masks.casts, masks.copies
  return setmetatable(k, kernel_meta)
end

kernel_meta.__call = function(k, ...)
  local args = table.pack(...)
  local opts
  if args.n == k.inputs + 1 then opts, args.n = args[args.n], k.inputs end
  if args.n ~= k.inputs then fail("kernel %s: takes %d inputs, got %d", k.name, k.inputs, args.n) end
  for i = 1, k.inputs do check_tensor(args[i], "kernel " .. k.name) end
  local first = args[1]
  if not first.width then fail("kernel %s: its first input's last dimension is unknown", k.name) end
  local out = k.output or {}
  local entry = { inputs = k.inputs, saves = k.saves_mask, casts = k.casts_mask, copies = k.copies_mask,
                  in_width = first.width,
                  in_split = first.split, out_dtype = out.dtype and kernel_dtypes[out.dtype] or nil,
                  out_width = out.width and width_of(out.width, args, "kernel " .. k.name .. " output") or first.width,
                  out_split = first.split }
  for j, keep in ipairs(k.keeps or {}) do
    entry["keep" .. j .. "_width"] = width_of(keep.width, args, "kernel " .. k.name .. " keeps")
    entry["keep" .. j .. "_dtype"] = kernel_dtypes[keep.dtype]
  end
  local w = k.workspace or {}
  for _, phase in ipairs({ "forward", "backward" }) do
    local v = w[phase]
    local bytes, like = v, nil
    if type(v) == "table" then bytes, like = v.bytes, v.input end
    local what = "kernel " .. k.name .. " workspace"
    if bytes then entry[phase .. "_workspace"] = width_of(bytes, args, what) end
    if like then entry[phase .. "_workspace_like"] = width_of(like, args, what) end
  end
  local kernels = tracing.kernels
  if #kernels >= 8 then fail("kernel %s: a block calls at most 8 kernels", k.name) end
  kernels[#kernels + 1] = entry
  local inputs = {}
  for i = 1, k.inputs do inputs[i] = args[i] end
  return (record("kernel", inputs, { kernel = #kernels - 1 }, entry.out_width, entry.out_split,
    label_of(opts, k.name)))
end

-- ---- attention ----

local function per_token(t) return t.heads and t.heads * t.width or t.width end

local function check_heads(t, what)
  check_tensor(t, what)
  if not t.heads then fail("%s: expects a tensor split into heads (x:view(-1, head_dim))", what) end
  return t
end

-- x:view(-1, head_dim): the last dimension split into heads of head_dim
-- ([b, s, heads, d], a view); x:view(-1) (or reshape) joins them again,
-- a view only of a tensor whose heads lie after its sequence, contiguous.
function F.view(t, ...)
  check_tensor(t, "view")
  local dims = table.pack(...)
  if dims.n == 2 and dims[1] == -1 and math.type(dims[2]) == "integer" and dims[2] > 0 then
    if t.heads then fail("view: the tensor is split into heads already") end
    if not t.width or t.width % dims[2] ~= 0 then
      fail("view: the last dimension (%s) does not split into heads of %d", tostring(t.width), dims[2])
    end
    return view_of(t, dims[2], { heads = t.width // dims[2], heads_first = false, stored_heads_first = false })
  end
  if dims.n == 1 and dims[1] == -1 then
    check_heads(t, "view(-1)")
    if t.heads_first or t.stored_heads_first then
      fail("view(-1): joins the heads of a [b, s, heads, d] tensor whose storage is so (transpose(1, 2) first; a copy is not in the vocabulary yet)")
    end
    return view_of(t, t.heads * t.width)
  end
  fail("view: takes (-1, head_dim) or (-1): other shapes are not in the vocabulary yet")
end
F.reshape = F.view

-- x:transpose(1, 2): [b, s, heads, d] as [b, heads, s, d] and back (a view);
-- k:transpose(2, 3) (or (-2, -1)) of [b, heads, s, d] keys: the operand of
-- q @ k^T (F.matmul).
function F.transpose(t, d0, d1)
  check_heads(t, "transpose")
  if (d0 == 2 and d1 == 3) or (d0 == 3 and d1 == 2) or (d0 == -2 and d1 == -1) or (d0 == -1 and d1 == -2) then
    if not t.heads_first or t.width == SEQ then fail("transpose(2, 3): of [b, heads, s, d] keys (transpose(1, 2) first)") end
    local fields = { heads = t.heads, heads_first = true, stored_heads_first = t.stored_heads_first,
                     strided = t.strided, keys_transposed = not t.keys_transposed or nil }
    return view_of(t, t.width, fields)
  end
  if not ((d0 == 1 and d1 == 2) or (d0 == 2 and d1 == 1)) then
    fail("transpose: only of the sequence and the heads (1, 2), or of a head's last two dimensions (2, 3) yet")
  end
  if t.keys_transposed then fail("transpose(1, 2): of keys transposed (2, 3): not in the vocabulary yet") end
  return view_of(t, t.width, { heads = t.heads, heads_first = not t.heads_first,
                               stored_heads_first = t.stored_heads_first })
end

-- x:contiguous(): x itself when its storage lies as its shape says, else a
-- copy (attn_output.transpose(1, 2).contiguous()).
function F.contiguous(t, opts)
  check_tensor(t, "contiguous")
  if t.heads and (t.heads_first ~= t.stored_heads_first or t.strided) then
    if t.keys_transposed or t.width == SEQ then fail("contiguous: a copy of transposed keys or scores is not in the vocabulary yet") end
    local out = record("copy", { t }, nil, t.width, t.split, label_of(opts, "contiguous"), t)
    out.stored_heads_first, out.strided = t.heads_first, nil
    return out
  end
  return t
end

-- apply_rotary_pos_emb of q or k ([b, heads, s, d], or [b, s, heads, d]:
-- the same tensors) with the step's cos and sin (the model's
-- rotary_embedding): q * cos + rotate_half(q) * sin, as LLaMA's; the result
-- keeps q's layout. Rotate q and k before binding
-- either (query_states, key_states = apply_rotary_pos_emb(...)).
function F.rotary(t, opts)
  check_heads(t, "rotary")
  if t.width % 2 ~= 0 then fail("rotary: the head's width (%d) must be even", t.width) end
  return (record("rotary", { t }, { out_width = per_token(t) }, t.width, t.split, label_of(opts, "rotary"), t))
end

-- F.select(t, i, n): of each n consecutive heads the i-th (0-based), a
-- view: q.reshape(b, s, heads // n, n, d)[:, :, :, i]. Its gradient is a
-- zero-filled one of all of t (select_backward).
function F.select(t, i, n, opts)
  check_heads(t, "select")
  if math.type(n) ~= "integer" or n < 1 or t.heads % n ~= 0 then
    fail("select: the heads (%d) must group by n (%s)", t.heads, tostring(n))
  end
  if math.type(i) ~= "integer" or i < 0 or i >= n then fail("select: the index must be from 0 to %d", n - 1) end
  local out = record("select", { t }, { of = n, out_width = per_token(t) // n }, t.width, t.split,
    label_of(opts, "select"), t)
  out.heads, out.strided = t.heads // n, true
  return out
end

-- k, v = F.cache(k, v): past_key_value.update(key_states, value_states,
-- layer_idx) (transformers' DynamicCache: with use_cache the model's
-- outputs keep them).
function F.cache(k, v, opts)
  check_heads(k, "cache")
  check_heads(v, "cache")
  local trace = tracing
  local nk, nv = new_value(trace, k.width, k.split, k), new_value(trace, v.width, v.split, v)
  local label = label_of(opts, "cache")
  trace.calls = (trace.calls or 0) + 1
  trace.entries[#trace.entries + 1] = { instr = { prim = "cache", args = { k.id, v.id }, out = nk.id,
    outs = { nk.id, nv.id }, label = trace.name .. (label ~= "" and "." .. label or "") } }
  return nk, nv
end

-- Whether t, seen as [b, heads, s, d], is contiguous: its storage lies
-- so and it is not a strided view (F.select's).
local function contiguous_heads_first(t) return t.stored_heads_first and not t.strided end

local sdpa_options = { dropout_p = true, is_causal = true, upcast_softmax = true, keeps_weights = true, label = true }

-- F.sdpa(q, k, v, { is_causal = true, ... }): scaled-dot-product attention
-- as the recipe's `attention` runs it (engine/ops/sdpa.h: HF's eager path,
-- SDPA's flash or memory-efficient kernel, FlashAttention-2, ring attention
-- under cp; each with its own saving rules), q [b, heads, s, d] and k, v
-- [b, kv_heads, s, d] (grouped-query attention repeats them as transformers
-- does), or all three [b, s, heads, d] as flash_attn_func takes them (the
-- eager path then sees their transposes, views); scale 1/sqrt(d) and LLaMA's additive causal mask. Options:
-- dropout_p, upcast_softmax (default true: the eager softmax in fp32, cast
-- to q's dtype), keeps_weights (the decoder layer keeps the eager path's
-- probabilities until it returns). Returns [b, s, heads, d], contiguous.
function F.sdpa(q, k, v, opts)
  check_heads(q, "sdpa")
  check_heads(k, "sdpa")
  check_heads(v, "sdpa")
  opts = opts or {}
  if type(opts) ~= "table" then fail("sdpa: options must be a table") end
  for key in pairs(opts) do
    if not sdpa_options[key] then fail("sdpa: unknown option '%s'", tostring(key)) end
  end
  if opts.is_causal ~= true then fail("sdpa: only causal attention (is_causal = true) is in the vocabulary yet") end
  local p = opts.dropout_p or 0
  if type(p) ~= "number" or p < 0 or p >= 1 then fail("sdpa: dropout_p must be a number in [0, 1)") end
  if q.heads_first ~= k.heads_first or k.heads_first ~= v.heads_first then
    fail("sdpa: q, k and v must be alike: [b, heads, s, d] or (flash_attn_func's) [b, s, heads, d]")
  end
  if q.width ~= k.width or k.width ~= v.width then
    fail("sdpa: q, k and v must have one head width (%d, %d, %d)", q.width, k.width, v.width)
  end
  if k.heads ~= v.heads or q.heads % k.heads ~= 0 then
    fail("sdpa: k and v need one number of heads that divides q's (%d, %d, %d)", q.heads, k.heads, v.heads)
  end
  if q.split ~= k.split or k.split ~= v.split then fail("sdpa: q, k and v must be split over tensor-parallel ranks alike") end
  local fields = { heads = q.heads, kv_heads = k.heads, width = q.width, number = p, out_width = per_token(q),
                   upcast_softmax = opts.upcast_softmax ~= false, keeps_weights = opts.keeps_weights == true,
                   q_contiguous = contiguous_heads_first(q), k_contiguous = contiguous_heads_first(k),
                   v_contiguous = contiguous_heads_first(v), q_gaps = q.strided, k_gaps = k.strided,
                   v_gaps = v.strided }
  local out = record("sdpa", { q, k, v }, fields, q.width, q.split, label_of({ label = opts.label }, "sdpa"))
  out.heads, out.heads_first, out.stored_heads_first = q.heads, false, false
  return out
end

-- Eager attention written out, as transformers' eager_attention_forward
-- reads (modeling_llama.py, 4.48-4.52):
--   key_states = repeat_kv(key, module.num_key_value_groups)      F.repeat_kv(k, n)
--   attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * scaling
--                                                                  F.matmul(q, k:transpose(2, 3)) * scaling
--   attn_weights = attn_weights + causal_mask                      + F.mask("causal")
--   attn_weights = softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
--   attn_weights = dropout(attn_weights, p=dropout)
--   attn_output = torch.matmul(attn_weights, value_states)         F.matmul(w, v)
--   attn_output = attn_output.transpose(1, 2).contiguous()         (a copy)
-- The scores' last dimension is the keys' length (the step's sequence),
-- known when the step runs. docs/writing-blocks.md, step 5.

-- F.repeat_kv(x, n): transformers' repeat_kv of [b, kv_heads, s, d] keys or
-- values: n copies of each head (expand and reshape: a copy, or with one
-- key/value head per rank a view).
function F.repeat_kv(t, n, opts)
  check_heads(t, "repeat_kv")
  if not t.heads_first then fail("repeat_kv: of [b, kv_heads, s, d] (transpose(1, 2) first)") end
  if math.type(n) ~= "integer" or n < 1 then fail("repeat_kv: the repeats must be a whole number") end
  local out = record("repeat_kv", { t }, { times = n, kv_heads = t.heads }, t.width, t.split,
    label_of(opts, "repeat_kv"), t)
  out.heads, out.strided = t.heads * n, t.strided
  return out
end

-- F.matmul(a, b, { label = ..., operands = { "q", "k" } }): torch.matmul
-- of q [b, heads, s, d] and k:transpose(2, 3) (the scores [b, heads, s,
-- keys]), or of the scores and v [b, heads, keys, d]; autocast's casts and
-- matmul's batch-fold copies are named NAME_cast and NAME_reshape after
-- the operands.
function F.matmul(a, b, opts)
  check_heads(a, "matmul")
  check_heads(b, "matmul")
  opts = opts or {}
  if type(opts) ~= "table" then fail("matmul: options must be a table") end
  if not a.heads_first or not b.heads_first then
    fail("matmul: of [b, heads, s, d] tensors (transpose(1, 2) first)")
  end
  if a.heads ~= b.heads then fail("matmul: the operands have %d and %d heads (F.repeat_kv first)", a.heads, b.heads) end
  if a.split ~= b.split then fail("matmul: the operands must be split over tensor-parallel ranks alike") end
  local width, head
  if b.keys_transposed then
    if a.width == SEQ or a.width ~= b.width then
      fail("matmul: q's head width (%s) against the keys' (%s)", tostring(a.width), tostring(b.width))
    end
    width, head = SEQ, a.width
  else
    if a.width ~= SEQ then fail("matmul: of q and k:transpose(2, 3), or of the scores and v") end
    if b.width == SEQ then fail("matmul: the second operand must be [b, heads, keys, d]") end
    width, head = b.width, b.width
  end
  local names = opts.operands or { "a", "b" }
  if type(names) ~= "table" or type(names[1]) ~= "string" or type(names[2]) ~= "string" then
    fail("matmul: operands = { \"q\", \"k\" } names the two operands' inner events")
  end
  local prefix = tracing.name .. "."
  local fields = { width = head, b_transposed = b.keys_transposed == true, a_contiguous = contiguous_heads_first(a),
                   b_contiguous = contiguous_heads_first(b), a_gaps = a.strided, b_gaps = b.strided,
                   scores_heads = a.heads,
                   aux = { prefix .. names[1] .. "_cast", prefix .. names[2] .. "_cast",
                           prefix .. names[1] .. "_reshape", prefix .. names[2] .. "_reshape" } }
  local out = record("matmul", { a, b }, fields, width, a.split, label_of({ label = opts.label }, "matmul"), a)
  out.heads, out.heads_first, out.stored_heads_first, out.strided = a.heads, true, true, nil
  return out
end

local mask_kinds = { causal = true, sliding = true, padded = true, bool = true, prefix = true, bidirectional = true }

-- F.mask(kind, { window = n }): the mask eager attention applies, [b, 1, s,
-- keys], made once per step as transformers' models make it for eager
-- attention: "causal" (LlamaModel's additive mask), "sliding" (MistralModel's,
-- with a sliding window of `window` keys), "padded" (from an all-ones
-- padding mask: cloned to the batch), "bool" (a bool mask for masked_fill:
-- BLOOM's), "prefix" (PaliGemma's prefix-LM mask in training: causal, and
-- bidirectional over the prefix the batch's token_type_ids mark; the batch
-- then carries token_type_ids and an attention_mask), "bidirectional" (an
-- encoder's: BertModel's extended mask over an all-ones attention_mask,
-- [b, 1, 1, keys], no causal part). An additive mask is added (scores +
-- mask), a bool one applied with F.masked_fill.
function F.mask(kind, opts)
  if not mask_kinds[kind] then
    fail("mask: kind must be causal, sliding, padded, bool, prefix or bidirectional (got %s)", tostring(kind))
  end
  opts = opts or {}
  local window = opts.window or 0
  if kind == "sliding" and (math.type(window) ~= "integer" or window < 1) then
    fail("mask: a sliding mask needs its window: F.mask(\"sliding\", { window = 4096 })")
  end
  local out = record("mask", {}, { kind = kind, width = kind == "sliding" and window or nil }, SEQ, false,
    label_of({ label = opts.label }, "mask"))
  out.mask = kind
  return out
end

-- F.masked_fill(scores, mask): scores.masked_fill(mask, finfo.min) with a
-- bool mask, a new tensor.
function F.masked_fill(scores, mask, opts)
  check_tensor(scores, "masked_fill")
  if not is_mask(mask) or mask.mask ~= "bool" then fail("masked_fill: takes a bool mask (F.mask(\"bool\"))") end
  if scores.width ~= SEQ then fail("masked_fill: of attention scores [b, heads, s, keys] (F.matmul's)") end
  return (record("masked_fill", { scores, mask }, nil, SEQ, scores.split, label_of(opts, "masked_fill"), scores))
end

-- F.keep_in_layer(t): the decoder layer keeps t until it returns (its
-- self_attn_weights, the probabilities eager attention returns).
function F.keep_in_layer(t)
  check_tensor(t, "keep_in_layer")
  local trace = tracing
  trace.calls = (trace.calls or 0) + 1
  trace.entries[#trace.entries + 1] = { instr = { prim = "layer_keep", args = { t.id }, label = trace.name } }
  return t
end

-- F.linear(x, p.name): the declared linear layer (weight and bias).
function F.linear(x, m, opts)
  check_tensor(x, "linear")
  if getmetatable(m) ~= module_meta then fail("linear: the second argument must be a declared linear layer (p.name)") end
  if x.width and x.width ~= m.in_features then
    fail("linear %s: takes %d input features, got a tensor whose last dimension is %d", m.name, m.in_features, x.width)
  end
  if m.split == "row" and not x.split then
    fail("linear %s: a row-parallel layer takes a column-parallel layer's output (split over tensor-parallel ranks)",
      m.name)
  end
  if m.split ~= "row" and x.split then
    fail("linear %s: its input is split over tensor-parallel ranks: declare it split = \"row\"", m.name)
  end
  local args = { x, m.weight }
  if m.bias then args[3] = m.bias end
  return (record("linear", args, nil, m.out_features, m.split == "column", label_of(opts, m.name)))
end
module_meta.__call = function(m, x, opts) return (F.linear(x, m, opts)) end
module_meta.__index = function(m, k) fail("linear %s has no field '%s'", rawget(m, "name"), tostring(k)) end

-- Binds t to local `name` of the innermost frame; a value bound before
-- loses a name (and goes when it has none left and no use to come).
local function bind(frame, t, name)
  local trace = tracing
  local old = frame.bound[name]
  if old == t then return end
  frame.bound[name] = t
  if not frame.slot[name] then
    frame.slots[#frame.slots + 1] = name
    frame.slot[name] = #frame.slots
  end
  trace.names[t.id] = (trace.names[t.id] or 0) + 1
  if old then
    trace.names[old.id] = trace.names[old.id] - 1
    if trace.names[old.id] == 0 then trace.entries[#trace.entries + 1] = { release = old.id } end
  end
end

-- F.keep(t, "name"): t bound to the running forward's local `name`.
function F.keep(t, name)
  check_tensor(t, "keep")
  if type(name) ~= "string" then fail("keep: needs the local's name: F.keep(t, \"hidden_states\")") end
  bind(tracing.frames[#tracing.frames], t, name)
  return t
end

-- F.call(fn, a, b, ...): fn(a, b, ...) as a submodule's forward, a frame
-- of its own: its arguments, and what it binds with F.keep, are its
-- locals until it returns (NewGELUActivation.forward's `input`).
function F.call(fn, ...)
  if type(fn) ~= "function" then fail("call: the first argument must be the function to call") end
  local trace = tracing
  if not trace then fail("call: only inside a block's forward") end
  local frame = { bound = {}, slots = {}, slot = {} }
  local args = table.pack(...)
  for i = 1, args.n do
    if is_tensor(args[i]) then bind(frame, check_tensor(args[i], "call"), "argument " .. i) end
  end
  trace.frames[#trace.frames + 1] = frame
  local out = fn(...)
  trace.frames[#trace.frames] = nil
  for _, name in ipairs(frame.slots) do
    local t = frame.bound[name]
    trace.names[t.id] = trace.names[t.id] - 1
    if trace.names[t.id] == 0 then trace.entries[#trace.entries + 1] = { release = t.id } end
  end
  return out
end

-- Tensor methods and operators, as PyTorch's Tensor has them.
local methods = {
  float = F.float, to = F.to, pow = F.pow, split = F.split, chunk = F.chunk, mean = F.mean, sum = F.sum, sigmoid = F.sigmoid, tanh = F.tanh,
  logsumexp = F.logsumexp, var = F.var, std = F.std, amax = F.amax, amin = F.amin,
  exp = F.exp, rsqrt = F.rsqrt, relu = F.relu, view = F.view, reshape = F.reshape, transpose = F.transpose,
  contiguous = F.contiguous, select = F.select, softmax = F.softmax, log_softmax = F.log_softmax,
}
-- tensors of any shape (the chunked scan's vocabulary): block_shapes.lua
shapes.install({ F = F, methods = methods, fail = fail, record = record, view_of = view_of,
                 check_tensor = check_tensor, label_of = label_of })
-- tables, indices and collectives: block_index.lua
indexing.install({ F = F, methods = methods, fail = fail, record = record, new_value = new_value,
                   check_tensor = check_tensor, label_of = label_of, dims_of = shapes.dims_of,
                   copy_dims = shapes.copy_dims, tracing = function() return tracing end, last_split = last_split,
                   shaped = shapes.shaped, same_dim = shapes.same_dim, dims_string = shapes.dims_string,
                   norm_dim = shapes.norm_dim })
-- x:scatter_(...), x:index_add_(...), x:masked_fill_(...): block_inplace.lua
inplace.install({ F = F, methods = methods, fail = fail, check_tensor = check_tensor,
                  tracing = function() return tracing end, forms = indexing.in_place })
setmetatable(F, {
  __index = function(_, k) fail("F.%s: unknown primitive", tostring(k)) end,
  __newindex = function(_, k) fail("F.%s: the vocabulary is read-only", tostring(k)) end,
})

local own_fields = { id = true, width = true, split = true, trace = true, heads = true, heads_first = true,
                     stored_heads_first = true, strided = true, vector = true, zero_dim = true, keys_transposed = true,
                     mask = true, dims = true, layout = true, index = true, tokens = true, table = true }
tensor_meta.__index = function(t, k)
  if own_fields[k] then return nil end -- an unknown width
  if k == "dtype" then return setmetatable({ of = t }, dtype_meta) end
  if k == "shape" then return { table.unpack(shapes.dims_of(t)) } end
  local m = methods[k]
  if m then return m end
  fail("tensor: unknown method or field '%s'", tostring(k))
end
tensor_meta.__mul = function(a, b) return (F.mul(a, b)) end
tensor_meta.__add = function(a, b) return (F.add(a, b)) end
tensor_meta.__sub = function(a, b) return (F.sub(a, b)) end
tensor_meta.__div = function(a, b) return (F.div(a, b)) end
tensor_meta.__unm = function(a) return (F.neg(a)) end
tensor_meta.__tostring = function(t) return string.format("tensor(%d, last dimension %s)", t.id, tostring(t.width)) end

block.F = F

-- The vocabulary as a script sees it: a table of its own, empty, that
-- reads through to F and refuses writes, so that no script can change a
-- primitive for the scripts that run after it in the process (F's own
-- __newindex sees only names F lacks). Each script's environment gets one.
local read_only = {
  __index = F,
  __newindex = function(_, k) fail("F.%s: the vocabulary is read-only", tostring(k)) end,
}
function block.vocabulary() return setmetatable({}, read_only) end

-- ---- declarations ----

local splits = { column = "rows", row = "columns" }

-- The block's parameters as the core's leaves, and p: name -> a linear
-- layer (callable) or a tensor.
local function declare(def, trace, at)
  local leaves, p = {}, {}
  local function leaf(spec)
    leaves[#leaves + 1] = spec
    return #leaves -- its value id
  end
  for i, d in ipairs(def.params or {}) do
    local name = type(d) == "table" and d[1]
    if type(name) ~= "string" then error(string.format("%s: block %s: params[%d] needs a name first", at, def.name, i), 0) end
    if p[name] then error(string.format("%s: block %s: parameter '%s' declared twice", at, def.name, name), 0) end
    for k in pairs(d) do
      if k ~= 1 and k ~= "linear" and k ~= "size" and k ~= "split" and k ~= "bias" and k ~= "module" and k ~= "frozen"
          and k ~= "buffer" and k ~= "keep_fp32" and k ~= "conv1d" and k ~= "embedding" then
        error(string.format("%s: block %s: parameter '%s': unknown field '%s'", at, def.name, name, tostring(k)), 0)
      end
    end
    local common = { module = d.module or name, frozen = d.frozen, buffer = d.buffer, keep_fp32 = d.keep_fp32 }
    local function with(t)
      for k, v in pairs(common) do t[k] = v end
      return t
    end
    if d.split ~= nil and not splits[d.split] then
      error(string.format("%s: block %s: parameter '%s': split must be column or row", at, def.name, name), 0)
    end
    local label = (def.param_labels or def.name .. ".") .. name
    if d.linear then
      local dims = d.linear
      if type(dims) ~= "table" or math.type(dims[1]) ~= "integer" or math.type(dims[2]) ~= "integer"
          or dims[1] < 1 or dims[2] < 1 then
        error(string.format("%s: block %s: parameter '%s': linear = { in_features, out_features }", at, def.name, name),
          0)
      end
      local m = { name = name, in_features = dims[1], out_features = dims[2], split = d.split or "none", bias = false }
      local w = leaf(with({ label = label .. ".weight", rows = dims[2], columns = dims[1], linear = true,
                            split = splits[d.split] or "whole", conv1d = d.conv1d }))
      m.weight = new_value(trace, nil)
      assert(m.weight.id == w)
      if d.bias then
        local b = leaf(with({ label = label .. ".bias", rows = 1, columns = dims[2],
                              split = d.split == "column" and "columns" or "whole" }))
        m.bias = new_value(trace, dims[2], d.split == "column")
        assert(m.bias.id == b)
      end
      p[name] = setmetatable(m, module_meta)
    elseif d.embedding then
      -- nn.Embedding(num_embeddings, embedding_dim): a table of rows
      local dims = d.embedding
      if type(dims) ~= "table" or math.type(dims[1]) ~= "integer" or math.type(dims[2]) ~= "integer"
          or dims[1] < 1 or dims[2] < 1 then
        error(string.format("%s: block %s: parameter '%s': embedding = { num_embeddings, embedding_dim }", at,
          def.name, name), 0)
      end
      if d.split ~= nil and d.split ~= "column" then
        error(string.format("%s: block %s: parameter '%s': a table splits its columns (split = \"column\": each rank "
          .. "looks up its share of every row) or none", at, def.name, name), 0)
      end
      local column = d.split == "column"
      local v = leaf(with({ label = label, rows = dims[1], columns = dims[2], split = column and "columns" or "whole" }))
      local t = new_value(trace, dims[2], column)
      t.table, t.dims, t.layout = true, { dims[1], dims[2] }, true
      p[name] = t
      assert(t.id == v)
    elseif math.type(d.size) == "integer" and d.size >= 1 then
      local v = leaf(with({ label = label, rows = 1, columns = d.size, split = d.split == "column" and "columns" or "whole" }))
      p[name] = new_value(trace, d.size, d.split == "column")
      p[name].vector = true -- one dimension
      assert(p[name].id == v)
    else
      error(string.format("%s: block %s: parameter '%s' needs linear = { in, out }, embedding = { n, dim } or size = n", at,
        def.name, name), 0)
    end
  end
  local names = {}
  for k in pairs(p) do names[#names + 1] = k end
  table.sort(names)
  local params = setmetatable({}, {
    __index = function(_, k)
      local v = p[k]
      if v == nil then
        fail("block %s: parameter '%s' is used but not declared (declared: %s)", def.name, tostring(k),
          #names > 0 and table.concat(names, ", ") or "none")
      end
      return v
    end,
    __newindex = function(_, k) fail("block %s: parameters are declared in params, not assigned ('%s')", def.name, k) end,
  })
  return leaves, params
end

-- ---- from the trace to the program ----

-- The frees: a value goes after its last use, or when its last local name
-- is bound to another value or the forward returns, whichever is later.
local function program(trace, returned)
  local n_params = trace.n_borrowed -- the input, the parameters and the named inputs: borrowed
  local last_use, released = {}, {}
  for i, e in ipairs(trace.entries) do
    if e.instr then
      for _, a in ipairs(e.instr.args) do last_use[a] = i end
      for _, o in ipairs(e.instr.outs or { e.instr.out }) do last_use[o] = last_use[o] or i end
    elseif e.release then
      released[e.release] = i
    end
  end
  local n = #trace.entries
  local drop_at = {}
  for id = n_params + 1, trace.n_values - 1 do
    if id ~= returned.id and last_use[id] then
      local named = trace.names[id] and trace.names[id] > 0
      local release = named and n + 1 or released[id]
      drop_at[id] = math.max(last_use[id], release or 0)
    end
  end
  local code = {}
  local function drop(id, at)
    if drop_at[id] == at then
      code[#code + 1] = { prim = "drop", args = { id } }
      drop_at[id] = nil
    end
  end
  for i, e in ipairs(trace.entries) do
    if e.instr then
      code[#code + 1] = e.instr
      for _, a in ipairs(e.instr.args) do drop(a, i) end
      for _, o in ipairs(e.instr.outs or { e.instr.out }) do drop(o, i) end
    else
      drop(e.release, i)
    end
  end
  code[#code + 1] = { prim = "return", args = { returned.id } }
  -- the frame's locals, in the order of their names
  local top = trace.frames[1]
  for _, name in ipairs(top.slots) do
    local t = top.bound[name]
    if t then drop(t.id, n + 1) end
  end
  return code
end

local function check_def(def, at)
  if type(def) ~= "table" then error(at .. ": block takes a table: block { name = ..., params = ..., forward = ... }", 0) end
  for k in pairs(def) do
    if k ~= "name" and k ~= "params" and k ~= "forward" and k ~= "width" and k ~= "norm" and k ~= "locals"
        and k ~= "megatron" and k ~= "param_labels" and k ~= "inputs" and k ~= "tp_divides" then
      error(string.format("%s: block: unknown field '%s' (name, width, params, forward, megatron, norm, locals, "
        .. "param_labels, inputs, tp_divides)", at, tostring(k)), 0)
    end
  end
  -- the tensors a branch makes for the blocks it runs (block.h's vp_block_stream)
  local streams = { shifted_embeddings = true, branch_input = true, input_ids = true }
  if def.inputs ~= nil then
    if type(def.inputs) ~= "table" or #def.inputs > 2 then
      error(string.format("%s: block: 'inputs' must list at most 2 named inputs", at), 0)
    end
    for _, name in ipairs(def.inputs) do
      if not streams[name] then
        error(string.format("%s: block: unknown input '%s' (shifted_embeddings, branch_input, input_ids)", at,
          tostring(name)), 0)
      end
    end
  end
  if def.param_labels ~= nil and type(def.param_labels) ~= "string" then
    error(string.format("%s: block: 'param_labels' must be the prefix of its parameters' labels", at), 0)
  end
  if type(def.name) ~= "string" or not def.name:match("^[%w_.]+$") then
    error(at .. ": block: 'name' must be the module's name (letters, digits, _ and .)", 0)
  end
  if type(def.forward) ~= "function" then error(string.format("%s: block %s: 'forward' must be a function", at, def.name), 0) end
  if def.megatron ~= nil and type(def.megatron) ~= "function" then
    error(string.format("%s: block %s: 'megatron' must be a function (the forward Megatron-LM's module runs)", at,
      def.name), 0)
  end
  if def.params ~= nil and type(def.params) ~= "table" then
    error(string.format("%s: block %s: 'params' must be a list of declarations", at, def.name), 0)
  end
  if def.width ~= nil and (math.type(def.width) ~= "integer" or def.width < 1) then
    error(string.format("%s: block %s: 'width' must be the input's last dimension", at, def.name), 0)
  end
  -- tp_divides = { { n, "why" }, ... }: tensor parallelism's degree must
  -- divide each n (the module's own assertion, cited in `why`)
  if def.tp_divides ~= nil then
    local ok = type(def.tp_divides) == "table" and #def.tp_divides <= 4
    for _, r in ipairs(ok and def.tp_divides or {}) do
      ok = ok and type(r) == "table" and math.type(r[1]) == "integer" and r[1] >= 1 and type(r[2]) == "string"
        and #r[2] < 240
    end
    if not ok then
      error(string.format("%s: block %s: 'tp_divides' must list at most 4 { count, \"why tp must divide it\" }", at,
        def.name), 0)
    end
  end
end

-- The rules of tp_divides as the core reads them: "tp: block NAME: " before each reason.
local function tp_rules(def)
  local rules = {}
  for i, r in ipairs(def.tp_divides or {}) do
    rules[i] = { n = r[1], why = string.format("tp: block %s: %s", def.name, r[2]) }
  end
  return rules
end

-- One forward traced: its code and how many values it numbered.
local function trace_forward(def, at, forward, kernels)
  local defined = debug.getinfo(forward, "S")
  local top = { bound = {}, slots = {}, slot = {} }
  local trace = { name = def.name, n_values = 0, values = {}, entries = {}, frames = { top }, names = {}, kernels = kernels,
                  forward_at = defined.short_src .. ":" .. defined.linedefined }
  for i, name in ipairs(def.locals or {}) do
    top.slots[i] = name
    top.slot[name] = i
  end
  local x = new_value(trace, def.width, false)
  local leaves, p = declare(def, trace, at)
  trace.n_params = #leaves
  -- the named inputs, after the parameters: forward(x, p, input1, input2)
  local inputs = {}
  for i, name in ipairs(def.inputs or {}) do
    inputs[i] = new_value(trace, def.width, false)
    if name == "input_ids" then -- [b, s] int64: the batch's token ids
      inputs[i].width, inputs[i].index, inputs[i].tokens = nil, true, true
      inputs[i].dims, inputs[i].layout = shapes.tokens_dims(), true
    end
  end
  trace.n_borrowed = #leaves + #inputs
  if tracing then error(at .. ": block: a block cannot be built inside another block's forward", 0) end
  tracing = trace
  local ok, out = pcall(forward, x, p, table.unpack(inputs))
  tracing = nil
  if not ok then error(out, 0) end
  if not is_tensor(out) or out.trace ~= trace then
    error(string.format("%s: block %s: forward must return a tensor it computed", at, def.name), 0)
  end
  local code = program(trace, out)
  return code, trace.n_values, leaves
end

-- block(where, def) -> the core's op (vramplan.block_op), each forward
-- traced once: `forward`, and `megatron` where Megatron-LM's module runs
-- other code (its fused kernels).
function block.new(at, def)
  check_def(def, at)
  local kernels = {}
  local code, values, leaves = trace_forward(def, at, def.forward, kernels)
  local megatron_start = 0
  if def.megatron then
    local alt, alt_values = trace_forward(def, at, def.megatron, kernels)
    megatron_start = #code
    table.move(alt, 1, #alt, #code + 1, code)
    values = math.max(values, alt_values)
  end
  local made, op = pcall(vramplan.block_op, { name = def.name, params = leaves, code = code, values = values, norm = def.norm,
                                              inputs = def.inputs,
                                              width = def.width,
                                              megatron_start = megatron_start, kernels = kernels,
                                              tp_divides = tp_rules(def) })
  if not made then error(string.format("%s: block %s: %s", at, def.name, tostring(op)), 0) end
  return op
end

return block
