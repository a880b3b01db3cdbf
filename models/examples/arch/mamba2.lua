-- Mamba-2 (mamba_ssm 2.2.4's MambaLMHeadModel with Mamba2 mixers: Dao & Gu
-- 2024, "Transformers are SSMs"), its mixer written as a Lua block with no
-- C: the fused kernel mamba_split_conv1d_scan_combined declared from its
-- autograd.Function (what a training step runs), or with reference = true
-- the chunked reference path written out in PyTorch ops (transformers'
-- Mamba2Mixer.torch_forward, what the CPU harness runs and checks: see
-- reference_layer below). The kernel's saving rules are read
-- from its source and stated below, not measured (no GPU here; the CPU
-- harness cannot run these Triton kernels).
--
-- Source of every rule and shape: github.com/state-spaces/mamba, tag v2.2.4:
--   mamba_ssm/modules/mamba2.py         Mamba2.__init__ / forward
--   mamba_ssm/ops/triton/ssd_combined.py MambaSplitConv1dScanCombinedFn
--   mamba_ssm/ops/triton/ssd_chunk_state.py, ssd_state_passing.py,
--   ssd_bmm.py, ssd_chunk_scan.py, layernorm_gated.py (what each allocates)
--   mamba_ssm/models/mixer_seq_simple.py MixerModel, MambaLMHeadModel
local llama_layers = library "llama_layers"
return architecture {
  name = "mamba2",
  doc = "Mamba-2 language model (mamba_ssm's MambaLMHeadModel with Mamba2 mixers) as Lua blocks",
  fields = {
    { "hidden", "int", doc = "d_model" },
    { "layers", "int", max = 10000, doc = "n_layer" },
    { "vocab", "int", doc = "vocab_size after padding to pad_vocab_size_multiple" },
    { "state", "int", default = 128, doc = "d_state" },
    { "conv", "int", default = 4, doc = "d_conv" },
    { "expand", "int", default = 2, doc = "expand" },
    { "head_dim", "int", default = 64, doc = "headdim" },
    { "groups", "int", default = 1, doc = "ngroups" },
    { "chunk", "int", default = 256, doc = "chunk_size" },
    { "norm_eps", "number", default = 1e-5, min = 0, doc = "the model's RMSNorm eps" },
    { "tie_embeddings", "bool", default = true, doc = "tie_embeddings" },
    { "max_positions", "int", default = 1048576, doc = "no position table: any length (no memory of its own)" },
    { "reference", "bool", default = false,
      doc = "the mixer as transformers' Mamba2Mixer.torch_forward (the chunked reference SSD in PyTorch ops) instead of mamba_ssm's fused kernel" },
  },
  build = function(c)
    local d_inner = c.expand * c.hidden
    local heads = d_inner // c.head_dim
    local conv_dim = d_inner + 2 * c.groups * c.state
    local d_in_proj = 2 * d_inner + 2 * c.groups * c.state + heads
    -- per row (token) of the chunked scan's (b, nchunks, ...) tensors
    local states_per_row = heads * c.head_dim * c.state // c.chunk

    -- MambaSplitConv1dScanCombinedFn (ssd_combined.py), with rmsnorm_weight
    -- and outproj_weight given (Mamba2.forward's use_mem_eff_path, the
    -- default in training) and no d_nonssm part:
    local split_conv1d_scan = F.kernel {
      name = "mamba_split_conv1d_scan_combined",
      source = "mamba_ssm v2.2.4 mamba_ssm/ops/triton/ssd_combined.py: MambaSplitConv1dScanCombinedFn.forward "
        .. "ctx.save_for_backward(zxbcdt, conv1d_weight, conv1d_bias, out_x, A, D, dt_bias, initial_states, "
        .. "seq_idx, rmsnorm_weight, rstd, outproj_weight, outproj_bias)",
      -- the inputs that receive a gradient (initial_states, seq_idx and
      -- outproj_bias are None in Mamba2.forward's training call)
      inputs = 8, -- zxbcdt, conv1d_weight, conv1d_bias, dt_bias, A, D, rmsnorm_weight, outproj_weight
      -- out = F.linear(out, outproj_weight): (b, l, d_model), under autocast
      -- in autocast's dtype, which zxbcdt (in_proj's output) has
      output = { width = c.hidden },
      saves = { 1, 2, 3, 4, 5, 6, 7, 8 },
      -- `if torch.is_autocast_enabled(): out, outproj_weight = out.to(dtype),
      -- outproj_weight.to(dtype)`: the copy is what it saves
      casts = { 8 },
      keeps = {
        -- out_x: _chunk_scan_fwd's out = torch.empty(batch, seqlen, nheads,
        -- headdim, dtype=x.dtype) (z is None on the rmsnorm path)
        { width = d_inner, dtype = "input" },
        -- rstd: layernorm_gated.py _layer_norm_fwd, torch.empty((ngroups * M,), dtype=torch.float32)
        { width = c.groups, dtype = "float32" },
      },
      workspace = {
        -- the forward's locals, freed when it returns (per token):
        --   xBC_conv = causal_conv1d_fwd(xBC, ...): conv_dim, zxbcdt's dtype
        --   dt_out, dA_cumsum = _chunk_cumsum_fwd: (b, nheads, nchunks, chunk) fp32 each
        --   states = _chunk_state_fwd(states_in_fp32=True): (b, nchunks, h, p, n) fp32, alive
        --     while _state_passing_fwd makes its (b, nchunks, h, p*n) out in C's dtype
        --   CB = _bmm_chunk_fwd(output_dtype=torch.float32): (b, nchunks, g, chunk, chunk)
        --   _layer_norm_fwd's out = torch.empty_like(x): d_inner, zxbcdt's dtype
        -- (final_states, (b, h, p*n) fp32 per sequence, is left out: not per token)
        forward = {
          bytes = 4 * (2 * heads + states_per_row + c.groups * c.chunk),
          input = conv_dim + states_per_row + d_inner,
        },
        -- the backward's (MambaSplitConv1dScanCombinedFn.backward, per token):
        --   out_recompute (d_inner), xBC_conv again (conv_dim), dxBC = torch.empty_like(xBC)
        --   (conv_dim), dout = F.linear(dout, outproj_weight.t()) (d_inner), _layer_norm_bwd's
        --   dx (d_inner) and the states again (C's dtype), all in zxbcdt's dtype;
        --   _mamba_chunk_scan_combined_bwd's fp32 dt, dA_cumsum, ddt, ddA_cumsum (4 x nheads),
        --   states and dstates (2 x h*p*n/chunk) and CB (g x chunk)
        -- (its per-weight einsum for out_proj's gradient is the gradient itself)
        backward = {
          bytes = 4 * (4 * heads + 2 * states_per_row + c.groups * c.chunk),
          input = 3 * d_inner + 2 * conv_dim + d_inner + states_per_row,
        },
      },
    }

    -- Megatron-LM's MambaMixer (megatron/core/ssm/mamba_mixer.py at 00bebb45; its
    -- RMSNormGated and mamba_split_conv1d_scan_combined are mamba_ssm's:
    -- megatron/core/ops/ssm/mamba2/backends.py) runs the same kernel without the norm and
    -- the output projection (MambaMixer._ssm_training): the z gate is applied inside the
    -- scan (_mamba_chunk_scan_combined_fwd(..., z=z): ssd_combined.py, `if rmsnorm_weight
    -- is None`), whose output is the gated `out`, and it keeps the ungated `out_x`
    -- (ssd_chunk_scan.py _chunk_scan_fwd: both torch.empty(batch, seqlen, nheads, headdim,
    -- dtype=x.dtype) when z is given); ctx.save_for_backward keeps zxbcdt, the conv1d
    -- weight and bias, out_x, A, D and dt_bias (rmsnorm_weight, rstd and outproj_weight
    -- are None). Every width here is the whole model's: on a column-parallel zxbcdt
    -- (tp > 1) each rank runs it on its nheads / tp heads and ngroups / tp groups, and
    -- the engine gives it that share of its keeps and workspaces (engine/ops/op_block.c).
    local split_conv1d_scan_gated = F.kernel {
      name = "mamba_split_conv1d_scan_combined",
      source = "mamba_ssm v2.2.4 mamba_ssm/ops/triton/ssd_combined.py: MambaSplitConv1dScanCombinedFn.forward "
        .. "without rmsnorm_weight and outproj_weight (Megatron-LM MambaMixer._ssm_training): "
        .. "ctx.save_for_backward(zxbcdt, conv1d_weight, conv1d_bias, out_x, A, D, dt_bias, ...)",
      inputs = 6, -- zxbcdt, conv1d_weight, conv1d_bias, dt_bias, A, D
      -- out = rearrange(out, "b s h p -> b s (h p)"): (b, l, d_inner) in x's dtype (zxbcdt's)
      output = { width = d_inner },
      saves = { 1, 2, 3, 4, 5, 6 },
      -- out_x: _chunk_scan_fwd's second torch.empty (z given)
      keeps = { { width = d_inner, dtype = "input" } },
      workspace = {
        -- the forward's locals as above (xBC_conv, dt_out, dA_cumsum, states,
        -- CB), without _layer_norm_fwd's out: the scan's out is the output
        forward = {
          bytes = 4 * (2 * heads + states_per_row + c.groups * c.chunk),
          input = conv_dim + states_per_row,
        },
        -- the backward's: xBC_conv again and dxBC = torch.empty_like(xBC)
        -- (conv_dim each), _chunk_scan_bwd_dz's dout_x = torch.empty_like(dout)
        -- (d_inner: the z path, ssd_chunk_scan.py) and the states again in
        -- zxbcdt's dtype; the same fp32 tensors as above (no out_recompute:
        -- recompute_output = outproj_weight is not None)
        backward = {
          bytes = 4 * (4 * heads + 2 * states_per_row + c.groups * c.chunk),
          input = 2 * conv_dim + d_inner + states_per_row,
        },
      },
    }
    -- MambaMixer.norm: ExtendedRMSNorm(d_inner_local_tp, group_size = d_inner_local_tp //
    -- ngroups_local_tp), mamba_ssm's RMSNormGated called as self.norm(y) (no gate):
    -- rmsnorm_fn -> LayerNormFn (layernorm_gated.py, v2.2.4, no autocast decorator):
    -- _layer_norm_fwd's out = torch.empty_like(x) and rstd = torch.empty((ngroups * M,),
    -- dtype=torch.float32); ctx.save_for_backward(x, weight, bias, mean, rstd, z) with
    -- bias, mean (is_rms_norm) and z None
    local group_rms_norm = F.kernel {
      name = "rmsnorm_fn",
      source = "mamba_ssm v2.2.4 mamba_ssm/ops/triton/layernorm_gated.py: LayerNormFn.forward "
        .. "ctx.save_for_backward(x, weight, bias, mean, rstd, z)",
      inputs = 2, -- x, weight
      saves = { 1, 2 },
      keeps = { { width = c.groups, dtype = "float32" } }, -- rstd: ngroups per row
    }

    -- Tensor parallelism as Megatron-LM's MambaMixer.__init__ (mamba_mixer.py at 00bebb45)
    -- splits it: in_proj a ColumnParallelLinear over [z, x, B, C, dt] (each rank d_inner / tp,
    -- d_inner / tp, ngroups / tp * d_state twice and nheads / tp rows: in_proj_partition_sizes);
    -- conv1d_weight, conv1d_bias (conv_dim = d_inner_local_tp + 2 * ngroups_local_tp * d_state),
    -- dt_bias, A_log, D (nheads_local_tp) and norm.weight (d_inner_local_tp) each rank's own,
    -- partition_dim 0; out_proj a RowParallelLinear (input_is_parallel). Its asserts:
    -- `self.nheads % tp_size == 0` and `self.ngroups % tp_size == 0` ("ngroups must be evenly
    -- divisible by tp_size": each rank gets at least one group); the state-spaces/mamba2-*
    -- checkpoints have ngroups = 1, so Megatron refuses them for tp > 1.
    local tp_divides = {
      { c.groups, string.format("must divide ngroups (%d): Megatron-LM's MambaMixer asserts ngroups %% tp_size == 0 "
        .. "(megatron/core/ssm/mamba_mixer.py)", c.groups) },
      { heads, string.format("must divide nheads (%d): Megatron-LM's MambaMixer asserts nheads %% tp_size == 0 "
        .. "(megatron/core/ssm/mamba_mixer.py)", heads) },
    }
    -- the reference path is transformers' module, which no stack splits over tp (Megatron's
    -- training path is the fused kernel: use_mamba_mem_eff_path)
    local reference_tp_divides = {
      tp_divides[1], tp_divides[2],
      { 1, "more than 1 with reference = true is not modelled (transformers' Mamba2Mixer has no tensor-parallel "
        .. "plan; Megatron-LM's MambaMixer trains with the fused kernel: reference = false)" },
    }

    -- Mamba2: its own parameters first (dt_bias, A_log, D: model.parameters()
    -- yields a module's _parameters before its children's), then in_proj,
    -- conv1d, norm (RMSNormGated) and out_proj, bias=False (Mamba2's default)
    local function mixer()
      return block {
        name = "mixer",
        width = c.hidden,
        tp_divides = tp_divides,
        -- split: Megatron-LM's (above); tp > 1 runs only there
        params = {
          { "dt_bias", size = heads, split = "column" },
          { "A_log", size = heads, split = "column" },
          { "D", size = heads, split = "column" },
          { "in_proj", linear = { c.hidden, d_in_proj }, split = "column" },
          { "conv1d_weight", size = conv_dim * c.conv, module = "conv1d", split = "column" }, -- (conv_dim, 1, d_conv)
          { "conv1d_bias", size = conv_dim, module = "conv1d", split = "column" },
          { "norm_weight", size = d_inner, module = "norm", split = "column" },
          { "out_proj", linear = { d_inner, c.hidden }, split = "row" },
        },
        -- Mamba2.forward (training, use_mem_eff_path):
        --   zxbcdt = self.in_proj(u)
        --   A = -torch.exp(self.A_log.float())
        --   out = mamba_split_conv1d_scan_combined(zxbcdt, conv1d.weight, conv1d.bias, dt_bias, A, D,
        --     ..., rmsnorm_weight=self.norm.weight, outproj_weight=self.out_proj.weight, ...)
        forward = function(u, p)
          local zxbcdt = p.in_proj(u)
          local A = -F.exp(p.A_log:float())
          return split_conv1d_scan(zxbcdt, p.conv1d_weight, p.conv1d_bias, p.dt_bias, A, p.D, p.norm_weight,
            p.out_proj.weight, { label = "" })
        end,
        -- MambaMixer.forward -> _ssm_training (Megatron-LM, mamba_mixer.py at 00bebb45), on
        -- Megatron's [l, b, d] tensors (the engine's rows are [b, l, d]: the same two copies):
        --   zxBCdt, _ = self.in_proj(hidden_states)
        --   zxBCdt = rearrange(zxBCdt, "l b d -> b l d").contiguous()
        --   A = -torch.exp(self.cp.get_A_log().float())
        --   y = mamba_split_conv1d_scan_combined(zxBCdt, conv1d_weight, conv1d_bias,
        --     self.cp.get_dt_bias().float(), A, D, ..., ngroups=self.cp.ngroups_local_tpcp)
        --   y = rearrange(y, "b l d -> l b d").contiguous()
        --   y = self.norm(y)
        --   out, out_bias = self.out_proj(y)
        -- (under sequence parallelism in_proj gathers the sequence and out_proj
        -- reduce-scatters it: "Assume sequence parallelism" in __init__)
        megatron = function(u, p)
          local zxBCdt = p.in_proj(u)
          zxBCdt = zxBCdt:transpose(0, 1):contiguous({ label = "rearrange" })
          local A = -F.exp(p.A_log:float())
          local y = split_conv1d_scan_gated(zxBCdt, p.conv1d_weight, p.conv1d_bias, p.dt_bias:float(), A, p.D,
            { label = "" })
          y = y:transpose(0, 1):contiguous({ label = "rearrange" })
          y = group_rms_norm(y, p.norm_weight, { label = "norm" })
          return p.out_proj(y)
        end,
      }
    end

    -- transformers' Mamba2Mixer.torch_forward (training, no cache, no
    -- attention mask), the reference chunked SSD in PyTorch ops:
    -- transformers/models/mamba2/modeling_mamba2.py at commit 020a37d2
    -- (segment_sum, pad_tensor_by_size, reshape_into_chunks,
    -- MambaRMSNormGated, Mamba2Mixer.torch_forward); its parameters in
    -- Mamba2Mixer.__init__'s order (conv1d, in_proj, dt_bias, A_log, norm,
    -- D, out_proj). Every local is the forward's (F.keep), alive until it is
    -- bound again or the forward returns, as in CPython.
    local function segment_sum(x)
      local sizes = x.shape
      sizes[#sizes + 1] = x:size(-1)
      x = F.keep(x:unsqueeze(-1):expand(table.unpack(sizes)), "input_tensor")
      local mask = F.keep(F.tril_ones(x, -1), "mask")
      x = F.keep(x:masked_fill(F.logical_not(mask), 0), "input_tensor")
      local segsum = F.keep(F.cumsum(x, -2), "tensor_segsum")
      mask = F.keep(F.tril_ones(x, 0), "mask")
      segsum = F.keep(segsum:masked_fill(F.logical_not(mask), -math.huge), "tensor_segsum")
      return segsum
    end

    local function into_chunks(t, pad)
      local pads = #t.shape == 3 and { 0, 0, 0, pad } or { 0, 0, 0, 0, 0, pad }
      t = F.keep(F.pad(t, pads), "input_tensor")
      local d = t.shape
      if #d == 3 then return t:reshape(d[1], -1, c.chunk, d[3]) end
      return t:reshape(d[1], -1, c.chunk, d[3], d[4])
    end

    -- MambaRMSNormGated.forward(hidden_states, gate)
    local function gated_norm(x, gate, weight)
      local input = x
      x = F.keep(x:float(), "hidden_states")
      x = F.keep(x * F.silu(gate:float()), "hidden_states")
      local variance = F.keep(F.mean(x:pow(2), -1), "variance")
      x = F.keep(x * F.rsqrt(variance + c.norm_eps), "hidden_states")
      return weight * x:to(input.dtype)
    end

    -- LlamaRMSNorm.forward, as transformers' Mamba2RMSNorm computes it
    -- (models/lib/llama_layers.lua)
    local function rms_norm(x, weight) return llama_layers.rms_norm(x, weight, c.norm_eps) end

    -- Mamba2Mixer.torch_forward(input_states)
    local function mixer_forward(u, p)
      local b, s = u:size(0), u:size(1)
      local projected_states = F.keep(p.in_proj(u), "projected_states")
      -- d_mlp = 0: the split's first two parts are empty
      local gate, xBC, dt = F.split(projected_states, { d_inner, conv_dim, heads }, -1)
      F.keep(gate, "gate")
      F.keep(xBC, "hidden_states_B_C")
      F.keep(dt, "dt")
      local conv = F.conv1d(xBC:transpose(1, 2), p.conv1d_weight, p.conv1d_bias,
        { padding = c.conv - 1, groups = conv_dim })
      xBC = F.keep(F.silu(conv:narrow(-1, 0, s):transpose(1, 2)), "hidden_states_B_C")
      local hidden_states, B, C = F.split(xBC, { d_inner, c.groups * c.state, c.groups * c.state }, -1)
      F.keep(hidden_states, "hidden_states")
      F.keep(B, "B")
      F.keep(C, "C")
      local A = F.keep(-F.exp(p.A_log:float()), "A")
      dt = F.keep(F.softplus(dt + p.dt_bias), "dt")
      -- time_step_limit = (0.0, inf), Mamba2Config's default
      dt = F.keep(F.clamp(dt, 0, math.huge), "dt")
      hidden_states = F.keep(hidden_states:reshape(b, s, -1, c.head_dim):float(), "hidden_states")
      B = F.keep(B:reshape(b, s, -1, c.state):float(), "B")
      C = F.keep(C:reshape(b, s, -1, c.state):float(), "C")
      B = F.keep(B:repeat_interleave(heads // c.groups, 2), "B")
      C = F.keep(C:repeat_interleave(heads // c.groups, 2), "C")
      local pad = F.chunk_padding(s, c.chunk)
      local D_residual = F.keep(p.D:unsqueeze(-1) * F.pad(hidden_states, { 0, 0, 0, 0, 0, pad }), "D_residual")
      hidden_states = F.keep(hidden_states * dt:unsqueeze(-1), "hidden_states")
      A = F.keep(A:to(hidden_states.dtype) * dt, "A")
      local chunked = {}
      for i, t in ipairs({ hidden_states, A, B, C }) do chunked[i] = F.call(into_chunks, t, pad) end
      hidden_states = F.keep(chunked[1], "hidden_states")
      A = F.keep(chunked[2], "A")
      B = F.keep(chunked[3], "B")
      C = F.keep(chunked[4], "C")
      chunked = nil
      A = F.keep(A:permute(0, 3, 1, 2), "A")
      local A_cumsum = F.keep(F.cumsum(A, -1), "A_cumsum")
      -- 1. the diagonal blocks' outputs
      local L = F.keep(F.exp(F.call(segment_sum, A)), "L")
      local G_intermediate = F.keep(C:unsqueeze(3) * B:unsqueeze(2), "G_intermediate")
      local G = F.keep(G_intermediate:sum(-1), "G")
      local M_intermediate = F.keep(G:unsqueeze(-1) * L:permute(0, 2, 3, 4, 1):unsqueeze(-1), "M_intermediate")
      local M = F.keep(M_intermediate:sum(-1), "M")
      local Y_diag = F.keep((M:unsqueeze(-1) * hidden_states:unsqueeze(2)):sum(3), "Y_diag")
      -- 2. each chunk's state
      local decay_states = F.keep(F.exp(A_cumsum:narrow(-1, c.chunk - 1, 1) - A_cumsum), "decay_states")
      local B_decay = F.keep(B * decay_states:permute(0, 2, 3, 1):unsqueeze(-1), "B_decay")
      local states = F.keep((B_decay:unsqueeze(-2) * hidden_states:unsqueeze(-1)):sum(2), "states")
      -- 3. the states passed between chunks
      local previous_states = F.keep(F.zeros_like(states:narrow(1, 0, 1)), "previous_states")
      states = F.keep(F.cat({ previous_states, states }, 1), "states")
      local decay_chunk = F.keep(F.exp(F.call(segment_sum, F.pad(A_cumsum:select(-1, -1), { 1, 0 }))), "decay_chunk")
      decay_chunk = F.keep(decay_chunk:transpose(1, 3), "decay_chunk")
      local new_states = F.keep((decay_chunk:unsqueeze(-1):unsqueeze(-1) * states:unsqueeze(2)):sum(1), "new_states")
      local chunks = F.chunks(s, c.chunk)
      local kept, last = new_states:narrow(1, 0, chunks), new_states:select(1, -1)
      states = F.keep(kept, "states")
      F.keep(last, "ssm_state")
      -- 4. the states' outputs
      local state_decay_out = F.keep(F.exp(A_cumsum), "state_decay_out")
      local C_times_states = F.keep(C:unsqueeze(-2) * states:unsqueeze(2), "C_times_states")
      local state_decay_out_permuted = F.keep(state_decay_out:permute(0, 2, 3, 1), "state_decay_out_permuted")
      local Y_off = F.keep(C_times_states:sum(-1) * state_decay_out_permuted:unsqueeze(-1), "Y_off")
      local y = F.keep(Y_diag + Y_off, "y")
      y = F.keep(y:reshape(b, -1, heads, c.head_dim), "y")
      y = F.keep(y + D_residual, "y")
      y = F.keep(y:narrow(1, 0, s, { if_padded = true }), "y")
      y = F.keep(y:reshape(b, s, -1), "y")
      local scan_output = F.keep(F.call(gated_norm, y, gate, p.norm_weight), "scan_output")
      return p.out_proj(scan_output:to(u.dtype))
    end

    -- Mamba2Block.forward: the norm in its weight's dtype, the residual in
    -- fp32 (residual_in_fp32, Mamba2Config's default), the mixer, the add.
    -- Parameters in Mamba2Block.__init__'s and Mamba2Mixer.__init__'s order
    -- (norm; conv1d, in_proj, dt_bias, A_log, norm, D, out_proj).
    local function reference_layer()
      return block {
        name = "mixer",
        width = c.hidden,
        locals = { "hidden_states", "residual" },
        tp_divides = reference_tp_divides,
        params = {
          { "block_norm_weight", size = c.hidden, module = "norm" },
          { "conv1d_weight", size = conv_dim * c.conv, module = "conv1d" }, -- (conv_dim, 1, d_conv)
          { "conv1d_bias", size = conv_dim, module = "conv1d" },
          { "in_proj", linear = { c.hidden, d_in_proj } },
          { "dt_bias", size = heads },
          { "A_log", size = heads },
          { "norm_weight", size = d_inner, module = "norm" },
          { "D", size = heads },
          { "out_proj", linear = { d_inner, c.hidden } },
        },
        forward = function(x, p)
          local residual = F.keep(x, "residual")
          local h = F.keep(F.call(rms_norm, x:to(p.block_norm_weight.dtype), p.block_norm_weight), "hidden_states")
          residual = F.keep(residual:float(), "residual")
          h = F.keep(F.call(mixer_forward, h, p), "hidden_states")
          return residual + h
        end,
      }
    end

    -- Mamba2Model's norm_f, and Mamba2ForCausalLM's
    -- hidden_states.to(self.lm_head.weight.dtype) (the norm's weight has
    -- the head's dtype: every parameter has the recipe's)
    local function reference_final_norm()
      return block {
        name = "norm_f",
        width = c.hidden,
        norm = true,
        params = { { "weight", size = c.hidden, module = "norm" } },
        forward = function(x, p)
          local h = F.keep(F.call(rms_norm, x, p.weight), "hidden_states")
          return h:to(p.weight.dtype)
        end,
      }
    end

    -- MixerModel: embedding, per layer Block(norm, mixer) with a residual
    -- (the fused add + RMSNorm Triton kernel, layer_norm_fn(prenorm=True,
    -- residual_in_fp32=True), is written here as the core's RMSNorm and
    -- residual add), norm_f, and the tied lm_head. Neither MixerModel nor
    -- transformers' Mamba2Model makes position_ids: Mamba2Model.forward
    -- builds cache_position = torch.arange(conv_kernel) only with use_cache,
    -- which is False in training (modeling_mamba2.py at 020a37d2).
    return decoder {
      norms_registered = "last",
      embed = { token_embedding { vocab = c.vocab, hidden = c.hidden, model_local = true, position_ids = false } },
      layer = c.reference and { reference_layer() } or { residual { rmsnorm { hidden = c.hidden, eps = c.norm_eps }, mixer() } },
      layers = c.layers,
      final = {
        c.reference and reference_final_norm() or rmsnorm { hidden = c.hidden, eps = c.norm_eps },
        -- transformers' Mamba2ForCausalLM (the reference path's model):
        -- self.lm_head(hidden_states.to(self.lm_head.weight.dtype)).float(),
        -- the fp32 logits what its outputs keep
        lm_head { vocab = c.vocab, hidden = c.hidden, tied = c.tie_embeddings, float_logits = c.reference },
        cross_entropy {},
      },
    }
  end,
}
