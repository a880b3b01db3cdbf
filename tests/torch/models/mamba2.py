"""Mamba-2 (Dao & Gu 2024) as transformers' Mamba2ForCausalLM computes it
without the CUDA kernels: Mamba2Mixer.torch_forward, the path taken on the
CPU (transformers/models/mamba2/modeling_mamba2.py, huggingface/transformers
commit 020a37d2264e60dc7beb9634c3e87ad870073e2c), written plainly in PyTorch
for training without a cache: in_proj, the depthwise nn.Conv1d with padding
then the slice, silu, the split, softplus dt with the clamp, the chunked
naive SSD with segment_sum, the gated RMSNorm (MambaRMSNormGated), out_proj.
Mamba2Block keeps the residual in fp32 (residual_in_fp32, the config's
default). Mamba2Model makes no position_ids or cache_position in training
(use_cache is False). vramplan's model is models/examples/arch/mamba2.lua
with reference = true, the same reference SSD as Lua blocks."""
import torch
import torch.nn as nn

from .common import Mean2x, add, chunks, in_turn, mul
from .linear import linear
from .llama_blocks import LlamaRMSNorm


def pad_tensor_by_size(input_tensor, pad_size):
    pad_shape = (0, 0, 0, 0, 0, pad_size, 0, 0) if len(input_tensor.shape) == 4 else (0, 0, 0, pad_size, 0, 0)
    return nn.functional.pad(input_tensor, pad_shape, mode="constant", value=0)


def reshape_into_chunks(input_tensor, pad_size, chunk_size):
    input_tensor = pad_tensor_by_size(input_tensor, pad_size)
    if len(input_tensor.shape) == 3:
        return input_tensor.reshape(input_tensor.shape[0], -1, chunk_size, input_tensor.shape[2])
    return input_tensor.reshape(input_tensor.shape[0], -1, chunk_size, input_tensor.shape[2], input_tensor.shape[3])


def segment_sum(input_tensor):
    chunk_size = input_tensor.size(-1)
    input_tensor = input_tensor[..., None].expand(*input_tensor.size(), chunk_size)
    mask = torch.tril(torch.ones(chunk_size, chunk_size, dtype=torch.bool), diagonal=-1)
    input_tensor = input_tensor.masked_fill(~mask, 0)
    tensor_segsum = torch.cumsum(input_tensor, dim=-2)
    mask = torch.tril(torch.ones(chunk_size, chunk_size, dtype=torch.bool), diagonal=0)
    tensor_segsum = tensor_segsum.masked_fill(~mask, -torch.inf)
    return tensor_segsum


class MambaRMSNormGated(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states, gate=None):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        if gate is not None:
            hidden_states = hidden_states * nn.functional.silu(gate.to(torch.float32))
        variance = Mean2x.apply(hidden_states.pow(2))
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return mul(self.weight, hidden_states.to(input_dtype))


