-- Jamba (Lieber et al. 2024, arXiv:2403.19887; transformers' JambaForCausalLM,
-- models/jamba/modeling_jamba.py, 4.4x): attention, Mamba and
-- mixture-of-experts layers in one model. The attention, the MLPs, the
-- MoE and the norms are the core's op kinds; the Mamba mixer is a Lua block
-- with no C. Jamba-v0.1's layers are Mamba-1 (selective scan), run as
-- JambaMambaMixer.cuda_kernels_forward runs them in training: the
-- causal-conv1d and selective-scan CUDA kernels, declared below from their
-- autograd Functions (read from their source, not measured).
--
-- What the Lua block leaves out: the transposes' copies where F.linear
-- meets a transposed view (x_proj's and out_proj's inputs: the vocabulary
-- has no transpose yet); the scan's per-sequence state tensor is counted
-- per token (exact when the sequence length is a multiple of 2048).
local llama_layers = library "llama_layers"
return architecture {
  name = "jamba",
  doc = "Jamba-style hybrid: attention + Mamba (Lua block) + MoE layers",
  fields = {
    { "hidden", "int", doc = "hidden_size" },
    { "layers", "int", max = 10000, doc = "num_hidden_layers (a multiple of attn_layer_period)" },
    { "heads", "int", doc = "num_attention_heads" },
    { "kv_heads", "int", doc = "num_key_value_heads" },
    { "intermediate", "int", doc = "intermediate_size (the MLP's and each expert's)" },
    { "vocab", "int", doc = "vocab_size" },
    { "experts", "int", doc = "num_experts" },
    { "experts_per_token", "int", doc = "num_experts_per_tok" },
    { "attn_period", "int", doc = "attn_layer_period" },
    { "attn_offset", "int", doc = "attn_layer_offset" },
    { "expert_period", "int", doc = "expert_layer_period" },
    { "expert_offset", "int", doc = "expert_layer_offset" },
    { "state", "int", doc = "mamba_d_state" },
    { "conv", "int", doc = "mamba_d_conv" },
    { "expand", "int", doc = "mamba_expand" },
    { "dt_rank", "int", doc = "mamba_dt_rank" },
    { "norm_eps", "number", default = 1e-6, min = 0, doc = "rms_norm_eps" },
    { "max_positions", "int", default = 262144, doc = "max_position_embeddings (no position table)" },
  },
  check = function(c)
    if c.layers % c.attn_period ~= 0 or c.attn_period % c.expert_period ~= 0 then
      return "layers", "must be a multiple of attn_layer_period, itself a multiple of expert_layer_period"
    end
  end,
  build = function(c)
    local d_inner = c.expand * c.hidden

    -- causal-conv1d 1.4 causal_conv1d/causal_conv1d_interface.py: CausalConv1dFn.forward
    -- keeps its input (a view of in_proj's output: contiguous along the
    -- channels, no copy), the weight and the bias, and returns a new
    -- (batch, dim, seqlen) tensor
    local causal_conv1d = F.kernel {
      name = "causal_conv1d",
      source = "causal-conv1d 1.4 causal_conv1d_interface.py: CausalConv1dFn.forward "
        .. "ctx.save_for_backward(x, weight, bias, seq_idx, initial_states)",
      inputs = 3, -- x, weight, bias
      saves = { 1, 2, 3 },
    }

    -- mamba_ssm 2.2.4 mamba_ssm/ops/selective_scan_interface.py: SelectiveScanFn.forward,
    -- called with z (the gate):
    --   delta, B, C, z are transposed views: `if x.stride(-1) != 1: x = x.contiguous()`
    --   out, x, out_z = selective_scan_cuda.fwd(...) (csrc/selective_scan/selective_scan.cpp:
    --     out = torch::empty_like(delta), x = torch::empty({batch, dim, n_chunks, dstate * 2}, fp32)
    --     with n_chunks = ceil(seqlen / 2048), out_z = torch::empty_like(z))
    --   ctx.save_for_backward(u, delta, A, B, C, D, z, delta_bias, x, out); returns out_z
    local selective_scan = F.kernel {
      name = "selective_scan",
      source = "mamba_ssm v2.2.4 mamba_ssm/ops/selective_scan_interface.py: SelectiveScanFn.forward "
        .. "ctx.save_for_backward(u, delta, A, B, C, D, z, delta_bias, x, out); csrc/selective_scan/selective_scan.cpp",
      inputs = 8, -- u, delta, A, B, C, D, z, delta_bias
      output = { width = d_inner },
      saves = { 1, 2, 3, 4, 5, 6, 7, 8 },
      copies = { 2, 4, 5, 7 }, -- delta, B, C, z: made contiguous, the copies kept
      keeps = {
        -- x, one per 2048 tokens of a sequence (at least a float per token:
        -- a model narrower than 2048 / (2 * d_state) channels)
        { width = math.max(1, d_inner * 2 * c.state // 2048), dtype = "float32" },
        { width = d_inner, dtype = "input" },                          -- out
      },
      -- selective_scan_bwd: dB and dC in fp32 (variable B, C: zeros_like(..., kFloat32))
      workspace = { backward = 4 * 2 * c.state },
    }

    -- JambaRMSNorm (LlamaRMSNorm's code), run inside the mixer on dt, B, C
    -- (models/lib/llama_layers.lua)
    local function rms_norm(x, weight) return llama_layers.rms_norm(x, weight, c.norm_eps) end

    -- JambaMambaMixer: its own parameters (A_log, D) first, then its
    -- submodules'; bias on conv1d and dt_proj only (mamba_conv_bias,
    -- mamba_proj_bias = false)
    local function mamba()
      return block {
        name = "mamba",
        width = c.hidden,
        params = {
          { "A_log", size = d_inner * c.state },
          { "D", size = d_inner },
          { "conv1d_weight", size = d_inner * c.conv, module = "conv1d" }, -- (d_inner, 1, d_conv)
          { "conv1d_bias", size = d_inner, module = "conv1d" },
          { "in_proj", linear = { c.hidden, 2 * d_inner } },
          { "x_proj", linear = { d_inner, c.dt_rank + 2 * c.state } },
          { "dt_proj", linear = { c.dt_rank, d_inner } },
          { "dt_proj_bias", size = d_inner, module = "dt_proj" }, -- added inside the scan, not by the Linear
          { "out_proj", linear = { d_inner, c.hidden } },
          { "dt_layernorm", size = c.dt_rank, module = "norm" },
          { "b_layernorm", size = c.state, module = "norm" },
          { "c_layernorm", size = c.state, module = "norm" },
        },
        -- JambaMambaMixer.cuda_kernels_forward (no cache):
        --   projected_states = self.in_proj(hidden_states).transpose(1, 2)
        --   hidden_states, gate = projected_states.chunk(2, dim=1)
        --   hidden_states = causal_conv1d_fn(hidden_states, conv_weights, self.conv1d.bias, activation)
        --   ssm_parameters = self.x_proj(hidden_states.transpose(1, 2))
        --   time_step, B, C = torch.split(ssm_parameters, [dt_rank, d_state, d_state], dim=-1)
        --   time_step, B, C = self.dt_layernorm(time_step), self.b_layernorm(B), self.c_layernorm(C)
        --   discrete_time_step = self.dt_proj(time_step).transpose(1, 2)   (its bias set aside)
        --   A = -torch.exp(self.A_log.float())
        --   scan_outputs, ssm_state = selective_scan_fn(hidden_states, discrete_time_step, A,
        --       B.transpose(1, 2), C.transpose(1, 2), self.D.float(), gate, time_proj_bias, ...)
        --   contextualized_states = self.out_proj(scan_outputs.transpose(1, 2))
        forward = function(x, p)
          local h, gate = F.chunk(p.in_proj(x), 2, -1)
          h, gate = F.keep(h, "hidden_states"), F.keep(gate, "gate")
          h = F.keep(causal_conv1d(h, p.conv1d_weight, p.conv1d_bias, { label = "conv1d" }), "hidden_states")
          local time_step, B, C = F.split(p.x_proj(h), { c.dt_rank, c.state, c.state }, -1)
          time_step = F.keep(F.call(rms_norm, time_step, p.dt_layernorm), "time_step")
          B = F.keep(F.call(rms_norm, B, p.b_layernorm), "B")
          C = F.keep(F.call(rms_norm, C, p.c_layernorm), "C")
          local dt = F.keep(p.dt_proj(time_step), "discrete_time_step")
          local A = F.keep(-F.exp(p.A_log:float()), "A")
          local scan = F.keep(selective_scan(h, dt, A, B, C, p.D:float(), gate, p.dt_proj_bias:float(),
            { label = "selective_scan" }), "scan_outputs")
          return p.out_proj(scan)
        end,
      }
    end

    local function norm() return rmsnorm { hidden = c.hidden, eps = c.norm_eps } end
    local function feed_forward(i)
      if i % c.expert_period == c.expert_offset then
        -- JambaSparseMoeBlock: a router, softmax in fp32, top-k without
        -- renormalizing, JambaMLP experts (gate_proj, up_proj, down_proj)
        return moe { hidden = c.hidden, intermediate = c.intermediate, experts = c.experts,
                     top_k = c.experts_per_token, norm_topk = false, block = "mixtral", expert_names = "proj" }
      end
      return mlp { hidden = c.hidden, intermediate = c.intermediate, gated = true }
    end
    -- One period of attn_layer_period layers, repeated: JambaAttentionDecoderLayer
    -- at attn_layer_offset, JambaMambaDecoderLayer elsewhere; each is
    -- input_layernorm, its mixer, residual; pre_ff_layernorm, feed_forward, residual
    local period = {}
    for i = 0, c.attn_period - 1 do
      local mixer = mamba()
      if i == c.attn_offset then
        mixer = attention { hidden = c.hidden, heads = c.heads, kv_heads = c.kv_heads, rotary = false,
                            upcast_softmax = true, keeps_weights = true, mask = "additive" }
      end
      period[#period + 1] = residual { norm(), mixer }
      period[#period + 1] = residual { norm(), feed_forward(i) }
    end
    return decoder {
      norms_registered = "last",
      embed = { token_embedding { vocab = c.vocab, hidden = c.hidden, model_local = true } },
      layer = period,
      layers = c.layers // c.attn_period,
      final = { norm(), lm_head { vocab = c.vocab, hidden = c.hidden }, cross_entropy {} },
    }
  end,
}
