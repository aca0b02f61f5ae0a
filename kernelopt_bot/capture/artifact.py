"""The Artifact: a compiled model's output code read as structure, with :mod:`ast`.

Inductor's output module defines each Triton kernel as a module-level assignment
``name = async_compile.triton('name', '''<source>''', device_str=...)`` and a ``call(args)``
that allocates buffers, calls vendor libraries (``extern_kernels.addmm(...)``) and launches
kernels (``name.run(buf0, 1024, stream=stream0)``). We read those three things with ``ast``,
never with a regex: autotune docstrings and comments contain copies of kernel text.

Vendor calls (``extern_kernels.*``) and ATen fallbacks are recorded and marked preserved: the
search never targets them.
"""

from __future__ import annotations

import ast
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from kernelopt_bot.pack.keys import (
    KernelSourceError,
    find_jit_function,
    kernel_key,
    read_decorator,
    source_sha256,
)

KINDS = ("pointwise", "reduction", "persistent_reduction", "template", "other")

_KIND_BY_HEURISTIC = {
    "pointwise": "pointwise",
    "reduction": "reduction",
    "cooperative_reduction": "reduction",
    "persistent_reduction": "persistent_reduction",
    "template": "template",
}
_KIND_BY_PREFIX = {
    "triton_poi_": "pointwise",
    "triton_red_": "reduction",
    "triton_per_": "persistent_reduction",
    "triton_tem_": "template",
}
# Output-code names that are bookkeeping, not compute.
_WRAPPER_HELPERS = {"inductor"}


class OutputCodeError(ValueError):
    """Output code that does not parse or holds a kernel we cannot read."""


@dataclass
class LaunchSite:
    """One ``kernel.run(...)`` in the wrapper, with its arguments as source text."""

    args: list[str]
    kwargs: dict[str, str]
    line: int


@dataclass
class TritonKernel:
    """One generated Triton kernel of one compiled graph."""

    name: str
    graph: int
    kind: str
    heuristic: str | None
    source: str
    sha256: str
    key: str
    params: list[str]
    signature: dict[str, str]
    size_hints: Any
    mutated_args: list[str]
    launches: list[LaunchSite] = field(default_factory=list)

    @property
    def qualified_name(self) -> str:
        return f"g{self.graph}:{self.name}"

    @property
    def constexprs(self) -> list[str]:
        return [p for p in self.params if self.signature.get(p) == "constexpr"]

    def param_role(self, name: str) -> str:
        """What the kernel does with its parameter ``name``, from Inductor's naming and metadata:
        ``"out"`` (``out_ptr*``: written), ``"inout"`` (``in_out_ptr*``, or listed as mutated: read
        and written), ``"in"`` (``in_ptr*``: read) or ``"other"`` (sizes, workspaces, names we do
        not know). The one rule gate 2 (which arguments to compare) and the search (whether a
        kernel writes anything) both read."""
        if name.startswith("out_ptr"):
            return "out"
        if name.startswith("in_out_ptr") or name in self.mutated_args:
            return "inout"
        if name.startswith("in_ptr"):
            return "in"
        return "other"

    @property
    def writes(self) -> bool:
        """Whether it writes any argument we know of (:meth:`param_role`). One that writes none is a
        check (a device-side assert, as ``one_hot``'s range check) or a kernel without Inductor's
        names: gate 2 compares what a kernel writes, so no replacement of it could be verified."""
        return bool(self.mutated_args) or any(self.param_role(p) in ("out", "inout") for p in self.params)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["qualified_name"] = self.qualified_name
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TritonKernel:
        fields = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        fields["launches"] = [LaunchSite(**site) for site in data.get("launches", [])]
        return cls(**fields)


@dataclass
class ExternCall:
    """A call into a vendor library or an ATen fallback; never replaced."""

    op: str
    kind: str  # "extern" (extern_kernels.*) or "fallback" (torch.ops.*)
    graph: int
    line: int
    preserved: bool = True

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class CompiledGraph:
    """One Inductor output module (a model with graph breaks has several)."""

    index: int
    code: str
    kernels: list[TritonKernel]
    extern_calls: list[ExternCall]
    path: str | None = None

    @property
    def phase(self) -> str:
        """``backward`` for the backward half of a training step (its inputs include the incoming
        gradients, which Inductor names ``tangents_<n>``), else ``forward``."""
        return "backward" if re.search(r"\btangents_\d+\b", self.code) else "forward"


@dataclass
class Artifact:
    """The compiled model as structure: what the search may change and what it must keep."""

    target: str
    device: str
    dtype: str
    graphs: list[CompiledGraph]
    versions: dict[str, str] = field(default_factory=dict)

    @property
    def kernels(self) -> list[TritonKernel]:
        return [k for g in self.graphs for k in g.kernels]

    @property
    def extern_calls(self) -> list[ExternCall]:
        return [c for g in self.graphs for c in g.extern_calls]

    def kernel(self, name: str) -> TritonKernel:
        """Find a kernel by ``name`` or ``g<graph>:name``; ambiguity is an error."""
        hits = [k for k in self.kernels if name in (k.name, k.qualified_name)]
        if len(hits) == 1:
            return hits[0]
        if not hits:
            known = ", ".join(k.qualified_name for k in self.kernels) or "none"
            raise KeyError(f"no kernel {name!r} (kernels: {known})")
        raise KeyError(f"kernel name {name!r} is in several graphs; use one of "
                       + ", ".join(k.qualified_name for k in hits))


