-- A DIFF Transformer (Ye et al. 2024, "Differential Transformer", arXiv
-- 2410.05258) at Llama 2 7B's shape: LLaMA's layer (pre-RMSNorm, SwiGLU, as
-- the paper's section 2 builds it) with differential attention in place of
-- LLaMA's, half as many heads of half the width (the authors' convention:
-- num_heads is half a Transformer's, head_dim = hidden / heads / 2), the
-- attention written as a Lua block (models/blocks/diff_transformer.lua,
-- docs/writing-blocks.md) and the rest the llama family's. Not a published checkpoint: an example of a new
-- kind of attention without C. Its parameters, from the reference module's
-- shapes (microsoft/unilm Diff-Transformer/multihead_flashdiff_2.py): per
-- layer q, k, v and out_proj 4096 x 4096, lambda_q1, lambda_k1, lambda_q2,
-- lambda_k2 of 128 and subln's 256, the MLP 3 x 4096 x 11008 and two norms
-- of 4096; the embedding and head 32000 x 4096 each and the final norm:
-- 6,738,440,192 (Llama 2 7B's 6,738,415,616 and 768 more per layer;
-- tests/lua/block_spec.lua sums them independently).
return llama {
  name = "DIFF Transformer 7B (Lua blocks)",
  hidden = 4096,
  layers = 32,
  heads = 16,
  kv_heads = 16,
  intermediate = 11008,
  vocab = 32000,
  max_positions = 4096,
  norm_eps = 1e-5,
  head_dim = 128, -- 4096 / 16 / 2
  lua_blocks = "diff_transformer",
}
