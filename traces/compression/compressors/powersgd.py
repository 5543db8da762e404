"""PowerSGD: rank-r power-iteration compression whose messages are dense allreduces.

T. Vogels, S. P. Karimireddy and M. Jaggi, "PowerSGD: Practical Low-Rank Gradient
Compression for Distributed Optimization", NeurIPS 2019 (Algorithm 1), as PyTorch implements
it in ``torch/distributed/algorithms/ddp_comm_hooks/powerSGD_hook.py`` (``powerSGD_hook``).
Per step, with every worker's gradients as one DDP bucket (tensors in DDP's bucket order, the
reverse of ``model.parameters()``):

1. error feedback: ``M_w ← g_w + e_w`` (worker w's gradient plus its error);
2. each tensor is viewed as the matrix ``(shape[0], numel / shape[0])`` of n rows and m
   columns, with ``r' = min(n, m, rank)``; it is compressed only when
   ``(n + m)·r'·min_compression_rate < n·m`` (torch's ``_should_compress``), else it goes,
   with every 1-D tensor that fails the same test, into one plain allreduce (mean);
3. ``Q`` (m × r'): on the first compressed step (and every step without warm start) drawn
   from N(0, 1) after ``torch.manual_seed(rng.randint(1_000_000_000))`` with
   ``rng = numpy.random.RandomState(seed)`` (one draw per step; tensors grouped by shape in
   bucket order, as torch does), then orthogonalized; with warm start the previous step's
   ``Q`` is orthogonalized and reused;
4. ``P_w = M_w Q``; allreduce (sum) ``P``; orthogonalize ``P``; ``Q_w = M_wᵀ P``; allreduce
   ``Q`` and divide by W; every worker's result is ``P Qᵀ``;
5. error feedback: ``e_w ← M_w − result`` (for the plain-allreduced tensors too).

Steps before ``start_iter`` run a plain allreduce of the whole gradient (torch's vanilla
allreduce before ``start_powerSGD_iter``).

What crosses the wire per rank and tensor is recorded as fp32 element counts: ``n·r'`` (P)
and ``m·r'`` (Q) for a compressed tensor, ``numel`` for a plain one; the encoding
``lowrank_fp32`` is 32 bits per element with no header (an allreduce's buffer).

Unlike the other compressors, the workers' messages depend on each other (P and Q are
allreduced between the two halves of the power iteration), so this one exchanges all W
workers at once (:meth:`PowerSGDCompressor.exchange`); :meth:`compress` is refused.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from vgcsim.core.errors import ConfigError
from vgcsim.traces.compression.base import Compressor, LayerStep, Payload

if TYPE_CHECKING:
    import torch

#: the one encoding of PowerSGD payloads: fp32 elements of the allreduced buffers
LOWRANK_ENCODING = "lowrank_fp32"


@dataclass(frozen=True)
class PowerSGDParams:
    """Hyperparameters (torch's ``PowerSGDState`` names in brackets).

    Tuned by users: ``rank`` [matrix_approximation_rank], the rank r of the approximation;
    ``start_iter`` [start_powerSGD_iter], steps of plain allreduce before compression starts
    (torch's default is 1000 and its minimum with error feedback or warm start is 2, because
    DDP rebuilds its buckets after the first step; the emulation keeps the minimum so that a
    short recording measures PowerSGD).
    Seldom tuned: ``min_compression_rate`` (a tensor is compressed only when n·m exceeds
    (n + m)·r' times this, >= 1), ``use_error_feedback``, ``warm_start``,
    ``orthogonalization_epsilon`` (added to each column norm; 0 as in torch), ``seed``
    [random_seed] of the generator that seeds Q's initial values.
    """

    rank: int = 1
    start_iter: int = 2
    min_compression_rate: float = 2.0
    use_error_feedback: bool = True
    warm_start: bool = True
    orthogonalization_epsilon: float = 0.0
    seed: int = 0


@dataclass
class PowerSGDLayerState:
    """Worker w's error-feedback memory ``e_w`` for one tensor (flat fp32)."""

    error: torch.Tensor


@dataclass
class PowerSGDShared:
    """What every worker holds identically: the step count, the generator of Q's seeds and,
    with warm start, each compressed tensor's last Q (layer index -> [m, r'])."""

    rng: np.random.RandomState
    iter: int = 0
    q_memory: dict[int, torch.Tensor] = field(default_factory=dict)


@dataclass(frozen=True)
class LayerPlan:
    """How one tensor crosses the wire: as an n × m matrix at rank r, or plain (rank 0)."""

    layer: int
    rows: int
    cols: int
    rank: int

    @property
    def compressed(self) -> bool:
        return self.rank > 0

    @property
    def p_elements(self) -> int:
        return self.rows * self.rank

    @property
    def q_elements(self) -> int:
        return self.cols * self.rank


def layer_plan(layer: int, shape: tuple[int, ...], rank: int, min_rate: float) -> LayerPlan:
    """torch's reshaping and small-tensor rule for one tensor of ``shape``:
    ``(n, m) = (shape[0], numel / shape[0])``, ``r' = min(n, m, rank)``, compressed when
    ``(n + m)·r'·min_rate < n·m`` (``_should_compress``); a 0-d tensor is plain."""
    numel = math.prod(shape)
    if len(shape) == 0 or numel == 0:
        return LayerPlan(layer, max(numel, 1), 1, 0)
    n = int(shape[0])
    m = numel // n
    r = min(n, m, rank)
    if (n + m) * r * min_rate < n * m:
        return LayerPlan(layer, n, m, r)
    return LayerPlan(layer, n, m, 0)


def orthogonalize(matrix: torch.Tensor, epsilon: float = 0.0) -> None:
    """Orthonormalize the columns of ``matrix`` ([n, r]) in place, as torch's hook does:
    Gram-Schmidt for r <= 2 (each column divided by its norm + ``epsilon``, then projected
    out of the later ones), the Q factor of ``torch.linalg.qr`` above."""
    import torch

    rank = matrix.shape[1]
    if rank <= 2:
        for i in range(rank):
            col = matrix[:, i : i + 1]
            col /= torch.norm(col, dim=0, keepdim=True) + epsilon
            if i + 1 < rank:
                rest = matrix[:, i + 1 :]
                rest -= torch.sum(col * rest, dim=0, keepdim=True) * col
    else:
        matrix.copy_(torch.linalg.qr(matrix).Q)


@dataclass(frozen=True)
class ExchangeResult:
    """One step of all W workers: the mean gradient every worker applies (per layer, flat)
    and per layer the elements each rank allreduces (P, Q, and plain)."""

    means: list[torch.Tensor]
    sent: list[int]  # per layer: fp32 elements one rank allreduces
    p_elements: list[int]
    q_elements: list[int]


class PowerSGDCompressor(Compressor):
    """PowerSGD (see the module docstring). No ``codec_profile``: its local work is priced by
    :func:`vgcsim.traces.devicecost.powersgd_time_s` from the trace's P and Q sizes."""

    name = "powersgd"
    Params = PowerSGDParams
    #: exchanges all workers together (:meth:`exchange`), not one payload per worker
    collective: ClassVar[bool] = True

    @classmethod
    def label(cls, params: Mapping[str, Any]) -> str:
        return f"PowerSGD r={params.get('rank', '?')}"

    def _validate(self) -> None:
        c = self.config
        if c.rank < 1:
            raise ConfigError(f"powersgd: rank must be >= 1, got {c.rank}")
        if c.start_iter < 0:
            raise ConfigError(f"powersgd: start_iter must be >= 0, got {c.start_iter}")
        if not (c.min_compression_rate >= 1 and math.isfinite(c.min_compression_rate)):
            raise ConfigError(
                f"powersgd: min_compression_rate must be >= 1, got {c.min_compression_rate}"
            )
        if not c.orthogonalization_epsilon >= 0:
            raise ConfigError("powersgd: orthogonalization_epsilon must be >= 0")
        for key in ("use_error_feedback", "warm_start"):
            if not isinstance(getattr(c, key), bool):
                raise ConfigError(f"powersgd: {key} must be true or false")
        if c.seed < 0:
            raise ConfigError(f"powersgd: seed must be >= 0, got {c.seed}")

    @property
    def encodings(self) -> tuple[str, ...]:
        return (LOWRANK_ENCODING,)

    @property
    def primary_encoding(self) -> str:
        return LOWRANK_ENCODING

    def init_state(self, numel: int) -> PowerSGDLayerState:
        import torch

        return PowerSGDLayerState(torch.zeros(numel, dtype=torch.float32))

    def init_shared(self) -> PowerSGDShared:
        return PowerSGDShared(np.random.RandomState(self.config.seed))

    def plans(self, shapes: list[tuple[int, ...]]) -> list[LayerPlan]:
        """Each tensor's :func:`layer_plan` at this compressor's rank."""
        c = self.config
        return [layer_plan(i, s, c.rank, c.min_compression_rate) for i, s in enumerate(shapes)]

    def _compress(self, grad: torch.Tensor, state: object, step: LayerStep) -> Payload:
        raise ConfigError(
            "powersgd exchanges all workers together (PowerSGDCompressor.exchange); "
            "it has no per-worker payload"
        )

    def exchange(
        self,
        grads: list[torch.Tensor],
        shapes: list[tuple[int, ...]],
        states: list[list[PowerSGDLayerState]],
        shared: PowerSGDShared,
    ) -> ExchangeResult:
        """One step of W workers. ``grads[l]``: ``[W, numel_l]`` float32 gradients of layer l;
        ``states[w][l]``: worker w's error memory (updated); ``shared``: updated."""
        import torch

        c = self.config
        world = grads[0].shape[0]
        numels = [g.shape[1] for g in grads]
        if shared.iter < c.start_iter:
            shared.iter += 1
            return ExchangeResult(
                [g.mean(0) for g in grads], numels, [0] * len(grads), [0] * len(grads)
            )
        plans = self.plans(shapes)
        # 1. M_w = g_w + e_w, and the copy the error is computed from.
        ms = []
        for layer, g in enumerate(grads):
            m = g.clone()
            if c.use_error_feedback:
                for w in range(world):
                    m[w] += states[w][layer].error
            ms.append(m)
        means: list[torch.Tensor | None] = [None] * len(grads)
        # 2. plain tensors: one allreduce (mean).
        for pl in plans:
            if not pl.compressed:
                means[pl.layer] = ms[pl.layer].sum(0) / world
        # 3. Q, in DDP's bucket order (reverse of the parameters), grouped by shape.
        order = [pl for pl in reversed(plans) if pl.compressed]
        by_shape: dict[tuple[int, int], list[LayerPlan]] = {}
        for pl in order:
            by_shape.setdefault((pl.rows, pl.cols), []).append(pl)
        grouped = [pl for group in by_shape.values() for pl in group]
        randomize = not c.warm_start or any(pl.layer not in shared.q_memory for pl in grouped)
        if randomize and grouped:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(int(shared.rng.randint(1_000_000_000)))
                for pl in grouped:
                    q = torch.randn(1, pl.cols, pl.rank, dtype=torch.float32)[0]
                    orthogonalize(q, c.orthogonalization_epsilon)
                    shared.q_memory[pl.layer] = q
        elif grouped:
            for pl in grouped:
                orthogonalize(shared.q_memory[pl.layer], c.orthogonalization_epsilon)
        # 4. P = Σ_w M_w Q, orthogonalized; Q = Σ_w M_wᵀ P / W; result P Qᵀ.
        for pl in grouped:
            mats = ms[pl.layer].view(world, pl.rows, pl.cols)
            q = shared.q_memory[pl.layer]
            p = torch.bmm(mats, q.expand(world, -1, -1)).sum(0)
            orthogonalize(p, c.orthogonalization_epsilon)
            q_new = torch.bmm(mats.transpose(1, 2), p.expand(world, -1, -1)).sum(0) / world
            shared.q_memory[pl.layer] = q_new
            means[pl.layer] = (p @ q_new.T).reshape(-1)
        # 5. e_w = M_w - result.
        if c.use_error_feedback:
            for layer, m in enumerate(ms):
                for w in range(world):
                    states[w][layer].error.copy_(m[w] - means[layer])
        if not c.warm_start:
            shared.q_memory.clear()
        shared.iter += 1
        return ExchangeResult(
            [t for t in means if t is not None],
            [
                pl.p_elements + pl.q_elements if pl.compressed else n
                for pl, n in zip(plans, numels, strict=True)
            ],
            [pl.p_elements for pl in plans],
            [pl.q_elements for pl in plans],
        )
