"""Training targets (issue 17): a call is a whole training step, so backward kernels are captured,
searched, checked and timed like forward ones, and gate 3 compares the loss and every gradient.

CPU (the Triton interpreter) at tiny shapes; the H200's step-time speedups and their forward /
backward split come from ``scripts/gpu_check.sh train``.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import torch

from kernelopt_bot.candidate import Candidate
from kernelopt_bot.capture.recorder import capture
from kernelopt_bot.harness.arm_process import flatten_outputs
from kernelopt_bot.result import RunResult
from kernelopt_bot.targets import load_target
from kernelopt_bot.training import TrainingStep
from kernelopt_bot.verify.cascade import Cascade, VerifyOptions
from tests.helpers import EXAMPLES, ROOT, run_cli
from tests.redteam import cheats

TRAIN_TARGETS = Path(__file__).resolve().parent / "train_targets"
LINEAR = TRAIN_TARGETS / "linear_bias.py"


def test_a_training_step_returns_every_gradient_named() -> None:
    target = load_target(str(EXAMPLES / "mlp.py"), "cpu", "fp32", train=True)
    x = target.make_inputs(0)[0]
    step = target.eager(x)
    names = [n for n, _ in target.model.named_parameters()]
    assert target.training is not None
    assert target.training.labels == [f"gradient of {n}" for n in names] + ["gradient of input 0", "loss", "output 0"]
    flat = flatten_outputs(step)
    assert len(flat) == len(target.training.labels)
    # the same gradients autograd gives for the same loss, computed here by hand
    model = target.model
    for p in model.parameters():
        p.grad = None
    leaf = x.detach().requires_grad_()
    out = model(leaf)
    TrainingStep().default_loss(out).backward()
    expected = [p.grad for p in model.parameters()] + [leaf.grad]
    for got, want in zip(flat, expected):
        torch.testing.assert_close(got, want)
    assert target.model.training  # model.train(): a training step, not eval


def test_the_default_loss_does_not_make_a_softmax_gradient_vanish() -> None:
    """A plain sum of a softmax's outputs is constant: its gradient is exactly zero and a wrong
    backward kernel would compare equal. The default loss's weights avoid that."""
    x = torch.randn(4, 10, requires_grad=True)
    TrainingStep().default_loss(torch.softmax(x, -1)).backward()
    assert x.grad is not None and x.grad.abs().max() > 1e-3


def test_a_files_own_loss_is_used() -> None:
    target = load_target(str(TRAIN_TARGETS / "norm_with_loss.py"), "cpu", "fp32", train=True)
    x = target.make_inputs(0)[0]
    loss = flatten_outputs(target.eager(x))[target.training.labels.index("loss")]  # type: ignore[union-attr]
    with torch.no_grad():
        torch.testing.assert_close(loss, target.model(x).float().pow(2).mean())


def test_capture_records_the_backward_kernels() -> None:
    cap = capture(load_target(str(EXAMPLES / "mlp.py"), "cpu", "fp32", train=True))
    phases = {cap.artifact.graphs[k.graph].phase for k in cap.artifact.kernels}
    assert phases == {"forward", "backward"}
    backward = [k for k in cap.artifact.kernels if cap.artifact.graphs[k.graph].phase == "backward"]
    for kernel in backward:  # each backward kernel can be run alone from its recorded arguments
        assert cap.recording(kernel.graph, kernel.name).args
    inference = capture(load_target(str(EXAMPLES / "mlp.py"), "cpu", "fp32"))
    assert {inference.artifact.graphs[k.graph].phase for k in inference.artifact.kernels} == {"forward"}


def test_inspect_train_lists_backward_kernels() -> None:
    proc = run_cli("inspect", str(LINEAR), "--train", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout.strip().splitlines()[-1])
    assert [k["phase"] for k in doc["kernels"]] == ["backward"]  # the forward is addmm alone
    assert "extern_kernels.addmm" in [c["op"] for c in doc["extern_calls"]]


