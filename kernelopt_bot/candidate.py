"""What the search hands the gates, and the bar the gates hold it to.

A bottom module: plain data (a :class:`Candidate`, the search's :class:`Proposal` of one) and a
candidate's one-entry pack, importing nothing of ours but the pack's modules (no torch, no
Triton), so the search, the gates, the CLI and the configuration use it without importing each other.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernelopt_bot.pack.export import lookup_key_or_none
from kernelopt_bot.pack.format import KernelPack, LaunchConfig, PackEntry, PackError, integer_arguments
from kernelopt_bot.pack.runtime import running_environment

if TYPE_CHECKING:
    from kernelopt_bot.capture.artifact import TritonKernel
    from kernelopt_bot.capture.recorder import Capture

# The least end-to-end speedup a replacement needs to be accepted (gate 4): one value for the CLI,
# the configuration, the suite, the bot and the gates.
DEFAULT_GAMMA = 1.03

TRUSTED_ORIGINS = frozenset({"tuner"})


class CandidateError(ValueError):
    """A candidate file that is neither Triton source nor a launch-config JSON."""


@dataclass(frozen=True)
class Candidate:
    """New source for a kernel, a launch config for it, or both.

    ``origin`` says whose code it is. ``"tuner"``: our launch configs and our own source
    transformations of the compiler's kernel, as trusted as the target itself, so gate 2 and
    timing run inside the engine. Anything else (the default, ``"untrusted"``: an LLM's source, a
    file handed to ``kernelopt verify``) runs gate 2 in a sandbox process first."""

    label: str
    source: str | None = None
    config: LaunchConfig | None = None
    origin: str = "untrusted"

    @property
    def trusted(self) -> bool:
        return self.origin in TRUSTED_ORIGINS

    @classmethod
    def from_file(cls, path: str | Path) -> Candidate:
        path = Path(path)
        try:
            text = path.read_text()
        except OSError as exc:
            raise CandidateError(f"cannot read candidate {path}: {exc.strerror or exc}") from exc
        stripped = text.lstrip()
        if stripped.startswith("{"):
            try:
                return cls(path.name, config=LaunchConfig.from_user_json(json.loads(text)))
            except (json.JSONDecodeError, PackError) as exc:
                raise CandidateError(f"candidate {path} looks like JSON but is not a launch config: {exc}") from exc
        if not stripped:
            raise CandidateError(f"candidate {path} is empty")
        return cls(path.name, source=text)


@dataclass
class Proposal:
    """A candidate plus what its strategy knows about it (kernel-level time, why it was made)."""

    candidate: Candidate
    strategy: str
    kernel_ms: float | None = None
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def candidate_pack(capture: Capture, kernel: TritonKernel, candidate: Candidate,
                   measured: dict[str, Any] | None = None) -> KernelPack:
    """A one-entry pack that installs ``candidate`` for ``kernel`` on this machine."""
    pack = KernelPack(target=capture.target.spec, created_by="kernelopt verify")
    # Gate 2 ran the candidate with the recorded launch's sizes only: the entry is guarded to them.
    verified = integer_arguments(capture.recording(kernel.graph, kernel.name).args)
    pack.add(PackEntry(kernel.key, kernel.name, source=candidate.source, config=candidate.config,
                       guard=running_environment(capture.target.device), measured=measured or {},
                       note=candidate.label, shapes=(verified,), lookup_key=lookup_key_or_none(kernel.source)))
    return pack
