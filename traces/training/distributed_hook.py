"""Compressed gradient exchange on torch.distributed: a DDP communication hook and a sync call.

Both paths do the same per-rank work, the real counterpart of the emulated exchange:

1. each rank compresses its own gradient of every layer with a vgcsim compressor (error
   feedback and variance state kept per layer in :class:`VGCState`);
2. the encoded buffers (``Payload.data``, the primary encoding's real bytes) cross the
   network in one real allgatherv (:mod:`vgcsim.traces.training.distributed_allgatherv`);
3. every rank decodes every rank's payloads, sums them in rank order and divides by the
   world size, so all ranks hold the same averaged gradient.

The ``dense`` compressor is the baseline a data-parallel job runs without compression: its
decoded fp32 (or fp16-rounded) gradients go through one ``all_reduce`` instead, the collective
the ``dense`` rows of the cost models assume.

Use :func:`register_vgc_hook` (or :func:`vgc_hook` with
``DistributedDataParallel.register_comm_hook``) or call :func:`sync_gradients` after
``loss.backward()`` in a plain loop (no DDP wrapper). With DDP, the squared-gradient sums
that ``variance`` and ``hybrid`` need come from the ordinary backward pass
(:mod:`vgcsim.traces.compression.sqsum_hooks`): a step is one forward and one backward. The public
import path is :mod:`vgcsim.ddp`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from vgcsim.core.bounded import (
    BOUND_HISTORY,
    align_bytes,
    message_bound_bytes,
    message_header_bytes,
)
from vgcsim.core.errors import ConfigError
from vgcsim.traces.compression import torch_codec
from vgcsim.traces.compression.sqsum_estimators import conv_padding
from vgcsim.traces.compression.sqsum_hooks import SqsumHooks
from vgcsim.traces.training.distributed_allgatherv import start_allgatherv_segments
from vgcsim.traces.wire.encoders import ENCODINGS

log = logging.getLogger(__name__)

# The per-bucket message bound (vgcsim.core.bounded: the one rule the hook runs and the
# cost models and simulator price as allgatherv/bounded).
# all_gather into one tensor: named all_gather_single from torch 2.13 (the older name is
# deprecated there), all_gather_into_tensor before.
_all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


@dataclass
class StepCommStats:
    """What one step's exchange did on this rank.

    Reset at the start of every synchronised backward (when DDP hands the hook its first
    bucket, index 0), by :func:`sync_gradients` and by :meth:`VGCState.start_step`, so the
    figures are one step's whatever the caller does.

    ``sent[layer]``, ``bits[layer][encoding]`` and ``numel[layer]`` describe this rank's own
    payloads. Seconds are wall-clock on this rank: ``compress_s`` (the compress calls; minus
    the encoding time when ``VGCState.time_encode`` measures ``encode_s`` apart, as the
    emulated recorder does), ``comm_s`` (the collective: size exchange + payload all_gather,
    or the dense all_reduce), ``decode_s`` (decode + average).
    """

    sent: dict[int, int] = field(default_factory=dict)
    bits: dict[int, dict[str, int]] = field(default_factory=dict)
    numel: dict[int, int] = field(default_factory=dict)
    collective: str = ""  # "allgatherv" or "allreduce"
    # Bytes this rank put on the wire. sync_gradients: the length exchange (8 bytes per layer)
    # plus the payload all_gather (padding included on gloo). DDP hook: every bucket's padded
    # message (its length header included) plus any fallback round. Dense: 4 per element.
    wire_bytes: int = 0
    # DDP hook: buckets whose message exceeded the bound, so that a second all_gather of the
    # bytes past the bound ran (the first step of every bucket always does: no bound yet).
    fallback_rounds: int = 0
    # DDP hook: the layers of each bucket exchanged, in the order DDP handed them over
    buckets: list[tuple[int, ...]] = field(default_factory=list)
    compress_s: float = 0.0
    encode_s: float = 0.0  # measured only when VGCState.time_encode
    comm_s: float = 0.0
    decode_s: float = 0.0


@dataclass
class VGCState:
    """State of the compressed exchange, one per rank (the ``state`` of the DDP hook).

    Build it with :meth:`for_model` (or let :func:`register_vgc_hook` do it). Fields, what
    they mean and what they cost:

    * ``compressor`` — any :class:`vgcsim.traces.compression.Compressor` (``get_compressor(name,
      **params)``); its own parameters (α, ζ for ``variance``; τ for ``strom``; bits and
      bucket size for ``qsgd``; ...) set how much is sent. One instance serves all layers.
      ``variance`` at ``alpha=0`` with ``values="fp32"`` sends every element exactly, which
      reproduces plain DDP.
    * ``layer_states`` — one ``compressor.init_state(numel)`` per layer (residual ``r`` and,
      for variance, ``v``): error feedback lives here, across steps, per rank. Memory: one
      fp32 copy of the model per state vector (``variance``: two).
    * ``batch_size`` — the number of samples this rank's loss averages over (the per-rank
      batch of the DDP tutorial, a micro-batch when accumulating with ``no_sync``). Required
      by compressors with ``needs_sqsum``: the squared-gradient sums are scaled by
      ``1/batch_size²``; a wrong value silently changes what is sent, so there is no default.
    * ``sqsum_hooks`` — :class:`DirectSqsumHooks` (a
      :class:`vgcsim.traces.compression.sqsum_hooks.SqsumHooks`) gathering
      Σ_z (∇f_z)² during the ordinary backward (set by :meth:`attach` or
      :func:`register_vgc_hook`; ``estimator`` "fast" or "exact"). Cost: the fast
      estimator adds roughly one weight-gradient product per Linear/Conv2d to the backward;
      the exact one computes per-sample weight gradients of Conv2d layers.
    * ``sqsums`` — squared sums handed over by :meth:`start_step` instead (the plain loop and
      the recorder compute them with ``worker_gradients``); used once, by the next exchange.
    * ``generator`` — seeded generator for stochastic compressors (``qsgd``); seed it per rank.
    * ``barrier_before_comm`` — wait for every rank before the timed exchange, so ``comm_s``
      measures the collective alone and not the wait for a slower rank's compute (costs one
      barrier per exchange; meant for measurement runs).
    * ``time_encode`` — encode each primary buffer once more to time encoding apart from
      compression (``encode_s``), as the emulated recorder does.
    * ``stats`` — :class:`StepCommStats` of the last step on this rank.
    * ``bounds``, ``message_history``, ``buckets``, ``fallback_group`` — the DDP hook's
      per-bucket state: the padded message size of the next exchange (a high quantile of
      the largest messages of the last ``BOUND_HISTORY`` exchanges,
      :func:`vgcsim.core.bounded.message_bound_bytes`), the
      flat residual/variance tensors the layer states are views of, and the group of the
      fallback round (a message above its bound costs one more all_gather there, of the
      bytes past the bound). See :func:`_start_bucket_gather`.

    * ``dense_counts`` — the ``dense`` fp32 hook's per-layer (sent, bits) from each layer's
      first step; afterwards the bucket is reduced in place (:func:`_start_bucket_allreduce`).
    * ``tracer`` — with ``register_vgc_hook(..., trace_dir=...)``, the job's trace
      (:class:`vgcsim.traces.training.hook_trace.HookTracer`): :meth:`timed`,
      :meth:`step_done` and :meth:`close_trace` feed it; None (the default) costs nothing.

    Cost: the exchange (for every compressor but ``dense``) is an allgatherv, whose time grows
    with the sum of every rank's payload (P·m for P ranks of m bytes), unlike allreduce's 2·n
    for n dense bytes; it pays when the payloads are ≲ 1/P of the dense gradient. On gloo the
    payload all_gather is padded to the largest rank. Every rank decodes P payloads per layer
    (O(P·sent) work) and compression itself costs one pass over each gradient on the CPU.
    """

    compressor: object
    layer_states: list
    process_group: dist.ProcessGroup | None = None
    batch_size: int | None = None
    generator: torch.Generator | None = None
    device: str = "cpu"
    sqsums: dict[int, torch.Tensor] | None = None
    layer_of: dict[int, int] = field(default_factory=dict)  # id(param) -> layer index
    barrier_before_comm: bool = False
    time_encode: bool = False
    stats: StepCommStats = field(default_factory=StepCommStats)
    sqsum_hooks: SqsumHooks | None = None
    # DDP hook: per bucket (its layers), the padded message size of the next exchange, and
    # the group of the fallback round (its own group, so the round never competes with the
    # main group's collectives for an order).
    bounds: dict[tuple[int, ...], int] = field(default_factory=dict)
    message_history: dict[tuple[int, ...], list[int]] = field(default_factory=dict)
    buckets: dict[tuple[int, ...], torch_codec.BucketState] = field(default_factory=dict)
    fallback_group: dist.ProcessGroup | None = None
    # register_vgc_hook(trace_dir=...): the trace of this job (hook_trace.HookTracer)
    tracer: object | None = field(default=None, repr=False)
    # dense fp32 DDP hook: each layer's (sent, bits) from its first step, after which the
    # bucket is reduced in place (_start_bucket_allreduce)
    dense_counts: dict[int, tuple[int, dict[str, int]]] = field(default_factory=dict)
    _tail: torch.futures.Future | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def collective(self) -> str:
        """``"allreduce"`` for the dense baseline, ``"allgatherv"`` for every compressor."""
        return "allreduce" if getattr(self.compressor, "name", "") == "dense" else "allgatherv"

    @property
    def needs_sqsum(self) -> bool:
        return bool(getattr(self.compressor, "needs_sqsum", False))

    @classmethod
    def for_model(
        cls,
        model: torch.nn.Module,
        compressor: object,
        *,
        process_group: dist.ProcessGroup | None = None,
        batch_size: int | None = None,
        generator: torch.Generator | None = None,
        device: str = "cpu",
        barrier_before_comm: bool = False,
        time_encode: bool = False,
    ) -> VGCState:
        """State for every trainable parameter of ``model`` (layer = index in named_parameters).

        Raises ConfigError when the compressor scales squared-gradient sums and
        ``batch_size`` is missing or not positive.
        """
        if bool(getattr(compressor, "needs_sqsum", False)) and batch_size is None:
            raise ConfigError(
                f"compressor {compressor.name!r} needs batch_size= (the samples this rank's "
                "loss averages over per step) to scale its squared-gradient sums"
            )
        if batch_size is not None and int(batch_size) < 1:
            raise ConfigError(f"batch_size must be a positive integer, got {batch_size!r}")
        params = trainable_parameters(model)
        return cls(
            compressor=compressor,
            layer_states=[compressor.init_state(p.numel()) for p in params],
            process_group=process_group,
            batch_size=None if batch_size is None else int(batch_size),
            generator=generator,
            device=device,
            layer_of={id(p): i for i, p in enumerate(params)},
            barrier_before_comm=barrier_before_comm,
            time_encode=time_encode,
        )

    def attach(
        self, model: torch.nn.Module, *, estimator: str = "fast", sq_dtype: str = "auto"
    ) -> None:
        """Gather the squared-gradient sums in ``model``'s own backward (module hooks).

        ``model`` is the module DDP wraps (``ddp_model.module``). Raises ConfigError when a
        layer is unsupported (see :func:`vgcsim.traces.compression.sqsum_hooks.check_hookable`).
        """
        if self.sqsum_hooks is not None:
            self.sqsum_hooks.remove()
        self.sqsum_hooks = DirectSqsumHooks(model, estimator, sq_dtype)

    def start_step(
        self,
        *,
        sqsums: Sequence[torch.Tensor] | None = None,
        batch_size: int | None = None,
    ) -> None:
        """Reset the statistics; optionally hand over this step's squared-gradient sums.

        Not needed with DDP and :meth:`attach` (statistics reset themselves at every
        synchronised backward and the sums come from the backward). ``sqsums`` are used by
        the next exchange only.
        """
        self.stats = StepCommStats()
        if batch_size is not None:
            self.batch_size = int(batch_size)
        self.sqsums = None if sqsums is None else {i: s for i, s in enumerate(sqsums)}

    def timed(self, phase: str):
        """Context manager timing ``phase`` (``"forward_backward"`` or ``"optimizer"``) of
        this step for the hook's trace (a no-op without ``trace_dir``)."""
        if self.tracer is None:
            return contextlib.nullcontext()
        return self.tracer.timed(phase)

    def step_done(self, **reported: float | None) -> None:
        """Close this step in the hook's trace (every rank, after ``optimizer.step()``):
        ``loss=``, ``lr=``, ``grad_norm=``, and seconds measured by the script
        (``forward_backward_s=``, ``optimizer_s=``) instead of :meth:`timed`. A no-op
        without ``trace_dir``; every ``gather_every`` steps a gather to rank 0."""
        if self.tracer is not None:
            self.tracer.step_done(**reported)

    def close_trace(self, status: str = "complete"):
        """Gather the last rows and finish the hook's trace (every rank, once, after the last
        step); returns the trace folder on rank 0, else None."""
        return None if self.tracer is None else self.tracer.close(status)

    def take_sqsum(self, layer: int, device: torch.device | str = "cpu") -> torch.Tensor:
        """This step's Σ_z (∇f_z)² of ``layer`` (flat fp32 on ``device``), consumed by the call."""
        if self.sqsums is not None and layer in self.sqsums:
            return self.sqsums.pop(layer).reshape(-1).to(device=device, dtype=torch.float32)
        if self.sqsum_hooks is not None:
            sq = self.sqsum_hooks.take(layer)
            if sq is not None:
                # The hooks sum each sample's contribution to the gradient of a loss that
                # averages over batch_size samples, (∇f_z / B)²; the compressor wants Σ (∇f_z)².
                b2 = float(self.batch_size or 1) ** 2
                return (sq.reshape(-1) * b2).to(device=device, dtype=torch.float32)
            return torch.zeros(self.layer_states[layer].residual.numel(), device=device)
        raise ConfigError(
            f"compressor {self.compressor.name!r} needs per-sample squared-gradient sums: "
            "register the hook with register_vgc_hook (or call state.attach(model)) so the "
            "backward gathers them, or pass sqsums= to VGCState.start_step before each exchange"
        )


