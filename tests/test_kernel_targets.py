"""Kernels written by others as targets, end to end on the CPU as a user runs them (issue 14):
liger-kernel's plain ``@triton.jit`` kernels behind a launcher, and Helion kernels. ``optimize``
runs the gates in the Triton interpreter; with ``--untimed-patch`` it writes the patch a GPU run
would deliver, which ``git apply`` takes and which leaves the file importable and, for a plain
kernel, changes the launch only for the shape it was verified on."""

from __future__ import annotations

import importlib.util
import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT, user_env

CORPUS = ROOT / "tests" / "kernel_targets"


def _liger_file(module: str) -> Path:
    spec = importlib.util.find_spec(f"liger_kernel.ops.{module}")
    assert spec is not None and spec.origin is not None, "liger-kernel is a test dependency"
    return Path(spec.origin)


def _repo(tmp_path: Path, files: dict[str, Path]) -> Path:
    """A git repository holding ``files`` (name -> source), committed."""
    repo = tmp_path / "repo"
    repo.mkdir()
    for name, source in files.items():
        shutil.copy(source, repo / name)
    for args in (["init", "-q"], ["add", "-A"], ["-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "x"]):
        assert subprocess.run(["git", *args], cwd=repo, capture_output=True).returncode == 0
    return repo


def _kernelopt(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kernelopt_bot.cli", *args], cwd=repo, env=user_env(),
                          capture_output=True, text=True, timeout=600)


def _apply(repo: Path, patch: Path) -> None:
    check = subprocess.run(["git", "apply", "--check", str(patch)], cwd=repo, capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    assert subprocess.run(["git", "apply", str(patch)], cwd=repo).returncode == 0


def _run_in(repo: Path, code: str) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh interpreter in ``repo``, with interpreter mode on as our CLI turns it on."""
    prelude = "from kernelopt_bot.device import prepare_device; prepare_device('cpu')\n"
    return subprocess.run([sys.executable, "-c", prelude + code], cwd=repo, env=user_env(), capture_output=True,
                          text=True, timeout=300)


def test_a_vendored_liger_kernel_gets_launch_options_guarded_by_its_shape(tmp_path: Path) -> None:
    repo = _repo(tmp_path, {"liger_swiglu.py": _liger_file("swiglu"),
                            "swiglu_target.py": CORPUS / "liger_swiglu_launcher.py"})
    run = _kernelopt(repo, "optimize", "swiglu_target.py", "--untimed-patch")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    out = repo / "kernelopt-out" / "swiglu_target"
    result = json.loads((out / "result.json").read_text())
    (kernel,) = result["kernels"]
    assert kernel["name"] == "_swiglu_forward_kernel" and kernel["kind"].endswith("plain @triton.jit)")
    assert kernel["status"] == "passed gates 1-3 (not timed: no GPU)" and kernel["candidates"] == 3
    assert Path(result["patch_path"]) == Path("kernelopt-out/swiglu_target/patch.diff") and result["speedup"] is None
    patch = (out / "patch.diff").read_text()
    assert patch.startswith("--- a/liger_swiglu.py\n+++ b/liger_swiglu.py\n")
    added = [line[1:].strip() for line in patch.splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert added[0].startswith("# kernelopt: ") and "not timed" in added[0]
    assert "== (4, 96, 128) else " in added[1]  # n_rows, n_cols, BLOCK_SIZE of get_inputs()
    _apply(repo, out / "patch.diff")
    # The patched file imports, and launches with the verified option only for that shape.
    probe = _run_in(repo, (
        "import torch, json\n"
        "from kernelopt_bot.launchers import capture_launches, load_launcher\n"
        "t = load_launcher('swiglu_target.py', 'cpu', 'fp32')\n"
        "(same,) = capture_launches(t)\n"
        "import dataclasses\n"
        "t2 = dataclasses.replace(t, input_factory=lambda seed: (torch.randn(3, 40), torch.randn(3, 40)))\n"
        "(other,) = capture_launches(t2)\n"
        "print(json.dumps([same.options, other.options]))\n"))
    assert probe.returncode == 0, probe.stderr[-3000:]
    same, other = json.loads(probe.stdout.strip().splitlines()[-1])
    changed = dict(part.split("=") for part in kernel["detail"].removeprefix("config ").split(", "))
    assert {k: same[k] for k in changed if k in same} == {k: int(v) for k, v in changed.items() if k in same}
    assert same != other and other.get("num_stages", 3) == 3 and other["num_warps"] in (1, 2, 4, 8, 16, 32)
    # The reproduce line runs as printed.
    argv = shlex.split(result["reproduce"])
    assert argv[:3] == ["kernelopt", "optimize", "swiglu_target.py"] and "--untimed-patch" in argv
    again = _kernelopt(repo, *argv[1:], "--out", str(tmp_path / "again"))
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]


def test_without_the_flag_an_untimed_run_writes_no_patch(tmp_path: Path) -> None:
    repo = _repo(tmp_path, {"liger_swiglu.py": _liger_file("swiglu"),
                            "swiglu_target.py": CORPUS / "liger_swiglu_launcher.py"})
    run = _kernelopt(repo, "optimize", "swiglu_target.py", "--budget", "candidates_per_kernel=1")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    out = repo / "kernelopt-out" / "swiglu_target"
    result = json.loads((out / "result.json").read_text())
    assert result["kernels"][0]["detail"] == "passed gates 1-3; performance not measured"
    assert result["patch_path"] is None and not (out / "patch.diff").exists()


def test_an_installed_liger_kernel_is_captured_and_gated(tmp_path: Path) -> None:
    """liger's RMS norm passes a Python float (eps) that the kernel turns ``.to(tl.float32)``:
    the interpreter shim types it as a compiled kernel does."""
    repo = _repo(tmp_path, {"rms_target.py": CORPUS / "liger_rms_norm_installed.py"})
    run = _kernelopt(repo, "optimize", "rms_target.py", "--budget", "candidates_per_kernel=2")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    result = json.loads((repo / "kernelopt-out" / "rms_target" / "result.json").read_text())
    (kernel,) = result["kernels"]
    assert kernel["name"] == "_rms_norm_forward_kernel" and kernel["candidates"] == 2
    assert kernel["detail"] == "passed gates 1-3; performance not measured"


def test_a_helion_kernel_gets_its_verified_config_pinned_in_the_decorator(tmp_path: Path) -> None:
    repo = _repo(tmp_path, {"rms_norm_helion.py": CORPUS / "helion_rms_norm.py"})
    run = _kernelopt(repo, "optimize", "rms_norm_helion.py", "--untimed-patch")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    out = repo / "kernelopt-out" / "rms_norm_helion"
    result = json.loads((out / "result.json").read_text())
    (kernel,) = result["kernels"]
    assert kernel["name"] == "rms_norm" and kernel["kind"] == "helion" and kernel["candidates"] == 3
    assert kernel["status"] == "passed gates 1-3 (not timed: no GPU)"
    log = (out / "run.log").read_text()
    assert "re-verifying the pinned config of rms_norm" in log and "correctness: passed" in log
    assert "config block_sizes=[32] (was [16])" in log
    _apply(repo, out / "patch.diff")
    text = (repo / "rms_norm_helion.py").read_text()
    assert "@helion.kernel(config=helion.Config(block_sizes=[32]))" in text
    probe = _run_in(repo, "import rms_norm_helion as m\nprint(dict(m.rms_norm.configs[0]))\n")
    assert probe.returncode == 0, probe.stderr[-3000:]
    assert probe.stdout.strip().splitlines()[-1] == "{'block_sizes': [32]}"


def test_an_unpinned_helion_kernel_starts_from_helions_default_config(tmp_path: Path) -> None:
    repo = _repo(tmp_path, {"add_scaled.py": CORPUS / "helion_add_unpinned.py"})
    run = _kernelopt(repo, "optimize", "add_scaled.py", "--untimed-patch", "--budget", "candidates_per_kernel=1")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    out = repo / "kernelopt-out" / "add_scaled"
    assert "re-verifying" not in (out / "run.log").read_text()
    _apply(repo, out / "patch.diff")
    text = (repo / "add_scaled.py").read_text()
    assert "@helion.kernel(config=helion.Config(block_sizes=[64, 32]))" in text  # the default's first block doubled
    probe = _run_in(repo, "import torch, add_scaled as m\nx, y = m.get_inputs()\n"
                          "print(bool(torch.allclose(m.add_scaled(x, y), x + 2 * y)))\n")
    assert probe.returncode == 0 and probe.stdout.strip().endswith("True"), probe.stderr[-3000:]


@pytest.mark.parametrize("source, message", [
    ("import helion, torch\nimport helion.language as hl\n"
     "@helion.kernel\ndef a(x):\n    return x\n@helion.kernel\ndef b(x):\n    return x\n"
     "def get_inputs():\n    return [torch.randn(4)]\n",
     "exactly one @helion.kernel function (found: a, b)"),
    ("import helion, torch\nimport helion.language as hl\n"
     "@helion.kernel(config=helion.Config(block_sizes=[8, 8, 8]))\ndef a(x):\n    out = torch.empty_like(x)\n"
     "    for t in hl.tile(x.size(0)):\n        out[t] = x[t]\n    return out\n"
     "def get_inputs():\n    return [torch.randn(16)]\n",
     "Helion cannot compile a for get_inputs()"),
    ("import helion, torch\n@helion.kernel\ndef a(x):\n    return x\n", "no get_inputs() function"),
])
def test_bad_helion_targets_are_bad_input(tmp_path: Path, source: str, message: str) -> None:
    (tmp_path / "bad_helion.py").write_text(source)
    run = _kernelopt(tmp_path, "optimize", "bad_helion.py")
    assert run.returncode == 2, run.stdout[-2000:] + run.stderr[-2000:]
    assert message in run.stderr, run.stderr[-2000:]


def test_bench_times_a_kernel_target_against_its_patched_copy(tmp_path: Path) -> None:
    """``kernelopt bench FILE --patch patch.diff``: the patch applied to a copy of the folder, both
    files run in their own processes; on the CPU nothing is timed, the outputs are compared."""
    repo = _repo(tmp_path, {"liger_swiglu.py": _liger_file("swiglu"),
                            "swiglu_target.py": CORPUS / "liger_swiglu_launcher.py"})
    assert _kernelopt(repo, "optimize", "swiglu_target.py", "--untimed-patch").returncode == 0
    run = _kernelopt(repo, "bench", "swiglu_target.py", "--patch", "kernelopt-out/swiglu_target/patch.diff", "--json")
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    doc = json.loads(run.stdout)
    assert doc["max_abs_diff"] == 0 and doc["reason"] == "not measured: no CUDA device (interpreter mode)"
    assert subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo, capture_output=True,
                          text=True).stdout == ""  # the user's files are left as they were
    bad = _kernelopt(repo, "bench", "swiglu_target.py", "--pack", "x.json")
    assert bad.returncode == 2 and "its result is a patch; give --patch" in bad.stderr
    (repo / "broken.diff").write_text("--- a/liger_swiglu.py\n+++ b/liger_swiglu.py\n@@ -1,1 +1,1 @@\n-nope\n+yes\n")
    broken = _kernelopt(repo, "bench", "swiglu_target.py", "--patch", "broken.diff")
    assert broken.returncode == 2 and "does not apply" in broken.stderr


def test_inspect_shows_a_helion_kernels_config() -> None:
    from tests.helpers import run_cli

    run = run_cli("inspect", str(CORPUS / "helion_rms_norm.py"), "--json")
    assert run.returncode == 0, run.stderr[-2000:]
    doc = json.loads(run.stdout)
    assert doc["kind"] == "helion" and doc["kernel"] == "rms_norm" and doc["pinned"] == {"block_sizes": [16], "num_warps": 4}
    assert doc["config"]["block_sizes"] == [16] and doc["neighbours"] >= 3


def test_a_patched_launch_whose_grid_is_a_variable_takes_the_verified_options(tmp_path: Path) -> None:
    """liger's layer norm launches ``kernel[grid](...)`` with ``grid = (n_rows,)``: after the patch the
    launch at the verified shape runs with the verified options (a guard comparing the grid's
    first entry with the tuple would never hold)."""
    repo = _repo(tmp_path, {"liger_layer_norm.py": _liger_file("layer_norm"),
                            "ln_target.py": CORPUS / "liger_layer_norm_launcher.py"})
    before = _run_in(repo, "import json\nfrom kernelopt_bot.launchers import capture_launches, load_launcher\n"
                           "(l,) = capture_launches(load_launcher('ln_target.py', 'cpu', 'fp32'))\n"
                           "print(json.dumps(l.options))\n")
    assert before.returncode == 0, before.stderr[-2000:]
    run = _kernelopt(repo, "optimize", "ln_target.py", "--untimed-patch", "--budget", "candidates_per_kernel=1")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    out = repo / "kernelopt-out" / "ln_target"
    assert "(tuple(grid), n_cols, BLOCK_SIZE) == ((6,), 64, 64)" in (out / "patch.diff").read_text()
    _apply(repo, out / "patch.diff")
    after = _run_in(repo, "import json\nfrom kernelopt_bot.launchers import capture_launches, load_launcher\n"
                          "(l,) = capture_launches(load_launcher('ln_target.py', 'cpu', 'fp32'))\n"
                          "print(json.dumps(l.options))\n")
    assert after.returncode == 0, after.stderr[-2000:]
    detail = json.loads((out / "result.json").read_text())["kernels"][0]["detail"]
    changed = dict(part.split("=") for part in detail.removeprefix("config ").split(", "))
    options = json.loads(after.stdout.strip().splitlines()[-1])
    assert options != json.loads(before.stdout.strip().splitlines()[-1])
    assert all(options.get(k, {"num_stages": 3}.get(k)) == int(v) for k, v in changed.items())
