-- vramplan.block_shapes — tensors of any number of dimensions in a block's
-- forward, for blocks whose tensors are not rows of tokens (Mamba-2's
-- chunked scan: [b, chunks, chunk, chunk, heads, state], ...). A tensor
-- gets `dims` (its shape) from x:size() / x.shape onward: integers, or
-- symbolic dimensions (the batch, the sequence, the number of chunks
-- ceil(seq / chunk), the sequence padded to whole chunks) plus a constant.
-- Views (permute, transpose, unsqueeze, view / reshape of a contiguous
-- tensor) record nothing; every op that makes a tensor records its shape,
-- which the core evaluates at each step's batch and sequence
-- (engine/ops/op_block.c shape_numel). PyTorch's semantics throughout:
-- sum(dim) drops the dimension unless keepdim = true; broadcasting aligns
-- shapes on the right.
local shapes = {}

local dim_meta = {}

-- A symbolic dimension: sym ("batch", "seq", "chunks", "padded") plus add;
-- or "split": add, a dimension divided over tensor-parallel ranks (add is
-- the whole model's size: heads, or the features of a column-parallel
-- linear's output, as Megatron-LM's ColumnParallelLinear gives each rank
-- output_size / tp of them). A sequence's symbols (seq, chunks, padded)
-- are `gathered` when they count the whole sequence a column-parallel
-- linear gathered (Megatron's gather_from_sequence_parallel_region),
-- else the block input's rows: under sequence parallelism seq / tp.
local function sym_dim(sym, add, chunk, gathered)
  return setmetatable({ sym = sym, add = add or 0, chunk = chunk, gathered = gathered or nil }, dim_meta)
end
local function is_sym(d) return getmetatable(d) == dim_meta end
local function is_split(d) return is_sym(d) and d.sym == "split" end

-- One dimension that is the product of others ("prod", parts: symbolic
-- dimensions and a whole number), as x.view(-1) or x.flatten() makes of
-- [b, s, k] (a one-dimensional tensor of b x s x k elements).
local function prod_dim(parts) return setmetatable({ sym = "prod", parts = parts, add = 0 }, dim_meta) end
local function is_prod(d) return is_sym(d) and d.sym == "prod" end

-- dims with each product expanded into its parts (the core's encoding and
-- the sizes' arithmetic see only those).
local function expanded(dims)
  local out = {}
  for _, d in ipairs(dims) do
    if is_prod(d) then
      for _, part in ipairs(d.parts) do out[#out + 1] = part end
    else
      out[#out + 1] = d
    end
  end
  return out
end

dim_meta.__add = function(a, b)
  if type(a) == "number" then a, b = b, a end
  if math.type(b) ~= "integer" then error("a symbolic dimension plus a whole number only", 2) end
  if a.sym == "prod" then error("a product of dimensions takes no whole number", 2) end
  if a.sym == "split" then error("a dimension split over tensor-parallel ranks takes no whole number", 2) end
  return sym_dim(a.sym, a.add + b, a.chunk, a.gathered)
end
dim_meta.__sub = function(a, b)
  if math.type(b) ~= "integer" then error("a symbolic dimension minus a whole number only", 2) end
  if a.sym == "prod" then error("a product of dimensions takes no whole number", 2) end
  if a.sym == "split" then error("a dimension split over tensor-parallel ranks takes no whole number", 2) end
  return sym_dim(a.sym, a.add - b, a.chunk, a.gathered)
end
dim_meta.__tostring = function(d)
  if d.sym == "split" then return d.add .. "/tp" end
  if d.sym == "prod" then
    local parts = {}
    for i, part in ipairs(d.parts) do parts[i] = tostring(part) end
    return table.concat(parts, "*")
  end
  return d.sym .. (d.gathered and "(gathered)" or "") .. (d.chunk and "/" .. d.chunk or "")
    .. (d.add ~= 0 and string.format("%+d", d.add) or "")
end

local factors
local function same_dim(a, b)
  if is_prod(a) or is_prod(b) then -- the same elements (b x s x k as k x b x s)
    local ka, sa = factors({ a })
    local kb, sb = factors({ b })
    if ka ~= kb then return false end
    for key, n in pairs(sa) do if sb[key] ~= n then return false end end
    for key, n in pairs(sb) do if sa[key] ~= n then return false end end
    return true
  end
  if is_sym(a) and is_sym(b) then
    return a.sym == b.sym and a.add == b.add and a.chunk == b.chunk and not a.gathered == not b.gathered
  end
  return a == b
end

local function dims_string(dims)
  local parts = {}
  for i, d in ipairs(dims) do parts[i] = tostring(d) end
  return "[" .. table.concat(parts, ", ") .. "]"
end

-- A shape's size as a constant and a multiset of symbols (a padded
-- sequence counts as chunks times the chunk; a split dimension as its
-- whole size times "tp", one over the ranks), for comparing two shapes.
function factors(dims)
  local k, syms = 1, {}
  local function put(key) syms[key] = (syms[key] or 0) + 1 end
  for _, d in ipairs(expanded(dims)) do
    if not is_sym(d) then
      k = k * d
    elseif d.sym == "split" then
      k = k * d.add
      put("tp")
    elseif d.sym == "padded" and d.add == 0 then
      k = k * d.chunk
      put("chunks:0:" .. d.chunk .. ":" .. (d.gathered and "g" or ""))
    else
      put(d.sym .. ":" .. d.add .. ":" .. (d.chunk or 0) .. ":" .. (d.gathered and "g" or ""))
    end
  end
  return k, syms
end

-- Install the vocabulary into block.lua's F, methods and tensor metatable
-- (`I`: its internals).
function shapes.install(I)
  local F, methods, fail, record, view_of, check_tensor, label_of =
    I.F, I.methods, I.fail, I.record, I.view_of, I.check_tensor, I.label_of
  local BATCH, SEQ, GATHERED_SEQ = sym_dim("batch"), sym_dim("seq"), sym_dim("seq", 0, nil, true)

  -- The shape of t: its dims, or as rows of tokens ([b, s, width], heads
  -- split: [b, s, heads, d] or [b, heads, s, d]); a vector parameter [n].
  -- A tensor split over tensor-parallel ranks has its heads (or its last
  -- dimension) split and its sequence gathered, as a column-parallel
  -- linear's output is.
  local function dims_of(t)
    local dims = rawget(t, "dims")
    if dims then return dims end
    if not t.width then fail("shape: the last dimension's size is unknown (give the block a width)") end
    local split = t.split
    if t.vector then return { split and sym_dim("split", t.width) or t.width } end
    local s = (split or rawget(t, "gathered")) and GATHERED_SEQ or SEQ
    if t.heads then
      local h = split and sym_dim("split", t.heads) or t.heads
      if t.heads_first then return { BATCH, h, s, t.width } end
      return { BATCH, s, h, t.width }
    end
    return { BATCH, s, split and sym_dim("split", t.width) or t.width }
  end
  shapes.dims_of = dims_of
  -- [b, s]: the batch's input ids
  function shapes.tokens_dims() return { BATCH, SEQ } end

  local function copy_dims(dims)
    local out = {}
    for i, d in ipairs(dims) do out[i] = d end
    return out
  end
  shapes.copy_dims = copy_dims
  shapes.same_dim, shapes.dims_string = same_dim, dims_string

  local function norm_dim(dims, d, what, extra)
    local n = #dims + (extra or 0)
    if math.type(d) ~= "integer" or d < -n or d >= n then fail("%s: dimension %s out of range for %d dimensions", what, tostring(d), n) end
    return d < 0 and d + n + 1 or d + 1 -- 1-based
  end
  shapes.norm_dim = norm_dim

  -- The core's encoding of a shape, the chunk length its symbols share,
  -- and the elements per token (for the time model).
  local function encode(dims, what)
    local shape, chunk, per_token = {}, nil, 1.0
    dims = expanded(dims)
    if #dims > 8 then fail("%s: a shape of more than 8 dimensions (products counted by their parts)", what) end
    for i, d in ipairs(dims) do
      if is_sym(d) then
        shape[i] = { d.sym, d.add, d.gathered or nil }
        if d.chunk then
          if chunk and chunk ~= d.chunk then fail("%s: two chunk lengths (%d, %d) in one shape", what, chunk, d.chunk) end
          chunk = d.chunk
          if d.sym == "chunks" then per_token = per_token / d.chunk end
        end
      else
        shape[i] = { "const", d }
        per_token = per_token * d
      end
    end
    return shape, chunk, math.max(1, math.floor(per_token))
  end

  -- A shape's last dimension as a tensor's width (a split one's whole
  -- size), and whether any of its dimensions is split over tp ranks.
  local function width_of(dims)
    local last = dims[#dims]
    if is_split(last) then return last.add end
    return (not is_sym(last)) and last or nil
  end
  local function any_split(dims)
    for _, d in ipairs(dims) do
      if is_split(d) then return true end
    end
    return false
  end

  -- A new tensor of shape dims from primitive prim.
  local function shaped(prim, args, fields, dims, label, dtype_like)
    fields = fields or {}
    local shape, chunk, per_token = encode(dims, prim)
    fields.shape, fields.chunk, fields.out_width = shape, chunk, per_token
    local out = record(prim, args, fields, width_of(dims), any_split(dims), label, nil)
    out.dims, out.layout = dims, true
    return out
  end
  shapes.shaped = shaped
  -- A view of t with another shape (no instruction).
  local function view(t, dims, contiguous)
    return view_of(t, width_of(dims), { dims = dims, layout = contiguous, split = any_split(dims) })
  end
  -- layout: true (contiguous); false (a permuted or sliced view); "rows" (a split
  -- along the last dimension: its rows strided, each row dense);
  -- "padded" (the padded sequence sliced back: a view only when nothing
  -- was padded)
  local function is_contiguous(t)
    if rawget(t, "dims") then return rawget(t, "layout") == nil or rawget(t, "layout") == true end
    return not (t.heads and t.heads_first ~= t.stored_heads_first)
  end

  -- x:size(d) / x:size(): the symbolic or whole-number sizes.
  function F.size(t, d)
    check_tensor(t, "size")
    local dims = dims_of(t)
    if d == nil then return table.unpack(dims) end
    return dims[norm_dim(dims, d, "size")]
  end

  -- chunks(s, chunk): ceil(s / chunk) for the sequence s (x:size(1)), and
  -- padded(s, chunk): s padded to whole chunks.
  function F.chunks(s, chunk)
    if not (is_sym(s) and s.sym == "seq" and s.add == 0) then fail("chunks: of the sequence's length (x:size(1))") end
    if math.type(chunk) ~= "integer" or chunk < 1 then fail("chunks: the chunk's length must be a whole number") end
    return sym_dim("chunks", 0, chunk, s.gathered)
  end
  function F.padded(s, chunk)
    F.chunks(s, chunk)
    return sym_dim("padded", 0, chunk, s.gathered)
  end

  -- x:permute(...), x:transpose(d0, d1), x:unsqueeze(d): views.
  function F.permute(t, ...)
    check_tensor(t, "permute")
    local dims, order = dims_of(t), table.pack(...)
    if order.n ~= #dims then fail("permute: %d dimensions for a tensor of %d", order.n, #dims) end
    local out, seen, moved = {}, {}, false
    for i = 1, order.n do
      local j = norm_dim(dims, order[i], "permute")
      if seen[j] then fail("permute: dimension %d twice", order[i]) end
      seen[j], out[i] = true, dims[j]
      moved = moved or (j ~= i and not (out[i] == 1))
    end
    if moved and is_contiguous(t) then
      -- contiguous when the batch is 1 if only it moved: the other
      -- dimensions (but those of size 1) keep their order
      local last = 0
      for i = 1, order.n do
        local j = norm_dim(dims, order[i], "permute")
        if not (out[i] == 1 or same_dim(out[i], BATCH)) then
          if j < last then return view(t, out, false) end
          last = j
        end
      end
      return view(t, out, "batch")
    end
    return view(t, out, is_contiguous(t) and not moved)
  end

  local heads_transpose = F.transpose
  function F.transpose(t, d0, d1)
    check_tensor(t, "transpose")
    if t.heads and not rawget(t, "dims") then return (heads_transpose(t, d0, d1)) end
    local dims = dims_of(t)
    local order = {}
    for i = 1, #dims do order[i] = i - 1 end
    local a, b = norm_dim(dims, d0, "transpose"), norm_dim(dims, d1, "transpose")
    order[a], order[b] = order[b], order[a]
    return (F.permute(t, table.unpack(order)))
  end

  function F.unsqueeze(t, d)
    check_tensor(t, "unsqueeze")
    local dims = copy_dims(dims_of(t))
    table.insert(dims, norm_dim(dims, d, "unsqueeze", 1), 1)
    return view(t, dims, is_contiguous(t))
  end

  -- Whether two runs of dimensions hold the same elements (a split one
  -- counted whole).
  local function same_span(a, b)
    local ka, sa = factors(a)
    local kb, sb = factors(b)
    if ka ~= kb then return false end
    sa.tp, sb.tp = nil, nil
    for key, n in pairs(sa) do if sb[key] ~= n then return false end end
    for key, n in pairs(sb) do if sa[key] ~= n then return false end end
    return true
  end

  -- Where a reshape's target takes dims' split dimension: the target's
  -- whole-number dimension that spans the same elements from the right
  -- (Megatron's column split divides the outermost of the features it
  -- splits: [b, s, d_inner / tp] viewed as [b, s, heads, head_dim] has
  -- heads / tp), or nil.
  local function split_target(dims, out, unknown)
    local j
    for i, d in ipairs(dims) do
      if is_split(d) then j = j or i end
    end
    if not j then return nil end
    local from = table.move(dims, j, #dims, 1, {})
    for i = #out, 1, -1 do
      if unknown and unknown >= i then return nil end
      if math.type(out[i]) == "integer" and same_span(from, table.move(out, i, #out, 1, {})) then return i end
    end
    return nil
  end

  -- A symbolic dimension back from its key in factors().
  local function from_key(key)
    local sym, add, chunk, g = key:match("^(%a+):(%-?%d+):(%d+):(g?)$")
    return sym_dim(sym, tonumber(add), tonumber(chunk) ~= 0 and tonumber(chunk) or nil, g == "g")
  end

  -- view / reshape to dims (one of them may be -1): a view of a
  -- contiguous tensor; of another, reshape copies (view refuses).
  local function reshape(t, target, copies, what)
    local dims = dims_of(t)
    local k, syms = factors(dims)
    local out, unknown = {}, nil
    for i, d in ipairs(target) do
      if d == -1 then
        if unknown then fail("%s: only one dimension can be -1", what) end
        unknown = i
        out[i] = 1
      elseif is_sym(d) or (math.type(d) == "integer" and d >= 1) then
        out[i] = d
      else
        fail("%s: a dimension must be a whole number, a symbolic size or -1 (got %s)", what, tostring(d))
      end
    end
    local _, before = factors(out)
    if (syms.tp or 0) > (before.tp or 0) then
      local at = split_target(dims, out, unknown)
      if at then out[at] = sym_dim("split", out[at]) end
    end
    local k2, syms2 = factors(out)
    local left = {}
    for key, n in pairs(syms) do
      local m = n - (syms2[key] or 0)
      if m < 0 then fail("%s: %s does not fit into %s", what, dims_string(dims), dims_string(target)) end
      for _ = 1, m do left[#left + 1] = key end
    end
    for key, n in pairs(syms2) do
      if n > (syms[key] or 0) then fail("%s: %s does not fit into %s", what, dims_string(dims), dims_string(target)) end
    end
    if k % k2 ~= 0 then fail("%s: %s does not fit into %s", what, dims_string(dims), dims_string(target)) end
    local ratio = k // k2
    if unknown then
      if #left == 0 then
        out[unknown] = ratio
      elseif #left == 1 and left[1] == "tp" then
        out[unknown] = sym_dim("split", ratio)
      elseif #left == 1 then
        local d = from_key(left[1])
        if ratio == 1 then
          out[unknown] = d
        elseif d.sym == "chunks" and d.add == 0 and ratio == d.chunk then
          out[unknown] = sym_dim("padded", 0, d.chunk, d.gathered)
        else
          out[unknown] = prod_dim({ d, ratio })
        end
      else
        -- several symbols: one dimension of their product ([b, s, k]:view(-1))
        local parts = {}
        for i, key in ipairs(left) do
          if key == "tp" then fail("%s: cannot infer -1 of %s into %s (a split dimension)", what, dims_string(dims), dims_string(target)) end
          parts[i] = from_key(key)
        end
        table.sort(parts, function(a, b) return tostring(a) < tostring(b) end)
        if ratio ~= 1 then parts[#parts + 1] = ratio end
        out[unknown] = prod_dim(parts)
      end
    elseif #left > 0 or ratio ~= 1 then
      fail("%s: %s does not fit into %s", what, dims_string(dims), dims_string(target))
    end
    if is_contiguous(t) then return view(t, out, true) end
    if t.layout == "rows" and #out >= #dims then
      local prefix = true
      for i = 1, #dims - 1 do prefix = prefix and same_dim(dims[i], out[i]) end
      if prefix then return view(t, out, "rows") end
    end
    if t.layout == "padded" and #out >= 2 and same_dim(out[1], dims[1]) and same_dim(out[2], dims[2]) then
      -- the batch and the sequence kept apart: a view (only the rows of
      -- each sequence lie apart, by the padding)
      return view(t, out, true)
    end
    if not copies then fail("%s: of a tensor that is not contiguous (reshape, or contiguous() first)", what) end
    return shaped("copy", { t }, nil, out, what)
  end

  local heads_view = F.view
  local function view_or_reshape(copies)
    return function(t, ...)
      check_tensor(t, "view")
      local target = table.pack(...)
      if type(target[1]) == "table" and not is_sym(target[1]) then target = target[1] end
      -- (indices are never split into heads: idx:view(-1) flattens them)
      local nd = rawget(t, "dims") or rawget(t, "index") or is_sym(target[1]) or #target > 2
      if not nd then return (heads_view(t, ...)) end
      return (reshape(t, target, copies, copies and "reshape" or "view"))
    end
  end
  F.view = view_or_reshape(false)
  F.reshape = view_or_reshape(true)

  -- x:flatten(start, stop) (torch.flatten, dimensions 0 to -1 unless
  -- given): dimensions start..stop as one, their product, as reshape
  -- makes it (a view of a contiguous tensor, else a copy).
  function F.flatten(t, start, stop, opts)
    check_tensor(t, "flatten")
    local dims = dims_of(t)
    local a, b = norm_dim(dims, start or 0, "flatten"), norm_dim(dims, stop or -1, "flatten")
    if a > b then fail("flatten: start_dim %s comes after end_dim %s", tostring(start), tostring(stop)) end
    local target = table.move(dims, 1, a - 1, 1, {})
    target[#target + 1] = -1
    table.move(dims, b + 1, #dims, #target + 1, target)
    return (reshape(t, target, true, label_of(opts, "flatten")))
  end

  local heads_contiguous = F.contiguous
  function F.contiguous(t, opts)
    check_tensor(t, "contiguous")
    if not rawget(t, "dims") then return (heads_contiguous(t, opts)) end
    if is_contiguous(t) then return t end
    -- a view that moved the batch alone: a copy unless the batch is 1
    -- (Megatron-LM's rearrange(x, "l b d -> b l d").contiguous())
    local fields = rawget(t, "layout") == "batch" and { if_batched = true } or nil
    return (shaped("copy", { t }, fields, dims_of(t), label_of(opts, "contiguous")))
  end

  -- Broadcasting of two shapes (aligned on the right).
  local function broadcast(a, b, what)
    local n = math.max(#a, #b)
    local out = {}
    for i = 1, n do
      local x, y = a[#a - n + i] or 1, b[#b - n + i] or 1
      if same_dim(x, y) or y == 1 then
        out[i] = x
      elseif x == 1 then
        out[i] = y
      else
        fail("%s: shapes %s and %s do not broadcast", what, dims_string(a), dims_string(b))
      end
    end
    return out
  end

  for _, spec in ipairs({ { "mul", "mul" }, { "add", "add" }, { "sub", "sub" } }) do
    local name, prim = spec[1], spec[2]
    local rows = F[name]
    F[name] = function(a, b, opts)
      local nd = (type(a) == "table" and rawget(a, "dims")) or (type(b) == "table" and rawget(b, "dims"))
      if not nd or type(a) == "number" or type(b) == "number" then
        local out = rows(a, b, opts)
        local like = type(a) == "table" and a or b
        if nd then out.dims, out.layout = like.dims, true end
        return out
      end
      check_tensor(a, name)
      check_tensor(b, name)
      local dims = broadcast(dims_of(a), dims_of(b), name)
      return (shaped(prim, { a, b }, nil, dims, label_of(opts, name)))
    end
  end

  -- Elementwise functions keep their input's shape (a new tensor).
  local function keeps_shape(name)
    local rows = F[name]
    F[name] = function(a, ...)
      local out = rows(a, ...)
      if rawget(a, "dims") then out.dims, out.layout = a.dims, true end
      return out
    end
  end
  for _, fn in ipairs({ "silu", "gelu", "gelu_tanh", "relu", "sigmoid", "tanh", "exp", "rsqrt", "pow", "neg", "to",
                        "float", "div" }) do
    keeps_shape(fn)
  end

  -- F.softplus(x): keeps its input (softplus_backward(grad, self, beta,
  -- threshold)); on autocast's fp32 list.
  function F.softplus(a, opts)
    check_tensor(a, "softplus")
    local out = record("unary", { a }, { fn = "softplus" }, a.width, a.split, label_of(opts, "softplus"), a)
    if rawget(a, "dims") then out.dims, out.layout = a.dims, true end
    return out
  end

  -- torch.clamp(x, min, max) with Python numbers: keeps x.
  function F.clamp(a, lo, hi, opts)
    check_tensor(a, "clamp")
    if type(lo) ~= "number" or type(hi) ~= "number" then fail("clamp: min and max must be numbers (math.huge for none)") end
    local out = record("clamp", { a }, nil, a.width, a.split, label_of(opts, "clamp"), a)
    if rawget(a, "dims") then out.dims, out.layout = a.dims, true end
    return out
  end

  -- torch.cumsum(x, dim): a new tensor of x's shape; keeps nothing.
  function F.cumsum(a, dim, opts)
    check_tensor(a, "cumsum")
    norm_dim(dims_of(a), dim, "cumsum")
    return (shaped("cumsum", { a }, nil, dims_of(a), label_of(opts, "cumsum")))
  end

  -- F.tril_ones(x, diagonal): torch.tril(torch.ones(n, n,
  -- dtype=torch.bool), diagonal) for x's last two dimensions (n x n); ~mask
  -- (F.logical_not): a new bool tensor; x:masked_fill(mask, value) keeps
  -- the mask.
  function F.tril_ones(a, diagonal, opts)
    check_tensor(a, "tril_ones")
    local dims = dims_of(a)
    if #dims < 2 or not same_dim(dims[#dims], dims[#dims - 1]) then
      fail("tril_ones: x's last two dimensions must be square (%s)", dims_string(dims))
    end
    if math.type(diagonal) ~= "integer" then fail("tril_ones: the diagonal must be a whole number") end
    local mask = shaped("tril", { a }, nil, { dims[#dims - 1], dims[#dims] }, label_of(opts, "tril"))
    mask.mask = true
    return mask
  end
  function F.logical_not(m, opts)
    check_tensor(m, "logical_not")
    if not rawget(m, "mask") then fail("logical_not: of a bool mask (F.tril_ones)") end
    local out = record("not", { m }, nil, m.width, false, label_of(opts, "not"))
    out.dims, out.layout, out.mask = m.dims, true, true
    return out
  end
  local scores_masked_fill = F.masked_fill
  function F.masked_fill(a, m, value, opts)
    check_tensor(a, "masked_fill")
    if not rawget(a, "dims") then return (scores_masked_fill(a, m, value, opts)) end
    check_tensor(m, "masked_fill")
    if not rawget(m, "mask") then fail("masked_fill: the mask must be a bool mask (F.tril_ones)") end
    if type(value) ~= "number" then fail("masked_fill: the value must be a number") end
    local dims = broadcast(dims_of(a), dims_of(m), "masked_fill")
    if #dims ~= #dims_of(a) then fail("masked_fill: the mask must broadcast to x's shape") end
    local out = record("masked_fill", { a, m }, nil, a.width, false, label_of(opts, "masked_fill"))
    out.dims, out.layout = dims_of(a), true
    return out
  end

  -- x.sum(dim): the dimension dropped (keepdim = true keeps it as 1);
  -- x:sum(-1) of a tensor of rows keeps block.lua's meaning.
  local rows_sum = F.sum
  function F.sum(a, dim, opts)
    check_tensor(a, "sum")
    if not rawget(a, "dims") then return (rows_sum(a, dim, opts)) end
    local dims = copy_dims(a.dims)
    local i = norm_dim(dims, dim, "sum")
    local keepdim = type(opts) == "table" and opts.keepdim
    if keepdim then dims[i] = 1 else table.remove(dims, i) end
    if #dims == 0 then fail("sum: of every dimension is not in the vocabulary yet") end
    return (shaped("sum", { a }, { width = 1 }, dims, label_of(opts, "sum")))
  end

  -- F.pad(x, { left, right, ... }) with zeros, as F.pad's pairs from the
  -- last dimension back: a new tensor (all zero: a copy).
  function F.pad(a, pads, opts)
    check_tensor(a, "pad")
    if type(pads) ~= "table" or #pads % 2 ~= 0 then fail("pad: takes { left, right, ... } pairs from the last dimension") end
    local dims = copy_dims(dims_of(a))
    if #pads // 2 > #dims then fail("pad: %d pairs for %d dimensions", #pads // 2, #dims) end
    for p = 1, #pads // 2 do
      local left, right = pads[2 * p - 1], pads[2 * p]
      local i = #dims - p + 1
      if (is_sym(left) and left.sym == "pad") or (is_sym(right) and right.sym == "pad") then
        -- padding the sequence to whole chunks: (0, padded - seq)
        local d = dims[i]
        if not (is_sym(d) and d.sym == "seq" and d.add == 0 and left == 0 and is_sym(right) and right.sym == "pad"
                and not d.gathered == not right.gathered) then
          fail("pad: symbolic padding only of the sequence to whole chunks (F.chunk_padding), not of %s by %s, %s",
            tostring(d), tostring(left), tostring(right))
        end
        dims[i] = sym_dim("padded", 0, right.chunk, d.gathered)
      elseif is_split(dims[#dims - p + 1]) then
        fail("pad: of a dimension split over tensor-parallel ranks (%s) is not in the vocabulary yet",
          tostring(dims[#dims - p + 1]))
      else
        if math.type(left) ~= "integer" or math.type(right) ~= "integer" or left < 0 or right < 0 then
          fail("pad: the padding must be whole numbers")
        end
        dims[i] = dims[i] + left + right
      end
    end
    return (shaped("pad", { a }, nil, dims, label_of(opts, "pad")))
  end
  -- F.chunk_padding(s, chunk): (chunk - s % chunk) % chunk, the padding that
  -- takes the sequence s to whole chunks.
  function F.chunk_padding(s, chunk)
    F.chunks(s, chunk)
    return setmetatable({ sym = "pad", add = 0, chunk = chunk, gathered = s.gathered }, dim_meta)
  end

  -- x:narrow(dim, start, length) and x:select(dim, index) of a shaped
  -- tensor: views whose gradient is a zero-filled one of all of x
  -- (slice_backward, select_backward).
  function F.narrow(a, dim, start, length, opts)
    check_tensor(a, "narrow")
    if type(opts) == "table" and opts.if_padded then
      -- y[:, :seq_len] under `if pad_size > 0:`: the padded sequence back to
      -- the sequence, nothing when it was not padded
      local dims = copy_dims(dims_of(a))
      local i = norm_dim(dims, dim, "narrow")
      local padded = dims[i]
      if not (is_sym(padded) and padded.sym == "padded" and is_sym(length) and length.sym == "seq" and length.add == 0
              and not length.gathered == not padded.gathered) then
        fail("narrow: if_padded takes the padded sequence back to the sequence")
      end
      dims[i] = length
      local out = shaped("slice", { a }, { if_padded = true }, dims, label_of({ label = opts.label }, "narrow"))
      out.layout = "padded"
      return out
    end
    local dims = copy_dims(dims_of(a))
    local i = norm_dim(dims, dim, "narrow")
    if is_split(dims[i]) then fail("narrow: of a dimension split over tensor-parallel ranks (%s)", tostring(dims[i])) end
    if not (is_sym(length) or (math.type(length) == "integer" and length >= 1)) or math.type(start) ~= "integer" then
      fail("narrow: start must be a whole number and length a size")
    end
    dims[i] = length
    local out = shaped("slice", { a }, nil, dims, label_of(opts, "narrow"))
    out.layout = false
    return out
  end
  local heads_select = F.select
  function F.select(a, dim, index, opts)
    check_tensor(a, "select")
    if a.heads and not rawget(a, "dims") then return (heads_select(a, dim, index, opts)) end
    local dims = copy_dims(dims_of(a))
    local i = norm_dim(dims, dim, "select")
    if math.type(index) ~= "integer" then fail("select: the index must be a whole number") end
    if is_split(dims[i]) then fail("select: of a dimension split over tensor-parallel ranks (%s)", tostring(dims[i])) end
    table.remove(dims, i)
    local out = shaped("slice", { a }, nil, dims, label_of(opts, "select"))
    out.layout = false
    return out
  end

  -- x:expand(...): a view (-1 keeps a dimension); its gradient is summed
  -- back to x's shape, a new tensor.
  function F.expand(a, ...)
    check_tensor(a, "expand")
    local dims, target = dims_of(a), table.pack(...)
    if target.n < #dims then fail("expand: to fewer dimensions than the tensor's") end
    local out = {}
    for i = 1, target.n do
      local old = dims[#dims - target.n + i]
      local d = target[i]
      if d == -1 or (is_split(old) and d == old.add) then
        if old == nil then fail("expand: -1 for a new dimension") end
        out[i] = old
      elseif old ~= nil and not same_dim(old, d) and old ~= 1 then
        fail("expand: dimension %d of size %s cannot become %s", i, tostring(old), tostring(d))
      else
        out[i] = d
      end
    end
    local v = shaped("expand", { a }, nil, out, "expand")
    v.layout = false
    return v
  end

  -- torch.zeros_like(x): a new tensor that needs no gradient.
  function F.zeros_like(a, opts)
    check_tensor(a, "zeros_like")
    return (shaped("zeros", { a }, nil, dims_of(a), label_of(opts, "zeros_like")))
  end

  -- torch.cat({ a, b }, dim) of shaped tensors.
  local rows_cat = F.cat
  function F.cat(parts, dim, opts)
    local a, b = parts and parts[1], parts and parts[2]
    if not (type(a) == "table" and (rawget(a, "dims") or rawget(b, "dims"))) then return (rows_cat(parts, dim, opts)) end
    check_tensor(a, "cat")
    check_tensor(b, "cat")
    local da, db = dims_of(a), dims_of(b)
    local i = norm_dim(da, dim, "cat")
    if #da ~= #db then fail("cat: %s and %s", dims_string(da), dims_string(db)) end
    local out = copy_dims(da)
    for j = 1, #da do
      if j ~= i and not same_dim(da[j], db[j]) then fail("cat: %s and %s differ outside dimension %d", dims_string(da), dims_string(db), dim) end
    end
    if is_split(da[i]) or is_split(db[i]) then
      if not (is_split(da[i]) and is_split(db[i])) then
        fail("cat: along dimension %d of sizes %s and %s", dim, tostring(da[i]), tostring(db[i]))
      end
      out[i] = sym_dim("split", da[i].add + db[i].add)
    elseif is_sym(da[i]) and db[i] == 1 then
      out[i] = da[i] + 1
    elseif is_sym(db[i]) and da[i] == 1 then
      out[i] = db[i] + 1
    elseif not is_sym(da[i]) and not is_sym(db[i]) then
      out[i] = da[i] + db[i]
    else
      fail("cat: along dimension %d of sizes %s and %s", dim, tostring(da[i]), tostring(db[i]))
    end
    local t = record("cat", { a, b }, nil, width_of(out), any_split(out), label_of(opts, "cat"))
    t.dims, t.layout = out, true
    return t
  end

  -- x.repeat_interleave(n, dim): a new tensor (index_select with an int64
  -- index of the new dimension's size, which its backward keeps).
  function F.repeat_interleave(a, n, dim, opts)
    check_tensor(a, "repeat_interleave")
    local dims = copy_dims(dims_of(a))
    local i = norm_dim(dims, dim, "repeat_interleave")
    if is_split(dims[i]) then
      fail("repeat_interleave: of a dimension split over tensor-parallel ranks (%s) is not in the vocabulary yet",
        tostring(dims[i]))
    end
    if math.type(n) ~= "integer" or n < 1 or is_sym(dims[i]) then fail("repeat_interleave: n times a whole dimension") end
    dims[i] = dims[i] * n
    return (shaped("repeat", { a }, { number = dims[i] }, dims, label_of(opts, "repeat_interleave")))
  end

  -- torch.split along the last dimension of a shaped tensor: views.
  local rows_split = F.split
  function F.split(t, sizes, dim, opts)
    check_tensor(t, "split")
    if not rawget(t, "dims") then
      local parts = table.pack(rows_split(t, sizes, dim, opts))
      return table.unpack(parts, 1, parts.n)
    end
    local parts = table.pack(rows_split(t, sizes, dim, opts))
    local split = is_split(t.dims[#t.dims])
    for k = 1, parts.n do
      local d = copy_dims(t.dims)
      d[#d] = split and sym_dim("split", sizes[k]) or sizes[k]
      parts[k].dims, parts[k].layout = d, "rows"
    end
    return table.unpack(parts, 1, parts.n)
  end

  -- F.conv1d(x, weight, bias, { padding = p, groups = channels }): a
  -- depthwise convolution of x [b, channels, length] with a weight of
  -- channels x kernel elements (declared size = channels * kernel).
  function F.conv1d(x, w, b, opts)
    check_tensor(x, "conv1d")
    check_tensor(w, "conv1d")
    if b ~= nil then check_tensor(b, "conv1d") end
    local dims = dims_of(x)
    if #dims ~= 3 or (is_sym(dims[2]) and not is_split(dims[2])) then
      fail("conv1d: x must be [batch, channels, length] (%s)", dims_string(dims))
    end
    -- channels split over tensor-parallel ranks: each rank convolves its own
    -- (the weight split alike, declared split = "column")
    local channels = is_split(dims[2]) and dims[2].add or dims[2]
    if is_split(dims[2]) ~= (w.split or false) then
      fail("conv1d: the channels and the weight must be split over tensor-parallel ranks alike")
    end
    opts = opts or {}
    if opts.groups ~= channels then fail("conv1d: only depthwise (groups = channels = %d) yet", channels) end
    if not w.width or w.width % channels ~= 0 then fail("conv1d: the weight must hold channels x kernel elements") end
    local kernel, padding = w.width // channels, opts.padding or 0
    if math.type(padding) ~= "integer" or padding < 0 then fail("conv1d: padding must be a whole number") end
    local out = { dims[1], dims[2], dims[3] + (2 * padding - kernel + 1) }
    local args = { x, w }
    if b then args[3] = b end
    return (shaped("conv1d", args, { strided = not is_contiguous(x) }, out, label_of(opts, "conv1d")))
  end

  for _, name in ipairs({ "size", "permute", "transpose", "unsqueeze", "view", "reshape", "flatten", "contiguous", "cumsum",
                          "sum", "narrow", "select", "expand", "repeat_interleave", "split", "softplus", "clamp",
                          "masked_fill" }) do
    methods[name] = F[name]
  end
  for _, name in ipairs({ "float", "to", "exp", "pow", "sigmoid", "tanh", "rsqrt", "relu" }) do
    methods[name] = F[name]
  end
end

return shapes
