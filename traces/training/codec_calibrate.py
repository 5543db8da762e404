"""``vgcsim calibrate --codec``: measure a device's streaming bandwidth and launch overhead with
real torch kernels, and write them as the ``[device]`` entry of a cluster file.

The device cost model (:mod:`vgcsim.traces.devicecost`) prices compression, decoding, casts and the
optimizer step as ``bytes / (memory_bandwidth × memory_efficiency) + launches × launch_overhead``.
This module measures the two figures on the device that will run them:

* **memory bandwidth**: ``torch.add(x, y, out=z)`` on three fp32 buffers of ``size_bytes`` each
  (reads 2, writes 1: 3 × size_bytes moved), the median of ``repeats`` timed calls after
  ``warmup`` untimed ones; written as ``memory_bandwidth_Bps`` with ``memory_efficiency = 1``
  (a measured sustained rate has nothing left to discount);
* **launch overhead**: ``launches`` back-to-back in-place adds on a one-element tensor, divided
  by their count (on a GPU the kernel launch and driver cost; on a CPU the framework's per-op
  dispatch cost), median over ``repeats`` rounds;
* **a check**: an fp32 → bf16 cast of ``size_bytes / 4`` elements, measured and predicted by
  the model from the two figures above (6 bytes per element + 1 launch), so the file says how
  well the linear model carries over to a real codec-like kernel.

On CUDA every timing is bracketed by ``torch.cuda.synchronize()``. Runs on the CPU as well
(``device="cpu"``): there it measures this machine's memory system through PyTorch's CPU
kernels, with the threads torch is allowed to use.
"""

from __future__ import annotations

import json
import math
import re
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from vgcsim.core.errors import ConfigError

__all__ = ["CodecCalibration", "measure_device", "resolve_device", "write_device_entry"]


@dataclass(frozen=True)
class CodecCalibration:
    """What :func:`measure_device` measured (SI units)."""

    device: str  # "cpu" or "cuda"
    device_name: str  # e.g. "NVIDIA H100 80GB HBM3" or the CPU's processor string
    memory_bandwidth_Bps: float
    launch_overhead_s: float
    cast_measured_s: float
    cast_predicted_s: float
    size_bytes: int
    repeats: int
    threads: int
    torch_version: str

    @property
    def cast_error(self) -> float:
        """Predicted / measured − 1 of the cast check."""
        return self.cast_predicted_s / self.cast_measured_s - 1.0


def resolve_device(name: str) -> str:
    """``cpu`` | ``cuda`` | ``auto`` (cuda when torch sees a GPU) → ``cpu`` or ``cuda``."""
    import torch

    if name not in ("cpu", "cuda", "auto"):
        raise ConfigError(f"--codec-device must be cpu, cuda or auto, got {name!r}")
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--codec-device cuda: torch sees no CUDA device here (try cpu or auto)")
    return name


def _timer(device: str) -> Callable[[Callable[[], None]], float]:
    import torch

    def run(fn: Callable[[], None]) -> float:
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - t0

    return run


def _processor_name(device: str) -> str:
    import platform

    import torch

    if device == "cuda":
        return str(torch.cuda.get_device_name(0))
    return platform.processor() or platform.machine() or "cpu"


def measure_device(
    device: str = "cpu",
    *,
    size_bytes: int = 64 * 2**20,
    repeats: int = 10,
    warmup: int = 2,
    launches: int = 2000,
) -> CodecCalibration:
    """Measure streaming bandwidth, launch overhead and the cast check on ``device``."""
    import torch

    if size_bytes < 4096 or repeats < 1 or warmup < 0 or launches < 1:
        raise ConfigError(
            "codec calibration needs size >= 4 KiB, repeats >= 1, warmup >= 0, launches >= 1"
        )
    dev = resolve_device(device)
    timed = _timer(dev)
    n = size_bytes // 4
    x = torch.rand(n, device=dev)
    y = torch.rand(n, device=dev)
    z = torch.empty(n, device=dev)
    half = torch.empty(n, device=dev, dtype=torch.bfloat16)
    tiny = torch.zeros(1, device=dev)

    def add() -> None:
        torch.add(x, y, out=z)

    def cast() -> None:
        half.copy_(x)

    def many() -> None:
        for _ in range(launches):
            tiny.add_(1.0)

    def median(fn: Callable[[], None]) -> float:
        for _ in range(warmup):
            timed(fn)
        return statistics.median(timed(fn) for _ in range(repeats))

    add_s = median(add)
    launch_s = median(many) / launches
    cast_s = median(cast)
    # the add moves 3 × size_bytes; take its launch out before dividing
    bandwidth = 3 * n * 4 / max(add_s - launch_s, 1e-12)
    predicted = 6 * n / bandwidth + launch_s
    return CodecCalibration(
        device=dev,
        device_name=_processor_name(dev),
        memory_bandwidth_Bps=float(bandwidth),
        launch_overhead_s=float(launch_s),
        cast_measured_s=float(cast_s),
        cast_predicted_s=float(predicted),
        size_bytes=int(n * 4),
        repeats=int(repeats),
        threads=int(torch.get_num_threads()),
        torch_version=str(torch.__version__),
    )


