"""Per-worker gradients and per-sample squared-gradient sums from one batched pass.

The paper's criterion needs, per element i and worker, Σ_z (∇_i f_z)² over the worker's
samples z. Two estimators:

- ``"exact"`` — per-sample gradients with ``torch.func`` (``vmap(grad(·))`` over all W·B
  samples at once), squared and summed per worker. Works for any BatchNorm-free model.
- ``"fast"`` — the cheap path the paper calls negligible. One ordinary forward/backward
  with hooks records each layer's input ``a`` and output gradient ``δ``; then per worker:

  * Linear weight: Σ_z (δ_z a_zᵀ)² = (δ²)ᵀ(a²), exact when each sample has one row
    (inputs ``[N, in]``); with extra (sequence) dimensions the squares are summed over
    positions within a sample, an approximation.
  * Conv2d weight: the same squared-input / squared-output-gradient weight-gradient
    convolution, an approximation (squares summed over spatial positions within a sample).
    Its precision is ``sq_dtype``: ``"auto"`` (default) runs it in bfloat16 with fp32
    accumulation on CPUs with native bf16 dot products (``avx512_bf16`` or ``amx_bf16``)
    and in float32 elsewhere; ``"float32"`` and ``"bfloat16"`` force one. Gradients are
    always float32.
  * biases, GroupNorm and LayerNorm affine parameters: per-sample gradients are cheap
    reductions, so their squared sums are exact.

A module applied more than once per sample (shared weights) gets exact per-worker
gradients but, in the fast path, squares summed per use — another approximation.

Both return each worker's gradient of its mean loss; ``estimator=None`` returns gradients
only. Modules with parameters outside Linear, Conv2d, GroupNorm and LayerNorm make the fast
path raise ConfigError (use "exact"); with ``estimator=None`` they fall back to
``torch.func`` per-worker gradients.
"""

from __future__ import annotations

import functools
import logging
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from vgcsim.core.errors import ConfigError, unknown_name

log = logging.getLogger(__name__)

ESTIMATORS = ("exact", "fast")
#: Precision of the fast estimator's Conv2d squared-sum convolution (see the module docstring).
SQ_DTYPES = ("auto", "float32", "bfloat16")
TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
HOOKED_MODULES = (nn.Linear, nn.Conv2d, nn.GroupNorm, nn.LayerNorm)
#: Memory bound for the exact estimator's per-sample gradients (processed in sample chunks).
EXACT_CHUNK_BYTES = 512 * 2**20
#: Modules whose tapped input or output is modified in place later in the forward pass.
_COPY_TAPS: weakref.WeakSet[nn.Module] = weakref.WeakSet()

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass
class WorkerGrads:
    """Result of :func:`worker_gradients`.

    losses: ``[W]`` mean loss per worker. grads: one ``[W, *p.shape]`` tensor per trainable
    parameter (``named_parameters()`` order), the gradient of worker w's mean loss.
    sqsums: same shapes, Σ_z (∇_p f_z)² over worker w's samples, or None.
    """

    losses: torch.Tensor
    grads: list[torch.Tensor]
    sqsums: list[torch.Tensor] | None
    names: list[str] = field(default_factory=list)


def trainable_parameters(model: nn.Module) -> list[tuple[str, nn.Parameter]]:
    return [(n, p) for n, p in model.named_parameters() if p.requires_grad]


def _split(x: torch.Tensor, workers: int) -> int:
    if workers < 1 or x.shape[0] % workers:
        raise ConfigError(f"batch of {x.shape[0]} samples does not split into {workers} workers")
    return x.shape[0] // workers