class DirectSqsumHooks(SqsumHooks):
    """:class:`SqsumHooks` whose fast-estimator sums of Conv2d and 2-D Linear layers are
    direct products (fp32 only; every other case is the recorder's shared code).

    The same products as the recorder's per-worker code for one worker, summed in another
    order, so equal to within float32 rounding (tested against the bound of the computation):
    Σ_z (∇_W f_z)² ≈ conv_weight_grad(a², δ²) (Conv2d, one ``convolution_backward`` with the
    layer's own weight) or δ²ᵀ·a² (Linear, one ``mm``), and the bias sums Σ_z (Σ δ_z)²,
    without the per-worker loop, the ``[workers, ...]`` buffer and the wrappers around them,
    which cost about a third of the hooks' time on small layers.
    """

    def __init__(self, model: nn.Module, estimator: str = "fast", sq_dtype: str = "auto"):
        super().__init__(model, estimator, sq_dtype)
        self._plans: dict[nn.Module, tuple | None] = {}

    def _plan(self, module: nn.Module) -> tuple | None:
        """What the direct path needs of ``module`` (None: the shared code serves it),
        looked up once per module: (conv?, conv arguments, weight and bias layer indices)."""
        plan = self._plans.get(module, False)
        if plan is False:
            conv = isinstance(module, nn.Conv2d)
            plan = None
            if self.estimator == "fast" and self.sq_dtype == torch.float32:
                if conv:
                    args = (module.stride, conv_padding(module), module.dilation, module.groups)
                    plan = (True, args)
                elif isinstance(module, nn.Linear):
                    plan = (False, None)
            if plan is not None:
                weight = self.index.get(id(module.weight))
                bias = None if module.bias is None else self.index.get(id(module.bias))
                plan = (*plan, weight, bias)
            self._plans[module] = plan
        return plan

    def _add(self, module: nn.Module, a: torch.Tensor, delta: torch.Tensor) -> None:
        plan = self._plan(module)
        if (
            plan is None
            or a.dtype != torch.float32
            or delta.dtype != torch.float32
            or (not plan[0] and a.dim() != 2)
        ):
            super()._add(module, a, delta)
            return
        conv, args, wi, bi = plan
        self.backward_calls += 1
        d2 = delta.square()
        if wi is None:
            weight = None
        elif conv:
            stride, padding, dilation, groups = args
            weight = torch.ops.aten.convolution_backward(
                d2,
                a.square(),
                module.weight,
                None,
                stride,
                padding,
                dilation,
                False,
                [0],
                groups,
                (False, True, False),
            )[1]
        else:
            weight = torch.mm(d2.t(), a.square())
        if bi is None:
            bias = None
        elif conv:
            bias = delta.sum((2, 3)).square_().sum(0)
        else:
            bias = d2.sum(0)
        sums = self.sums
        if wi is not None:
            sums[wi] = weight if wi not in sums else sums[wi] + weight
        if bi is not None:
            sums[bi] = bias if bi not in sums else sums[bi] + bias


