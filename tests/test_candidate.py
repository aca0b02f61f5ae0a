"""The bottom of the package: what the search hands the gates, and one default gamma.

The search proposes and the gates decide; neither imports the other. ``Candidate``,
``Proposal`` and ``DEFAULT_GAMMA`` live in :mod:`kernelopt_bot.candidate`, which imports neither
torch nor triton, so the CLI and the configuration read the default without loading the engine.
"""

from __future__ import annotations

import inspect
import subprocess
import sys

import click

from kernelopt_bot.candidate import DEFAULT_GAMMA, Candidate
from kernelopt_bot.cli import main
from kernelopt_bot.config import KerneloptConfig
from kernelopt_bot.github.runner import TargetJob
from kernelopt_bot.pipeline import run_pipeline
from kernelopt_bot.suite import run_suite
from tests.helpers import ROOT, user_env

SEARCH = ["base", "tuner", "agent_search", "orchestrator", "space", "budget", "transforms"]

_LAYERS = f"""
import sys
import kernelopt_bot.candidate, kernelopt_bot.config
assert not {{'torch', 'triton'}} & set(sys.modules), 'the bottom module loaded the engine'
for name in {SEARCH!r}:
    __import__('kernelopt_bot.search.' + name)
gates = sorted(m for m in sys.modules if m.startswith('kernelopt_bot.verify.') and m != 'kernelopt_bot.verify.verdict')
assert not gates, 'the search imports the gates: ' + ', '.join(gates)
import kernelopt_bot.pipeline, kernelopt_bot.verify.cascade
bot = sorted(m for m in sys.modules if m.startswith('kernelopt_bot.github'))
assert not bot, 'the engine imports the bot: ' + ', '.join(bot)
print('ok')
"""


def test_the_search_imports_no_gate_and_the_engine_no_bot() -> None:
    done = subprocess.run([sys.executable, "-c", _LAYERS], capture_output=True, text=True, cwd=ROOT,
                          env=user_env(), timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def _gamma_options(group: click.Group) -> dict[str, object]:
    found: dict[str, object] = {}
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            found.update({f"{name} {k}": v for k, v in _gamma_options(command).items()})
        for param in command.params:
            if param.name == "gamma":
                found[name] = param.default
    return found


def test_every_default_gamma_is_the_one_constant() -> None:
    options = _gamma_options(main)
    assert {"optimize", "verify"} <= set(options), options
    assert set(options.values()) == {DEFAULT_GAMMA}, options
    assert KerneloptConfig.model_fields["gamma"].default == DEFAULT_GAMMA
    assert TargetJob.__dataclass_fields__["gamma"].default == DEFAULT_GAMMA
    for fn in (run_pipeline, run_suite):
        assert inspect.signature(fn).parameters["gamma"].default == DEFAULT_GAMMA, fn.__name__


def test_only_the_tuners_candidates_are_trusted() -> None:
    assert Candidate("c", origin="tuner").trusted
    assert not Candidate("c").trusted and not Candidate("c", origin="llm").trusted
