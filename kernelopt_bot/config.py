"""``.kernelopt.yml``: what the bot optimizes in a repository, and how it publishes.

The file is user input read on CI, so it is validated strictly (unknown keys are errors, not
silently ignored typos) and every error is one line naming the field path, e.g.
``.kernelopt.yml: targets[1].dtypes[0]: 'fp64' is not one of fp32, bf16, fp16``.
Secrets never live in the file: the LLM key is named by the environment variable that holds it,
and a literal key is refused (it would be committed for everyone to read).

Example::

    targets:
      - name: mlp
        entry: models/mlp.py              # a benchmark-format file, or pkg.mod:factory
        dtypes: [fp32, bf16]
        device: cuda                      # cuda, cpu or auto
        paths: ["models/**", "kernels/*.py"]
    budget: {candidates: 64, tokens: 200000, gpu_seconds: 900, wall_seconds: 3600}
    gamma: 1.03
    llm: {base_url: "https://llm.example/v1", model: "some-model", api_key_env: KERNELOPT_LLM_API_KEY}
    publish: {draft: true, labels: [performance], reviewers: [], max_open_proposals: 5}
    ignore: []
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from kernelopt_bot.errors import BadInputError

DTYPES = ("fp32", "bf16", "fp16")
DEFAULT_CONFIG = ".kernelopt.yml"
DEFAULT_KEY_ENV = "KERNELOPT_LLM_API_KEY"

# Target names end up in file names, branch names and report tables: keep them plain.
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
MODULE_ENTRY_RE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*$")
ENV_NAME_RE = re.compile(r"^[A-Z_][A-Z0-9_]{0,127}$")
# Keys under ``llm`` that can only mean a literal secret.
SECRET_KEYS = ("api_key", "key", "token", "secret", "password", "apikey")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TargetConfig(_Strict):
    """One model to optimize and the files whose changes should trigger a run on a PR."""

    name: str
    entry: str
    dtypes: list[str] = Field(default_factory=lambda: ["fp32"])
    device: Literal["cuda", "cpu", "auto"] = "auto"
    paths: list[str] = Field(default_factory=list)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not NAME_RE.match(v):
            raise ValueError(f"{v!r} is not a valid target name (letters, digits, '.', '_', '-'; "
                             "at most 64 characters, starting with a letter or digit)")
        return v

    @field_validator("entry")
    @classmethod
    def _entry(cls, v: str) -> str:
        if v.endswith(".py"):
            p = Path(v)
            if p.is_absolute() or ".." in p.parts or "\\" in v:
                raise ValueError(f"{v!r} must be a path relative to the repository root")
            return v
        if MODULE_ENTRY_RE.match(v):
            return v
        raise ValueError(f"{v!r} is neither a .py file nor package.module:factory")

    @field_validator("dtypes")
    @classmethod
    def _dtypes(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("needs at least one dtype")
        for i, d in enumerate(v):
            if d not in DTYPES:
                raise _ItemError(i, f"{d!r} is not one of {', '.join(DTYPES)}")
        if len(set(v)) != len(v):
            raise ValueError("lists a dtype twice")
        return v

    @field_validator("paths")
    @classmethod
    def _paths(cls, v: list[str]) -> list[str]:
        for i, g in enumerate(v):
            if not g or g.startswith("/") or ".." in g.split("/"):
                raise _ItemError(i, f"{g!r} must be a glob relative to the repository root")
        return v

    @property
    def module_entry(self) -> bool:
        return not self.entry.endswith(".py")


class BudgetConfig(_Strict):
    """How much one target's search may spend; the engine stops at the first limit reached.

    Unset fields keep the engine's defaults (``kernelopt_bot.pipeline.DEFAULT_BUDGET``).
    """

    candidates: int | None = Field(default=None, ge=1, le=100_000)
    tokens: int | None = Field(default=None, ge=0)
    gpu_seconds: float | None = Field(default=None, gt=0)
    wall_seconds: float | None = Field(default=None, gt=0)
    kernels: int | None = Field(default=None, ge=1, le=1000)
    candidates_per_kernel: int | None = Field(default=None, ge=1, le=1000)
    cost: float | None = Field(default=None, ge=0)
    compile_options: bool | None = None
    rounds: int | None = Field(default=None, ge=1, le=1000)

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.model_dump().items() if v is not None}


class LLMConfig(_Strict):
    """An OpenAI-compatible endpoint. The key comes only from the environment variable named here."""

    base_url: str
    model: str
    api_key_env: str = DEFAULT_KEY_ENV

    @model_validator(mode="before")
    @classmethod
    def _no_literal_secret(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for k in data:
                if str(k).lower() in SECRET_KEYS:
                    raise _KeyError(str(k), "a literal key does not belong in the file (it would be "
                                    "committed); store it as a secret and name its environment "
                                    f"variable in llm.api_key_env (default {DEFAULT_KEY_ENV})")
        return data

    @field_validator("base_url")
    @classmethod
    def _url(cls, v: str) -> str:
        if not re.match(r"^https?://[^\s]+$", v):
            raise ValueError(f"{v!r} is not an http(s) URL")
        if re.match(r"^https?://[^/\s]*:[^/\s]*@", v):
            raise ValueError("must not carry credentials; name a secret in llm.api_key_env")
        return v

    @field_validator("api_key_env")
    @classmethod
    def _env(cls, v: str) -> str:
        if not ENV_NAME_RE.match(v):
            raise ValueError(f"must name an environment variable (like {DEFAULT_KEY_ENV}), not hold a key")
        return v

    def as_dict(self) -> dict[str, Any]:
        """What the engine gets: where the key is, never the key (the engine reads the variable)."""
        return {"base_url": self.base_url, "model": self.model, "api_key_env": self.api_key_env}


class PublishConfig(_Strict):
    draft: bool = True
    labels: list[str] = Field(default_factory=list)
    reviewers: list[str] = Field(default_factory=list)
    max_open_proposals: int = Field(default=5, ge=0, le=100)

    @field_validator("reviewers")
    @classmethod
    def _logins(cls, v: list[str]) -> list[str]:
        for i, login in enumerate(v):
            if not re.match(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})$", login):
                raise _ItemError(i, f"{login!r} is not a GitHub login")
        return v

    @field_validator("labels")
    @classmethod
    def _labels(cls, v: list[str]) -> list[str]:
        for i, label in enumerate(v):
            if not label.strip() or len(label) > 50:
                raise _ItemError(i, f"{label!r} is not a label (1-50 characters)")
        return v


class KerneloptConfig(_Strict):
    """The whole file. ``target_lines`` maps target names to their line in the file (annotations)."""

    version: Literal[1] = 1
    targets: list[TargetConfig]
    budget: BudgetConfig = Field(default_factory=BudgetConfig)
    gamma: float = Field(default=1.03, ge=1.0, le=10.0)
    llm: LLMConfig | None = None
    publish: PublishConfig = Field(default_factory=PublishConfig)
    ignore: list[str] = Field(default_factory=list)
    target_lines: dict[str, int] = Field(default_factory=dict, exclude=True)

    @model_validator(mode="after")
    def _names(self) -> KerneloptConfig:
        seen: set[str] = set()
        for i, t in enumerate(self.targets):
            if t.name in seen:
                raise _PathError(("targets", i, "name"), f"{t.name!r} is used by two targets")
            seen.add(t.name)
        for i, name in enumerate(self.ignore):
            if name not in seen:
                raise _PathError(("ignore", i), f"{name!r} is not a target name")
        return self

    def active_targets(self) -> list[TargetConfig]:
        """Targets not listed under ``ignore``."""
        return [t for t in self.targets if t.name not in self.ignore]

    def target(self, name: str) -> TargetConfig | None:
        return next((t for t in self.targets if t.name == name), None)


# --- errors: pydantic's are accurate but verbose; users get one line with the field path ---------


class _ItemError(ValueError):
    """A list item is wrong: the path gets ``[i]``."""

    def __init__(self, index: int, message: str) -> None:
        super().__init__(message)
        self.suffix: tuple[int | str, ...] = (index,)


class _KeyError(ValueError):
    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.suffix: tuple[int | str, ...] = (key,)


class _PathError(ValueError):
    """An error found across fields: the path is absolute, not relative to the validator."""

    def __init__(self, path: tuple[int | str, ...], message: str) -> None:
        super().__init__(message)
        self.path = path


def format_loc(loc: tuple[int | str, ...] | list[int | str]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(top level)"


def _one_error(err: dict[str, Any]) -> tuple[str, str]:
    loc: tuple[int | str, ...] = tuple(p for p in err.get("loc", ()) if not (isinstance(p, str) and "[" in p))
    kind = err.get("type", "")
    ctx = err.get("ctx") or {}
    exc = ctx.get("error")
    if isinstance(exc, _PathError):
        return format_loc(exc.path), str(exc)
    if isinstance(exc, _ItemError | _KeyError):
        return format_loc(loc + exc.suffix), str(exc)
    if kind == "value_error" and exc is not None:
        return format_loc(loc), str(exc)
    if kind == "missing":
        return format_loc(loc), "is required"
    if kind == "extra_forbidden":
        return format_loc(loc), "is not a known setting (check the spelling)"
    if kind == "literal_error":
        expected = str(ctx.get("expected", "")).replace("'", "").replace(" or ", ", ")
        return format_loc(loc), f"{err.get('input')!r} is not one of {expected}"
    msg = str(err.get("msg", "invalid"))
    return format_loc(loc), msg[0].lower() + msg[1:] if msg else "invalid"


def describe_validation_error(exc: ValidationError, source: str) -> str:
    # An unknown key explains the "missing" error it usually comes with (a typo): show it first.
    errors = sorted(exc.errors(), key=lambda e: e.get("type") != "extra_forbidden")
    where, msg = _one_error(errors[0])
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{source}: {where}: {msg}{more}"


def _target_lines(text: str) -> dict[str, int]:
    """Line (1-based) of each target's ``name`` in the file, for annotations on failures."""
    lines: dict[str, int] = {}
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return lines
    if not isinstance(root, yaml.MappingNode):
        return lines
    for key, value in root.value:
        if key.value == "targets" and isinstance(value, yaml.SequenceNode):
            for item in value.value:
                if isinstance(item, yaml.MappingNode):
                    for k, v in item.value:
                        if k.value == "name" and isinstance(v, yaml.ScalarNode):
                            lines[str(v.value)] = k.start_mark.line + 1
    return lines


