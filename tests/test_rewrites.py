"""Strategy rewrites from the compiler (issue 13 item 2): a looped reduction whose row fits on
chip, generated again by Inductor as a one-pass persistent reduction and grafted into the
original kernel's module, passes the gates as the original's replacement."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelopt_bot.capture.recorder import Capture, capture
from kernelopt_bot.search.base import SearchContext
from kernelopt_bot.search.rewrites import (
    MAX_ROW,
    fixed_sizes,
    graft_persistent,
    match_donors,
    persistent_rewrites,
    qualifying,
)
from kernelopt_bot.search.tuner import ORIGIN, TimedTuner
from kernelopt_bot.targets import load_target
from kernelopt_bot.verify.cascade import Cascade, VerifyOptions
from tests.helpers import DEVICE

WIDE_ROWS = '''
import torch

class Model(torch.nn.Module):
    """LayerNorm then softmax over 2048-wide rows: Inductor loops over each row four times."""
    def __init__(self):
        super().__init__()
        self.norm = torch.nn.LayerNorm(2048)

    def forward(self, x):
        return torch.softmax(self.norm(x), dim=-1)

def get_inputs():
    return [torch.randn(4, 2048)]

def get_init_inputs():
    return []
'''


@pytest.fixture(scope="module")
def wide(tmp_path_factory: pytest.TempPathFactory) -> Capture:
    path = Path(tmp_path_factory.mktemp("rewrites")) / "wide_rows.py"
    path.write_text(WIDE_ROWS)
    return capture(load_target(str(path), DEVICE, "fp32"))


def test_a_looped_reduction_gets_a_one_pass_twin_with_its_own_signature(wide: Capture) -> None:
    (kernel,) = qualifying(wide)
    assert kernel.name.startswith("triton_red_") and "for r0_offset in" in kernel.source
    rewrites = persistent_rewrites(wide)
    rewrite = rewrites[(kernel.graph, kernel.name)]
    assert rewrite.fixed == {"R0_BLOCK": 2048} and rewrite.donor is not None
    assert rewrite.donor.name.startswith("triton_per_")
    assert "for r0_offset in" not in rewrite.source and "R0_BLOCK: tl.constexpr =" not in rewrite.source
    grafted = rewrite.source
    # The original's module around it: its name, parameters and decorator are kept.
    assert f"def {kernel.name}(" in grafted and "@triton_heuristics.reduction(" in grafted
    # One pass: the row is read once and the result stored once; the loops read the input twice
    # and store intermediates in the output buffer, reading them back.
    assert grafted.count("tl.load(in_ptr0") == 1 and grafted.count("tl.store(") == 1
    assert kernel.source.count("tl.load(in_ptr0") == 2 and kernel.source.count("tl.store(") == 3


def test_the_rewrite_passes_the_gates_as_the_originals_replacement(wide: Capture) -> None:
    (kernel,) = qualifying(wide)
    rewrite = persistent_rewrites(wide)[(kernel.graph, kernel.name)]
    ctx = SearchContext(kernel, None, wide.recording(kernel.graph, kernel.name).chosen_config, DEVICE,
                        rewrites=[rewrite])
    proposals = TimedTuner(None).propose(ctx, 3)
    first = proposals[0].candidate
    assert first.label.startswith("one_pass_persistent + ") and first.origin == ORIGIN
    assert first.config is not None and first.config.kwargs["R0_BLOCK"] == 2048
    with Cascade(wide, VerifyOptions(seeds=(0, 1), rounds=1)) as gates:
        verdict = gates.verify(kernel, first)
    assert verdict.infrastructure is None
    assert [g.name for g in verdict.gates if g.passed] == ["static", "correctness", "model"], verdict.gates


def test_a_twin_with_other_parameters_is_not_grafted(wide: Capture) -> None:
    (kernel,) = qualifying(wide)
    rewrite = persistent_rewrites(wide)[(kernel.graph, kernel.name)]
    donor = rewrite.donor
    assert donor is not None
    other = type(donor)(**{**donor.__dict__, "params": [*donor.params[:-1], "extra_ptr", donor.params[-1]]})
    assert graft_persistent(kernel, other) is None


def test_rows_too_long_for_a_register_file_are_not_tried(wide: Capture) -> None:
    (kernel,) = qualifying(wide)
    recording = wide.recording(kernel.graph, kernel.name)
    index = kernel.params.index("r0_numel")
    long_args = (*recording.args[:index], MAX_ROW * 2, *recording.args[index + 1:])
    from kernelopt_bot.search.rewrites import wants_persistent

    assert wants_persistent(kernel, recording.args) and not wants_persistent(kernel, long_args)


def test_the_choices_class_can_be_pickled_into_inductors_cache_key() -> None:
    """Inductor pickles ``inductor_choices_class`` into its compile cache's key; a class defined
    inside a function cannot be, and on the H200 every rewrite compile warned and skipped the cache."""
    import pickle

    from kernelopt_bot.search.rewrites import wide_rows_choices

    choices = wide_rows_choices()
    assert pickle.loads(pickle.dumps(choices)) is choices is wide_rows_choices()


SPLIT_AMAX = '''
import torch

class Model(torch.nn.Module):
    """A max down 8192 rows of 7 columns: Inductor splits it in two stages, a looped reduction
    (448 outputs of 128-wide rows) then a persistent one (7 outputs of 64-wide rows)."""
    def forward(self, x):
        return torch.amax(x, dim=0)

def get_inputs():
    return [torch.randn(8192, 7)]

def get_init_inputs():
    return []
'''


def test_a_split_reductions_second_stage_is_not_its_first_stages_twin(tmp_path: Path) -> None:
    """On the H200 an amax over 65536 rows had its second stage (same name core, same signature)
    grafted into its first: 31 of every 32 outputs unwritten, three candidates rejected by gate 2.
    A twin must fix the same sizes as the original."""
    path = tmp_path / "split_amax.py"
    path.write_text(SPLIT_AMAX)
    cap = capture(load_target(str(path), DEVICE, "fp32"))
    first, second = cap.artifact.kernels
    assert first.name.startswith("triton_red_") and second.name.startswith("triton_per_")
    assert fixed_sizes(first.source, first.name) == {"xnumel": 448, "r0_numel": 128}
    assert fixed_sizes(second.source, second.name) == {"xnumel": 7, "r0_numel": 64}
    assert qualifying(cap) == [first]
    # The wide-rows compile changes nothing here: its kernels are the capture's own.
    assert match_donors([first], [first, second]) == {}
    assert persistent_rewrites(cap) == {}


def test_a_twin_fixes_the_same_sizes(wide: Capture) -> None:
    (kernel,) = qualifying(wide)
    rewrite = persistent_rewrites(wide)[(kernel.graph, kernel.name)]
    assert rewrite.donor is not None
    sizes = fixed_sizes(kernel.source, kernel.name)
    assert sizes["r0_numel"] == 2048 and fixed_sizes(rewrite.donor.source, rewrite.donor.name) == sizes
