"""Shared test helpers: capture examples once per session and edit kernel text."""

from __future__ import annotations

import functools
import importlib
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from kernelopt_bot.capture.recorder import Capture, capture
from kernelopt_bot.targets import load_target

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
DEVICE = "cuda" if os.environ.get("KERNELOPT_TEST_DEVICE") == "cuda" else None


@functools.cache
def captured(example: str, dtype: str = "fp32") -> Capture:
    """Compile an example once per test session (on the default device)."""
    return capture(load_target(str(EXAMPLES / example), DEVICE, dtype))


def bump_constant(source: str, old: str, new: str) -> str:
    """Change one literal in a kernel, asserting it was there: the edit must really happen."""
    assert old in source, f"{old!r} not in kernel source"
    return source.replace(old, new, 1)


def first_float_constant(source: str) -> str:
    """A ``tl.full(..., <float>, tl.float32)`` literal of a kernel, to perturb in tests."""
    match = re.search(r"tl\.full\(\[[^\]]*\], (-?\d+\.\d+(?:e-?\d+)?), tl\.float32\)", source)
    assert match, "kernel has no float constant to perturb"
    return match.group(0)


def user_env() -> dict[str, str]:
    """The environment a user runs ``kernelopt`` with: this test process's, without what the
    test setup added for itself (conftest turns interpreter mode on in-process, which sets
    ``TRITON_INTERPRET=1``; a user on a CPU machine has no such variable)."""
    env = dict(os.environ)
    env.pop("TRITON_INTERPRET", None)
    return env


def run_cli(*args: str, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    """``kernelopt ARGS`` in a subprocess, run the way a user runs it (see :func:`user_env`)."""
    env = user_env()
    return subprocess.run([sys.executable, "-m", "kernelopt_bot.cli", *args], capture_output=True,
                          text=True, cwd=ROOT, env=env, timeout=timeout)


def other_tiling(kernel: Any, chosen: dict | None) -> Any:
    """The chosen launch config (``KernelRecording.config``) with its first block size halved (or
    doubled when small), 4 warps, 1 stage: another valid tiling of the same kernel."""
    from kernelopt_bot.pack.format import LaunchConfig

    blocks = {n: v for n, v in ((chosen or {}).get("kwargs") or {}).items() if n in kernel.constexprs} or \
        {n: 8 for n in kernel.constexprs}
    name = next(iter(blocks))
    blocks[name] = blocks[name] // 2 if blocks[name] > 8 else blocks[name] * 2
    return LaunchConfig(blocks, num_warps=4, num_stages=1)


def script_module(name: str) -> Any:
    """A module of ``scripts/`` imported as its script runs (that folder first on the path, so
    its imports of the other scripts resolve), for tests of its functions."""
    folder = str(ROOT / "scripts")
    sys.path.insert(0, folder)
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(folder)


def gate2_gpu_path_on_cpu(monkeypatch: Any) -> None:
    """Gate 2's GPU path (no interpreter trace; the repeat check) run on the CPU: no synchronizing,
    and each trial drawn where the recording is rather than on the device gate 2 is told of."""
    from kernelopt_bot.verify import correctness

    draw_trial = correctness.trial_arguments
    monkeypatch.setattr(correctness, "_sync", lambda _device: None)
    monkeypatch.setattr(correctness, "trial_arguments", lambda *args, **kwargs: draw_trial(*args[:6], **kwargs))
