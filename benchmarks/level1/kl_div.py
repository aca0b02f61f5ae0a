"""Loss: distillation KL divergence, teacher vs. student, from two logit tensors (two row log-softmaxes + batchmean)."""

import os

import torch

# Full size fills an H200; tiny keeps the CPU interpreter (CI) fast. KERNELOPT_EXAMPLE_SIZE overrides.
FULL = (os.environ.get("KERNELOPT_EXAMPLE_SIZE") or ("full" if torch.cuda.is_available() else "tiny")) == "full"

TOKENS, VOCAB = (4096, 32000) if FULL else (4, 40)


class Model(torch.nn.Module):
    def __init__(self, temperature: float) -> None:
        super().__init__()
        self.temperature = temperature

    def forward(self, student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
        log_p = torch.log_softmax(student / self.temperature, dim=-1)
        log_q = torch.log_softmax(teacher / self.temperature, dim=-1)
        return torch.nn.functional.kl_div(log_p, log_q, reduction="batchmean", log_target=True)


def get_inputs():
    return [torch.randn(TOKENS, VOCAB), torch.randn(TOKENS, VOCAB)]


def get_init_inputs():
    return [2.0]
