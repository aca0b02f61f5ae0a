"""Training target: one Linear layer with a bias. Its forward is a vendor matmul (addmm) alone, so
the only Triton kernel of the step is in the backward: the bias gradient's sum over rows."""

import torch


class Model(torch.nn.Module):
    def __init__(self, features: int) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(features, features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


def get_inputs():
    return [torch.randn(16, 32)]


def get_init_inputs():
    return [32]