def test_a_candidate_right_in_the_forward_but_wrong_in_a_gradient_is_rejected_by_gate_3() -> None:
    """A backward kernel (the bias gradient's row sum) rounding through fp16 where fp16 is normal:
    within gate 2's elementwise tolerance on the kernel alone, less accurate than the compiler's
    against float64 in that one gradient. The forward kernels are not touched."""
    cap = capture(load_target(str(LINEAR), "cpu", "fp32", train=True))
    (kernel,) = cap.artifact.kernels
    assert cap.artifact.graphs[kernel.graph].phase == "backward"
    source = cheats.map_store(kernel.source,
                              "tl.where(tl.abs({v}) < 1e-4, {v}, {v}.to(tl.float16).to(tl.float32))")
    with Cascade(cap, VerifyOptions(rounds=1, reps=5)) as cascade:
        verdict = cascade.verify(kernel, Candidate("source", source=source))
        honest = cascade.verify(kernel, Candidate("source", source=kernel.source + "\n# the same kernel\n"))
    assert verdict.infrastructure is None, verdict.infrastructure
    assert verdict.gate("static").passed and verdict.gate("correctness").passed, verdict.gates
    assert verdict.rejected_by == "model", [g.to_json() for g in verdict.gates]
    assert "gradient of fc.bias" in verdict.gate("model").reason
    assert honest.gate("model").passed, honest.gate("model").reason


