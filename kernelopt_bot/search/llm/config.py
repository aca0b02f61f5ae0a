"""Settings for the LLM endpoint: any OpenAI-compatible server, hosted or self-hosted.

Values come from the config file (passed in as keyword arguments) or the environment:

* ``KERNELOPT_LLM_BASE_URL`` / ``KERNELOPT_LLM_MODEL``: the endpoint and model;
* ``KERNELOPT_LLM_API_KEY``, falling back to ``OPENAI_API_KEY``: the key (or the variable named
  by ``api_key_env``, so a committed config file can say *where* the key is without holding it);
* ``KERNELOPT_LLM_TIMEOUT_S``, ``KERNELOPT_LLM_MAX_RETRIES``, ``KERNELOPT_LLM_TEMPERATURE``,
  ``KERNELOPT_LLM_PRICE_INPUT_PER_1K``, ``KERNELOPT_LLM_PRICE_OUTPUT_PER_1K``: the rest.

The key is a secret: it is kept as :class:`pydantic.SecretStr`, left out of ``repr``/``str``, and
never logged. Self-hosted servers often need no key; one is then not required.
"""

from __future__ import annotations

import contextvars
import os
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

from kernelopt_bot.errors import BadInputError

DEFAULT_BASE_URL = "https://api.openai.com/v1"
KEY_ENV_VARS = ("KERNELOPT_LLM_API_KEY", "OPENAI_API_KEY")

# Environment variable -> settings field, read by :meth:`LLMSettings.from_env`.
_ENV_FIELDS = {
    "KERNELOPT_LLM_BASE_URL": "base_url",
    "KERNELOPT_LLM_MODEL": "model",
    "KERNELOPT_LLM_TIMEOUT_S": "timeout_s",
    "KERNELOPT_LLM_MAX_RETRIES": "max_retries",
    "KERNELOPT_LLM_TEMPERATURE": "temperature",
    "KERNELOPT_LLM_MAX_TOKENS": "max_tokens",
    "KERNELOPT_LLM_PRICE_INPUT_PER_1K": "price_input_per_1k",
    "KERNELOPT_LLM_PRICE_OUTPUT_PER_1K": "price_output_per_1k",
}

# The environment :meth:`LLMSettings.from_env` reads, seen by the key fallback during construction.
_ENVIRON: contextvars.ContextVar[Mapping[str, str] | None] = contextvars.ContextVar("_ENVIRON", default=None)


class LLMConfigError(BadInputError):
    """LLM settings that cannot work; the message is one line that names the field."""


class LLMSettings(BaseModel):
    """Where the LLM is and how to talk to it.

    Construct directly (``LLMSettings(model=..., base_url=...)``) or with :meth:`from_env`; both
    raise :class:`LLMConfigError` with a one-line message on bad values.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)

    base_url: str = DEFAULT_BASE_URL
    model: str
    api_key: SecretStr | None = Field(default=None, repr=False)
    api_key_env: str | None = None
    timeout_s: float = Field(default=60.0, gt=0, le=3600)
    max_retries: int = Field(default=2, ge=0, le=10)
    temperature: float | None = Field(default=0.2, ge=0, le=2)
    max_tokens: int | None = Field(default=None, gt=0)
    price_input_per_1k: float | None = Field(default=None, ge=0)
    price_output_per_1k: float | None = Field(default=None, ge=0)
    # Retry pacing: exponential backoff from ``backoff_base_s`` (doubling, with jitter) capped at
    # ``backoff_max_s``; a Retry-After longer than ``max_retry_after_s`` is not waited for.
    backoff_base_s: float = Field(default=0.5, ge=0, le=60)
    backoff_max_s: float = Field(default=20.0, ge=0, le=600)
    max_retry_after_s: float = Field(default=60.0, ge=0, le=3600)
    # The trusted parent's forwarding proxy (kernelopt_bot.search.llm.proxy): the engine, which
    # holds no key, reaches the endpoint only through this Unix socket.
    unix_socket: str | None = None

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise LLMConfigError(_one_line(exc)) from None

    @field_validator("base_url")
    @classmethod
    def _check_base_url(cls, value: str) -> str:
        value = value.strip()
        if not value.startswith(("http://", "https://")):
            raise ValueError(f"must start with http:// or https:// (got {value[:80]!r})")
        return value.rstrip("/")

    @field_validator("model")
    @classmethod
    def _check_model(cls, value: str) -> str:
        value = value.strip()
        if not value:
            raise ValueError("must name a model (set KERNELOPT_LLM_MODEL or llm.model)")
        return value

    @field_validator("api_key", mode="before")
    @classmethod
    def _empty_key_is_none(cls, value: Any) -> Any:
        if isinstance(value, str) and not value.strip():
            return None
        return value

    def model_post_init(self, context: Any) -> None:
        # The key falls back to the environment (the one from_env was given, else os.environ).
        if self.api_key is None:
            env = _ENVIRON.get() or os.environ
            names = ((self.api_key_env,) if self.api_key_env else ()) + KEY_ENV_VARS
            for name in names:
                value = env.get(name, "").strip()
                if value:
                    object.__setattr__(self, "api_key", SecretStr(value))
                    break

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> LLMSettings:
        """Settings from ``KERNELOPT_LLM_*`` variables; non-``None`` ``overrides`` win.

        Overrides are how the config file's ``llm:`` section comes in; the key is read from the
        environment when neither the overrides nor ``api_key_env`` give one.
        """
        env = os.environ if environ is None else environ
        data: dict[str, Any] = {}
        for var, name in _ENV_FIELDS.items():
            value = env.get(var, "").strip()
            if value:
                data[name] = value
        data.update({k: v for k, v in overrides.items() if v is not None})
        if "model" not in data:
            raise LLMConfigError("llm settings: model: not set (set KERNELOPT_LLM_MODEL or llm.model)")
        token = _ENVIRON.set(env)
        try:
            return cls(**data)
        finally:
            _ENVIRON.reset(token)

    @property
    def has_api_key(self) -> bool:
        return self.api_key is not None

    @property
    def prices_known(self) -> bool:
        return self.price_input_per_1k is not None and self.price_output_per_1k is not None

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float | None:
        """Cost of one call from its token usage, or ``None`` when prices are not configured."""
        if not self.prices_known:
            return None
        assert self.price_input_per_1k is not None and self.price_output_per_1k is not None
        return prompt_tokens / 1000.0 * self.price_input_per_1k + completion_tokens / 1000.0 * self.price_output_per_1k

    def describe(self) -> str:
        """One line for logs and reports; says whether a key is set, never what it is."""
        key = "key set" if self.has_api_key else "no key"
        return f"{self.model} at {self.base_url} ({key}, timeout {self.timeout_s:g}s, retries {self.max_retries})"

    def __str__(self) -> str:
        return self.describe()


def _one_line(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err.get("loc", ())) or "settings"
        msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        if err.get("type") == "extra_forbidden":
            msg = "unknown setting"
        given = err.get("input")
        hidden = loc == "api_key" or "(got " in msg or isinstance(given, (dict, type(None)))
        shown = "" if hidden else f" (got {str(given)[:60]!r})"
        parts.append(f"{loc}: {msg}{shown}")
    return "llm settings: " + "; ".join(parts)
