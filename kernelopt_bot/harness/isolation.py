"""The one way untrusted code is started: an isolated child process holding no secret.

Model code from a PR and every kernel candidate run in a child started by :func:`spawn_isolated`:

* its environment is built from an allowlist (:func:`child_environment`), never inherited, so no
  token or key is in it, not even at exec (``/proc/<pid>/environ`` shows the environment a
  process was started with, whatever it pops later);
* it inherits no file descriptor but its channel (and the standard streams);
* it leads its own session and process group, so a deadline kills everything it started;
* it runs under an isolation wrapper chosen once per run (:func:`choose_isolation`): ``bwrap``
  when present, else ``unshare`` with user, PID, network and mount namespaces (``/proc`` shows only
  the child's own processes, there is no network, and the child is uid 65534 without capabilities),
  else none, with one warning: then only the scrubbed environment and the non-dumpable parent stand
  between the child and the secrets of processes of the same user, and a child running as root can
  still read them.

Trusted processes (the CLI, the bot, the engine) call :func:`protect_this_process` so that a
same-user child can read neither their memory nor their ``/proc/<pid>/environ``.
"""

from __future__ import annotations

import contextlib
import fcntl
import fnmatch
import functools
import getpass
import io
import math
import mmap
import os
import pickle
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from kernelopt_bot.errors import KerneloptError, one_line

ISOLATION_ENV = "KERNELOPT_ISOLATION"  # auto | namespace | none; the CLI's --isolation sets it
ISOLATION_CHOICES = ("auto", "namespace", "none")
# Set by the parent for the engine, which already runs in the run's namespaces: its own children
# get namespaces of their own where they nest (``unshare`` does, ``bwrap`` does not), else share
# the engine's ("inherited": no network, no secret, no process outside the run visible).
NESTED = "nested"
CHILD_MODULE = "kernelopt_bot.harness.child"

SECRET_PATTERNS = (
    "*_TOKEN",
    "*_KEY",
    "*_SECRET",
    "*_SECRETS",
    "*_PASSWORD",
    "*_CREDENTIALS",
    "OPENAI_*",
    "GITHUB_*",
    "ACTIONS_*",
    "AWS_*",
    "KERNELOPT_LLM_API_KEY*",
    "KERNELOPT_LLM_BASE_URL",  # the engine talks to the LLM only through the trusted parent's proxy
)

# Variables a child gets from the parent's environment (exact names), and prefixes of families.
ALLOWED_NAMES = frozenset({
    "PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "LC_NUMERIC", "TZ", "TERM", "NO_COLOR", "COLUMNS",
    "PYTHONUNBUFFERED", "PYTHONHASHSEED", "PYTHONDONTWRITEBYTECODE", "PYTHONWARNINGS", "VIRTUAL_ENV",
    "CUDA_VISIBLE_DEVICES", "CUDA_HOME", "CUDA_PATH", "CUDA_LAUNCH_BLOCKING", "CUDA_MODULE_LOADING",
    "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "LD_LIBRARY_PATH",
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
})
ALLOWED_PREFIXES = ("KERNELOPT_", "TRITON_", "TORCHINDUCTOR_", "TORCH_", "PYTORCH_", "NCCL_")


class IsolationUnavailable(KerneloptError):
    """``--isolation namespace`` was asked for and no namespace tool works here."""


def is_secret(name: str) -> bool:
    upper = name.upper()
    return any(fnmatch.fnmatchcase(upper, p) for p in SECRET_PATTERNS)


def key_name_problem(name: str) -> str | None:
    """Why ``name`` may not hold the LLM key, or None: a key's variable must be named like a secret,
    since only such names are kept from the processes that run model code."""
    if is_secret(name):
        return None
    return (f"{name!r} is not named like a secret (end it in _KEY, _TOKEN or _SECRET, like "
            "KERNELOPT_LLM_API_KEY): only such variables are kept from the processes that run model code")