def parse_config(text: str, source: str = DEFAULT_CONFIG, root: Path | None = None) -> KerneloptConfig:
    """Validate config text. With ``root``, file entries must exist under it."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise BadInputError(f"{source}: {where}not valid YAML: {problem}") from exc
    if data is None:
        raise BadInputError(f"{source}: the file is empty (it needs at least 'targets:')")
    if not isinstance(data, dict):
        raise BadInputError(f"{source}: expected a mapping at the top level, got {type(data).__name__}")
    try:
        cfg = KerneloptConfig.model_validate({**data, "target_lines": _target_lines(text)})
    except ValidationError as exc:
        raise BadInputError(describe_validation_error(exc, source)) from exc
    if root is not None:
        for i, t in enumerate(cfg.targets):
            if not t.module_entry and not (root / t.entry).is_file():
                raise BadInputError(f"{source}: targets[{i}].entry: {t.entry!r} does not exist "
                                    f"under {root}")
    return cfg


def load_config(path: str | Path, *, check_entries: bool = True) -> KerneloptConfig:
    """Read and validate ``.kernelopt.yml``; file entries are resolved against the file's folder."""
    p = Path(path)
    try:
        text = p.read_text()
    except FileNotFoundError as exc:
        raise BadInputError(f"{p}: no such file (the bot needs a {DEFAULT_CONFIG} in the repository)") from exc
    except OSError as exc:
        raise BadInputError(f"{p}: cannot read: {exc.strerror or exc}") from exc
    return parse_config(text, source=str(path), root=p.resolve().parent if check_entries else None)


