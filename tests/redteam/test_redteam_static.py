"""The red team against gate 1: cheats that run host code through Triton's Python, exhaust the
verifier, or touch memory the original does not, each derived from a real captured kernel and
rejected by the "static" gate through the real ``Cascade.verify`` (before any sandbox time);
plus honest rewrites that must still pass gates 1-3.

Static rejections never reach the sandbox, so every cheat here is answered in milliseconds; the
test asserts that too (a cheat that reached a sandbox would take seconds).
"""

from __future__ import annotations

import pytest

from kernelopt_bot.candidate import Candidate
from kernelopt_bot.capture.artifact import TritonKernel
from kernelopt_bot.pack.format import LaunchConfig
from tests.redteam import cheats
from tests.redteam.harness import (
    Cascades,
    Case,
    MakeCandidate,
    assert_passes_gates_1_to_3,
    cheaters,
    honest,
    report,
    src,
)


def static(id: str, example: str, make: MakeCandidate, rule: str, row: str) -> Case:
    """A cheat gate 1 must reject, by ``rule``."""
    return Case(id, example, make, "static", row, rule=rule)


def honest_case(id: str, example: str, make: MakeCandidate) -> Case:
    return Case(id, example, make, None, "honest")


def body(*statements: str) -> MakeCandidate:
    """Statements after the first load (``{var}`` is the loaded value), so they sit among real code."""
    return src(lambda s: cheats.after_first_load(s, "\n    ".join(statements)))


def config(num_warps: object = 4, num_stages: object = 1,
           extra_kwargs: dict[str, int] | None = None) -> MakeCandidate:
    """The chosen launch config with some fields replaced, built in code as a hostile caller
    could (``LaunchConfig.from_json`` already refuses these when they come from a file)."""
    def make(kernel: TritonKernel, chosen: dict | None) -> Candidate:
        kwargs = {n: v for n, v in ((chosen or {}).get("kwargs") or {}).items() if n in kernel.constexprs}
        kwargs = {**(kwargs or {"XBLOCK": 64}), **(extra_kwargs or {})}
        return Candidate("config", config=LaunchConfig(kwargs, num_warps=num_warps,  # type: ignore[arg-type]
                                                       num_stages=num_stages))  # type: ignore[arg-type]
    return make


def tanh_via_exp(source: str) -> str:
    """``libdevice.tanh(x)`` as ``1 - 2 / (exp(2x) + 1)``: another allowed libdevice function."""
    return cheats.replace_once(source, r"libdevice\.tanh\((\w+)\)", r"1.0 - 2.0 / (libdevice.exp(2.0 * \1) + 1.0)")


def cube_by_static_loop(source: str) -> str:
    """``tmpA = tmpB * tmpB`` computed by a ``tl.static_range`` loop (bit-identical)."""
    return cheats.replace_once(source, r"^(\s*)(tmp\d+) = (tmp\d+) \* \3\s*$",
                               r"\1\2 = \3\n\1for kernelopt_i in tl.static_range(1):\n\1    \2 = \2 * \3")


def add_by_range_loop(source: str) -> str:
    """The last store's value plus zero, added in a two-trip ``tl.range`` loop."""
    looped = cheats.after_first_load(source, "kernelopt_zero = tl.zeros_like({var})\n"
                                     "    for kernelopt_i in tl.range(0, 2, num_stages=1):\n"
                                     "        kernelopt_zero = kernelopt_zero * 1.0")
    return cheats.map_store(looped, "{v} + kernelopt_zero")


