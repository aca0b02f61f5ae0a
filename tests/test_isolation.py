"""Untrusted code runs where no secret is: model code and candidates cannot read the run's secrets.

The parent of each test holds fake secrets. A model file and a sandbox job look for them every way
a process of the run could (own environment, the parent's and every visible ``/proc/*/environ``,
the parent's memory, the network); none may be found, and the loopback connection must fail.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kernelopt_bot.harness.arm_process import ArmProcess, ArmSpec
from kernelopt_bot.harness.isolation import (
    Channel,
    IsolationUnavailable,
    _SafeUnpickler,
    child_environment,
    choose_isolation,
)
from kernelopt_bot.search.llm.client import LLMClient, LLMUnavailable
from kernelopt_bot.search.llm.config import LLMSettings
from kernelopt_bot.search.llm.proxy import PROXY_BASE_URL, LLMProxy
from kernelopt_bot.verify.sandbox import SandboxLimits, run_sandboxed
from tests import isolation_probe
from tests.helpers import ROOT, user_env
from tests.llm_server import LLMTestServer, reply

SECRETS = {"KERNELOPT_LLM_API_KEY": "sk-fake-llm-key-123", "GITHUB_TOKEN": "ghs_fake_token_456",
           "OPENAI_API_KEY": "sk-fake-openai-789", "MY_SERVICE_PASSWORD": "hunter2-fake"}

needs_namespaces = pytest.mark.skipif(choose_isolation().method == "none",
                                      reason="no namespace tool (bwrap, unshare) works on this machine")


class Listener:
    """A TCP server on the loopback that records whether anyone connected."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self.sock.close()


@pytest.fixture()
def listener() -> Iterator[Listener]:
    server = Listener()
    yield server
    server.close()


