"""Small network: an image classifier, three conv-BN-ReLU stages with max pooling, global average pooling, linear head."""

import itertools
import os

import torch

# Full size fills an H200; tiny keeps the CPU interpreter (CI) fast. KERNELOPT_EXAMPLE_SIZE overrides.
FULL = (os.environ.get("KERNELOPT_EXAMPLE_SIZE") or ("full" if torch.cuda.is_available() else "tiny")) == "full"

BATCH, SIZE, WIDTHS, CLASSES = (256, 224, (3, 32, 64, 128), 1000) if FULL else (2, 8, (3, 4, 8, 8), 5)


class Model(torch.nn.Module):
    def __init__(self, widths: tuple[int, ...], classes: int) -> None:
        super().__init__()
        stages = []
        for i, (cin, cout) in enumerate(itertools.pairwise(widths)):
            stages += [
                torch.nn.Conv2d(cin, cout, 3, padding=1, bias=False),
                torch.nn.BatchNorm2d(cout),
                torch.nn.ReLU(),
            ]
            if i < len(widths) - 2:
                stages.append(torch.nn.MaxPool2d(2))
        self.features = torch.nn.Sequential(*stages)
        self.head = torch.nn.Linear(widths[-1], classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).mean(dim=(2, 3)))


def get_inputs():
    return [torch.randn(BATCH, 3, SIZE, SIZE)]


def get_init_inputs():
    return [WIDTHS, CLASSES]
