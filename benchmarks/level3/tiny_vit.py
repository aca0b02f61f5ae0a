"""Small network, launch-bound: a tiny vision transformer (patch embedding, four pre-norm blocks with SDPA and a GELU MLP, mean-pooled head) whose ~1 ms call is mostly the host launching small kernels."""

import os

import torch

# Full size is still small on an H200: the kernels are short and the host's launches dominate (the case
# CUDA graphs are for). Tiny keeps the CPU interpreter (CI) fast. KERNELOPT_EXAMPLE_SIZE overrides.
FULL = (os.environ.get("KERNELOPT_EXAMPLE_SIZE") or ("full" if torch.cuda.is_available() else "tiny")) == "full"

BATCH, IMAGE, PATCH, HIDDEN, HEADS, DEPTH, CLASSES = (8, 64, 8, 192, 3, 4, 100) if FULL else (1, 8, 4, 8, 2, 2, 5)


class Block(torch.nn.Module):
    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.attn_norm = torch.nn.LayerNorm(hidden)
        self.qkv = torch.nn.Linear(hidden, 3 * hidden)
        self.proj = torch.nn.Linear(hidden, hidden)
        self.mlp_norm = torch.nn.LayerNorm(hidden)
        self.fc1 = torch.nn.Linear(hidden, 4 * hidden)
        self.fc2 = torch.nn.Linear(4 * hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, h = x.shape
        q, k, v = self.qkv(self.attn_norm(x)).view(b, t, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4)
        attn = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        x = x + self.proj(attn.transpose(1, 2).reshape(b, t, h))
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.mlp_norm(x))))


class Model(torch.nn.Module):
    def __init__(self, image: int, patch: int, hidden: int, heads: int, depth: int, classes: int) -> None:
        super().__init__()
        self.embed = torch.nn.Conv2d(3, hidden, kernel_size=patch, stride=patch)
        self.position = torch.nn.Parameter(0.02 * torch.randn(1, (image // patch) ** 2, hidden))
        self.blocks = torch.nn.ModuleList(Block(hidden, heads) for _ in range(depth))
        self.norm = torch.nn.LayerNorm(hidden)
        self.head = torch.nn.Linear(hidden, classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.embed(images).flatten(2).transpose(1, 2) + self.position
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x).mean(dim=1))


def get_inputs():
    return [torch.randn(BATCH, 3, IMAGE, IMAGE)]


def get_init_inputs():
    return [IMAGE, PATCH, HIDDEN, HEADS, DEPTH, CLASSES]