@pytest.fixture()
def secrets(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    return SECRETS


def assert_nothing_leaked(found: dict | list | str, secrets: dict[str, str]) -> None:
    text = json.dumps(found)
    for name, value in secrets.items():
        assert value not in text, f"{name} leaked to untrusted code"


def assert_isolated(found: dict, listener: Listener, secrets: dict[str, str]) -> None:
    assert_nothing_leaked(found, secrets)
    assert found["connect"].startswith("failed"), found["connect"]
    assert listener.accepted == 0
    assert found["uid"] != os.getuid() or found["pid"] == 1  # another user, or its own PID namespace
    assert not any(k in found["environ"] for k in secrets)


@needs_namespaces
def test_model_code_run_by_optimize_finds_no_secret(tmp_path: Path, listener: Listener,
                                                    secrets: dict[str, str]) -> None:
    """(a) and (e): through the real CLI, as a user runs it, with secrets in its environment."""
    out = tmp_path / "out"
    out.mkdir()
    target = tmp_path / "prober.py"
    target.write_text(isolation_probe.model_file(listener.port, str(out)))
    env = {**user_env(), **secrets}
    proc = subprocess.run([sys.executable, "-m", "kernelopt_bot.cli", "optimize", str(target), "--out", str(out),
                           "--store", str(tmp_path / "db"), "--budget", "candidates=0", "--device", "cpu"],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    found = isolation_probe.findings(str(out))
    assert found, "the model file did not run"
    for probe in found:
        assert_isolated(probe, listener, secrets)
    for path in out.iterdir():
        if path.is_file():
            assert_nothing_leaked(path.read_text(errors="replace"), secrets)
    method = json.loads((out / "result.json").read_text())["isolation"]
    assert method in ("bwrap", "unshare")
    assert f"isolation: {method}" in proc.stderr  # progress and notes go to stderr


@needs_namespaces
def test_gate_2_sandbox_job_finds_no_secret(listener: Listener, secrets: dict[str, str]) -> None:
    """(b) a job in the gate-2/timing sandbox (where candidates run)."""
    outcome = run_sandboxed("tests.isolation_probe.probe_job", {"port": listener.port}, device="cpu",
                            limits=SandboxLimits(timeout_s=60))
    assert outcome.ok, outcome.reason
    assert_isolated(outcome.value, listener, secrets)
    assert os.environ["GITHUB_TOKEN"] == secrets["GITHUB_TOKEN"]  # the parent keeps its environment


@needs_namespaces
def test_model_arm_finds_no_secret(tmp_path: Path, listener: Listener, secrets: dict[str, str],
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """(b) a model arm (where the packed model, and so candidates, run end to end)."""
    monkeypatch.chdir(tmp_path)  # an arm may write only its working directory (under bwrap)
    target = tmp_path / "prober.py"
    target.write_text(isolation_probe.model_file(listener.port, str(tmp_path)))
    with ArmProcess(ArmSpec("probe", str(target), "cpu", "fp32"), start_timeout_s=300) as arm:
        arm.wait_ready()
        outputs = arm.request("outputs", 0)
    assert len(outputs) == 1 and tuple(outputs[0].shape) == (8,)
    found = isolation_probe.findings(str(tmp_path))
    assert found
    for probe in found:
        assert_isolated(probe, listener, secrets)


def test_child_environment_is_an_allowlist(tmp_path: Path) -> None:
    parent = {"PATH": "/usr/bin", "LANG": "C.UTF-8", "HOME": "/root", "RANDOM_VARIABLE": "x",
              "KERNELOPT_LLM_TIMEOUT_S": "5", "KERNELOPT_DB": "/db", "TRITON_INTERPRET": "1",
              "CUDA_VISIBLE_DEVICES": "1", **SECRETS, "KERNELOPT_GITHUB_TOKEN": "t", "SSH_AUTH_SOCK": "/agent",
              "KERNELOPT_LLM_BASE_URL": "https://llm.example/v1", "LD_PRELOAD": "/evil.so"}
    env = child_environment(tmp_path, environ=parent)
    assert env["HOME"] == env["TMPDIR"] == str(tmp_path)
    assert {"PATH", "LANG", "KERNELOPT_LLM_TIMEOUT_S", "KERNELOPT_DB", "TRITON_INTERPRET",
            "CUDA_VISIBLE_DEVICES"} <= set(env)
    for name in (*SECRETS, "RANDOM_VARIABLE", "KERNELOPT_GITHUB_TOKEN", "SSH_AUTH_SOCK", "KERNELOPT_LLM_BASE_URL",
                 "LD_PRELOAD"):
        assert name not in env, name


def test_channel_refuses_to_rebuild_code() -> None:
    """A child that sends a pickle calling os.system gets an error, not a shell in the parent."""
    with pytest.raises(pickle.UnpicklingError, match="refusing"):
        _SafeUnpickler(io.BytesIO(pickle.dumps((os.system, ("echo pwned",))))).load()

    class Evil:
        def __reduce__(self) -> tuple:
            return (os.system, ("echo pwned",))

    with pytest.raises(pickle.UnpicklingError, match=r"refusing to rebuild (posix|os)\.system"):
        _SafeUnpickler(io.BytesIO(pickle.dumps(Evil()))).load()
    a, b = socket.socketpair()
    left, right = Channel(a.detach()), Channel(b.detach())
    import torch

    sent = {"t": torch.arange(6, dtype=torch.bfloat16).reshape(2, 3), "spec": ArmSpec("x", "t.py", "cpu", "fp32")}
    left.send(sent)
    got = right.recv()
    assert torch.equal(got["t"], sent["t"]) and got["t"].dtype == torch.bfloat16 and got["spec"] == sent["spec"]
    left.close()
    right.close()


def test_channel_refuses_messages_that_allocate_more_than_they_carry() -> None:
    """A few bytes from a child must not make the trusted parent allocate gigabytes."""
    amplify = (b"\x80\x04cbuiltins\nbytearray\nq\x00(" + (b"h\x00J" + (200 << 20).to_bytes(4, "little") + b"\x85R") * 5
               + b"l.")  # five bytearray(200 MiB) calls in 72 bytes
    with pytest.raises(pickle.UnpicklingError, match="refusing"):
        _SafeUnpickler(io.BytesIO(amplify)).load()
    import torch

    from kernelopt_bot.harness.isolation import _rebuild_tensor

    class Short:
        def __reduce__(self) -> tuple:
            return (_rebuild_tensor, ("float32", (1 << 20, 1 << 20), b""))  # 4 TiB asked, 0 bytes sent

    short = pickle.dumps(Short())
    with pytest.raises(pickle.UnpicklingError, match="does not fill"):
        _SafeUnpickler(io.BytesIO(short)).load()
    a, b = socket.socketpair()
    left, right = Channel(a.detach()), Channel(b.detach())
    left._conn.send_bytes(struct.pack("<Q", 0) + short)  # a well-framed message, no buffers
    with pytest.raises(OSError, match="unreadable message"):
        right.recv()
    left.close()
    right.close()
    assert torch.equal(_rebuild_tensor("int32", (2,), b"\x01\x00\x00\x00\x02\x00\x00\x00"), torch.tensor([1, 2]))


def test_tensors_travel_out_of_band_and_arrive_whole() -> None:
    """Small tensors arrive in a bytearray, large ones (a model's outputs) in a mapping read once."""
    import mmap

    import torch

    from kernelopt_bot.harness.isolation import MAPPED_BUFFER_BYTES, _read_buffer

    a, b = socket.socketpair()
    left, right = Channel(a.detach()), Channel(b.detach())
    large = torch.randn(MAPPED_BUFFER_BYTES // 2, dtype=torch.bfloat16).reshape(-1, 64)[:, :48]  # not contiguous
    sent = [torch.randn(300, 70), torch.arange(12).reshape(3, 4).t(), large,
            torch.empty(0, 3), {"nested": (torch.tensor([1.5]), 7)}]
    thread = threading.Thread(target=left.send, args=(("ok", sent),))
    thread.start()
    kind, got = right.recv()
    thread.join()
    assert kind == "ok"
    for x, y in zip(sent[:4], got[:4]):
        assert x.dtype == y.dtype and x.shape == y.shape and torch.equal(x, y)
    assert torch.equal(got[4]["nested"][0], torch.tensor([1.5])) and got[4]["nested"][1] == 7
    got[2].add_(1)  # the received tensor owns writable memory
    left.close()
    right.close()
    for size, kind in ((MAPPED_BUFFER_BYTES - 1, bytearray), (MAPPED_BUFFER_BYTES, mmap.mmap)):
        c, d = socket.socketpair()
        data = bytes(range(256)) * (size // 256) + bytes(size % 256)
        writer = threading.Thread(target=c.sendall, args=(data,))
        writer.start()
        buffer = _read_buffer(d.fileno(), size)
        writer.join()
        c.close()
        d.close()
        assert isinstance(buffer, kind) and buffer[:] == data


def test_a_large_tensor_travels_as_a_sealed_copy_and_arrives_whole() -> None:
    """A tensor of SEALED_TENSOR_BYTES or more crosses as a sealed memory file, not through the
    socket: it arrives equal, writable (copy-on-write: the sender's file stays as sent), beside
    small tensors in the same message."""
    import torch

    from kernelopt_bot.harness.isolation import SEALED_TENSOR_BYTES

    a, b = socket.socketpair()
    left, right = Channel(a.detach()), Channel(b.detach())
    big = torch.randn(SEALED_TENSOR_BYTES // 4 + 5, dtype=torch.float32)
    strided = torch.arange(SEALED_TENSOR_BYTES // 2, dtype=torch.int64).reshape(-1, 4)[:, 1:]
    sent = ("ok", [big, torch.tensor([1.0, 2.0]), strided], {"again": big})
    thread = threading.Thread(target=left.send, args=(sent,))
    thread.start()
    kind, got, extra = right.recv()
    thread.join()
    assert kind == "ok" and torch.equal(got[0], big) and torch.equal(got[1], torch.tensor([1.0, 2.0]))
    assert torch.equal(got[2], strided) and got[2].shape == strided.shape and torch.equal(extra["again"], big)
    got[0].add_(1.0)
    assert torch.equal(extra["again"], big)  # each mapping is its own copy-on-write view
    left.close()
    right.close()


def test_a_prepared_message_holds_its_large_tensors_own_copy_and_closes_what_it_never_sent() -> None:
    """A message made ready (Channel.prepare) no longer needs its large tensors: an arm gives the
    GPU's memory back between preparing its outputs and sending them. Changed after the prepare,
    the tensor still arrives as it was; a prepared message that is never sent closes its files."""
    import torch

    from kernelopt_bot.harness.isolation import SEALED_TENSOR_BYTES

    a, b = socket.socketpair()
    left, right = Channel(a.detach()), Channel(b.detach())
    big = torch.ones(SEALED_TENSOR_BYTES // 4, dtype=torch.float32)
    message = left.prepare(("ok", [big]))
    assert len(message.sealed) == 1
    big.zero_()  # what an arm's next use of the memory would do
    thread = threading.Thread(target=left.send_prepared, args=(message,))
    thread.start()
    _, (got,) = right.recv()
    thread.join()
    assert bool((got == 1.0).all()) and message.sealed == []
    unsent = left.prepare([big])
    (fd,) = unsent.sealed
    unsent.close()
    with pytest.raises(OSError):
        os.fstat(fd)
    left.close()
    right.close()


def _message_with_sealed_fd(fd: int, size: int) -> Any:
    """What the receiver makes of a message announcing one sealed tensor of ``size`` float32 bytes
    whose descriptor is ``fd`` (crafted by hand: a sender that does not play by the rules)."""
    class Announcing(pickle.Pickler):
        def persistent_id(self, obj: Any) -> Any:
            return ("sealed", 0, "float32", (size // 4,)) if obj == "the tensor" else None

    stream = io.BytesIO()
    Announcing(stream, protocol=5).dump("the tensor")
    message = struct.pack("<Q", 1 << 32) + stream.getvalue()  # no buffers, one sealed copy
    a, b = socket.socketpair()
    right = Channel(b.detach())
    a.sendall(struct.pack("!i", len(message)) + message)  # a channel message's own framing
    socket.send_fds(a, [b"\0"], [fd])
    try:
        return right.recv()
    finally:
        a.close()
        right.close()


def test_a_shared_tensor_is_taken_only_from_a_sealed_memory_file_of_its_size(tmp_path: Path) -> None:
    """The receiver maps what the sender passed only where nobody can change it any more: a
    memory file without the write and shrink seals, a plain file (the sender could truncate it
    under the reader's mapping: a fault), or a file of another size is refused as an unreadable
    message; a sealed one of the announced size is read."""
    import fcntl

    def memfd(seals: int, size: int = 64) -> int:
        fd = os.memfd_create("probe", os.MFD_ALLOW_SEALING)
        os.write(fd, bytes(range(64))[:size] + bytes(max(0, size - 64)))
        if seals:
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
        return fd

    sealed = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
    good = memfd(sealed)
    assert _message_with_sealed_fd(good, 64).view(-1).numel() == 16
    for fd, size, why in ((memfd(0), 64, "not sealed"), (memfd(fcntl.F_SEAL_SHRINK), 64, "not sealed"),
                          (memfd(sealed), 128, "bytes where 128"),
                          (os.open(tmp_path / "plain", os.O_RDWR | os.O_CREAT), 64, "not a sealed memory file")):
        with pytest.raises(OSError, match=why):
            _message_with_sealed_fd(fd, size)
        os.close(fd)
    os.close(good)


def test_an_announced_buffer_that_never_comes_allocates_little_and_ends_the_message() -> None:
    """A child may announce a buffer of gigabytes and send ten bytes: the parent grows the buffer
    only as bytes arrive, and the closed channel ends the read (the caller's 'process died')."""
    import resource

    a, b = socket.socketpair()
    left, right = Channel(a.detach()), Channel(b.detach())
    left._conn.send_bytes(struct.pack("<QQ", 1, 8 << 30) + pickle.dumps(None))
    os.write(left._conn.fileno(), b"0123456789")
    left.close()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(EOFError):
        right.recv()
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 512 << 10  # KiB: under 512 MiB
    right.close()
    with pytest.raises(OSError, match="unreadable message"):  # more than a message may hold
        c, d = socket.socketpair()
        sender, receiver = Channel(c.detach()), Channel(d.detach())
        sender._conn.send_bytes(struct.pack("<QQ", 1, 1 << 40) + pickle.dumps(None))
        receiver.recv()


def test_an_isolated_child_dies_with_its_parent(tmp_path: Path) -> None:
    """A parent killed at a deadline (SIGKILL: no cleanup) takes its isolated child with it, although
    the child runs in a session and namespaces of its own."""
    beat = tmp_path / "beat"
    parent = subprocess.Popen([sys.executable, "-c", "import sys; from tests import isolation_probe; "
                               f"isolation_probe.spawn_heartbeat_and_wait({str(beat)!r})"], cwd=ROOT)
    try:
        deadline = time.monotonic() + 120
        while not (beat.exists() and int(beat.read_text() or 0) > 3):
            assert time.monotonic() < deadline and parent.poll() is None, "the child never started"
            time.sleep(0.2)
    finally:
        parent.kill()
        parent.wait(10)
    time.sleep(2.0)
    last = beat.read_text()
    time.sleep(1.5)
    assert beat.read_text() == last, "the child outlived its parent"


def test_sandbox_failures_say_whose_they_are() -> None:
    """Our deadline and memory limit are infrastructure; the job's exception and crash are not."""
    def run(job: str, payload: dict, **limits: float) -> object:
        return run_sandboxed(f"tests.isolation_probe.{job}", payload, device="cpu",
                             limits=SandboxLimits(**limits))  # type: ignore[arg-type]

    timed_out = run("sleep_job", {"seconds": 60}, timeout_s=2)
    assert not timed_out.ok and timed_out.infrastructure and "timed out" in timed_out.reason
    raised = run("raise_job", {}, timeout_s=60)
    assert not raised.ok and not raised.infrastructure and "the job's own failure" in raised.reason
    crashed = run("segfault_job", {}, timeout_s=60)
    assert not crashed.ok and not crashed.infrastructure and "SIGSEGV" in crashed.reason
    starved = run("allocate_job", {"bytes": 8 << 30}, timeout_s=60, memory_mb=1024)
    assert not starved.ok and starved.infrastructure and "out of memory" in starved.reason


def test_llm_proxy_adds_the_key_that_the_engine_never_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    """(c) the key reaches the endpoint only from the parent's proxy; the engine's client has none."""
    for name in ("KERNELOPT_LLM_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    with LLMTestServer() as server:
        server.script(reply("hello"))
        trusted = LLMSettings(base_url=server.base_url, model="real-model", api_key="sk-fake-proxy-key", max_retries=0)
        with LLMProxy(trusted) as proxy:
            engine = proxy.engine_settings()
            assert "sk-fake-proxy-key" not in json.dumps(engine)
            settings = LLMSettings(base_url=engine["base_url"], model="other-model",
                                   unix_socket=engine["unix_socket"], max_retries=0)
            assert settings.api_key is None and settings.base_url == PROXY_BASE_URL
            with LLMClient(settings) as client:
                assert client.chat([{"role": "user", "content": "hi"}], purpose="planner").text == "hello"
            request = server.chat_requests[0]
            assert request.headers.get("authorization") == "Bearer sk-fake-proxy-key"
            assert request.body["model"] == "real-model"  # the configured model, not the engine's choice
            assert proxy.requests == 1 and proxy.tokens_used > 0
        assert server.request_count == 1
    env = child_environment("/tmp/h", environ={"KERNELOPT_LLM_API_KEY": "sk-x", "OPENAI_API_KEY": "sk-y"})
    assert "sk-x" not in json.dumps(env) and "sk-y" not in json.dumps(env)


def test_llm_proxy_forwards_only_the_client_paths_and_maps_a_dead_upstream(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens there once the block ends
    trusted = LLMSettings(base_url=f"http://127.0.0.1:{port}/v1", model="m", api_key="sk-fake", max_retries=0)
    with LLMProxy(trusted, max_requests=1) as proxy:
        import httpx2 as httpx

        with httpx.Client(transport=httpx.HTTPTransport(uds=proxy.socket_path)) as http:
            other = http.post("http://kernelopt-llm/v1/embeddings", json={"input": "x"})
            assert other.status_code == 404
            settings = LLMSettings(base_url=PROXY_BASE_URL, model="m", unix_socket=proxy.socket_path, max_retries=0)
            with LLMClient(settings) as client, pytest.raises(LLMUnavailable, match="connection refused"):
                client.chat([{"role": "user", "content": "hi"}], purpose="planner")
            spent = http.post("http://kernelopt-llm/v1/chat/completions", json={"messages": []})
            assert spent.status_code == 403 and "budget" in spent.text
            assert "sk-fake" not in spent.text


def test_namespace_isolation_fails_closed_without_a_namespace_tool(tmp_path: Path) -> None:
    """(d) --isolation namespace where neither bwrap nor unshare is found: a clear error, exit non-zero."""
    env = {**os.environ, "PATH": str(tmp_path)}  # no bwrap, no unshare on PATH
    proc = subprocess.run([sys.executable, "-m", "kernelopt_bot.cli", "optimize", str(ROOT / "examples" / "gelu.py"),
                           "--out", str(tmp_path / "out"), "--isolation", "namespace", "--device", "cpu"],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert proc.returncode != 0
    assert "--isolation namespace" in proc.stderr and "bwrap" in proc.stderr
    assert not (tmp_path / "out" / "result.json").exists()  # nothing ran


def test_isolation_method_is_one_of_the_documented(monkeypatch: pytest.MonkeyPatch) -> None:
    assert choose_isolation().method in ("bwrap", "unshare", "none")
    assert choose_isolation("none").method == "none"
    monkeypatch.setenv("KERNELOPT_ISOLATION", "sometimes")
    with pytest.raises(IsolationUnavailable, match="KERNELOPT_ISOLATION"):
        choose_isolation()