# --- what decides where a secret goes comes from the base branch --------------------------------


def llm_section(text: str | None) -> Any:
    """The raw ``llm`` mapping of a config file's text (None when absent or unreadable)."""
    if not text:
        return None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return {"unreadable": True}
    return data.get("llm") if isinstance(data, dict) else None


def base_llm(base_text: str | None, source: str) -> LLMConfig | None:
    """The LLM settings of the base branch's config: None when it has none or cannot be read.

    ``llm.base_url`` receives the key, ``llm.api_key_env`` chooses which secret is sent, and the
    model decides what it is spent on, so a PR must not choose any of them: a run uses the base
    branch's ``llm`` section and the PR's own takes effect only once merged.
    """
    if not base_text:
        return None
    try:
        return parse_config(base_text, source=source).llm
    except BadInputError:
        return None


def with_base_llm(cfg: KerneloptConfig, base_text: str | None, source: str) -> KerneloptConfig:
    """``cfg`` (the PR's) with its ``llm`` section replaced by the base branch's."""
    return cfg.model_copy(update={"llm": base_llm(base_text, source)})


def llm_change_note(base_text: str | None, head_text: str | None, config_path: str = DEFAULT_CONFIG) -> str | None:
    """A note for the report when the PR changes the ``llm`` section, else None."""
    if llm_section(base_text) == llm_section(head_text):
        return None
    return (f"This PR changes the llm section of {config_path}. Where the LLM key goes is decided by the base "
            "branch: this run used the base branch's llm settings; the PR's apply once it is merged.")
