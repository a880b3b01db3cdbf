-- Falcon-180B (TII 2023, tiiuae/falcon-180B). Config: HF tiiuae/falcon-180B
-- config.json (read 2026-12-03 as published in the Hugging Face space
-- gojiteji/LLM-Comparer, tiiuae/falcon-180B/config.json; model_type falcon:
-- hidden_size 14848, 80 layers, 232 heads, new_decoder_architecture with 8
-- key/value groups (num_kv_heads), so ln_attn and ln_mlp, parallel_attn,
-- alibi false, bias false, vocab_size 65024; no max_position_embeddings,
-- rope_theta or tie_word_embeddings: FalconConfig's 2048, 10000 and a
-- tied head). Parameters: 178,557,088,768, FalconForCausalLM's modules.
-- The checkpoint's safetensors total is 179,522,565,120
-- (https://huggingface.co/api/models/tiiuae/falcon-180B, safetensors.total
-- at revision d2ea5531862d4fe907280234990e6380d2befd97, as a public table
-- of that API's figures fetched 2026-10-01 records it, read 2026-12-03;
-- huggingface.co/datasets/open-llm-leaderboard/requests,
-- tiiuae/falcon-180B_eval_request_False_bfloat16_Original.json: "params":
-- 179.523): the checkpoint also stores lm_head.weight, 65024 x 14848 =
-- 965,476,352 elements, which transformers ties to the word embeddings
-- on loading (tests).
return falcon {
  name = "falcon-180b",
  hidden = 14848,
  layers = 80,
  heads = 232,
  new_decoder_architecture = true,
  kv_heads = 8,
  vocab = 65024,
  max_positions = 2048,
}
