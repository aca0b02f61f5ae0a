"""Which kind of target a file is, read from its source (nothing of it runs here).

* ``module``: a PyTorch model file (``Model``, ``get_inputs``, ...) or a factory: the compiler's
  kernels are searched and the result is a pack;
* ``triton``: a launcher file (``launch(*inputs)``, ``get_inputs()``, no ``Model``) that launches
  the user's own ``@triton.jit`` kernels: the result is a patch to their source;
* ``helion``: a file with one ``@helion.kernel`` function and ``get_inputs()`` (no ``Model`` nor
  ``launch``): the result is the verified config pinned in the decorator.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Literal

TargetKind = Literal["module", "triton", "helion"]
KINDS: tuple[TargetKind, ...] = ("module", "triton", "helion")
LAUNCHER = "launch"


def helion_kernels_in(tree: ast.Module) -> list[ast.FunctionDef]:
    """The top-level functions decorated ``@helion.kernel`` (or ``@kernel`` imported from helion)."""
    return [node for node in tree.body if isinstance(node, ast.FunctionDef)
            and any(helion_decorator(tree, d) for d in node.decorator_list)]


def helion_decorator(tree: ast.Module, decorator: ast.expr) -> bool:
    """``decorator`` is ``helion.kernel`` or ``helion.kernel(...)`` (or the name, or alias, under
    which the file imports ``kernel`` from helion)."""
    from_helion = {alias.asname or alias.name for node in tree.body if isinstance(node, ast.ImportFrom)
                   and node.module == "helion" for alias in node.names if alias.name == "kernel"}
    func = decorator.func if isinstance(decorator, ast.Call) else decorator
    return ((isinstance(func, ast.Attribute) and func.attr == "kernel" and getattr(func.value, "id", "") == "helion")
            or (isinstance(func, ast.Name) and func.id in from_helion))


def target_kind(spec: str) -> TargetKind:
    """The kind of ``spec``: a ``.py`` file's from its top-level names, anything else (a factory
    ``module:function``, a file that does not parse) ``module``, whose loader explains errors."""
    path = Path(spec)
    if path.suffix != ".py" or not path.is_file():
        return "module"
    try:
        tree = ast.parse(path.read_text())
    except (SyntaxError, UnicodeDecodeError, OSError):
        return "module"
    names = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    if "Model" in names:
        return "module"
    if LAUNCHER in names:
        return "triton"
    return "helion" if helion_kernels_in(tree) else "module"
