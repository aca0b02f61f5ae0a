"""The five LLM agents of the search: profiler, planner, coder, repairer, summarizer.

Each agent renders its prompt from ``templates/prompts``, makes one call through the shared
:class:`~kernelopt_bot.search.llm.client.LLMClient`, and turns the reply into plain data. None of
them decides anything that matters: the planner's choice and the coder's kernel go to the gates.
When a reply is unusable the agents that can go on without it do (profiler and summarizer build
their answer locally, the planner falls back to a launch-config plan); the coder and repairer
return ``None``. Endpoint trouble is :class:`LLMUnavailable` and a refused call is
:class:`BudgetExceeded`; agents let both through to the orchestrator.
"""

from __future__ import annotations

import ast
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

from kernelopt_bot.capture.artifact import TritonKernel
from kernelopt_bot.pack.format import LaunchConfig
from kernelopt_bot.search.budget import CANDIDATE_RESOURCES, LLM_RESOURCES, Budget
from kernelopt_bot.search.llm.client import LLMClient, LLMReply, Message
from kernelopt_bot.search.llm.config import LLMSettings
from kernelopt_bot.search.llm.parse import clean_code as _clean_body
from kernelopt_bot.search.llm.parse import extract_code, extract_json, fenced_blocks, parses
from kernelopt_bot.search.llm.prompts import PromptTemplates
from kernelopt_bot.verify.verdict import GateResult

log = logging.getLogger(__name__)

STRATEGIES: dict[str, str] = {
    "launch_config": "keep the source; choose better block sizes / num_warps / num_stages (no new code)",
    "persistent_reduction": "reduction kernels: load the whole reduced row at once (R0_BLOCK covers r0_numel) "
                            "instead of looping",
    "looped_reduction": "reduction kernels: loop over the reduced dimension in R0_BLOCK chunks to cut "
                        "register pressure on long rows",
    "split_reduction": "reduction kernels with few rows: split each row over several programs and combine",
    "single_pass": "fuse passes over the same data (e.g. max, sum and normalize of a softmax) into one sweep "
                   "(online algorithms)",
    "vectorize": "wider, contiguous loads and stores per program; drop needless masks and index math",
    "drop_redundant_loads": "load each input element once and reuse it; hoist loop-invariant loads",
    "other": "another rewrite; explain it in the rationale",
}
DEFAULT_STRATEGY = "launch_config"
MEMORY_IN_PROMPT = 12
NOTE_LIMIT = 300
PROFILE_SUMMARY_LIMIT = 2000
_CONFIG_EXTRA_KEYS = ("num_warps", "num_stages")
_BLOCK_NAMES = ("XBLOCK", "YBLOCK", "ZBLOCK", "R0_BLOCK", "R1_BLOCK", "RBLOCK")
_STRATEGY_ALIASES = {
    "config": "launch_config", "launch": "launch_config", "autotune": "launch_config", "tuning": "launch_config",
    "persistent": "persistent_reduction", "looped": "looped_reduction", "loop_reduction": "looped_reduction",
    "split": "split_reduction", "split_k": "split_reduction", "fusion": "single_pass", "online": "single_pass",
    "online_softmax": "single_pass", "vectorization": "vectorize", "redundant_loads": "drop_redundant_loads",
}
_PROFILE_KEYS = ("name", "kind", "calls", "time_ms", "share", "bytes_moved", "achieved_gbps", "roofline_fraction",
                 "bound")


