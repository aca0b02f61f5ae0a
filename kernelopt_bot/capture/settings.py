"""How the user compiles their model: a ``torch.compile`` mode and Inductor config settings.

A model served with ``mode="max-autotune-no-cudagraphs"`` or with coordinate-descent tuning runs
other kernels (other configs, sometimes other fusions) than the default compile. Optimizing the
default compile's kernels for such a user searches kernels they never run and reports a speedup
over a baseline they do not have. So the settings are part of a run: the engine's capture, every
model arm (baselines included) and the final benchmark compile with them, and the report's
baseline is that compile.

``torch.compile`` takes either a mode or options, not both; settings are therefore applied as the
mode plus Inductor config patched for the whole process (each arm and the engine are processes of
their own).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from kernelopt_bot.errors import BadInputError

CompileMode = Literal["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"]
COMPILE_MODES: tuple[str, ...] = get_args(CompileMode)


@dataclass(frozen=True)
class CompileSettings:
    """``mode`` (None: Inductor's default) and ``config`` (Inductor config key -> value)."""

    mode: str | None = None
    config: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.mode is not None and self.mode not in COMPILE_MODES:
            raise BadInputError(f"compile mode {self.mode!r}: expected one of {', '.join(COMPILE_MODES)}")
        if self.mode == "default":
            object.__setattr__(self, "mode", None)

    @property
    def is_default(self) -> bool:
        return self.mode is None and not self.config

    @property
    def label(self) -> str:
        """How a report names this compile: ``torch.compile`` (default) or with its settings."""
        if self.is_default:
            return "torch.compile (default)"
        parts = ([f"mode={self.mode}"] if self.mode else []) + [f"{k}={json.dumps(v)}" for k, v in self.config.items()]
        return f"torch.compile ({', '.join(parts)})"

    def cli_args(self) -> list[str]:
        """The flags that give these settings to ``kernelopt optimize`` (for a Reproduce line)."""
        args = ["--mode", self.mode] if self.mode else []
        for key, value in self.config.items():
            args += ["--inductor-config", f"{key}={json.dumps(value)}"]
        return args

    def to_json(self) -> dict[str, Any]:
        return {"mode": self.mode, "config": dict(self.config)}

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> CompileSettings:
        data = data or {}
        return cls(data.get("mode"), dict(data.get("config") or {}))

    @classmethod
    def from_cli(cls, mode: str | None, config_items: tuple[str, ...] | list[str]) -> CompileSettings:
        """The settings ``--mode`` and ``--inductor-config KEY=VALUE ...`` give (keys checked later,
        by :func:`check_config` in the process that compiles)."""
        return cls(mode, parse_config_items(config_items))

    def with_option(self, mode: str | None, config: dict[str, Any] | None) -> CompileSettings:
        """These settings with a compiler option on top (its mode replaces ours; its config is
        added to ours)."""
        return CompileSettings(mode if mode is not None else self.mode, {**self.config, **(config or {})})


def target_settings(raw: Any, where: str) -> CompileSettings | None:
    """A target module's ``TORCH_COMPILE`` (the arguments its user gives ``torch.compile``:
    ``{"mode": ..., "options": {...}}``) as settings, None where it has none; a malformed one is
    bad input (Inductor config keys are checked by :func:`check_config` where the model compiles)."""
    if raw is None:
        return None
    if not isinstance(raw, dict) or set(raw) - {"mode", "options"}:
        raise BadInputError(f"{where}: TORCH_COMPILE must be a dict with 'mode' and/or 'options' "
                            f"(the arguments given to torch.compile), not {raw!r}"[:300])
    mode, options = raw.get("mode"), raw.get("options") or {}
    if mode is not None and mode not in COMPILE_MODES:
        raise BadInputError(f"{where}: TORCH_COMPILE mode {mode!r}: expected one of {', '.join(COMPILE_MODES)}")
    if not isinstance(options, dict) or not all(isinstance(k, str) for k in options):
        raise BadInputError(f"{where}: TORCH_COMPILE options must map Inductor config names to values")
    return CompileSettings(mode, dict(options))


def parse_config_items(items: tuple[str, ...] | list[str], what: str = "--inductor-config") -> dict[str, Any]:
    """``KEY=VALUE`` pairs; values are read as JSON (true, 3, "x") and else kept as strings. The
    keys are checked against Inductor's by :func:`check_config`, where Inductor may be imported
    (the process that compiles)."""
    return {_key(item, what): _value(item) for item in items}


def check_config(config: dict[str, Any], what: str = "inductor_config") -> dict[str, Any]:
    """``config`` if every key is one of Inductor's config keys; else a clear error."""
    import torch._inductor.config as inductor_config

    defaults = inductor_config.get_config_copy()
    unknown = sorted(k for k in config if k not in defaults)
    if unknown:
        raise BadInputError(f"{what}: unknown Inductor config key(s) {', '.join(map(repr, unknown))}")
    wrong = [f"{key}={json.dumps(value)} ({want})" for key, value in config.items()
             if (want := _unlike_default(value, defaults[key]))]
    if wrong:
        raise BadInputError(f"{what}: {', '.join(wrong)}")
    return dict(config)


def _unlike_default(value: Any, default: Any) -> str | None:
    """What ``value`` should have been where its type is not the key's default's (a flag set to
    "maybe" was kept as a string and recorded so); None where it fits or the default says nothing
    (None, a list, a callable: Inductor's own checks decide). ``null`` always fits: some keys are
    optional."""
    if value is None:
        return None
    if isinstance(default, bool):
        return None if isinstance(value, bool) else "expected true or false"
    if isinstance(default, int):
        return None if isinstance(value, int) and not isinstance(value, bool) else "expected an integer"
    if isinstance(default, float):
        return None if isinstance(value, (int, float)) and not isinstance(value, bool) else "expected a number"
    if isinstance(default, str):
        return None if isinstance(value, str) else "expected a string"
    return None


def _key(item: str, what: str) -> str:
    key, sep, _ = item.partition("=")
    if not sep or not key:
        raise BadInputError(f"{what} {item!r}: expected KEY=VALUE with a known Inductor config key")
    return key


def _value(item: str) -> Any:
    raw = item.partition("=")[2]
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw
