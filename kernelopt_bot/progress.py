"""What a long command shows a person while it works: one live line on stderr.

On a terminal (stderr is a TTY) a rich progress display says which kernel, which phase,
candidates done of planned and the time left in the budget; finished candidates and warnings
are printed above it. Off a terminal (CI logs, pipes) the same events are plain timestamped
lines. Either way stdout keeps only the command's result (a table, or JSON).

The pipeline's own log is richer than that: per-step seconds ("sandbox load 3.85 s"), graph
labels ("g0:"). :meth:`Progress.relay` keeps those for the log file and, with ``--verbose``, the
console; the run's result.json keeps the phase timings either way.
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from rich.markup import escape

# A pipeline log line: an optional "[  12 s] " prefix (the engine's clock), then the message.
_CLOCK = re.compile(r"^\[\s*\d+ s\] ")
# "  tuner: 2 proposal(s) worth the gates (0 s)": candidates planned for the current kernel.
_PROPOSALS = re.compile(r"^  (?P<who>[^:]+): (?P<n>\d+) proposal\(s\) worth the gates")
# "  config XBLOCK=2, ...: passed gates 1-3; performance not measured (46 s)": one candidate done.
_VERDICT = re.compile(r"^  (?P<what>.+?) \((?P<s>\d+) s\)$")
_SEARCHING = re.compile(r"^searching (?P<kernel>\S+) \((?P<kind>[^)]*)\)$")
# Graph labels: "g0:triton_poi_fused_gelu_0" reads as the kernel's name; a later graph is said in words.
_GRAPH_LABEL = re.compile(r"\bg(?P<graph>\d+):(?P<name>\w+)")


def plain_names(text: str) -> str:
    """``g0:name`` -> ``name``, ``g2:name`` -> ``name (graph 2)``: the console's way to name kernels."""
    def name(m: re.Match[str]) -> str:
        graph = int(m["graph"])
        return m["name"] if graph == 0 else f"{m['name']} (graph {graph})"

    return _GRAPH_LABEL.sub(name, text)


class Progress:
    """The live display of one command (a context manager).

    ``planned``: candidates the budget allows (None: not a search); ``deadline_s``: the wall
    budget, for "time left"; ``log_path``: every raw line, timestamped, for the log file.
    """

    def __init__(self, *, verbose: bool = False, planned: int | None = None, deadline_s: float | None = None,
                 log_path: Path | None = None, stream: IO[str] | None = None) -> None:
        self.verbose = verbose
        self.planned_cap = planned
        self.planned = 0 if planned is not None else None
        self.done = 0
        self.kernel: str | None = None
        self.phase = "starting"
        self._start = time.monotonic()
        self._deadline_s = deadline_s
        self._stream = stream if stream is not None else sys.stderr
        self._live = self._stream.isatty()
        self._log_path = log_path
        self._log: IO[str] | None = None
        self._rich: Any = None
        self._task: Any = None

    def __enter__(self) -> Progress:
        if self._log_path is not None:  # its folder is the caller's to make (kernelopt_bot.folders)
            self._log = self._log_path.open("w", encoding="utf-8")
        if self._live:
            from rich.console import Console
            from rich.progress import Progress as RichProgress
            from rich.progress import ProgressColumn, SpinnerColumn, TextColumn, TimeElapsedColumn
            from rich.text import Text

            progress = self

            class TimeLeft(ProgressColumn):
                """The wall budget's time left, counted down between events too."""

                def render(self, task: Any) -> Text:
                    return Text(progress._time_left(), style="yellow")

            console = Console(file=self._stream, highlight=False)
            self._rich = RichProgress(SpinnerColumn(), TextColumn("{task.description}"),
                                      TextColumn("{task.fields[counts]}", style="cyan"), TimeLeft(),
                                      TimeElapsedColumn(), console=console, transient=True)
            self._rich.start()
            self._task = self._rich.add_task(self.phase, total=None, counts="")
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._rich is not None:
            self._rich.stop()
            self._rich = None
        if self._log is not None:
            self._log.close()
            self._log = None

    # -- events ----------------------------------------------------------------------------

    def step(self, phase: str, kernel: str | None = None) -> None:
        """A new phase (and optionally the kernel it works on): shown live, or as one line."""
        self._record(f"{phase} {kernel}" if kernel else phase)
        self._step(phase, kernel)

    def note(self, message: str) -> None:
        """A line a person wants to keep (a finished candidate, a warning)."""
        self._record(message)
        self._print(message)

    def detail(self, message: str) -> None:
        """Internals (per-step seconds): the log file always, the console only with ``--verbose``."""
        self._record(message)
        if self.verbose:
            self._print(message)

    def relay(self, line: str) -> None:
        """One line of the pipeline's log: kept whole in the log file, and on the console sorted
        into phase (no indent), candidate (two spaces) and internals (four spaces, --verbose)."""
        message = _CLOCK.sub("", line)
        self._record(message)
        if message.startswith("warning"):
            self._print(message)
        elif searching := _SEARCHING.match(message):
            self._step("searching", searching["kernel"])
        elif not message.startswith(" "):
            self._step(message, None)
        elif proposals := _PROPOSALS.match(message):
            if self.planned is not None:
                self.planned += int(proposals["n"])
            if self.verbose:
                self._print(message)
            self._say(self._headline(), line=False)
        elif message.startswith("    "):
            if self.verbose:
                self._print(message)
        elif verdict := _VERDICT.match(message):
            self.done += 1
            self._print(message if self.verbose else f"  {verdict['what']}")
            self._say(self._headline(), line=False)
        else:
            self._print(message)

    def _step(self, phase: str, kernel: str | None) -> None:
        self.phase, self.kernel = phase, kernel
        self._say(self._headline())

    # -- output ----------------------------------------------------------------------------

    def _headline(self) -> str:
        text = self.phase if self.kernel is None else f"{self.phase} {self.kernel}"
        return text if self.verbose else plain_names(text)

    def _total(self) -> int | None:
        """Candidates planned so far: those proposed, capped by the budget (never below done)."""
        total = self.planned
        if total is not None and self.planned_cap is not None:
            total = min(total, self.planned_cap)
        return max(total, self.done) or None if total is not None else None

    def _time_left(self) -> str:
        if self._deadline_s is None:
            return ""
        return f"{max(0.0, self._deadline_s - (time.monotonic() - self._start)):.0f} s left"

    def _say(self, headline: str, *, line: bool = True) -> None:
        total, left = self._total(), self._time_left()
        counts = f"{self.done} of {total} candidates" if total else ""
        if self._rich is not None:
            self._rich.update(self._task, description=escape(headline), counts=escape(counts))
        elif line:
            self._plain(f"{headline}{f', {counts}' if counts else ''}{f' ({left})' if left else ''}")

    def _print(self, message: str) -> None:
        shown = message if self.verbose else plain_names(message)
        if self._rich is not None:
            self._rich.console.print(escape(shown))
        else:
            self._plain(shown)

    def _plain(self, message: str) -> None:
        self._stream.write(f"{time.strftime('%H:%M:%S')} {message}\n")
        self._stream.flush()

    def _record(self, message: str) -> None:
        if self._log is not None:
            self._log.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {message}\n")
            self._log.flush()