@dataclass(frozen=True)
class Plan:
    """What to try on one kernel. ``fallback`` is true when the planner's reply was unusable."""

    strategy: str
    rationale: str
    config: dict[str, int] | None = None
    fallback: bool = False

    @property
    def needs_source(self) -> bool:
        """A launch-config plan is carried out by the tuner, not by the coder."""
        return self.strategy != "launch_config"

    def launch_config(self, kernel: TritonKernel) -> LaunchConfig | None:
        """The config hint as a :class:`LaunchConfig` for ``kernel``, or ``None`` if it names no block."""
        if not self.config:
            return None
        blocks = {k: v for k, v in self.config.items() if k in kernel.constexprs and k in _BLOCK_NAMES}
        if not blocks:
            return None
        return LaunchConfig(blocks, num_warps=self.config.get("num_warps", 4),
                            num_stages=self.config.get("num_stages", 1))

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class AgentNotes:
    """Why the last call of an agent ended as it did, for logs and the store."""

    fallback: bool = False
    reason: str = ""
    reply: LLMReply | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class Agent:
    """Base class: a client, the prompt templates, and the budget the calls are charged to."""

    name: ClassVar[str] = "agent"
    template: ClassVar[str] = ""
    requires: ClassVar[tuple[str, ...]] = LLM_RESOURCES

    def __init__(self, client: LLMClient, templates: PromptTemplates | None = None,
                 budget: Budget | None = None) -> None:
        self.client = client
        self.templates = templates if templates is not None else PromptTemplates()
        self.budget = budget if budget is not None else client.budget
        self.last = AgentNotes()

    def messages(self, **context: Any) -> list[Message]:
        """The system and user messages for one call (also handy for inspecting prompts)."""
        return [
            {"role": "system", "content": self.templates.render("system.j2", agent=self.name)},
            {"role": "user", "content": self.templates.render(self.template, **context)},
        ]

    def ask(self, **context: Any) -> LLMReply:
        reply = self.client.chat(self.messages(**context), purpose=self.name, require=self.requires,
                                 budget=self.budget)
        self.last = AgentNotes(reply=reply)
        return reply

    def _fell_back(self, reason: str) -> None:
        self.last.fallback = True
        self.last.reason = reason
        log.info("%s: %s", self.name, reason)


# -- profiler ---------------------------------------------------------------------------------


class ProfilerAgent(Agent):
    name = "profiler"
    template = "profiler.j2"

    def summarize(self, profile_rows: list[dict[str, Any]], counters: dict[str, Any] | None = None) -> str:
        """A short bottleneck summary; built locally from the numbers if the reply is unusable."""
        rows = [_profile_row(r) for r in profile_rows]
        reply = self.ask(rows=rows, counters=counters or None)
        text = _prose(reply.text, PROFILE_SUMMARY_LIMIT)
        if text is None:
            self._fell_back("reply was empty or not prose; summary built from the profile")
            return local_profile_summary(profile_rows, counters)
        return text


def local_profile_summary(profile_rows: Sequence[Mapping[str, Any]], counters: Mapping[str, Any] | None = None) -> str:
    """A deterministic bottleneck summary from the profile rows alone."""
    rows = [_profile_row(r) for r in profile_rows]
    if not rows:
        return "No Triton kernels were profiled."
    measured = [r for r in rows if isinstance(r["time_ms"], (int, float))]
    parts: list[str] = []
    if measured:
        ranked = sorted(measured, key=lambda r: (-(r["share"] or 0.0), -r["time_ms"]))
        top = ranked[:5]
        for r in top:
            bits = [f"{r['time_ms']:.4g} ms"]
            if isinstance(r["share"], (int, float)):
                bits.append(f"{100 * r['share']:.1f}% of model time")
            bound = r["bound"] or "unclassified"
            if isinstance(r["roofline_fraction"], (int, float)):
                bits.append(f"{bound}-bound at {100 * r['roofline_fraction']:.0f}% of the copy roofline")
            else:
                bits.append(f"{bound}-bound")
            parts.append(f"{r['name']} ({r['kind']}): " + ", ".join(bits))
        summary = f"{len(rows)} Triton kernels; by time: " + "; ".join(parts) + "."
        lead = top[0]
        if lead["bound"] == "memory" and isinstance(lead["roofline_fraction"], (int, float)):
            headroom = max(0.0, 1.0 - lead["roofline_fraction"])
            summary += f" {lead['name']} leaves about {100 * headroom:.0f}% of bandwidth unused."
        elif lead["bound"] == "launch":
            summary += f" {lead['name']} is launch-bound: fewer, larger programs may help."
    else:
        ranked = sorted(rows, key=lambda r: -(r["bytes_moved"] or 0))
        parts = [f"{r['name']} ({r['kind']}, {r['bytes_moved'] or 0} bytes)" for r in ranked[:5]]
        summary = (f"{len(rows)} Triton kernels, times not measured (no GPU); by bytes moved: "
                   + "; ".join(parts) + ".")
    if counters:
        shown = ", ".join(f"{k}={counters[k]}" for k in sorted(counters, key=str)[:8])
        summary += f" Counters: {shown}."
    return summary


