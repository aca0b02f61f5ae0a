"""One device module: which device a run uses, how a process is made ready for it, its limits."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from kernelopt_bot.device import DeviceLimits, device_limits, resolve_device
from kernelopt_bot.errors import TargetError
from tests.helpers import ROOT, user_env

HAS_CUDA = torch.cuda.is_available()


def test_nothing_asked_picks_cuda_when_there_is_one_else_the_cpu() -> None:
    expected = "cuda" if HAS_CUDA else "cpu"
    assert resolve_device(None) == resolve_device("auto") == resolve_device("") == expected
    assert resolve_device("cpu") == "cpu"


def test_an_unknown_device_is_bad_input() -> None:
    with pytest.raises(TargetError, match="unknown device 'tpu'"):
        resolve_device("tpu")


@pytest.mark.skipif(HAS_CUDA, reason="checks the no-GPU error")
def test_cuda_asked_for_without_one_is_bad_input() -> None:
    with pytest.raises(TargetError, match="no CUDA device"):
        resolve_device("cuda")


def test_limits_are_the_gpus_on_cuda_and_the_defaults_on_the_cpu() -> None:
    assert device_limits("cpu") == DeviceLimits()
    assert device_limits("cuda") == DeviceLimits.from_current_device()
    if not HAS_CUDA:
        assert device_limits("cuda") == DeviceLimits()


def _fresh(script: str) -> subprocess.CompletedProcess[str]:
    """``script`` in a fresh interpreter, in the environment a user has (no TRITON_INTERPRET)."""
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT,
                          env=user_env(), timeout=300)


def test_preparing_a_fresh_process_for_the_cpu_turns_the_interpreter_on() -> None:
    """Importing the module imports neither torch nor triton (the CLI imports it first); CUDA
    needs nothing; the CPU gets interpreter mode and Inductor's Triton backend for CPU tensors,
    with libdevice calls that compute (the stock stubs return None when interpreted)."""
    done = _fresh(
        "import os, sys\n"
        "from kernelopt_bot.device import prepare_device\n"
        "assert 'torch' not in sys.modules and 'triton' not in sys.modules\n"
        "prepare_device('cuda')\n"
        "assert 'TRITON_INTERPRET' not in os.environ\n"
        "prepare_device('cpu'); prepare_device('cpu')\n"
        "import torch._inductor.config as c\n"
        "import triton.language.extra.libdevice as lib\n"
        "assert os.environ['TRITON_INTERPRET'] == '1' and c.cpu_backend == 'triton'\n"
        "assert lib.exp.__name__ == 'shim'\n"
        "print('ok')\n")
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_the_interpreter_cannot_be_turned_on_after_triton_was_imported() -> None:
    done = _fresh("import triton\nfrom kernelopt_bot.device import prepare_device\nprepare_device('cpu')\n")
    assert done.returncode != 0 and "must be enabled before triton is imported" in done.stderr
