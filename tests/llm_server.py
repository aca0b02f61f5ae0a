"""A scripted OpenAI-compatible chat-completions server on loopback, for the LLM agent tests.

The real ``openai`` client talks to it over HTTP, so retries, timeouts, headers and parsing are the
client's own. Each test queues the responses it wants (:func:`reply`, :func:`rate_limited`,
:func:`server_error`, :func:`slow`, :func:`malformed`, ...); every request is recorded with its
headers and JSON body so a test can assert on prompts, on the bearer key, and on how many
requests reached the server. With the queue empty the server answers 500 ``script exhausted``.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Step:
    """One scripted response."""

    status: int = 200
    content: str | None = ""
    headers: dict[str, str] = field(default_factory=dict)
    raw_body: bytes | None = None  # sent as is instead of a chat completion (malformed bodies)
    delay_s: float = 0.0
    prompt_tokens: int | None = None  # None: estimated from the request (chars / 4)
    completion_tokens: int | None = None
    include_usage: bool = True
    finish_reason: str = "stop"


def reply(text: str, *, prompt_tokens: int | None = None, completion_tokens: int | None = None,
          finish_reason: str = "stop", include_usage: bool = True) -> Step:
    return Step(200, text, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                finish_reason=finish_reason, include_usage=include_usage)


def rate_limited(retry_after: str | float = "1") -> Step:
    return Step(429, headers={"Retry-After": str(retry_after)},
                raw_body=_error_body("Rate limit reached, slow down", "rate_limit_exceeded"))


def server_error(status: int = 500, message: str = "internal error") -> Step:
    return Step(status, raw_body=_error_body(message, "server_error"))


def slow(delay_s: float, text: str = "late reply") -> Step:
    return Step(200, text, delay_s=delay_s)


def malformed() -> Step:
    """A 200 whose JSON body is cut off mid-object."""
    return Step(200, raw_body=b'{"id": "chatcmpl-broken", "object": "chat.completion", "choices": [{"ind')


def _error_body(message: str, code: str) -> bytes:
    return json.dumps({"error": {"message": message, "type": code, "code": code, "param": None}}).encode()


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]  # lower-case names
    body: Any
    at: float  # time.monotonic() when the request arrived

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list(self.body.get("messages", [])) if isinstance(self.body, dict) else []

    def text_of(self, role: str) -> str:
        return "\n".join(str(m.get("content", "")) for m in self.messages if m.get("role") == role)


class LLMTestServer:
    """``ThreadingHTTPServer`` on 127.0.0.1 with an ephemeral port, run in a daemon thread."""

    def __init__(self, model: str = "test-model") -> None:
        self.model = model
        self._steps: deque[Step] = deque()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.requests: list[RecordedRequest] = []
        self.log_lines: list[str] = []
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> LLMTestServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                with server._lock:
                    server.log_lines.append(format % args)

            def do_GET(self) -> None:
                server._record(self, None)
                if self.path.rstrip("/").endswith("/models"):
                    self._send(200, json.dumps({"object": "list", "data": [
                        {"id": server.model, "object": "model", "created": 0, "owned_by": "test"}]}).encode())
                else:
                    self._send(404, _error_body("not found", "not_found"))

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw.decode("utf-8", "replace")
                server._record(self, body)
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send(404, _error_body(f"no route {self.path}", "not_found"))
                    return
                step = server._next_step()
                if step.delay_s and server._stop.wait(step.delay_s):
                    return
                payload = step.raw_body if step.raw_body is not None else server._completion(step, body)
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the client gave up
                    self._send(step.status, payload, step.headers)

            def _send(self, status: int, payload: bytes, headers: dict[str, str] | None = None) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(payload)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), name="llm-test-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> LLMTestServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- script and records ------------------------------------------------------------------

    @property
    def port(self) -> int:
        assert self._httpd is not None, "server not started"
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def script(self, *steps: Step | str) -> None:
        """Queue responses; a plain string is a normal reply with that text."""
        with self._lock:
            self._steps.extend(reply(s) if isinstance(s, str) else s for s in steps)

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._steps)

    @property
    def request_count(self) -> int:
        with self._lock:
            return len(self.requests)

    @property
    def chat_requests(self) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if r.path.rstrip("/").endswith("/chat/completions")]

    def _record(self, handler: BaseHTTPRequestHandler, body: Any) -> None:
        rec = RecordedRequest(handler.command, handler.path, {k.lower(): v for k, v in handler.headers.items()},
                              body, time.monotonic())
        with self._lock:
            self.requests.append(rec)

    def _next_step(self) -> Step:
        with self._lock:
            if self._steps:
                return self._steps.popleft()
        return server_error(500, "script exhausted: the test queued no response for this request")

    def _completion(self, step: Step, body: Any) -> bytes:
        messages = body.get("messages", []) if isinstance(body, dict) else []
        prompt_chars = sum(len(str(m.get("content", ""))) for m in messages if isinstance(m, dict))
        prompt_tokens = step.prompt_tokens if step.prompt_tokens is not None else prompt_chars // 4 + 1
        completion_tokens = (step.completion_tokens if step.completion_tokens is not None
                             else len(step.content or "") // 4 + 1)
        data: dict[str, Any] = {
            "id": f"chatcmpl-test-{len(self.requests)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", self.model) if isinstance(body, dict) else self.model,
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": step.content},
                "finish_reason": step.finish_reason,
            }],
        }
        if step.include_usage:
            data["usage"] = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                             "total_tokens": prompt_tokens + completion_tokens}
        return json.dumps(data).encode()