def trainable_parameters(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    """The parameters that are layers in vgcsim (named_parameters order, requires_grad only)."""
    return [p for _, p in model.named_parameters() if p.requires_grad]


def decode_received(own: object, data: bytes) -> torch.Tensor:
    """Decode another rank's buffer for the same layer into its dense fp32 tensor.

    ``own`` is this rank's payload of that layer: same compressor, same layer, so the same
    encoding and decode context (bucket size, levels, value format); only the bytes differ.
    """
    return dataclasses.replace(own, data=data, message=None).decode()


def _compress_layers(state: VGCState, layers: Sequence[int], grads: Sequence[torch.Tensor]):
    comp = state.compressor
    needs_sqsum = state.needs_sqsum
    if needs_sqsum and state.sqsum_hooks is None:
        missing = [i for i in layers if state.sqsums is None or i not in state.sqsums]
        if missing:
            state.take_sqsum(missing[0])  # raises the ConfigError that says what to do
    stats = state.stats
    encoder = ENCODINGS[comp.primary_encoding] if state.time_encode else None
    payloads = []
    for i, g in zip(layers, grads, strict=True):
        flat = g.detach().reshape(-1).to(torch.float32).cpu()
        sq = state.take_sqsum(i) if needs_sqsum else None
        t0 = time.perf_counter()
        p = comp.compress(
            flat,
            state.layer_states[i],
            sqsum=sq,
            batch_size=state.batch_size or 1,
            layer=i,
            generator=state.generator,
        )
        t1 = time.perf_counter()
        enc_s = 0.0
        if encoder is not None and p.message is not None:
            # compress() encoded the primary buffer once; encoding it again times that part.
            encoder.encode(p.message)
            enc_s = time.perf_counter() - t1
        stats.encode_s += enc_s
        stats.compress_s += max(0.0, (t1 - t0) - enc_s)
        payloads.append(p)
        stats.sent[i] = int(p.sent)
        stats.bits[i] = {k: int(v) for k, v in p.bits.items()}
        stats.numel[i] = int(flat.numel())
    if state.barrier_before_comm:
        dist.barrier(group=state.process_group)
    stats.collective = state.collective
    return payloads


def exchange(state: VGCState, layers: Sequence[int], grads: Sequence[torch.Tensor]) -> list:
    """Compress, allgatherv, decode and average the given layers; returns averaged grads.

    A collective: every rank calls it with the same ``layers`` in the same order.
    """
    payloads = _compress_layers(state, layers, grads)
    if state.collective == "allreduce":
        fut = _start_allreduce(state, payloads, grads)
    else:
        fut = _start_allgatherv(state, payloads, grads)
    fut.wait()
    flat = fut.value()
    out, offset = [], 0
    for g in grads:
        n = g.numel()
        out.append(flat[offset : offset + n].to(dtype=g.dtype, device=g.device).view_as(g))
        offset += n
    return out


def _start_allreduce(
    state: VGCState, payloads: list, grads: Sequence[torch.Tensor]
) -> torch.futures.Future:
    """Dense baseline: one asynchronous all_reduce of the decoded payloads, then ÷ world."""
    t0 = time.perf_counter()
    flat = torch.cat([p.decode() for p in payloads]).to(state.device)
    with state._lock:  # an earlier bucket's callback may be adding to the same step's stats
        state.stats.decode_s += time.perf_counter() - t0
    return _average_in_place(state, flat)


def _average_in_place(state: VGCState, flat: torch.Tensor) -> torch.futures.Future:
    """One asynchronous all_reduce (sum) of the fp32 ``flat`` in place, then ÷ world in
    place; 4 bytes per element on the wire, ``comm_s`` the all_reduce, ``decode_s`` the
    division."""
    stats = state.stats
    world = dist.get_world_size(state.process_group)
    with state._lock:
        stats.wire_bytes += 4 * flat.numel()
    t1 = time.perf_counter()
    work = dist.all_reduce(flat, group=state.process_group, async_op=True)

    def finish(fut: torch.futures.Future) -> torch.Tensor:
        t2 = time.perf_counter()
        out = fut.value()[0].div_(world)
        with state._lock:
            stats.comm_s += t2 - t1
            stats.decode_s += time.perf_counter() - t2
        return out

    return work.get_future().then(finish)


def _start_allgatherv(
    state: VGCState, payloads: list, grads: Sequence[torch.Tensor]
) -> torch.futures.Future:
    """Length exchange now (8 bytes per layer), payload all_gather asynchronously; the
    returned future decodes every rank's payloads and averages them (flat fp32)."""
    stats, group = state.stats, state.process_group
    segments = [bytes(p.data) for p in payloads]
    t0 = time.perf_counter()
    gathered, sent = start_allgatherv_segments(segments, group=group, device=state.device)
    stats.wire_bytes += sent
    numels = [g.numel() for g in grads]

    def finish(done: torch.futures.Future) -> torch.Tensor:
        t1 = time.perf_counter()
        result = done.value()
        parts = [torch.zeros(n, dtype=torch.float32) for n in numels]
        for rank_segments in result.segments:
            for k, segment in enumerate(rank_segments):
                parts[k] += decode_received(payloads[k], segment)
        out = torch.cat(parts) / len(result.segments) if parts else torch.zeros(0)
        with state._lock:
            stats.comm_s += t1 - t0
            stats.decode_s += time.perf_counter() - t1
        return out

    return gathered.then(finish)


def sync_gradients(
    model: torch.nn.Module,
    state: VGCState,
    *,
    sqsums: Sequence[torch.Tensor] | None = None,
    batch_size: int | None = None,
) -> StepCommStats:
    """Replace every ``p.grad`` by the compressed average over ranks (call after ``backward``).

    One allgatherv carries all layers. ``sqsums`` (per layer, named_parameters order) are
    required for compressors with ``needs_sqsum`` unless :meth:`VGCState.attach` gathers them
    in the backward. Returns this step's statistics.
    """
    state.start_step(sqsums=sqsums, batch_size=batch_size)
    params = trainable_parameters(model)
    missing = [i for i, p in enumerate(params) if p.grad is None]
    if missing:
        raise ConfigError(f"layers {missing} have no gradient; call backward() first")
    averaged = exchange(state, list(range(len(params))), [p.grad for p in params])
    with torch.no_grad():
        for p, g in zip(params, averaged, strict=True):
            p.grad.copy_(g)
    return state.stats


def _bucket_sqsum(
    state: VGCState,
    layers: Sequence[int],
    numels: Sequence[int],
    device: torch.device,
    out: np.ndarray | None = None,
) -> torch.Tensor:
    """The bucket's Σ_z (∇f_z)², flat: :meth:`VGCState.take_sqsum` of each layer, with the
    hooks' sums joined first and scaled by B² once (the same fp32 products).

    ``out`` (CPU only): a flat fp32 NumPy workspace of the bucket's size that receives the
    scaled sums (one multiply per layer, no join and no allocation); the result is a view
    of it.
    """
    hooks = state.sqsum_hooks
    if hooks is None or (state.sqsums is not None and any(i in state.sqsums for i in layers)):
        return torch.cat([state.take_sqsum(i, device) for i in layers])
    b2 = float(state.batch_size or 1) ** 2
    if out is not None:
        # x * B² in fp32, B² rounded to fp32 first: what torch's tensor * Python float does.
        b2_f32, start = np.float32(b2), 0
        for i, n in zip(layers, numels, strict=True):
            sq = hooks.take(i)
            if sq is None:
                out[start : start + n] = 0
            else:
                np.multiply(torch_codec.flat_f32(sq), b2_f32, out=out[start : start + n])
            start += n
        return torch.from_numpy(out)
    parts = []
    for i, n in zip(layers, numels, strict=True):
        sq = hooks.take(i)
        parts.append(torch.zeros(n, device=device) if sq is None else sq.reshape(-1))
    return (torch.cat(parts) * b2).to(device=device, dtype=torch.float32)


def _encode_bucket(
    state: VGCState, layers: Sequence[int], grads: Sequence[torch.Tensor], buffer: torch.Tensor
) -> tuple[torch.Tensor, list[int], list | None]:
    """Compress a bucket's layers: their primary buffers back to back (uint8 on the
    gradients' device) and each buffer's byte length.

    The variance compressor runs in torch ops on the gradient's device
    (:mod:`vgcsim.traces.compression.torch_codec`, the same bytes as its NumPy path), over
    the whole bucket at once when it can; other compressors run their own ``compress`` and
    their payloads are returned too (the decode context of :func:`decode_received`).
    """
    comp, stats = state.compressor, state.stats
    device = buffer.device
    numels = [g.numel() for g in grads]
    if not torch_codec.supports(comp):
        payloads = _compress_layers(state, layers, grads)
        data = b"".join(p.data for p in payloads)
        message = (
            torch.frombuffer(bytearray(data), dtype=torch.uint8).to(device)
            if data
            else torch.empty(0, dtype=torch.uint8, device=device)
        )
        return message, [len(p.data) for p in payloads], payloads
    t0 = time.perf_counter()
    if torch_codec.bucket_supported(comp, numels):
        key = tuple(layers)
        bucket = state.buckets.get(key)
        if bucket is None:
            bucket = torch_codec.bucket_state(
                [state.layer_states[i] for i in layers], layers, device
            )
            state.buckets = {k: b for k, b in state.buckets.items() if set(k).isdisjoint(key)}
            state.buckets[key] = bucket
        workspace = None
        if device.type == "cpu":
            workspace = bucket.scratch.get("sqsum")
            if workspace is None:
                workspace = bucket.scratch["sqsum"] = np.empty(sum(numels), dtype=np.float32)
        sq = _bucket_sqsum(state, layers, numels, device, workspace)
        flat = (
            buffer if buffer.numel() == sum(numels) else torch.cat([g.reshape(-1) for g in grads])
        )
        words, lengths, sent = torch_codec.compress_bucket(
            comp, flat, sq, bucket, batch_size=state.batch_size or 1
        )
    else:
        sq = _bucket_sqsum(state, layers, numels, device)
        parts, lengths, sent, start = [], [], [], 0
        for i, g in zip(layers, grads, strict=True):
            torch_codec.state_to(state.layer_states[i], device)
            w, k = torch_codec.compress(
                comp,
                g,
                state.layer_states[i],
                sq[start : start + g.numel()],
                batch_size=state.batch_size or 1,
                layer=i,
            )
            start += g.numel()
            parts.append(w)
            lengths.append(4 * w.numel())
            sent.append(k)
        words = torch.cat(parts)
    encoding = comp.primary_encoding
    for i, n, k, length in zip(layers, numels, sent, lengths, strict=True):
        stats.sent[i] = k
        stats.bits[i] = {encoding: 8 * length}
        stats.numel[i] = n
    stats.compress_s += time.perf_counter() - t0
    if state.barrier_before_comm:
        dist.barrier(group=state.process_group)
    stats.collective = state.collective
    return words.view(torch.uint8), lengths, None


def _decode_bucket(
    state: VGCState,
    rows: torch.Tensor,
    heads: list[list[int]],
    numels: Sequence[int],
    payloads: list | None,
    into: torch.Tensor | None = None,
) -> torch.Tensor:
    """Every rank's message of a bucket decoded, summed in rank order and divided by P.

    ``into``: the bucket's buffer; on the CPU, when it is a contiguous fp32 tensor of the
    bucket's size, the average is written into it (DDP's own hooks return the buffer too)
    instead of a new tensor.
    """
    world = rows.shape[0]
    bounds = [0, *itertools.accumulate(numels)]
    coded = getattr(state.compressor.config, "values", "code4") == "code4"
    single_chunk = all(n <= torch_codec.CHUNK for n in numels)
    header_bytes = 4 * len(heads[0])
    if payloads is None and single_chunk and rows.device.type == "cpu":
        # NumPy on the CPU (torch_codec's reason): the same fp32 adds onto 0, rank after
        # rank (indices are unique within a message), and the same division by P.
        offsets = np.asarray(bounds, dtype=np.int64)
        if (
            into is not None
            and into.device.type == "cpu"
            and into.dtype == torch.float32
            and into.is_contiguous()
            and into.numel() == bounds[-1]
        ):
            out = into
            total = into.numpy()
            total.fill(0)
        else:
            total = np.zeros(bounds[-1], dtype=np.float32)
            out = torch.from_numpy(total)
        r_np = rows.numpy()
        messages = [
            (r_np[r, header_bytes : header_bytes + heads[r][0]].view(np.int32), heads[r][1:])
            for r in range(world)
        ]
        idx, vals, sizes = torch_codec.decode_messages(messages, offsets, coded)
        start = 0
        for n in sizes:
            total[idx[start : start + n]] += vals[start : start + n]
            start += n
        total /= np.float32(world)
        return out
    offsets = torch.tensor(bounds, device=rows.device)
    out = torch.zeros(bounds[-1], dtype=torch.float32, device=rows.device)
    if payloads is None and single_chunk and world == 2:
        # Two ranks: both messages in one decode and one index_add_ (the order of two adds
        # onto 0 does not matter, 0 + a + b = 0 + b + a).
        body = torch.cat([rows[r, header_bytes : header_bytes + heads[r][0]] for r in range(2)])
        idx, vals = torch_codec.decode_bucket_message(
            body.view(torch.int32),
            heads[0][1:] + heads[1][1:],
            torch.cat([offsets[:-1], offsets[:-1]]),
            coded=coded,
        )
        return out.index_add_(0, idx, vals) / world
    pending: list[tuple[torch.Tensor, torch.Tensor]] = []
    for r in range(world):
        lengths = heads[r][1:]
        body = rows[r, header_bytes : header_bytes + heads[r][0]]
        if payloads is None and single_chunk:
            idx, vals = torch_codec.decode_bucket_message(
                body.view(torch.int32), lengths, offsets, coded=coded
            )
        elif payloads is None:
            idx, vals, position = [], [], 0
            for k, length in enumerate(lengths):
                i, v = torch_codec.decode_sparse(
                    body[position : position + length].view(torch.int32),
                    numel=numels[k],
                    coded=coded,
                )
                idx.append(i + bounds[k])
                vals.append(v)
                position += length
            idx, vals = torch.cat(idx), torch.cat(vals)
        else:
            data, position = body.cpu().numpy().tobytes(), 0
            for k, length in enumerate(lengths):
                dense = decode_received(payloads[k], data[position : position + length])
                out[bounds[k] : bounds[k + 1]] += dense.to(rows.device)
                position += length
            continue
        pending.append((idx, vals))
    # Indices are unique within a rank's message, so each index_add_ is one fp32 add per
    # element, rank after rank: the sum the NumPy decode computes.
    for idx, vals in pending:
        out.index_add_(0, idx, vals)
    return out / world


def _start_bucket_gather(
    state: VGCState,
    layers: Sequence[int],
    grads: Sequence[torch.Tensor],
    buffer: torch.Tensor,
    *,
    inline: bool = False,
) -> torch.futures.Future[torch.Tensor]:
    """One bucket's exchange: one padded all_gather of every rank's message, asynchronous.

    The message is ``int32 [total bytes, bytes of each layer]`` followed by the layers'
    buffers, cut or zero-padded to the bucket's bound (``state.bounds``: agreed by every
    rank, since it comes from the previous exchange's gathered lengths). The returned future
    completes when the gather and the decode are done. When a rank's message was longer
    than the bound, every rank sees it in the gathered lengths and the callback runs a
    second all_gather of the bytes past the bound on ``state.fallback_group``; callbacks are
    chained bucket after bucket (``Future.then`` on the previous bucket's future), so
    fallback rounds start in bucket order on every rank, and every collective of the main
    group is started here, in DDP's bucket order.

    ``inline`` (DDP's last bucket of a backward, when nothing is left to overlap): wait for
    the earlier buckets and the gather here and decode on the calling thread, returning a
    completed future; the same result without handing the decode to the collective's thread
    and the average back, two thread switches that cost more than the decode on a busy CPU.
    """
    stats, group = state.stats, state.process_group
    # Compression runs on the gradient's device; the collective on the group's device
    # (state.device: the GPU for NCCL, the CPU for gloo, whose all_gather takes CPU tensors).
    device = torch.device(state.device)
    body, lengths, payloads = _encode_bucket(state, layers, grads, buffer)
    body = body.to(device)
    header_bytes = message_header_bytes(len(lengths))
    total = header_bytes + body.numel()
    key = tuple(layers)
    bound = state.bounds.get(key, align_bytes(header_bytes))
    world = dist.get_world_size(group)
    # The whole message, then zeros up to the bound; the first `bound` bytes are sent.
    if device.type == "cpu":
        # NumPy views on the CPU: a torch slice assignment costs several times the copy.
        m = np.empty(max(total, bound), dtype=np.uint8)
        m[:header_bytes] = np.array([sum(lengths), *lengths], dtype=np.int32).view(np.uint8)
        m[header_bytes:total] = body.numpy()
        m[total:] = 0
        message = torch.from_numpy(m)
    else:
        head = torch.tensor([sum(lengths), *lengths], dtype=torch.int32).view(torch.uint8)
        message = torch.empty(max(total, bound), dtype=torch.uint8, device=device)
        message[:header_bytes] = head.to(device)
        message[header_bytes:total] = body
        message[total:].zero_()
    send = message[:bound]
    gathered = torch.empty(world * bound, dtype=torch.uint8, device=device)
    t0 = time.perf_counter()
    work = _all_gather_single(gathered, send, group=group, async_op=True)
    with state._lock:
        stats.wire_bytes += bound
        stats.buckets.append(key)
    numels = [g.numel() for g in grads]

    def finish(_: torch.futures.Future) -> torch.Tensor:
        rows = gathered.view(world, bound)
        if device.type == "cpu":
            heads = rows.numpy()[:, :header_bytes].view(np.int32).tolist()
        else:
            heads = rows[:, :header_bytes].view(torch.int32).tolist()
        need = header_bytes + max(h[0] for h in heads)
        fallback = need > bound
        if fallback:
            # Every rank sends the bytes of its message past the bound (zeros past its end).
            extra = align_bytes(need) - bound
            rest = torch.zeros(extra, dtype=torch.uint8, device=device)
            tail = message[bound:total]
            rest[: tail.numel()] = tail
            more = torch.empty(world * extra, dtype=torch.uint8, device=device)
            _all_gather_single(more, rest, group=state.fallback_group)
            rows = torch.cat([rows, more.view(world, extra)], dim=1)
        history = state.message_history.setdefault(key, [])
        history.append(need)
        del history[:-BOUND_HISTORY]
        state.bounds[key] = message_bound_bytes(history)
        t2 = time.perf_counter()
        out = _decode_bucket(state, rows, heads, numels, payloads, into=buffer)
        out = out.to(dtype=buffer.dtype, device=buffer.device)
        with state._lock:
            stats.comm_s += t2 - t0
            stats.decode_s += time.perf_counter() - t2
            if fallback:
                stats.wire_bytes += extra
                stats.fallback_rounds += 1
        return out

    cuda = buffer.device.type == "cuda"
    if inline or (cuda and device.type != "cuda"):
        # Also gloo with CUDA gradients: its futures hold CPU tensors only, so the average
        # (on the GPU) goes into a future of its own, naming the device.
        if state._tail is not None:
            state._tail.wait()
        work.wait()
        fut = torch.futures.Future(devices=[buffer.device] if cuda else None)
        fut.set_result(finish(fut))
    elif device.type == "cuda":
        # NCCL: the work's future completes when the collective is enqueued and carries its
        # CUDA events (torch.distributed Work.get_future), so the callback runs at once,
        # ordered after the collective on the device, and the previous bucket's callback
        # has already run by then.
        previous = state._tail

        def after_previous(f: torch.futures.Future) -> torch.Tensor:
            if previous is not None:
                previous.wait()
            return finish(f)

        fut = work.get_future().then(after_previous)
    elif state._tail is None:
        fut = work.get_future().then(finish)
    else:
        fut = torch.futures.collect_all([work.get_future(), state._tail]).then(finish)
    state._tail = fut
    return fut


def _ensure_fallback_group(state: VGCState) -> None:
    """Create the group of the fallback round (a collective of the exchange's ranks)."""
    if state.fallback_group is None:
        ranks = dist.get_process_group_ranks(state.process_group or dist.group.WORLD)
        state.fallback_group = dist.new_group(ranks, use_local_synchronization=True)


def vgc_hook(state: VGCState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP communication hook: compressed exchange of a bucket's gradients, then the average.

    Register with :func:`register_vgc_hook`, or with ``ddp_model.register_comm_hook(state,
    vgc_hook)`` after ``state = VGCState.for_model(ddp_model.module, compressor,
    batch_size=B)`` and, for ``variance``/``hybrid``, ``state.attach(ddp_model.module)``.

    Per bucket the hook compresses the bucket's layers on this rank (the variance compressor
    in torch ops on the gradient's device), starts one asynchronous padded all_gather of
    the message (lengths + payloads, see :func:`_start_bucket_gather`) and returns its future
    chained (``Future.then``) with the decode and the average: the transfer and decode of a
    bucket overlap the backward of the layers before it. Layers are identified by parameter
    identity, so DDP's bucket order does not matter. ``state.stats`` is reset when the first
    bucket (index 0) of a synchronised backward arrives. ``dense`` runs an all_reduce; at
    fp32, from each bucket's second step on, of the bucket's buffer in place with nothing
    compressed or decoded (:func:`_start_bucket_allreduce`), so that the hook traces a plain
    DDP job at plain DDP's cost.
    """
    if bucket.index() == 0:
        state.stats = StepCommStats()
        state._tail = None
    params = bucket.parameters()
    grads = bucket.gradients()
    layers = [state.layer_of[id(p)] for p in params]
    buffer = bucket.buffer()
    if state.collective != "allreduce":
        # Registered by hand: every rank reaches this first bucket of its first exchange
        # in step, so the group is created here, before any fallback round can need it.
        _ensure_fallback_group(state)
        return _start_bucket_gather(state, layers, grads, buffer, inline=bucket.is_last())
    if _dense_in_place(state, layers, buffer):
        return _start_bucket_allreduce(state, layers, buffer)
    payloads = _compress_layers(state, layers, grads)
    # the layers' counts, so that later steps can reduce the bucket in place
    for i in layers:
        state.dense_counts[i] = (state.stats.sent[i], dict(state.stats.bits[i]))
    fut = _start_allreduce(state, payloads, grads)

    def to_bucket(f: torch.futures.Future) -> torch.Tensor:
        return f.value().to(dtype=buffer.dtype, device=buffer.device)

    return fut.then(to_bucket)


def _dense_in_place(state: VGCState, layers: Sequence[int], buffer: torch.Tensor) -> bool:
    """Whether the dense exchange of this bucket may skip compress and decode: the ``dense``
    compressor at fp32 (the message is the gradient itself), an fp32 bucket, no measurement
    mode (``time_encode``, ``barrier_before_comm``) and every layer's counts known from an
    earlier step (:func:`_start_bucket_allreduce`)."""
    comp = state.compressor
    return (
        getattr(comp, "primary_encoding", "") == "fp32"
        and buffer.dtype == torch.float32
        and not state.time_encode
        and not state.barrier_before_comm
        and all(i in state.dense_counts for i in layers)
    )


def _start_bucket_allreduce(
    state: VGCState, layers: Sequence[int], buffer: torch.Tensor
) -> torch.futures.Future[torch.Tensor]:
    """Dense fp32 exchange of a DDP bucket as DDP's own: the bucket's buffer summed and
    averaged in place (:func:`_average_in_place`, as :func:`_start_allreduce` does with the
    decoded payloads, so both give the same values). Nothing is compressed or decoded, so a
    traced plain-DDP job costs its ranks what plain DDP does plus the hook's bookkeeping: the
    per-layer counts (every element, 32 bits) were taken at the first step by the full path."""
    stats = state.stats
    with state._lock:
        for i in layers:
            sent, bits = state.dense_counts[i]
            stats.sent[i], stats.bits[i], stats.numel[i] = sent, dict(bits), sent
        stats.collective = state.collective
    return _average_in_place(state, buffer)


# DDP checks the hook's annotations against the real types; postponed (string) annotations
# would fail that check.
vgc_hook.__annotations__ = {
    "state": VGCState,
    "bucket": dist.GradBucket,
    "return": torch.futures.Future[torch.Tensor],
}


def _check_hook_arguments(
    ddp_model: object,
    compressor: object,
    batch_size: object,
    process_group: object,
    generator: object,
    trace_dir: object,
) -> None:
    """ConfigError (one line) for an argument of :func:`register_vgc_hook` of the wrong kind,
    before anything is built: the message names what was given and what is taken."""
    import numbers
    import os

    from vgcsim.traces.compression.base import Compressor

    def wrong(what: str, value: object, taken: str) -> ConfigError:
        return ConfigError(f"register_vgc_hook: {what} must be {taken}, got {value!r}")

    if not isinstance(ddp_model, torch.nn.parallel.DistributedDataParallel):
        raise wrong("ddp_model", type(ddp_model).__name__, "the DistributedDataParallel model")
    if not isinstance(compressor, Compressor):
        raise wrong(
            "compressor",
            compressor,
            "a compressor (vgcsim.traces.compression.compressors.get_compressor(name, ...))",
        )
    if batch_size is not None and (
        isinstance(batch_size, bool)
        or not isinstance(batch_size, numbers.Integral)
        or batch_size < 1
    ):
        raise wrong("batch_size", batch_size, "a positive integer (samples per rank)")
    if process_group is not None and not isinstance(process_group, dist.ProcessGroup):
        raise wrong("process_group", process_group, "a torch.distributed process group or None")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise wrong("generator", generator, "a torch.Generator or None")
    if trace_dir is not None and not isinstance(trace_dir, (str, os.PathLike)):
        raise wrong("trace_dir", trace_dir, "a folder path or None")


def register_vgc_hook(
    ddp_model: torch.nn.parallel.DistributedDataParallel,
    compressor: object,
    *,
    batch_size: int | None = None,
    estimator: str = "fast",
    sq_dtype: str = "auto",
    process_group: dist.ProcessGroup | None = None,
    generator: torch.Generator | None = None,
    trace_dir: str | None = None,
    gather_every: int = 50,
    overwrite: bool = False,
    flops_per_sample: float | None = None,
) -> VGCState:
    """Build the state for ``ddp_model.module``, gather squared sums in its backward when the
    compressor needs them, register :func:`vgc_hook`; returns the state (read ``.stats``).

    ``trace_dir`` (off by default): rank 0 writes a trace of this job there
    (:mod:`vgcsim.traces.training.hook_trace`); the script closes each step with
    ``state.step_done(loss=...)``, may time ``with state.timed("forward_backward"):`` and
    ``state.timed("optimizer")``, and ends with ``state.close_trace()``. Every
    ``gather_every`` steps the ranks send their rows to rank 0 in one gloo gather;
    ``flops_per_sample`` (forward+backward FLOPs of one sample) lets ``--compute model``
    price the compute; ``overwrite`` replaces an earlier trace there.

    ``batch_size`` (samples per rank that the loss averages over) is required for ``variance``
    and ``hybrid``; ``estimator`` ("fast" or "exact") and ``sq_dtype`` choose how the sums
    are computed (:mod:`vgcsim.traces.compression.sqsum_hooks`). Unsupported layers or a missing
    ``batch_size`` raise ConfigError before any training step, as do arguments of the wrong
    kind (:func:`_check_hook_arguments`).
    """
    _check_hook_arguments(ddp_model, compressor, batch_size, process_group, generator, trace_dir)
    nccl = str(dist.get_backend(process_group)).lower() == "nccl"
    device = f"cuda:{torch.cuda.current_device()}" if nccl else "cpu"
    state = VGCState.for_model(
        ddp_model.module,
        compressor,
        process_group=process_group,
        batch_size=batch_size,
        generator=generator,
        device=device,
    )
    if state.needs_sqsum:
        state.attach(ddp_model.module, estimator=estimator, sq_dtype=sq_dtype)
    if state.collective == "allgatherv":
        _ensure_fallback_group(state)
    if trace_dir is not None:
        from vgcsim.traces.training.hook_trace import HookTracer

        state.tracer = HookTracer(
            state,
            ddp_model.module,
            trace_dir,
            gather_every=gather_every,
            overwrite=overwrite,
            flops_per_sample=flops_per_sample,
            config={
                "batch_size": batch_size,
                "estimator": estimator,
                "compressor": getattr(compressor, "name", ""),
            },
        )
    ddp_model.register_comm_hook(state, vgc_hook)
    return state
