"""Re-validating a results folder before anything in it is published.

The folder comes from the run stage: the job that checked out and ran the PR's code. Whatever
that code could do, it could also rewrite these files, so the stage with write access trusts
none of them. It reads each ``<target>.<dtype>/`` folder with limits (no symlinks, bounded file
sizes, a bounded number of folders), checks ``result.json`` against a strict schema (known keys
only, finite numbers in sane ranges, known statuses, bounded strings) and ``pack.json`` entry by
entry, and builds fresh :class:`~kernelopt_bot.result.RunResult` and
:class:`~kernelopt_bot.pack.format.KernelPack` objects from what passed. Nothing it read is
passed on as text it did not check: the reproduce command is rebuilt from validated fields, and
every string still goes through the templates' ``md`` escaping.

Pack entries (decided for issue 11): gate 1 (``verify.static.check_source/check_config``) needs
the original kernel, which only compiling the PR's model would give, and a stage that must not
run PR code cannot compile it; an "original" shipped by the run stage is as forgeable as the
candidate. So when the results come from a run of PR code (``allow_source=False``) a source
entry is rejected and a config entry is accepted only when every field validates on its own:
block-size keys Inductor uses, powers of two, a tile within Triton's limit, num_warps a power of
two up to 32, num_stages 1-8, all plain ints. Entries must name kernels the result reports as
accepted. A folder that fails any check becomes a failed target with the reason; its pack is
not published.
"""

from __future__ import annotations

import json
import math
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from kernelopt_bot.config import DTYPES, MODULE_ENTRY_RE, NAME_RE, KerneloptConfig
from kernelopt_bot.pack.format import Guard, KernelPack, LaunchConfig, PackEntry, PackError
from kernelopt_bot.result import RESULT_SCHEMA, KernelOutcome, Recommendation, RunResult
from kernelopt_bot.source_patch import PatchError, SourceEdit
from kernelopt_bot.verify.static import BLOCK_CONSTEXPRS, MAX_TILE_NUMEL

MAX_FOLDERS = 64
MAX_RESULT_BYTES = 1 << 20
MAX_PACK_BYTES = 8 << 20
MAX_TRACEBACK_CHARS = 20_000
MAX_MS = 1e6
MAX_SPEEDUP = 100.0
MAX_BLOCK = 1 << 16
KEY_RE = re.compile(r"^[0-9a-f]{64}$")
KERNEL_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,199}$")
DEVICE_RE = re.compile(r"^[A-Za-z0-9:_?-]{1,32}$")
# What the search writes as a kernel's verdict (search/orchestrator.py), with free detail after.
KERNEL_STATUS_RE = re.compile(r"^(accepted|cached|not searched|no proposal|no candidate accepted|rejected by"
                              r"|passed gates 1-3|not verified|dropped)"
                              r"(\b[^\n]{0,160})?$")
META_KEYS = {"schema", "measured", "verified_kernels"}

Num = float


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, frozen=True)


def _bounded_map(value: dict[str, Any], what: str, *, max_keys: int = 32, nested: bool = True) -> dict[str, Any]:
    """A map of short keys to JSON scalars (finite numbers, short strings), or one level of such maps."""
    if len(value) > max_keys:
        raise ValueError(f"{what} has more than {max_keys} keys")
    for k, v in value.items():
        if len(k) > 64:
            raise ValueError(f"{what} key too long")
        if isinstance(v, str) and len(v) > 200:
            raise ValueError(f"{what}.{k} is longer than 200 characters")
        if isinstance(v, float) and not math.isfinite(v):
            raise ValueError(f"{what}.{k} is not finite")
        if isinstance(v, dict) and nested:
            _bounded_map(v, f"{what}.{k}", max_keys=max_keys, nested=False)
        elif not (v is None or isinstance(v, str | int | float | bool)):
            raise ValueError(f"{what}.{k} must be a number or a short string")
    return value


STRATEGY_RE = re.compile(r"[a-z0-9_]{1,40}")  # our strategies' names (search.orchestrator.strategy_of)