def _profile_row(row: Mapping[str, Any] | Any) -> dict[str, Any]:
    data = row.to_json() if hasattr(row, "to_json") else dict(row)
    out = {k: data.get(k) for k in _PROFILE_KEYS}
    out["name"] = str(out["name"] or "?")
    out["kind"] = str(out["kind"] or "other")
    return out


# -- planner ----------------------------------------------------------------------------------


class PlannerAgent(Agent):
    name = "planner"
    template = "planner.j2"

    def plan(self, kernel: TritonKernel, profile_row: dict[str, Any], memory: list[dict[str, Any]],
             model_summary: str | None = None) -> Plan:
        """One strategy for ``kernel``; a launch-config plan with ``fallback=True`` on a bad reply.
        ``model_summary``: the profiler's account of where the whole model's time goes."""
        keys = [c for c in kernel.constexprs if c in _BLOCK_NAMES] + list(_CONFIG_EXTRA_KEYS)
        example = "{" + ", ".join(f'"{k}": {4 if k == "num_warps" else 1 if k == "num_stages" else 128}'
                                  for k in keys) + "}"
        reply = self.ask(kernel=kernel, row=_profile_row(profile_row or {}), memory=memory_view(memory),
                         strategies=STRATEGIES, config_keys=keys, config_example=example,
                         model_summary=model_summary)
        data = extract_json(reply.text)
        strategy = _strategy(data.get("strategy")) if data else None
        if data is None or strategy is None:
            why = "reply had no JSON object" if data is None else f"unknown strategy {str(data.get('strategy'))[:40]!r}"
            self._fell_back(f"{why}; falling back to a launch-config search")
            return Plan(DEFAULT_STRATEGY, f"planner reply unusable ({why}); searching launch configs",
                        None, fallback=True)
        rationale = _one_line(data.get("rationale") or data.get("reason") or "", 600)
        return Plan(strategy, rationale or "(no rationale given)", _config_hint(data.get("config"), keys))