def worker_gradients(
    model: nn.Module,
    loss_fn: LossFn,
    x: torch.Tensor,
    y: torch.Tensor,
    workers: int,
    estimator: str | None,
    *,
    sq_dtype: str = "auto",
) -> WorkerGrads:
    """Gradients of each worker's mean loss (+ squared-gradient sums) in one batched pass.

    ``x, y`` hold ``workers·B`` samples; worker w owns samples ``[w·B, (w+1)·B)``.
    ``loss_fn(logits, y)`` returns per-sample losses (reduction="none"). ``sq_dtype`` is
    the precision of the fast estimator's Conv2d squared-sum convolution (ignored by
    ``exact``); see :func:`resolve_sq_dtype`.
    """
    if estimator is not None and estimator not in ESTIMATORS:
        raise unknown_name("variance estimator", estimator, ESTIMATORS)
    sq_torch_dtype = TORCH_DTYPES[resolve_sq_dtype(sq_dtype)]
    _split(x, workers)
    if any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules()):
        raise ConfigError("per-sample gradients are ill-defined with BatchNorm; use GroupNorm")
    if estimator == "exact":
        return _exact(model, loss_fn, x, y, workers)
    unsupported = unsupported_modules(model)
    if unsupported or (estimator is None and not _taps_handle_convs(model)):
        if estimator == "fast":
            raise ConfigError(
                "the fast variance estimator supports parameters of "
                f"{', '.join(t.__name__ for t in HOOKED_MODULES)} only; "
                f"found {', '.join(sorted(unsupported))} (use estimator 'exact')"
            )
        return _per_worker_func(model, loss_fn, x, y, workers)
    return _hooked(
        model, loss_fn, x, y, workers, with_sqsum=estimator == "fast", sq_dtype=sq_torch_dtype
    )


@functools.cache
def native_bf16() -> bool:
    """True when this CPU has native bf16 dot-product instructions (avx512_bf16 or amx_bf16).

    Read once from ``/proc/cpuinfo`` (Linux); False where it cannot be read. On CPUs without
    them oneDNN emulates bf16, which can be slower than float32.
    """
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            flags = next((ln.split(":", 1)[1].split() for ln in f if ln.startswith("flags")), [])
    except OSError:
        flags = []
    return bool({"avx512_bf16", "amx_bf16"} & set(flags))


def resolve_sq_dtype(sq_dtype: str) -> str:
    """``"float32"`` or ``"bfloat16"``: what ``sq_dtype`` means on this machine.

    ``"auto"`` is ``"bfloat16"`` where :func:`native_bf16` holds and torch has oneDNN, else
    ``"float32"`` (the rule looks at the CPU, also when the tensors live on a GPU). The
    squared sums only feed the test r² > α·v, and bf16 inputs with fp32 accumulation change
    them by well under 1 % (tested), against a 30–67 % gap between the fast and the exact
    estimator on conv weights (docs/compression.md); on a CPU with native bf16 it takes
    about a third off that convolution.
    """
    if sq_dtype not in SQ_DTYPES:
        raise unknown_name("squared-sum precision", sq_dtype, SQ_DTYPES)
    if sq_dtype == "auto":
        fast_bf16 = native_bf16() and torch.backends.mkldnn.is_available()
        return "bfloat16" if fast_bf16 else "float32"
    return sq_dtype


def unsupported_modules(model: nn.Module) -> set[str]:
    bad = set()
    for module in model.modules():
        own = [p for p in module.parameters(recurse=False) if p.requires_grad]
        if own and not isinstance(module, HOOKED_MODULES):
            bad.add(type(module).__name__)
    return bad


def _taps_handle_convs(model: nn.Module) -> bool:
    """False when a Conv2d has a padding the tapped weight-gradient convolution lacks.

    The fast path then raises its specific ConfigError; gradients alone (estimator None)
    fall back to ``torch.func`` instead.
    """
    for module in model.modules():
        if isinstance(module, nn.Conv2d):
            try:
                conv_padding(module)
            except ConfigError:
                return False
    return True


# --------------------------------------------------------------------------- exact


