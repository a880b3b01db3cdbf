-- Jamba v0.1 (ai21labs/Jamba-v0.1; Lieber et al. 2024, arXiv:2403.19887):
-- attention, Mamba-1 and MoE layers in one model, the Mamba mixer a Lua
-- block (models/examples/arch/jamba.lua). Config: the checkpoint's
-- config.json (JambaForCausalLM): hidden_size 4096, 32 layers, an attention
-- layer every 8 from offset 4, a 16-expert top-2 MoE every 2 from offset 1,
-- mamba_d_state 16, mamba_d_conv 4, mamba_expand 2, mamba_dt_rank 256,
-- intermediate_size 14336, vocab_size 65536, untied lm_head. Published
-- size: 52B parameters (the paper's "52B total available parameters"); the
-- module shapes sum to 51,570,323,328 (tests/lua/jamba_spec.lua).
return jamba {
  name = "Jamba-v0.1 (Lua blocks)",
  hidden = 4096,
  layers = 32,
  heads = 32,
  kv_heads = 8,
  intermediate = 14336,
  vocab = 65536,
  experts = 16,
  experts_per_token = 2,
  attn_period = 8,
  attn_offset = 4,
  expert_period = 2,
  expert_offset = 1,
  state = 16,
  conv = 4,
  expand = 2,
  dt_rank = 256,
  norm_eps = 1e-6,
}
