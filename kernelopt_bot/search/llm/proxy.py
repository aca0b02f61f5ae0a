"""The LLM key stays in the trusted parent: a forwarding proxy on a Unix domain socket.

The engine process imports PR code and runs candidates, so it must not hold the LLM key. The
trusted parent starts :class:`LLMProxy` (stdlib ``http.server`` in a thread) on a Unix socket in a
private folder; the engine's OpenAI client talks to ``http://kernelopt-llm/v1`` over that socket
(a filesystem socket works across network namespaces) with a placeholder key. The proxy accepts
only the two OpenAI-compatible calls the client makes (``POST /v1/chat/completions``,
``GET /v1/models``), pins the model to the configured one, adds ``Authorization: Bearer <key>``,
forwards to the one upstream from trusted configuration (no redirects followed), relays status
and body with the key redacted, and stops answering once the run's token or request budget is
spent (a backstop: the engine's own budget normally stops first).

An upstream that refuses the connection is answered ``502`` with the error type
:data:`UPSTREAM_REFUSED`, which the client treats as it treats a refused connection: the endpoint
is unavailable, no retries, the tuner goes on alone.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import socketserver
import tempfile
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler
from typing import Any

from kernelopt_bot.search.llm.client import UPSTREAM_REFUSED
from kernelopt_bot.search.llm.config import LLMSettings

PROXY_BASE_URL = "http://kernelopt-llm/v1"  # what the engine's client is given; the host is never resolved
BUDGET_SPENT = "kernelopt_budget_spent"
MAX_BODY_BYTES = 8 << 20
MAX_COMPLETION_TOKENS = 16_384  # one reply at most; the run's budget is checked between requests


def _sanitized(request: dict[str, Any], model: str) -> dict[str, Any] | None:
    """The request with only the fields our client sends: the configured model (whatever the
    engine asks), the messages, a temperature, and ``max_tokens`` clamped, so one request cannot
    ask for many choices or an unbounded reply past the run's token budget."""
    messages = request.get("messages")
    if not isinstance(messages, list) or not all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
            for m in messages):
        return None
    clean: dict[str, Any] = {"model": model,
                             "messages": [{"role": m["role"], "content": m["content"]} for m in messages]}
    temperature = request.get("temperature")
    if isinstance(temperature, (int, float)) and not isinstance(temperature, bool):
        clean["temperature"] = min(max(float(temperature), 0.0), 2.0)
    limit = request.get("max_tokens")
    clean["max_tokens"] = (min(limit, MAX_COMPLETION_TOKENS)
                           if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0
                           else MAX_COMPLETION_TOKENS)
    return clean
CHARS_PER_TOKEN = 4
_ROUTES = {("POST", "/v1/chat/completions"): "/chat/completions", ("GET", "/v1/models"): "/models"}


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # a redirect would carry the key elsewhere: relay the 3xx instead


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    proxy: LLMProxy