class KernelDoc(_Strict):
    name: str = Field(max_length=200)
    kind: str = Field(max_length=40)
    share: Num | None = Field(default=None, ge=0, le=1)
    time_ms: Num | None = Field(default=None, ge=0, le=MAX_MS)
    candidates: int = Field(default=0, ge=0, le=1_000_000)
    status: str = Field(default="not searched", max_length=200)
    speedup: Num | None = Field(default=None, gt=0, le=MAX_SPEEDUP)
    replacement: Literal["config", "source", "config+source"] | None = None
    detail: str = Field(default="", max_length=1000)
    phase: Literal["forward", "backward"] = "forward"
    roofline_fraction: Num | None = Field(default=None, ge=0, le=100)
    strategies: dict[str, dict[str, int]] = Field(default_factory=dict)

    @field_validator("strategies")
    @classmethod
    def _strategies(cls, v: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
        if len(v) > 40:
            raise ValueError("too many strategies")
        for name, counts in v.items():
            if not STRATEGY_RE.fullmatch(name):
                raise ValueError(f"strategy name {name[:40]!r} is not one of ours")
            if set(counts) - {"gated", "accepted", "chosen"} or not all(
                    isinstance(n, int) and 0 <= n <= 1_000_000 for n in counts.values()):
                raise ValueError(f"strategy {name!r}: counts must be gated/accepted/chosen")
        return v

    @field_validator("status")
    @classmethod
    def _status(cls, v: str) -> str:
        if not KERNEL_STATUS_RE.match(v):
            raise ValueError(f"unknown kernel status {v[:40]!r}")
        return v


class RecommendationDoc(_Strict):
    option: str = Field(max_length=200)
    speedup: Num | None = Field(default=None, gt=0, le=MAX_SPEEDUP)
    verified: bool
    detail: str = Field(default="", max_length=1000)
    configs: dict[str, str] = Field(default_factory=dict)
    compile_s: Num | None = Field(default=None, ge=0, le=86400)
    compile_estimate_s: Num | None = Field(default=None, ge=0, le=86400)
    timed_s: Num | None = Field(default=None, ge=0, le=86400)

    @field_validator("configs")
    @classmethod
    def _configs(cls, v: dict[str, str]) -> dict[str, str]:
        if len(v) > 64:
            raise ValueError("configs: more than 64 kernels")
        for name, config in v.items():
            if not KERNEL_NAME_RE.fullmatch(name) or len(config) > 200:
                raise ValueError(f"configs: {name[:40]!r} is not a kernel name with a short config")
        return v


class ResultDoc(_Strict):
    """``result.json`` as the publish stage accepts it. Fields not modelled here are dropped."""

    schema_: Literal["kernelopt-result/1"] = Field(alias="schema")
    target: str = Field(max_length=300)
    name: str
    device: str
    dtype: str
    status: Literal["ok", "failed"] = "ok"
    error: str | None = Field(default=None, max_length=4000)
    hardware: dict[str, Any] = Field(default_factory=dict)
    versions: dict[str, Any] = Field(default_factory=dict)
    baseline_ms: Num | None = Field(default=None, gt=0, le=MAX_MS)
    optimized_ms: Num | None = Field(default=None, gt=0, le=MAX_MS)
    speedup: Num | None = Field(default=None, gt=0, le=MAX_SPEEDUP)
    noise_floor: Num | None = Field(default=None, ge=0, le=1)
    kernels: list[KernelDoc] = Field(default_factory=list, max_length=500)
    recommendations: list[RecommendationDoc] = Field(default_factory=list, max_length=50)
    pack_entries: int = Field(default=0, ge=0, le=10_000)
    seconds: Num | None = Field(default=None, ge=0, le=1e7)
    usage: dict[str, Any] = Field(default_factory=dict)
    phases: dict[str, Any] = Field(default_factory=dict)
    measured: bool | None = None
    verified_kernels: int | None = Field(default=None, ge=0, le=10_000)
    error_kind: Literal["", "bad input"] = ""
    llm_status: Literal["not configured", "used", "not called", "unavailable"] = "not configured"
    llm_error: str | None = Field(default=None, max_length=500)
    source_edits: list[dict[str, Any]] = Field(default_factory=list, max_length=64)
    train: bool = False
    step_split_ms: dict[Literal["forward", "backward"], dict[Literal["baseline", "optimized", "speedup"],
                                                            Annotated[Num, Field(ge=-MAX_MS, le=MAX_MS)] | None]] = Field(
        default_factory=dict)

    model_config = ConfigDict(extra="ignore", strict=True, allow_inf_nan=False, frozen=True,
                              populate_by_name=True)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not NAME_RE.match(v):
            raise ValueError("not a target name")
        return v

    @field_validator("dtype")
    @classmethod
    def _dtype(cls, v: str) -> str:
        if v not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}")
        return v

    @field_validator("device")
    @classmethod
    def _device(cls, v: str) -> str:
        if not DEVICE_RE.match(v):
            raise ValueError("not a device name")
        return v

    @field_validator("step_split_ms")
    @classmethod
    def _split(cls, v: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        for half, times in v.items():
            speedup = times.get("speedup")
            if speedup is not None and speedup <= 0:  # a ratio of two device times is positive
                raise ValueError(f"{half}: speedup {speedup} is not positive")
        return v

    @field_validator("source_edits")
    @classmethod
    def _edits(cls, v: list[dict[str, Any]]) -> list[dict[str, Any]]:
        # Rebuilt from checked fields: the publish stage makes the change itself (SourceEdit.apply)
        try:
            return [SourceEdit.from_json(e).to_json() for e in v]
        except PatchError as exc:
            raise ValueError(str(exc)) from None

    @field_validator("hardware", "versions", "usage", "phases")
    @classmethod
    def _maps(cls, v: dict[str, Any], info: Any) -> dict[str, Any]:
        return _bounded_map(v, info.field_name)


class UntrustedResultError(ValueError):
    """A file of the results folder failed validation; the message says which check."""


def _read(path: Path, limit: int) -> str:
    if path.is_symlink() or not path.is_file():
        raise UntrustedResultError(f"{path.name} is missing or not a regular file")
    if path.stat().st_size > limit:
        raise UntrustedResultError(f"{path.name} is larger than {limit} bytes")
    return path.read_text(encoding="utf-8", errors="replace")


def _reject_constant(token: str) -> Any:
    raise UntrustedResultError(f"non-finite number {token} in JSON")


def _json(text: str, what: str) -> Any:
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except ValueError as exc:
        raise UntrustedResultError(f"{what} is not valid JSON: {str(exc)[:200]}") from exc


def validate_result(text: str, *, name: str, dtype: str) -> RunResult:
    """A fresh RunResult from ``result.json`` text, or :class:`UntrustedResultError`."""
    data = _json(text, "result.json")
    if not isinstance(data, dict):
        raise UntrustedResultError("result.json is not an object")
    unknown = set(data) - set(RunResult.__dataclass_fields__) - META_KEYS
    if unknown:
        raise UntrustedResultError(f"result.json has unknown keys: {', '.join(sorted(unknown))[:200]}")
    if data.get("schema") != RESULT_SCHEMA:
        raise UntrustedResultError(f"result.json is not a {RESULT_SCHEMA} document")
    try:
        doc = ResultDoc.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err.get("loc", ()))
        raise UntrustedResultError(f"result.json: {where}: {err.get('msg', 'invalid')}"[:300]) from None
    if doc.name != name or doc.dtype != dtype:
        raise UntrustedResultError(f"result.json is for {doc.name}.{doc.dtype}, found in the folder {name}.{dtype}")
    return RunResult(
        target=doc.target, name=doc.name, device=doc.device, dtype=doc.dtype, status=doc.status, error=doc.error,
        hardware={k: v for k, v in doc.hardware.items() if not isinstance(v, dict)},
        versions={k: str(v) for k, v in doc.versions.items() if not isinstance(v, dict)},
        baseline_ms=doc.baseline_ms, optimized_ms=doc.optimized_ms, speedup=doc.speedup,
        noise_floor=doc.noise_floor,
        kernels=[KernelOutcome(**k.model_dump()) for k in doc.kernels],
        recommendations=[Recommendation(**r.model_dump()) for r in doc.recommendations],
        pack_entries=doc.pack_entries, seconds=doc.seconds, usage=dict(doc.usage),
        phases={k: float(v) for k, v in doc.phases.items() if isinstance(v, int | float) and not isinstance(v, bool)},
        error_kind=doc.error_kind, llm_status=doc.llm_status, llm_error=doc.llm_error,
        source_edits=[dict(e) for e in doc.source_edits], train=doc.train,
        step_split_ms={phase: dict(times) for phase, times in doc.step_split_ms.items()},
    )


