"""Affected targets: config globs, entries, and the import graph of changed files."""

from __future__ import annotations

from pathlib import Path

from kernelopt_bot.config import parse_config
from kernelopt_bot.github.affected import ModuleIndex, affected_targets, glob_match
from tests.github.conftest import write_repo

CFG = """\
targets:
  - name: by-module
    entry: pkg.a:factory
  - name: by-file
    entry: pkg/a.py
  - name: by-glob
    entry: other/net.py
    paths: ["kernels/**/*.cu", "docs/"]
  - name: src-layout
    entry: lib.top:make
  - name: ignored
    entry: pkg.a:factory
ignore: [ignored]
"""

FILES = {
    ".kernelopt.yml": CFG,
    "pkg/__init__.py": "",
    "pkg/a.py": "from pkg import b\n",
    "pkg/b.py": "from .c import helper\n",
    "pkg/c.py": "import json\nhelper = 1\n",
    "pkg/unused.py": "",
    "other/net.py": "import os\n",
    "src/lib/__init__.py": "",
    "src/lib/top.py": "from . import mid\n",
    "src/lib/mid.py": "import lib.deep.leaf as leaf\n",
    "src/lib/deep/__init__.py": "",
    "src/lib/deep/leaf.py": "",
}


def _affected(tmp_path: Path, changed: list[str]) -> dict[str, str]:
    root = write_repo(tmp_path / "r", FILES)
    return affected_targets(parse_config(CFG), changed, root)


def test_import_graph_transitive(tmp_path: Path) -> None:
    # a imports b; b imports c relatively: changing c affects both entries that reach pkg/a.py
    got = _affected(tmp_path, ["pkg/c.py"])
    assert set(got) == {"by-module", "by-file"}
    assert got["by-module"] == "its entry imports pkg/c.py"


def test_changing_b_affects_a_factory_entry(tmp_path: Path) -> None:
    assert set(_affected(tmp_path, ["pkg/b.py"])) == {"by-module", "by-file"}


def test_entry_itself_and_package_init(tmp_path: Path) -> None:
    got = _affected(tmp_path, ["pkg/a.py"])
    assert got["by-file"] == "pkg/a.py is its entry" and got["by-module"] == "pkg/a.py is its entry"
    assert set(_affected(tmp_path, ["pkg/__init__.py"])) == {"by-module", "by-file"}


def test_unrelated_and_globs(tmp_path: Path) -> None:
    assert _affected(tmp_path, ["pkg/unused.py", "README.md"]) == {}
    assert set(_affected(tmp_path, ["kernels/x/y/add.cu"])) == {"by-glob"}
    assert set(_affected(tmp_path, ["docs/index.md"])) == {"by-glob"}


def test_src_layout_and_absolute_submodule_import(tmp_path: Path) -> None:
    assert set(_affected(tmp_path, ["src/lib/deep/leaf.py"])) == {"src-layout"}


def test_config_change_affects_every_active_target(tmp_path: Path) -> None:
    got = _affected(tmp_path, [".kernelopt.yml"])
    assert set(got) == {"by-module", "by-file", "by-glob", "src-layout"}  # not the ignored one


def test_nothing_is_imported_or_run(tmp_path: Path) -> None:
    files = dict(FILES)
    files["pkg/b.py"] = "raise SystemExit('must never run')\nfrom pkg import c\n"
    root = write_repo(tmp_path / "r", files)
    assert "by-module" in affected_targets(parse_config(CFG), ["pkg/c.py"], root)
    index = ModuleIndex(root)
    assert index.module_of(root / "pkg" / "b.py") == "pkg.b"


def test_glob_match() -> None:
    assert glob_match("a/b/c.py", "a/**")
    assert glob_match("a/c.py", "a/**/*.py")
    assert glob_match("a/x/y/c.py", "a/**/*.py")
    assert not glob_match("b/c.py", "a/**")
    assert glob_match("models/mlp.py", "models/*.py")
    assert not glob_match("models/sub/mlp.py", "models/*.py")
    assert glob_match("x.py", "**/*.py")
