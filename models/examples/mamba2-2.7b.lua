-- Mamba-2 2.7B (state-spaces/mamba2-2.7b) with its SSD mixer written as a
-- Lua block (models/examples/arch/mamba2.lua). Config: the checkpoint's
-- config.json (d_model 2560, n_layer 64, vocab_size 50277 padded to a
-- multiple of 16 = 50288, ssm_cfg layer Mamba2 with mamba_ssm's defaults,
-- rms_norm, residual_in_fp32, fused_add_norm, tie_embeddings). Published
-- size: 2.7B (the checkpoint's name); the module shapes sum to
-- 2,702,599,680 (tests/lua/mamba_spec.lua adds them up apart from the
-- engine).
return mamba2 {
  name = "Mamba-2 2.7B (Lua blocks)",
  hidden = 2560,
  layers = 64,
  vocab = 50288,
}