def child_environment(home: str | os.PathLike[str], extra: Mapping[str, str] | None = None,
                      environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The whole environment of an isolated child: allowlisted names of ``environ`` (default
    ``os.environ``) that are not secrets, a private ``HOME``/``TMPDIR``, the caches the parent
    would use (so compiled kernels and roofline numbers survive the private ``HOME``), the
    parent's ``sys.path`` and the isolation mode, then ``extra``."""
    source = os.environ if environ is None else environ
    env = {k: v for k, v in source.items()
           if (k in ALLOWED_NAMES or k.startswith(ALLOWED_PREFIXES)) and not is_secret(k)}
    env["HOME"] = str(home)
    env.setdefault("PATH", os.defpath)
    env.setdefault("TRITON_CACHE_DIR", os.path.join(os.path.expanduser("~"), ".triton", "cache"))
    env.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(tempfile.gettempdir(), "torchinductor_" + _user()))
    env.setdefault("KERNELOPT_CACHE_DIR", os.path.join(
        source.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "kernelopt"))
    env["TMPDIR"] = str(home)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))
    env[ISOLATION_ENV] = isolation_mode(source)
    env.update(extra or {})
    return env


def _user() -> str:
    try:
        return "".join(c if c.isalnum() or c in "-_" else "_" for c in getpass.getuser())
    except (KeyError, OSError):
        return str(os.getuid())


# --- the isolation wrapper ---------------------------------------------------------------------


@dataclass(frozen=True)
class Isolation:
    """How isolated children are wrapped: ``method`` is ``bwrap``, ``unshare`` or ``none``."""

    method: str
    prefix: tuple[str, ...]

    def command(self, argv: Sequence[str], *, writable: Sequence[str] = ()) -> list[str]:
        """``argv`` wrapped; under ``bwrap`` (read-only root) the ``writable`` folders are bound
        writable (the others see every folder as it is)."""
        if self.method != "bwrap":
            return [*self.prefix, *argv]
        binds = [arg for path in dict.fromkeys(writable) if os.path.isdir(path) for arg in ("--bind", path, path)]
        return [*self.prefix, *binds, "--", *argv]


_UNSHARE = ("unshare", "--user", "--map-user=65534", "--map-group=65534", "--pid", "--fork", "--kill-child",
            "--mount-proc", "--net")


def _bwrap_prefix(binary: str) -> tuple[str, ...]:
    # Read-only root (the target and the code stay readable wherever they are), private /proc and
    # /dev (the GPU's device nodes bound in), no network, new user/PID/IPC/UTS namespaces, killed
    # with its parent. The child's private home (its TMPDIR), the compiler caches and the
    # caller's folders (the run's output and store) are bound writable by Isolation.command.
    gpu_nodes: list[str] = []
    for node in sorted(Path("/dev").glob("nvidia*")):
        gpu_nodes += ["--dev-bind", str(node), str(node)]
    return (binary, "--unshare-all", "--die-with-parent", "--new-session", "--ro-bind", "/", "/",
            "--proc", "/proc", "--dev", "/dev", *gpu_nodes,
            "--uid", "65534", "--gid", "65534", "--cap-drop", "ALL")


def isolation_mode(environ: Mapping[str, str] | None = None) -> str:
    """The requested mode: ``KERNELOPT_ISOLATION`` (set by ``--isolation``), default ``auto``."""
    mode = (os.environ if environ is None else environ).get(ISOLATION_ENV, "auto").strip().lower() or "auto"
    if mode not in (*ISOLATION_CHOICES, NESTED):
        raise IsolationUnavailable(f"{ISOLATION_ENV}={mode!r}: expected one of {', '.join(ISOLATION_CHOICES)}")
    return mode


