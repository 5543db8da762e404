"""Compressed gradient exchange on torch.distributed: a DDP communication hook and a sync call.

Both paths do the same per-rank work, the real counterpart of the emulated exchange:

1. each rank compresses its own gradient of every layer with a vgcsim compressor (error
   feedback and variance state kept per layer in :class:`VGCState`);
2. the encoded buffers (``Payload.data``, the primary encoding's real bytes) cross the
   network in one real allgatherv (:mod:`traces.training.distributed_allgatherv`);
3. every rank decodes every rank's payloads, sums them in rank order and divides by the
   world size, so all ranks hold the same averaged gradient.

The ``dense`` compressor is the baseline a data-parallel job runs without compression: its
decoded fp32 (or fp16-rounded) gradients go through one ``all_reduce`` instead, the collective
the ``dense`` rows of the cost models assume.

Use :func:`vgc_hook` with ``DistributedDataParallel.register_comm_hook`` or call
:func:`sync_gradients` after ``loss.backward()`` in a plain loop (no DDP wrapper).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from traces.compression import ENCODINGS
from traces.errors import ConfigError
from traces.training.distributed_allgatherv import allgatherv_segments, wire_bytes

log = logging.getLogger(__name__)


@dataclass
class StepCommStats:
    """What one step's exchange did on this rank (reset by :meth:`VGCState.start_step`).

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
    wire_bytes: int = 0  # bytes this rank contributed to the payload collective
    compress_s: float = 0.0
    encode_s: float = 0.0  # measured only when VGCState.time_encode
    comm_s: float = 0.0
    decode_s: float = 0.0


@dataclass
class VGCState:
    """State of the compressed exchange, one per rank (the ``state`` of the DDP hook).

    Hyperparameters:

    * ``compressor`` — any :class:`traces.compression.Compressor` (``get_compressor(name,
      **params)``); its own parameters (α, ζ for ``variance``; τ for ``strom``; bits and
      bucket size for ``qsgd``; ...) set how much is sent. One instance serves all layers.
    * ``layer_states`` — one ``compressor.init_state(numel)`` per layer (residual ``r`` and,
      for variance, ``v``): error feedback lives here, across steps, per rank.
    * ``batch_size`` — samples behind this rank's gradient (the compressor scales squared-
      gradient sums by ``1/batch_size²``).
    * ``sqsums`` — for compressors with ``needs_sqsum`` (``variance``, ``hybrid``): per-layer
      Σ_z (∇f_z)² over this rank's samples, set by :meth:`start_step` before the exchange
      (compute them with ``traces.compression.variance.worker_gradients(..., workers=1)``).
    * ``generator`` — seeded generator for stochastic compressors (``qsgd``); seed it per rank.
    * ``barrier_before_comm`` — wait for every rank before the timed exchange, so ``comm_s``
      measures the collective alone and not the wait for a slower rank's compute (costs one
      barrier per exchange; meant for measurement runs).
    * ``time_encode`` — encode each primary buffer once more to time encoding apart from
      compression (``encode_s``), as the emulated recorder does.

    Cost: the exchange (for every compressor but ``dense``) is an allgatherv, whose time grows with the sum of every rank's payload
    (P·m for P ranks of m bytes), unlike allreduce's 2·n for n dense bytes; it pays when the
    payloads are ≲ 1/P of the dense gradient. On gloo the payload all_gather is padded to the
    largest rank. Every rank decodes P payloads per layer (O(P·sent) work) and
    compression itself costs one pass over each gradient (plus the squared-gradient sums for
    variance, computed by the caller).
    """

    compressor: object
    layer_states: list
    process_group: dist.ProcessGroup | None = None
    batch_size: int = 1
    generator: torch.Generator | None = None
    device: str = "cpu"
    sqsums: dict[int, torch.Tensor] | None = None
    layer_of: dict[int, int] = field(default_factory=dict)  # id(param) -> layer index
    barrier_before_comm: bool = False
    time_encode: bool = False
    stats: StepCommStats = field(default_factory=StepCommStats)

    @property
    def collective(self) -> str:
        """``"allreduce"`` for the dense baseline, ``"allgatherv"`` for every compressor."""
        return "allreduce" if getattr(self.compressor, "name", "") == "dense" else "allgatherv"

    @classmethod
    def for_model(
        cls,
        model: torch.nn.Module,
        compressor: object,
        *,
        process_group: dist.ProcessGroup | None = None,
        batch_size: int = 1,
        generator: torch.Generator | None = None,
        device: str = "cpu",
        barrier_before_comm: bool = False,
        time_encode: bool = False,
    ) -> VGCState:
        """State for every trainable parameter of ``model`` (layer = index in named_parameters)."""
        params = trainable_parameters(model)
        return cls(
            compressor=compressor,
            layer_states=[compressor.init_state(p.numel()) for p in params],
            process_group=process_group,
            batch_size=batch_size,
            generator=generator,
            device=device,
            layer_of={id(p): i for i, p in enumerate(params)},
            barrier_before_comm=barrier_before_comm,
            time_encode=time_encode,
        )

    def start_step(
        self,
        *,
        sqsums: Sequence[torch.Tensor] | None = None,
        batch_size: int | None = None,
    ) -> None:
        """Begin a step: reset the statistics, set this step's squared-gradient sums."""
        self.stats = StepCommStats()
        if batch_size is not None:
            self.batch_size = int(batch_size)
        self.sqsums = None if sqsums is None else {i: s for i, s in enumerate(sqsums)}


