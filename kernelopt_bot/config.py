"""``.kernelopt.yml``: what the bot optimizes in a repository, and how it publishes.

The file is user input read on CI, so it is validated strictly (unknown keys are errors, not
silently ignored typos, with the closest known key suggested) and every error is reported at
once, one line each naming the field path, e.g.
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

import difflib
import re
import types
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from kernelopt_bot.candidate import DEFAULT_GAMMA
from kernelopt_bot.capture.settings import CompileMode
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
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class TargetConfig(_Strict):
    """One model to optimize and the files whose changes should trigger a run on a PR."""

    name: str = Field(description="What reports, pack files (`kernelopt/packs/<name>.json`) and "
                                  "`/kernelopt run NAME` call the target: letters, digits, `.`, `_`, `-`.")
    entry: str = Field(description="A benchmark-format `.py` file relative to the repository root, or "
                                   "`package.module:factory` (returns `(model, inputs)`); for a kernel target, a "
                                   "launcher file (`launch(*inputs)`, `get_inputs()`) or a Helion kernel file.")
    kind: Literal["module", "triton", "helion"] | None = Field(
        default=None, description="What the entry is: a PyTorch `module` (the result is a pack), a `triton` "
                                  "launcher of your own kernels or a `helion` kernel (the result is a change to "
                                  "the kernel's source). Inferred from the entry when left out; a run whose entry "
                                  "is not of the stated kind fails with the reason.")
    mode: Literal["inference", "train"] = Field(
        default="inference", description="`train`: optimize a training step of a module target (forward, loss "
                                         "and backward kernels; gate 3 checks the loss and every gradient), as "
                                         "`kernelopt optimize --train` does.")
    dtypes: list[str] = Field(default_factory=lambda: ["fp32"],
                              description="Precisions to optimize, each a separate run: `fp32`, `bf16`, `fp16`.")
    device: Literal["cuda", "cpu", "auto"] = Field(
        default="auto", description="Where the target runs; `auto` is the GPU when there is one.")
    paths: list[str] = Field(default_factory=list,
                             description="Globs of files whose change on a PR runs this target (besides the "
                                         "entry and the Python files it imports).")
    compile_mode: CompileMode | None = Field(
        default=None, description="The `torch.compile` mode the model is used with: capture, search, gates and "
                                  "the baseline all compile so.")
    inductor_config: dict[str, bool | int | float | str] = Field(
        default_factory=dict, description="Inductor config the model is used with (e.g. "
                                          "`{coordinate_descent_tuning: true}`); keys are checked when the run starts.")

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

    Unset fields keep the engine's defaults (``kernelopt_bot.plan.DEFAULT_BUDGET``).
    """

    candidates: int | None = Field(default=None, ge=1, le=100_000,
                                   description="Candidates verified in the whole run (each through the gates).")
    tokens: int | None = Field(default=None, ge=0, description="LLM tokens, prompt and completion together.")
    gpu_seconds: float | None = Field(default=None, gt=0, description="GPU time for timing and verification.")
    wall_seconds: float | None = Field(default=None, gt=0,
                                       description="A deadline for one target run: no candidate starts that "
                                                   "cannot finish in it.")
    kernels: int | None = Field(default=None, ge=1, le=1000,
                                description="Kernels searched, those a faster kernel could save the most of first "
                                            "(the headroom), then by share of model time.")
    candidates_per_kernel: int | None = Field(default=None, ge=1, le=1000,
                                              description="Candidates verified per kernel.")
    cost: float | None = Field(default=None, ge=0,
                               description="LLM spending, in the unit of the endpoint's per-token prices.")
    compile_options: bool | None = Field(default=None,
                                         description="Also measure the compiler's own options (max-autotune, "
                                                     "coordinate descent, CUDA graphs) end to end.")
    rounds: int | None = Field(default=None, ge=1, le=1000,
                               description="Interleaved timing rounds of each end-to-end comparison, at most: on a GPU, a model "
                               "whose comparison of that many rounds would take over 15 s (tens of milliseconds a call) "
                               "takes as many as fit, at least 3, so its compiler options and candidates fit in the wall "
                               "budget (`run.log` says so).")
    gpu_memory_factor: float | None = Field(default=None, ge=1,
                                            description="The run's GPU memory beyond its processes' CUDA contexts, at "
                                            "most this many times what the compiled model alone holds (default 3; never "
                                            "less than 1 GiB, what a run holds whatever the model's size): model "
                                            "arms that would not fit compile one after another instead of side by side, "
                                            "and beside the search only where it leaves room. More trades memory for "
                                            "wall time (`--budget gpu_memory_factor=N`, or null for the device's free "
                                            "memory alone).")

    def as_dict(self) -> dict[str, Any]:
        """The keys the file sets: an unset key keeps the engine's default, and one set to null
        means no limit where the key takes one (``gpu_memory_factor: null``), else a clear error."""
        return self.model_dump(exclude_unset=True)


