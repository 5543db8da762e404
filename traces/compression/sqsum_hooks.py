"""Per-sample squared-gradient sums gathered by module hooks during the ordinary backward.

The variance criterion needs, per element, Σ_z (∇f_z)² over this rank's samples z. The
recorder computes them in its own batched pass (:func:`vgcsim.traces.compression.sqsum_estimators.
worker_gradients`); a training job with a DDP communication hook already runs one forward
and one backward per step, and :class:`SqsumHooks` gathers the same sums from that pass:

* a forward hook on every Linear, Conv2d, GroupNorm and LayerNorm saves the layer's input
  ``a`` and puts a tensor hook on its output;
* that tensor hook receives the output gradient ``δ`` before the layer's own backward runs,
  hence before any of the layer's parameter gradients is ready (and before DDP can hand
  their bucket to the communication hook), and adds the layer's squared sums into
  :attr:`SqsumHooks.sums`.

The per-layer arithmetic is the recorder's, imported from
:mod:`vgcsim.traces.compression.sqsum_estimators` (``module_grads`` for the ``"fast"`` estimator and for biases and norm parameters). The
``"exact"`` estimator replaces the two approximated cases of ``"fast"`` by per-sample weight
gradients from the same ``a`` and ``δ`` (Conv2d through ``unfold``; Linear with extra
sequence dimensions through a batched product), which equals the recorder's ``torch.func``
exact path for these layers (tested).

Sums accumulate over every backward since they were last taken (:meth:`SqsumHooks.take`), so
gradient accumulation with ``DistributedDataParallel.no_sync`` adds the micro-batches' sums as
it adds their gradients.

Cost per step: the ``"fast"`` sums cost about one extra weight-gradient product per Linear
and Conv2d (on the squared tensors; the shared helper skips the gradient product it computes
for the recorder); memory is one saved input per hooked layer (autograd keeps it anyway) and one
fp32 tensor per parameter for the running sums.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from vgcsim.core.errors import ConfigError, unknown_name
from vgcsim.traces.compression.sqsum_estimators import (
    ESTIMATORS,
    HOOKED_MODULES,
    TORCH_DTYPES,
    conv_padding,
    module_grads,
    resolve_sq_dtype,
    trainable_parameters,
    unsupported_modules,
)

log = logging.getLogger(__name__)


def check_hookable(model: nn.Module, estimator: str) -> None:
    """Raise one ConfigError when ``model`` has a layer the hooks cannot serve.

    Parameters must belong to Linear, Conv2d (zeros padding), GroupNorm or LayerNorm;
    BatchNorm makes per-sample gradients ill-defined; the exact estimator needs ungrouped
    Conv2d.
    """
    if estimator not in ESTIMATORS:
        raise unknown_name("variance estimator", estimator, ESTIMATORS)
    if any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules()):
        raise ConfigError("per-sample gradients are ill-defined with BatchNorm; use GroupNorm")
    unsupported = unsupported_modules(model)
    if unsupported:
        raise ConfigError(
            "squared-gradient sums from the backward support parameters of "
            f"{', '.join(t.__name__ for t in HOOKED_MODULES)} only; found "
            f"{', '.join(sorted(unsupported))}"
        )
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            conv_padding(m)  # raises ConfigError for unsupported paddings
            if estimator == "exact" and m.groups != 1:
                raise ConfigError(
                    "exact squared-gradient sums from the backward need Conv2d groups=1 "
                    f"(found groups={m.groups}); use estimator 'fast'"
                )


def _exact_weight_sqsum(module: nn.Module, a: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
    """Σ_z (∇_W f_z)² from per-sample weight gradients (Conv2d or Linear with extra dims)."""
    n = a.shape[0]
    if isinstance(module, nn.Conv2d):
        cols = F.unfold(
            a,
            module.kernel_size,
            dilation=module.dilation,
            padding=conv_padding(module),
            stride=module.stride,
        )  # [N, C·kh·kw, L]
        d = delta.reshape(n, delta.shape[1], -1)  # [N, O, L]
        per_sample = torch.bmm(d, cols.transpose(1, 2))
    else:
        a3 = a.reshape(n, -1, a.shape[-1])
        d3 = delta.reshape(n, -1, delta.shape[-1])
        per_sample = torch.bmm(d3.transpose(1, 2), a3)
    return per_sample.square().sum(0).reshape(module.weight.shape)


class SqsumHooks:
    """Module hooks that sum Σ_z (∇f_z)² per trainable parameter during backward passes.

    ``estimator`` is ``"fast"`` or ``"exact"`` (module docstring); ``sq_dtype`` the fast
    Conv2d precision (:func:`vgcsim.traces.compression.sqsum_estimators.resolve_sq_dtype`).
    Layer ``i`` is the i-th trainable parameter in ``named_parameters()`` order, as everywhere in vgcsim.
    """

    def __init__(self, model: nn.Module, estimator: str = "fast", sq_dtype: str = "auto"):
        check_hookable(model, estimator)
        self.estimator = estimator
        self.sq_dtype = TORCH_DTYPES[resolve_sq_dtype(sq_dtype)]
        self.index = {id(p): i for i, (_, p) in enumerate(trainable_parameters(model))}
        self.sums: dict[int, torch.Tensor] = {}
        self.backward_calls = 0  # layer backward hooks run (for tests and diagnostics)
        self.seconds = 0.0  # wall-clock seconds spent in the backward hooks (diagnostics)
        # Only layers with a parameter to serve are hooked (the index is fixed here too).
        self._handles = [
            m.register_forward_hook(self._forward)
            for m in model.modules()
            if isinstance(m, HOOKED_MODULES)
            and any(id(p) in self.index for p in m.parameters(recurse=False))
        ]

    def _forward(self, module: nn.Module, inputs: tuple, output: torch.Tensor) -> None:
        if not (
            torch.is_grad_enabled() and isinstance(output, torch.Tensor) and output.requires_grad
        ):
            return
        a = inputs[0].detach()
        output.register_hook(self._on_grad(module, a, a._version))

    def _on_grad(self, module: nn.Module, a: torch.Tensor, version: int) -> Callable:
        def hook(delta: torch.Tensor) -> None:
            if a._version != version:
                raise ConfigError(
                    f"the input of {type(module).__name__} was modified in place after its "
                    "forward; squared-gradient sums need it unchanged (avoid inplace=True there)"
                )
            start = time.perf_counter()
            if torch.is_grad_enabled() or delta.requires_grad:
                # A backward with create_graph=True: the sums stay out of the graph.
                with torch.no_grad():
                    self._add(module, a, delta.detach())
            else:
                self._add(module, a, delta)
            self.seconds += time.perf_counter() - start

        return hook

    def _add(self, module: nn.Module, a: torch.Tensor, delta: torch.Tensor) -> None:
        self.backward_calls += 1
        n = a.shape[0]
        exact_weight = self.estimator == "exact" and (
            isinstance(module, nn.Conv2d) or (isinstance(module, nn.Linear) and a.dim() > 2)
        )
        grads = module_grads(module, a, delta, 1, n, True, self.sq_dtype, with_grad=False)
        for param, _, sq in grads:
            i = self.index.get(id(param))
            if i is None:
                continue
            if exact_weight and param is module.weight:
                sq = _exact_weight_sqsum(module, a, delta)
            sq = sq.reshape(param.shape).to(torch.float32)
            self.sums[i] = sq if i not in self.sums else self.sums[i] + sq

    def take(self, layer: int) -> torch.Tensor | None:
        """This layer's sums since the last take (None when no backward reached it)."""
        return self.sums.pop(layer, None)

    def clear(self) -> None:
        """Drop every running sum (a step that was abandoned before its exchange)."""
        self.sums.clear()

    def remove(self) -> None:
        """Remove the module hooks."""
        for h in self._handles:
            h.remove()
        self._handles = []