def _exact(model: nn.Module, loss_fn: LossFn, x: torch.Tensor, y: torch.Tensor, workers: int):
    from torch.func import functional_call, grad, vmap

    named = trainable_parameters(model)
    params = {n: p.detach() for n, p in named}
    frozen = {n: p.detach() for n, p in model.named_parameters() if not p.requires_grad}
    buffers = dict(model.named_buffers())

    def sample_loss(p, xi, yi):
        out = functional_call(model, ({**p, **frozen}, buffers), (xi.unsqueeze(0),))
        loss = loss_fn(out, yi.unsqueeze(0)).sum()
        return loss, loss.detach()

    per_sample_grads = vmap(
        grad(sample_loss, has_aux=True), in_dims=(None, 0, 0), randomness="different"
    )
    n, b = x.shape[0], _split(x, workers)
    # Per-sample gradients take n × (parameter count) floats; large models are processed in
    # sample chunks of at most EXACT_CHUNK_BYTES, summed into the per-worker results.
    per_sample_bytes = 4 * sum(p.numel() for _, p in named)
    chunk = max(1, min(n, EXACT_CHUNK_BYTES // max(per_sample_bytes, 1)))
    grads = [p.new_zeros(workers, *p.shape) for _, p in named]
    sqsums = [p.new_zeros(workers, *p.shape) for _, p in named]
    losses = x.new_zeros(n, dtype=torch.float32)
    for start in range(0, n, chunk):
        stop = min(n, start + chunk)
        per_sample, losses[start:stop] = per_sample_grads(params, x[start:stop], y[start:stop])
        owner = torch.arange(start, stop, device=x.device) // b
        for i, (name, _) in enumerate(named):
            g = per_sample[name]
            if chunk == n:
                grads[i] = g.reshape(workers, b, *g.shape[1:]).sum(1)
                sqsums[i] = g.square().reshape(workers, b, *g.shape[1:]).sum(1)
            else:
                grads[i].index_add_(0, owner, g)
                sqsums[i].index_add_(0, owner, g.square())
    grads = [g / b for g in grads]
    return WorkerGrads(losses.reshape(workers, b).mean(1), grads, sqsums, [n for n, _ in named])


def _per_worker_func(model, loss_fn, x, y, workers):
    from torch.func import functional_call, grad, vmap

    named = trainable_parameters(model)
    params = {n: p.detach() for n, p in named}
    frozen = {n: p.detach() for n, p in model.named_parameters() if not p.requires_grad}
    buffers = dict(model.named_buffers())
    b = _split(x, workers)

    def worker_loss(p, xw, yw):
        loss = loss_fn(functional_call(model, ({**p, **frozen}, buffers), (xw,)), yw).mean()
        return loss, loss.detach()

    grads, losses = vmap(
        grad(worker_loss, has_aux=True), in_dims=(None, 0, 0), randomness="different"
    )(params, x.reshape(workers, b, *x.shape[1:]), y.reshape(workers, b, *y.shape[1:]))
    return WorkerGrads(losses, [grads[n] for n, _ in named], None, [n for n, _ in named])


# --------------------------------------------------------------------------- hooks


def conv_padding(module: nn.Conv2d) -> tuple[int, int]:
    if module.padding_mode != "zeros":
        raise ConfigError(
            f"fast estimator: Conv2d padding_mode {module.padding_mode!r} unsupported"
        )
    if isinstance(module.padding, str):
        if module.padding == "valid":
            return (0, 0)
        pads = []
        for k, d in zip(module.kernel_size, module.dilation, strict=True):
            total = d * (k - 1)
            if total % 2:
                raise ConfigError("fast estimator: asymmetric 'same' Conv2d padding unsupported")
            pads.append(total // 2)
        return (pads[0], pads[1])
    return (int(module.padding[0]), int(module.padding[1]))


def _conv_weight_grads(
    module: nn.Conv2d,
    a,
    delta,
    workers: int,
    sq_dtype: torch.dtype | None = None,
    with_grad: bool = True,
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Per worker, the weight gradient summed over its samples (unless ``with_grad`` is
    False: None) and, when ``sq_dtype`` is given, the same convolution on (a², δ²) computed
    in ``sq_dtype``: ``[W, *weight.shape]``.

    One ungrouped weight-gradient convolution per worker on contiguous batch slices (on CPU
    faster than one convolution with workers as groups). Both convolutions of a worker run
    back to back on its slice, while the slice is still in cache.
    """
    w = module.weight
    b = a.shape[0] // workers
    kwargs = {
        "stride": module.stride,
        "padding": conv_padding(module),
        "dilation": module.dilation,
        "groups": module.groups,
    }
    out = torch.empty(workers, *w.shape, dtype=w.dtype, device=w.device) if with_grad else None
    sq = (
        None if sq_dtype is None else torch.empty(workers, *w.shape, dtype=w.dtype, device=w.device)
    )
    for k in range(workers):
        a_k, d_k = a[k * b : (k + 1) * b], delta[k * b : (k + 1) * b]
        if out is not None:
            out[k] = torch.nn.grad.conv2d_weight(a_k, w.shape, d_k, **kwargs)
        if sq is not None:
            sq[k] = torch.nn.grad.conv2d_weight(
                _squared(a_k, sq_dtype), w.shape, _squared(d_k, sq_dtype), **kwargs
            )
    return out, sq


def _squared(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``t²`` in ``dtype`` as a new tensor (never in place: ``t`` is a tap)."""
    if t.dtype == dtype:
        return t.square()
    return t.to(dtype).square_()


def module_grads(module, a, delta, workers, b, with_sqsum, sq_dtype=torch.float32, with_grad=True):
    """Yield (param, worker grad sum [W, *shape], worker sqsum [W, *shape] | None).

    ``with_grad=False`` (the DDP hooks, which need the sums only) skips the gradients and
    yields None for them.
    """
    if isinstance(module, nn.Linear):
        a2 = a.reshape(workers, -1, a.shape[-1])
        d2 = delta.reshape(workers, -1, delta.shape[-1])
        yield (
            module.weight,
            torch.bmm(d2.transpose(1, 2), a2) if with_grad else None,
            (torch.bmm(d2.square().transpose(1, 2), a2.square()) if with_sqsum else None),
        )
        if module.bias is not None:
            per_sample = delta.reshape(workers, b, -1, delta.shape[-1]).sum(2)
            yield (
                module.bias,
                per_sample.sum(1) if with_grad else None,
                (per_sample.square().sum(1) if with_sqsum else None),
            )
    elif isinstance(module, nn.Conv2d):
        grads, sqsums = _conv_weight_grads(
            module, a, delta, workers, sq_dtype if with_sqsum else None, with_grad
        )
        yield module.weight, grads, sqsums
        if module.bias is not None:
            per_sample = delta.sum((2, 3)).reshape(workers, b, -1)
            yield (
                module.bias,
                per_sample.sum(1) if with_grad else None,
                (per_sample.square().sum(1) if with_sqsum else None),
            )
    else:
        if isinstance(module, nn.GroupNorm):
            xhat = F.group_norm(a, module.num_groups, eps=module.eps)
            reduce_dims = tuple(range(2, a.dim()))
        else:
            xhat = F.layer_norm(a, module.normalized_shape, eps=module.eps)
            reduce_dims = tuple(range(1, a.dim() - len(module.normalized_shape)))
        for param, per in ((module.weight, delta * xhat), (module.bias, delta)):
            if param is None or not param.requires_grad:
                continue
            per_sample = per.sum(reduce_dims) if reduce_dims else per
            per_sample = per_sample.reshape(workers, b, *param.shape)
            grad = per_sample.sum(1) if with_grad else None
            yield param, grad, (per_sample.square().sum(1) if with_sqsum else None)


def _tapped_forward(model, loss_fn, x, y):
    """Forward pass recording (module, input, output) of every hooked module.

    A tapped tensor modified in place later in the forward (``ReLU(inplace=True)``) would
    make ``autograd.grad`` answer for the modified value, so such modules are remembered
    in ``_COPY_TAPS`` and the pass is rerun with copies for them (once per module).
    """
    records: list[tuple[nn.Module, torch.Tensor, torch.Tensor, int, int]] = []

    def hook(module, inputs, output):
        a = inputs[0]
        if module in _COPY_TAPS:
            records.append((module, a.detach().clone(), output, -1, -1))
            return output.clone()
        records.append((module, a.detach(), output, a._version, output._version))
        return None

    handles = [
        m.register_forward_hook(hook) for m in model.modules() if isinstance(m, HOOKED_MODULES)
    ]
    try:
        losses = loss_fn(model(x), y)
    finally:
        for h in handles:
            h.remove()
    return losses, records


def _hooked(
    model, loss_fn, x, y, workers, *, with_sqsum: bool, sq_dtype: torch.dtype = torch.float32
) -> WorkerGrads:
    b = _split(x, workers)
    losses, records = _tapped_forward(model, loss_fn, x, y)
    modified = [r[0] for r in records if r[3] >= 0 and (r[1]._version, r[2]._version) != r[3:]]
    if modified:
        _COPY_TAPS.update(modified)
        losses, records = _tapped_forward(model, loss_fn, x, y)
    records = [(m, a, o) for m, a, o, _, _ in records]
    tapped = [(m, a, o) for m, a, o in records if o.requires_grad]
    deltas = torch.autograd.grad(losses.sum(), [o for _, _, o in tapped], allow_unused=True)
    named = trainable_parameters(model)
    index = {id(p): i for i, (_, p) in enumerate(named)}
    grads: list[torch.Tensor | None] = [None] * len(named)
    sqsums: list[torch.Tensor | None] = [None] * len(named)
    with torch.no_grad():
        for (module, a, _), delta in zip(tapped, deltas, strict=True):
            if delta is None:
                continue
            for param, g, sq in module_grads(module, a, delta, workers, b, with_sqsum, sq_dtype):
                i = index.get(id(param))
                if i is None:
                    continue
                grads[i] = g if grads[i] is None else grads[i] + g
                if with_sqsum:
                    sqsums[i] = sq if sqsums[i] is None else sqsums[i] + sq
    for i, (name, p) in enumerate(named):
        if grads[i] is None:
            grads[i] = p.new_zeros(workers, *p.shape)
            sqsums[i] = p.new_zeros(workers, *p.shape)
            log.debug("parameter %s received no gradient", name)
        grads[i] = grads[i] / b
    return WorkerGrads(
        losses.detach().reshape(workers, b).mean(1),
        grads,  # type: ignore[arg-type]
        sqsums if with_sqsum else None,  # type: ignore[arg-type]
        [n for n, _ in named],
    )


def estimator_gap(
    model: nn.Module,
    loss_fn: LossFn,
    x: torch.Tensor,
    y: torch.Tensor,
    workers: int,
    alpha: float = 2.0,
    sq_dtype: str = "auto",
) -> list[dict]:
    """Per layer, how far the fast squared-gradient sums are from the exact ones.

    Returns one dict per trainable parameter: ``layer``, ``name``, ``kind`` (owning module
    type), ``rel_error`` = ‖fast − exact‖₁ / ‖exact‖₁, ``ratio`` = Σ fast / Σ exact,
    ``grad_rel_error`` (the same for the per-worker gradients) and ``flip_rate``: the
    share of elements whose first-step send decision g² > alpha·Σ(∇f_z)²/|B|² differs
    between the two estimators. ``sq_dtype`` is the fast estimator's precision.
    """
    exact = worker_gradients(model, loss_fn, x, y, workers, "exact")
    fast = worker_gradients(model, loss_fn, x, y, workers, "fast", sq_dtype=sq_dtype)
    assert exact.sqsums is not None and fast.sqsums is not None
    b2 = float(x.shape[0] // workers) ** 2
    owner = {}
    for module in model.modules():
        for p in module.parameters(recurse=False):
            owner[id(p)] = type(module).__name__
    params = dict(model.named_parameters())
    rows = []
    for i, name in enumerate(exact.names):
        e, f = exact.sqsums[i].double(), fast.sqsums[i].double()
        g = exact.grads[i].double()
        total = float(e.abs().sum())
        flips = (g.square() > alpha * e / b2) != (g.square() > alpha * f / b2)
        rows.append(
            {
                "layer": i,
                "name": name,
                "kind": owner.get(id(params[name]), "?"),
                "rel_error": float((f - e).abs().sum()) / total if total else 0.0,
                "ratio": float(f.sum()) / total if total else float("nan"),
                "grad_rel_error": float((fast.grads[i] - exact.grads[i]).abs().sum())
                / max(float(exact.grads[i].abs().sum()), 1e-30),
                "flip_rate": float(flips.double().mean()),
            }
        )
    return rows