class LLMProxy:
    """Forward the engine's LLM calls to ``settings.base_url`` with the key; a context manager."""

    def __init__(self, settings: LLMSettings, *, max_tokens: int | None = None,
                 max_requests: int | None = None) -> None:
        self.settings = settings
        self.max_tokens, self.max_requests = max_tokens, max_requests
        self.tokens_used = self.requests = 0
        self._lock = threading.Lock()
        self._key = settings.api_key.get_secret_value() if settings.api_key else None
        self._opener = urllib.request.build_opener(_NoRedirect)
        self.folder = tempfile.mkdtemp(prefix="kernelopt-llm-")
        self.socket_path = os.path.join(self.folder, "llm.sock")
        self._server = _Server(self.socket_path, _Handler)
        self._server.proxy = self
        self._thread = threading.Thread(target=self._server.serve_forever, name="kernelopt-llm-proxy", daemon=True)
        self._thread.start()

    def engine_settings(self) -> dict[str, Any]:
        """The ``llm`` options the engine gets: the proxy, the model, no key."""
        return {"base_url": PROXY_BASE_URL, "model": self.settings.model, "unix_socket": self.socket_path}

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> LLMProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- one request ---------------------------------------------------------------------------

    def admit(self) -> str | None:
        """Count a request; the reason it is refused when the run's budget is spent."""
        with self._lock:
            if self.max_requests is not None and self.requests >= self.max_requests:
                return f"the run's LLM request budget ({self.max_requests}) is spent"
            if self.max_tokens is not None and self.tokens_used >= self.max_tokens:
                return f"the run's token budget ({self.max_tokens}) is spent"
            self.requests += 1
            return None

    def charge(self, request: bytes, response: bytes) -> None:
        try:
            usage = json.loads(response).get("usage") or {}
            tokens = int(usage.get("total_tokens") or 0) or (
                int(usage.get("prompt_tokens") or 0) + int(usage.get("completion_tokens") or 0))
        except (ValueError, TypeError, AttributeError):
            tokens = 0
        if tokens <= 0:
            tokens = (len(request) + len(response)) // CHARS_PER_TOKEN + 1
        with self._lock:
            self.tokens_used += tokens

    def forward(self, method: str, upstream_path: str, body: bytes | None) -> tuple[int, bytes, dict[str, str]]:
        url = self.settings.base_url + upstream_path
        headers = {"Accept": "application/json", "User-Agent": "kernelopt-llm-proxy"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        request = urllib.request.Request(url, data=body, headers=headers, method=method)
        try:
            with self._opener.open(request, timeout=self.settings.timeout_s) as response:
                return response.status, response.read(), _relayed(response.headers)
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read(), _relayed(exc.headers)
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, ConnectionRefusedError):
                return _error(502, UPSTREAM_REFUSED, f"cannot connect to {self.settings.base_url}: connection "
                                                     "refused (is the server running?)")
            if isinstance(exc.reason, (TimeoutError, socket.timeout)):
                return _error(504, "timeout", f"{self.settings.base_url} did not answer within "
                                              f"{self.settings.timeout_s:g}s")
            return _error(502, "upstream_error", f"connection to {self.settings.base_url} failed: {exc.reason}")
        except (TimeoutError, OSError) as exc:
            return _error(504 if isinstance(exc, TimeoutError) else 502, "upstream_error",
                          f"connection to {self.settings.base_url} failed: {type(exc).__name__}")

    def redact(self, data: bytes) -> bytes:
        return data.replace(self._key.encode(), b"***") if self._key else data


def _relayed(headers: Any) -> dict[str, str]:
    keep = ("Content-Type", "Retry-After", "retry-after-ms", "x-request-id")
    return {name: headers[name] for name in keep if headers and headers.get(name)}


def _error(status: int, kind: str, message: str) -> tuple[int, bytes, dict[str, str]]:
    body = json.dumps({"error": {"message": message, "type": kind, "code": kind, "param": None}}).encode()
    return status, body, {"Content-Type": "application/json"}


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def address_string(self) -> str:
        return "engine"

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def _handle(self, method: str) -> None:
        proxy = self.server.proxy
        path = self.path.split("?", 1)[0]
        upstream_path = _ROUTES.get((method, path))
        body: bytes | None = None
        if method == "POST":
            try:
                length = int(self.headers.get("Content-Length") or "")
            except ValueError:
                length = -1  # missing, not a number, or a chunked body: never read to the end
            if not 0 <= length <= MAX_BODY_BYTES or self.headers.get("Transfer-Encoding"):
                self._send(*_error(413, "too_large", "request body too large"))
                self.close_connection = True
                return
            body = self.rfile.read(length)
        if upstream_path is None:
            self._send(*_error(404, "not_found", f"the kernelopt proxy forwards only {', '.join(' '.join(r) for r in _ROUTES)}"))
            return
        if body is not None:
            try:
                request = json.loads(body)
                if not isinstance(request, dict):
                    raise ValueError("not an object")
            except ValueError:
                self._send(*_error(400, "invalid_request", "the body is not a JSON object"))
                return
            request = _sanitized(request, proxy.settings.model)
            if request is None:
                self._send(*_error(400, "invalid_request", "expected messages as a list of role/content objects"))
                return
            body = json.dumps(request).encode()
        refused = proxy.admit()
        if refused is not None:
            self._send(*_error(403, BUDGET_SPENT, refused))
            return
        status, data, headers = proxy.forward(method, upstream_path, body)
        if body is not None and status == 200:
            proxy.charge(body, data)
        self._send(status, proxy.redact(data), headers)

    def _send(self, status: int, data: bytes, headers: dict[str, str]) -> None:
        with contextlib.suppress(OSError):
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
