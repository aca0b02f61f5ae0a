"""Small network: pre-norm self-attention (LayerNorm, QKV, SDPA with a per-sample key-padding mask, out-projection, residual)."""

import os

import torch

# Full size fills an H200; tiny keeps the CPU interpreter (CI) fast. KERNELOPT_EXAMPLE_SIZE overrides.
FULL = (os.environ.get("KERNELOPT_EXAMPLE_SIZE") or ("full" if torch.cuda.is_available() else "tiny")) == "full"

BATCH, SEQ, HIDDEN, HEADS = (8, 2048, 2048, 16) if FULL else (2, 4, 16, 2)


class Model(torch.nn.Module):
    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm = torch.nn.LayerNorm(hidden)
        self.qkv = torch.nn.Linear(hidden, 3 * hidden)
        self.out = torch.nn.Linear(hidden, hidden)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        q, k, v = self.qkv(self.norm(x)).view(b, s, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4)
        # Keys past each sample's length are padding; every sample keeps at least one key.
        keep = torch.arange(s, device=x.device)[None, :] < lengths[:, None]
        attn = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, None, :])
        return x + self.out(attn.transpose(1, 2).reshape(b, s, h))


def get_inputs():
    return [torch.randn(BATCH, SEQ, HIDDEN), torch.randint(SEQ // 2, SEQ + 1, (BATCH,))]


def get_init_inputs():
    return [HIDDEN, HEADS]