class LLMConfig(_Strict):
    """An OpenAI-compatible endpoint. The key comes only from the environment variable named here."""

    base_url: str = Field(description="An OpenAI-compatible endpoint, e.g. `https://api.example.com/v1`.")
    model: str = Field(description="The model name the endpoint serves.")
    api_key_env: str = Field(default=DEFAULT_KEY_ENV,
                             description="The environment variable that holds the key (set from a secret; "
                                         "a literal key in the file is refused).")

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
        from kernelopt_bot.harness.isolation import key_name_problem

        if not ENV_NAME_RE.match(v):
            raise ValueError(f"must name an environment variable (like {DEFAULT_KEY_ENV}), not hold a key")
        problem = key_name_problem(v)  # a name every isolated child drops: the key never reaches model code
        if problem:
            raise ValueError(problem)
        return v

    def as_dict(self) -> dict[str, Any]:
        """What the engine gets: where the key is, never the key (the engine reads the variable)."""
        return {"base_url": self.base_url, "model": self.model, "api_key_env": self.api_key_env}


class PublishConfig(_Strict):
    """How the follow-up PR is opened."""

    draft: bool = Field(default=True, description="Open the follow-up PR as a draft.")
    labels: list[str] = Field(default_factory=list, description="Labels put on the follow-up PR.")
    reviewers: list[str] = Field(default_factory=list, description="GitHub logins asked to review it.")
    max_open_proposals: int = Field(default=5, ge=0, le=100,
                                    description="At most this many of the bot's PRs open (from its `kernelopt/` "
                                                "branches of this repository; a fork's do not count); past it, "
                                                "no new one is opened.")

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

    version: Literal[1] = Field(default=1, description="The file format's version.")
    targets: list[TargetConfig] = Field(description="The models to optimize (at least one).")
    budget: BudgetConfig = Field(default_factory=BudgetConfig,
                                 description="Limits for each target run; the first one reached stops the search.")
    gamma: float = Field(default=DEFAULT_GAMMA, ge=1.0, le=10.0,
                         description="The least end-to-end speedup a replacement needs to be accepted (gate 4).")
    llm: LLMConfig | None = Field(default=None,
                                  description="LLM agents for the search; without it the timed tuner searches "
                                              "alone. Always read from the base branch's file.")
    publish: PublishConfig = Field(default_factory=PublishConfig, description="How the follow-up PR is opened.")
    ignore: list[str] = Field(default_factory=list,
                              description="Names of targets to skip (on PRs and in the nightly sweep).")
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


# --- the README's reference of every key, generated from the models above -----------------------


def reference_table() -> str:
    """A markdown table of every key of the file: path, what it takes, its default, what it does.

    The README holds this table verbatim (a test compares them), so a key added here without a
    description, or a description changed without the README, fails the tests.
    """
    from kernelopt_bot.plan import DEFAULT_BUDGET

    rows = ["| key | takes | default | what it does |", "|---|---|---|---|"]
    for path, info, nested in _walk(KerneloptConfig, ""):
        if not info.description:
            raise ValueError(f"{path}: the setting has no description")
        if info.is_required():
            default = "required"
        elif path.startswith("budget."):
            engine = DEFAULT_BUDGET[path.split(".", 1)[1]]
            default = "no limit" if engine is None else _shown(engine)
        elif nested and info.default is None:
            default = "none"
        elif nested:
            default = "—"
        else:
            value = info.get_default(call_default_factory=True)
            default = "none" if value is None or value == {} else _shown(value)
        rows.append(f"| `{path}` | {_takes(info)} | {default} | {info.description} |")
    return "\n".join(rows)


def _walk(model: type[BaseModel], prefix: str) -> Any:
    for name, info in model.model_fields.items():
        if info.exclude:
            continue
        path = f"{prefix}{name}"
        nested = _settings_model(info.annotation)
        yield path, info, nested is not None
        if nested is not None:
            is_list = any(get_origin(a) is list for a in (info.annotation, *get_args(info.annotation)))
            yield from _walk(nested, f"{path}[]." if is_list else f"{path}.")


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(map(str, value)) + "]" if value else "[]"
    return f"`{value}`" if isinstance(value, str) else str(value)


