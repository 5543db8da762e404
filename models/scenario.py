"""The paper's cost analysis as a scenario: dense allreduce vs compressed allgatherv from model
sizes and compression ratios alone (no trace needed).

Tsuzuku, Imachi & Akiba (2018) argue with computation and communication cost models that
sparse allgatherv beats dense allreduce when gradients compress well enough, and that the
advantage shrinks as P grows (allgatherv moves P·m bytes to every rank, allreduce ≈ 2n). This
module reproduces that kind of analysis for ResNet-50 and the VGG-like net on 1 GbE, 10 GbE
and 56 Gb InfiniBand for P = 2 … 1024, with the compression ratios of the paper's table and
any ratios measured from recorded traces, and reports where compression stops paying.

Every rank sends the same payload m = dense bytes / ratio (balanced); both methods pay the
same compute; compressed methods also pay ``codec_s`` per step (0 by default: the paper's
table gives no codec times). At each P the dense baseline is the fastest allreduce algorithm
and a compressed method its fastest allgatherv algorithm.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from vgcsim.core.cluster import CLUSTER_PRESETS, get_cluster, get_device
from vgcsim.core.collectives import ALLGATHERV_ALGORITHMS, ALLREDUCE_ALGORITHMS
from vgcsim.core.errors import ConfigError, unknown_name
from vgcsim.core.results import finalize_results
from vgcsim.models.collectives import collective_key, get_collective
from vgcsim.models.crossover import crossover_ratio
from vgcsim.models.iteration import StepBreakdown
from vgcsim.models.predict import frame_from_rows, rows_for
from vgcsim.traces.devicecost import compute_time_s
from vgcsim.traces.labels import method_label
from vgcsim.traces.paper import paper_ratio

if TYPE_CHECKING:
    from vgcsim.traces.io import Trace

__all__ = [
    "PAPER_NET_SPECS",
    "PAPER_METHODS",
    "SCENARIOS",
    "Method",
    "NetSpec",
    "PaperScenarioConfig",
    "crossover_table",
    "method_from_trace",
    "paper_methods",
    "paper_scenario",
    "time_sources",
]


@dataclass(frozen=True)
class NetSpec:
    """A network for the cost analysis: parameter count and training FLOPs per sample."""

    name: str
    title: str
    params: int
    flops_per_sample: float
    source: str

    @property
    def dense_bytes(self) -> int:
        """fp32 gradient bytes per rank per step."""
        return 4 * self.params


@dataclass(frozen=True)
class Method:
    """A compression method of the analysis: its compression ratio (dense bits / sent bits)."""

    label: str
    compressor: str
    ratio: float
    encoding: str
    source: str


def _resnet50() -> NetSpec:
    from vgcsim.traces.synth import resnet50_layers

    return NetSpec(
        name="resnet50",
        title="ResNet-50 (ImageNet, 224×224)",
        params=sum(int(layer["numel"]) for layer in resnet50_layers()),
        # 4.09 G multiply-adds forward (torchvision ResNet-50 model card; He et al. 2016 give
        # 3.8 G), × 2 FLOPs per multiply-add, × 3 for forward + backward.
        flops_per_sample=3 * 2 * 4.09e9,
        source="layer list of vgcsim.traces.synth (torchvision layout); 4.09 GMAC forward "
        "(torchvision model card) × 2 × 3 for forward+backward",
    )


def _vgg_like() -> NetSpec:
    from vgcsim.traces.synth import vgg_like_flops_per_sample, vgg_like_layers

    return NetSpec(
        name="vgg_like",
        title="VGG-like (CIFAR-10, 32×32)",
        params=sum(int(layer["numel"]) for layer in vgg_like_layers()),
        flops_per_sample=vgg_like_flops_per_sample(),
        source="layer list and FLOP count of vgcsim.traces.synth (the paper's VGG-like CIFAR-10 net)",
    )


#: net name -> builder (builders import the layer lists lazily)
PAPER_NET_SPECS: dict[str, Callable[[], NetSpec]] = {"resnet50": _resnet50, "vgg_like": _vgg_like}

_PAPER = "Tsuzuku, Imachi & Akiba 2018, table of compression ratios"


def _paper_method(compressor: str, params: dict[str, float], what: str) -> Method:
    """A method at the paper's Adam compression ratio, named by its method label."""
    label = method_label(compressor, params)
    return Method(
        label, compressor, paper_ratio("adam", label), "paper-ratio", f"{_PAPER} ({what})"
    )


