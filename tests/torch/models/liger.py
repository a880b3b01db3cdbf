"""Liger-Kernel's RMSNorm and SwiGLU autograd Functions as they allocate
(src/liger_kernel/ops/rms_norm.py: LigerRMSNormFunction, rms_norm_forward
and rms_norm_backward; src/liger_kernel/ops/swiglu.py: LigerSiLUMulFunction)
and the modules Liger patches in (src/liger_kernel/transformers/rms_norm.py
and swiglu.py). The Triton kernels' values are not computed: only their
tensors matter here."""
import torch
import torch.nn as nn


# the model types apply_liger_kernel_to_<model_type> exists for, of the
# harness's (src/liger_kernel/transformers/monkey_patch.py): not Qwen2-MoE's
# or DeepSeek's; Gemma 2's and 3's and OLMo-2's norms are patched out of place
PATCHED = {"llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen3_moe", "phi3", "granite", "gemma", "gemma2",
           "gemma3_text", "olmo2", "gpt_oss"}
OUT_OF_PLACE = {"gemma2", "gemma3_text", "olmo2"}


def patches(cfg, key):
    """Whether cfg's recipe turns on Liger's `key` (liger_rms_norm,
    liger_swiglu) and Liger patches the model type."""
    return bool(cfg.get(key)) and cfg["model_type"] in PATCHED


def patches_qk_norms(cfg):
    """Whether Liger's RMSNorm is the attention's q_norm and k_norm: its
    class swap before the model is built (liger_before_load) reaches Qwen3's,
    Qwen3-MoE's, OLMo-2's and Gemma 3's; its patch of a built model
    (_apply_liger_kernel_to_instance) Gemma 3's alone."""
    return patches(cfg, "liger_rms_norm") and (cfg.get("liger_before_load", True)
                                                or cfg["model_type"] == "gemma3_text")


def _contiguous(*tensors):
    # liger_kernel.ops.utils.ensure_contiguous: every tensor argument made contiguous
    return [t.contiguous() for t in tensors]


class LigerRMSNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, X, W, in_place):
        X, W = _contiguous(X, W)
        shape = X.shape
        rows = X.numel() // shape[-1]
        Y = torch.empty((rows, shape[-1]), dtype=X.dtype)
        RSTD = torch.empty(rows, dtype=torch.float32)  # casting mode llama / gemma: fp32
        ctx.in_place = in_place
        # Liger saves X.view(-1, dim), the same storage; saved here as given, since PyTorch 1.13
        # cannot unpack a view made in forward from saved-tensor hooks (offloading, non-reentrant
        # checkpointing): "No grad accumulator for a saved leaf"
        ctx.save_for_backward(X, W, RSTD)
        return Y.view(*shape)

    @staticmethod
    def backward(ctx, dY):
        (dY,) = _contiguous(dY)
        X, W, RSTD = ctx.saved_tensors
        shape = dY.shape
        dY = dY.view(-1, shape[-1])
        sm_count = 1  # rms_norm_backward off CUDA
        _dW = torch.empty((sm_count, shape[-1]), dtype=torch.float32)
        dX = dY if ctx.in_place else torch.zeros_like(dY)
        dX = dX.view(*shape)
        dW = _dW.sum(dim=0).to(W.dtype)
        return dX, dW, None


class LigerRMSNorm(nn.Module):
    """LigerRMSNorm (in_place=True) for LlamaRMSNorm; LigerRMSNormForGemma2 /
    Gemma3 and LigerRMSNormForOlmo2 (weights initialised to zeros for
    Gemma's offset, in_place=False) for the others."""

    def __init__(self, hidden_size, eps=1e-6, in_place=True, zeros=False):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(hidden_size) if zeros else torch.ones(hidden_size))
        self.variance_epsilon = eps
        self.in_place = in_place

    def forward(self, hidden_states):
        return LigerRMSNormFunction.apply(hidden_states, self.weight, self.in_place)


class LigerSiLUMulFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        a, b = _contiguous(a, b)
        c = torch.empty_like(a)
        ctx.save_for_backward(a, b)
        return c

    @staticmethod
    def backward(ctx, dc):
        (dc,) = _contiguous(dc)
        a, b = ctx.saved_tensors
        return a, b  # swiglu_backward writes the gradients over a and b and returns them


TILE_ROWS = 64  # fused_moe.py's BLOCK_M_TOKEN


