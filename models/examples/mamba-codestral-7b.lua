-- Codestral Mamba 7B (mistralai/Mamba-Codestral-7B-v0.1): a Mamba-2 with
-- ngroups = 8, so Megatron-LM's MambaMixer splits it over tp = 2, 4 or 8
-- (ngroups % tp_size == 0: models/examples/arch/mamba2.lua). Config: the
-- release's params.json (dim 4096, n_layers 64, vocab_size 32768,
-- n_groups 8, pad_vocab_size_multiple 1, tie_embeddings false, rms_norm,
-- residual_in_fp32, fused_add_norm) with mamba_ssm's Mamba2 defaults
-- (d_state 128, d_conv 4, expand 2, headdim 64: nheads 128). Published
-- size: "an instructed model, with 7,285,403,648 parameters"
-- (mistral.ai/news/codestral-mamba); the module shapes sum to the same
-- (tests/lua/mamba_spec.lua adds them up apart from the engine).
return mamba2 {
  name = "Codestral Mamba 7B (Lua blocks)",
  hidden = 4096,
  layers = 64,
  vocab = 32768,
  groups = 8,
  tie_embeddings = false,
}
