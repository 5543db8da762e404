"""Local costs on a target device that the trace does not time there: compression, encoding,
decoding, 2-byte casts and the optimizer step.

Every cost here is a *streaming* cost: a pass over memory at the device's sustained bandwidth
plus a fixed cost per kernel launch (per framework op on a CPU),

    T = bytes_touched / (memory_bandwidth_Bps × memory_efficiency) + launches × launch_overhead_s,

the memory-bound half of the roofline (S. Williams, A. Waterman and D. Patterson, "Roofline",
CACM 52(4), 2009): the codec's kernels do a handful of operations per element, far below
any GPU's FLOP/byte ridge point, so memory traffic, not arithmetic, sets their time. The
bytes each stage touches are counted per element from what the stage must read and write
(fp32 = 4 bytes; each compressor module declares its counts, ``Compressor.codec_profile``,
listed by :func:`codec_profiles`). Shared by the closed-form models and the simulator (both
build their inputs with :func:`vgcsim.traces.inputs.step_inputs`).

Assumptions: every pass streams from device memory (no cache reuse between kernels, no kernel
fusion beyond what the profile lists); launches do not overlap each other's work; a decode
kernel handles one layer of all P − 1 received payloads at once (the payloads arrive together
when the allgatherv returns), so decode launches do not grow with P, its bytes do.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

from vgcsim.core.cluster import DeviceSpec
from vgcsim.core.errors import ConfigError, unknown_name
from vgcsim.traces.compression.base import CodecProfile

__all__ = [
    "CAST_BYTES_PER_ELEMENT",
    "compute_time_s",
    "codec_profiles",
    "DENSE_ENCODING_BYTES",
    "OPTIMIZER_BYTES_PER_PARAM",
    "CodecProfile",
    "cast_time_s",
    "codec_profile",
    "compress_time_s",
    "decode_time_s",
    "optimizer_time_s",
    "powersgd_time_s",
    "sparse_result_time_s",
    "stream_time_s",
]


def compute_time_s(
    flops_per_sample: ArrayLike, batch_size: ArrayLike, device: DeviceSpec
) -> np.ndarray:
    """Forward+backward seconds of one rank's minibatch on ``device``.

    Formula: ``T = flops_per_sample · batch_size / (peak_flops · efficiency)``.

    Assumptions: time linear in samples (no small-batch inefficiency beyond the constant
    ``efficiency``); FLOPs are those of the trace header (``torch.utils.flop_counter``) or of a
    published count.

    Source: the roofline-style compute bound, e.g. S. Williams, A. Waterman and D. Patterson,
    "Roofline", CACM 52(4), 2009, with the device's datasheet peak (``DeviceSpec.source``).
    """
    flops = np.asarray(flops_per_sample, dtype=np.float64)
    batch = np.asarray(batch_size, dtype=np.float64)
    if np.any(flops < 0) or np.any(batch < 0):
        raise ConfigError("FLOPs and batch size must be non-negative")
    return flops * batch / device.effective_flops


def stream_time_s(bytes_touched: ArrayLike, launches: ArrayLike, device: DeviceSpec) -> np.ndarray:
    """Seconds of memory-bound work on ``device``.

    Formula: ``T = bytes / (B_mem · e_mem) + n_launch · t_launch`` with B_mem the datasheet
    memory bandwidth, e_mem the sustained fraction and t_launch the launch overhead of
    ``device`` (see ``vgcsim.core.cluster.DEVICE_PRESETS`` for the sources).

    Source: the memory-bound roofline of Williams, Waterman & Patterson, CACM 2009, plus a
    fixed per-kernel launch cost (A. Gray, "Getting Started with CUDA Graphs", NVIDIA
    Technical Blog, 2019).
    """
    b = np.asarray(bytes_touched, dtype=np.float64)
    n = np.asarray(launches, dtype=np.float64)
    return b / device.sustained_memory_Bps + n * device.launch_s


def codec_profiles() -> dict[str, CodecProfile]:
    """Every registered compressor's :class:`CodecProfile` by name (each compressor module
    carries its own, ``Compressor.codec_profile``, with the derivation of its counts);
    compressors priced otherwise (powersgd: :func:`powersgd_time_s`) have none."""
    from vgcsim.traces.compression.compressors import COMPRESSORS

    return {name: cls.codec_profile for name, cls in COMPRESSORS.items() if cls.codec_profile}


def __getattr__(name: str) -> object:
    # CODEC_PROFILES: the registry's profiles, read when asked for (the registry is
    # imported on first use, not with this module)
    if name == "CODEC_PROFILES":
        return codec_profiles()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def codec_profile(compressor: str) -> CodecProfile:
    """The byte/launch profile of ``compressor`` (UnknownNameError lists the known ones)."""
    profiles = codec_profiles()
    try:
        return profiles[compressor]
    except KeyError:
        raise unknown_name("compressor (device codec model)", compressor, profiles) from None


def compress_time_s(
    compressor: str,
    numel: ArrayLike,
    sent: ArrayLike,
    payload_bytes: ArrayLike,
    layers: int,
    device: DeviceSpec,
) -> np.ndarray:
    """Compress + encode seconds of one rank's gradient on ``device``.

    Formula, with n elements, k sent, b payload bytes and L layers:
    ``T = ((c_n·n + c_k·k) + (e_k·k + b)) / (B_mem·e_mem) + L·(l_c + l_e)·t_launch`` with the
    per-element, per-sent and launch counts (c_n, c_k, l_c; e_k, l_e) of
    :data:`CODEC_PROFILES`.

    Source: bytes counted from the compressor's definition (see each profile's derivation);
    memory-bound roofline, :func:`stream_time_s`.
    """
    prof = codec_profile(compressor)
    n = np.asarray(numel, dtype=np.float64)
    k = np.asarray(sent, dtype=np.float64)
    b = np.asarray(payload_bytes, dtype=np.float64)
    moved = prof.compress_per_element * n + prof.compress_per_sent * k
    moved = moved + prof.encode_per_sent * k + b
    return stream_time_s(moved, layers * (prof.compress_launches + prof.encode_launches), device)


def decode_bytes(compressor: str, numel: ArrayLike, sent: ArrayLike, payload_bytes: ArrayLike):
    """Bytes touched decoding one received payload (n elements, k sent, b payload bytes):
    ``b + d_n·n + d_k·k``."""
    prof = codec_profile(compressor)
    return (
        np.asarray(payload_bytes, dtype=np.float64)
        + prof.decode_per_element * np.asarray(numel, dtype=np.float64)
        + prof.decode_per_sent * np.asarray(sent, dtype=np.float64)
    )


def decode_time_s(
    compressor: str, received_bytes: ArrayLike, layers: int, device: DeviceSpec
) -> np.ndarray:
    """Decode + accumulate seconds of the P − 1 payloads a rank receives, on ``device``.

    Formula: ``T = Σ_{i≠j} (b_i + d_n·n_i + d_k·k_i) / (B_mem·e_mem) + L·l_d·t_launch``
    (``received_bytes`` is the sum, from :func:`decode_bytes`); the launches do not grow
    with P (one kernel per layer decodes every received payload of that layer).

    Source: as :func:`compress_time_s`.
    """
    prof = codec_profile(compressor)
    return stream_time_s(received_bytes, layers * prof.decode_launches, device)


#: Bytes per element of the dense 2-byte encodings.
DENSE_ENCODING_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}

#: A cast between fp32 and a 2-byte float reads one and writes the other: 4 + 2 bytes.
CAST_BYTES_PER_ELEMENT = 6.0


def cast_time_s(numel: float, launches: int, device: DeviceSpec) -> float:
    """Seconds of one fp32 ↔ bf16/fp16 cast of ``numel`` elements (one kernel per bucket).

    Formula: ``T = 6·n / (B_mem·e_mem) + launches·t_launch`` (read 4 B + write 2 B per element,
    or read 2 B + write 4 B on the way back, where the division by P of PyTorch's bf16
    compress hook is fused into the cast).

    Source: PyTorch's ``bf16_compress_hook`` / ``fp16_compress_hook``
    (torch/distributed/algorithms/ddp_comm_hooks/default_hooks.py) cast each bucket before the
    allreduce and back after it; memory-bound roofline, :func:`stream_time_s`.
    """
    if numel < 0 or launches < 0:
        raise ConfigError("cast size and launches must be non-negative")
    return float(stream_time_s(CAST_BYTES_PER_ELEMENT * numel, launches, device))


#: Bytes per parameter of one optimizer step (fp32 state): what the update reads and writes.
OPTIMIZER_BYTES_PER_PARAM = {
    # read p, g, m, v (16 B), write p, m, v (12 B): D. Kingma and J. Ba, "Adam", ICLR 2015
    "adam": 28.0,
    "adamw": 28.0,
    # read p, g, momentum buffer (12 B), write p and the buffer (8 B)
    "momentum_sgd": 20.0,
    # read p, g (8 B), write p (4 B)
    "sgd": 12.0,
}


def optimizer_time_s(
    name: str, momentum: float, params: float, layers: int, device: DeviceSpec
) -> float:
    """Seconds of one optimizer step over ``params`` fp32 parameters in ``layers`` tensors.

    Formula: ``T = β_opt·N / (B_mem·e_mem) + L·t_launch`` with β_opt from
    :data:`OPTIMIZER_BYTES_PER_PARAM` (Adam 28 B, SGD with momentum 20 B, plain SGD 12 B) and
    one fused update kernel per parameter tensor.

    Assumptions: the update is memory-bound (a few FLOPs per 28 bytes); fp32 state; a fused
    per-tensor kernel (PyTorch's ``fused=True`` / ``foreach`` implementations launch fewer,
    so L launches is an upper bound).

    Source: the update rules of Kingma & Ba 2015 (Adam) and Polyak momentum SGD; memory-bound
    roofline, :func:`stream_time_s`.
    """
    key = str(name).lower()
    if key == "sgd" and momentum:
        key = "momentum_sgd"
    if key not in OPTIMIZER_BYTES_PER_PARAM:
        raise unknown_name("optimizer (device model)", str(name), OPTIMIZER_BYTES_PER_PARAM)
    if not (params >= 0 and math.isfinite(params)):
        raise ConfigError("parameter count must be a finite number >= 0")
    return float(stream_time_s(OPTIMIZER_BYTES_PER_PARAM[key] * params, layers, device))


#: PowerSGD's bytes per gradient element of a compressed tensor (fp32): error feedback
#: M ← g + e (read g, e, write M: 12 B), the copy kept for the error (8 B), M read by M·Q and
#: by Mᵀ·P (8 B), P·Qᵀ written (4 B), e ← copy − result (read 2, write 1: 12 B) = 44 B.
POWERSGD_BYTES_PER_ELEMENT = 44.0
#: ... of a tensor sent plain: error feedback (12 B), the copy (8 B), the allreduced buffer's
#: division by W and copy back (8 B), the error (12 B) = 40 B.
POWERSGD_PLAIN_BYTES_PER_ELEMENT = 40.0


def powersgd_time_s(
    numel: ArrayLike, p_elements: ArrayLike, q_elements: ArrayLike, device: DeviceSpec
) -> np.ndarray:
    """One rank's local PowerSGD work per step (matmuls, orthogonalization, error feedback)
    on ``device``, from per-layer arrays ``[..., L]`` (``p_elements`` = n·r', ``q_elements``
    = m·r', both 0 for a tensor sent plain).

    Formula, per compressed tensor of N = n·m elements at rank r' = √(p·q / N):
    FLOPs ``F = 3 · 2·N·r'`` (P = M Q, Q = Mᵀ P, M̂ = P Qᵀ) and bytes
    ``B = 44·N + 4·(p + q)·(3 + 3·r')`` (the per-element passes of
    :data:`POWERSGD_BYTES_PER_ELEMENT`, the products' reads and writes of P and Q, and
    Gram-Schmidt over P and Q: per column a norm, a division and a projection of the later
    columns); per plain tensor ``B = 40·N``. Launches: ``5 + 6·r'`` per compressed tensor
    (error feedback, copy, three matmuls, 3 kernels per column of P and of Q), 2 per plain
    tensor plus 3 for the plain buffer (concatenate, divide, copy back).
    ``T = max(ΣF / (peak·efficiency), ΣB / (B_mem·e_mem)) + launches · t_launch``: the
    roofline's larger bound (r' is small, so the passes, not the FLOPs, usually set it).

    Source: the algorithm of T. Vogels, S. P. Karimireddy and M. Jaggi, "PowerSGD", NeurIPS
    2019 (Algorithm 1), in the order torch's ``powerSGD_hook`` runs it; roofline of Williams,
    Waterman & Patterson, CACM 2009.
    """
    n = np.asarray(numel, dtype=np.float64)
    p = np.asarray(p_elements, dtype=np.float64)
    q = np.asarray(q_elements, dtype=np.float64)
    comp = (p > 0) & (q > 0)
    r = np.where(comp, np.sqrt(np.where(comp, p * q, 0.0) / np.maximum(n, 1.0)), 0.0)
    flops = (6.0 * n * r).sum(axis=-1)
    moved = np.where(
        comp,
        POWERSGD_BYTES_PER_ELEMENT * n + 4.0 * (p + q) * (3.0 + 3.0 * r),
        POWERSGD_PLAIN_BYTES_PER_ELEMENT * n,
    ).sum(axis=-1)
    launches = np.where(comp, 5.0 + 6.0 * r, 2.0).sum(axis=-1) + 3.0
    return np.maximum(flops / device.effective_flops, moved / device.sustained_memory_Bps) + (
        launches * device.launch_s
    )


def sparse_result_time_s(union_elements: ArrayLike, layers: int, device: DeviceSpec) -> np.ndarray:
    """Seconds to apply a sparse allreduce's result: scatter its index-value pairs into the
    dense fp32 gradient on ``device``.

    Formula: ``T = 16·U / (B_mem·e_mem) + 2·L·t_launch`` with U the result's pairs (the union
    of the P index sets): read index + value (8 B), read + write the gradient element (8 B);
    2 kernels per layer (unpack, scatter), as the sparse decode of :data:`CODEC_PROFILES`.
    The reductions inside the collective are its γ term, not counted here.

    Source: memory-bound roofline, :func:`stream_time_s`.
    """
    return stream_time_s(16.0 * np.asarray(union_elements, dtype=np.float64), 2 * layers, device)
