"""A verified config goes back into the user's own kernel source as a patch `git apply` takes:
first in the @triton.autotune list, written as the file writes the others (issue 14)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from kernelopt_bot.launchers import capture_launches, load_launcher
from kernelopt_bot.source_patch import PatchError, SourceEdit, unified_diff, with_config_first
from tests.helpers import ROOT

ROW_SOFTMAX = ROOT / "tests" / "launchers" / "row_softmax.py"


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=False)


def test_the_patch_applies_and_the_kernel_then_tries_the_new_config_first(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "kernels").mkdir(parents=True)
    target = repo / "kernels" / "row_softmax.py"
    target.write_text(ROW_SOFTMAX.read_text())
    assert _git(repo, "init", "-q").returncode == 0
    config = {"ROWS": 8, "num_warps": 2, "num_stages": 1}
    text = target.read_text()
    new = SourceEdit("kernels/row_softmax.py", "autotune", "row_softmax_kernel", config).apply(text)
    patch = unified_diff(target, text, new, repo)
    assert patch.startswith("--- a/kernels/row_softmax.py\n+++ b/kernels/row_softmax.py\n")
    added = [line for line in patch.splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert added == ["+        triton.Config({'ROWS': 8}, num_warps=2, num_stages=1),"]  # the list's own indent
    (tmp_path / "fix.patch").write_text(patch)
    check = _git(repo, "apply", "--check", str(tmp_path / "fix.patch"))
    assert check.returncode == 0, check.stderr
    assert _git(repo, "apply", str(tmp_path / "fix.patch")).returncode == 0
    (launch,) = capture_launches(load_launcher(str(target), None, "fp32"))
    assert launch.autotune_configs is not None and len(launch.autotune_configs) == 4
    assert {k: launch.autotune_configs[0][k] for k in config} == config
    assert launch.chosen == launch.autotune_configs[0]  # what the interpreter runs: the first


def test_an_autotune_edits_note_is_a_comment_above_its_decorator_and_survives_the_publish_check() -> None:
    """What was verified where, or that it was not timed: an autotuned kernel's patch says it as
    a launch's and a Helion kernel's do (the comment goes above ``@triton.autotune``, which may
    follow another decorator)."""
    source = ("import functools\nimport triton\n\n\n@functools.wraps(print)\n"
              "@triton.autotune(configs=[triton.Config({'B': 16})], key=[])\n@triton.jit\ndef k(x, B: 'tl.constexpr'):\n"
              "    pass\n")
    note = "B=64, num_warps=4 added to the list, verified on the CPU interpreter (gates 1-3 only, not timed)"
    edit = SourceEdit.from_json(SourceEdit("k.py", "autotune", "k", {"B": 64, "num_warps": 4}, note).to_json())
    patched = edit.apply(source).splitlines()
    at = patched.index("@triton.autotune(configs=[triton.Config({'B': 64}, num_warps=4), triton.Config({'B': 16})], key=[])")
    assert patched[at - 1] == f"# kernelopt: {note}" and patched[at - 2] == "@functools.wraps(print)"
    assert "kernelopt" not in SourceEdit("k.py", "autotune", "k", {"B": 64}).apply(source)  # no note, no comment


def test_an_inline_list_and_another_spelling_are_kept() -> None:
    source = ("from triton import Config, autotune, jit\n\n@autotune(configs=[Config({'B': 16}), Config({'B': 32})], key=[])\n"
              "@jit\ndef k(x, B: 'tl.constexpr'):\n    pass\n")
    patched = with_config_first(source, "k", {"B": 64, "num_warps": 4})
    assert "@autotune(configs=[Config({'B': 64}, num_warps=4), Config({'B': 16}), Config({'B': 32})], key=[])" in patched
    assert patched.replace("Config({'B': 64}, num_warps=4), ", "") == source


@pytest.mark.parametrize(("source", "message"), [
    ("def other():\n    pass\n", "no top-level function 'k'"),
    ("import triton\n@triton.jit\ndef k(x):\n    pass\n", "no @triton.autotune"),
    ("import triton\nC = []\n@triton.autotune(configs=C, key=[])\n@triton.jit\ndef k(x):\n    pass\n", "no @triton.autotune"),
    ("def k(:\n", "does not parse"),
])
def test_a_source_that_cannot_take_it_says_why(source: str, message: str) -> None:
    with pytest.raises(PatchError, match=message):
        with_config_first(source, "k", {"B": 1})


# -- a plain kernel's launch options, guarded by the shape they were verified on --------------

LAUNCH_SITE = '''from kernels import my_kernel


def launch(x):
    n_rows, n_cols = x.shape
    BLOCK = 128
    my_kernel[(n_rows,)](x, out, x.stride(0), n_cols, BLOCK=BLOCK, num_warps=num_warps)
    return out
'''


def test_an_existing_launch_option_becomes_conditional_on_the_shape() -> None:
    from kernelopt_bot.source_patch import with_launch_options

    new = with_launch_options(LAUNCH_SITE, 7, "my_kernel", {"num_warps": 8}, arg_names=["x", "out", "stride", "n", "BLOCK"],
                              values={"stride": 64, "n": 64, "BLOCK": 128}, grid=(32,), note="num_warps=8 for this shape")
    assert new.splitlines()[6] == "    # kernelopt: num_warps=8 for this shape"
    assert new.splitlines()[7] == ("    my_kernel[(n_rows,)](x, out, x.stride(0), n_cols, BLOCK=BLOCK, "
                                   "num_warps=(8 if (n_rows, n_cols, BLOCK) == (32, 64, 128) else num_warps))")


def test_a_missing_launch_option_is_added_with_tritons_default_otherwise() -> None:
    from kernelopt_bot.source_patch import with_launch_options

    source = LAUNCH_SITE.replace(", num_warps=num_warps", "")
    new = with_launch_options(source, 7, "my_kernel", {"num_stages": 2}, arg_names=["x", "out", "stride", "n", "BLOCK"],
                              values={"n": 64, "BLOCK": 128}, grid=(32,), note="n")
    assert "BLOCK=BLOCK, num_stages=(2 if (n_rows, n_cols, BLOCK) == (32, 64, 128) else 3))" in new


def test_a_launch_that_passes_its_shape_as_shape_entries_is_guarded_by_them() -> None:
    """``kernel[(x.shape[0],)](x, x.shape[-1])``, as launchers often write it: the guard reads the
    same entries again (a name's attribute or constant index, nothing that calls or computes)."""
    from kernelopt_bot.source_patch import with_launch_options

    source = "from kernels import k\n\n\ndef launch(x):\n    k[(x.shape[0],)](x, x.shape[-1])\n"
    new = with_launch_options(source, 5, "k", {"num_warps": 8}, arg_names=["x", "n"], values={"n": 5}, grid=(3,),
                              note="n")
    assert "k[(x.shape[0],)](x, x.shape[-1], num_warps=(8 if (x.shape[0], x.shape[-1]) == (3, 5) else 4))" in new


def test_a_launch_with_no_plain_name_for_its_shape_is_not_patched() -> None:
    from kernelopt_bot.source_patch import with_launch_options

    source = "from kernels import k, k2\n\n\ndef launch(x):\n    k[(x.size(0),)](x, x.shape[1] * 2)\n"
    with pytest.raises(PatchError, match="no shape as a plain name"):
        with_launch_options(source, 5, "k", {"num_warps": 8}, arg_names=["x", "n"], values={"n": 5}, grid=(3,),
                            note="n")
    with pytest.raises(PatchError, match="no launch k2"):
        with_launch_options(source, 5, "k2", {"num_warps": 8}, arg_names=["x", "n"], values={}, grid=(3,), note="n")


# -- a Helion kernel's pinned config ---------------------------------------------------------

@pytest.mark.parametrize("decorator, expected", [
    ("@helion.kernel", "@helion.kernel(config=helion.Config(block_sizes=[32], num_warps=8))"),
    ("@helion.kernel()", "@helion.kernel(config=helion.Config(block_sizes=[32], num_warps=8))"),
    ("@helion.kernel(static_shapes=True)",
     "@helion.kernel(static_shapes=True, config=helion.Config(block_sizes=[32], num_warps=8))"),
    ("@helion.kernel(config=helion.Config(block_sizes=[16]), static_shapes=True)",
     "@helion.kernel(config=helion.Config(block_sizes=[32], num_warps=8), static_shapes=True)"),
    ("@helion.kernel(configs=[helion.Config(block_sizes=[16])])",
     "@helion.kernel(configs=[helion.Config(block_sizes=[32], num_warps=8), helion.Config(block_sizes=[16])])"),
])
def test_the_config_is_pinned_in_the_decorator_as_it_is_written(decorator: str, expected: str) -> None:
    from kernelopt_bot.source_patch import with_helion_config

    source = f"import helion\n\n\n{decorator}\ndef k(x):\n    return x\n"
    new = with_helion_config(source, "k", {"block_sizes": [32], "num_warps": 8}, note="verified")
    assert new.splitlines()[3:5] == ["# kernelopt: verified", expected]


def test_a_file_importing_config_from_helion_gets_config_spelled_so() -> None:
    from kernelopt_bot.source_patch import with_helion_config

    source = "from helion import Config, kernel\n\n\n@kernel\ndef k(x):\n    return x\n"
    new = with_helion_config(source, "k", {"block_sizes": [8]}, note="v")
    assert "@kernel(config=Config(block_sizes=[8]))" in new


def test_a_grid_named_by_a_variable_is_compared_as_the_tuple_it_holds() -> None:
    """``grid = (n_rows,)``, ``kernel[grid](...)`` (liger-kernel's layer norm): the guard compares the
    tuple, not its first entry (a guard that could never hold would leave the launch unchanged)."""
    from kernelopt_bot.source_patch import with_launch_options

    source = ("from kernels import k\n\n\ndef launch(x, n_rows, n_cols):\n    grid = (n_rows,)\n"
              "    k[grid](x, n_cols, BLOCK=64, num_warps=4)\n")
    new = with_launch_options(source, 6, "k", {"num_warps": 1}, arg_names=["x", "n"], values={"n": 256, "BLOCK": 64},
                              grid=(512,), note="n")
    assert "num_warps=(1 if (tuple(grid), n_cols) == ((512,), 256) else 4)" in new  # BLOCK=64 is no name: not guarded
    condition = new.split("num_warps=(1 if ")[1].split(" else")[0]
    assert eval(condition, {"grid": [512], "n_cols": 256}) is True  # a list grid too
    assert eval(condition, {"grid": (511,), "n_cols": 256}) is False
    # A grid that was a function (its value no tuple the name holds) is left out of the guard.
    new = with_launch_options(source, 6, "k", {"num_warps": 1}, arg_names=["x", "n"], values={"n": 256}, grid=(),
                              note="n")
    assert "num_warps=(1 if n_cols == 256 else 4)" in new


# -- what the review of the edits found -------------------------------------------------------

def test_a_note_cannot_turn_a_comment_into_an_encoding_line() -> None:
    """A run of PR code writes the note: a comment on line 1-2 reading ``coding: ...`` would make
    Python decode the file another way (and run what the escapes spell)."""
    source = "# kernels\nk[(n,)](x, n)\nfrom kernels import k\n"  # line 1 a comment: line 2 may declare the encoding
    edit = SourceEdit("k.py", "launch", "k", {"num_warps": 8}, note="coding: raw_unicode_escape", line=2,
                      arg_names=["x", "n"], values={"n": 4}, grid=[4])
    with pytest.raises(PatchError, match="decodes the file"):
        edit.apply(source)
    with pytest.raises(PatchError, match="printable"):
        SourceEdit.from_json({**edit.to_json(), "note": "ok \\u000a print('x')"})


def test_a_call_of_something_that_is_no_triton_kernel_is_not_changed() -> None:
    source = "handlers = {}\n\n\ndef launch(name, n):\n    handlers[name](n)\n"
    edit = SourceEdit("k.py", "launch", "handlers", {"num_warps": 8}, note="n", line=5, arg_names=["n"],
                      values={"n": 5}, grid=[])
    with pytest.raises(PatchError, match=r"neither a @triton\.jit function"):
        edit.apply(source)


def test_crlf_files_keep_their_line_ends_and_comments_after_the_last_argument_stay() -> None:
    from kernelopt_bot.source_patch import with_launch_options

    source = ("import triton\r\n\r\n\r\n@triton.jit\r\ndef k(x, n):\r\n    pass\r\n\r\n\r\n"
              "def launch(x, n):\r\n    k[(n,)](\r\n        x,\r\n        n,  # rows\r\n    )\r\n")
    new = with_launch_options(source, 10, "k", {"num_warps": 2}, arg_names=["x", "n"], values={"n": 8}, grid=(8,),
                              note="two warps")
    assert "\n" not in new.replace("\r\n", "")  # no bare newline slipped in
    assert "        n,  # rows\r\n        num_warps=(2 if n == 8 else 4),\r\n    )" in new
    assert "    # kernelopt: two warps\r\n    k[(n,)](" in new


def test_a_form_feed_in_a_docstring_does_not_shift_the_autotune_edit() -> None:
    source = ('"""Kernels.\x0cPage two."""\nimport triton\n\n\n'
              '@triton.autotune(configs=[\n    triton.Config({"B": 64}, num_warps=4),\n], key=["n"])\n'
              '@triton.jit\ndef k(x, n, B: "tl.constexpr"):\n    pass\n')
    new = with_config_first(source, "k", {"B": 128, "num_warps": 8})
    assert "    triton.Config({'B': 128}, num_warps=8),\n    triton.Config({\"B\": 64}, num_warps=4)," in new


@pytest.mark.parametrize(("imports", "decorator", "spelled"), [
    ("from helion import kernel\nimport helion", "@kernel", "helion.Config"),
    ("from helion import Config as C, kernel as hk", "@hk", "C"),
])
def test_helion_config_is_named_as_the_file_imports_it(imports: str, decorator: str, spelled: str) -> None:
    from kernelopt_bot.source_patch import with_helion_config

    new = with_helion_config(f"{imports}\n\n\n{decorator}\ndef k(x):\n    return x\n", "k", {"block_sizes": [8]},
                             note="v")
    assert f"{decorator}(config={spelled}(block_sizes=[8]))" in new


def test_a_helion_file_that_cannot_name_config_is_not_changed() -> None:
    from kernelopt_bot.source_patch import with_helion_config

    with pytest.raises(PatchError, match="imports neither helion nor Config"):
        with_helion_config("from helion import kernel\n\n\n@kernel\ndef k(x):\n    return x\n", "k",
                           {"block_sizes": [8]}, note="v")


def test_lone_carriage_returns_and_other_surprises_are_patch_errors() -> None:
    edit = SourceEdit("k.py", "launch", "k", {"num_warps": 8}, note="n", line=2, arg_names=["n"], values={"n": 1},
                      grid=[1])
    with pytest.raises(PatchError, match="lone carriage returns"):
        edit.apply("from kernels import k\rk[(n,)](n)\r")
    with pytest.raises(PatchError):
        edit.apply("from kernels import k\nk[(n,)](n, **kw)\n")  # **kwargs may hold the option: refused


TWO_LAUNCHES = '''import triton
import triton.language as tl


@triton.jit
def scale(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + i, tl.load(x_ptr + i, mask=i < n) * 2, mask=i < n)


@triton.jit
def shift(y_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + i, tl.load(y_ptr + i, mask=i < n) + 1, mask=i < n)


def launch(x, y):
    n = x.numel()
    scale[(triton.cdiv(n, 256),)](x, y, n, BLOCK=256, num_warps=4)
    shift[(triton.cdiv(n, 256),)](y, n, BLOCK=256)
    return y
'''


def _launch_edits() -> list[SourceEdit]:
    lines = TWO_LAUNCHES.splitlines()
    at = {name: 1 + next(i for i, ln in enumerate(lines) if ln.strip().startswith(f"{name}[")) for name in ("scale", "shift")}
    params = {"scale": ["x_ptr", "y_ptr", "n"], "shift": ["y_ptr", "n"]}  # the kernels' parameters, in call order
    return [SourceEdit("k.py", "launch", name, {"num_stages": 2}, f"num_stages=2 for {name}", at[name], params[name],
                       {"n": 4096}) for name in ("scale", "shift")]  # top-down, as a run lists them


def test_two_launch_edits_in_one_file_make_one_patch_that_git_applies(tmp_path: Path) -> None:
    """Each launch edit finds its launch by the line the run saw: made top-down, the first one's
    comment line moved the second launch, and the patch held two diffs of one file that ``git
    apply`` refused. One diff per file, its edits from the bottom up."""
    from kernelopt_bot.launcher_run import write_edits
    from kernelopt_bot.result import RunResult

    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "k.py").write_text(TWO_LAUNCHES)
    assert _git(repo, "init", "-q").returncode == 0
    result = RunResult("k.py", "k", "cpu", "fp32")
    out = tmp_path / "out"
    out.mkdir()
    patch = write_edits([(repo / "k.py", e) for e in _launch_edits()], repo, out, result, log=print)
    assert patch is not None and patch.read_text().count("--- a/k.py") == 1
    assert len(result.source_edits) == 2 and result.pack_entries == 2  # two kernels written, in one file
    assert _git(repo, "apply", str(patch)).returncode == 0
    patched = (repo / "k.py").read_text()
    for name in ("scale", "shift"):
        assert f"# kernelopt: num_stages=2 for {name}" in patched
        assert re.search(rf"{name}\[.*num_stages=\(2 if n == 4096 else 3\)\)", patched), patched


def test_the_publish_stage_makes_one_files_launch_edits_from_the_bottom_up() -> None:
    from kernelopt_bot.config import parse_config
    from kernelopt_bot.github.proposal import source_changes
    from kernelopt_bot.github.runner import JobOutcome, TargetJob
    from kernelopt_bot.result import KernelOutcome, RunResult

    cfg = parse_config("targets:\n  - name: k\n    kind: triton\n    entry: kernels/k.py\n", root=None)
    result = RunResult("kernels/k.py", "k", "cuda", "fp32", source_edits=[e.to_json() for e in _launch_edits()],
                       kernels=[KernelOutcome(name, "triton", status="accepted") for name in ("scale", "shift")])
    outcome = JobOutcome(TargetJob("k", "kernels/k.py", "fp32", "cuda"), result, Path("."))
    changes = source_changes([outcome], cfg, lambda path: TWO_LAUNCHES if path == "kernels/k.py" else None)
    assert changes.problems == []
    after = changes.after["kernels/k.py"]
    assert after.count("# kernelopt: num_stages=2 for") == 2 and after.count("num_stages=(2 if n == 4096 else 3)") == 2