CASES = [
    # host code through Triton's Python (sys.modules, dunders, getattr, format)
    static("extra_modules_detects_verifier", "gelu.py",
           body("kernelopt_seen = tl.extra.modules.get('kernelopt_bot.verify.sandbox') is None",
                "{var} = tl.where(kernelopt_seen, {var}, {var} * 0.5)"), "forbidden-name", "host code"),
    static("conditional_expression_chain", "gelu.py",
           body("kernelopt_m = (tl if xnumel > 0 else tl).extra.modules"), "forbidden-name", "host code"),
    static("conditional_expression_method", "gelu.py",
           body("kernelopt_m = (tl if xnumel > 0 else {var}).to(tl.float32)"), "kernel-body", "host code"),
    static("subscript_chain", "softmax.py", body("kernelopt_m = [tl][0].extra"), "kernel-body", "host code"),
    static("format_reaches_dunders", "gelu.py",
           body("kernelopt_s = '{{0.__globals__[os]}}'.format(tl.load)"), "forbidden-name", "host code"),
    static("format_without_dunder_text", "gelu.py",
           body("kernelopt_s = '{{0.extra}}'.format(tl)"), "forbidden-name", "host code"),
    static("getattr_via_builtins", "gelu.py",
           body("kernelopt_g = __builtins__['getattr'](tl, 'extra')"), "forbidden-name", "host code"),
    static("getattr_plain", "linear_epilogue.py", body("kernelopt_g = getattr(tl, 'ext' + 'ra')"),
           "forbidden-name", "host code"),
    static("reads_secret_file", "gelu.py",
           body("kernelopt_secret = open('/proc/1/environ').read()"), "forbidden-name", "host code"),
    static("os_via_helper_module", "gelu.py",
           body("kernelopt_env = triton_helpers.warnings.sys.modules"), "forbidden-name", "host code"),
    static("os_via_import_alias", "gelu.py",
           src(lambda s: cheats.module_level(s, "from os import environ as tl_env", before_kernel=True)),
           "imports", "host code"),
    static("percent_format_string", "gelu.py", body("kernelopt_s = '%s' % xnumel"), "strings", "host code"),
    # denial of service: rejected immediately instead of stopped by the sandbox deadline
    static("static_range_2_pow_40", "gelu.py",
           body("for kernelopt_i in tl.static_range(0, 2**40):", "    {var} = {var} + 0.0"), "loop-bounds", "DoS"),
    static("runtime_loop_2_pow_40", "softmax.py",
           body("for kernelopt_i in range(0, 1 << 40):", "    {var} = {var} + 0.0"), "loop-bounds", "DoS"),
    static("while_loop", "gelu.py", body("while xnumel > 0:", "    {var} = {var} + 0.0"), "kernel-body", "DoS"),
    static("huge_source", "gelu.py", src(lambda s: cheats.padded(s, 14_700_000)), "source-size", "DoS"),
    static("arange_not_power_of_two", "gelu.py", body("kernelopt_r = tl.arange(0, 3 * 32)"), "block-size",
           "contract"),
    static("arange_too_large", "gelu.py", body("kernelopt_r = tl.arange(0, 1 << 22)"), "block-size", "DoS"),
    # write/read discipline
    static("store_into_input_scratch", "gelu.py", src(cheats.write_input), "memory-access", "input as scratch"),
    static("load_output_before_store", "gelu.py", src(cheats.load_output_first), "memory-access",
           "reads the output prefill"),
    static("mixed_pointer_store", "gelu.py", src(cheats.store_through_mixed_pointer), "memory-access",
           "pointer provenance"),
    # malformed launch configs
    static("num_warps_fractional", "gelu.py", config(num_warps=4.9), "num_warps", "malformed config"),
    static("num_stages_bool", "gelu.py", config(num_stages=True), "num_stages", "malformed config"),
    static("unknown_config_key", "gelu.py", config(extra_kwargs={"maxnreg": 128}), "config-key", "malformed config"),
    # honest candidates: must pass gates 1-3
    honest_case("honest_tanh_via_libdevice_exp", "gelu.py", src(tanh_via_exp)),
    honest_case("honest_static_range_loop", "gelu.py", src(cube_by_static_loop)),
    honest_case("honest_tl_range_loop", "gelu.py", src(add_by_range_loop)),
]


@pytest.mark.parametrize("case", cheaters(CASES), ids=lambda c: c.id)
def test_cheater_is_rejected_statically(case: Case, cascades: Cascades) -> None:
    verdict, seconds = cascades.verify(case)
    report(case, verdict)
    static_gate = verdict.gate("static")
    assert not verdict.accepted
    assert verdict.rejected_by == "static", [g.to_json() for g in verdict.gates]
    assert static_gate is not None and static_gate.numbers.get("rule") == case.rule, static_gate
    assert all(g.passed is None for g in verdict.gates if g.name != "static")  # nothing else ran
    assert seconds < 2.0, f"a static rejection took {seconds:.1f}s"


@pytest.mark.parametrize("case", honest(CASES), ids=lambda c: c.id)
def test_honest_candidate_passes_gates_1_to_3(case: Case, cascades: Cascades) -> None:
    verdict, _ = cascades.verify(case)
    report(case, verdict)
    assert_passes_gates_1_to_3(verdict)


def test_red_team_static_covers_the_classes() -> None:
    assert len(cheaters(CASES)) >= 14
    assert len(honest(CASES)) >= 2
    assert {"forbidden-name", "kernel-body", "strings", "loop-bounds", "source-size", "block-size",
            "memory-access", "num_warps", "num_stages", "config-key", "imports"} <= {c.rule for c in cheaters(CASES)}
