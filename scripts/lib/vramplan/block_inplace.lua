-- vramplan.block_inplace — the in-place scatters of a block's forward:
-- x:scatter_(dim, idx, src), x:scatter_add_, x:index_add_, x:index_copy_,
-- x:masked_fill_(mask, value). Each writes x's storage (PyTorch 1.13
-- returns x itself, the same storage, its version counter bumped: no new
-- tensor), keeps what its out-of-place form keeps (ScatterBackward0 and
-- ScatterAddBackward0 the index, IndexAddBackward0 and IndexCopyBackward0
-- the index and the source, MaskedFillBackward0 the mask: engine/core/
-- prims.c), and returns x, the same tensor for the rest of the trace.
--
-- PyTorch refuses an in-place write of a leaf that requires grad in the
-- forward, and of a tensor some node saved for backward at backward (the
-- saved tensor's version no longer matches). What an earlier op saved is
-- the core's to say, and differs by recipe, so the rule here is the
-- conservative one: refused at the script's line, x may not be a
-- parameter, the block's input or a named input, a view of another
-- tensor (or what may be one: the core's block_prim_facts), a tensor an
-- earlier instruction of the block read, or the output of a primitive
-- whose node keeps its own output (the core's block_prim_facts).
local vramplan = require("vramplan")

local inplace = {}

local PYTORCH_AT_BACKWARD = "PyTorch raises at backward: \"one of the variables needed for gradient computation has "
  .. "been modified by an inplace operation\""

function inplace.install(I)
  local F, methods, fail, check_tensor, tracing, forms = I.F, I.methods, I.fail, I.check_tensor, I.tracing, I.forms

  -- The instructions' outputs: their values' ids.
  local function outputs(instr)
    return instr.outs or { instr.out }
  end

  -- Why x may not be written in place, or nil.
  local function refusal(x)
    local trace = tracing()
    local id = x.id
    if id == 0 then
      return "x is the block's input, which the ops before the block may have saved for backward (" ..
        PYTORCH_AT_BACKWARD .. "): write it out of place"
    elseif id <= trace.n_params then
      return "x is a parameter of the block (PyTorch raises in the forward: \"a leaf Variable that requires grad is "
        .. "being used in an in-place operation\"): write it out of place"
    elseif id <= trace.n_borrowed then
      return "x is a named input of the block, which other ops may have saved for backward (" .. PYTORCH_AT_BACKWARD
        .. "): write it out of place"
    elseif trace.values[id] ~= x then
      return "x is a view of another tensor (view, reshape, transpose, flatten, contiguous of a contiguous one): "
        .. "writing it writes its base, in place not in the vocabulary yet: write it out of place"
    end
    for _, e in ipairs(trace.entries) do
      local instr = e.instr
      if instr then
        local own = instr.out == id and instr.args[1] == id -- an in-place write of x
        for k, a in ipairs(instr.args) do
          if a == id and not (own and k == 1) then
            return string.format("x was read by %s before, which may have saved it for backward (%s): write it out "
              .. "of place or before that read", instr.label, PYTORCH_AT_BACKWARD)
          end
        end
        for _, o in ipairs(outputs(instr)) do
          if o == id and not own then
            local saves, aliases = vramplan.block_prim_facts(instr.prim, instr.fn)
            if saves then
              return string.format("x is the output of %s, whose backward keeps it (%s): write it out of place",
                instr.label, PYTORCH_AT_BACKWARD)
            elseif aliases then
              return string.format("x is %s's output, which may be a view of its input or the input itself: "
                .. "writing it writes that, in place not in the vocabulary yet: write it out of place", instr.label)
            end
          end
        end
      end
    end
    return nil
  end

  -- x:name(...) from its out-of-place form (`record_form`): x checked,
  -- the form's instruction recorded (its operands checked as the form's
  -- are), then made to write x's value instead of a new one.
  local function in_place(name, record_form)
    return function(x, ...)
      check_tensor(x, name)
      local why = refusal(x)
      if why then fail("%s: %s", name, why) end
      local trace = tracing()
      local out = record_form(x, ...)
      local instr = trace.entries[#trace.entries].instr
      assert(instr.out == out.id and out.id == trace.n_values - 1, "an in-place form records one new value last")
      instr.prim, instr.out = name, x.id
      trace.values[out.id], trace.n_values = nil, out.id
      return x
    end
  end

  for name, form in pairs(forms) do methods[name] = in_place(name, form) end
  -- x:masked_fill_(mask, value): F.masked_fill's operands (a bool mask of
  -- F.tril_ones / F.logical_not, or of F.mask("bool") on attention
  -- scores, which F.masked_fill fills with the dtype's minimum: value
  -- changes no size)
  methods.masked_fill_ = in_place("masked_fill_", function(x, mask, value, opts)
    if rawget(x, "dims") then return (F.masked_fill(x, mask, value, opts)) end
    if type(value) ~= "number" then fail("masked_fill_: the value must be a number") end
    return (F.masked_fill(x, mask, opts))
  end)
end

return inplace
