-- Falcon2-11B (TII 2024, tiiuae/falcon-11B; Malartic et al. 2024,
-- arXiv:2407.14885). Config: HF tiiuae/falcon-11B config.json (read
-- 2026-12-03 through copies that name it as _name_or_path, e.g.
-- huggingface.co/thesven/falcon-11B-GPTQ-4bit and
-- PrunaAI/tiiuae-falcon-11B-HQQ-4bit-smashed; model_type falcon:
-- hidden_size 4096, 60 layers, 32 heads, new_decoder_architecture with 8
-- key/value groups, num_ln_in_parallel_attn 1 (one input_layernorm feeds
-- the attention and the MLP), parallel_attn, ffn_hidden_size 16384,
-- max_position_embeddings 8192, rope_theta 500042, tie_word_embeddings
-- false, vocab_size 65024); the model card's table: 60 layers, d_model
-- 4096, head_dim 128, vocabulary 65024, sequence length 8192. Parameters:
-- 11,102,822,400 (FalconForCausalLM's modules with the untied lm_head);
-- published: 11.103B (huggingface.co/datasets/open-llm-leaderboard/
-- requests, tiiuae/falcon-11B_eval_request_False_bfloat16_Original.json,
-- read 2026-12-03: "params": 11.103, the safetensors total in billions;
-- the model card: "11B parameters") (tests).
return falcon {
  name = "falcon-11b",
  -- the checkpoint's weights: config.json torch_dtype bfloat16 (tests/fixtures/falcon-11b-config.json)
  checkpoint_dtype = "bf16",
  hidden = 4096,
  layers = 60,
  heads = 32,
  new_decoder_architecture = true,
  kv_heads = 8,
  norms = 1,
  intermediate = 16384,
  vocab = 65024,
  max_positions = 8192,
  rope_theta = 500042.0,
  tie_embeddings = false,
}
