"""Synthetic traces for what-if analysis: a layer list plus a density model instead of training.

``vgcsim trace synth`` writes a trace in the normal format (header ``synthetic: true``) for
models nobody has recorded here, e.g. ResNet-50 on ImageNet at a compression ratio taken
from the paper. Per (step, worker, layer) the number of sent elements is drawn from a seeded
density model with per-layer and per-worker variation; bits per encoding follow each
encoding's size formula (:data:`SYNTH_ENCODINGS`), and the gap-coded (Elias) sizes are the
exact code lengths of a random index set with that many elements.

Built-in layer lists (:data:`LAYER_LISTS`): ``resnet50`` (torchvision's ResNet-50 parameter
order, 161 tensors, 25,557,032 parameters) and ``vgg_like`` (the VGG-like CIFAR-10 net of
``vgcsim.traces.training.nets``, GroupNorm in place of BatchNorm). A JSON file with a list of
``{"name": str, "shape": [int, ...]}`` (or a bare list of sizes) is also accepted.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vgcsim.core.config import to_dict
from vgcsim.core.errors import ConfigError, unknown_name
from vgcsim.core.memory import check_fits
from vgcsim.core.provenance import git_commit, machine_info, package_versions
from vgcsim.traces import schema
from vgcsim.traces.io import TraceWriter
from vgcsim.traces.wire import bitstream, sizes

log = logging.getLogger(__name__)


# -- layer lists ----------------------------------------------------------------------------


def _numel(shape: list[int]) -> int:
    return int(math.prod(shape))


def _layer(index: int, name: str, shape: list[int]) -> dict[str, Any]:
    return {"index": index, "name": name, "shape": list(shape), "numel": _numel(shape)}


def resnet50_layers() -> list[dict[str, Any]]:
    """ResNet-50 (He et al. 2016, torchvision layout): parameter tensors in named_parameters order."""
    specs: list[tuple[str, list[int]]] = [("conv1.weight", [64, 3, 7, 7])]
    specs += [("bn1.weight", [64]), ("bn1.bias", [64])]
    inplanes = 64
    for stage, (planes, blocks) in enumerate(
        zip((64, 128, 256, 512), (3, 4, 6, 3), strict=True), start=1
    ):
        for b in range(blocks):
            p = f"layer{stage}.{b}"
            specs.append((f"{p}.conv1.weight", [planes, inplanes, 1, 1]))
            specs += [(f"{p}.bn1.weight", [planes]), (f"{p}.bn1.bias", [planes])]
            specs.append((f"{p}.conv2.weight", [planes, planes, 3, 3]))
            specs += [(f"{p}.bn2.weight", [planes]), (f"{p}.bn2.bias", [planes])]
            specs.append((f"{p}.conv3.weight", [planes * 4, planes, 1, 1]))
            specs += [(f"{p}.bn3.weight", [planes * 4]), (f"{p}.bn3.bias", [planes * 4])]
            if b == 0:
                specs.append((f"{p}.downsample.0.weight", [planes * 4, inplanes, 1, 1]))
                specs += [
                    (f"{p}.downsample.1.weight", [planes * 4]),
                    (f"{p}.downsample.1.bias", [planes * 4]),
                ]
            inplanes = planes * 4
    specs += [("fc.weight", [1000, 2048]), ("fc.bias", [1000])]
    return [_layer(i, n, s) for i, (n, s) in enumerate(specs)]


#: The VGG-like CIFAR-10 net (Chainer's CIFAR example VGG, which the paper's experiments
#: follow): conv3x3 blocks of widths below, each conv without bias followed by a norm layer
#: (GroupNorm here), max-pooling after each block, then Linear(512, 512) and Linear(512, 10).
VGG_LIKE_BLOCKS: tuple[tuple[int, ...], ...] = (
    (64, 64),
    (128, 128),
    (256, 256, 256),
    (512, 512, 512),
    (512, 512, 512),
)


def vgg_like_layers(
    width: float = 1.0, num_classes: int = 10, in_channels: int = 3
) -> list[dict[str, Any]]:
    """Parameter tensors of the VGG-like net (names match ``vgcsim.traces.training.nets.VGGLike``)."""
    specs: list[tuple[str, list[int]]] = []
    c_in = in_channels
    i = 0
    for block in VGG_LIKE_BLOCKS:
        for c in block:
            c_out = max(1, int(round(c * width)))
            specs.append((f"features.{i}.conv.weight", [c_out, c_in, 3, 3]))
            specs += [(f"features.{i}.norm.weight", [c_out]), (f"features.{i}.norm.bias", [c_out])]
            c_in = c_out
            i += 1
    hidden = max(1, int(round(512 * width)))
    specs += [("classifier.0.weight", [hidden, c_in]), ("classifier.0.bias", [hidden])]
    specs += [("classifier.1.weight", [num_classes, hidden]), ("classifier.1.bias", [num_classes])]
    return [_layer(k, n, s) for k, (n, s) in enumerate(specs)]


def vgg_like_flops_per_sample(width: float = 1.0, image_size: int = 32) -> float:
    """Forward+backward FLOPs per sample of the VGG-like net: 3 × 2 × multiply-adds of conv/linear.

    Assumptions: backward costs twice the forward (input and weight gradients); norm,
    activation and pooling FLOPs are neglected (< 1 %).
    """
    macs = 0
    hw = image_size
    for layer in vgg_like_layers(width):
        shape = layer["shape"]
        if layer["name"].endswith("conv.weight"):
            macs += layer["numel"] * hw * hw
            if _is_last_in_block(layer["name"]):
                hw = max(1, hw // 2)
        elif len(shape) == 2:
            macs += layer["numel"]
    return 3.0 * 2.0 * macs


def _is_last_in_block(name: str) -> bool:
    idx = int(name.split(".")[1])
    ends = np.cumsum([len(b) for b in VGG_LIKE_BLOCKS]) - 1
    return idx in set(ends.tolist())


#: name -> (layer list builder, forward+backward FLOPs per sample, source)
LAYER_LISTS: dict[str, tuple[Callable[[], list[dict[str, Any]]], float, str]] = {
    # 4.09e9 multiply-adds forward at 224x224 (torchvision's reported GFLOPS for resnet50);
    # FLOPs = 2 x MACs, forward+backward = 3 x forward.
    "resnet50": (resnet50_layers, 3.0 * 2.0 * 4.09e9, "He et al. 2016; torchvision resnet50"),
    "vgg_like": (vgg_like_layers, vgg_like_flops_per_sample(), "Chainer CIFAR example VGG"),
}


def load_layers(spec: str) -> tuple[list[dict[str, Any]], float | None]:
    """A built-in layer list name or a JSON file; returns (layers, flops_per_sample or None)."""
    if spec in LAYER_LISTS:
        build, flops, _ = LAYER_LISTS[spec]
        return build(), flops
    p = Path(spec)
    if not p.suffix or not p.exists():
        if p.suffix:
            raise ConfigError(f"layer list file not found: {p}")
        raise unknown_name("layer list", spec, list(LAYER_LISTS) + ["<file.json>"])
    try:
        raw = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"cannot read layer list {p}: {exc}") from None
    except RecursionError:
        raise ConfigError(f"cannot read layer list {p}: JSON nested too deeply") from None
    if isinstance(raw, dict):
        raw = raw.get("layers", raw)
    if not isinstance(raw, list) or not raw:
        raise ConfigError(f"layer list {p} must be a non-empty JSON list")
    layers = []
    for i, item in enumerate(raw):
        if isinstance(item, int) and not isinstance(item, bool) and item > 0:
            layers.append(_layer(i, f"layer{i}", [item]))
        elif isinstance(item, dict) and isinstance(item.get("shape"), list):
            shape = item["shape"]
            if not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in shape):
                raise ConfigError(
                    f"layer {i} of {p}: shape must be positive integers, got {shape!r:.80}"
                )
            layers.append(_layer(i, str(item.get("name", f"layer{i}")), shape))
        else:
            raise ConfigError(
                f"layer {i} of {p}: expected a size or {{'name', 'shape'}}, got {item!r:.80}"
            )
        if layers[-1]["numel"] > MAX_LAYER_NUMEL:
            raise ConfigError(
                f"layer {i} of {p} has {layers[-1]['numel']:,} elements; at most 2**48 "
                "(bit counts are int64)"
            )
    return layers, None


#: Largest layer a synthetic trace takes: 64 bits per element must stay within int64.
MAX_LAYER_NUMEL = 2**48


def estimate_bytes(
    cfg: SynthConfig, layers: list[dict[str, Any]], encodings: tuple[str, ...]
) -> int:
    """Bytes of memory writing (and later reading) the trace needs, at least.

    The payload table has ``steps × W × L`` rows of ``5 + E`` int64 columns; readers hold it
    whole, twice while Arrow hands it to pandas: ``2 · 8 · (5 + E) · steps · W · L``. Writing
    buffers one chunk (``chunk_steps`` steps) and copies it twice on the way to Parquet; a
    gap-coded encoding draws one gap per sent element and step (three int64/float64 arrays of
    ``W · Σ numel · density`` values; density 1 for the dense compressor).
    """
    n_layers, workers = len(layers), cfg.workers
    row_bytes = 8 * (5 + len(encodings))
    read = 2 * row_bytes * cfg.steps * workers * n_layers
    write = 3 * row_bytes * min(cfg.chunk_steps, cfg.steps) * workers * n_layers
    gaps = 0
    if any(e.startswith("gap_") for e in encodings):
        density = (
            1.0
            if cfg.compressor == "dense"
            else max(
                cfg.density if cfg.target_ratio is None else 1.0 / cfg.target_ratio,
                cfg.density_start or 0.0,
            )
        )
        total = sum(layer["numel"] for layer in layers)
        gaps = int(3 * 8 * workers * total * min(1.0, 3 * density))  # 3 x: lognormal spread
    return int(max(read, write + gaps))


# -- encodings' size formulas -------------------------------------------------------------


def _gap_bits(length: Callable[[np.ndarray], np.ndarray]):
    def bits(numel: np.ndarray, sent: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        # gaps of a uniformly random k-subset of n positions: geometric with p = k / n
        sent = np.asarray(sent, dtype=np.int64)
        p = np.minimum(1.0, sent / np.maximum(numel, 1))
        gaps = rng.geometric(np.repeat(p[sent > 0], sent[sent > 0]))
        lengths = length(gaps)
        stream = np.zeros(len(sent), dtype=np.int64)
        nz = np.flatnonzero(sent > 0)
        if len(nz):
            starts = np.concatenate(([0], np.cumsum(sent[nz])[:-1]))
            stream[nz] = np.add.reduceat(lengths, starts)
        return sizes.gap_bits(sent, stream, coded=True)

    return bits


#: encoding -> bits(numel, sent, rng) of a sparse payload of ``sent`` 4-bit-coded values:
#: the closed forms of :mod:`vgcsim.traces.wire.sizes` (byte-padded buffers).
SYNTH_ENCODINGS: dict[str, Callable[[np.ndarray, np.ndarray, np.random.Generator], np.ndarray]] = {
    "packed32": lambda numel, sent, rng: sizes.packed32_bits(numel, sent),
    "coo64": lambda numel, sent, rng: sizes.coo64_bits(sent, coded=True),
    "bitmap": lambda numel, sent, rng: sizes.bitmap_bits(numel, sent, coded=True),
    "gap_elias_gamma": _gap_bits(bitstream.gamma_lengths),
    "gap_elias_delta": _gap_bits(bitstream.delta_lengths),
    "fp32": lambda numel, sent, rng: sizes.dense_bits(numel, sizes.DENSE_ELEMENT_BITS["fp32"]),
    "fp16": lambda numel, sent, rng: sizes.dense_bits(numel, sizes.DENSE_ELEMENT_BITS["fp16"]),
}


# -- density models -------------------------------------------------------------------------


def _constant(step: np.ndarray, density: float, cfg: SynthConfig) -> np.ndarray:
    return np.full(step.shape, density, dtype=np.float64)


def _exp_decay(step: np.ndarray, density: float, cfg: SynthConfig) -> np.ndarray:
    """density + (density_start - density) * exp(-step / decay_steps): dense early training."""
    start = cfg.density_start if cfg.density_start is not None else min(1.0, 10 * density)
    return density + (start - density) * np.exp(-step / max(cfg.decay_steps, 1e-9))


#: density model name -> f(steps, target density, config) = base density per step
DENSITY_MODELS: dict[str, Callable[[np.ndarray, float, SynthConfig], np.ndarray]] = {
    "constant": _constant,
    "exp_decay": _exp_decay,
}


@dataclass(frozen=True)
class SynthConfig:
    """What-if trace description.

    ``target_ratio`` (dense fp32 bits / sent bits, ~1/density for packed32) wins over
    ``density`` when given. Variation: per-layer and per-worker lognormal factors with the
    given coefficients of variation, plus per-(step, worker, layer) noise ``step_cv``.
    Seconds per worker per step are the ``*_s_per_worker`` fields (wall-clock columns).
    """

    layers: str = "resnet50"
    workers: int = 8
    steps: int = 100
    seed: int = 0
    compressor: str = "variance"
    target_ratio: float | None = None
    density: float = 1e-3
    density_model: str = "constant"
    density_start: float | None = None
    decay_steps: float = 20.0
    layer_cv: float = 0.5
    worker_cv: float = 0.2
    step_cv: float = 0.1
    encodings: tuple[str, ...] = (
        "packed32",
        "coo64",
        "bitmap",
        "gap_elias_gamma",
        "gap_elias_delta",
        "fp32",
    )
    primary_encoding: str = "packed32"
    batch_size_per_worker: int = 32
    compute_s_per_worker: float = 0.1
    variance_s_per_worker: float = 0.0
    codec_s_per_worker: float = 0.0
    chunk_steps: int = 50
    flops_per_sample: float | None = None

    def __post_init__(self) -> None:
        from vgcsim.core.errors import unknown_name
        from vgcsim.traces.compression.compressors import COMPRESSORS

        if self.compressor not in COMPRESSORS:  # a label predict could not price
            raise unknown_name("compressor", str(self.compressor), COMPRESSORS)
        if self.workers < 1:
            raise ValueError("workers must be >= 1")
        if self.steps < 1:
            raise ValueError("steps must be >= 1")
        if self.seed < 0:
            raise ValueError("seed must be >= 0")
        if not 0.0 < self.density <= 1.0:
            raise ValueError("density must be in (0, 1]")
        if self.chunk_steps < 1:
            raise ValueError(f"chunk_steps must be >= 1, got {self.chunk_steps}")
        if self.batch_size_per_worker < 1:
            raise ValueError(
                f"batch_size_per_worker must be >= 1, got {self.batch_size_per_worker}"
            )
        if self.flops_per_sample is not None and not 0.0 < self.flops_per_sample < math.inf:
            raise ValueError(
                f"flops_per_sample must be a finite number > 0, got {self.flops_per_sample}"
            )
        if self.target_ratio is not None and not 1.0 <= self.target_ratio < math.inf:
            raise ValueError("target_ratio must be a finite number >= 1")
        if self.density_start is not None and not 0.0 < self.density_start <= 1.0:
            raise ValueError("density_start must be in (0, 1]")
        if not 0.0 < self.decay_steps < math.inf:
            raise ValueError("decay_steps must be a finite number > 0")
        # coefficients of variation up to 10 (a 1000 % spread; cv**2 must not overflow) and
        # seconds per worker up to a day (times W must stay finite in the steps table)
        for names, hi in (
            (("layer_cv", "worker_cv", "step_cv"), 10.0),
            (("compute_s_per_worker", "variance_s_per_worker", "codec_s_per_worker"), 86400.0),
        ):
            for name in names:
                # written as "not in range" so that NaN fails too
                if not 0.0 <= getattr(self, name) <= hi:
                    raise ValueError(f"{name} must be a number in [0, {hi:g}]")


def _lognormal(rng: np.random.Generator, cv: float, size) -> np.ndarray:
    """Mean-one lognormal factors with coefficient of variation ``cv``."""
    if cv <= 0:
        return np.ones(size)
    sigma2 = math.log1p(cv * cv)
    return rng.lognormal(-sigma2 / 2, math.sqrt(sigma2), size=size)


def synth_trace(cfg: SynthConfig, out_dir: str | Path, *, overwrite: bool = False) -> Path:
    """Write a synthetic trace for ``cfg`` into ``out_dir`` and return the path."""
    if cfg.density_model not in DENSITY_MODELS:
        raise unknown_name("density model", cfg.density_model, DENSITY_MODELS)
    for enc in cfg.encodings:
        if enc not in SYNTH_ENCODINGS:
            raise unknown_name("synthetic encoding", enc, SYNTH_ENCODINGS)
    if cfg.primary_encoding not in cfg.encodings:
        raise ConfigError(
            f"primary_encoding {cfg.primary_encoding!r} is not in encodings {list(cfg.encodings)}"
        )
    layers, flops = load_layers(cfg.layers)
    if cfg.flops_per_sample is not None:
        flops = cfg.flops_per_sample
    dense = cfg.compressor == "dense"
    encodings = ("fp32", "fp16") if dense else tuple(cfg.encodings)
    check_fits(
        estimate_bytes(cfg, layers, encodings),
        f"a synthetic trace of {cfg.steps:,} steps x {cfg.workers:,} workers x "
        f"{len(layers):,} layers",
        "lower workers, steps or the density, or pick a smaller layer list",
    )
    primary = "fp32" if dense else cfg.primary_encoding
    base_density = 1.0 if dense else (1.0 / cfg.target_ratio if cfg.target_ratio else cfg.density)
    rng = np.random.default_rng(cfg.seed)
    numel = np.array([layer["numel"] for layer in layers], dtype=np.int64)
    n_layers, w_count = len(layers), cfg.workers
    layer_f = _lognormal(rng, cfg.layer_cv, n_layers)
    # keep the size-weighted mean density on target despite the per-layer factors
    layer_f = layer_f * numel.sum() / float((layer_f * numel).sum())
    worker_f = _lognormal(rng, cfg.worker_cv, w_count)
    worker_f = worker_f / worker_f.mean()

    header = {
        "synthetic": True,
        "config": to_dict(cfg) | {"base_density": base_density},
        "seeds": {"seed": cfg.seed},
        "versions": package_versions(),
        "git_commit": git_commit(),
        "machine": machine_info(),
        "workers": w_count,
        "batch_size_per_worker": cfg.batch_size_per_worker,
        "compressor": {"name": cfg.compressor, "params": {"synthetic_density": base_density}},
        "encodings": list(encodings),
        "primary_encoding": primary,
        "layers": layers,
        "flops_per_sample": flops,
        "dense_bytes_per_step": int(4 * numel.sum()),
    }
    steps_arr = np.arange(cfg.steps)
    base = DENSITY_MODELS[cfg.density_model](steps_arr.astype(np.float64), base_density, cfg)
    if dense:
        base = np.ones_like(base)
    with TraceWriter(out_dir, header, chunk_steps=cfg.chunk_steps, overwrite=overwrite) as writer:
        worker_col = np.repeat(np.arange(w_count), n_layers)
        layer_col = np.tile(np.arange(n_layers), w_count)
        numel_col = numel[layer_col]
        for s in steps_arr.tolist():
            if dense:
                sent = numel_col.copy()
            else:
                noise = _lognormal(rng, cfg.step_cv, w_count * n_layers)
                d = np.clip(base[s] * layer_f[layer_col] * worker_f[worker_col] * noise, 0.0, 1.0)
                sent = np.minimum(rng.binomial(numel_col, d), numel_col).astype(np.int64)
            rows: dict[str, Any] = {
                "step": np.full(len(sent), s, dtype=np.int64),
                "worker": worker_col,
                "layer": layer_col,
                "numel": numel_col,
                "sent": sent,
            }
            for enc in encodings:
                rows[schema.BITS_PREFIX + enc] = SYNTH_ENCODINGS[enc](numel_col, sent, rng)
            writer.add_payload_rows(rows)
            writer.add_step(
                {
                    "step": s,
                    "loss": 0.0,
                    "lr": 0.0,
                    "grad_norm": 0.0,
                    "density": float(sent.sum() / numel_col.sum()),
                    "compute_s": cfg.compute_s_per_worker * w_count,
                    "variance_s": cfg.variance_s_per_worker * w_count,
                    "compress_s": cfg.codec_s_per_worker * w_count / 2,
                    "encode_s": cfg.codec_s_per_worker * w_count / 2,
                }
            )
    log.info("wrote synthetic trace %s", out_dir)
    return Path(out_dir)