def _routing_metadata(top_k_index, E):
    """compute_routing_metadata's tensors, in its order; num_m_tiles from the
    harness's even (round-robin) routing, each expert's rows in 64-row
    tiles. Its locals (the per-tile counts, the tile offsets) go as it returns."""
    T, K = top_k_index.shape
    TK = T * K
    per_block = max(1, 1024 // (1 << (K - 1).bit_length()))
    n_tiles = -(-T // per_block)
    tile_expert_counts = torch.empty(E, n_tiles, dtype=torch.int32)
    expert_token_count = tile_expert_counts.sum(dim=1, dtype=torch.int32)
    expert_start_idx = torch.empty(E + 1, dtype=torch.int32)
    expert_tile_offset = torch.empty(E + 1, dtype=torch.int32)
    num_m_tiles = sum(-(-(TK // E + (e < TK % E)) // TILE_ROWS) for e in range(E))
    tile_row_start = torch.empty(num_m_tiles, dtype=torch.int32)
    tile_expert = torch.empty(num_m_tiles, dtype=torch.int32)
    s_scatter_idx = torch.empty(TK, dtype=torch.int32)
    s_reverse_scatter_idx = torch.empty(TK, dtype=torch.int32)
    x_gather_idx = torch.empty(TK, dtype=torch.int32)
    del tile_expert_counts, expert_tile_offset
    return (expert_token_count, expert_start_idx, x_gather_idx, s_scatter_idx, s_reverse_scatter_idx, tile_row_start,
            tile_expert)


class LigerFusedMoEFunction(torch.autograd.Function):
    """src/liger_kernel/ops/fused_moe.py: the routing tables, pre_act,
    post_act, Y and the weighted sum in forward (pre_act and the tables
    saved), and backward's buffers in its order."""

    @staticmethod
    def forward(ctx, x, gate_up_proj, down_proj, top_k_index, top_k_weights):
        T, K = top_k_index.shape
        E, H = gate_up_proj.shape[0], x.shape[1]
        inter = gate_up_proj.shape[1] // 2
        TK = T * K
        with torch.no_grad():
            (_, expert_start_idx, x_gather_idx, s_scatter_idx, s_reverse_scatter_idx, tile_row_start,
             tile_expert) = _routing_metadata(top_k_index, E)
        pre_act = torch.empty(TK, 2 * inter, dtype=x.dtype)
        post_act = torch.empty(TK, inter, dtype=x.dtype)
        Y = torch.empty(TK, H, dtype=x.dtype)
        out = torch.empty(T, H, dtype=Y.dtype)
        # (Liger saves top_k_weights.flatten(), a view of the same storage)
        ctx.save_for_backward(x, gate_up_proj, down_proj, pre_act, top_k_weights, expert_start_idx, x_gather_idx,
                              s_scatter_idx, s_reverse_scatter_idx, tile_row_start, tile_expert)
        ctx.dims = T, K, H, inter
        ctx.set_materialize_grads(False)
        return out

    @staticmethod
    def backward(ctx, dO):
        if dO is None:
            return None, None, None, None, None
        x, gate_up_proj, down_proj = ctx.saved_tensors[:3]
        T, K, H, inter = ctx.dims
        TK = T * K
        d_pre_act = torch.empty(TK, 2 * inter, dtype=dO.dtype)
        weighted_act = torch.empty(TK, inter, dtype=dO.dtype)
        dS = torch.zeros(TK, dtype=dO.dtype)
        ddown_proj = torch.zeros_like(down_proj)
        dx_expanded = torch.empty(TK, H, dtype=dO.dtype)
        dx = torch.zeros(T, H, dtype=dO.dtype)
        dgate_up_proj = torch.zeros_like(gate_up_proj)
        del d_pre_act, weighted_act, dx_expanded
        return dx, dgate_up_proj, ddown_proj, None, dS.view(T, K)


class LigerCrossEntropyFunction(torch.autograd.Function):
    """src/liger_kernel/ops/cross_entropy.py (reduction mean): loss_1d, the
    target mask and its count, the two bounds checks, the kernel's gradient
    written into the input, which it saves; backward hands that back."""

    @staticmethod
    def forward(ctx, _input, target, ignore_index):
        BT, V = _input.shape
        loss_1d = torch.zeros(BT, dtype=_input.dtype)
        target_mask = target != ignore_index
        n_non_ignore = target_mask.sum().item()
        assert (target * target_mask).max() < V
        assert (target * target_mask).min() >= 0
        del n_non_ignore
        loss = torch.sum(loss_1d)
        # (Liger saves _input.detach(), the same storage)
        ctx.save_for_backward(_input)
        return loss

    @staticmethod
    def backward(ctx, grad_output):
        (_input,) = ctx.saved_tensors
        if torch.equal(grad_output, torch.tensor(1.0)):
            pass  # otherwise element_mul_kernel scales _input in place
        return _input, None, None
