"""The one way the bot talks to an LLM: ``openai.OpenAI`` against any compatible endpoint.

The ``openai`` client's own retries are switched off (``max_retries=0``) so that every attempt
passes through this module: it checks the :class:`~kernelopt_bot.search.budget.Budget` before
each request is sent, retries only what is worth retrying (429, 408, 5xx gateway errors,
timeouts, dropped connections and garbled bodies) with exponential backoff and jitter, honours
``Retry-After``, and charges the tokens and cost of every reply to the budget.

Endpoint trouble of any kind surfaces as exactly one exception, :class:`LLMUnavailable`, with a
one-line reason; the orchestrator catches it and falls back to the timed tuner. A refused
call raises :class:`~kernelopt_bot.search.budget.BudgetExceeded` instead. The API key never
appears in a log line or an exception message.
"""

from __future__ import annotations

import email.utils
import logging
import random
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import openai

from kernelopt_bot.errors import KerneloptError
from kernelopt_bot.search.budget import LLM_RESOURCES, Budget, BudgetExceeded
from kernelopt_bot.search.llm.config import LLMConfigError, LLMSettings

UPSTREAM_REFUSED = "kernelopt_upstream_refused"  # the proxy's error type (search/llm/proxy.py)

log = logging.getLogger(__name__)

RETRYABLE_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
# Without usage in the reply (some self-hosted servers), tokens are estimated at this many
# characters per token so that the token budget still bites.
CHARS_PER_TOKEN = 4
# Sent as the key when none is configured: the openai client insists on one, and servers that
# need no key ignore it.
_NO_KEY = "kernelopt-no-key"

Message = dict[str, str]


class LLMUnavailable(KerneloptError):
    """The endpoint could not give a reply: down, refusing, rejecting the key, or still failing
    after the retries. ``status`` is the last HTTP status seen (``None`` without one)."""

    def __init__(self, reason: str, *, status: int | None = None, attempts: int = 0) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status
        self.attempts = attempts


