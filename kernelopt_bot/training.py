"""One training step of a target's model: forward, loss, backward, and what the gates compare.

Why a step and not a flag in each arm: every place that calls a model (capture and its argument
recording, the engine's swap arm, the model arms of gates 3 and 4, the float64 referee, the
profiler) calls it through :meth:`kernelopt_bot.targets.Target.run`. In training mode that call is
this whole step, so the backward kernels Inductor generates (AOTAutograd's joint graph, split into a
forward and a backward output module) are compiled, recorded, searched, checked and timed exactly
like the forward ones, and gate 3 compares the loss and every gradient, not only the outputs.

What a step returns, in this order once flattened (``flatten_outputs`` sorts a dict's keys):
``grads`` (each parameter's gradient in ``named_parameters`` order, then each floating input's),
``loss``, ``outputs``. Inputs get gradients too: a layer inside a network is asked for the gradient
of its input, and that is often the backward's largest kernel.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

LossFn = Callable[[torch.nn.Module, Any], torch.Tensor]

# Every step starts from this seed, in every arm and in the eager referees: with Inductor's random
# ops compiled as eager's (``fallback_random``, set where a training target loads), dropout draws
# the same masks in the baseline, the candidate, the repeat and eager, so gate 3 compares like with like.
STEP_SEED = 1234
_WEIGHT_SEED = 4321


# Inductor config a training step is compiled with: random ops (dropout) drawn as eager draws them,
# from the step's seed, so compiled arms and the eager and float64 referees see the same masks and
# gate 3 compares like with like. Applied where a training target compiles (capture, each arm).
COMPILE_CONFIG: dict[str, Any] = {"fallback_random": True}


def tensors(out: Any, *, floating_only: bool = False) -> list[torch.Tensor]:
    """The tensors of a model's output (nested tuples, lists, dicts), in the order the gates
    flatten them (a dict by sorted key); ``floating_only`` keeps the ones a loss can take."""
    if isinstance(out, torch.Tensor):
        return [out] if out.is_floating_point() or not floating_only else []
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in tensors(o, floating_only=floating_only)]
    if isinstance(out, dict):
        return [t for k in sorted(out) for t in tensors(out[k], floating_only=floating_only)]
    return []


def buffers_of(model: torch.nn.Module, device: str | None = None, *, copy: bool = True) -> dict[str, torch.Tensor]:
    """A copy of ``model``'s buffers by name, on ``device`` (None: where each is). A training step
    restores them before every timed step, so its copy stays on the model's device; a buffer not
    yet made (a lazy module's) is left out. ``copy=False`` (with no ``device``): the buffers
    themselves, for a caller that copies them before the model runs again."""
    from torch.nn.parameter import is_lazy

    def taken(buf: torch.Tensor) -> torch.Tensor:
        if device:
            return buf.to(device, copy=True)
        return buf.clone() if copy else buf

    with torch.no_grad():
        return {name: taken(buf.detach()) for name, buf in model.named_buffers() if not is_lazy(buf)}


def restore_buffers(model: torch.nn.Module, saved: dict[str, torch.Tensor]) -> None:
    """``model``'s buffers set back to ``saved`` (by name, cast to each buffer's dtype and device; one
    saved with another shape is left alone): where a training step and every compared call start."""
    from torch.nn.parameter import is_lazy

    with torch.no_grad():
        for name, buf in model.named_buffers():
            value = saved.get(name)
            if value is not None and not is_lazy(buf) and value.shape == buf.shape:
                buf.copy_(value)


class TrainingStep:
    """Forward, loss and backward of one model on one set of inputs.

    The default loss is a weighted sum of the outputs, with fixed pseudo-random weights (drawn
    once per output shape, the same in every arm and precision). A plain sum would hand the
    backward all-ones gradients: the gradient of a softmax or a normalization is then exactly
    zero, and a wrong backward kernel would compare equal. A file's own ``get_loss(model, outputs)``
    replaces it.

    A step in training mode changes the model's buffers (BatchNorm's running statistics): every
    step starts from the buffers the model had when it was loaded (``buffers``), so an arm timed a
    thousand times and the eager referee run once compute from the same state, and the buffers a
    step leaves are among its results (a wrong running-variance update is a wrong result).
    """

    def __init__(self, loss: LossFn | None = None, buffers: dict[str, torch.Tensor] | None = None) -> None:
        self.loss = loss
        self.buffers = dict(buffers or {})
        self._weights: dict[tuple[Any, ...], torch.Tensor] = {}
        # What each flattened result of the last full step is ("buffer bn.running_mean",
        # "gradient of fc.weight", "loss", "output 0"): gate 3 names the one that differs.
        self.labels: list[str] = []

    def __call__(self, model: torch.nn.Module, call: Callable[..., Any], inputs: Sequence[Any], *,
                 backward: bool = True) -> dict[str, Any]:
        """The step's buffers, gradients, loss and outputs. ``backward=False``: the forward half
        alone (as the step runs it, recording what the backward needs), for timing the split of a step."""
        restore_buffers(model, self.buffers)
        for p in model.parameters():
            p.grad = None
        leaves = tuple(x.detach().requires_grad_() if isinstance(x, torch.Tensor) and x.is_floating_point() else x
                       for x in inputs)
        torch.manual_seed(STEP_SEED)
        with torch.enable_grad():
            out = call(*leaves)
            if not backward:
                return {"outputs": [t.detach() for t in tensors(out)]}
            loss = self.loss(model, out) if self.loss is not None else self.default_loss(out)
            if not isinstance(loss, torch.Tensor) or loss.numel() != 1 or not loss.requires_grad:
                raise ValueError("the loss must be a one-element tensor that depends on the model's parameters "
                                 "or inputs")
            loss.backward()
        grads = [(f"gradient of {name}", p.grad) for name, p in model.named_parameters() if p.requires_grad]
        grads += [(f"gradient of input {i}", x.grad) for i, x in enumerate(leaves)
                  if isinstance(x, torch.Tensor) and x.requires_grad]
        grads = [(name, g) for name, g in grads if g is not None]
        buffers = [(f"buffer {name}", b.detach().clone()) for name, b in model.named_buffers() if name in self.buffers]
        outputs = [t.detach() for t in tensors(out)]
        self.labels = ([name for name, _ in buffers] + [name for name, _ in grads] + ["loss"]
                       + [f"output {j}" for j in range(len(outputs))])
        return {"buffers": [b for _, b in buffers], "grads": [g for _, g in grads], "loss": loss.detach(),
                "outputs": outputs}

    def default_loss(self, out: Any) -> torch.Tensor:
        """In float32 at least (float64 for the referee): a bf16 model's loss is not rounded to bf16."""
        parts = [(t.to(torch.promote_types(t.dtype, torch.float32)) * self._weight(t)).sum()
                 for t in tensors(out, floating_only=True)]
        if not parts:
            raise ValueError("the model returns no floating tensor to take a loss of (define get_loss(model, outputs))")
        return torch.stack(parts).sum()

    def _weight(self, t: torch.Tensor) -> torch.Tensor:
        key = (tuple(t.shape), t.device)
        if key not in self._weights:
            gen = torch.Generator(device="cpu").manual_seed(_WEIGHT_SEED)
            self._weights[key] = torch.rand(t.shape, generator=gen).add_(0.5).to(t.device)
        return self._weights[key]
