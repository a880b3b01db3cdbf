-- Llama 2 7B with its attention, MLP and RMSNorms written as Lua blocks
-- (models/blocks/llama.lua, docs/writing-blocks.md) instead of the
-- core's op kinds: an example of a new kind of block without C. It gives
-- the same figures as models/llama2-7b.lua (tests/lua/block_spec.lua holds
-- the two timelines byte-identical). Config: HF
-- meta-llama/Llama-2-7b-hf config.json; published parameter count:
-- 6,738,415,616.
return llama {
  name = "Llama-2-7B (Lua blocks)",
  hidden = 4096,
  layers = 32,
  heads = 32,
  kv_heads = 32,
  intermediate = 11008,
  vocab = 32000,
  max_positions = 4096,
  norm_eps = 1e-5,
  lua_blocks = "llama",
}