class Mamba2Mixer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h = cfg["hidden_size"]
        self.num_heads = cfg["num_heads"]
        self.ssm_state_size = cfg["state_size"]
        self.conv_kernel_size = cfg["conv_kernel"]
        self.intermediate_size = int(cfg["expand"] * h)
        self.n_groups = cfg["n_groups"]
        self.head_dim = cfg["head_dim"]
        self.chunk_size = cfg["chunk_size"]
        # Mamba2Config's default time_step_limit
        self.time_step_limit = (0.0, float("inf"))
        self.conv_dim = self.intermediate_size + 2 * self.n_groups * self.ssm_state_size
        self.conv1d = nn.Conv1d(self.conv_dim, self.conv_dim, bias=True, kernel_size=self.conv_kernel_size,
                                groups=self.conv_dim, padding=self.conv_kernel_size - 1)
        self.in_proj = nn.Linear(h, self.intermediate_size + self.conv_dim + self.num_heads, bias=False)
        # registered before norm and D as in Mamba2Mixer.__init__
        self.dt_bias = nn.Parameter(torch.ones(self.num_heads))
        self.A_log = nn.Parameter(torch.log(torch.arange(1, self.num_heads + 1, dtype=torch.float32)))
        self.norm = MambaRMSNormGated(self.intermediate_size, eps=cfg.get("layer_norm_epsilon", 1e-5))
        self.D = nn.Parameter(torch.ones(self.num_heads))
        self.out_proj = nn.Linear(self.intermediate_size, h, bias=False)

    def forward(self, ac, input_states):
        batch_size, seq_len, _ = input_states.shape
        dtype = input_states.dtype
        projected_states = linear(ac, input_states, self.in_proj.weight)
        d_mlp = (projected_states.shape[-1] - 2 * self.intermediate_size
                 - 2 * self.n_groups * self.ssm_state_size - self.num_heads) // 2
        _, _, gate, hidden_states_B_C, dt = projected_states.split(
            [d_mlp, d_mlp, self.intermediate_size, self.conv_dim, self.num_heads], dim=-1)
        # conv1d is on CUDA autocast's lower-precision list
        hidden_states_B_C = nn.functional.silu(nn.functional.conv1d(
            ac.down(hidden_states_B_C.transpose(1, 2)), ac.down(self.conv1d.weight), ac.down(self.conv1d.bias),
            padding=self.conv_kernel_size - 1, groups=self.conv_dim)[..., :seq_len].transpose(1, 2))
        hidden_states, B, C = torch.split(
            hidden_states_B_C,
            [self.intermediate_size, self.n_groups * self.ssm_state_size, self.n_groups * self.ssm_state_size], dim=-1)
        A = -torch.exp(self.A_log.float())
        dt = nn.functional.softplus(ac.up(add(dt, self.dt_bias)))  # softplus is on autocast's fp32 list
        dt = torch.clamp(dt, self.time_step_limit[0], self.time_step_limit[1])
        hidden_states = hidden_states.reshape(batch_size, seq_len, -1, self.head_dim).float()
        B = B.reshape(batch_size, seq_len, -1, self.ssm_state_size).float()
        C = C.reshape(batch_size, seq_len, -1, self.ssm_state_size).float()
        B = B.repeat_interleave(self.num_heads // self.n_groups, dim=2, output_size=self.num_heads)
        C = C.repeat_interleave(self.num_heads // self.n_groups, dim=2, output_size=self.num_heads)
        pad_size = (self.chunk_size - seq_len % self.chunk_size) % self.chunk_size
        D_residual = mul(self.D[..., None], pad_tensor_by_size(hidden_states, pad_size))
        hidden_states = mul(hidden_states, dt[..., None])
        A = mul(A.to(hidden_states.dtype), dt)
        hidden_states, A, B, C = [reshape_into_chunks(t, pad_size, self.chunk_size) for t in (hidden_states, A, B, C)]
        A = A.permute(0, 3, 1, 2)
        A_cumsum = torch.cumsum(A, dim=-1)
        L = torch.exp(segment_sum(A))
        G_intermediate = C[:, :, :, None, :, :] * B[:, :, None, :, :, :]
        G = G_intermediate.sum(dim=-1)
        M_intermediate = G[..., None] * L.permute(0, 2, 3, 4, 1)[..., None]
        M = M_intermediate.sum(dim=-1)
        Y_diag = (M[..., None] * hidden_states[:, :, None]).sum(dim=3)
        decay_states = torch.exp(A_cumsum[:, :, :, -1:] - A_cumsum)
        B_decay = B * decay_states.permute(0, -2, -1, 1)[..., None]
        states = (B_decay[..., None, :] * hidden_states[..., None]).sum(dim=2)
        previous_states = torch.zeros_like(states[:, :1])
        states = torch.cat([previous_states, states], dim=1)
        decay_chunk = torch.exp(segment_sum(nn.functional.pad(A_cumsum[:, :, :, -1], (1, 0))))
        decay_chunk = decay_chunk.transpose(1, 3)
        new_states = (decay_chunk[..., None, None] * states[:, :, None, ...]).sum(dim=1)
        states, ssm_state = new_states[:, :-1], new_states[:, -1]
        state_decay_out = torch.exp(A_cumsum)
        C_times_states = (C[..., None, :] * states[:, :, None, ...])
        state_decay_out_permuted = state_decay_out.permute(0, 2, 3, 1)
        Y_off = (C_times_states.sum(-1) * state_decay_out_permuted[..., None])
        y = Y_diag + Y_off
        y = y.reshape(batch_size, -1, self.num_heads, self.head_dim)
        y = y + D_residual
        if pad_size > 0:
            y = y[:, :seq_len, :, :]
        y = y.reshape(batch_size, seq_len, -1)
        scan_output = self.norm(y, gate)
        return linear(ac, scan_output.to(dtype), self.out_proj.weight)


class Mamba2Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.norm = LlamaRMSNorm(cfg["hidden_size"], eps=cfg.get("layer_norm_epsilon", 1e-5))
        self.mixer = Mamba2Mixer(cfg)

    def forward(self, ac, hidden_states):
        residual = hidden_states
        hidden_states = self.norm(hidden_states.to(dtype=self.norm.weight.dtype))
        residual = residual.to(torch.float32)  # residual_in_fp32
        hidden_states = self.mixer(ac, hidden_states)
        hidden_states = add(residual, hidden_states)
        return hidden_states


class Mamba2(nn.Module):
    """Mamba2Model with Mamba2ForCausalLM's head (tie_word_embeddings)."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        h = cfg["hidden_size"]
        self.embeddings = nn.Embedding(cfg["vocab_size"], h)
        self.layers = nn.ModuleList([Mamba2Block(cfg) for _ in range(cfg["num_hidden_layers"])])
        self.norm_f = LlamaRMSNorm(h, eps=cfg.get("layer_norm_epsilon", 1e-5))
        self.tied = cfg.get("tie_word_embeddings", False)
        if not self.tied:
            self.lm_head = nn.Linear(h, cfg["vocab_size"], bias=False)

    embed_tokens = property(lambda self: self.embeddings)
    norm = property(lambda self: self.norm_f)

    def embed(self, input_ids):
        return self.embeddings(input_ids)

    def body(self, ac, input_ids, checkpoint, inputs_embeds=None, past_key_values=None):
        if inputs_embeds is None:
            inputs_embeds = self.embed(input_ids)
        hidden_states = inputs_embeds
        for chunk in chunks(self.layers, checkpoint):
            if checkpoint:
                hidden_states = checkpoint(lambda x, c=chunk: in_turn(c, x, lambda layer, y: layer(ac, y)),
                                           hidden_states)
            else:
                hidden_states = in_turn(chunk, hidden_states, lambda layer, y: layer(ac, y))
        hidden_states = self.norm_f(hidden_states)
        # Mamba2ForCausalLM: self.lm_head(hidden_states.to(self.lm_head.weight.dtype)).float()
        # (the residual stream is fp32: residual_in_fp32); the .float() is CausalLM's
        return hidden_states.to(self.head_weight().dtype)

    def head_weight(self):
        return self.embeddings.weight if self.tied else self.lm_head.weight
