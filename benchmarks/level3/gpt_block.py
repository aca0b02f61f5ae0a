"""Small network: a GPT-style decoder block (RMSNorm, rotary QKV, causal SDPA, RMSNorm, SwiGLU MLP, two residuals)."""

import os

import torch

# Full size fills an H200; tiny keeps the CPU interpreter (CI) fast. KERNELOPT_EXAMPLE_SIZE overrides.
FULL = (os.environ.get("KERNELOPT_EXAMPLE_SIZE") or ("full" if torch.cuda.is_available() else "tiny")) == "full"

BATCH, SEQ, HIDDEN, HEADS, INTERMEDIATE = (8, 2048, 2048, 16, 5632) if FULL else (1, 4, 16, 2, 24)


class Model(torch.nn.Module):
    def __init__(self, seq: int, hidden: int, heads: int, intermediate: int) -> None:
        super().__init__()
        self.heads = heads
        head_dim = hidden // heads
        self.attn_norm = torch.nn.RMSNorm(hidden, eps=1e-6)
        self.qkv = torch.nn.Linear(hidden, 3 * hidden, bias=False)
        self.out = torch.nn.Linear(hidden, hidden, bias=False)
        self.mlp_norm = torch.nn.RMSNorm(hidden, eps=1e-6)
        self.gate = torch.nn.Linear(hidden, intermediate, bias=False)
        self.up = torch.nn.Linear(hidden, intermediate, bias=False)
        self.down = torch.nn.Linear(intermediate, hidden, bias=False)
        inv_freq = 1.0 / (10000.0 ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        angles = torch.outer(torch.arange(seq, dtype=torch.float32), inv_freq)
        angles = torch.cat([angles, angles], dim=-1)
        self.register_buffer("cos", angles.cos())
        self.register_buffer("sin", angles.sin())

    def rotate(self, t: torch.Tensor) -> torch.Tensor:
        first, second = t.chunk(2, dim=-1)
        return t * self.cos + torch.cat([-second, first], dim=-1) * self.sin

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        q, k, v = self.qkv(self.attn_norm(x)).view(b, s, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4)
        attn = torch.nn.functional.scaled_dot_product_attention(self.rotate(q), self.rotate(k), v, is_causal=True)
        x = x + self.out(attn.transpose(1, 2).reshape(b, s, h))
        y = self.mlp_norm(x)
        return x + self.down(torch.nn.functional.silu(self.gate(y)) * self.up(y))


def get_inputs():
    return [torch.randn(BATCH, SEQ, HIDDEN)]


def get_init_inputs():
    return [SEQ, HIDDEN, HEADS, INTERMEDIATE]