def paper_methods() -> tuple[Method, ...]:
    """The paper's three compressed methods at its Adam ratios (:data:`PAPER_METHODS`),
    built at each call (so mutation testing reaches :func:`_paper_method`)."""
    return (
        _paper_method("variance", {"alpha": 2}, "variance-based, α=2, Adam"),
        _paper_method("hybrid", {"alpha": 2, "tau": 0.1}, "hybrid, τ=0.1"),
        _paper_method("qsgd", {"bits": 2, "bucket_size": 128}, "QSGD, 2 bit"),
    )


PAPER_METHODS: tuple[Method, ...] = paper_methods()


@dataclass(frozen=True)
class PaperScenarioConfig:
    """Knobs of the paper scenario (``vgcsim scenario paper --set key=value``)."""

    nets: tuple[str, ...] = ("resnet50", "vgg_like")
    links: tuple[str, ...] = ("1GbE", "10GbE", "IB-FDR56")
    world_sizes: tuple[int, ...] = (2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
    device: str = "P100"
    batch_size_per_worker: int = 32
    allreduce: tuple[str, ...] = ALLREDUCE_ALGORITHMS
    allgatherv: tuple[str, ...] = ALLGATHERV_ALGORITHMS
    codec_s: float = 0.0
    paper_ratios: bool = True

    def __post_init__(self) -> None:
        for key in ("nets", "links", "allreduce", "allgatherv"):
            if not getattr(self, key):
                raise ConfigError(f"{key} must not be empty")
        for n in self.nets:
            if n not in PAPER_NET_SPECS:
                raise unknown_name("net", n, PAPER_NET_SPECS)
        for link in self.links:
            if link not in CLUSTER_PRESETS:
                raise unknown_name("cluster preset", link, CLUSTER_PRESETS)
        get_device(self.device)
        for a in self.allreduce:
            collective_key("allreduce", a)
        for a in self.allgatherv:
            collective_key("allgatherv", a)
        if not self.world_sizes or min(self.world_sizes) < 1:
            raise ConfigError("world_sizes must be integers >= 1")
        if self.batch_size_per_worker < 1 or not 0 <= self.codec_s < math.inf:
            raise ConfigError("batch_size_per_worker must be >= 1 and codec_s a finite number >= 0")


def _compressor_params(trace: Trace) -> dict[str, Any]:
    return dict((trace.header.get("compressor") or {}).get("params") or {})


def method_from_trace(trace: Trace, encoding: str | None = None) -> Method:
    """A method whose ratio is measured from a recorded trace: dense bits per worker per step
    ÷ mean bits a worker sends per step under ``encoding`` (default: primary)."""
    enc = encoding or trace.primary_encoding
    bits = trace.worker_bits(enc).to_numpy(dtype=np.float64)
    mean_bits = float(bits.mean()) if bits.size else 0.0
    if mean_bits <= 0:
        raise ConfigError(f"trace {trace.name} sends no bits; cannot derive a compression ratio")
    ratio = trace.dense_bits_per_worker() / mean_bits
    return Method(
        label=f"{method_label(trace.compressor, _compressor_params(trace))} ({trace.name})",
        compressor=trace.compressor,
        ratio=ratio,
        encoding=enc,
        source=f"measured from trace {trace.name} ({enc}, {len(bits)} steps, "
        f"{trace.workers} workers{', synthetic' if trace.synthetic else ''})",
    )


def time_sources(cfg: PaperScenarioConfig) -> dict[str, str]:
    """Where each local time column of :func:`paper_scenario`'s rows comes from, for the
    result header's ``options.time_sources`` (the shape :func:`vgcsim.models.predict.
    time_sources` gives a trace): compute modelled on the scenario's device, the compressed
    methods' ``codec_s`` as set, nothing else."""
    device = get_device(cfg.device)
    return {
        "compute_mode": "model",
        "device": device.name,
        "compute_s": f"modelled on {device.name}: flops_per_sample x B / effective FLOP/s",
        "variance_s": "none: not in the scenario's step",
        "codec_s": f"set: codec_s = {cfg.codec_s:g} s per step on compressed methods, 0 on dense",
        "decode_s": "none: not in the scenario's step",
        "optimizer_s": "none: not in the scenario's step",
    }


def paper_scenario(
    cfg: PaperScenarioConfig, extra_methods: Sequence[Method] = ()
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Evaluate the scenario → (finalized result frame, description of nets/methods/assumptions)."""
    methods = list(paper_methods() if cfg.paper_ratios else ()) + list(extra_methods)
    if not methods:
        raise ConfigError("no compression methods: enable paper_ratios or give traces")
    device = get_device(cfg.device)
    nets = [PAPER_NET_SPECS[n]() for n in cfg.nets]
    parts = []
    for net in nets:
        compute = float(compute_time_s(net.flops_per_sample, cfg.batch_size_per_worker, device))
        n = float(net.dense_bytes)
        payloads = np.array([n / m.ratio for m in methods])
        for link_name in cfg.links:
            cluster = get_cluster(link_name)
            kw = {"intra_link": cluster.intra_link, "gpus_per_node": cluster.gpus_per_node}
            base = {
                "source": "predicted",
                "path": "closed_form",
                "trace": net.name,
                "cluster": cluster.name,
                "topology": str(cluster.topology["kind"]),
                "compute_mode": "model",
                "device": device.name,
            }
            for p in sorted(set(cfg.world_sizes)):
                steps = np.array([-1])
                zero = np.zeros(1)
                for alg in cfg.allreduce:
                    key = collective_key("allreduce", alg)
                    comm = get_collective(key).time_s(np.full((1, p), n), cluster.link, **kw)
                    bd = StepBreakdown(np.full(1, compute), zero, zero, comm, compute + comm)
                    const = {
                        **base,
                        "compressor": "dense",
                        "encoding": "fp32",
                        "world_size": p,
                        "method": "dense",
                        "collective": key,
                    }
                    parts.append(rows_for(bd, steps, n, n, per_step=False, const=const))
                for alg in cfg.allgatherv:
                    key = collective_key("allgatherv", alg)
                    sizes = np.broadcast_to(payloads[:, None], (len(methods), p))
                    comm_all = get_collective(key).time_s(sizes, cluster.link, **kw)
                    for i, m in enumerate(methods):
                        comm = comm_all[i : i + 1]
                        codec = np.full(1, cfg.codec_s)
                        bd = StepBreakdown(
                            np.full(1, compute), zero, codec, comm, compute + cfg.codec_s + comm
                        )
                        const = {
                            **base,
                            "compressor": m.label,
                            "encoding": m.encoding,
                            "world_size": p,
                            "method": "compressed",
                            "collective": key,
                        }
                        parts.append(
                            rows_for(
                                bd, steps, payloads[i], payloads[i], per_step=False, const=const
                            )
                        )
    df = finalize_results(frame_from_rows(parts), batch_size_per_worker=cfg.batch_size_per_worker)
    info = {
        "nets": [
            {
                **net.__dict__,
                "dense_bytes": net.dense_bytes,
                "compute_s": float(
                    compute_time_s(net.flops_per_sample, cfg.batch_size_per_worker, device)
                ),
            }
            for net in nets
        ],
        "methods": [m.__dict__ for m in methods],
        "device": device.__dict__,
        "links": {name: get_cluster(name).link.__dict__ for name in cfg.links},
    }
    return df, info


def best_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Per (net, link, P, method label): the fastest algorithm's mean row."""
    m = df[df["step"] == -1]
    keys = ["trace", "cluster", "world_size", "method", "compressor"]
    return (
        m.sort_values("step_s", kind="stable")
        .drop_duplicates(keys)
        .sort_values(keys)
        .reset_index(drop=True)
    )


def crossover_table(cfg: PaperScenarioConfig, df: pd.DataFrame) -> pd.DataFrame:
    """Compression ratio needed to tie the fastest dense allreduce at each (net, link, P), with
    the most favourable allgatherv algorithm; ``inf`` where no ratio pays."""
    best = best_rows(df)
    dense = best[best["method"] == "dense"]
    rows = []
    for r in dense.itertuples(index=False):
        if r.world_size < 2:
            continue
        cluster = get_cluster(r.cluster)
        ratios = {
            alg: crossover_ratio(
                r.payload_bytes_max,
                r.world_size,
                cluster,
                allreduce=r.collective,
                allgatherv=collective_key("allgatherv", alg),
                overhead_s=cfg.codec_s,
            )
            for alg in cfg.allgatherv
        }
        alg = min(ratios, key=lambda a: ratios[a])
        rows.append(
            {
                "net": r.trace,
                "link": r.cluster,
                "world_size": r.world_size,
                "allreduce": r.collective,
                "allgatherv": f"allgatherv/{alg}",
                "crossover_ratio": ratios[alg],
            }
        )
    return pd.DataFrame(rows)


#: scenario name -> config class (``vgcsim scenario NAME``)
SCENARIOS: dict[str, type] = {"paper": PaperScenarioConfig}
