"""Training target with state and randomness: BatchNorm (its running statistics change every step),
dropout, and an integer output (the argmax of each row) beside the floating one."""

import torch


class Model(torch.nn.Module):
    def __init__(self, features: int) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(features, features)
        self.bn = torch.nn.BatchNorm1d(features)
        self.drop = torch.nn.Dropout(0.25)

    def forward(self, x: torch.Tensor):
        y = self.drop(torch.relu(self.bn(self.fc(x))))
        return y, y.argmax(dim=-1)


def get_inputs():
    return [torch.randn(16, 24)]


def get_init_inputs():
    return [24]