def validate_config_json(raw: Any) -> LaunchConfig:
    """A launch config checked on its own (no original kernel at hand): the pack's strict format
    (:meth:`LaunchConfig.from_json`: no coercion, no unknown keys), then what publishing adds: only
    the block-size constexprs Inductor uses, each at most ``MAX_BLOCK``, the tile within gate 1's cap."""
    try:
        config = LaunchConfig.from_json(raw)
    except PackError as exc:
        raise UntrustedResultError(f"config: {exc}"[:300]) from None
    tile = 1
    for k, v in config.kwargs.items():
        if k not in BLOCK_CONSTEXPRS:
            raise UntrustedResultError(f"config key {k[:40]!r} is not a block size ({', '.join(BLOCK_CONSTEXPRS)})")
        if v > MAX_BLOCK:
            raise UntrustedResultError(f"config {k}={v} exceeds {MAX_BLOCK}")
        tile *= v
    if tile > MAX_TILE_NUMEL:
        raise UntrustedResultError(f"config tile of {tile} elements exceeds {MAX_TILE_NUMEL}")
    return config


MAX_SHAPES = 64  # verified shape sets per pack entry
MAX_SHAPE_ARGS = 16  # integer launch arguments per shape


def validate_pack(text: str, result: RunResult, *, allow_source: bool) -> KernelPack:
    """A fresh pack holding only entries that pass; any bad entry rejects the pack."""
    data = _json(text, "pack.json")
    try:
        parsed = KernelPack.from_json(data)
    except PackError as exc:
        raise UntrustedResultError(f"pack.json: {str(exc)[:200]}") from None
    raw_entries = {e.get("key"): e for e in data.get("entries", []) if isinstance(e, dict)}
    accepted = set(result.accepted_kernels)
    pack = KernelPack(target=result.target, created_by="kernelopt bot")
    for key, entry in parsed.entries.items():
        raw = raw_entries.get(key) or {}
        if not KEY_RE.match(key):
            raise UntrustedResultError("pack entry key is not a kernel key (64 hex digits)")
        if not KERNEL_NAME_RE.match(entry.kernel_name) or entry.kernel_name not in accepted:
            raise UntrustedResultError(f"pack entry {key[:12]} names a kernel the result does not report as accepted")
        if entry.source is not None and not allow_source:
            raise UntrustedResultError(f"pack entry {key[:12]} replaces source: source replacements from a run of "
                                       "PR code are not published (gate 1 needs the original kernel, which this "
                                       "stage cannot derive); reproduce the run on a trusted checkout")
        if entry.source is not None and len(entry.source) > 200_000:
            raise UntrustedResultError(f"pack entry {key[:12]} source is too large")
        config = validate_config_json(raw.get("config")) if raw.get("config") is not None else None
        guard = Guard(**{k: None if v is None else str(v)[:100] for k, v in vars(entry.guard).items()})
        measured = _bounded_map(dict(entry.measured), "measured", nested=False)
        if len(entry.shapes) > MAX_SHAPES or any(len(shape) > MAX_SHAPE_ARGS for shape in entry.shapes):
            raise UntrustedResultError(f"pack entry {key[:12]} has more than {MAX_SHAPES} verified shapes "
                                       f"or a shape of more than {MAX_SHAPE_ARGS} sizes")
        # The shape guard and Inductor's lookup key travel with the entry (validated by
        # PackEntry.from_json): dropping the guard would apply a replacement at sizes never verified.
        # Like ``key``, the lookup key is only as trustworthy as the run that wrote it.
        pack.add(PackEntry(key=key, kernel_name=entry.kernel_name, source=entry.source, config=config, guard=guard,
                           measured=measured, note=entry.note[:500], shapes=entry.shapes,
                           lookup_key=entry.lookup_key))
    return pack