def _works(argv: Sequence[str]) -> bool:
    try:
        return subprocess.run([*argv, "true"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=30, check=False).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


@functools.cache
def _probe() -> Isolation | None:
    """The strongest wrapper that really starts a process here (tried once per process)."""
    bwrap = shutil.which("bwrap")
    if bwrap and _works([*_bwrap_prefix(bwrap), "--"]):
        return Isolation("bwrap", _bwrap_prefix(bwrap))
    unshare = shutil.which("unshare")
    if unshare and _works([unshare, *_UNSHARE[1:]]):
        return Isolation("unshare", (unshare, *_UNSHARE[1:]))
    return None


_WARNED = False


def choose_isolation(mode: str | None = None) -> Isolation:
    """The wrapper for ``mode`` (default: :func:`isolation_mode`); ``namespace`` fails closed."""
    global _WARNED
    mode = mode or isolation_mode()
    if mode == "none":
        return Isolation("none", ())
    found = _probe()
    if found is not None:
        return found
    if mode == NESTED:
        return Isolation("inherited", ())
    if mode == "namespace":
        raise IsolationUnavailable(
            "--isolation namespace: neither bwrap nor unshare can create user, PID and network namespaces "
            "here (install bubblewrap, or allow unprivileged user namespaces); refusing to run untrusted code")
    if not _WARNED:
        _WARNED = True
        warnings.warn("kernelopt: no namespace tool works here (bwrap, unshare): untrusted code runs without "
                      "namespaces, protected only by a scrubbed environment and a non-dumpable parent; a "
                      "child running as root can still read other processes' secrets", stacklevel=2)
    return Isolation("none", ())


# --- protecting trusted processes ----------------------------------------------------------------

PR_SET_DUMPABLE = 4


def protect_this_process() -> None:
    """Make this process non-dumpable: a child of the same user can then read neither its memory
    nor its ``/proc/<pid>/environ``, and cannot ptrace it (Linux only; a no-op elsewhere)."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


# --- the channel ---------------------------------------------------------------------------------


class Channel:
    """Length-prefixed pickles over a socket, read with an allowlist of what may be rebuilt.

    The other end may be untrusted (an engine running PR code, a candidate's child): a plain
    unpickler would let it run any function here. :class:`_SafeUnpickler` rebuilds only plain
    data, tensors (sent as dtype, shape and bytes, or as a sealed copy: never as a handle to
    memory the sender can still change), torch dtypes/devices/sizes, numpy scalars, and the
    dataclasses and enums of this package.

    A tensor's bytes travel out of band (pickle protocol 5): the message is a header (how many
    buffers, their sizes, how many sealed copies, the pickle) followed by each buffer written
    straight from the tensor's memory and read straight into the one that becomes the received
    tensor, then the sealed copies' descriptors. A model's output of hundreds of MB then costs one
    copy on each side instead of six or seven (seconds per output, several outputs per candidate).
    A tensor of :data:`SEALED_TENSOR_BYTES` or more is copied once, by the sender, into a memory
    file it then seals against any change (:func:`_sealed_copy`); the receiver checks the seals
    and maps the file copy-on-write (:func:`_map_sealed`): no byte crosses the socket. A 30 GB
    model's 14 GiB of outputs took 17.5 s an arm through the socket on the H100, 10-11 s copied
    from the GPU into sealed files (12-06). :meth:`prepare` and :meth:`send_prepared` split a send
    so that the sender can free what the message was made from (a GPU's memory) before sending.
    """

    def __init__(self, fd: int) -> None:
        self._conn = Connection(fd)

    def send(self, obj: object) -> None:
        self.send_prepared(self.prepare(obj))

    def prepare(self, obj: object) -> PreparedMessage:
        """``obj`` made ready to send: pickled, its large tensors copied into sealed files and its
        small GPU tensors to the host. Nothing it sends refers to a GPU's memory any more, so that
        memory may be given back before :meth:`send_prepared`: a model arm answers a 30 GB model's
        outputs straight from the GPU into sealed files, frees the GPU for the next arm, then sends.
        (A small host tensor is sent from its own memory: not to be changed until sent.)"""
        buffers: list[pickle.PickleBuffer] = []
        sealed: list[int] = []
        stream = io.BytesIO()
        try:
            _TensorPickler(stream, protocol=5, buffer_callback=buffers.append, sealed=sealed).dump(obj)
            raws = [b.raw() for b in buffers]
            header = struct.pack(f"<Q{len(raws)}Q", len(raws) | len(sealed) << 32, *(r.nbytes for r in raws))
        except BaseException:
            for fd in sealed:
                os.close(fd)
            raise
        return PreparedMessage(header + stream.getvalue(), raws, sealed)

    def send_prepared(self, message: PreparedMessage) -> None:
        """Send a message of :meth:`prepare` (once); its sealed files' descriptors are closed and its
        host copies let go."""
        if message.sent:
            raise ValueError("a prepared message is sent once")
        message.sent = True
        try:
            self._conn.send_bytes(message.head)
            for raw in message.raws:
                _write_all(self._conn.fileno(), raw)
            if message.sealed:
                with _as_socket(self._conn.fileno()) as sock:
                    socket.send_fds(sock, [b"\0"], message.sealed)
        finally:
            message.close()

    def recv(self) -> Any:
        data = self._conn.recv_bytes(MAX_MESSAGE_BYTES)
        try:
            (counts,) = struct.unpack_from("<Q", data)
            count, sealed_count = counts & 0xFFFFFFFF, counts >> 32
            if count > MAX_BUFFERS or sealed_count > MAX_SEALED:
                raise ValueError(f"{count} buffers and {sealed_count} sealed copies announced")
            sizes = struct.unpack_from(f"<{count}Q", data, 8)
            if sum(sizes) > MAX_BUFFER_BYTES:
                raise ValueError(f"{sum(sizes)} bytes of buffers announced")
            buffers = [_read_buffer(self._conn.fileno(), size) for size in sizes]
            files = _receive_fds(self._conn.fileno(), sealed_count) if sealed_count else []
            try:
                return _SafeUnpickler(io.BytesIO(data[8 + 8 * count:]), buffers=buffers, sealed=files).load()
            finally:
                for fd in files:
                    os.close(fd)
        except (pickle.UnpicklingError, MemoryError, ValueError, TypeError, RuntimeError, struct.error) as exc:
            raise OSError(f"unreadable message from the other process: {one_line(exc)}") from exc

    def poll(self, timeout: float = 0.0) -> bool:
        return self._conn.poll(timeout)

    def close(self) -> None:
        self._conn.close()


MAX_BUFFERS = 1 << 16  # tensors in one message


@dataclass
class PreparedMessage:
    """A message ready to send (:meth:`Channel.prepare`): its header and pickle, the host buffers
    that follow them, and the sealed files' descriptors, which it owns until sent or closed."""

    head: bytes
    raws: list[memoryview]
    sealed: list[int]
    sent: bool = False

    def close(self) -> None:
        for fd in self.sealed:
            os.close(fd)
        self.head, self.raws, self.sealed = b"", [], []


def _write_all(fd: int, data: memoryview) -> None:
    view = data.cast("B") if data.format != "B" else data
    while view.nbytes:
        view = view[os.write(fd, view):]


# A buffer this large is received into an anonymous mapping allocated once: its pages are committed
# only as the bytes arrive, so an announced size the other end does not send costs address space,
# not memory. Grown step by step instead (a bytearray extended by zeroed pieces), each byte was
# written three times before it was read: 2 GiB took 6.5 s to receive where the socket alone took
# 2.5 s (12-06, this CPU), and a 30 GB model's outputs took minutes to compare.
MAPPED_BUFFER_BYTES = 1 << 20


def _read_buffer(fd: int, size: int) -> bytearray | mmap.mmap:
    """``size`` bytes from ``fd``, read straight into the memory that becomes the tensor's: a
    small buffer in a bytearray, a large one in an anonymous mapping (:data:`MAPPED_BUFFER_BYTES`)."""
    if size < MAPPED_BUFFER_BYTES:
        buffer: bytearray | mmap.mmap = bytearray(size)
    else:
        try:
            buffer = mmap.mmap(-1, size)
        except (OSError, OverflowError) as exc:  # more than this machine maps: not a message we can take
            raise ValueError(f"a buffer of {size} bytes: {exc}") from exc
    with memoryview(buffer) as view:
        _read_exact(fd, view)
    return buffer


def _read_exact(fd: int, into: memoryview) -> None:
    """Fill ``into`` from ``fd``; the other end closing first is an ``EOFError``, as for a message."""
    while into.nbytes:
        got = os.readv(fd, [into])
        if got == 0:
            raise EOFError("the other process closed the channel in the middle of a message")
        into = into[got:]


def _dtype_named(dtype: Any) -> Any:
    import torch

    dt = getattr(torch, dtype, None) if isinstance(dtype, str) else None
    if not isinstance(dt, torch.dtype):
        raise pickle.UnpicklingError(f"not a dtype: {dtype!r}")
    return dt


def _checked_shape(shape: Any) -> tuple[int, ...]:
    if not isinstance(shape, tuple) or not all(isinstance(n, int) and n >= 0 for n in shape):
        raise pickle.UnpicklingError(f"not a shape: {shape!r}")
    return shape


def _rebuild_tensor(dtype: str, shape: tuple[int, ...], data: bytes | bytearray | mmap.mmap) -> Any:
    import torch

    dt = _dtype_named(dtype)
    shape = _checked_shape(shape)
    size = len(data) if isinstance(data, (bytes, bytearray, mmap.mmap)) else None
    if size != math.prod(shape) * dt.itemsize:
        # a tensor is rebuilt only from the bytes that came with it: a short message cannot make
        # this process allocate more than it was sent
        raise pickle.UnpicklingError(f"tensor data of {'?' if size is None else size} bytes does not fill "
                                     f"shape {shape} of {dtype}")
    if not size:
        return torch.empty(shape, dtype=dt)
    # A received buffer (bytearray, mapping) is this tensor's memory; bytes (in-band) are copied once.
    buffer = bytearray(data) if isinstance(data, bytes) else data
    return torch.frombuffer(buffer, dtype=torch.uint8).view(dt).reshape(shape)


@contextlib.contextmanager
def _as_socket(fd: int) -> Any:
    """The channel's descriptor as a socket object for a moment (to pass descriptors), left open."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM, fileno=fd)
    try:
        yield sock
    finally:
        sock.detach()


def _receive_fds(fd: int, count: int) -> list[int]:
    """The ``count`` descriptors the sender passed after a message's buffers; anything else (fewer,
    more, cut short) ends the message."""
    with _as_socket(fd) as sock:
        msg, fds, flags, _ = socket.recv_fds(sock, 1, count)
    if len(fds) != count or msg != b"\0" or flags & socket.MSG_CTRUNC:
        for extra in fds:
            os.close(extra)
        if not msg:
            raise EOFError("the other process closed the channel in the middle of a message")
        raise ValueError(f"{len(fds)} descriptors where {count} were announced")
    return fds


# A tensor this large travels as a sealed memory file (Channel): the sender's one copy, none on the
# socket, and the receiver maps it. Smaller ones cost less through the socket than a file each.
SEALED_TENSOR_BYTES = 16 << 20
MAX_SEALED = 64  # sealed copies in one message (one descriptor each, passed together)
_SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SEAL
_NEEDED_SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_WRITE  # what makes a mapping of it safe to read


def _sealed_copy(tensor: Any) -> int | None:
    """A memory file holding ``tensor``'s bytes (copied straight from the GPU where it is there),
    sealed so that nobody, its writer included, can change or shrink it: what the receiver maps
    stays what was sent. None where this system has no sealed memory files."""
    import torch

    try:
        fd = os.memfd_create("kernelopt-tensor", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    except (AttributeError, OSError):
        return None
    try:
        flat = tensor.detach().contiguous().reshape(-1).view(torch.uint8)
        os.ftruncate(fd, flat.numel())
        memory = mmap.mmap(fd, flat.numel())
        try:
            torch.frombuffer(memory, dtype=torch.uint8).copy_(flat)
        finally:
            memory.close()  # no writable mapping may remain, or the write seal is refused
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _SEALS)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _map_sealed(fd: int, size: int) -> mmap.mmap:
    """The sealed memory file ``fd`` of exactly ``size`` bytes, mapped copy-on-write: a file the
    sender could still shrink or write (no seals, another kind of file) is refused, as reading a
    mapping of it could fault or change under the reader."""
    try:
        seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
    except OSError as exc:
        raise ValueError(f"a shared tensor that is not a sealed memory file ({exc})") from exc
    if seals & _NEEDED_SEALS != _NEEDED_SEALS:
        raise ValueError("a shared tensor whose memory file is not sealed against changes")
    actual = os.fstat(fd).st_size
    if actual != size:
        raise ValueError(f"a shared tensor of {actual} bytes where {size} were announced")
    return mmap.mmap(fd, size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)


class _TensorPickler(pickle.Pickler):
    def __init__(self, *args: Any, sealed: list[int] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sealed = sealed  # where large tensors' sealed copies go (their descriptors, in order)

    def persistent_id(self, obj: Any) -> Any:
        torch = sys.modules.get("torch")
        if self.sealed is None or torch is None or not isinstance(obj, torch.Tensor):
            return None
        if obj.numel() * obj.element_size() < SEALED_TENSOR_BYTES or len(self.sealed) >= MAX_SEALED:
            return None
        fd = _sealed_copy(obj)
        if fd is None:
            return None
        self.sealed.append(fd)
        return ("sealed", len(self.sealed) - 1, str(obj.dtype).removeprefix("torch."), tuple(obj.shape))

    def reducer_override(self, obj: Any) -> Any:
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(obj, torch.Tensor):
            flat = obj.detach().cpu().contiguous()
            data = pickle.PickleBuffer(flat.reshape(-1).view(torch.uint8).numpy()) if flat.numel() else b""
            return _rebuild_tensor, (str(flat.dtype).removeprefix("torch."), tuple(flat.shape), data)
        return NotImplemented


# Builtins a message may call while it is rebuilt. Containers and bytes have pickle opcodes of their
# own; callables that allocate what an argument asks for (``bytearray(10**12)``, ``list(range(...))``)
# are left out, so a message never makes this process allocate much more than its own size.
_SAFE_BUILTINS = frozenset({"set", "frozenset", "slice", "complex", "object"})
MAX_MESSAGE_BYTES = 16 << 30  # a message's pickle, its tensors' bytes aside
# A message's tensors' bytes (out of band), in all: a model's outputs travel as one message, and the
# 30 GB RMS norm's are 14 GiB with its buffers beside them. Received into lazily committed memory.
MAX_BUFFER_BYTES = 64 << 30
_SAFE_GLOBALS = frozenset({
    ("collections", "OrderedDict"), ("collections", "deque"), ("copyreg", "_reconstructor"),
    ("copyreg", "__newobj__"), ("kernelopt_bot.harness.isolation", "_rebuild_tensor"), ("torch", "Size"),
    ("torch", "device"), ("numpy", "dtype"), ("numpy.core.multiarray", "scalar"),
    ("numpy._core.multiarray", "scalar"), ("pathlib", "PosixPath"), ("pathlib", "Path"),
    ("torch.torch_version", "TorchVersion"),
})


class _SafeUnpickler(pickle.Unpickler):
    def __init__(self, *args: Any, sealed: list[int] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sealed = sealed or []  # the message's sealed copies' descriptors

    def persistent_load(self, pid: Any) -> Any:
        """A tensor sent as a sealed copy (``("sealed", index, dtype, shape)``), mapped."""
        if not (isinstance(pid, tuple) and len(pid) == 4 and pid[0] == "sealed" and isinstance(pid[1], int)
                and 0 <= pid[1] < len(self.sealed)):
            raise pickle.UnpicklingError(f"not a sealed tensor: {pid!r}")
        _, index, dtype, shape = pid
        import torch

        dt = _dtype_named(dtype)
        shape = _checked_shape(shape)
        size = math.prod(shape) * dt.itemsize
        if size == 0:
            raise pickle.UnpicklingError("an empty sealed tensor")
        return torch.frombuffer(_map_sealed(self.sealed[index], size), dtype=torch.uint8).view(dt).reshape(shape)

    def find_class(self, module: str, name: str) -> Any:
        if (module == "builtins" and name in _SAFE_BUILTINS) or (module, name) in _SAFE_GLOBALS:
            return super().find_class(module, name)
        if module == "torch":
            value = super().find_class(module, name)
            if type(value).__name__ == "dtype":
                return value
        if module.startswith("kernelopt_bot.") and "." not in name:
            import dataclasses
            import enum

            value = super().find_class(module, name)
            if isinstance(value, type) and (dataclasses.is_dataclass(value) or issubclass(value, enum.Enum)):
                return value
        raise pickle.UnpicklingError(f"refusing to rebuild {module}.{name}")


# --- spawning ----------------------------------------------------------------------------------


class IsolatedProcess:
    """A running isolated child and its :class:`Channel`, ``conn``."""

    def __init__(self, popen: subprocess.Popen[bytes], conn: Channel, home: str, name: str = "kernelopt-child") -> None:
        self.popen, self.conn, self._home, self.name = popen, conn, home, name

    def alive(self) -> bool:
        return self.popen.poll() is None

    def wait(self, timeout: float) -> int | None:
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> None:
        """Kill the child's whole process group (it and everything it started)."""
        with contextlib.suppress(OSError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            self.popen.kill()
        self.wait(10)

    def close(self) -> None:
        self.kill()
        with contextlib.suppress(OSError):
            self.conn.close()
        shutil.rmtree(self._home, ignore_errors=True)
        with _started_lock:
            _running.discard(self)


# Children started by this process (spawn_isolated), by name, for the run's log and result.json.
_started: dict[str, int] = {}
_started_lock = threading.Lock()
_running: set[IsolatedProcess] = set()  # started and not yet closed (guarded by _started_lock)


def processes_alive(excluding: Sequence[str] = ()) -> int:
    """How many isolated children of this process are running now, those started under a name in
    ``excluding`` aside (the GPU's view of a run: the compile process holds no CUDA context)."""
    with _started_lock:
        children = list(_running)
    return sum(1 for child in children if child.name not in excluding and child.alive())


def processes_started(name: str | None = None) -> int:
    """How many isolated children this process has started so far: all of them, or those
    started under ``name`` (``kernelopt-sandbox``, ``kernelopt-engine``, a model arm's name)."""
    with _started_lock:
        return sum(_started.values()) if name is None else _started.get(name, 0)


def processes_started_by_name() -> dict[str, int]:
    """The isolated children this process has started so far, counted by name."""
    with _started_lock:
        return dict(_started)


def spawn_isolated(entry: str, *args: object, extra_env: Mapping[str, str] | None = None,
                   writable: Sequence[str | os.PathLike[str]] = (), isolation: Isolation | None = None,
                   name: str = "kernelopt-child") -> IsolatedProcess:
    """Start ``entry(conn, *args)`` (a module-level function by import path) in an isolated child.

    The child (:mod:`kernelopt_bot.harness.child`) receives ``(entry, args)`` over its channel,
    then the function talks over the same channel. ``writable``: folders the child writes besides
    its private home, the working directory and the compiler caches (a read-only root under
    ``bwrap``). Raises :class:`IsolationUnavailable` when ``namespace`` isolation was required and
    is not available, ``OSError`` when the child cannot be started.
    """
    protect_this_process()
    wrapper = isolation or choose_isolation()
    home = tempfile.mkdtemp(prefix=f"{name}-")
    os.chmod(home, 0o700)
    ours, theirs = socket.socketpair()
    try:
        fd = theirs.fileno()
        env = child_environment(home, extra_env)
        caches = [env[k] for k in ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "KERNELOPT_CACHE_DIR")]
        for cache in caches:
            with contextlib.suppress(OSError):
                os.makedirs(cache, exist_ok=True)
        argv = [sys.executable, "-m", CHILD_MODULE, str(fd)]
        popen = subprocess.Popen(
            wrapper.command(argv, writable=[home, os.getcwd(), *caches, *map(os.fspath, writable)]),
            env=env, stdin=subprocess.DEVNULL, pass_fds=(fd,), close_fds=True, start_new_session=True)
    except BaseException:
        ours.close()
        shutil.rmtree(home, ignore_errors=True)
        raise
    finally:
        theirs.close()
    conn = Channel(ours.detach())
    child = IsolatedProcess(popen, conn, home, name)
    with _started_lock:
        _started[name] = _started.get(name, 0) + 1
        _running.add(child)
    with contextlib.suppress(OSError, ValueError):  # a child that died at once shows when read
        conn.send((entry, args))
    return child


def describe_exit(code: int | None) -> str:
    """A child's exit status in words; ``bwrap`` reports a child killed by signal N as 128 + N."""
    if code is None:
        return "no exit code"
    signum = -code if code < 0 else code - 128 if code > 128 else 0
    if signum:
        try:
            return f"killed by {signal.Signals(signum).name}"
        except ValueError:
            return f"signal {signum}" if code < 0 else f"exit code {code}"
    return f"exit code {code}"
