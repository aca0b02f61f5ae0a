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

# Every step starts from this seed, in every arm: dropout and other random ops draw the same
# numbers in the baseline, the candidate and the repeat (Inductor's generator is seeded from
# torch's), so a comparison between compiled arms is like for like.
STEP_SEED = 1234
_WEIGHT_SEED = 4321


def tensors(out: Any) -> list[torch.Tensor]:
    """The floating tensors of a model's output (nested tuples, lists, dicts), in order."""
    if isinstance(out, torch.Tensor):
        return [out] if out.is_floating_point() else []
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in tensors(o)]
    if isinstance(out, dict):
        return [t for k in sorted(out) for t in tensors(out[k])]
    return []


class TrainingStep:
    """Forward, loss and backward of one model on one set of inputs.

    The default loss is a weighted sum of the outputs, with fixed pseudo-random weights (drawn
    once per output shape, the same in every arm and precision). A plain sum would hand the
    backward all-ones gradients: the gradient of a softmax or a normalization is then exactly
    zero, and a wrong backward kernel would compare equal. A file's own ``get_loss(model, outputs)``
    replaces it.
    """

    def __init__(self, loss: LossFn | None = None) -> None:
        self.loss = loss
        self._weights: dict[tuple[Any, ...], torch.Tensor] = {}
        # What each flattened result of the last full step is ("gradient of fc.weight", "loss",
        # "output 0"): gate 3 names the gradient that differs, not an index.
        self.labels: list[str] = []

    def __call__(self, model: torch.nn.Module, call: Callable[..., Any], inputs: Sequence[Any], *,
                 backward: bool = True) -> dict[str, Any]:
        """The step's loss, gradients and outputs. ``backward=False``: the forward half alone (as
        the step runs it, recording what the backward needs), for timing the split of a step."""
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
        outputs = [t.detach() for t in tensors(out)]
        self.labels = [name for name, _ in grads] + ["loss"] + [f"output {j}" for j in range(len(outputs))]
        return {"grads": [g for _, g in grads], "loss": loss.detach(), "outputs": outputs}

    def default_loss(self, out: Any) -> torch.Tensor:
        parts = [(t.float() * self._weight(t)).sum() for t in tensors(out)]
        if not parts:
            raise ValueError("the model returns no floating tensor to take a loss of (define get_loss(model, outputs))")
        return torch.stack(parts).sum()

    def _weight(self, t: torch.Tensor) -> torch.Tensor:
        key = (tuple(t.shape), t.device)
        if key not in self._weights:
            gen = torch.Generator(device="cpu").manual_seed(_WEIGHT_SEED)
            self._weights[key] = torch.rand(t.shape, generator=gen).add_(0.5).to(t.device)
        return self._weights[key]

