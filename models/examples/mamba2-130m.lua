-- Mamba-2 130M (state-spaces/mamba2-130m) with its SSD mixer written as a
-- Lua block (models/examples/arch/mamba2.lua): an example of a new kind of
-- block without C. Config: the checkpoint's config.json (d_model 768,
-- n_layer 24, vocab_size 50277 padded to a multiple of 16 = 50288,
-- ssm_cfg layer Mamba2 with mamba_ssm's defaults d_state 128, d_conv 4,
-- expand 2, headdim 64, ngroups 1, chunk_size 256; rms_norm,
-- residual_in_fp32, fused_add_norm, tie_embeddings). Published size: 130M
-- (the checkpoint's name); the module shapes sum to 128,989,632
-- (tests/lua/mamba_spec.lua adds them up apart from the engine).
return mamba2 {
  name = "Mamba-2 130M (Lua blocks)",
  hidden = 768,
  layers = 24,
  vocab = 50288,
  state = 128,
  conv = 4,
  expand = 2,
  head_dim = 64,
  groups = 1,
  chunk = 256,
}