_TABLE = re.compile(r"^\s*\[")


def _strip_device(text: str) -> str:
    """``text`` without its top-level ``device = ...`` line and its ``[device]`` table."""
    out: list[str] = []
    in_device = False
    in_tables = False
    for line in text.splitlines():
        stripped = line.strip()
        if _TABLE.match(line):
            in_tables = True
            in_device = stripped == "[device]"
            if in_device:
                continue
        if in_device:
            continue
        if not in_tables and re.match(r"^device\s*=", stripped):
            continue
        out.append(line)
    return "\n".join(out).rstrip() + "\n"


def _toml(value: object) -> str:
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ConfigError(f"cannot write non-finite number {value} to a cluster file")
        return repr(value)
    return json.dumps(str(value))


def write_device_entry(
    path: Path, cal: CodecCalibration, *, preset: str, name: str | None = None
) -> Path:
    """Write ``cal`` as the ``[device]`` table of the cluster file ``path``: replace the device
    of an existing file (keeping everything else), or start a new one on the 10GbE preset.
    ``preset`` supplies the device's peak FLOP/s and compute efficiency."""
    from vgcsim.core.cluster import get_device, load_cluster

    base = get_device(preset)
    label = name or f"{base.name}-measured"
    source = (
        f"vgcsim calibrate --codec on {cal.device} ({cal.device_name}), torch "
        f"{cal.torch_version}, {cal.threads} threads: streaming add of 3 x "
        f"{cal.size_bytes} B, median of {cal.repeats}; launch = back-to-back 1-element "
        f"adds; cast check predicted/measured - 1 = {cal.cast_error:+.1%}; peak FLOP/s "
        f"and efficiency from the {base.name} preset"
    )
    table = [
        "[device]",
        f"preset = {_toml(base.name)}",
        f"name = {_toml(label)}",
        f"memory_bandwidth_Bps = {_toml(cal.memory_bandwidth_Bps)}",
        "memory_efficiency = 1.0",
        f"launch_overhead_s = {_toml(cal.launch_overhead_s)}",
        f"source = {_toml(source)}",
        "",
    ]
    if path.is_file():
        head = _strip_device(path.read_text(encoding="utf-8"))
    else:
        head = f'# Written by vgcsim calibrate --codec.\nname = {_toml(label)}\nbase = "10GbE"\n'
    text = head + "\n" + "\n".join(table)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    try:
        load_cluster(tmp)  # what we write must read back
    except Exception:
        tmp.unlink(missing_ok=True)
        raise
    tmp.replace(path)
    return path


def summary(cal: CodecCalibration) -> str:
    """A few lines for the terminal."""
    d = asdict(cal)
    return (
        f"device {d['device']} ({d['device_name']}), torch {d['torch_version']}, "
        f"{d['threads']} threads\n"
        f"  memory bandwidth  {cal.memory_bandwidth_Bps / 1e9:.3g} GB/s (streaming add, "
        f"{cal.size_bytes / 2**20:.0f} MiB buffers)\n"
        f"  launch overhead   {cal.launch_overhead_s * 1e6:.3g} us per op\n"
        f"  cast check        measured {cal.cast_measured_s * 1e3:.4g} ms, model "
        f"{cal.cast_predicted_s * 1e3:.4g} ms ({cal.cast_error:+.1%})"
    )
