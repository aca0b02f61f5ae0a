"""The machine's GPUs: choosing them, sharing the CPU among them, telling a GPU's failure from a job's."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from kernelopt_bot import gpu_pool
from kernelopt_bot.cli import main as kernelopt_cli
from kernelopt_bot.errors import BadInputError
from kernelopt_bot.gpu_pool import (
    compile_threads,
    cpu_slices,
    gpu_environment,
    looks_like_gpu_failure,
    select_gpus,
)

HAS_CUDA = torch.cuda.is_available()


def test_select_gpus() -> None:
    assert select_gpus("all", 4) == [0, 1, 2, 3]
    assert select_gpus("2", 4) == [0, 1]
    assert select_gpus("0,1,3", 4) == [0, 1, 3] and select_gpus(" 3, 1 ", 4) == [3, 1]
    assert select_gpus("3,", 4) == [3]
    for spec, message in [("all", "no CUDA device"), ("1", "no CUDA device"), ("0,1", "no CUDA device")]:
        with pytest.raises(BadInputError, match=message):
            select_gpus(spec, 0)
    for spec, message in [("5", "only 4 CUDA device"), ("0", "for GPU 0 alone write --gpus 0,"), ("0,4", "no GPU 4"),
                          ("1,1", "GPU 1 given twice"), ("x", "expected all"), ("0,-1", "not a GPU index"),
                          ("0,,1", "not a GPU index")]:
        with pytest.raises(BadInputError, match=message):
            select_gpus(spec, 4)


def test_a_job_on_a_gpu_sees_that_gpu_alone_and_its_share_of_the_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,7")  # indices count what we see: 0 is 5, 1 is 7
    assert gpu_environment(1, 8) == {"CUDA_VISIBLE_DEVICES": "7", gpu_pool.COMPILE_THREADS_ENV: "8",
                                     gpu_pool.INDUCTOR_THREADS_ENV: "8"}
    with pytest.raises(ValueError, match="not visible"):
        gpu_environment(2, 1)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert gpu_environment(3, 1)["CUDA_VISIBLE_DEVICES"] == "3"
    assert compile_threads(16, 2) == 8 and compile_threads(4, 3) == 1 and compile_threads(1, 4) == 1
    one, two = cpu_slices(2, 2)
    assert one is not None and two is not None and len(one) == len(two) == 1 and not set(one) & set(two)
    assert cpu_slices(3, 2) == [None, None, None]  # fewer cores than GPUs: not pinned


def test_gpu_failures_are_told_from_job_failures() -> None:
    assert looks_like_gpu_failure(RuntimeError("CUDA error: an illegal memory access was encountered"))
    assert looks_like_gpu_failure("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
    assert not looks_like_gpu_failure(ValueError("shapes do not match")) and not looks_like_gpu_failure(None)


@pytest.mark.skipif(HAS_CUDA, reason="checks the message without CUDA")
@pytest.mark.parametrize("spec", ["all", "1"])
def test_cli_gpus_without_cuda_is_a_bad_input(tmp_path: Path, spec: str) -> None:
    result = CliRunner().invoke(kernelopt_cli, ["suite", str(tmp_path), "--out", str(tmp_path / "o"),
                                                "--gpus", spec])
    assert result.exit_code == 2 and "no CUDA device" in result.output