def trainable_parameters(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    """The parameters that are layers in vgcsim (named_parameters order, requires_grad only)."""
    return [p for _, p in model.named_parameters() if p.requires_grad]


def decode_received(own: object, data: bytes) -> torch.Tensor:
    """Decode another rank's buffer for the same layer into its dense fp32 tensor.

    ``own`` is this rank's payload of that layer: same compressor, same layer, so the same
    encoding and decode context (bucket size, levels, value format); only the bytes differ.
    """
    return dataclasses.replace(own, data=data, message=None).decode()


def exchange(state: VGCState, layers: Sequence[int], grads: Sequence[torch.Tensor]) -> list:
    """Compress, allgatherv, decode and average the given layers; returns averaged 1-D grads.

    A collective: every rank calls it with the same ``layers`` in the same order.
    """
    comp = state.compressor
    needs_sqsum = bool(getattr(comp, "needs_sqsum", False))
    if needs_sqsum and (state.sqsums is None or any(i not in state.sqsums for i in layers)):
        raise ConfigError(
            f"compressor {comp.name!r} needs per-sample squared-gradient sums: pass sqsums= to "
            "VGCState.start_step before the backward pass (see "
            "traces.compression.variance.worker_gradients with workers=1)"
        )
    stats = state.stats
    encoder = ENCODINGS[comp.primary_encoding] if state.time_encode else None
    payloads = []
    for i, g in zip(layers, grads, strict=True):
        flat = g.detach().reshape(-1).to(torch.float32).cpu()
        sq = state.sqsums[i].reshape(-1).to(torch.float32).cpu() if needs_sqsum else None
        t0 = time.perf_counter()
        p = comp.compress(
            flat,
            state.layer_states[i],
            sqsum=sq,
            batch_size=state.batch_size,
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
    if stats.collective == "allreduce":
        return _allreduce_decoded(state, payloads, grads)
    t1 = time.perf_counter()
    gathered = allgatherv_segments(
        [bytes(p.data) for p in payloads], group=state.process_group, device=state.device
    )
    t2 = time.perf_counter()
    world = len(gathered.segments)
    out = []
    for k, g in enumerate(grads):
        total = torch.zeros(g.numel(), dtype=torch.float32)
        for r in range(world):
            total += decode_received(payloads[k], gathered.segments[r][k])
        out.append((total / world).to(dtype=g.dtype, device=g.device).view_as(g))
    t3 = time.perf_counter()
    stats.comm_s += t2 - t1
    stats.decode_s += t3 - t2
    stats.wire_bytes += wire_bytes(gathered)[dist.get_rank(state.process_group)]
    return out


def _allreduce_decoded(state: VGCState, payloads: list, grads: Sequence[torch.Tensor]) -> list:
    """Dense baseline: one all_reduce of this rank's decoded payloads, divided by the world."""
    stats = state.stats
    t0 = time.perf_counter()
    flat = torch.cat([p.decode() for p in payloads]).to(state.device)
    t1 = time.perf_counter()
    dist.all_reduce(flat, group=state.process_group)
    t2 = time.perf_counter()
    flat = flat.cpu() / dist.get_world_size(state.process_group)
    out, offset = [], 0
    for g in grads:
        n = g.numel()
        out.append(flat[offset : offset + n].to(dtype=g.dtype, device=g.device).view_as(g))
        offset += n
    stats.comm_s += t2 - t1
    stats.decode_s += (t1 - t0) + (time.perf_counter() - t2)
    stats.wire_bytes += 4 * flat.numel()
    return out


def sync_gradients(
    model: torch.nn.Module,
    state: VGCState,
    *,
    sqsums: Sequence[torch.Tensor] | None = None,
    batch_size: int | None = None,
) -> StepCommStats:
    """Replace every ``p.grad`` by the compressed average over ranks (call after ``backward``).

    One allgatherv carries all layers. ``sqsums`` (per layer, named_parameters order) are
    required for compressors with ``needs_sqsum``. Returns this step's statistics.
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


def vgc_hook(state: VGCState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP communication hook: compressed allgatherv of a bucket's gradients, then the average.

    Register with ``ddp_model.register_comm_hook(state, vgc_hook)`` where ``state`` is
    ``VGCState.for_model(ddp_model.module, compressor, ...)``; call ``state.start_step(...)``
    before each backward pass (with ``sqsums`` for variance-type compressors). The hook runs
    synchronously and returns a completed future holding the averaged bucket. Layers are
    identified by parameter identity, so the bucket order DDP chooses does not matter; each
    bucket is one allgatherv (``dense``: one all_reduce).

    Example::

        >>> # xdoctest: +SKIP
        >>> state = VGCState.for_model(model, get_compressor("variance", alpha=2.0),
        ...                            batch_size=32)
        >>> ddp_model = DistributedDataParallel(model)
        >>> ddp_model.register_comm_hook(state, vgc_hook)
        >>> wg = worker_gradients(model, per_sample_loss, x, y, workers=1, estimator="fast")
        >>> state.start_step(sqsums=[s[0] for s in wg.sqsums])
        >>> loss_fn(ddp_model(x), y).mean().backward()
    """
    params = bucket.parameters()
    grads = bucket.gradients()
    layers = [state.layer_of[id(p)] for p in params]
    averaged = exchange(state, layers, grads)
    out = torch.cat([g.reshape(-1) for g in averaged]).to(bucket.buffer().dtype)
    fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    fut.set_result(out)
    return fut


# DDP checks the hook's annotations against the real types; postponed (string) annotations
# would fail that check.
vgc_hook.__annotations__ = {
    "state": VGCState,
    "bucket": dist.GradBucket,
    "return": torch.futures.Future[torch.Tensor],
}