def _strategy(value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    key = re.sub(r"[\s\-]+", "_", value.strip().lower())
    if key in STRATEGIES:
        return key
    return _STRATEGY_ALIASES.get(key)


def _config_hint(value: Any, keys: Sequence[str]) -> dict[str, int] | None:
    if not isinstance(value, dict):
        return None
    hint: dict[str, int] = {}
    for k in keys:
        v = value.get(k)
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0 and v & (v - 1) == 0:
            if (k == "num_stages" and v > 8) or (k == "num_warps" and v > 32):
                continue
            hint[k] = v
        elif k == "num_stages" and isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 8:
            hint[k] = v
    return hint or None


# -- coder and repairer ------------------------------------------------------------------------


class _SourceAgent(Agent):
    requires = CANDIDATE_RESOURCES

    def _source_from(self, kernel: TritonKernel, reply: LLMReply) -> str | None:
        code = extract_code(reply.text)
        if code is None:
            self._fell_back("no code block in the reply")
            return None
        # Code from a complete fenced block is whole. Code from an unterminated block or from
        # unfenced text is whole only if the model stopped on its own (some servers strip the
        # closing fence as a stop sequence) and it parses; a reply cut at the output limit
        # mid-block is dropped rather than sent to the gates.
        complete = any(b.complete and _clean_body(b.body) == code for b in fenced_blocks(reply.text))
        if not complete and (reply.truncated or not parses(code)):
            self._fell_back("reply was cut off mid-code (output limit); nothing usable" if reply.truncated
                            else "reply's code is unterminated and does not parse")
            return None
        return complete_module(kernel, code)


class CoderAgent(_SourceAgent):
    name = "coder"
    template = "coder.j2"

    def write(self, kernel: TritonKernel, plan: Plan, memory: list[dict[str, Any]]) -> str | None:
        """A full kernel module implementing ``plan``, or ``None`` if the reply held no usable code.

        Needs a candidate slot and GPU time left in the budget (it checks; it does not count the
        candidate: the orchestrator's ``budget.acquire_candidate()`` does, when it gates one).
        """
        reply = self.ask(kernel=kernel, plan=plan, memory=memory_view(memory), imports=_import_lines(kernel))
        return self._source_from(kernel, reply)


class RepairerAgent(_SourceAgent):
    name = "repairer"
    template = "repairer.j2"

    def repair(self, kernel: TritonKernel, candidate_source: str, gate: GateResult, attempt: int,
               max_attempts: int | None = None) -> str | None:
        """A fixed candidate given the gate's reason and numbers, or ``None`` (no code, or GIVE UP)."""
        reply = self.ask(kernel=kernel, candidate=candidate_source, gate=gate, attempt=attempt,
                         max_attempts=max_attempts, imports=_import_lines(kernel))
        if re.search(r"\bGIVE\s+UP\b", reply.text) and extract_code(reply.text) is None:
            self._fell_back("the model gave up on this candidate")
            return None
        return self._source_from(kernel, reply)


def complete_module(kernel: TritonKernel, code: str) -> str:
    """Restore what a model commonly leaves out of a kernel module, copied from the original.

    If the reply defines the kernel with ``@triton.jit`` alone while the original carries a
    ``@triton_heuristics`` decorator, the original decorator is put back (it holds the launch
    contract the gate compares, and models mangle its long literal). If the reply has no import
    at all, the original's header (imports and driver call) is put back. Anything else is left
    for the static gate to judge.
    """
    try:
        tree = ast.parse(code)
        orig_tree = ast.parse(kernel.source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return code
    orig_fn = next((n for n in orig_tree.body if isinstance(n, ast.FunctionDef) and n.name == kernel.name
                    and any(_is_jit(d) for d in n.decorator_list)), None)
    cand_fn = next((n for n in reversed(tree.body) if isinstance(n, ast.FunctionDef) and n.name == kernel.name),
                   None)
    if orig_fn is None or cand_fn is None or not cand_fn.decorator_list:
        return code
    lines = code.split("\n")
    orig_lines = kernel.source.split("\n")
    orig_decs = [d for d in orig_fn.decorator_list if not _is_jit(d)]
    if orig_decs and all(_is_jit(d) for d in cand_fn.decorator_list):
        start = min(d.lineno for d in cand_fn.decorator_list) - 1
        dec_text = orig_lines[orig_decs[0].lineno - 1: orig_decs[-1].end_lineno or orig_decs[-1].lineno]
        lines[start:start] = dec_text
    if not any(isinstance(n, (ast.Import, ast.ImportFrom)) for n in tree.body):
        header_end = min(d.lineno for d in orig_fn.decorator_list) - 1
        header = "\n".join(orig_lines[:header_end]).strip("\n")
        if header:
            lines = [*header.split("\n"), "", *lines]
    out = "\n".join(lines)
    return out if out.endswith("\n") else out + "\n"


def _is_jit(dec: ast.expr) -> bool:
    target = dec.func if isinstance(dec, ast.Call) else dec
    return (isinstance(target, ast.Attribute) and target.attr == "jit") or (
        isinstance(target, ast.Name) and target.id == "jit")


def _import_lines(kernel: TritonKernel) -> list[str]:
    try:
        tree = ast.parse(kernel.source)
    except SyntaxError:
        return []
    return [ast.unparse(n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]


# -- summarizer -------------------------------------------------------------------------------


class SummarizerAgent(Agent):
    name = "summarizer"
    template = "summarizer.j2"

    def summarize(self, kernel_kind: str, plan: Plan, verdict_json: dict[str, Any],
                  speedup: float | None) -> dict[str, Any]:
        """A memory entry ``{kernel_kind, strategy, outcome, speedup, note, source}``.

        Strategy, outcome and speedup are facts taken from the plan and the verdict; only the
        note comes from the model (``source: "llm"``), or is built locally (``"local"``) when the
        reply is unusable.
        """
        entry = local_memory_entry(kernel_kind, plan, verdict_json, speedup)
        gates = [g for g in verdict_json.get("gates", []) if isinstance(g, dict)]
        reply = self.ask(kernel_kind=kernel_kind, strategy=entry["strategy"], outcome=entry["outcome"],
                         speedup=entry["speedup"], gates=[{"name": g.get("name", "?"), "passed": g.get("passed"),
                                                           "reason": g.get("reason", "")} for g in gates])
        data = extract_json(reply.text)
        note = data.get("note") if data else None
        if not isinstance(note, str):
            note = _prose(reply.text, NOTE_LIMIT) if data is None and "{" not in reply.text else None
        note = _one_line(note, NOTE_LIMIT) if isinstance(note, str) else ""
        if len(note) < 10:
            self._fell_back("reply had no usable note; memory entry built locally")
            return entry
        return {**entry, "note": note, "source": "llm"}


def local_memory_entry(kernel_kind: str, plan: Plan | str, verdict_json: Mapping[str, Any],
                       speedup: float | None) -> dict[str, Any]:
    """A deterministic memory entry from the plan and the verdict alone."""
    strategy = plan.strategy if isinstance(plan, Plan) else (_strategy(plan) or "other")
    outcome = _outcome(verdict_json)
    speed = round(float(speedup), 4) if isinstance(speedup, (int, float)) and not isinstance(speedup, bool) else None
    note = f"{strategy} on a {kernel_kind} kernel: {outcome}"
    failed = next((g for g in verdict_json.get("gates", []) if isinstance(g, dict) and g.get("passed") is False), None)
    if failed:
        note += f" ({failed.get('name', '?')}: {_one_line(str(failed.get('reason', '')), 160)})"
    if speed is not None:
        note += f"; {speed:.3g}x end to end"
    return {"kernel_kind": str(kernel_kind), "strategy": strategy, "outcome": outcome, "speedup": speed,
            "note": _one_line(note, NOTE_LIMIT), "source": "local"}


def _outcome(verdict_json: Mapping[str, Any]) -> str:
    status = verdict_json.get("status")
    if isinstance(status, str) and status:
        return _one_line(status, 80)
    if verdict_json.get("accepted"):
        return "accepted"
    if verdict_json.get("rejected_by"):
        return f"rejected by {verdict_json['rejected_by']}"
    return "unknown"


# -- shared helpers ---------------------------------------------------------------------------


def memory_view(memory: Sequence[Mapping[str, Any]] | None) -> list[dict[str, Any]]:
    """The last entries of the experience memory, with every field but the note made safe.

    Strategy, kind and outcome are reduced to known words; the note stays free text and the
    templates quote it as untrusted data.
    """
    out: list[dict[str, Any]] = []
    for m in list(memory or [])[-MEMORY_IN_PROMPT:]:
        if not isinstance(m, Mapping):
            continue
        outcome = str(m.get("outcome", "unknown"))
        outcome = outcome if re.fullmatch(r"accepted|rejected by \w+|passed gates 1-3; performance not measured|"
                                          r"unknown|no candidate", outcome) else "unknown"
        kind = str(m.get("kernel_kind", "other"))
        speedup = m.get("speedup")
        out.append({
            "kernel_kind": kind if re.fullmatch(r"[a-z_]{1,32}", kind) else "other",
            "strategy": _strategy(m.get("strategy")) or "other",
            "outcome": outcome,
            "speedup": speedup if isinstance(speedup, (int, float)) and not isinstance(speedup, bool) else None,
            "note": str(m.get("note", ""))[:NOTE_LIMIT * 2],
        })
    return out


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def _one_line(text: Any, limit: int) -> str:
    line = " ".join(_CONTROL.sub(" ", str(text or "")).replace("```", "").split())
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


def _prose(text: str, limit: int) -> str | None:
    """Usable free text from a reply, or ``None`` for empty or garbage replies."""
    text = re.sub(r"<think>.*?(?:</think>|\Z)", "", text or "", flags=re.DOTALL | re.IGNORECASE).strip()
    if len(text) < 20 or len(re.findall(r"[A-Za-z]{2,}", text)) < 4:
        return None
    letters = sum(c.isalpha() for c in text)
    if letters < 0.4 * len(text.replace(" ", "")):
        return None
    text = _CONTROL.sub("", text)
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


# -- construction -----------------------------------------------------------------------------


@dataclass
class Agents:
    """The five agents over one client and one budget, as the orchestrator wants them."""

    client: LLMClient
    profiler: ProfilerAgent
    planner: PlannerAgent
    coder: CoderAgent
    repairer: RepairerAgent
    summarizer: SummarizerAgent

    @property
    def budget(self) -> Budget:
        return self.client.budget

    def close(self) -> None:
        self.client.close()


def make_agents(settings: LLMSettings, budget: Budget | None = None, *,
                templates: PromptTemplates | None = None, **client_kwargs: Any) -> Agents:
    """Build the client and the five agents sharing it, its budget and one template environment."""
    client = LLMClient(settings, budget, **client_kwargs)
    templates = templates if templates is not None else PromptTemplates()
    return Agents(client, ProfilerAgent(client, templates), PlannerAgent(client, templates),
                  CoderAgent(client, templates), RepairerAgent(client, templates),
                  SummarizerAgent(client, templates))