@dataclass(frozen=True)
class LLMReply:
    """A reply's text and what it cost. ``latency_s`` spans every attempt, waits included."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    latency_s: float
    attempts: int = 1
    cost: float | None = None
    finish_reason: str | None = None
    usage_estimated: bool = False

    @property
    def truncated(self) -> bool:
        """The model stopped at its output limit; code in the reply may be cut off."""
        return self.finish_reason == "length"


class _Retry(Exception):
    """An attempt failed in a way worth another try."""

    def __init__(self, reason: str, *, status: int | None = None, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status
        self.retry_after = retry_after


class LLMClient:
    """Chat completions with bounded retries, budget checks and usage accounting.

    ``sleep`` and ``rng`` are injectable for tests; ``http_client`` is passed to ``openai.OpenAI``
    (proxies, custom CA bundles).
    """

    def __init__(
        self,
        settings: LLMSettings,
        budget: Budget | None = None,
        *,
        sleep: Callable[[float], None] = time.sleep,
        rng: Callable[[], float] = random.random,
        http_client: Any = None,
    ) -> None:
        self.settings = settings
        self.budget = budget if budget is not None else Budget()
        if self.budget.max_cost is not None and not settings.prices_known:
            raise LLMConfigError("llm settings: a cost budget needs price_input_per_1k and price_output_per_1k")
        self._sleep = sleep
        self._rng = rng
        self._secret = settings.api_key.get_secret_value() if settings.api_key else None
        kwargs: dict[str, Any] = {
            "base_url": settings.base_url,
            "api_key": self._secret or _NO_KEY,
            "timeout": settings.timeout_s,
            "max_retries": 0,
        }
        if http_client is None and settings.unix_socket:
            http_client = _unix_socket_client(settings.unix_socket)
        if http_client is not None:
            kwargs["http_client"] = http_client
        self._openai = openai.OpenAI(**kwargs)
        self._lock = threading.Lock()
        self.calls: list[dict[str, Any]] = []  # one record per chat(): purpose, tokens, latency, outcome

    def close(self) -> None:
        self._openai.close()

    def __enter__(self) -> LLMClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the call --------------------------------------------------------------------------

    def chat(
        self,
        messages: Sequence[Message],
        *,
        purpose: str,
        require: Iterable[str] = LLM_RESOURCES,
        max_tokens: int | None = None,
        temperature: float | None = None,
        budget: Budget | None = None,
    ) -> LLMReply:
        """Send ``messages`` and return the reply.

        ``purpose`` (``"planner"``, ``"coder"``, ...) labels the call in logs and in the budget's
        per-purpose usage. ``require`` names the budget resources that must be left before each
        attempt is sent; ``budget`` replaces the client's own for this call (a per-kernel budget
        over a shared client). Raises :class:`LLMUnavailable` or :class:`BudgetExceeded`, nothing
        else.
        """
        require = tuple(require)
        settings = self.settings
        budget = budget if budget is not None else self.budget
        if budget.max_cost is not None and not settings.prices_known:
            raise LLMConfigError("llm settings: a cost budget needs price_input_per_1k and price_output_per_1k")
        attempts_allowed = settings.max_retries + 1
        started = time.monotonic()
        last: _Retry | None = None
        for attempt in range(1, attempts_allowed + 1):
            budget.require(require, what=f"LLM call ({purpose})")
            try:
                reply = self._attempt(messages, max_tokens=max_tokens, temperature=temperature)
            except _Retry as exc:
                last = exc
                log.info("llm %s: attempt %d/%d failed: %s", purpose, attempt, attempts_allowed, exc.reason)
                if attempt == attempts_allowed:
                    break
                try:
                    delay = self._delay(attempt, exc)
                except LLMUnavailable as unavailable:
                    self._record(purpose, "unavailable", attempt, time.monotonic() - started)
                    log.warning("llm %s: unavailable: %s", purpose, unavailable.reason)
                    raise
                left = budget.wall_s_left()
                if left is not None and delay >= left:
                    self._record(purpose, "budget", attempt, time.monotonic() - started)
                    raise BudgetExceeded(f"LLM call ({purpose}) refused: the wall-time budget ends before the "
                                         f"retry in {delay:.1f}s", "wall_s") from None
                self._sleep(delay)
                continue
            except LLMUnavailable as exc:
                exc.attempts = attempt
                self._record(purpose, "unavailable", attempt, time.monotonic() - started)
                log.warning("llm %s: unavailable: %s", purpose, exc.reason)
                raise
            text, prompt_tokens, completion_tokens, finish, estimated = reply
            if estimated:
                prompt_tokens = sum(len(m.get("content") or "") for m in messages) // CHARS_PER_TOKEN + 1
                completion_tokens = len(text) // CHARS_PER_TOKEN + 1
            cost = settings.cost(prompt_tokens, completion_tokens)
            budget.charge_tokens(prompt_tokens, completion_tokens, purpose=purpose)
            if cost is not None:
                budget.charge_cost(cost)
            latency = time.monotonic() - started
            self._record(purpose, "ok", attempt, latency, prompt_tokens, completion_tokens, cost)
            log.info("llm %s: %d+%d tokens in %.2fs (%d attempt%s)%s", purpose, prompt_tokens, completion_tokens,
                     latency, attempt, "" if attempt == 1 else "s", " [usage estimated]" if estimated else "")
            return LLMReply(text, prompt_tokens, completion_tokens, latency, attempt, cost, finish, estimated)
        assert last is not None
        self._record(purpose, "unavailable", attempts_allowed, time.monotonic() - started)
        reason = f"{last.reason} (gave up after {attempts_allowed} attempt{'s' if attempts_allowed > 1 else ''})"
        log.warning("llm %s: unavailable: %s", purpose, reason)
        raise LLMUnavailable(self._redact(reason), status=last.status, attempts=attempts_allowed)

    def _attempt(self, messages: Sequence[Message], *, max_tokens: int | None,
                 temperature: float | None) -> tuple[str, int, int, str | None, bool]:
        settings = self.settings
        kwargs: dict[str, Any] = {"model": settings.model, "messages": list(messages)}
        temp = temperature if temperature is not None else settings.temperature
        if temp is not None:
            kwargs["temperature"] = temp
        limit = max_tokens if max_tokens is not None else settings.max_tokens
        if limit is not None:
            kwargs["max_tokens"] = limit
        try:
            response = self._openai.chat.completions.create(**kwargs)
        except openai.APITimeoutError:
            raise _Retry(f"timed out after {settings.timeout_s:g}s") from None
        except openai.APIConnectionError as exc:
            if _refused(exc):
                raise LLMUnavailable(f"cannot connect to {settings.base_url}: connection refused "
                                     "(is the server running?)") from None
            raise _Retry(f"connection to {settings.base_url} failed: {_cause_text(exc)}") from None
        except openai.APIStatusError as exc:
            raise self._status_error(exc) from None
        except openai.OpenAIError as exc:  # response validation and other client-side failures
            raise _Retry(f"unusable response: {type(exc).__name__}: {_short(str(exc))}") from None
        except (ValueError, TypeError, KeyError) as exc:  # a 200 whose body is not JSON
            raise _Retry(f"malformed response body ({type(exc).__name__}: {_short(str(exc))})") from None
        return _read_response(response)

    def _status_error(self, exc: openai.APIStatusError) -> Exception:
        status = exc.status_code
        message = _short(_error_message(exc))
        if status == 502 and _error_type(exc) == UPSTREAM_REFUSED:
            # The parent's proxy could not connect upstream: what a refused connection means here.
            return LLMUnavailable(self._redact(message))
        if status in RETRYABLE_STATUS:
            return _Retry(f"HTTP {status}: {message}", status=status, retry_after=_retry_after(exc.response))
        hint = ""
        if status in (401, 403):
            hint = " (check KERNELOPT_LLM_API_KEY)" if self._secret else " (no API key set: KERNELOPT_LLM_API_KEY)"
        elif status == 404:
            hint = f" (check the base URL {self.settings.base_url} and model {self.settings.model!r})"
        return LLMUnavailable(self._redact(f"HTTP {status}: {message}{hint}"), status=status)

    def _delay(self, attempt: int, exc: _Retry) -> float:
        s = self.settings
        if exc.retry_after is not None:
            if exc.retry_after > s.max_retry_after_s:
                raise LLMUnavailable(self._redact(f"{exc.reason}; Retry-After {exc.retry_after:.0f}s is longer "
                                                  f"than max_retry_after_s={s.max_retry_after_s:g}"),
                                     status=exc.status, attempts=attempt)
            # Honour the server's wait, plus a little jitter so parallel workers do not stampede.
            return exc.retry_after + min(1.0, 0.1 * exc.retry_after) * self._rng()
        backoff = min(s.backoff_max_s, s.backoff_base_s * (2 ** (attempt - 1)))
        return backoff * (0.5 + 0.5 * self._rng())  # "equal jitter"

    def _record(self, purpose: str, outcome: str, attempts: int, latency: float, prompt_tokens: int = 0,
                completion_tokens: int = 0, cost: float | None = None) -> None:
        with self._lock:
            self.calls.append({"purpose": purpose, "outcome": outcome, "attempts": attempts,
                               "latency_s": round(latency, 3), "prompt_tokens": prompt_tokens,
                               "completion_tokens": completion_tokens, "cost": cost})

    def _redact(self, text: str) -> str:
        if self._secret and self._secret in text:
            text = text.replace(self._secret, "***")
        return text


def _read_response(response: Any) -> tuple[str, int, int, str | None, bool]:
    """Text, usage and finish reason from a completion, tolerating what servers leave out."""
    choices = getattr(response, "choices", None)
    if not isinstance(choices, list):
        raise _Retry(f"malformed response: no choices ({type(response).__name__})")
    text, finish = "", None
    if choices:
        choice = choices[0]
        message = getattr(choice, "message", None)
        content = getattr(message, "content", None)
        text = content if isinstance(content, str) else ""
        finish = getattr(choice, "finish_reason", None)
    usage = getattr(response, "usage", None)
    prompt = getattr(usage, "prompt_tokens", None)
    completion = getattr(usage, "completion_tokens", None)
    if isinstance(prompt, int) and isinstance(completion, int):
        return text, prompt, completion, finish, False
    return text, 0, 0, finish, True


def _retry_after(response: Any) -> float | None:
    """Seconds from ``retry-after-ms``, ``Retry-After`` (seconds or an HTTP date), else ``None``."""
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _error_message(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
        if isinstance(err, str):
            return err
    text = getattr(exc, "message", "") or str(exc)
    return text.removeprefix(f"Error code: {exc.status_code} - ").removeprefix(f"Error code: {exc.status_code}") or (
        "no message")


def _error_type(exc: openai.APIStatusError) -> str | None:
    body = exc.body
    error = body.get("error", body) if isinstance(body, dict) else None
    return error.get("type") if isinstance(error, dict) else None


def _unix_socket_client(path: str) -> Any:
    """An HTTP client for openai that reaches every URL through the Unix socket ``path``."""
    try:
        import httpx2 as httpx  # what this openai release is built on
    except ImportError:  # pragma: no cover - openai releases built on httpx
        import httpx  # type: ignore[no-redef]
    return openai.DefaultHttpxClient(transport=httpx.HTTPTransport(uds=path))


def _refused(exc: BaseException) -> bool:
    seen: set[int] = set()
    node: BaseException | None = exc
    while node is not None and id(node) not in seen:
        seen.add(id(node))
        if isinstance(node, ConnectionRefusedError) or "connection refused" in str(node).lower():
            return True
        node = node.__cause__ or node.__context__
        if node is None:
            break
        # httpx wraps the OSError in its args as well as in __cause__.
        for arg in getattr(node, "args", ()):
            if isinstance(arg, ConnectionRefusedError):
                return True
    return False


def _cause_text(exc: BaseException) -> str:
    cause = exc.__cause__ or exc.__context__
    return _short(f"{type(cause).__name__}: {cause}" if cause else str(exc))


def _short(text: str, limit: int = 200) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"
