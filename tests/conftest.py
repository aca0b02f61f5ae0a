"""Test setup: interpreter mode before anything imports triton, and the ``gpu`` marker.

Without CUDA every test runs through Inductor's Triton backend for CPU and ``TRITON_INTERPRET=1``
(FINDINGS.md section 4); tests marked ``gpu`` are skipped there, never faked.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
FIXTURES = Path(__file__).resolve().parent / "fixtures"

HAS_CUDA = torch.cuda.is_available()
os.environ.setdefault("KERNELOPT_EXAMPLE_SIZE", "full" if HAS_CUDA else "tiny")
if not HAS_CUDA:
    from kernelopt_bot.device import prepare_device

    prepare_device("cpu")

DEVICE = "cuda" if HAS_CUDA else "cpu"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def device() -> str:
    return DEVICE


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Roofline and store caches of a test run never touch the user's home."""
    monkeypatch.setenv("KERNELOPT_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "kernelopt-cache"))


sys.path.insert(0, str(ROOT))
