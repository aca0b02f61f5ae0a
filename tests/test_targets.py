"""Loading targets, and the one-line errors (exit code 2) for every kind of bad target."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
import torch

from kernelopt_bot.errors import TargetError
from kernelopt_bot.targets import _call_user, _drawn, load_target
from tests.helpers import EXAMPLES, run_cli

GOOD = """
import torch
class Model(torch.nn.Module):
    def forward(self, x):
        return x * 2
def get_inputs():
    return [torch.randn(4, 8)]
def get_init_inputs():
    return []
"""


def _write(tmp_path: Path, body: str, name: str = "target.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


def test_benchmark_file_target(tmp_path: Path) -> None:
    target = load_target(str(_write(tmp_path, GOOD)), "cpu", "bf16")
    (x,) = target.make_inputs(3)
    assert x.dtype == torch.bfloat16 and x.device.type == "cpu"
    assert torch.equal(target.make_inputs(3)[0], x)
    assert not torch.equal(target.make_inputs(4)[0], x)
    assert not target.model.training


def test_factory_target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "models.py").write_text(textwrap.dedent("""
        import torch
        def build(device, dtype):
            return torch.nn.Linear(8, 8).to(device, dtype), (torch.randn(2, 8, device=device, dtype=dtype),)
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    target = load_target("mypkg.models:build", "cpu", "fp32")
    assert target.name == "build"
    a, b = target.make_inputs(1)[0], target.make_inputs(2)[0]
    assert a.shape == (2, 8) and not torch.equal(a, b)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("def broken(:\n", "does not import: syntax error"),
        ("import not_a_module_anywhere\n", "does not import: ModuleNotFoundError"),
        ("import torch\nclass Model(torch.nn.Module):\n    pass\n", "missing get_inputs, get_init_inputs"),
        (GOOD.replace("return x * 2", "return x @ torch.ones(3, 3)"), "model fails eagerly"),
        (GOOD.replace("torch.randn(4, 8)", "torch.randn(4, 8, device='meta')"), "input 0 is on meta"),
        (GOOD.replace("return []", "raise ValueError('no')"), "get_init_inputs() failed: ValueError: no"),
    ],
    ids=["syntax", "import", "missing", "eager", "device", "init"],
)
def test_bad_targets(tmp_path: Path, body: str, message: str) -> None:
    path = _write(tmp_path, body)
    with pytest.raises(TargetError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_target(str(path), "cpu")
    result = run_cli("inspect", str(path), "--device", "cpu")
    assert result.returncode == 2
    # Off a terminal, progress is timestamped lines ("12:00:01 loading ..."); the error is one line.
    lines = [line for line in result.stderr.strip().splitlines() if not re.match(r"\d\d:\d\d:\d\d ", line)]
    assert len(lines) == 1 and lines[0].startswith("error: ") and message.split(":")[0] in lines[0]
    assert result.stderr.strip().endswith(lines[0])


def test_bad_specs() -> None:
    with pytest.raises(TargetError, match="no such file"):
        load_target("does/not/exist.py", "cpu")
    with pytest.raises(TargetError, match="neither"):
        load_target("nonsense", "cpu")
    with pytest.raises(TargetError, match="does not import"):
        load_target("no_such_pkg_xyz.mod:factory", "cpu")
    with pytest.raises(TargetError, match="unknown dtype"):
        load_target(str(EXAMPLES / "gelu.py"), "cpu", "fp64")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU error")
def test_cuda_without_a_gpu_is_bad_input() -> None:
    with pytest.raises(TargetError, match="no CUDA device"):
        load_target(str(EXAMPLES / "gelu.py"), "cuda")


def test_a_file_that_cannot_draw_on_the_gpu_draws_as_written_reseeded() -> None:
    """_drawn tries CUDA as the default device first; what fails there (here: no CUDA in this
    build, elsewhere a CPU Generator or numpy) runs again as written, with the same seed."""
    calls: list[int] = []

    def make() -> torch.Tensor:
        calls.append(1)
        return torch.randn(4)

    if torch.cuda.is_available():
        pytest.skip("CUDA present: the first attempt succeeds")
    drawn = _drawn(make, "cuda", 5)
    torch.manual_seed(5)
    assert len(calls) == 2 and torch.equal(drawn, torch.randn(4)) and drawn.device.type == "cpu"
    assert torch.equal(_drawn(make, "cpu", 5), drawn) and len(calls) == 3  # CPU targets: once



def test_a_draw_that_runs_out_of_gpu_memory_is_raised_not_drawn_again_on_the_cpu() -> None:
    """The CPU draws other values than the GPU with the same seed: an arm that ran short drawing
    its inputs beside the others would compare other inputs' outputs (a verdict of ours) after
    seconds of drawing on the CPU. Its out-of-memory error is raised, an infrastructure failure."""
    calls: list[int] = []

    def get_inputs() -> torch.Tensor:
        calls.append(1)
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 7.00 GiB")

    with pytest.raises(torch.OutOfMemoryError):
        _drawn(get_inputs, "cuda", 5)
    # as a target file's get_inputs() is called: its error wrapped, the out-of-memory error its cause
    with pytest.raises(TargetError, match="out of memory"):
        _drawn(lambda: _call_user(get_inputs, "m.py: get_inputs()"), "cuda", 5)
    assert len(calls) == 2

COUNTER = """
import torch
class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("calls", torch.zeros(1))
    def forward(self, x):
        self.calls += 1
        return torch.sigmoid(x) * self.calls
def get_inputs():
    return [torch.randn(16, 32)]
def get_init_inputs():
    return []
"""


def test_a_model_that_counts_its_calls_is_compared_from_its_loaded_state(tmp_path: Path) -> None:
    """Every call whose outputs are compared starts from the buffers as loaded: a model's own
    counter (or running statistics, or a cache) otherwise makes two processes that ran it a
    different number of times disagree, and the gate blamed the candidate (12-06)."""
    target = load_target(str(_write(tmp_path, COUNTER)), "cpu", "fp32")
    inputs = target.make_inputs(3)
    target.reset_state()  # loading ran it once, to check it runs
    first = target.eager(*inputs)
    target.eager(*inputs)
    assert not torch.equal(target.eager(*inputs), first)  # the state moved on
    target.reset_state()
    assert torch.equal(target.eager(*inputs), first)
    # a compared call gives the buffers it leaves after its outputs: a wrong update shows there
    results = target.compared_outputs(target.model, inputs)
    assert len(results) == 2 and float(results[1]) == 1.0 and torch.equal(results[0], first)
    assert target.output_label(0) == "output 0" and target.output_label(1) == "buffer calls"
    copy64 = type(target.model)().to(torch.float64)
    copy64.calls.fill_(41.0)
    target.reset_state(copy64)  # a float64 copy is put back the same way
    assert copy64.calls.dtype == torch.float64 and float(copy64.calls) == 0.0


def test_optimize_on_a_model_that_counts_its_calls_verifies_its_kernels(tmp_path: Path) -> None:
    """End to end as a user runs it: the counter's kernels pass gates 1-3, where each candidate was
    "rejected by model" for the calls the other arms had made."""
    out = tmp_path / "out"
    result = run_cli("optimize", str(_write(tmp_path, COUNTER, "counter.py")), "--out", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    import json

    kernels = json.loads((out / "result.json").read_text())["kernels"]
    assert kernels and all("rejected" not in (k["detail"] or "") for k in kernels), kernels
    assert all(k["status"].startswith("passed gates 1-3") or k["status"] == "accepted" for k in kernels), kernels


def test_inputs_given_as_a_dict_are_bad_input_that_says_so(tmp_path: Path) -> None:
    """A dict from get_inputs() was passed as one argument, and the error named the model's
    TypeError on it; it now says what get_inputs() must return (exit 2)."""
    path = _write(tmp_path, GOOD.replace("return [torch.randn(4, 8)]", "return {'x': torch.randn(4, 8)}"))
    with pytest.raises(TargetError, match=r"get_inputs\(\) returned a dict \(x\): return a list"):
        load_target(str(path), "cpu", "fp32")
