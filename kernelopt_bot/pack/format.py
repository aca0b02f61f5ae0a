"""KernelPack: the versioned JSON file of verified kernel replacements.

A pack maps the normalized key of an original Inductor kernel (:func:`keys.kernel_key`) to its
replacement: new kernel source, a pinned launch config, or both, with the guards under which it
was verified and the numbers it was verified with. A pack is data, never code that runs on load;
standard library only, because the production runtime imports it.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

PACK_FORMAT = "kernelopt-pack"
PACK_VERSION = 1


class PackError(ValueError):
    """A pack file that cannot be read or does not follow the format."""


@dataclass(frozen=True)
class Guard:
    """Where a replacement is known to be valid. ``None`` fields match anything.

    Versions are compared without the local build tag (``2.11.0+cu130`` matches ``2.11.0``):
    the kernel key already pins the generated code, and the guard pins the compiler and device
    that verified it.
    """

    torch: str | None = None
    triton: str | None = None
    gpu: str | None = None
    compute_capability: str | None = None

    def matches(self, env: Guard) -> bool:
        return all(
            want is None or base_version(want) == base_version(have)
            for want, have in (
                (self.torch, env.torch),
                (self.triton, env.triton),
                (self.gpu, env.gpu),
                (self.compute_capability, env.compute_capability),
            )
        )

    def mismatch(self, env: Guard) -> str | None:
        """Which field does not match, for logs and reports."""
        for name in ("torch", "triton", "gpu", "compute_capability"):
            want, have = getattr(self, name), getattr(env, name)
            if want is not None and base_version(want) != base_version(have):
                return f"{name}: pack has {want!r}, running {have!r}"
        return None


def base_version(version: str | None) -> str:
    """A version without its local build tag: ``2.11.0+cu130`` -> ``2.11.0`` (``None`` -> ``""``).

    Guards and the store's cache keys both use this one rule: the kernel key already pins the
    generated code, so another CUDA build of the same release may reuse a verified replacement.
    """
    return "" if version is None else str(version).split("+", 1)[0].strip()


_SHA256_HEX = re.compile(r"[0-9a-f]{64}")
_CONFIG_KEYS = frozenset({"kwargs", "num_warps", "num_stages"})
# Format limits of a launch config (gate 1 checks the device-specific ones again).
_MAX_BLOCK = 2**20  # Triton's TRITON_MAX_TENSOR_NUMEL
_MAX_WARPS = 32
_MAX_STAGES = 8


def _is_int(value: Any) -> bool:
    """An int that is not a bool: JSON ``true`` is not a count."""
    return isinstance(value, int) and not isinstance(value, bool)


def _is_power_of_two(value: Any) -> bool:
    return _is_int(value) and value > 0 and value & (value - 1) == 0


@dataclass(frozen=True)
class LaunchConfig:
    """One Triton launch config: block-size constexprs plus warps and stages."""

    kwargs: dict[str, int]
    num_warps: int = 4
    num_stages: int = 1

    def to_json(self) -> dict[str, Any]:
        return {"kwargs": dict(self.kwargs), "num_warps": self.num_warps, "num_stages": self.num_stages}

    @classmethod
    def from_user_json(cls, data: Any) -> LaunchConfig:
        """A config as a person writes it (``kernelopt pin --config``, a ``verify`` candidate file):
        flat, ``{"XBLOCK": 64, "num_warps": 4}``, or a pack's form, ``{"kwargs": {"XBLOCK": 64},
        "num_warps": 4, "num_stages": 1}``; checked as strictly as a pack's."""
        if isinstance(data, dict) and isinstance(data.get("kwargs", {}), dict):
            fields = ("kwargs", "num_warps", "num_stages")
            flat = {k: v for k, v in data.items() if k not in fields}
            both = sorted(set(flat) & set(data.get("kwargs", {})))
            if both:
                raise PackError(f"{', '.join(both)} given twice (flat and in kwargs)")
            data = {**{k: v for k, v in data.items() if k in fields}, "kwargs": {**data.get("kwargs", {}), **flat}}
        return cls.from_json(data)

    @classmethod
    def from_json(cls, data: Any) -> LaunchConfig:
        """Strict: a config comes from a pack or a candidate file, i.e. from outside, so nothing is
        coerced (``4.9`` is not 4 warps, ``true`` is not 1 stage) and unknown keys are errors."""
        if not isinstance(data, dict):
            raise PackError(f"launch config must be an object, got {type(data).__name__}")
        unknown = sorted(map(str, set(data) - _CONFIG_KEYS))
        if unknown:
            raise PackError(f"launch config has unknown key(s) {unknown}; allowed: {sorted(_CONFIG_KEYS)}")
        kwargs = data.get("kwargs", {})
        if not isinstance(kwargs, dict):
            raise PackError(f"launch config 'kwargs' must be an object, got {type(kwargs).__name__}")
        for k, v in kwargs.items():
            if not (isinstance(k, str) and k.isidentifier() and not k.startswith("_")):
                raise PackError(f"launch config kwarg name {k!r} is not a constexpr name")
            if not _is_power_of_two(v) or v > _MAX_BLOCK:
                raise PackError(f"launch config kwarg {k}={v!r} must be a power-of-two int <= {_MAX_BLOCK}")
        num_warps = data.get("num_warps", 4)
        if not _is_power_of_two(num_warps) or num_warps > _MAX_WARPS:
            raise PackError(f"launch config num_warps={num_warps!r} must be a power-of-two int <= {_MAX_WARPS}")
        num_stages = data.get("num_stages", 1)
        if not (_is_int(num_stages) and 1 <= num_stages <= _MAX_STAGES):
            raise PackError(f"launch config num_stages={num_stages!r} must be an int from 1 to {_MAX_STAGES}")
        return cls(kwargs=dict(kwargs), num_warps=num_warps, num_stages=num_stages)

    def describe(self) -> str:
        blocks = ", ".join(f"{k}={v}" for k, v in sorted(self.kwargs.items()))
        return f"{blocks}, num_warps={self.num_warps}, num_stages={self.num_stages}"

    @classmethod
    def from_description(cls, text: str) -> LaunchConfig:
        """The config :meth:`describe` wrote (``XBLOCK=64, num_warps=4, num_stages=1``), as strictly
        as a pack's: a compiler option's arm reports its kernels' configs so."""
        data: dict[str, Any] = {"kwargs": {}}
        for part in text.split(", "):
            name, eq, value = part.partition("=")
            if not eq or not value.isdigit() or (name in data["kwargs"] or name in data):
                raise PackError(f"launch config description {text[:200]!r}: {part[:60]!r} is not name=integer")
            if name in ("num_warps", "num_stages"):
                data[name] = int(value)
            else:
                data["kwargs"][name] = int(value)
        if "num_warps" not in data or "num_stages" not in data:
            raise PackError(f"launch config description {text[:200]!r} lacks num_warps or num_stages")
        return cls.from_json(data)