def test_optimize_train_searches_a_backward_kernel_end_to_end(tmp_path: Path) -> None:
    """``kernelopt optimize --train`` as a user runs it; the command is the run's own Reproduce line."""
    out = tmp_path / "out"
    args = ["optimize", str(LINEAR), "--dtype", "fp32", "--train", "--budget", "candidates=1", "--out", str(out)]
    proc = run_cli(*args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = RunResult.load(out / "result.json")
    assert result.status == "ok" and result.train
    (kernel,) = result.kernels
    assert kernel.phase == "backward" and kernel.candidates == 1
    assert kernel.detail == "1 passed gates 1-3; performance not measured", (kernel.status, kernel.detail)
    assert shlex.split(result.reproduce) == ["kernelopt", *args[:-2]], result.reproduce  # --out is not part of it
    report = (out / "report.md").read_text()
    assert "training step" in report and "(backward)" in report


def test_train_is_for_module_targets(tmp_path: Path) -> None:
    launcher = ROOT / "tests" / "kernel_targets" / "liger_swiglu_launcher.py"
    proc = run_cli("optimize", str(launcher), "--train", "--out", str(tmp_path / "o"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "--train optimizes a module's training step" in proc.stdout + proc.stderr


def test_a_broken_training_step_is_bad_input(tmp_path: Path) -> None:
    bad = tmp_path / "bad_loss.py"
    bad.write_text((TRAIN_TARGETS / "norm_with_loss.py").read_text().replace(
        "return outputs.float().pow(2).mean()", "return outputs.float().pow(2)"))  # not one element
    proc = run_cli("inspect", str(bad), "--train")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "a training step fails eagerly" in proc.stderr and "one-element tensor" in proc.stderr


def test_a_model_that_cannot_take_a_second_training_step_is_bad_input(tmp_path: Path) -> None:
    """A buffer updated in forward from the input (which a training step gives gradients) keeps
    the first step's graph; the second step's backward runs into it once freed. Every phase takes
    many steps: this was an internal error of the run (exit 1) before the load checked two."""
    model = tmp_path / "running_mean.py"
    model.write_text(
        "import torch\n\n\nclass Model(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.register_buffer('running', torch.zeros(6))\n\n    def forward(self, x):\n"
        "        self.running.mul_(0.9).add_(x.mean(0) * 0.1)\n        return torch.tanh(x - self.running)\n\n\n"
        "def get_inputs():\n    return [torch.randn(4, 6)]\n\n\ndef get_init_inputs():\n    return []\n")
    proc = run_cli("optimize", str(model), "--train", "--out", str(tmp_path / "o"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "a second training step fails eagerly" in proc.stderr and "backward through the graph a second time" in proc.stderr
    assert run_cli("inspect", str(model)).returncode == 0  # inference is fine


@pytest.mark.parametrize("split", [{}, {"forward": {"baseline": 1.0, "optimized": 0.9},
                                        "backward": {"baseline": 2.0, "optimized": 1.6}}])
def test_report_shows_the_step_split(split: dict) -> None:
    from kernelopt_bot.report import render_report

    result = RunResult(target="m.py", name="m", device="cuda", dtype="bf16", train=True, baseline_ms=3.0,
                       optimized_ms=2.5, speedup=1.2, noise_floor=0.01, step_split_ms=split)
    text = render_report(result)
    assert "training step" in text
    if split:
        assert "| backward of the training step (GPU time, host hidden), `torch.compile (default)` -> with pack | 2.0000 -> 1.6000 (1.250x) |" \
            in text, text
    else:
        assert "of the training step" not in text


def test_a_pack_entry_for_a_backward_kernel_applies_in_a_fresh_training_step(tmp_path: Path) -> None:
    """Packs apply to backward kernels alike: the runtime hook sees the backward's output module.
    The entry changes the bias gradient's sum (times 3), so applying it shows in that gradient only."""
    from kernelopt_bot.candidate import candidate_pack
    from kernelopt_bot.capture.recorder import compile_fresh
    from kernelopt_bot.pack import runtime

    target = load_target(str(LINEAR), "cpu", "fp32", train=True)
    cap = capture(target)
    (kernel,) = cap.artifact.kernels
    tripled = cheats.map_store(kernel.source, "{v} * 3.0")
    pack = candidate_pack(cap, kernel, Candidate("source", source=tripled))
    inputs = target.make_inputs(5)
    expected = flatten_outputs(target.eager(*inputs))
    runtime.clear_log()
    with runtime.installed(pack):
        got = flatten_outputs(target.run(compile_fresh(target.model), inputs))
        applied = [a.kernel_name for a in runtime.applied()]
    assert applied == [kernel.name]
    labels = target.training.labels  # type: ignore[union-attr]
    bias = labels.index("gradient of fc.bias")
    torch.testing.assert_close(got[bias], 3.0 * expected[bias])
    for i, (g, e) in enumerate(zip(got, expected)):
        if i != bias:
            torch.testing.assert_close(g, e, msg=labels[i])
    # the same pack through `kernelopt bench --train`, as a user runs it
    pack.save(tmp_path / "pack.json")
    proc = run_cli("bench", str(LINEAR), "--train", "--pack", str(tmp_path / "pack.json"), "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    bench = json.loads(proc.stdout.strip().splitlines()[-1])
    assert bench["applied"] == [kernel.name] and bench["max_abs_diff"] > 0  # the tripled gradient differs


def test_an_arm_runs_training_steps_and_times_the_forward_half() -> None:
    """The model arm of a training target answers a step's outputs (loss and gradients) and a
    timing request for the forward half alone (on the CPU there is no clock: no time, no error)."""
    from kernelopt_bot.harness.arm_process import ArmProcess, ArmSpec

    arm = ArmProcess(ArmSpec("baseline", str(LINEAR), "cpu", "fp32", train=True))
    try:
        arm.wait_ready()
        outputs = arm.request("outputs", 3)
        target = load_target(str(LINEAR), "cpu", "fp32", train=True)
        expected = flatten_outputs(target.eager(*target.make_inputs(3)))
        assert len(outputs) == len(expected) == len(target.training.labels)  # type: ignore[union-attr]
        for got, want in zip(outputs, expected):
            torch.testing.assert_close(got, want)
        assert arm.request("time", 3, 2, "forward") is None
    finally:
        arm.close()


def test_the_step_split_is_the_forward_and_the_step_less_its_forward_in_device_time() -> None:
    """The halves come from the device-time measurements (host hidden), not from the step's
    headline time, which on a host-bound forward would put a faster forward kernel in the backward."""
    from kernelopt_bot.harness.bench import RoundResult, _step_split

    rounds = [RoundResult(i, 9.0, 9.0, 9.0, baseline_forward_ms=1.0, packed_forward_ms=0.9,
                          baseline_step_device_ms=3.0 + 0.1 * i, packed_step_device_ms=2.5) for i in range(3)]
    rounds.append(RoundResult(9, 3.0, 2.5, 3.0, baseline_forward_ms=1.0, packed_forward_ms=0.9))  # no device step
    split = _step_split(rounds)
    assert split["forward"] == {"baseline": 1.0, "optimized": 0.9, "speedup": pytest.approx(1.0 / 0.9)}
    assert split["backward"]["baseline"] == pytest.approx(2.1) and split["backward"]["optimized"] == pytest.approx(1.6)
    assert _step_split([RoundResult(0, 1.0, 1.0, 1.0)]) == {}


def test_a_split_step_comparison_asks_each_arm_for_both_halves_with_the_host_hidden() -> None:
    from kernelopt_bot.harness import bench

    class _TrainingArm:
        where, ready = "process", True

        def __init__(self, forward: float, step: float) -> None:
            self.forward, self.step, self.info = forward, step, {"applied": [], "skipped": []}
            self.asked: list[tuple] = []

        def request(self, op: str, *args: object, **_kw: object) -> object:
            if op == "outputs":
                return [torch.ones(2)]
            self.asked.append(args[2:])
            hidden = len(args) > 3 and args[3]
            if len(args) > 2 and args[2] == "forward":
                return (self.forward, None)
            return (self.step if hidden else self.step + 5.0, None)  # the host-bound headline differs

    base, packed = _TrainingArm(1.0, 3.0), _TrainingArm(0.8, 2.8)
    real = bench._max_abs_diff
    bench._max_abs_diff = lambda a, b, _d="cpu": real(a, b, "cpu")  # type: ignore[assignment]
    try:
        result = bench.compare_arms(base, packed, _TrainingArm(1.0, 3.0), target="t", device="cuda", dtype="bf16",
                                    rounds=2, split_step=True)
    finally:
        bench._max_abs_diff = real  # type: ignore[assignment]
    assert ("forward", True) in base.asked and ("step", True) in base.asked and () in base.asked
    assert result.step_split_ms["forward"] == {"baseline": 1.0, "optimized": 0.8, "speedup": pytest.approx(1.25)}
    assert result.step_split_ms["backward"] == {"baseline": 2.0, "optimized": pytest.approx(2.0),
                                                "speedup": pytest.approx(1.0)}
    assert result.baseline_ms == 8.0 and result.packed_ms == 7.8  # the headline: the step as it runs


def test_each_halfs_speedup_pairs_the_arms_within_a_pass() -> None:
    """A host that is fast in some passes and slow in others: in the third pass the packed model
    ran fast while the baseline ran slow. Each half's speedup is the median of the passes' paired
    ratios (1.25 forward, 1.0 backward), as the step's own; the ratio of the arms' medians would
    read 2.5 and 2.0 (each arm's median lands on another state)."""
    from kernelopt_bot.harness import bench

    def med(values: list[float]) -> float:
        return sorted(values)[len(values) // 2]

    b_fwd, p_fwd, b_step, p_step = [1.0, 2.0, 2.0], [0.8, 1.6, 0.8], [3.0, 6.0, 6.0], [2.8, 5.6, 2.8]
    round_ = bench.RoundResult(1000, 8.0, 7.8, 8.0, baseline_forward_ms=med(b_fwd), packed_forward_ms=med(p_fwd),
                               baseline_step_device_ms=med(b_step), packed_step_device_ms=med(p_step),
                               baseline_forward_passes_ms=b_fwd, packed_forward_passes_ms=p_fwd,
                               baseline_step_passes_ms=b_step, packed_step_passes_ms=p_step)
    split = bench._step_split([round_])
    assert split["forward"]["baseline"] / split["forward"]["optimized"] == pytest.approx(2.5)
    assert split["forward"]["speedup"] == pytest.approx(1.25)
    assert split["backward"]["baseline"] / split["backward"]["optimized"] == pytest.approx(2.0)
    assert split["backward"]["speedup"] == pytest.approx(1.0)
    result = RunResult(target="m.py", name="m", device="cuda", dtype="bf16", train=True, step_split_ms=split)
    assert [h["speedup"] for h in result.step_halves] == [pytest.approx(1.25), pytest.approx(1.0)]
    # A round written before the passes were kept pairs its medians as one pass.
    old = bench.RoundResult.from_json({k: v for k, v in round_.__dict__.items() if "passes" not in k})
    assert old.step_half_ratios("forward") == [pytest.approx(2.5)]


def test_dropout_batchnorm_and_integer_outputs_compare_like_with_like() -> None:
    """Compiled dropout draws eager's masks (so the compiled step equals the eager one exactly),
    every step starts from the buffers the model was loaded with, the buffers a step leaves and its
    integer outputs are results gate 3 compares."""
    target = load_target(str(TRAIN_TARGETS / "bn_dropout.py"), "cpu", "fp32", train=True)
    inputs = target.make_inputs(2)
    first = flatten_outputs(target.eager(*inputs))
    labels = list(target.training.labels)  # type: ignore[union-attr]
    assert labels[:3] == ["buffer bn.running_mean", "buffer bn.running_var", "buffer bn.num_batches_tracked"]
    assert labels[-2:] == ["output 0", "output 1"] and first[-1].dtype == torch.int64
    again = flatten_outputs(target.eager(*inputs))  # the second step starts where the first did
    for a, b, label in zip(first, again, labels):
        assert torch.equal(a, b), label
    compiled = flatten_outputs(target.run(capture(target).compiled, inputs))  # compiled as a training step is
    for a, b, label in zip(first, compiled, labels):
        torch.testing.assert_close(b, a, msg=label)
    assert first[labels.index("output 0")].eq(0).any()  # dropout did drop
