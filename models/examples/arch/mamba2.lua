-- Mamba-2 (mamba_ssm 2.2.4's MambaLMHeadModel with Mamba2 mixers: Dao & Gu
-- 2024, "Transformers are SSMs"), its mixer written as a Lua block with no
-- C: the fused kernel mamba_split_conv1d_scan_combined declared from its
-- autograd.Function (what a training step runs). The chunked reference
-- path (ssd_minimal's) is not written yet: it needs matmuls over chunks
-- that the vocabulary does not have. The kernel's saving rules are read
-- from its source and stated below, not measured (no GPU here; the CPU
-- harness cannot run these Triton kernels).
--
-- Source of every rule and shape: github.com/state-spaces/mamba, tag v2.2.4:
--   mamba_ssm/modules/mamba2.py         Mamba2.__init__ / forward
--   mamba_ssm/ops/triton/ssd_combined.py MambaSplitConv1dScanCombinedFn
--   mamba_ssm/ops/triton/ssd_chunk_state.py, ssd_state_passing.py,
--   ssd_bmm.py, ssd_chunk_scan.py, layernorm_gated.py (what each allocates)
--   mamba_ssm/models/mixer_seq_simple.py MixerModel, MambaLMHeadModel
return architecture {
  name = "mamba2",
  doc = "Mamba-2 language model (mamba_ssm's MambaLMHeadModel with Mamba2 mixers) as Lua blocks",
  fields = {
    { "hidden", "int", doc = "d_model" },
    { "layers", "int", max = 100000, doc = "n_layer" },
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

    -- Mamba2: its own parameters first (dt_bias, A_log, D: model.parameters()
    -- yields a module's _parameters before its children's), then in_proj,
    -- conv1d, norm (RMSNormGated) and out_proj, bias=False (Mamba2's default)
    local function mixer()
      return block {
        name = "mixer",
        width = c.hidden,
        params = {
          { "dt_bias", size = heads },
          { "A_log", size = heads },
          { "D", size = heads },
          { "in_proj", linear = { c.hidden, d_in_proj } },
          { "conv1d_weight", size = conv_dim * c.conv, module = "conv1d" }, -- (conv_dim, 1, d_conv)
          { "conv1d_bias", size = conv_dim, module = "conv1d" },
          { "norm_weight", size = d_inner, module = "norm" },
          { "out_proj", linear = { d_inner, c.hidden } },
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
      }
    end

    -- MixerModel: embedding, per layer Block(norm, mixer) with a residual
    -- (the fused add + RMSNorm Triton kernel, layer_norm_fn(prenorm=True,
    -- residual_in_fp32=True), is written here as the core's RMSNorm and
    -- residual add), norm_f, and the tied lm_head.
    return decoder {
      norms_registered = "last",
      embed = { token_embedding { vocab = c.vocab, hidden = c.hidden, model_local = true } },
      layer = { residual { rmsnorm { hidden = c.hidden, eps = c.norm_eps }, mixer() } },
      layers = c.layers,
      final = {
        rmsnorm { hidden = c.hidden, eps = c.norm_eps },
        lm_head { vocab = c.vocab, hidden = c.hidden, tied = c.tie_embeddings },
        cross_entropy {},
      },
    }
  end,
}