@dataclass(frozen=True)
class PackEntry:
    """The replacement for one original kernel."""

    key: str
    kernel_name: str
    source: str | None = None
    config: LaunchConfig | None = None
    guard: Guard = field(default_factory=Guard)
    measured: dict[str, Any] = field(default_factory=dict)
    note: str = ""
    # The integer (non-constexpr) launch arguments (xnumel, r0_numel, ks0, ...) the replacement
    # was verified with, one tuple per verified launch. A dynamic-shape kernel gets the same key
    # at every size, so the runtime uses the replacement only for launches with one of these;
    # empty (packs written before this field): no shape guard.
    shapes: tuple[tuple[int, ...], ...] = ()
    # Inductor's own key for the original kernel (``pack.export.inductor_lookup_key``), recorded
    # at creation because it needs the original source, which a pack does not hold: lets
    # `kernelopt export --format inductor` turn a config-only entry into an
    # ``autotune_lookup_table`` row. ``None``: not recorded (older packs, packs the bot publishes).
    lookup_key: str | None = None

    def __post_init__(self) -> None:
        if self.source is None and self.config is None:
            raise PackError(f"entry {self.key[:12]} has neither source nor config")

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "kernel_name": self.kernel_name,
            "source": self.source,
            "config": self.config.to_json() if self.config else None,
            "guard": asdict(self.guard),
            "measured": self.measured,
            "note": self.note,
            "shapes": [list(s) for s in self.shapes],
            "lookup_key": self.lookup_key,
        }

    @classmethod
    def from_json(cls, data: Any) -> PackEntry:
        if not isinstance(data, dict):
            raise PackError(f"pack entry must be an object, got {type(data).__name__}")
        for required in ("key", "kernel_name"):
            if not isinstance(data.get(required), str):
                raise PackError(f"pack entry lacks string field {required!r}")
        guard = data.get("guard") or {}
        if not isinstance(guard, dict) or set(guard) - set(Guard.__dataclass_fields__):
            raise PackError(f"bad guard in entry {data['key'][:12]}: {guard!r}")
        source = data.get("source")
        if source is not None and not isinstance(source, str):
            raise PackError(f"entry {data['key'][:12]}: source must be a string")
        lookup_key = data.get("lookup_key")
        if lookup_key is not None and not (isinstance(lookup_key, str) and _SHA256_HEX.fullmatch(lookup_key)):
            raise PackError(f"entry {data['key'][:12]}: lookup_key must be 64 lowercase hex digits")
        return cls(
            key=data["key"],
            kernel_name=data["kernel_name"],
            source=source,
            config=LaunchConfig.from_json(data["config"]) if data.get("config") else None,
            guard=Guard(**{k: None if v is None else str(v) for k, v in guard.items()}),
            measured=dict(data.get("measured") or {}),
            note=str(data.get("note") or ""),
            shapes=_shapes(data.get("shapes"), data["key"]),
            lookup_key=lookup_key,
        )


