"""``kernelopt store ...`` run as a user runs it, on the store a real ``optimize`` wrote: its runs,
the kernels and candidates of one run, the cache's history, export to a file and import into
another store (how runners without a shared disk share verified kernels), and forgetting."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import EXAMPLES, user_env


def _kernelopt(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kernelopt_bot.cli", *args], cwd=cwd, env=user_env(),
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def optimized(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder whose store holds one real run of the gelu example."""
    folder = tmp_path_factory.mktemp("store")
    run = _kernelopt(folder, "optimize", str(EXAMPLES / "gelu.py"), "--store", "db.sqlite",
                     "--budget", "candidates_per_kernel=1")
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    return folder


def test_runs_and_show_read_back_what_optimize_recorded(optimized: Path) -> None:
    runs = _kernelopt(optimized, "store", "runs", "--store", "db.sqlite", "--json")
    assert runs.returncode == 0, runs.stderr
    (run,) = json.loads(runs.stdout)
    assert run["target"].endswith("gelu.py") and run["status"] == "ok"
    show = _kernelopt(optimized, "store", "show", str(run["id"]), "--store", "db.sqlite", "--json")
    assert show.returncode == 0, show.stderr
    doc = json.loads(show.stdout)
    assert [k["kind"] for k in doc["kernels"]] == ["pointwise"]  # the run's profile, recorded kernel by kernel
    assert len(doc["candidates"]) == 1 and doc["candidates"][0]["verdict"]["status"]
    table = _kernelopt(optimized, "store", "show", str(run["id"]), "--store", "db.sqlite")
    assert table.returncode == 0 and "1 candidate(s)" in table.stdout
    latest = _kernelopt(optimized, "store", "show", "--latest", run["target"], "--device", "cpu", "--store",
                        "db.sqlite", "--json")
    assert latest.returncode == 0 and json.loads(latest.stdout)["latest"]["status"] == "ok"


def test_export_then_import_carries_the_store_to_another_runner(optimized: Path, tmp_path: Path) -> None:
    out = _kernelopt(optimized, "store", "export", str(tmp_path / "store.json"), "--store", "db.sqlite")
    assert out.returncode == 0, out.stderr
    first = _kernelopt(tmp_path, "store", "import", "store.json", "--store", "other.sqlite")
    assert first.returncode == 0 and "row(s) added or changed" in first.stdout
    again = _kernelopt(tmp_path, "store", "import", "store.json", "--store", "other.sqlite")
    assert again.returncode == 0 and "imported store.json: 0 row(s)" in again.stdout  # the same export adds nothing
    runs = json.loads(_kernelopt(tmp_path, "store", "runs", "--store", "other.sqlite", "--json").stdout)
    assert len(runs) == 1 and runs[0]["target"].endswith("gelu.py")
    cache = _kernelopt(tmp_path, "store", "cache", "--store", "other.sqlite", "--json")
    assert cache.returncode == 0 and isinstance(json.loads(cache.stdout), list)
    forget = _kernelopt(tmp_path, "store", "forget", "--all", "--store", "other.sqlite")
    assert forget.returncode == 0 and forget.stdout.startswith("dropped ")


@pytest.mark.parametrize(("args", "message"), [
    (("runs", "--store", "missing.sqlite"), "no store at missing.sqlite"),
    (("show", "--store", "missing.sqlite"), "give a RUN_ID or --latest TARGET"),
    (("show", "7", "--store", "missing.sqlite"), "no store at"),
    (("forget", "--store", "missing.sqlite"), "give --kernel KEY, or --all"),
    (("import", "nothing.json", "--store", "x.sqlite"), "not a readable JSON file"),
])
def test_bad_store_commands_are_bad_input(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    run = _kernelopt(tmp_path, "store", *args)
    assert run.returncode == 2 and message in run.stderr, run.stderr


def test_a_file_that_is_not_a_store_is_bad_input_and_left_as_it_was(tmp_path: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not sqlite at all\n" * 50)
    run = _kernelopt(tmp_path, "store", "runs", "--store", "junk.db")
    assert run.returncode == 2, run.stdout + run.stderr
    assert "not a readable kernelopt database" in run.stderr and "Traceback" not in run.stderr
    assert junk.read_bytes() == b"not sqlite at all\n" * 50