def _takes(info: Any) -> str:
    inner = info.annotation
    if get_origin(inner) in (Union, types.UnionType):  # X | None: the None is the unset default
        inner = next(a for a in get_args(inner) if a is not type(None))
    if get_origin(inner) is Literal:
        return "one of " + ", ".join(f"`{v}`" for v in get_args(inner))
    if get_origin(inner) is list:
        item = get_args(inner)[0]
        return "list of targets" if item is TargetConfig else "list of strings"
    if (isinstance(inner, type) and issubclass(inner, BaseModel)) or get_origin(inner) is dict:
        return "mapping"
    kind = {int: "integer", float: "number", bool: "true/false", str: "string"}.get(inner, str(inner))
    bounds = []
    for m in info.metadata:
        for attr, sign in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<")):
            if getattr(m, attr, None) is not None:
                bounds.append(f"{sign} {getattr(m, attr)}")
    return kind + (f" ({', '.join(bounds)})" if bounds else "")


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


def _model_at(loc: tuple[int | str, ...]) -> type[BaseModel] | None:
    """The settings model that holds the keys at ``loc`` (a path into the file), if there is one."""
    model: type[BaseModel] | None = KerneloptConfig
    for part in loc:
        if model is None:
            return None
        if isinstance(part, int):
            continue  # a list item: the element type was taken with the list
        info = model.model_fields.get(part)
        model = _settings_model(info.annotation) if info is not None else None
    return model


def _settings_model(annotation: Any) -> type[BaseModel] | None:
    """The model inside ``X``, ``X | None`` or ``list[X]``; None for a plain value."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _settings_model(arg)
        if found is not None:
            return found
    return None


def _suggestion(loc: tuple[int | str, ...]) -> str | None:
    """The known key closest to a misspelt one (``entri`` -> ``entry``), or None."""
    if not loc or not isinstance(loc[-1], str):
        return None
    model = _model_at(loc[:-1])
    if model is None:
        return None
    known = [name for name, info in model.model_fields.items() if not info.exclude]
    close = difflib.get_close_matches(loc[-1], known, n=1, cutoff=0.6)
    return close[0] if close else None


def _top_level_keys() -> set[str]:
    return {name for name, info in KerneloptConfig.model_fields.items() if not info.exclude}


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
        guess = _suggestion(loc)
        hint = f"; did you mean {guess!r}?" if guess else ""
        if not guess and len(loc) > 1 and loc[-1] in _top_level_keys():  # targets[0].budget: set for every target
            hint = f"; {loc[-1]!r} is set once for every target, at the top level of the file"
        return format_loc(loc), f"is not a known setting{hint}"
    if kind == "literal_error":
        expected = str(ctx.get("expected", "")).replace("'", "").replace(" or ", ", ")
        return format_loc(loc), f"{err.get('input')!r} is not one of {expected}"
    msg = str(err.get("msg", "invalid"))
    return format_loc(loc), msg[0].lower() + msg[1:] if msg else "invalid"


def describe_validation_error(exc: ValidationError, source: str) -> str:
    """Every problem of the file at once, one line each: ``SOURCE: PATH: what is wrong``.

    A misspelt key usually brings a "required" error for the key it was meant to be; when the
    "did you mean" of the one names the other, the redundant "is required" line is left out.
    """
    errors = exc.errors()
    meant = set()
    for err in errors:
        if err.get("type") == "extra_forbidden":
            loc = tuple(err.get("loc", ()))
            guess = _suggestion(loc)
            if guess is not None:
                meant.add((*loc[:-1], guess))
    lines = []
    for err in errors:
        if err.get("type") == "missing" and tuple(err.get("loc", ())) in meant:
            continue
        where, msg = _one_error(err)
        line = f"{source}: {where}: {msg}"
        if line not in lines:
            lines.append(line)
    return "\n".join(lines)


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
        missing = [f"{source}: targets[{i}].entry: {t.entry!r} does not exist under {root}"
                   for i, t in enumerate(cfg.targets) if not t.module_entry and not (root / t.entry).is_file()]
        if missing:
            raise BadInputError("\n".join(missing))
    return cfg


def load_config(path: str | Path, *, root: Path | None = None, check_entries: bool = True,
                source: str | None = None) -> KerneloptConfig:
    """Read and validate ``.kernelopt.yml``; errors name it as ``source`` (default: ``path``).

    File entries are paths relative to the repository root, which is ``root`` when given (the
    bot's ``--repo-root``) and otherwise the config file's folder (where the file normally lives).
    """
    p = Path(path)
    try:
        text = p.read_text()
    except FileNotFoundError as exc:
        raise BadInputError(f"{p}: no such file (the bot needs a {DEFAULT_CONFIG} in the repository)") from exc
    except OSError as exc:
        raise BadInputError(f"{p}: cannot read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise BadInputError(f"{p}: not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset {exc.start}); "
                            "save it as UTF-8") from exc
    entries_root = (root or p.resolve().parent) if check_entries else None
    return parse_config(text, source=source or str(path), root=entries_root)


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