def _shapes(raw: Any, key: str) -> tuple[tuple[int, ...], ...]:
    """A pack entry's ``shapes``: a list of lists of ints (absent: none recorded)."""
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(
        isinstance(row, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in row) for row in raw
    ):
        raise PackError(f"entry {key[:12]}: shapes must be a list of lists of integers, got {raw!r}")
    return tuple(tuple(row) for row in raw)


def integer_arguments(args: Any) -> tuple[int, ...]:
    """The integer launch arguments of a kernel call (sizes such as xnumel, r0_numel, ks0): what
    a shape guard compares. Tensors, floats and flags are not sizes."""
    return tuple(int(a) for a in args if isinstance(a, int) and not isinstance(a, bool))


@dataclass
class KernelPack:
    """A set of replacements plus where they came from."""

    entries: dict[str, PackEntry] = field(default_factory=dict)
    target: str = ""
    created_by: str = ""
    measured: dict[str, Any] = field(default_factory=dict)

    def add(self, entry: PackEntry) -> None:
        self.entries[entry.key] = entry

    def __len__(self) -> int:
        return len(self.entries)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": PACK_FORMAT,
            "version": PACK_VERSION,
            "target": self.target,
            "created_by": self.created_by,
            "measured": self.measured,
            "entries": [self.entries[k].to_json() for k in sorted(self.entries)],
        }

    @classmethod
    def from_json(cls, data: Any) -> KernelPack:
        if not isinstance(data, dict) or data.get("format") != PACK_FORMAT:
            raise PackError(f"not a kernelopt pack (expected format {PACK_FORMAT!r})")
        version = data.get("version")
        if version != PACK_VERSION:
            raise PackError(f"pack version {version!r} is not supported (this reads {PACK_VERSION})")
        entries = data.get("entries")
        if not isinstance(entries, list):
            raise PackError("pack 'entries' must be a list")
        pack = cls(
            target=str(data.get("target") or ""),
            created_by=str(data.get("created_by") or ""),
            measured=dict(data.get("measured") or {}),
        )
        for raw in entries:
            pack.add(PackEntry.from_json(raw))
        return pack

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2, sort_keys=False) + "\n"

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.dumps())

    @classmethod
    def load(cls, path: str | Path) -> KernelPack:
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise PackError(f"cannot read pack {path}: {exc.strerror or exc}") from exc
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise PackError(f"pack {path} is not valid JSON: {exc}") from exc
        return cls.from_json(data)