@dataclass
class CheckedFolder:
    """One ``<target>.<dtype>`` folder after validation."""

    name: str
    dtype: str
    result: RunResult
    pack: KernelPack | None
    traceback: str | None


FOLDER_RE = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]{0,63})\.(?P<dtype>fp32|bf16|fp16)$")


def reproduce_command(entry: str, device: str, dtype: str, *, train: bool = False) -> str:
    """The command a maintainer can paste, built only from validated parts and shell-quoted
    (``train`` from the trusted config: a training target's run is a training step's)."""
    parts = ["kernelopt", "optimize", entry, "--dtype", dtype]
    if device in ("cuda", "cpu"):
        parts += ["--device", device]
    if train:
        parts += ["--train"]
    return shlex.join(parts)


def _entry_for(name: str, folder: Path, cfg: KerneloptConfig | None) -> str:
    target = cfg.target(name) if cfg is not None else None
    if target is not None:
        return target.entry
    try:
        job = json.loads(_read(folder / "job.json", 64 << 10))
        entry = job.get("entry") if isinstance(job, dict) else None
    except (UntrustedResultError, ValueError):
        entry = None
    if isinstance(entry, str) and len(entry) <= 200 and (
            MODULE_ENTRY_RE.match(entry) or (re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_./-]*\.py", entry)
            and ".." not in entry.split("/"))):
        return entry
    return name