def kernel_kind(name: str, heuristic: str | None) -> str:
    if heuristic in _KIND_BY_HEURISTIC:
        return _KIND_BY_HEURISTIC[heuristic]
    if heuristic is None:
        for prefix, kind in _KIND_BY_PREFIX.items():
            if name.startswith(prefix):
                return kind
    return "other"


def parse_output_code(code: str, graph: int = 0, path: str | None = None) -> CompiledGraph:
    """Read one Inductor output module."""
    try:
        tree = ast.parse(code)
    except SyntaxError as exc:
        raise OutputCodeError(f"output code does not parse: line {exc.lineno}: {exc.msg}") from exc
    definitions = _kernel_definitions(tree)
    launches = _launch_sites(tree, set(definitions))
    kernels = [
        _build_kernel(name, src, graph, launches.get(name, []))
        for name, src in definitions.items()
    ]
    return CompiledGraph(graph, code, kernels, _extern_calls(tree, graph), path)


def parse_artifact(codes: list[str], target: str = "", device: str = "", dtype: str = "",
                   versions: dict[str, str] | None = None,
                   paths: list[str | None] | None = None) -> Artifact:
    paths = paths or [None] * len(codes)
    graphs = [parse_output_code(c, i, p) for i, (c, p) in enumerate(zip(codes, paths))]
    return Artifact(target, device, dtype, graphs, dict(versions or {}))


def _is_async_compile_triton(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "triton"
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "async_compile"
    )


def _kernel_definitions(tree: ast.Module) -> dict[str, str]:
    found: dict[str, str] = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Assign) and _is_async_compile_triton(node.value)):
            continue
        call = node.value
        assert isinstance(call, ast.Call)
        target = node.targets[0]
        name = target.id if isinstance(target, ast.Name) else None
        src_node = call.args[1] if len(call.args) > 1 else next(
            (kw.value for kw in call.keywords if kw.arg == "source_code"), None
        )
        if name is None or not (isinstance(src_node, ast.Constant) and isinstance(src_node.value, str)):
            continue
        found[name] = src_node.value
    return found


def _build_kernel(name: str, source: str, graph: int, launches: list[LaunchSite]) -> TritonKernel:
    try:
        tree = ast.parse(source)
        fn = find_jit_function(tree)
        dec = read_decorator(tree)
        key = kernel_key(source)
    except (SyntaxError, KernelSourceError) as exc:
        raise OutputCodeError(f"kernel {name}: {exc}") from exc
    params = [a.arg for a in fn.args.args]
    signature = dict(dec.triton_meta.get("signature") or {}) if dec else {}
    mutated = list(dec.inductor_meta.get("mutated_arg_names") or []) if dec else []
    heuristic = dec.heuristic if dec else None
    return TritonKernel(
        name=name,
        graph=graph,
        kind=kernel_kind(name, heuristic),
        heuristic=heuristic,
        source=source,
        sha256=source_sha256(source),
        key=key,
        params=params,
        signature={str(k): str(v) for k, v in signature.items()},
        size_hints=dec.size_hints if dec else None,
        mutated_args=[str(m) for m in mutated],
        launches=launches,
    )


def _launch_sites(tree: ast.Module, names: set[str]) -> dict[str, list[LaunchSite]]:
    sites: dict[str, list[LaunchSite]] = {}
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "run"
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id in names
        ):
            continue
        site = LaunchSite(
            args=[ast.unparse(a) for a in node.args],
            kwargs={kw.arg or "**": ast.unparse(kw.value) for kw in node.keywords},
            line=node.lineno,
        )
        sites.setdefault(node.func.value.id, []).append(site)
    for lst in sites.values():
        lst.sort(key=lambda s: s.line)
    return sites


def _dotted(node: ast.expr) -> list[str] | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return parts[::-1]
    return None


def _extern_calls(tree: ast.Module, graph: int) -> list[ExternCall]:
    aliases = _op_namespace_aliases(tree)
    calls: list[ExternCall] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        parts = _dotted(node.func)
        if not parts or len(parts) < 2:
            continue
        if parts[0] == "extern_kernels":
            calls.append(ExternCall(".".join(parts), "extern", graph, node.lineno))
            continue
        if parts[:2] == ["torch", "ops"] and len(parts) >= 4:
            namespace, rest = parts[2], parts[3:]
        elif parts[0] in aliases and len(parts) >= 2:
            namespace, rest = aliases[parts[0]], parts[1:]
        else:
            continue
        if namespace in _WRAPPER_HELPERS:
            continue
        calls.append(ExternCall(".".join([namespace, *rest]), "fallback", graph, node.lineno))
    calls.sort(key=lambda c: c.line)
    return calls


def _op_namespace_aliases(tree: ast.Module) -> dict[str, str]:
    """``aten = torch.ops.aten`` style aliases at module level."""
    aliases: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            parts = _dotted(node.value)
            if parts and len(parts) == 3 and parts[:2] == ["torch", "ops"]:
                aliases[node.targets[0].id] = parts[2]
    return aliases
