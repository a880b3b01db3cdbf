-- vramplan.block_index — tables, indices and collectives in a block's
-- forward: F.embedding, F.topk, F.gather, F.index (x[idx]), F.scatter,
-- F.scatter_add, F.index_select, F.index_add, F.layer_norm, F.all_gather,
-- F.reduce_scatter.
--
-- Integer tensors are indices: the batch's input_ids (block { inputs = {
-- "input_ids" } }), topk's indices and their one-dimensional views
-- (idx:view(-1), idx:flatten(): one dimension of b x s x k elements). They index and nothing else (an
-- index where a floating-point tensor belongs, or the other way round, is
-- an error at the script's line). What each primitive keeps for backward
-- is PyTorch's (tools/autograd/derivatives.yaml, 1.13, checked on 1.13's
-- grad_fn `_saved_*` attributes; engine/ops/op_block.c and
-- engine/core/prims.h cite each).
local index = {}

-- Install the vocabulary into block.lua's F (`I`: its internals).
function index.install(I)
  local F, methods, fail, record, new_value, check_tensor, label_of, dims_of, tracing, last_split =
    I.F, I.methods, I.fail, I.record, I.new_value, I.check_tensor, I.label_of, I.dims_of, I.tracing, I.last_split
  local copy_dims, shaped, same_dim, dims_string, norm_dim = I.copy_dims, I.shaped, I.same_dim, I.dims_string, I.norm_dim

  local function is_index(t) return rawget(t, "index") == true end

  -- t checked as integer indices (want true) or as a floating-point tensor.
  local function check_kind(t, what, want)
    check_tensor(t, what)
    if want and not is_index(t) then
      fail("%s: the index must be integer indices (input_ids, topk's indices), got a floating-point tensor", what)
    elseif not want and is_index(t) then
      fail("%s: takes a floating-point tensor, got integer indices", what)
    end
    return t
  end
  index.check_kind = check_kind

  -- The last dimension: dim -1, or its positive number for a tensor of
  -- explicit shape.
  local function last_dim(t, dim, what)
    local n = rawget(t, "dims") and #t.dims or nil
    if dim ~= -1 and not (n and dim == n - 1) then fail("%s: only along the last dimension (dim = -1) yet", what) end
  end

  -- A new value shaped as `like` with its last dimension `width`.
  local function shaped_as(like, width)
    local dims = rawget(like, "dims")
    if not dims then return nil end
    dims = copy_dims(dims)
    dims[#dims] = width
    return dims
  end

  -- The rows a table lookup gives: of the batch's input_ids (the rows of
  -- the stream) in a table of rows, rows `width` wide; else the indices'
  -- shape plus the table's trailing dimensions.
  local function looked_up(out, idx, trailing)
    if rawget(idx, "tokens") and #trailing == 1 then return out end
    local dims = copy_dims(dims_of(idx))
    for _, d in ipairs(trailing) do dims[#dims + 1] = d end
    out.dims, out.layout = dims, true
    return out
  end

  -- F.embedding(ids, p.table): nn.Embedding's lookup of a table declared
  -- { "name", embedding = { num_embeddings, embedding_dim } }, in the
  -- table's dtype (on no autocast list). EmbeddingBackward0 keeps the ids
  -- (and the weight, for its size: no memory of its own); backward makes
  -- a dense gradient of all of the table (embedding_dense_backward). A
  -- table declared split = "column" gives each tensor-parallel rank its
  -- share of every row.
  -- padding_idx changes no size; sparse = true (a sparse COO gradient,
  -- which the optimizers here do not take) and scale_grad_by_freq are
  -- refused.
  function F.embedding(ids, tbl, opts)
    check_kind(ids, "embedding", true)
    check_tensor(tbl, "embedding")
    if not rawget(tbl, "table") then
      fail("embedding: the second argument must be a declared table (params: { \"name\", embedding = { n, dim } })")
    end
    if opts ~= nil and type(opts) ~= "table" then fail("embedding: options must be a table") end
    opts = opts or {}
    for k in pairs(opts) do
      if k ~= "label" and k ~= "padding_idx" and k ~= "sparse" and k ~= "scale_grad_by_freq" then
        fail("embedding: unknown option '%s' (padding_idx, sparse, label)", tostring(k))
      end
    end
    if opts.sparse then fail("embedding: sparse gradients are not in the vocabulary (the optimizers take dense ones)") end
    if opts.scale_grad_by_freq then fail("embedding: scale_grad_by_freq is not in the vocabulary yet") end
    if opts.padding_idx ~= nil and math.type(opts.padding_idx) ~= "integer" then
      fail("embedding: padding_idx must be a whole number")
    end
    if tbl.split and not rawget(ids, "tokens") then
      fail("embedding: a table split over tensor-parallel ranks is looked up by input_ids only yet")
    end
    local out = record("embedding", { ids, tbl }, { width = tbl.width, width_split = tbl.split }, tbl.width, tbl.split,
      label_of({ label = opts.label }, "embedding"))
    return looked_up(out, ids, { tbl.width })
  end

  -- F.index(x, idx): x[idx], advanced indexing of x's first dimension
  -- (index_select(x, 0, idx) of a one-dimensional idx alike: each keeps
  -- only the index, IndexBackward0 and IndexSelectBackward0, and backward
  -- fills a zero gradient of all of x). x is a table (a declared
  -- embedding, or a tensor of explicit shape whose other dimensions are
  -- whole numbers).
  function F.index(x, idx, opts)
    check_kind(x, "index", false)
    check_kind(idx, "index", true)
    if x.split then fail("index: of a table split over tensor-parallel ranks: not in the vocabulary yet") end
    local dims = rawget(x, "dims")
    if not dims or #dims < 2 then fail("index: of a table (a declared embedding, or a tensor of explicit shape)") end
    local trailing, width = {}, 1
    for i = 2, #dims do
      if math.type(dims[i]) ~= "integer" then
        fail("index: x's dimensions after the first must be whole numbers (dimension %d is %s)", i - 1, tostring(dims[i]))
      end
      trailing[#trailing + 1] = dims[i]
      width = width * dims[i]
    end
    local out = record("index", { x, idx }, { width = width }, dims[#dims], false, label_of(opts, "index"))
    return looked_up(out, idx, trailing)
  end

  -- The length of a one-dimensional index (index_select's and index_add's
  -- must be: PyTorch refuses others).
  local function one_dim(idx, what)
    local dims = dims_of(idx)
    if #dims ~= 1 then
      fail("%s: the index must be one-dimensional (idx:view(-1) or idx:flatten()), got %s", what, dims_string(dims))
    end
    return dims[1]
  end

  -- x's dimension dim (1-based), refused along a dimension split over
  -- tensor-parallel ranks.
  local function along(x, dims, dim, what)
    if x.split and rawget(x, "table") then fail("%s: of a table split over tensor-parallel ranks: not in the vocabulary yet", what) end
    local d = norm_dim(dims, dim, what)
    if type(dims[d]) == "table" and dims[d].sym == "split" then
      fail("%s: along a dimension split over tensor-parallel ranks", what)
    end
    return d
  end

  -- F.index_select(x, dim, idx): x.index_select(dim, idx) of a
  -- one-dimensional idx, a new tensor of x's shape with dimension dim
  -- idx's length. IndexSelectBackward0 keeps the index (and x's sizes: no
  -- memory); backward fills a zero gradient of all of x
  -- (index_select_backward: zeros, then index_add_).
  function F.index_select(x, dim, idx, opts)
    check_kind(x, "index_select", false)
    check_kind(idx, "index_select", true)
    local n = one_dim(idx, "index_select")
    local dims = copy_dims(dims_of(x))
    dims[along(x, dims, dim, "index_select")] = n
    return (shaped("index_select", { x, idx }, nil, dims, label_of(opts, "index_select")))
  end

  -- F.index_add(x, dim, idx, src): x.index_add(dim, idx, src), out of
  -- place, a new tensor like x; src of x's shape but along dim, where it
  -- has idx's length. IndexAddBackward0 keeps the index and src (its
  -- gradient's formula, grad.index_select(dim, index).expand_as(source),
  -- names it); x's gradient passes through, src gets one of its size.
  -- PyTorch also wants x and src of one dtype (index_add_ raises
  -- otherwise): known only when the step runs, not checked here.
  -- (`prim`: index_add, or the in-place index_add_ and index_copy_, whose
  -- operands are alike: block_inplace.lua)
  local function index_add_as(prim)
    return function(x, dim, idx, src, opts)
      check_kind(x, prim, false)
      check_kind(idx, prim, true)
      if type(src) == "number" then fail("%s: the source must be a tensor", prim) end
      check_kind(src, prim, false)
      local n = one_dim(idx, prim)
      local xd, sd = dims_of(x), dims_of(src)
      local d = along(x, xd, dim, prim)
      if #sd ~= #xd then
        fail("%s: the source %s and x %s must have as many dimensions", prim, dims_string(sd), dims_string(xd))
      end
      if not same_dim(sd[d], n) then
        fail("%s: the source has %s elements along dimension %d, the index %s", prim, tostring(sd[d]), dim,
            tostring(n))
      end
      for i = 1, #xd do
        if i ~= d and not same_dim(xd[i], sd[i]) then
          fail("%s: the source %s must be shaped as x %s but along dimension %d", prim, dims_string(sd),
              dims_string(xd), dim)
        end
      end
      local out = record(prim, { x, idx, src }, nil, x.width, x.split, label_of(opts, prim), x)
      out.dims, out.layout = rawget(x, "dims") and copy_dims(x.dims), rawget(x, "dims") and true
      return out
    end
  end
  F.index_add = index_add_as("index_add")

  -- values, indices = F.topk(x, k, -1): torch.topk along the last
  -- dimension; TopkBackward0 keeps the int64 indices (backward fills a
  -- zero gradient of all of x).
  function F.topk(x, k, dim, opts)
    check_kind(x, "topk", false)
    last_dim(x, dim == nil and -1 or dim, "topk")
    if not x.width then fail("topk: the last dimension's size is unknown (give the block a width)") end
    if last_split(x) then fail("topk: along a dimension split over tensor-parallel ranks") end
    if math.type(k) ~= "integer" or k < 1 or k > x.width then
      fail("topk: k must be a whole number from 1 to the last dimension's size (%d), got %s", x.width, tostring(k))
    end
    local trace = tracing()
    trace.calls = (trace.calls or 0) + 1
    if trace.calls > 250 then fail("block %s: more than 250 primitive calls in one forward", trace.name) end
    local values, indices = new_value(trace, k, false), new_value(trace, k, false)
    values.dims, indices.dims = shaped_as(x, k), shaped_as(x, k)
    values.layout, indices.layout = values.dims and true, indices.dims and true
    indices.index = true
    local label = label_of(opts, "topk")
    trace.entries[#trace.entries + 1] = { instr = { prim = "topk", args = { x.id }, out = values.id,
      outs = { values.id, indices.id }, k = k, width = x.width, out_width = k,
      label = trace.name .. (label ~= "" and "." .. label or "") } }
    return values, indices
  end

  -- values, indices = F.max(x, -1): torch.max(x, -1), topk's memory with
  -- k = 1 (MaxBackward0 keeps the indices and fills a zero gradient of
  -- all of x: value_selecting_reduction_backward); keepdim's shape.
  function F.max(x, dim, opts)
    local values, indices = F.topk(x, 1, dim, { label = label_of(opts, "max") })
    return values, indices
  end

  -- F.gather(x, -1, idx): x.gather(-1, idx), idx's shape; GatherBackward0
  -- keeps x and the index (gather_backward takes self).
  function F.gather(x, dim, idx, opts)
    check_kind(x, "gather", false)
    check_kind(idx, "gather", true)
    last_dim(x, dim, "gather")
    if last_split(x) then fail("gather: along a dimension split over tensor-parallel ranks") end
    local out = record("gather", { x, idx }, nil, idx.width, false, label_of(opts, "gather"))
    out.dims, out.layout = rawget(idx, "dims") and copy_dims(idx.dims), rawget(idx, "dims") and true
    return out
  end

  -- F.scatter(x, -1, idx, src), F.scatter_add(x, -1, idx, src): out of
  -- place, a new tensor like x; each keeps only the index. scatter gives x
  -- a new gradient (grad.scatter(dim, index, 0)), scatter_add passes it
  -- through; src gets grad.gather(dim, index). src may be a number for
  -- scatter (x.scatter(-1, idx, 1.0)).
  local function scatter(prim, takes_number)
    return function(x, dim, idx, src, opts)
      check_kind(x, prim, false)
      check_kind(idx, prim, true)
      last_dim(x, dim, prim)
      if last_split(x) then fail("%s: along a dimension split over tensor-parallel ranks", prim) end
      local args = { x, idx }
      if type(src) == "number" and takes_number then
        -- x.scatter(dim, index, value): ScatterBackward1, the index kept
      else
        if type(src) == "number" then fail("%s: the source must be a tensor", prim) end
        check_kind(src, prim, false)
        if src.width and idx.width and src.width ~= idx.width then
          fail("%s: the source's last dimension (%d) must be the index's (%d)", prim, src.width, idx.width)
        end
        args[3] = src
      end
      local out = record(prim, args, nil, x.width, false, label_of(opts, prim), x)
      out.dims, out.layout = rawget(x, "dims"), rawget(x, "dims") and true
      return out
    end
  end
  F.scatter = scatter("scatter", true)
  F.scatter_add = scatter("scatter_add")

  -- The in-place forms' checks and records, each a new value that
  -- block_inplace.lua turns into x's.
  index.in_place = { scatter_ = scatter("scatter_", true), scatter_add_ = scatter("scatter_add_"),
                     index_add_ = index_add_as("index_add_"), index_copy_ = index_add_as("index_copy_") }

  -- F.layer_norm(x, weight, bias): F.layer_norm over the last dimension
  -- (bias may be nil); on autocast's fp32 list. NativeLayerNormBackward0
  -- keeps input, weight, bias and the per-row mean and rstd (fp32 on
  -- CUDA, the input's dtype on CPU: prims.h vp_layer_norm).
  function F.layer_norm(x, weight, bias, opts)
    check_kind(x, "layer_norm", false)
    check_kind(weight, "layer_norm", false)
    if bias ~= nil then check_kind(bias, "layer_norm", false) end
    if not rawget(weight, "vector") then fail("layer_norm: the weight must be a vector (a parameter declared size = n)") end
    if x.width and weight.width ~= x.width then
      fail("layer_norm: the weight has %d elements, the rows %d", weight.width, x.width)
    end
    if bias ~= nil and bias.width ~= weight.width then
      fail("layer_norm: the bias has %s elements, the weight %d", tostring(bias.width), weight.width)
    end
    if last_split(x) ~= last_split(weight) then
      fail("layer_norm: x and its weight must be split over tensor-parallel ranks alike")
    end
    local args = { x, weight }
    if bias then args[3] = bias end
    local out = record("layer_norm", args, nil, x.width, x.split, label_of(opts, "layer_norm"), x)
    out.dims, out.layout = rawget(x, "dims"), rawget(x, "dims") and true
    return out
  end

  -- F.all_gather(x), F.reduce_scatter(x): Megatron-LM's
  -- gather_from_sequence_parallel_region and
  -- reduce_scatter_to_sequence_parallel_region (tensor_parallel/
  -- mappings.py) along the sequence over the tensor-parallel ranks: under
  -- sequence parallelism tp times the rows, or 1/tp of them (a new tensor;
  -- backward the other collective); x itself otherwise.
  for _, prim in ipairs({ "all_gather", "reduce_scatter" }) do
    F[prim] = function(x, opts)
      check_kind(x, prim, false)
      if rawget(x, "dims") then fail("%s: of rows of tokens (not a tensor of explicit shape)", prim) end
      return (record(prim, { x }, nil, x.width, x.split, label_of(opts, prim), x))
    end
  end

  for _, name in ipairs({ "topk", "max", "gather", "scatter", "scatter_add", "index_select", "index_add" }) do
    methods[name] = F[name]
  end
end

return index