def check_folder(folder: Path, *, cfg: KerneloptConfig | None, allow_source: bool) -> CheckedFolder | None:
    """Validate one folder; None when its name is not ``<target>.<dtype>``."""
    m = FOLDER_RE.match(folder.name)
    if m is None or folder.is_symlink() or not NAME_RE.match(m["name"]):
        return None
    name, dtype = m["name"], m["dtype"]
    entry = _entry_for(name, folder, cfg)
    tb_path = folder / "traceback.txt"
    traceback = None
    if tb_path.is_file() and not tb_path.is_symlink():
        traceback = tb_path.read_text(encoding="utf-8", errors="replace")[:MAX_TRACEBACK_CHARS]
    try:
        result = validate_result(_read(folder / "result.json", MAX_RESULT_BYTES), name=name, dtype=dtype)
        pack = None
        pack_path = folder / "pack.json"
        if result.status == "ok" and (pack_path.exists() or pack_path.is_symlink()):
            pack = validate_pack(_read(pack_path, MAX_PACK_BYTES), result, allow_source=allow_source)
    except UntrustedResultError as exc:
        result = RunResult(target=entry, name=name, device="?", dtype=dtype, status="failed",
                           error=f"results rejected by the publish stage: {exc}")
        pack = None
    result.target = entry
    configured = cfg.target(name) if cfg is not None else None
    result.reproduce = reproduce_command(entry, result.device, dtype,
                                         train=configured is not None and configured.mode == "train")
    result.pack_entries = len(pack) if pack is not None else 0
    return CheckedFolder(name, dtype, result, pack if pack is not None and len(pack) else None, traceback)


def check_results(dirs: list[Path], *, cfg: KerneloptConfig | None, allow_source: bool) -> list[CheckedFolder]:
    """Every ``<target>.<dtype>`` folder under ``dirs`` (searched to depth 2), validated, in a stable order."""
    found: dict[str, CheckedFolder] = {}
    candidates: list[Path] = []
    for d in dirs:
        d = Path(d)
        if not d.is_dir() or d.is_symlink():
            continue
        for child in sorted(d.iterdir()):
            if child.is_dir() and not child.is_symlink():
                candidates.append(child)
                candidates.extend(sorted(g for g in child.iterdir() if g.is_dir() and not g.is_symlink()))
    for folder in candidates:
        if len(found) >= MAX_FOLDERS:
            break
        if not (folder / "result.json").exists():
            continue
        checked = check_folder(folder, cfg=cfg, allow_source=allow_source)
        if checked is not None:
            found[f"{checked.name}.{checked.dtype}"] = checked
    return [found[k] for k in sorted(found)]
